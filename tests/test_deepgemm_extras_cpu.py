"""DeepGEMM's other entry points on CPU tensors: fp8_gemm_nt_skip_head_mid, einsum, cublaslt_gemm_*,
set_block_size_multiple_of and get_theoretical_mk_alignment_for_contiguous_layout.

CPU calls run the exact path (float64); the CUDA path's composition (cuBLAS through PyTorch for
einsum and cublaslt) is run here too, on CPU tensors routed as CUDA ones, where PyTorch has no fp32
out_dtype and widens instead (the values a CUDA call gets, up to the fp32 summation order).
"""
from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import reference  # noqa: E402
from finegemm.api import _validate as _v  # noqa: E402
from finegemm.api.einsum import SUPPORTED_EXPRESSIONS  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32


def _fp8_operands(m, n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = finegemm.per_token_cast_to_fp8(torch.randn(m, k, generator=g))
    b = finegemm.per_block_cast_to_fp8(torch.randn(n, k, generator=g))
    return a, b


def _poisoned(shape, dtype, pad_cols=0):
    """A NaN-filled buffer and a view of `shape` inside it (rows padded by at least pad_cols, to a
    16-byte pitch)."""
    per_16 = 16 // torch.tensor([], dtype=dtype).element_size()
    buf = torch.full((shape[0], -(-(shape[1] + pad_cols) // per_16) * per_16), float("nan"), dtype=dtype)
    return buf, buf[:, : shape[1]]


# ----------------------------------------------------------------------------- skip head mid
@pytest.mark.parametrize("splits", [(32, 16, 48), (128, 64, 128), (64, 0, 64), (0, 16, 80), (48, 32, 0), (3, 5, 2)])
@pytest.mark.parametrize("m,heads,dtype,pad", [(17, 3, BF16, 8), (1, 2, F32, 4), (64, 1, BF16, 0)])
def test_skip_head_mid_places_each_head_around_the_gap(splits, m, heads, dtype, pad):
    left, mid, right = splits
    n, k = heads * (left + right), 256
    a, b = _fp8_operands(m, n, k, seed=m + n)
    buf, d = _poisoned((m, n + heads * mid), dtype, pad)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, splits)
    want = reference.fp8_gemm_nt(a[0], a[1], b[0], b[1], out_dtype=dtype).view(m, heads, left + right)
    got = d.view(m, heads, left + mid + right)
    assert torch.equal(got[:, :, :left], want[:, :, :left])
    assert torch.equal(got[:, :, left + mid:], want[:, :, left:])
    assert torch.isnan(got[:, :, left:left + mid]).all()  # the gap is never written
    assert torch.isnan(buf[:, n + heads * mid:]).all()  # nor the row padding


def test_skip_head_mid_empty_problems():
    a, b = _fp8_operands(0, 160, 128)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, torch.empty(0, 160 + 2 * 16, dtype=BF16), (32, 16, 48))
    a, b = _fp8_operands(5, 0, 128)
    d = torch.full((5, 0), 1.0, dtype=BF16)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, (32, 16, 48))


@pytest.mark.parametrize("change,kind,match", [
    ({"head_splits": (32, 16)}, TypeError, "head_splits must be a 3-tuple"),
    ({"head_splits": (32, 16.0, 48)}, TypeError, r"head_splits\[1\] must be an int"),
    ({"head_splits": (32, -1, 48)}, ValueError, r"head_splits\[1\] must be >= 0"),
    ({"head_splits": (0, 16, 0)}, ValueError, "left \\+ right > 0"),
    ({"head_splits": (32, 16, 40)}, ValueError, "must be a multiple of left \\+ right = 72"),
    ({"d_cols": -1}, ValueError, "d must have shape"),
    ({"d_dtype": torch.float16}, TypeError, "d must be"),
    ({"recipe": (1, 1, 128)}, ValueError, "recipe must be one of"),
    ({"sfa_cols": 1}, ValueError, r"a\[1\] \(sfa\) must have shape"),
    ({"k_bad": True}, ValueError, "K of a\\[0\\]"),
])
def test_skip_head_mid_bad_input_names_the_rule(change, kind, match):
    left, mid, right = 32, 16, 48
    heads, m, k = 2, 9, 256
    n = heads * (left + right)
    a, b = _fp8_operands(m, n, k)
    if change.get("sfa_cols"):
        a = (a[0], a[1][:, :1])
    if change.get("k_bad"):
        b = (b[0][:, :128].contiguous(), b[1][:, :1].contiguous())
    d = torch.zeros(m, n + heads * mid + change.get("d_cols", 0), dtype=change.get("d_dtype", BF16))
    kwargs = {"recipe": change["recipe"]} if "recipe" in change else {}
    with pytest.raises(kind, match=f"^fp8_gemm_nt_skip_head_mid: .*{match}"):
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, change.get("head_splits", (left, mid, right)), **kwargs)


def test_skip_head_mid_rejects_d_over_an_input():
    a, b = _fp8_operands(4, 160, 128)
    storage = torch.zeros(4 * 192 * 2 + 64, dtype=torch.uint8)
    d = storage[: 4 * 192 * 2].view(BF16).view(4, 192)
    alias_a = (storage[: 4 * 128].view(4, 128).view(torch.float8_e4m3fn), a[1])
    with pytest.raises(ValueError, match="^fp8_gemm_nt_skip_head_mid: d must not"):
        finegemm.fp8_gemm_nt_skip_head_mid(alias_a, b, d, (32, 16, 48))


# ----------------------------------------------------------------------------- einsum
_EINSUM_SHAPES = {  # expr -> (a shape, b shape)
    "bhr,hdr->bhd": ((5, 3, 64), (3, 40, 64)),
    "bhd,hdr->bhr": ((5, 3, 40), (3, 40, 24)),
    "bhd,bhr->hdr": ((6, 3, 40), (6, 3, 24)),
    "bmk,bnk->mn": ((4, 7, 32), (4, 9, 32)),
}


def _einsum_inputs(expr, seed=0):
    g = torch.Generator().manual_seed(seed)
    sa, sb = _EINSUM_SHAPES[expr]
    return torch.randn(sa, generator=g).to(BF16), torch.randn(sb, generator=g).to(BF16)


@pytest.mark.parametrize("expr", SUPPORTED_EXPRESSIONS)
@pytest.mark.parametrize("dtype,c_kind", [(BF16, None), (F32, None), (F32, "separate"), (F32, "d")])
def test_einsum_equals_the_float64_product(expr, dtype, c_kind):
    a, b = _einsum_inputs(expr)
    exact = torch.einsum(expr, a.double(), b.double())
    c = None
    if c_kind is not None:
        c = torch.randn(exact.shape, generator=torch.Generator().manual_seed(1))
        exact = exact + c.double()
    # d inside a larger buffer: its last dim padded, so a write past d would show.
    buf = torch.full((*exact.shape[:-1], exact.shape[-1] + 3), float("nan"), dtype=dtype)
    d = buf[..., : exact.shape[-1]]
    if c_kind == "d":
        d.copy_(c)
        c = d
    finegemm.einsum(expr, a, b, d, c=c)
    assert torch.equal(d, exact.to(dtype))
    assert torch.isnan(buf[..., exact.shape[-1]:]).all()


@pytest.mark.parametrize("expr", SUPPORTED_EXPRESSIONS)
def test_einsum_cuda_composition(monkeypatch, expr):
    """The CUDA path (fp32 products by cuBLAS, one rounding into d) on CPU tensors routed as CUDA."""
    monkeypatch.setattr(_v, "on_cuda", lambda t: True)
    a, b = _einsum_inputs(expr, seed=2)
    exact = torch.einsum(expr, a.double(), b.double())
    for dtype in (BF16, F32):
        d = torch.full(exact.shape, float("nan"), dtype=dtype)
        finegemm.einsum(expr, a, b, d)
        assert calc_diff(d, exact) < 1e-5
        c = torch.randn(exact.shape)
        d = c.clone()
        finegemm.einsum(expr, a, b, d, c=d)
        assert calc_diff(d, exact + c.double()) < 1e-5


def test_einsum_empty_dimensions():
    a, b = torch.zeros(0, 3, 64, dtype=BF16), torch.zeros(3, 40, 64, dtype=BF16)
    finegemm.einsum("bhr,hdr->bhd", a, b, torch.empty(0, 3, 40, dtype=BF16))
    a, b = torch.zeros(0, 3, 40, dtype=BF16), torch.zeros(0, 3, 24, dtype=BF16)
    c = torch.randn(3, 40, 24)
    d = torch.full((3, 40, 24), float("nan"))
    finegemm.einsum("bhd,bhr->hdr", a, b, d, c=c)  # K = b = 0: d = c
    assert torch.equal(d, c)


@pytest.mark.parametrize("call,kind,match", [
    (lambda a, b, d: finegemm.einsum("ij,jk->ik", a, b, d), ValueError, "expr must be one of"),
    (lambda a, b, d: finegemm.einsum(3, a, b, d), TypeError, "expr must be a str"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a.float(), b, d), TypeError, "a must be torch.bfloat16"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a, b[:, :, :32], d), ValueError, "dimension 'r' of a"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a, b, d[:, :, :8]), ValueError, r"d must have shape \[b, h, d\]"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a[0], b, d), ValueError, "a must be a 3-D tensor"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a, b, d, c=torch.zeros(d.shape)), TypeError,
     "d must be torch.float32 when c is given"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a, b, d.transpose(1, 2).contiguous().transpose(1, 2)),
     ValueError, "d must have a contiguous last dimension"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a, b, d, use_cublaslt=1), TypeError, "use_cublaslt"),
    (lambda a, b, d: finegemm.einsum("bhr,hdr->bhd", a, b, a.view(5, 3, 64)[:, :, :40]), ValueError,
     "d must not"),
])
def test_einsum_bad_input_names_the_rule(call, kind, match):
    a, b = _einsum_inputs("bhr,hdr->bhd")
    d = torch.zeros(5, 3, 40, dtype=BF16)
    with pytest.raises(kind, match=f"^einsum: .*{match}"):
        call(a, b, d)


# ----------------------------------------------------------------------------- cublaslt_gemm_*
@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
@pytest.mark.parametrize("routed_as_cuda", [False, True])
def test_cublaslt_gemm_every_layout(monkeypatch, layout, routed_as_cuda):
    if routed_as_cuda:
        monkeypatch.setattr(_v, "on_cuda", lambda t: True)
    g = torch.Generator().manual_seed(5)
    m, n, k = 17, 24, 64
    a = torch.randn(m, k, generator=g).to(BF16)
    b = torch.randn(n, k, generator=g).to(BF16)
    exact = a.double() @ b.double().T
    a_in = a if layout[0] == "n" else a.t().contiguous()
    b_in = b if layout[1] == "t" else b.t().contiguous()
    fn = getattr(finegemm, f"cublaslt_gemm_{layout}")
    for dtype in (BF16, F32):
        d = torch.full((m, n), float("nan"), dtype=dtype)
        fn(a_in, b_in, d)
        if routed_as_cuda:
            assert calc_diff(d, exact) < 1e-5
        else:
            assert torch.equal(d, exact.to(dtype))
    c = torch.randn(m, n, generator=g)
    d = c.clone()
    fn(a_in, b_in, d, c=d)
    assert calc_diff(d, exact + c.double()) < 1e-6


def test_cublaslt_gemm_bad_input_names_the_rule():
    a, b = torch.zeros(4, 64, dtype=BF16), torch.zeros(8, 64, dtype=BF16)
    with pytest.raises(TypeError, match="^cublaslt_gemm_nt: a must be torch.bfloat16"):
        finegemm.cublaslt_gemm_nt(a.float(), b, torch.zeros(4, 8, dtype=BF16))
    with pytest.raises(ValueError, match="^cublaslt_gemm_nn: K of a"):
        finegemm.cublaslt_gemm_nn(a, b, torch.zeros(4, 8, dtype=BF16))
    with pytest.raises(TypeError, match="^cublaslt_gemm_nt: d must be torch.float32 when c is given"):
        finegemm.cublaslt_gemm_nt(a, b, torch.zeros(4, 8, dtype=BF16), c=torch.zeros(4, 8))
    with pytest.raises(ValueError, match="^cublaslt_gemm_tt: d must have shape"):
        finegemm.cublaslt_gemm_tt(a.t(), b, torch.zeros(8, 4, dtype=BF16))


# ----------------------------------------------------------------------------- runtime knobs
def test_block_size_multiple_of_is_checked_and_kept():
    before = finegemm.get_block_size_multiple_of()
    try:
        finegemm.set_block_size_multiple_of(16)
        assert finegemm.get_block_size_multiple_of() == (16, 16)
        finegemm.set_block_size_multiple_of((16, 32))
        assert finegemm.get_block_size_multiple_of() == (16, 32)
        finegemm.set_block_size_multiple_of(8, 64)
        assert finegemm.get_block_size_multiple_of() == (8, 64)
        for bad, kind in (((1, 2, 3), TypeError), (0, ValueError), (2.0, TypeError), (True, TypeError)):
            with pytest.raises(kind, match="^set_block_size_multiple_of: "):
                finegemm.set_block_size_multiple_of(bad)
        assert finegemm.get_block_size_multiple_of() == (8, 64)  # a rejected call changes nothing
    finally:
        finegemm.set_block_size_multiple_of(before)


def test_theoretical_mk_alignment_is_one_the_kernels_take():
    assert finegemm.get_theoretical_mk_alignment_for_contiguous_layout() == 128
    assert finegemm.get_theoretical_mk_alignment_for_contiguous_layout(20) == 64
    assert finegemm.get_theoretical_mk_alignment_for_contiguous_layout(64, 256) == 64
    assert finegemm.get_theoretical_mk_alignment_for_contiguous_layout(expected_m=65) == 128
    before = finegemm.get_mk_alignment_for_contiguous_layout()
    try:
        for m in (None, 1, 64, 1000):
            finegemm.set_mk_alignment_for_contiguous_layout(
                finegemm.get_theoretical_mk_alignment_for_contiguous_layout(m))
    finally:
        finegemm.set_mk_alignment_for_contiguous_layout(before)
    with pytest.raises(ValueError, match="^get_theoretical_mk_alignment_for_contiguous_layout: expected_m"):
        finegemm.get_theoretical_mk_alignment_for_contiguous_layout(-1)
    with pytest.raises(TypeError, match="^get_theoretical_mk_alignment_for_contiguous_layout: num_groups"):
        finegemm.get_theoretical_mk_alignment_for_contiguous_layout(8, "x")


# ----------------------------------------------------------------------------- skip head mid: CUDA routing
class _Recorder:
    """Stands in for the ops layer's prepare / prepare_skip_head_mid: records the arguments and
    returns a call that records its launch (or None where `fused` says the fused launch does not apply)."""

    def __init__(self, fused=True):
        self.prepared, self.fused_prepared, self.launched = [], [], []
        self.fused = fused

    def prepare(self, a, sfa, b, sfb, d, c, recipe):
        self.prepared.append(d)
        return self._call(("plain", d))

    def prepare_skip_head_mid(self, a, sfa, b, sfb, d, splits):
        self.fused_prepared.append((d, splits))
        return self._call(("fused", d)) if self.fused else None

    def _call(self, what):
        rec = self

        class Call:
            cacheable = what[0] == "fused"  # (the dense calls here are never kept by this function)

            def __call__(self):
                rec.launched.append(what)

        return Call()


def _routed(monkeypatch, fused=True, validated=False):
    import importlib

    from finegemm.ops import sm90_fp8_gemm

    # Each scenario starts without kept calls (the fast path's keys are tensor addresses).
    monkeypatch.setattr(importlib.import_module("finegemm.api.skip_head_mid"), "_validated", _v.ValidatedCalls())
    rec = _Recorder(fused)
    monkeypatch.setattr(sm90_fp8_gemm, "prepare", rec.prepare)
    monkeypatch.setattr(sm90_fp8_gemm, "prepare_skip_head_mid", rec.prepare_skip_head_mid)
    monkeypatch.setattr(_v, "on_cuda", lambda t: True)
    monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
    if not validated:  # gated again (the state before its GPU suite passed)
        monkeypatch.setitem(_v.UNVALIDATED_ON_GPU, "fp8_skip_head_mid_fused", ("", "", ""))
    elif "fp8_skip_head_mid_fused" in _v.UNVALIDATED_ON_GPU:
        monkeypatch.delitem(_v.UNVALIDATED_ON_GPU, "fp8_skip_head_mid_fused")
    return rec


def test_skip_head_mid_routing_on_cuda(monkeypatch):
    """Gated (as before its GPU suite passed): the scratch-and-copy path, the fused launch never asked
    for. Validated (shipped): the fused launch writes d itself; where it does not apply, the scratch path again. mid == 0: one
    plain GEMM into d."""
    m, heads, (left, mid, right), k = 8, 2, (128, 64, 128), 256
    n = heads * (left + right)
    a, b = _fp8_operands(m, n, k)
    d = torch.zeros(m, n + heads * mid, dtype=BF16)

    rec = _routed(monkeypatch)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, (left, mid, right))
    assert not rec.fused_prepared and rec.launched == [("plain", rec.prepared[0])]
    assert rec.prepared[0].shape == (m, n) and rec.prepared[0].data_ptr() != d.data_ptr()  # the scratch

    rec = _routed(monkeypatch, validated=True)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, (left, mid, right))
    assert rec.fused_prepared == [(d, (left, mid, right))] and rec.launched == [("fused", d)]
    assert not rec.prepared

    rec = _routed(monkeypatch, fused=False, validated=True)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, (left, mid, right))
    assert rec.fused_prepared and rec.launched == [("plain", rec.prepared[0])]
    assert rec.prepared[0].shape == (m, n)

    rec = _routed(monkeypatch, validated=True)
    d0 = torch.zeros(m, n, dtype=BF16)
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d0, (left, 0, right))
    assert not rec.fused_prepared and rec.launched == [("plain", d0)]


def test_skip_head_mid_repeated_calls_keep_the_fused_launch(monkeypatch):
    """The host fast path: a repeated call (same tensors) runs the kept fused launch without asking
    the ops layer again; other tensors are validated and prepared anew; a call whose fused launch
    does not apply takes the scratch path every time."""
    m, heads, splits, k = 8, 2, (128, 64, 128), 256
    n = heads * 256
    a, b = _fp8_operands(m, n, k)
    d = torch.zeros(m, n + heads * 64, dtype=BF16)
    rec = _routed(monkeypatch, validated=True)
    for _ in range(3):
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, splits)
    assert len(rec.fused_prepared) == 1 and rec.launched == [("fused", d)] * 3
    d2 = d.clone()
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d2, splits)
    assert len(rec.fused_prepared) == 2 and rec.launched[-1] == ("fused", d2)
    with pytest.raises(ValueError, match="^fp8_gemm_nt_skip_head_mid: "):  # a kept key never skips a bad call
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d[:, :-8], splits)

    rec = _routed(monkeypatch, fused=False, validated=True)
    for _ in range(2):
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, splits)
    assert [w for w, _ in rec.launched] == ["plain", "plain"] and all(x.shape == (m, n) for x in rec.prepared)


def test_skip_head_mid_fused_is_shipped_validated(monkeypatch):
    """The fused epilogue passed its GPU suite (H200, 2026-12-05): not listed, so calls take it
    without FINEGEMM_ENABLE_UNVALIDATED."""
    monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
    assert "fp8_skip_head_mid_fused" not in _v.UNVALIDATED_ON_GPU and _v.gpu_validated("fp8_skip_head_mid_fused")


def test_head_split_config_only_where_the_epilogue_serves(monkeypatch):
    """ops.sm90_fp8_gemm._head_split_config: the plain plan with the splits, or None (split-K, no TMA
    store, a store box across a side)."""
    import dataclasses

    from finegemm.heuristics.sm90_fp8_gemm import select_config
    from finegemm.ops import sm90_fp8_gemm as ops

    plain = {}

    def fake_plan(m, n, k, out_fp32, has_c, device):
        return plain[(m, n, k)], 0

    monkeypatch.setattr(ops, "plan", fake_plan)
    monkeypatch.setattr(ops, "_head_split_plans", {})
    cfg = select_config(4096, 32768, 512, 132, False, False)  # a bn192 TMA-store tile: 64-column boxes
    plain[(4096, 32768, 512)] = cfg
    got = ops._head_split_config(4096, 32768, 512, (128, 64, 128), 0)
    assert got == dataclasses.replace(cfg, head_splits=(128, 64, 128))
    assert ops._head_split_config(4096, 32768, 512, (96, 64, 160), 0) is None  # 96 % 64
    plain[(1, 32768, 512)] = dataclasses.replace(cfg, m=1, num_splits=2, tma_store=False)
    assert ops._head_split_config(1, 32768, 512, (128, 64, 128), 0) is None


# ----------------------------------------------------------------------------- fp8_einsum
def _fp8_einsum_inputs(batch, heads, r, n, seed=0):
    """(A, sfa), (B, sfb) of "bhr,hdr->bhd" (per-token scales of A, per-block of each head's B)
    and the float64 product of their dequantized values (torch.einsum, not finegemm.reference)."""
    g = torch.Generator().manual_seed(seed)
    kb = -(-r // 128)
    if batch * heads * r:
        A, sfa = finegemm.per_token_cast_to_fp8(torch.randn(batch * heads, r, generator=g))
    else:
        A, sfa = torch.zeros(batch * heads, r).to(torch.float8_e4m3fn), torch.ones(batch * heads, kb)
    A, sfa = A.view(batch, heads, r), sfa.view(batch, heads, kb)
    if n * r:
        per_head = [finegemm.per_block_cast_to_fp8(torch.randn(n, r, generator=g)) for _ in range(heads)]
        B = torch.stack([p[0] for p in per_head])
        sfb = torch.stack([p[1] for p in per_head])
    else:
        B, sfb = torch.zeros(heads, n, r).to(torch.float8_e4m3fn), torch.ones(heads, -(-n // 128), kb)
    a_deq = A.double() * sfa.double().repeat_interleave(128, 2)[..., :r]
    b_deq = B.double() * sfb.double().repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)[..., :r]
    return (A, sfa), (B, sfb), torch.einsum("bhr,hdr->bhd", a_deq, b_deq)


def _poisoned_3d(shape, dtype, pad):
    """A view of `shape` inside a NaN buffer whose rows are `pad` elements longer."""
    buf = torch.full((*shape[:-1], shape[-1] + pad), float("nan"), dtype=dtype)
    return buf, buf[..., : shape[-1]]


@pytest.mark.parametrize("batch,heads,r,n", [(17, 3, 256, 136), (1, 1, 128, 8), (5, 4, 272, 64), (33, 2, 512, 128)])
@pytest.mark.parametrize("dtype,c_kind", [(BF16, None), (F32, None), (F32, "separate"), (F32, "alias")])
def test_fp8_einsum_equals_the_float64_product(batch, heads, r, n, dtype, c_kind):
    a, b, exact = _fp8_einsum_inputs(batch, heads, r, n, seed=batch + heads + n)
    # A strided (rows of a padded buffer: a view, as an engine's slice would be)
    a_buf = torch.zeros(batch, heads, r + 16, dtype=torch.uint8).view(torch.float8_e4m3fn)
    a_buf[..., :r] = a[0]
    a = (a_buf[..., :r], a[1])
    pad = 8 if dtype == BF16 else 4
    buf, d = _poisoned_3d(exact.shape, dtype, pad)
    c = None
    if c_kind == "separate":
        c = torch.randn(exact.shape)
        exact = exact + c.double()
    elif c_kind == "alias":
        d.copy_(torch.randn(exact.shape))
        exact = exact + d.double()
        c = d
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=c)
    assert not torch.isnan(d).any()  # every element written
    assert torch.isnan(buf[..., exact.shape[-1]:]).all()  # nothing past the rows
    assert calc_diff(d, exact) < 1e-5
    # Elementwise: the exact product rounded once (fp32 without c: exactly; bf16: within its ulp).
    if dtype == F32 and c is None:
        assert torch.equal(d, exact.to(F32))
    else:
        torch.testing.assert_close(d.double(), exact, rtol=1e-2 if dtype == BF16 else 1e-6, atol=1e-6)


def test_fp8_einsum_routes_bf16_to_one_masked_call_and_fp32_to_one_call_per_head(monkeypatch):
    """The composition the GPU runs: bf16 d is one masked grouped call over the heads (every
    group full, into a head-major scratch); fp32 d is one dense call per head, on views."""
    mod = importlib.import_module("finegemm.api.fp8_einsum")  # the module (finegemm.api.fp8_einsum is the function)
    calls = []
    monkeypatch.setattr(mod, "m_grouped_fp8_gemm_nt_masked",
                        lambda a, b, d, masked_m, expected_m: calls.append(("masked", a, b, d, masked_m, expected_m)))
    monkeypatch.setattr(mod, "fp8_gemm_nt", lambda a, b, d, c=None: calls.append(("dense", a, b, d, c)))
    batch, heads, r, n = 6, 5, 256, 64
    a, b, _ = _fp8_einsum_inputs(batch, heads, r, n)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, torch.zeros(batch, heads, n, dtype=BF16))
    assert len(calls) == 1 and calls[0][0] == "masked"
    _, (A, sfa), (B, sfb), scratch, masked_m, expected_m = calls[0]
    assert A.shape == (heads, batch, r) and A.data_ptr() == a[0].data_ptr()  # a view: the op copies
    assert sfa.shape == (heads, batch, 2) and B is b[0] and sfb is b[1]
    assert scratch.shape == (heads, batch, n) and scratch.is_contiguous()
    assert masked_m.dtype == torch.int32 and masked_m.tolist() == [batch] * heads and expected_m == batch
    calls.clear()
    d = torch.zeros(batch, heads, n)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=d)
    assert [x[0] for x in calls] == ["dense"] * heads
    for h, (_, (A_h, sfa_h), (B_h, sfb_h), d_h, c_h) in enumerate(calls):
        assert A_h.data_ptr() == a[0][:, h].data_ptr() and A_h.stride() == (heads * r, 1)
        assert torch.equal(sfa_h, a[1][:, h]) and torch.equal(sfb_h, b[1][h])
        assert torch.equal(B_h.view(torch.uint8), b[0][h].view(torch.uint8))
        assert d_h.data_ptr() == d[:, h].data_ptr() and c_h.data_ptr() == d_h.data_ptr()


def test_fp8_einsum_empty_dimensions():
    a, b, _ = _fp8_einsum_inputs(0, 3, 128, 16)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, torch.empty(0, 3, 16, dtype=BF16))
    a, b, _ = _fp8_einsum_inputs(4, 2, 0, 16)  # r = 0: d = c, or zeros
    d = torch.full((4, 2, 16), float("nan"))
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    assert torch.equal(d, torch.zeros_like(d))
    c = torch.randn(4, 2, 16)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=c)
    assert torch.equal(d, c)


def _with(pair, i, t):
    return (t, pair[1]) if i == 0 else (pair[0], t)


@pytest.mark.parametrize("call,kind,match", [
    (lambda a, b, d: finegemm.fp8_einsum("bhd,hdr->bhr", a, b, d), NotImplementedError, "SM100 only"),
    (lambda a, b, d: finegemm.fp8_einsum("bhd,bhr->hdr", a, b, d), NotImplementedError, "SM100 only"),
    (lambda a, b, d: finegemm.fp8_einsum("ij,jk->ik", a, b, d), ValueError, "expr must be one of bhr,hdr->bhd"),
    (lambda a, b, d: finegemm.fp8_einsum(None, a, b, d), TypeError, "expr must be a str"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a[0], b, d), TypeError, "a must be a 2-tuple"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", _with(a, 0, a[0].float()), b, d), TypeError,
     r"a\[0\] \(A\) must be torch.float8_e4m3fn"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, _with(b, 1, b[1].double()), d), TypeError,
     r"b\[1\] \(sfb\) must be torch.float32"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d.half()), TypeError, "d must be"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=d.float()), TypeError,
     "d must be torch.float32 when c is given"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, recipe=(1, 1, 128)), ValueError, "recipe must be"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", _with(a, 0, a[0][0]), b, d), ValueError,
     r"a\[0\] \(A\) must be a 3-D tensor \[b, h, r\]"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, _with(b, 0, b[0][:2]), d), ValueError,
     "dimensions 'h' and 'r'"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", _with(a, 1, a[1][:, :, :1]), b, d), ValueError,
     r"a\[1\] \(sfa\) must have shape \[b, h, ceil\(r/128\)\]"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, _with(b, 1, b[1][:, :, :1]), d), ValueError,
     r"b\[1\] \(sfb\) must have shape \[h, ceil\(d/128\), ceil\(r/128\)\]"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d[:, :, :8]), ValueError, r"d must have shape \[b, h, d\]"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d.float(), c=torch.zeros(5, 3)), ValueError,
     r"c must be a 3-D tensor"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d.transpose(1, 2).contiguous().transpose(1, 2)),
     ValueError, "d \\[b, h, d\\] must have a contiguous last dimension"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, torch.zeros(5, 3, 48, dtype=BF16)[..., 2:42]),
     ValueError, "16-byte aligned"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, torch.zeros(5, 3, 44, dtype=BF16)[..., :40]),
     ValueError, "multiple of 16 bytes"),
    (lambda a, b, d: finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=None, recipe="x"), TypeError, "recipe must be"),
])
def test_fp8_einsum_bad_input_names_the_rule(call, kind, match):
    a, b, _ = _fp8_einsum_inputs(5, 3, 256, 40)
    d = torch.zeros(5, 3, 40, dtype=BF16)
    with pytest.raises(kind, match=f"^fp8_einsum: .*{match}"):
        call(a, b, d)


def test_fp8_einsum_rule_of_the_bf16_scratch():
    """A bf16 d needs d % 8 == 0 (its scratch rows are 16-byte TMA rows); fp32 d needs d % 4 only
    through d's own strides, as any fp32 output."""
    a, b, exact = _fp8_einsum_inputs(3, 2, 128, 12)
    buf = torch.zeros(3, 2, 16, dtype=BF16)
    with pytest.raises(ValueError, match="^fp8_einsum: the head dimension d must be a multiple of 8"):
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, buf[..., :12])
    d = torch.zeros(3, 2, 12)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    assert calc_diff(d, exact) < 1e-5


def test_fp8_einsum_rejects_d_over_an_input():
    a, b, _ = _fp8_einsum_inputs(4, 2, 128, 16)
    storage = torch.zeros(4 * 2 * 128, dtype=torch.uint8)
    alias_a = (storage.view(torch.float8_e4m3fn).view(4, 2, 128), a[1])
    d = storage[: 4 * 2 * 16 * 2].view(BF16).view(4, 2, 16)
    with pytest.raises(ValueError, match="^fp8_einsum: d must not overlap a\\[0\\] \\(A\\)"):
        finegemm.fp8_einsum("bhr,hdr->bhd", alias_a, b, d)


def _heads_packed_spies(monkeypatch, gate_open: bool):
    """fp8_einsum's CUDA routing on CPU tensors: on_cuda patched, the heads-packed launch and the
    masked composition replaced by recorders (the layout test is the real one)."""
    from finegemm.ops import sm90_fp8_gemm as ops

    mod = importlib.import_module("finegemm.api.fp8_einsum")
    calls = []
    monkeypatch.setattr(_v, "on_cuda", lambda t: True)
    monkeypatch.setattr(ops, "fp8_einsum_heads_packed", lambda *args, **kw: calls.append("heads_packed"))
    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed", lambda *args, **kw: None)  # one-shot launches
    monkeypatch.setattr(mod, "m_grouped_fp8_gemm_nt_masked", lambda *args: calls.append("masked"))
    monkeypatch.setattr(mod, "fp8_gemm_nt", lambda *args, **kwargs: calls.append("dense"))
    monkeypatch.delenv(_v.DISABLE_PATHS_ENV, raising=False)
    if gate_open:
        monkeypatch.setenv(_v.ENABLE_UNVALIDATED_ENV, "1")
    else:
        monkeypatch.delenv(_v.ENABLE_UNVALIDATED_ENV, raising=False)
        monkeypatch.setitem(_v.UNVALIDATED_ON_GPU, "fp8_einsum_heads_packed", ("", "", ""))
    return calls


@pytest.mark.parametrize("case,want", [
    ("contiguous", "heads_packed"),        # A [b, h, r] and d [b, h, d] as stored: read and written in place
    ("padded_rows", "heads_packed"),       # row pitches past h * r / h * d: still in place
    ("one_row", "heads_packed"),
    ("r_not_128", "masked"),               # a k-box would reach the next head's columns
    ("a_head_major", "masked"),            # A stored [h, b, r]: the composition (its copy is a view then)
    ("d_padded_heads", "masked"),          # d's heads not side by side
    ("gate_closed", "masked"),
    ("disabled", "masked"),
])
def test_fp8_einsum_takes_the_heads_packed_kernel_where_it_reads_in_place(monkeypatch, case, want):
    """bf16 d: the heads-packed kernel or the masked composition; fp32 d (with c = d, or a c of
    other strides): the heads-packed kernel or one dense call per head."""
    calls = _heads_packed_spies(monkeypatch, gate_open=case != "gate_closed")
    if case == "disabled":
        monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_einsum_heads_packed")
    batch, heads, r, n = (1 if case == "one_row" else 6), 4, (144 if case == "r_not_128" else 256), 64
    a, b, _ = _fp8_einsum_inputs(batch, heads, r, n)
    A = a[0]
    if case == "padded_rows":
        A = torch.zeros(batch, heads * r + 64, dtype=torch.uint8).view(torch.float8_e4m3fn)[:, :heads * r]
        A = A.view(batch, heads, r)
    elif case == "a_head_major":
        A = a[0].transpose(0, 1).contiguous().transpose(0, 1)

    def out(dtype):
        if case == "padded_rows":
            return torch.zeros(batch, heads * n + 8, dtype=dtype)[:, :heads * n].view(batch, heads, n)
        if case == "d_padded_heads":
            return torch.zeros(batch, heads, n + 8, dtype=dtype)[..., :n]
        return torch.zeros(batch, heads, n, dtype=dtype)

    finegemm.fp8_einsum("bhr,hdr->bhd", (A, a[1]), b, out(BF16))
    assert calls == [want]
    fp32_want = ["heads_packed"] if want == "heads_packed" else ["dense"] * heads
    for c_kind in ("none", "d", "other_strides"):
        calls.clear()
        d = out(F32)
        c = {"none": None, "d": d, "other_strides": torch.zeros(batch, heads, n + 4)[..., :n]}[c_kind]
        finegemm.fp8_einsum("bhr,hdr->bhd", (A, a[1]), b, d, c=c)
        assert calls == (["dense"] * heads if c_kind == "other_strides" else fp32_want), c_kind


@pytest.mark.parametrize("in_place", [True, False])
def test_fp8_einsum_heads_packed_reads_sfa_in_place_where_open(monkeypatch, in_place):
    """With fp8_einsum_sfa_in_place open, the heads-packed call is prepared (sfa read in place);
    turned off (FINEGEMM_DISABLE_PATHS) or gated, it is the one-shot launch reading sfa through
    its copy, prepared never."""
    from finegemm.ops import sm90_fp8_gemm as ops

    calls = _heads_packed_spies(monkeypatch, gate_open=True)
    mod = importlib.import_module("finegemm.api.fp8_einsum")
    monkeypatch.setattr(mod, "_validated", _v.ValidatedCalls())
    seen = []
    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed", lambda *args, **kw: seen.append("prepare") and None)
    monkeypatch.setattr(ops, "fp8_einsum_heads_packed",
                        lambda *args, sfa_gather=False, tma_store=True: seen.append(sfa_gather))
    if not in_place:
        monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_einsum_sfa_in_place")
    a, b, _ = _fp8_einsum_inputs(6, 4, 256, 64)
    d = torch.zeros(6, 4, 64, dtype=BF16)
    for _ in range(2):
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    assert seen == (["prepare", True, True] if in_place else [False, False]) and calls == []


@pytest.mark.parametrize("switched_off", [False, True])
def test_fp8_einsum_tma_store_switch(monkeypatch, switched_off):
    """The in-place kernel is planned with TMA stores unless FINEGEMM_DISABLE_PATHS names
    fp8_einsum_tma_store (the prepared launch and the one-shot launch alike)."""
    from finegemm.ops import sm90_fp8_gemm as ops

    _heads_packed_spies(monkeypatch, gate_open=True)
    mod = importlib.import_module("finegemm.api.fp8_einsum")
    monkeypatch.setattr(mod, "_validated", _v.ValidatedCalls())
    seen = []
    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed",
                        lambda *args, tma_store=True: seen.append(("prepare", tma_store)) and None)
    monkeypatch.setattr(ops, "fp8_einsum_heads_packed",
                        lambda *args, sfa_gather=False, tma_store=True: seen.append(("launch", tma_store)))
    if switched_off:
        monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_einsum_tma_store")
    a, b, _ = _fp8_einsum_inputs(6, 4, 256, 64)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, torch.zeros(6, 4, 64, dtype=BF16))
    assert seen == [("prepare", not switched_off), ("launch", not switched_off)]


def _three_calls_of_one_key(monkeypatch, mod):
    """Three bf16 fp8_einsum calls on the same tensors, from an empty fast-path cache; (a, b, d)."""
    monkeypatch.setattr(mod, "_validated", _v.ValidatedCalls())
    a, b, _ = _fp8_einsum_inputs(6, 4, 256, 64)
    d = torch.zeros(6, 4, 64, dtype=BF16)
    for _ in range(3):
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    return a, b, d


def test_fp8_einsum_keeps_a_prepared_heads_packed_launch(monkeypatch):
    """A seen heads-packed call re-launches the prepared launch made at its first call (every input
    is read in place, so the launch serves every call of the key); where none can be made (an input
    copied per call) every call is one-shot."""
    from finegemm.ops import sm90_fp8_gemm as ops

    calls = _heads_packed_spies(monkeypatch, gate_open=True)
    mod = importlib.import_module("finegemm.api.fp8_einsum")
    made = []

    def prepare(*args, tma_store=True):
        made.append(args)
        return lambda: calls.append("prepared")

    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed", prepare)
    a, b, d = _three_calls_of_one_key(monkeypatch, mod)
    assert len(made) == 1 and calls == ["prepared"] * 3
    assert made[0][0] is a[0] and made[0][4] is d
    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed", lambda *args, **kw: made.append(args) and None)
    calls.clear()
    d2 = torch.zeros(6, 4, 64, dtype=BF16)  # another key, which cannot be prepared: asked once
    for _ in range(3):
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d2)
    assert len(made) == 2 and calls == ["heads_packed"] * 3


def test_fp8_einsum_seen_call_relaunches_without_replanning(monkeypatch):
    """A seen call with a kept prepared launch re-launches it at once: neither the gates nor the
    layout test are asked again (host time per call, v1.01 on the GPU), so a path switched off
    afterwards applies to calls planned afterwards (README: a kept call keeps its path). A kept
    launch that answers False (it cannot run now) is re-planned: the one-shot launch runs."""
    from finegemm.ops import sm90_fp8_gemm as ops

    calls = _heads_packed_spies(monkeypatch, gate_open=True)
    mod = importlib.import_module("finegemm.api.fp8_einsum")
    runs, asked = [], []
    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed", lambda *args, **kw: lambda: runs.append("prepared"))
    real_layouts = ops.heads_packed_layouts
    monkeypatch.setattr(ops, "heads_packed_layouts", lambda *args: asked.append(1) or real_layouts(*args))
    a, b, d = _three_calls_of_one_key(monkeypatch, mod)
    assert runs == ["prepared"] * 3 and len(asked) == 1 and calls == []
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_einsum_sfa_in_place")
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)  # planned before the switch: its launch
    assert runs == ["prepared"] * 4 and calls == []
    d2 = torch.zeros(6, 4, 64, dtype=BF16)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d2)  # planned after it: sfa through its copy
    assert calls == ["heads_packed"] and len(asked) == 2
    monkeypatch.delenv(_v.DISABLE_PATHS_ENV)
    key = mod.fp8_call_key(a, b, d, None, None, "bhr,hdr->bhd", None)
    mod._validated.keep(key, lambda: runs.append("refused") or False)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)  # asked again by the planning path, then prepared anew
    assert runs[-3:] == ["refused", "refused", "prepared"] and len(asked) == 3


def test_heads_packed_kernel_render_rules():
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED
    from finegemm.ops import sm90_fp8_gemm as ops

    src = ops.render(64, 128, 6, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True)
    assert "2, false, 1, false, 1, 0, 0, 0, false, true>" in src  # kHeadsPacked, the last template argument
    plain = ops.render(64, 128, 6, False, False, False, gemm_kind=GEMM_GROUPED_MASKED)
    assert plain != src and ", true>" not in plain  # the shipped masked source (and cache key) unchanged
    with pytest.raises(ValueError, match="heads_packed: the m-grouped masked kind only"):
        ops.render(64, 128, 6, False, False, False, heads_packed=True, gemm_kind=GEMM_GROUPED_CONTIGUOUS)
    # TMA stores: only on the shipped kernel (sfa gathered), bf16 d without c.
    with pytest.raises(ValueError, match="heads_packed with tma_store: bf16 d, no c, sfa gathered"):
        ops.render(64, 128, 6, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True, tma_store=True)
    for f32, has_c in ((True, False), (True, True)):
        with pytest.raises(ValueError, match="tma_store"):
            ops.render(64, 128, 6, f32, has_c, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True,
                       tma_store=True, sfa_gather=True)
    tmas = ops.render(64, 128, 6, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True,
                      tma_store=True, sfa_gather=True)
    assert "1, false, false, true, 2, false, 1, false, 1, 0, 0, 0, false, true, false, true>" in tmas  # kTmaStore
    # fp32 d and C: the heads-packed masked kind only.
    assert "<64, 128, 6, true, true, false," in ops.render(64, 128, 6, True, True, False, gemm_kind=GEMM_GROUPED_MASKED,
                                                           heads_packed=True)
    with pytest.raises(ValueError, match="grouped kinds: bf16 out, no C"):
        ops.render(64, 128, 6, True, True, False, gemm_kind=GEMM_GROUPED_MASKED)
    cfgs = {label for label, _ in ops.representative_configs()}
    assert {"bm64_bn208_s6_gmask_heads", "bm64_bn16_s8_mca_gmask_heads", "bm128_bn192_s5_gmask_heads"} <= cfgs
    # sfa is gathered by a producer warp of the lean tiles: none wider than 208 columns or taller than 128 rows.
    assert "sfa_gather" not in src  # the kernel validated with sfa through its map: the same source
    gather = ops.render(64, 128, 6, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True,
                        sfa_gather=True)
    assert "false, true, false, true>" in gather and "sfa_gather, sfa_ld_m, sfa_ld_g, sfa_ld_k);" in gather
    for bm, bn in ((128, 224), (192, 128)):
        ops.render(bm, bn, 4, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True)
        with pytest.raises(ValueError, match="sfa_gather: block_m <= 128 and block_n <= 208"):
            ops.render(bm, bn, 4, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, heads_packed=True,
                       sfa_gather=True)
    with pytest.raises(ValueError, match="sfa_gather: with heads_packed only"):
        ops.render(64, 128, 6, False, False, False, gemm_kind=GEMM_GROUPED_MASKED, sfa_gather=True)
    for shape in ((1, 128, 512, 128), (4096, 128, 512, 128), (4096, 512, 512, 16), (300, 640, 256, 2),
                  (130, 200, 256, 64)):
        cfg = ops.heads_packed_config(*shape, 132, sfa_gather=True)
        assert cfg.block_m <= 128 and cfg.block_n <= 208 and cfg.heads_packed and cfg.sfa_gather, (shape, cfg)
        assert ops._kernel_name(cfg).endswith("_heads_sfag")
        # bf16 d through TMA where no store box reaches the next head's columns; fp32 d (with or
        # without c) and the kernel reading sfa's copy store directly.
        assert cfg.tma_store == (shape[1] % cfg.block_n == 0), (shape, cfg)
        for f32, has_c in ((True, False), (True, True)):
            assert not ops.heads_packed_config(*shape, 132, f32, has_c, sfa_gather=True).tma_store
        plain = ops.heads_packed_config(*shape, 132)
        assert not plain.sfa_gather and not plain.tma_store and plain.kernel_key() != cfg.kernel_key()
    assert ops.heads_packed_config(4096, 128, 512, 128, 132, sfa_gather=True).tma_store  # MLA's d = 128
    assert not ops.heads_packed_config(130, 200, 256, 64, 132, sfa_gather=True).tma_store  # bn 144


def test_fp8_einsum_head_major_tensors_need_no_copies(monkeypatch):
    """A and d stored head-major ([h, b, *] underneath): the masked call reads A and writes d
    through views (no scratch), with the same values."""
    batch, heads, r, n = 5, 3, 256, 16
    a, b, exact = _fp8_einsum_inputs(batch, heads, r, n, seed=4)
    A_hm = a[0].transpose(0, 1).contiguous().transpose(0, 1)  # [b, h, r] view of a [h, b, r] tensor
    d_hm = torch.full((heads, batch, n), float("nan"), dtype=BF16).transpose(0, 1)
    mod = importlib.import_module("finegemm.api.fp8_einsum")
    real, seen = mod.m_grouped_fp8_gemm_nt_masked, []

    def spy(a_, b_, d_, masked_m, expected_m):
        seen.append((a_[0].data_ptr() == A_hm.data_ptr() and a_[0].is_contiguous(), d_.data_ptr() == d_hm.data_ptr()))
        real(a_, b_, d_, masked_m, expected_m)

    monkeypatch.setattr(mod, "m_grouped_fp8_gemm_nt_masked", spy)
    finegemm.fp8_einsum("bhr,hdr->bhd", (A_hm, a[1]), b, d_hm)
    assert seen == [(True, True)]
    assert calc_diff(d_hm, exact) < 1e-5 and not torch.isnan(d_hm).any()


def test_fp8_einsum_host_fast_path_skips_the_checks_of_a_seen_call(monkeypatch):
    """A CUDA call whose tensors (addresses, shapes, strides, dtypes) and other arguments were
    validated before skips the checks; any of them changed, the call is checked again."""
    calls = _heads_packed_spies(monkeypatch, gate_open=True)
    mod = importlib.import_module("finegemm.api.fp8_einsum")
    real, checked = mod._checked, []
    monkeypatch.setattr(mod, "_checked", lambda *args: checked.append(1) or real(*args))
    a, b, d = _three_calls_of_one_key(monkeypatch, mod)
    assert len(checked) == 1 and calls == ["heads_packed"] * 3
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, torch.zeros(6, 4, 64, dtype=BF16))  # another d
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, recipe=(1, 128, 128))  # another argument
    assert len(checked) == 3
    with pytest.raises(ValueError, match="^fp8_einsum: .*must have shape"):  # a seen call's tensors, one changed
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d[:, :, :32])
