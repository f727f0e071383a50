"""DeepGEMM's other entry points on CUDA tensors: fp8_gemm_nt_skip_head_mid (the dense FP8 kernel
plus a strided copy), einsum and cublaslt_gemm_* (cuBLAS through PyTorch), fp8_einsum (the masked
FP8 kernel over the heads, or the dense one per head).

Properties: fresh random data, poisoned outputs inside padded buffers (nothing outside the
written elements changes: the gap of every head and the row padding keep their NaNs),
calc_diff <= 1e-5 against the float64 product, skip-head-mid bitwise equal to fp8_gemm_nt's own
columns, and a skip-head-mid call captured in a CUDA graph replaying on refilled inputs; both
skip-head-mid paths: the fused epilogue (gated until this suite passes) and scratch-and-copy.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import reference  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu]

BF16, F32 = torch.bfloat16, torch.float32


def _fp8_operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=g))
    b = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=g))
    return a, b


def _fused(monkeypatch, on: bool) -> None:
    """The fused epilogue (gated until this suite passes: FINEGEMM_ENABLE_UNVALIDATED lifts it) or
    the scratch-and-copy path."""
    if on:
        monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")
    else:
        monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
        monkeypatch.setitem(finegemm.api._validate.UNVALIDATED_ON_GPU, "fp8_skip_head_mid_fused", ("", "", ""))


# (head splits, heads, K) x M of the skip-head-mid tests (scripts/precompile.py builds their fused kernels).
SKIP_HEAD_MID_CASES = [((128, 64, 128), 32, 512), ((32, 16, 48), 3, 7168), ((64, 0, 64), 5, 512), ((3, 5, 2), 3, 256),
                       ((64, 32, 64), 64, 512)]
SKIP_HEAD_MID_M = [1, 17, 128, 4097]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("m", SKIP_HEAD_MID_M)
@pytest.mark.parametrize("splits,heads,k", SKIP_HEAD_MID_CASES)
@pytest.mark.parametrize("dtype", [BF16, F32])
def test_skip_head_mid_matches_the_dense_gemm(monkeypatch, fused, m, splits, heads, k, dtype):
    _fused(monkeypatch, fused)
    left, mid, right = splits
    n = heads * (left + right)
    a, b = _fp8_operands(m, n, k, seed=m * 31 + n)
    # A row pitch past d's width (8 columns more, rounded to TMA's 16 bytes: d must take it, as the
    # API requires; the (3, 5, 2) heads are 30 columns wide).
    pitch = finegemm.align(n + heads * mid + 8, 8)
    buf = torch.full((m, pitch), float("nan"), dtype=dtype, device="cuda")
    d = buf[:, : n + heads * mid]
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, splits)
    plain = torch.empty(m, finegemm.align(n, 8), dtype=dtype, device="cuda")[:, :n]  # a 16-byte pitch (TMA)
    finegemm.fp8_gemm_nt(a, b, plain)
    torch.cuda.synchronize()
    got = d.view(m, heads, left + mid + right)
    want = plain.view(m, heads, left + right)
    assert torch.equal(got[:, :, :left], want[:, :, :left])
    assert torch.equal(got[:, :, left + mid:], want[:, :, left:])
    assert torch.isnan(got[:, :, left:left + mid]).all()
    assert torch.isnan(buf[:, n + heads * mid:]).all()
    if m <= 128:
        exact = reference.fp8_gemm_nt(a[0].cpu(), a[1].cpu(), b[0].cpu(), b[1].cpu(), out_dtype=torch.float64)
        assert calc_diff(plain.cpu(), exact) < 1e-5


def test_skip_head_mid_fused_path_is_taken(monkeypatch):
    """The DeepSeek shapes get the fused launch (the plain plan is a bf16 TMA-store tile whose store
    box divides 128): the test above then compares it, not the scratch path."""
    from finegemm.ops import sm90_fp8_gemm

    for m, n in ((128, 8192), (4096, 32768), (128, 32768)):
        a, b = _fp8_operands(m, n, 512, seed=n)
        d = torch.empty(m, n + n // 256 * 64, dtype=BF16, device="cuda")
        call = sm90_fp8_gemm.prepare_skip_head_mid(a[0], a[1], b[0], b[1], d, (128, 64, 128))
        assert call is not None and call.cfg.head_splits == (128, 64, 128), (m, n)


@pytest.mark.parametrize("fused", [False, True])
def test_skip_head_mid_in_a_cuda_graph(monkeypatch, fused):
    _fused(monkeypatch, fused)
    m, (left, mid, right), heads, k = 64, (128, 64, 128), 8, 512
    n = heads * (left + right)
    a, b = _fp8_operands(m, n, k, seed=7)
    d = torch.full((m, n + heads * mid), float("nan"), dtype=BF16, device="cuda")
    finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, (left, mid, right))  # warm: compile and plan
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, (left, mid, right))
    for seed in (11, 12):
        a2, b2 = _fp8_operands(m, n, k, seed=seed)
        for dst, src in ((a, a2), (b, b2)):
            dst[0].copy_(src[0])
            dst[1].copy_(src[1])
        d.fill_(float("nan"))
        graph.replay()
        plain = torch.empty(m, n, dtype=BF16, device="cuda")
        finegemm.fp8_gemm_nt(a, b, plain)
        torch.cuda.synchronize()
        got, want = d.view(m, heads, -1), plain.view(m, heads, -1)
        assert torch.equal(got[:, :, :left], want[:, :, :left])
        assert torch.equal(got[:, :, left + mid:], want[:, :, left:])
        assert torch.isnan(got[:, :, left:left + mid]).all()


_EINSUM = {  # expr -> (a shape, b shape): MLA-like sizes and odd ones
    "bhr,hdr->bhd": [((64, 16, 512), (16, 128, 512)), ((17, 3, 72), (3, 40, 72))],
    "bhd,hdr->bhr": [((64, 16, 128), (16, 128, 512)), ((17, 3, 40), (3, 40, 24))],
    "bhd,bhr->hdr": [((256, 16, 128), (256, 16, 512)), ((33, 3, 40), (33, 3, 24))],
    "bmk,bnk->mn": [((8, 128, 256), (8, 96, 256)), ((3, 17, 40), (3, 9, 40))],
}


@pytest.mark.parametrize("expr", sorted(_EINSUM))
@pytest.mark.parametrize("dtype,c_kind", [(BF16, None), (F32, None), (F32, "d")])
def test_einsum_on_cuda(expr, dtype, c_kind):
    g = torch.Generator(device="cuda").manual_seed(3)
    for sa, sb in _EINSUM[expr]:
        a = torch.randn(sa, device="cuda", generator=g).to(BF16)
        b = torch.randn(sb, device="cuda", generator=g).to(BF16)
        exact = torch.einsum(expr, a.cpu().double(), b.cpu().double())
        buf = torch.full((*exact.shape[:-1], exact.shape[-1] + 8), float("nan"), dtype=dtype, device="cuda")
        d = buf[..., : exact.shape[-1]]
        c = None
        if c_kind == "d":
            c0 = torch.randn(exact.shape, device="cuda", generator=g)
            d.copy_(c0)
            c = d
            exact = exact + c0.cpu().double()
        finegemm.einsum(expr, a, b, d, c=c)
        torch.cuda.synchronize()
        assert calc_diff(d.cpu(), exact) < 1e-5, (expr, sa, sb)
        assert torch.isnan(buf[..., exact.shape[-1]:]).all()


@pytest.mark.parametrize("layout", ["nt", "nn", "tn", "tt"])
def test_cublaslt_gemm_on_cuda(layout):
    g = torch.Generator(device="cuda").manual_seed(4)
    for m, n, k in ((1, 576, 7168), (17, 2112, 512), (257, 129, 64)):
        a = torch.randn(m, k, device="cuda", generator=g).to(BF16)
        b = torch.randn(n, k, device="cuda", generator=g).to(BF16)
        exact = a.cpu().double() @ b.cpu().double().T
        a_in = a if layout[0] == "n" else a.t().contiguous()
        b_in = b if layout[1] == "t" else b.t().contiguous()
        fn = getattr(finegemm, f"cublaslt_gemm_{layout}")
        for dtype in (BF16, F32):
            d = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
            fn(a_in, b_in, d)
            assert calc_diff(d.cpu(), exact) < 1e-5
        c = torch.randn(m, n, device="cuda", generator=g)
        d = c.clone()
        fn(a_in, b_in, d, c=d)
        assert calc_diff(d.cpu(), exact + c.cpu().double()) < 1e-5


# ----------------------------------------------------------------------------- fp8_einsum
def _fp8_einsum_operands(batch, heads, r, n, seed):
    """(A, sfa), (B, sfb) of "bhr,hdr->bhd" on the GPU and the float64 product of their dequantized
    values (torch.einsum on the CPU)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    A, sfa = finegemm.per_token_cast_to_fp8(torch.randn(batch * heads, r, device="cuda", generator=g))
    A, sfa = A.view(batch, heads, r), sfa.view(batch, heads, -1)
    per_head = [finegemm.per_block_cast_to_fp8(torch.randn(n, r, device="cuda", generator=g)) for _ in range(heads)]
    B, sfb = torch.stack([p[0] for p in per_head]), torch.stack([p[1] for p in per_head])
    a_deq = A.cpu().double() * sfa.cpu().double().repeat_interleave(128, 2)[..., :r]
    b_deq = (B.cpu().double() * sfb.cpu().double().repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)[..., :r])
    return (A, sfa), (B, sfb), torch.einsum("bhr,hdr->bhd", a_deq, b_deq)


# (b, h, r, d): DeepSeek's MLA (h = 128 heads of d = 128, r = 512) at decode and prefill sizes,
# and odd ones (b = 1 / 17 / 300, r not a multiple of 128, d not of 128).
FP8_EINSUM_SHAPES = [(64, 128, 512, 128), (1, 16, 512, 128), (17, 3, 144, 40), (300, 2, 256, 136), (4097, 1, 128, 64)]


def _einsum_c(c_kind, d, c_values, exact):
    """(c, the exact result) of an fp32 fp8_einsum with c_kind None (no c), "d" (d holds c_values and
    is c: in-place accumulation) or "separate" (c_values itself)."""
    if c_kind is None:
        return None, exact
    want = exact + c_values.cpu().double()
    if c_kind == "d":
        d.copy_(c_values)
        return d, want
    return c_values, want


@pytest.mark.parametrize("batch,heads,r,n", FP8_EINSUM_SHAPES)
@pytest.mark.parametrize("dtype,c_kind", [(BF16, None), (F32, None), (F32, "d"), (F32, "separate")])
def test_fp8_einsum_on_cuda(batch, heads, r, n, dtype, c_kind):
    a, b, exact = _fp8_einsum_operands(batch, heads, r, n, seed=batch + heads + r + n)
    buf = torch.full((batch, heads, n + 8), float("nan"), dtype=dtype, device="cuda")
    d = buf[..., :n]
    c, exact = _einsum_c(c_kind, d, torch.randn(batch, heads, n, device="cuda"), exact)
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=c)
    torch.cuda.synchronize()
    assert not torch.isnan(d).any()  # every element written
    assert torch.isnan(buf[..., n:]).all()  # nothing past the rows
    assert calc_diff(d.cpu(), exact) < 1e-5, (batch, heads, r, n)
    if c_kind is None:  # the same bits on a second call (no race, no state)
        again = torch.full_like(d, float("nan"))
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, again)
        assert torch.equal(again, d)


def test_fp8_einsum_bf16_is_the_masked_kernel_bitwise(monkeypatch):
    """The bf16 composition is m_grouped_fp8_gemm_nt_masked over the heads: the same bits as that
    call on head-major copies."""
    _heads_packed(monkeypatch, False)
    batch, heads, r, n = 40, 8, 512, 128
    a, b, _ = _fp8_einsum_operands(batch, heads, r, n, seed=5)
    d = torch.empty(batch, heads, n, dtype=BF16, device="cuda")
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    masked = torch.empty(heads, batch, n, dtype=BF16, device="cuda")
    full = torch.full((heads,), batch, dtype=torch.int32, device="cuda")
    finegemm.m_grouped_fp8_gemm_nt_masked((a[0].transpose(0, 1).contiguous(), a[1].transpose(0, 1).contiguous()),
                                          b, masked, full, batch)
    assert torch.equal(d, masked.transpose(0, 1))


def _heads_packed(monkeypatch, on: bool, sfa_in_place: bool = True) -> None:
    """fp8_einsum's in-place heads-packed kernel, reading sfa in place too (gated until this suite
    passes) or through its MN-major copy, or the masked composition (copies around the masked
    kernel). A seen call keeps the route it was planned with, so the fast path starts empty."""
    import importlib

    from finegemm.api import _validate as _v

    monkeypatch.setattr(importlib.import_module("finegemm.api.fp8_einsum"), "_validated", _v.ValidatedCalls())
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
    if on:
        monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")
        if not sfa_in_place:
            monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "fp8_einsum_sfa_in_place")
    else:
        monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "fp8_einsum_heads_packed")


# (b, h, r, d, A row padding, d row padding): MLA decode / prefill, one row, odd b and d, padded rows.
HEADS_PACKED_CASES = [(64, 128, 512, 128, 0, 0), (1, 16, 512, 128, 0, 0), (17, 3, 256, 40, 64, 8),
                      (300, 2, 256, 136, 0, 24), (4097, 1, 128, 64, 16, 0), (2048, 16, 512, 128, 0, 0),
                      (40, 8, 512, 128, 128, 64)]


@pytest.mark.parametrize("sfa_in_place", [True, False])
@pytest.mark.parametrize("batch,heads,r,n,pad_a,pad_d", HEADS_PACKED_CASES)
def test_fp8_einsum_heads_packed_matches_the_composition(monkeypatch, batch, heads, r, n, pad_a, pad_d, sfa_in_place):
    """The heads-packed kernel reads A and writes d in place (sfa in place too, or through its
    copy): d's padding untouched, exact within 1e-5, and the same bits as the masked composition
    where both take the same tile width (the heads-packed plan is no wider than d, the masked plan
    may be)."""
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED, select_grouped_config
    from finegemm.ops import sm90_fp8_gemm as ops

    a, b, exact = _fp8_einsum_operands(batch, heads, r, n, seed=batch * 7 + heads + n)
    a_buf = torch.zeros(batch, heads * r + pad_a, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    A = a_buf[:, :heads * r].view(batch, heads, r)
    A.copy_(a[0])
    a = (A, a[1])
    outs = []
    for on in (True, False):
        _heads_packed(monkeypatch, on, sfa_in_place)
        buf = torch.full((batch, heads * n + pad_d), float("nan"), dtype=BF16, device="cuda")
        d = buf[:, :heads * n].view(batch, heads, n)
        assert ops.heads_packed_layouts(A, d)
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
        torch.cuda.synchronize()
        assert not torch.isnan(d).any()
        assert torch.isnan(buf[:, heads * n:]).all()
        assert calc_diff(d.cpu(), exact) < 1e-5, (on, batch, heads, r, n)
        outs.append(d.clone())
    sms = finegemm.get_num_sms()
    if ops.heads_packed_config(batch, n, r, heads, sms, sfa_gather=sfa_in_place).block_n == \
            select_grouped_config(GEMM_GROUPED_MASKED, batch, n, r, heads, sms, batch, 0).block_n:
        assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("sfa_in_place", [True, False])
@pytest.mark.parametrize("batch,heads,r,n,pad_a,pad_d", HEADS_PACKED_CASES[:4])
@pytest.mark.parametrize("c_kind", [None, "d", "separate"])
def test_fp8_einsum_heads_packed_fp32(monkeypatch, batch, heads, r, n, pad_a, pad_d, c_kind, sfa_in_place):
    """fp32 d on the heads-packed tile, with c = d, a separate c of d's strides, or none: exact
    within 1e-5, d's padding untouched, and within 1e-5 of the per-head dense calls."""
    from finegemm.ops import sm90_fp8_gemm as ops

    a, b, exact = _fp8_einsum_operands(batch, heads, r, n, seed=batch * 5 + heads + n)
    outs = []
    for on in (True, False):
        _heads_packed(monkeypatch, on, sfa_in_place)
        g = torch.Generator(device="cuda").manual_seed(3)
        c0 = torch.randn(batch, heads * n + pad_d, device="cuda", generator=g)
        buf = torch.full((batch, heads * n + pad_d), float("nan"), device="cuda")
        d = buf[:, :heads * n].view(batch, heads, n)
        c, want = _einsum_c(c_kind, d, c0[:, :heads * n].view(batch, heads, n), exact)
        assert ops.heads_packed_layouts(a[0], d, c)
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d, c=c)
        torch.cuda.synchronize()
        assert not torch.isnan(d).any() and torch.isnan(buf[:, heads * n:]).all()
        assert calc_diff(d.cpu(), want) < 1e-5, (on, c_kind)
        outs.append(d.clone())
    assert calc_diff(outs[0], outs[1]) < 1e-5


def test_fp8_einsum_heads_packed_path_is_taken(monkeypatch):
    """A call's first run prepares the heads-packed launch, later calls of the key re-launch it:
    the same bits every time (no race, no state); the one-shot launcher gives them too, with d
    stored through TMA or directly."""
    from finegemm.ops import sm90_fp8_gemm as ops

    _heads_packed(monkeypatch, True)
    seen = []
    real = ops.prepare_fp8_einsum_heads_packed
    monkeypatch.setattr(ops, "prepare_fp8_einsum_heads_packed", lambda *args, **kw: seen.append(1) or real(*args, **kw))
    a, b, exact = _fp8_einsum_operands(8, 4, 256, 64, seed=1)
    d = torch.empty(8, 4, 64, dtype=BF16, device="cuda")
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    assert seen == [1] and calc_diff(d.cpu(), exact) < 1e-5
    for _ in range(10):
        d.fill_(float("nan"))
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
        assert not torch.isnan(d).any() and calc_diff(d.cpu(), exact) < 1e-5
    first = d.clone()
    # The one-shot launches: sfa in place (d stored through TMA or directly) or through its copy.
    for sfa_gather, tma_store in ((True, True), (False, True), (True, False), (True, True)):
        again = torch.full_like(d, float("nan"))
        ops.fp8_einsum_heads_packed(a[0], a[1], b[0], b[1], again, sfa_gather=sfa_gather, tma_store=tma_store)
        assert torch.equal(again, first), (sfa_gather, tma_store)
    assert seen == [1]


@pytest.mark.parametrize("sfa_layout", ["head_major", "padded", "mn_major", "broadcast"])
@pytest.mark.parametrize("batch,heads", [(1, 16), (37, 8), (300, 4)])
def test_fp8_einsum_heads_packed_reads_sfa_at_any_strides(monkeypatch, sfa_layout, batch, heads):
    """The heads-packed kernel gathers sfa [b, h, r/128] where it lies: a view of a head-major, a
    padded, an MN-major or a broadcast (stride 0) tensor gives the bits of the contiguous sfa of the
    same values, within 1e-5 of the exact product. A non-contiguous sfb (copied per call: one-shot
    launches) gives them too."""
    from finegemm.ops import sm90_fp8_gemm as ops

    _heads_packed(monkeypatch, True)
    r, n = 512, 128
    a, b, _ = _fp8_einsum_operands(batch, heads, r, n, seed=batch + heads)
    A, sfa = a
    kb = sfa.shape[2]
    if sfa_layout == "head_major":
        strided = sfa.transpose(0, 1).contiguous().transpose(0, 1)
    elif sfa_layout == "padded":
        strided = torch.full((batch, heads, kb + 3), float("nan"), device="cuda")[..., :kb]
        strided.copy_(sfa)
    elif sfa_layout == "mn_major":
        strided = sfa.permute(2, 0, 1).contiguous().permute(1, 2, 0)
    else:
        strided = sfa[:1, :1].expand(batch, heads, kb)
    dense_sfa = strided.contiguous()
    B, sfb = b
    a_deq = A.double().cpu() * dense_sfa.double().cpu().repeat_interleave(128, 2)
    b_deq = B.double().cpu() * sfb.double().cpu().repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)
    exact = torch.einsum("bhr,hdr->bhd", a_deq, b_deq)
    outs = []
    for scales, sfb_arg in ((dense_sfa, sfb), (strided, sfb), (strided, sfb.transpose(1, 2).contiguous().transpose(1, 2))):
        d = torch.full((batch, heads, n), float("nan"), dtype=BF16, device="cuda")
        assert ops.heads_packed_layouts(A, d)
        finegemm.fp8_einsum("bhr,hdr->bhd", (A, scales), (B, sfb_arg), d)
        torch.cuda.synchronize()
        assert not torch.isnan(d).any() and calc_diff(d.cpu(), exact) < 1e-5, sfa_layout
        outs.append(d)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("heads_packed,sfa_in_place", [(False, False), (True, False), (True, True)])
def test_fp8_einsum_in_a_cuda_graph(monkeypatch, heads_packed, sfa_in_place):
    """Captured once (the composition's copies and scratch, or the heads-packed launch: sfa's copy
    then the kernel, or the kept prepared launch), replayed on refilled inputs."""
    _heads_packed(monkeypatch, heads_packed, sfa_in_place)
    batch, heads, r, n = 32, 16, 512, 128
    a, b, _ = _fp8_einsum_operands(batch, heads, r, n, seed=8 + heads_packed)
    d = torch.full((batch, heads, n), float("nan"), dtype=BF16, device="cuda")
    finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)  # warm: compile and plan
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        finegemm.fp8_einsum("bhr,hdr->bhd", a, b, d)
    for seed in (31, 32):
        a2, b2, exact = _fp8_einsum_operands(batch, heads, r, n, seed=seed)
        for dst, src in ((a, a2), (b, b2)):
            dst[0].copy_(src[0])
            dst[1].copy_(src[1])
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert calc_diff(d.cpu(), exact) < 1e-5


@pytest.mark.parametrize("on", [False, True])
def test_fp8_einsum_head_major_tensors(monkeypatch, on):
    """A and d stored head-major ([h, b, *] underneath: the heads-packed kernel does not apply, the
    masked call reads and writes them through views): exact within 1e-5, every element written."""
    _heads_packed(monkeypatch, on)
    batch, heads, r, n = 33, 4, 512, 128
    a, b, exact = _fp8_einsum_operands(batch, heads, r, n, seed=12)
    A_hm = a[0].transpose(0, 1).contiguous().transpose(0, 1)
    d_hm = torch.full((heads, batch, n), float("nan"), dtype=BF16, device="cuda").transpose(0, 1)
    finegemm.fp8_einsum("bhr,hdr->bhd", (A_hm, a[1]), b, d_hm)
    torch.cuda.synchronize()
    assert not torch.isnan(d_hm).any() and calc_diff(d_hm.cpu(), exact) < 1e-5
