"""CPU tests of the nn m-grouped contiguous GEMMs (B stored [G, K, N], the MoE backward pass):
m_grouped_bf16_gemm_nn_contiguous and m_grouped_fp8_gemm_nn_contiguous, and DeepGEMM's
contiguous-layout flags (ensure_zero_padding, expected_m_for_psum_layout) on every contiguous
function. On CPU tensors each runs the exact reference, so nn must equal nt on the transposed B
bit for bit; the GPU kernels are compared with nt in tests/gpu/test_bf16_grouped_gpu.py.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import finegemm
from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8

BF16 = torch.bfloat16


def _layout(sizes):
    """Plain contiguous layout: group g's rows, each run padded to 128 rows with -1."""
    ids = []
    for g, m in enumerate(sizes):
        ids += [g] * m + [-1] * (-m % 128)
    return torch.tensor(ids or [-1] * 128, dtype=torch.int32)


def _psum(sizes):
    ends, row = [], 0
    for m in sizes:
        row = -(-row // 128) * 128 + m
        ends.append(row)
    return torch.tensor(ends, dtype=torch.int32), max(-(-row // 128) * 128, 128)


@pytest.mark.parametrize("use_psum", [False, True])
def test_bf16_nn_equals_nt_on_the_transposed_b(use_psum):
    torch.manual_seed(0)
    sizes, k, n = [100, 0, 256, 7], 72, 136
    if use_psum:
        layout, m = _psum(sizes)
    else:
        layout = _layout(sizes)
        m = layout.numel()
    a = torch.randn(m, k).to(BF16)
    b = torch.randn(len(sizes), n, k).to(BF16)
    d_nt = torch.full((m, n), float("nan"), dtype=BF16)
    d_nn = torch.full((m, n), float("nan"), dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d_nt, layout, use_psum_layout=use_psum)
    # nn from a strided [G, K, N] view (padded rows), as a training framework's weight slice may be.
    buf = torch.full((len(sizes), k, n + 8), float("nan"), dtype=BF16)
    b_kn = buf[:, :, :n]
    b_kn.copy_(b.transpose(1, 2))
    finegemm.m_grouped_bf16_gemm_nn_contiguous(a, b_kn, d_nn, layout, use_psum_layout=use_psum)
    assert not torch.isnan(d_nn).any()
    assert torch.equal(d_nn.view(torch.int16), d_nt.view(torch.int16))
    ref = torch.zeros(m, n)
    ids = finegemm.reference._common.group_ids_from_layout(layout, m, len(sizes), use_psum)
    for g in range(len(sizes)):
        rows = ids == g
        ref[rows] = a[rows].float() @ b[g].float().t()
    assert finegemm.testing.calc_diff(d_nn.float(), ref) < 1e-5


def test_fp8_nn_equals_nt_on_the_transposed_b():
    torch.manual_seed(1)
    sizes, k, n = [128, 0, 200], 384, 256
    layout = _layout(sizes)
    m = layout.numel()
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k))
    parts = [per_block_cast_to_fp8(torch.randn(n, k)) for _ in sizes]
    b = torch.stack([p[0] for p in parts])
    sfb = torch.stack([p[1] for p in parts])  # [G, ceil(N/128), ceil(K/128)] = [3, 2, 3]: not square
    d_nt = torch.empty(m, n, dtype=BF16)
    d_nn = torch.empty(m, n, dtype=BF16)
    finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d_nt, layout)
    finegemm.m_grouped_fp8_gemm_nn_contiguous((a, sfa), (b.transpose(1, 2).contiguous(), sfb.transpose(1, 2)), d_nn,
                                              layout)
    assert torch.equal(d_nn.view(torch.int16), d_nt.view(torch.int16))
    # The nt scale layout given to nn is the wrong shape, and says which one it wants.
    with pytest.raises(ValueError, match=r"sfb.*\[G, ceil\(K/128\), ceil\(N/128\)\]"):
        finegemm.m_grouped_fp8_gemm_nn_contiguous((a, sfa), (b.transpose(1, 2).contiguous(), sfb), d_nn, layout)


def test_nn_validation_names_the_argument_and_rule():
    a = torch.randn(128, 64).to(BF16)
    b_kn = torch.randn(2, 64, 96).to(BF16)
    d = torch.empty(128, 96, dtype=BF16)
    layout = torch.zeros(128, dtype=torch.int32)
    f = finegemm.m_grouped_bf16_gemm_nn_contiguous
    with pytest.raises(ValueError, match=r"K of a .* and b \(\[G, K, N\]"):
        f(a, torch.randn(2, 96, 64).to(BF16), d, layout)  # the nt storage
    with pytest.raises(ValueError, match=r"b must be a 3-D tensor \[G, K, N\]"):
        f(a, b_kn[0], d, layout)
    with pytest.raises(TypeError, match="b must have dtype|b .*bfloat16"):
        f(a, b_kn.float(), d, layout)
    with pytest.raises(ValueError, match=r"b \[G, K, N\] must have a contiguous last dimension"):
        f(a, torch.randn(2, 96, 64).to(BF16).transpose(1, 2), d, layout)  # [G, K, N] view of nt storage
    with pytest.raises(ValueError, match="group id"):
        f(a, b_kn, d, torch.full((128,), 2, dtype=torch.int32))  # group 2 of G = 2
    f(a, b_kn, d, layout)  # the valid call


@pytest.mark.parametrize("fn", ["m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous",
                                "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous"])
def test_contiguous_flags_are_checked(fn):
    torch.manual_seed(2)
    layout = torch.zeros(128, dtype=torch.int32)
    d = torch.empty(128, 128, dtype=BF16)
    if "fp8" in fn:
        a = per_token_cast_to_fp8(torch.randn(128, 128))
        b, sfb = per_block_cast_to_fp8(torch.randn(128, 128))
        b = (b[None], sfb[None])
    else:
        a = torch.randn(128, 128).to(BF16)
        b = torch.randn(1, 128, 128).to(BF16)
    f = getattr(finegemm, fn)
    with pytest.raises(TypeError, match="ensure_zero_padding must be a bool"):
        f(a, b, d, layout, ensure_zero_padding=1)
    with pytest.raises(TypeError, match="use_psum_layout must be a bool"):
        f(a, b, d, layout, use_psum_layout="no")
    with pytest.raises(ValueError, match="compiled_dims"):
        f(a, b, d, layout, compiled_dims="nx")
    f(a, b, d, layout, ensure_zero_padding=False)  # padding rows are zeros either way
    if "_nt_" in fn:  # DeepGEMM's nt functions take the psum planning hint; its nn ones do not
        with pytest.raises(ValueError, match="only meaningful with use_psum_layout=True"):
            f(a, b, d, layout, expected_m_for_psum_layout=64)
        with pytest.raises(ValueError, match="expected_m_for_psum_layout must be >= 0"):
            f(a, b, d, torch.tensor([100], dtype=torch.int32), use_psum_layout=True, expected_m_for_psum_layout=-1)
        f(a, b, d, torch.tensor([100], dtype=torch.int32), use_psum_layout=True, expected_m_for_psum_layout=100)
    else:
        assert "expected_m_for_psum_layout" not in inspect.signature(f).parameters


def test_deepgemm_argument_order_and_defaults():
    """Positional order and defaults of DeepGEMM's bindings (deep_gemm 2.x, csrc/apis/gemm.hpp)."""
    def params(fn):
        return [(p.name, p.default) for p in inspect.signature(getattr(finegemm, fn)).parameters.values()]

    e = inspect.Parameter.empty
    assert params("m_grouped_bf16_gemm_nt_contiguous") == [
        ("a", e), ("b", e), ("d", e), ("grouped_layout", e), ("compiled_dims", "nk"), ("use_psum_layout", False),
        ("ensure_zero_padding", True), ("expected_m_for_psum_layout", None)]
    assert params("m_grouped_bf16_gemm_nn_contiguous") == [
        ("a", e), ("b", e), ("d", e), ("grouped_layout", e), ("compiled_dims", "nk"), ("use_psum_layout", False),
        ("ensure_zero_padding", True)]
    fp8_nn = params("m_grouped_fp8_gemm_nn_contiguous")
    assert fp8_nn[:4] == [("a", e), ("b", e), ("d", e), ("grouped_layout", e)]
    assert ("ensure_zero_padding", True) in fp8_nn and ("use_psum_layout", False) in fp8_nn
