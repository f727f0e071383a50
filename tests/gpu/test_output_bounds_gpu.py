"""Outputs that are column slices of wider tensors: nothing past column N may change.

TMA stores clip a row at 16-byte granularity of the global address, not per element (found on the
H200 by the API fuzz, benchmarks/NOTES.md v0.81): with N * element size % 16 != 0 a TMA store over
the row end also wrote the next columns up to the 16-byte boundary. The host launchers now keep
direct stores for such rows (fg::tma_store_fits). Each case: d = wide[..., :N] of a NaN-filled
tensor whose row pitch keeps the TMA rule; after the call wide[..., N:] is still all NaN and d
equals what the CPU path (the exact reference) writes. Plus the nn FP8 m-grouped B that is
K-major already but starts off a 16-byte boundary (its launch failed with CUDA_ERROR_INVALID_VALUE).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.testing import fuzz  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

_CONTIG, _MASKED = 1, 2  # heuristics' GEMM_GROUPED_CONTIGUOUS / GEMM_GROUPED_MASKED (both families)
# The kernel plans of the cases below (fuzz.kernel_plans' tuples): built ahead of time by
# scripts/precompile.py and in parallel by the `warm` fixture.
PLANS = ([("fp8", 130, n, 256, False, False, False) for n in (1, 100, 4100)]
         + [("fp8", 65, n, 512, True, c, True) for n, c in ((1, False), (102, True), (6, True))]
         + [("fp8_grouped", _CONTIG, 384, 100, 256, 2, 0, 128), ("fp8_grouped", _MASKED, 128, 100, 256, 2, 96, 0),
            ("fp8_grouped", _CONTIG, 256, 64, 256, 2, 0, 128)]
         + [("fp8_k_grouped", 64, 6, (256, 128), c) for c in (False, True)]
         + [("bf16", 130, n, 192, "nt", False, False) for n in (1, 100)]
         + [("bf16_grouped", _CONTIG, 256, n, 192, 2, 0, 128, False) for n in (1, 100)]
         + [("bf16_grouped", _MASKED, 128, n, 192, 2, 100, 0, False) for n in (1, 100)]
         + [("bf16_k_grouped", 64, 6, 384, 2, c) for c in (False, True)])


def planned_kernels() -> set:
    return set(PLANS)


@pytest.fixture(scope="module", autouse=True)
def warm():
    fuzz.warm_plans(PLANS, torch.cuda.current_device())

FP8, BF16, F32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32


def _wide(shape, n, dtype, fill=float("nan")):
    """(d, wide): d = wide[..., :n], wide's rows padded to the next 16-byte multiple past n + 1."""
    unit = 16 // torch.empty((), dtype=dtype).element_size()
    cols = (n + 1 + unit - 1) // unit * unit
    wide = torch.full((*shape, cols), fill, dtype=dtype, device="cuda")
    return wide[..., :n], wide


def _fp8(*shape, g):
    return (torch.randn(shape, generator=g) * 2).to(FP8).cuda()


def _sf(*shape, g):
    return torch.exp2(torch.randint(-3, 4, shape, generator=g).float()).cuda()


def _bf16(*shape, g):
    return torch.randn(shape, generator=g).to(BF16).cuda()


def _cpu(x):
    """A CPU copy with the same strides (x.cpu() of a padded view is contiguous, and its row pitch
    may then break the TMA rule the CPU path checks too)."""
    if isinstance(x, tuple):
        return tuple(_cpu(v) for v in x)
    if not isinstance(x, torch.Tensor):
        return x
    y = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
    y.copy_(x.cpu())
    return y


def _run(fn_name, d, wide, n, **kw):
    fn = getattr(finegemm, fn_name)
    want = wide.cpu()[..., :n]  # the same row pitch on the CPU (the TMA rule is checked there too)
    cpu_kw = {k: _cpu(v) for k, v in kw.items()}
    if "c" in kw and kw["c"] is d:
        cpu_kw["c"] = want
    fn(**{**cpu_kw, "d": want})
    fn(d=d, **kw)
    torch.cuda.synchronize()
    beyond = wide[..., n:]
    assert bool(torch.isnan(beyond.float()).all()), (
        f"{fn_name}: {int((~torch.isnan(beyond.float())).sum())} cells past column {n} were written")
    problems = fuzz.compare_outputs({"d": d.cpu()}, {"d": want})
    assert not problems, problems


@pytest.mark.parametrize("n", [1, 100, 4100])
@pytest.mark.parametrize("layout", ["nt", "tn"])
def test_fp8_dense_bf16_row_end(n, layout):
    g = torch.Generator().manual_seed(n)
    m, k = 130, 256
    a = (_fp8(m, k, g=g), _sf(m, 2, g=g)) if layout[0] == "n" else (_fp8(k, m + 14, g=g)[:, :m], _sf(2, m, g=g))
    b = (_fp8(n, k, g=g), _sf((n + 127) // 128, 2, g=g)) if layout[1] == "t" else None
    if b is None:
        bs = _fp8(k, (n + 16) // 16 * 16, g=g)[:, :n]
        b = (bs, _sf(2, (n + 127) // 128, g=g))
    d, wide = _wide((m,), n, BF16)
    _run(f"fp8_gemm_{layout}", d, wide, n, a=a, b=b)


@pytest.mark.parametrize("n,with_c", [(1, False), (102, True), (6, "d")])
def test_fp8_wgrad_fp32_row_end(n, with_c):
    g = torch.Generator().manual_seed(7 + n)
    m, k = 65, 512
    a = (_fp8(m, k, g=g), _sf(m, 4, g=g))
    b = (_fp8(n, k, g=g), _sf(n, 4, g=g))
    d, wide = _wide((m,), n, F32, fill=float("nan"))
    kw = dict(a=a, b=b, recipe=(1, 1, 128))
    if with_c == "d":
        d.copy_(torch.randn(m, n, generator=g))
        kw["c"] = d
    elif with_c:
        kw["c"] = torch.randn(m, n + 2, generator=g).cuda()[:, :n]  # a 16-byte row pitch (c is TMA-read)
    _run("fp8_gemm_nt", d, wide, n, **kw)


def test_fp8_m_grouped_row_end():
    g = torch.Generator().manual_seed(3)
    n, k, G = 100, 256, 2
    gl = torch.full((384,), -1, dtype=torch.int32)
    gl[:128] = 0
    gl[256:384] = 1
    d, wide = _wide((384,), n, BF16)
    _run("m_grouped_fp8_gemm_nt_contiguous", d, wide, n, a=(_fp8(384, k, g=g), _sf(384, 2, g=g)),
         b=(_fp8(G, n, k, g=g), _sf(G, 1, 2, g=g)), grouped_layout=gl.cuda())
    d, wide = _wide((G, 128), n, BF16)
    _run("m_grouped_fp8_gemm_nt_masked", d, wide, n, a=(_fp8(G, 128, k, g=g), _sf(G, 128, 2, g=g)),
         b=(_fp8(G, n, k, g=g), _sf(G, 1, 2, g=g)), masked_m=torch.tensor([128, 64], dtype=torch.int32).cuda(),
         expected_m=96)


@pytest.mark.parametrize("c_mode", [None, "d"])
def test_fp8_k_grouped_row_end(c_mode):
    g = torch.Generator().manual_seed(11)
    m, n, ks = 64, 6, [256, 128]
    s = sum(ks)
    d, wide = _wide((len(ks), m), n, F32)
    kw = dict(a=(_fp8(m * s, g=g), _sf(s // 128, m, g=g)), b=(_fp8(n * s, g=g), _sf(s // 128, n, g=g)), ks=ks,
              ks_tensor=torch.tensor(ks, dtype=torch.int32).cuda())
    if c_mode == "d":
        d.copy_(torch.randn(len(ks), m, n, generator=g))
        kw["c"] = d
    _run("k_grouped_fp8_gemm_nt_contiguous", d, wide, n, **kw)


@pytest.mark.parametrize("n", [1, 100])
def test_bf16_dense_and_grouped_row_end(n):
    g = torch.Generator().manual_seed(n + 5)
    m, k = 130, 192
    d, wide = _wide((m,), n, BF16)
    _run("bf16_gemm_nt", d, wide, n, a=_bf16(m, k, g=g), b=_bf16(n, k, g=g))
    gl = torch.full((256,), -1, dtype=torch.int32)
    gl[:100] = 0
    gl[128:256] = 1
    d, wide = _wide((256,), n, BF16)
    _run("m_grouped_bf16_gemm_nt_contiguous", d, wide, n, a=_bf16(256, k, g=g), b=_bf16(2, n, k, g=g),
         grouped_layout=gl.cuda())
    d, wide = _wide((2, 128), n, BF16)
    _run("m_grouped_bf16_gemm_nt_masked", d, wide, n, a=_bf16(2, 128, k, g=g), b=_bf16(2, n, k, g=g),
         masked_m=torch.tensor([128, 70], dtype=torch.int32).cuda(), expected_m=100)


@pytest.mark.parametrize("c_mode", [None, "d"])
def test_bf16_k_grouped_row_end(c_mode):
    g = torch.Generator().manual_seed(13)
    m, n, ks = 64, 6, [128, 256]
    s = sum(ks)
    b = _bf16(s, 8, g=g)[:, :n]  # B [sum(ks), N]: a 16-byte row pitch
    d, wide = _wide((len(ks), m), n, F32)
    kw = dict(a=_bf16(s, m, g=g), b=b, ks=ks, ks_tensor=torch.tensor(ks, dtype=torch.int32).cuda())
    if c_mode == "d":
        d.copy_(torch.randn(len(ks), m, n, generator=g))
        kw["c"] = d
    _run("k_grouped_bf16_gemm_tn_contiguous", d, wide, n, **kw)


def test_fp8_nn_contiguous_b_kmajor_off_16_bytes():
    """B [G, K, N] stored K-major (its transpose is contiguous) one byte into its buffer: the nn
    path's .contiguous() kept that view and the TMA map rejected its base."""
    g = torch.Generator().manual_seed(17)
    G, n, k, m = 2, 64, 256, 256
    raw = torch.empty(G * n * k + 1, dtype=torch.uint8, device="cuda")
    b_nk = raw[1:].view(FP8).view(G, n, k)
    b_nk.copy_(_fp8(G, n, k, g=g))
    b = b_nk.transpose(1, 2)  # [G, K, N], N-major strides of a K-major storage
    gl = torch.full((m,), -1, dtype=torch.int32)
    gl[:128] = 0
    gl[128:200] = 1
    d, wide = _wide((m,), n, BF16)
    _run("m_grouped_fp8_gemm_nn_contiguous", d, wide, n, a=(_fp8(m, k, g=g), _sf(m, 2, g=g)),
         b=(b, _sf(G, 2, 1, g=g)), grouped_layout=gl.cuda())
