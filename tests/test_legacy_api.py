"""DeepGEMM's v1 names (finegemm.api.legacy) on CPU tensors: each gives what its finegemm function
gives on the same inputs (both run the exact reference on CPU), the weight-gradient names
accumulate into out, and argument errors name the legacy function, its target and the argument
map. Inputs are exact in fp64 (few-bit fp8 values, power-of-two scales), so equality is exact."""
from __future__ import annotations

import pytest
import torch

import finegemm
from finegemm import reference

from test_api_cpu import _seed  # noqa: F401  (autouse: a fixed seed per test)
from test_api_cpu import rand_fp8 as fp8
from test_api_cpu import rand_sf as sf


def test_exported_at_top_level():
    for name in finegemm.api.legacy.__all__:
        assert getattr(finegemm, name) is getattr(finegemm.api.legacy, name)
        assert name in finegemm.__all__


def test_gemm_fp8_fp8_bf16_nt():
    M, N, K = 33, 200, 384
    lhs, rhs = (fp8(M, K), sf(M, 3)), (fp8(N, K), sf(2, 3))
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    assert torch.equal(out, reference.fp8_gemm_nt(*lhs, *rhs, out_dtype=torch.bfloat16))


def test_wgrad_accumulates_into_out():
    M, N, K = 24, 136, 256
    lhs, rhs = (fp8(M, K), sf(M, 2)), (fp8(N, K), sf(N, 2))
    start = torch.randn(M, N)
    out = start.clone()
    finegemm.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out)
    want = reference.fp8_gemm_nt(*lhs, *rhs, c=start, out_dtype=torch.float32, recipe=(1, 1, 128))
    assert torch.equal(out, want)
    assert not torch.equal(out, start)


def test_m_grouped_contiguous_and_masked():
    G, N, K = 3, 144, 256
    rows = [128, 0, 256]
    M = sum(rows) + 128  # one padding block at the end
    ids = torch.cat([torch.full((r,), g, dtype=torch.int32) for g, r in enumerate(rows)]
                    + [torch.full((128,), -1, dtype=torch.int32)])
    lhs, rhs = (fp8(M, K), sf(M, 2)), (fp8(G, N, K), sf(G, 2, 2))
    out, want = (torch.full((M, N), float("nan"), dtype=torch.bfloat16) for _ in range(2))
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, ids)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, want, ids)
    assert torch.equal(out, want) and not torch.isnan(out).any()

    m_max = 64
    lhs = (fp8(G, m_max, K), sf(G, m_max, 2))
    masked = torch.tensor([64, 0, 17], dtype=torch.int32)
    out, want = (torch.full((G, m_max, N), 5.0, dtype=torch.bfloat16) for _ in range(2))
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked, 32)
    finegemm.m_grouped_fp8_gemm_nt_masked(lhs, rhs, want, masked, 32)
    assert torch.equal(out, want)


def test_k_grouped_wgrad_accumulates():
    M, N, ks = 16, 136, [256, 0, 128]
    s = sum(ks)
    lhs, rhs = (fp8(M * s), sf(s // 128, M)), (fp8(N * s), sf(s // 128, N))
    start = torch.randn(len(ks), M, N)
    out = start.clone()
    finegemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out, ks)
    want = start.clone()
    finegemm.k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, want, ks, torch.tensor(ks, dtype=torch.int32), c=start)
    assert torch.equal(out, want)
    assert torch.equal(out[1], start[1])  # k_g = 0: out_g unchanged


@pytest.mark.parametrize("bad,exc", [([128, 128.0, 0], TypeError), ([128, True, 0], TypeError),
                                     ([128, -128, 0], ValueError), ([128, 2**31, 0], ValueError)])
def test_k_grouped_wgrad_batch_sizes_checked_before_the_copy(bad, exc):
    """A wrong type is a TypeError and a value out of range a ValueError, as
    k_grouped_fp8_gemm_nt_contiguous raises for its ks (the API fuzz compares the two names)."""
    out = torch.zeros(3, 16, 128)
    with pytest.raises(exc, match=r"k_grouped_wgrad_gemm_fp8_fp8_fp32_nt .*batch_sizes\[1\]"):
        finegemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((fp8(0), sf(0, 16)), (fp8(0), sf(0, 128)), out, bad)
    with pytest.raises(TypeError, match="batch_sizes must be a list or tuple"):
        finegemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((fp8(0), sf(0, 16)), (fp8(0), sf(0, 128)), out,
                                                      torch.tensor([128]))


def test_errors_name_the_legacy_function_and_the_argument_map():
    lhs, rhs = (fp8(8, 128), sf(8, 1)), (fp8(16, 128), sf(1, 1))
    out = torch.empty(8, 16, dtype=torch.float16)  # fp16 D: not allowed
    with pytest.raises((ValueError, TypeError)) as info:
        finegemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    msg = str(info.value)
    assert msg.startswith("gemm_fp8_fp8_bf16_nt (DeepGEMM v1 name of fp8_gemm_nt; lhs -> a, rhs -> b, out -> d)")
    assert "fp8_gemm_nt" in msg and " d" in msg
    with pytest.raises(TypeError, match=r"wgrad_gemm_fp8_fp8_fp32_nt .*d must be torch.float32 with recipe \(1, 1, 128\)"):
        finegemm.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, torch.empty(8, 16, dtype=torch.bfloat16))


def test_layout_helpers_under_their_v1_names():
    x = torch.randn(6, 3)
    assert torch.equal(finegemm.get_col_major_tma_aligned_tensor(x), finegemm.get_mn_major_tma_aligned_tensor(x))
    assert finegemm.get_col_major_tma_aligned_tensor(x).stride() == finegemm.get_mn_major_tma_aligned_tensor(x).stride()
    assert finegemm.get_m_alignment_for_contiguous_layout() == finegemm.get_mk_alignment_for_contiguous_layout()
