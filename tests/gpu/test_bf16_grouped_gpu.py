"""GPU tests of the grouped BF16 GEMMs: m_grouped_bf16_gemm_nt_contiguous / _masked (the SM90 BF16
kernel's m-grouped kinds) and k_grouped_bf16_gemm_tn_contiguous (v1: the dense tn kernel per group).

Every case draws fresh random bf16 data, poisons d with NaN, runs the op and checks against the
fp32 product of the inputs (TF32 off): calc_diff <= 1e-5 over the rows that must be written,
which must hold no NaN; contiguous padding rows (group id -1) exactly zero; masked rows >=
masked_m[g] still NaN (untouched). Plus G = 1/4/8/64, empty groups, masked_m = 0 / Mmax / random /
out of range (clamped), the psum layout, mk alignment 64, every m-grouped kernel forced, bitwise
determinism, a CUDA graph captured once and replayed with new masked_m values, and k-grouped
with zero-size groups, C and in-place accumulation.

The case lists are module-level data: scripts/precompile_bf16.py reads them to build the kernels.
"""
from __future__ import annotations

import dataclasses
import random

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.heuristics import sm90_bf16_gemm as heur  # noqa: E402
from finegemm.ops import sm90_bf16_gemm as ops  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


BF16 = torch.bfloat16
TOL = 1e-5


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _rand_ms(seed: int, g: int, lo: int, hi: int) -> list[int]:
    r = random.Random(seed)
    return [r.randint(lo, hi) for _ in range(g)]


# (id, group sizes, N, K, extra all-padding block inserted after group index, use_psum)
CONTIGUOUS_CASES = [
    ("g1", [300], 576, 7168, None, False),
    ("g4_empty_group", [130, 0, 256, 77], 4096, 512, None, False),
    ("g8_k7168", _rand_ms(8, 8, 1, 300), 576, 7168, None, False),
    ("g64_small_m", _rand_ms(64, 64, 0, 20), 576, 512, None, False),
    ("g4_padding_block", [128, 64, 200, 5], 4096, 512, 1, False),
    ("g4_psum", [200, 0, 128, 50], 4096, 512, None, True),
    ("g2_psum_k7168", [1, 513], 576, 7168, None, True),
]

# (id, G, Mmax, N, K, masked_m, expected_m)
MASKED_CASES = [
    ("g1_full", 1, 256, 4096, 7168, [256], 256),
    ("g4_mixed_k7168", 4, 128, 576, 7168, [0, 128, 37, 1], 64),
    ("g8_mmax192", 8, 192, 4096, 512, _rand_ms(81, 8, 0, 192), 100),
    ("g64_small", 64, 32, 576, 512, _rand_ms(64, 64, 0, 32), 8),
    ("g4_all_zero", 4, 64, 4096, 512, [0, 0, 0, 0], 32),
    ("g2_out_of_range", 2, 96, 576, 512, [1000, -5], 48),
]

# Forced-kernel problems (every kernel of grouped_kernel_keys(), the heuristic overridden).
FORCED_CONTIGUOUS = ([100, 300, 0, 129], 1000, 1152)
FORCED_MASKED = (3, 192, 1000, 1152, [192, 70, 0], 100)

# k-grouped: (id, ks, M, N, c mode)
K_GROUPED_CASES = [
    ("zero_group", [128, 0, 256, 384], 256, 576, "none"),
    ("c", [512, 128, 0], 576, 4096, "c"),
    ("in_place", [0, 256, 7168], 128, 576, "in_place"),
    ("g1", [1024], 4096, 576, "none"),
]


def contiguous_rows(ms, alignment=128, pad_after=None):
    """Total rows and per-group start rows of a plain contiguous layout."""
    starts, row = [], 0
    for i, m in enumerate(ms):
        starts.append(row)
        row += -(-m // alignment) * alignment
        if pad_after is not None and i == pad_after:
            row += alignment  # one whole block of -1 rows
    return row, starts


def _contiguous_problem(ms, n, k, pad_after, use_psum, seed, alignment=128):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    g = len(ms)
    m_total, starts = contiguous_rows(ms, alignment, pad_after)
    m_total = max(m_total, alignment)
    ids = torch.full((m_total,), -1, dtype=torch.int32)
    for i, (s, m) in enumerate(zip(starts, ms)):
        ids[s:s + m] = i
    ids = ids.cuda()
    if use_psum:
        layout = torch.tensor([s + m for s, m in zip(starts, ms)], dtype=torch.int32, device="cuda")
    else:
        layout = ids
    a = torch.randn(m_total, k, device="cuda", generator=gen).to(BF16)
    b = torch.randn(g, n, k, device="cuda", generator=gen).to(BF16)
    return a, b, layout, ids


def _run_contiguous(a, b, layout, use_psum):
    d = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=use_psum)
    return d


def _check_contiguous(d, a, b, ids):
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    real = ids >= 0
    assert (d[~real] == 0).all(), "padding rows must be exactly zero"
    if not real.any():
        return
    ref = torch.zeros(d.shape, device="cuda", dtype=torch.float32)
    for g in range(b.shape[0]):
        rows = ids == g
        if rows.any():
            ref[rows] = a[rows].float() @ b[g].float().t()
    diff = calc_diff(d[real], ref[real])
    assert diff <= TOL, f"vs fp32 product: calc_diff {diff:.3e}"


@pytest.mark.parametrize("case", CONTIGUOUS_CASES, ids=[c[0] for c in CONTIGUOUS_CASES])
def test_contiguous(case):
    _, ms, n, k, pad_after, use_psum = case
    a, b, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=sum(ms) + n + k)
    d = _run_contiguous(a, b, layout, use_psum)
    _check_contiguous(d, a, b, ids)


def test_contiguous_alignment_64():
    ms, n, k = [64, 10, 100, 0, 64], 576, 512
    old = finegemm.get_mk_alignment_for_contiguous_layout()
    try:
        finegemm.set_mk_alignment_for_contiguous_layout(64)
        a, b, layout, ids = _contiguous_problem(ms, n, k, None, False, seed=64, alignment=64)
        _check_contiguous(_run_contiguous(a, b, layout, False), a, b, ids)
        a, b, layout, ids = _contiguous_problem(ms, n, k, None, True, seed=65, alignment=64)
        _check_contiguous(_run_contiguous(a, b, layout, True), a, b, ids)
    finally:
        finegemm.set_mk_alignment_for_contiguous_layout(old)


def _masked_problem(g, m_max, n, k, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(g, m_max, k, device="cuda", generator=gen).to(BF16)
    b = torch.randn(g, n, k, device="cuda", generator=gen).to(BF16)
    return a, b


def _check_masked(d, a, b, masked):
    m_max = a.shape[1]
    clamped = [min(max(v, 0), m_max) for v in masked]
    got, want = [], []
    for i, m in enumerate(clamped):
        assert not torch.isnan(d[i, :m]).any(), f"group {i}: rows < masked_m not fully written"
        assert torch.isnan(d[i, m:]).all(), f"group {i}: rows >= masked_m = {m} were written"
        got.append(d[i, :m])
        want.append(a[i, :m].float() @ b[i].float().t())
    if sum(clamped) == 0:
        return
    diff = calc_diff(torch.cat(got), torch.cat(want))
    assert diff <= TOL, f"vs fp32 product: calc_diff {diff:.3e}"


def _run_masked(a, b, masked_m, expected_m):
    g, m_max, _ = a.shape
    d = torch.full((g, m_max, b.shape[1]), float("nan"), device="cuda", dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    return d


@pytest.mark.parametrize("case", MASKED_CASES, ids=[c[0] for c in MASKED_CASES])
def test_masked(case):
    _, g, m_max, n, k, masked, expected_m = case
    a, b = _masked_problem(g, m_max, n, k, seed=g * 31 + m_max + n + k)
    d = _run_masked(a, b, torch.tensor(masked, dtype=torch.int32, device="cuda"), expected_m)
    _check_masked(d, a, b, masked)


def _force(monkeypatch, key):
    bm, bn, st, kind = key
    real = heur.select_grouped_config

    def forced(kind_, m, n, k, num_groups, num_sms, expected_m=0, alignment=128):
        cfg = real(kind_, m, n, k, num_groups, num_sms, expected_m, alignment)
        tiles = -(-m // bm) * -(-n // bn)
        grid = num_sms if kind_ == heur.GEMM_GROUPED_MASKED else min(num_sms, tiles)
        return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st, grid=grid, num_tiles=tiles,
                                   num_units=tiles, smem_bytes=heur.smem_bytes(bm, bn, st, True),
                                   num_threads=heur.num_threads(bm))

    monkeypatch.setattr(ops, "select_grouped_config", forced)
    monkeypatch.setattr(ops, "_plans", {})


_CONT_KEYS = [key for key in heur.grouped_kernel_keys() if key[3] == heur.GEMM_GROUPED_CONTIGUOUS]
_MASK_KEYS = [key for key in heur.grouped_kernel_keys() if key[3] == heur.GEMM_GROUPED_MASKED]


@pytest.mark.parametrize("key", _CONT_KEYS, ids=[ops.grouped_kernel_name(k) for k in _CONT_KEYS])
def test_forced_kernels_contiguous(key, monkeypatch):
    _force(monkeypatch, key)
    ms, n, k = FORCED_CONTIGUOUS
    a, b, layout, ids = _contiguous_problem(ms, n, k, 1, False, seed=key[1])
    _check_contiguous(_run_contiguous(a, b, layout, False), a, b, ids)


@pytest.mark.parametrize("key", _MASK_KEYS, ids=[ops.grouped_kernel_name(k) for k in _MASK_KEYS])
def test_forced_kernels_masked(key, monkeypatch):
    _force(monkeypatch, key)
    g, m_max, n, k, masked, expected_m = FORCED_MASKED
    a, b = _masked_problem(g, m_max, n, k, seed=key[1] + 1)
    d = _run_masked(a, b, torch.tensor(masked, dtype=torch.int32, device="cuda"), expected_m)
    _check_masked(d, a, b, masked)


def test_deterministic_contiguous():
    _, ms, n, k, pad_after, use_psum = CONTIGUOUS_CASES[2]
    a, b, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=5)
    first = _run_contiguous(a, b, layout, use_psum)
    for _ in range(3):
        assert torch.equal(_run_contiguous(a, b, layout, use_psum).view(torch.int16), first.view(torch.int16))


def test_deterministic_masked():
    _, g, m_max, n, k, masked, expected_m = MASKED_CASES[2]
    a, b = _masked_problem(g, m_max, n, k, seed=6)
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    first = _run_masked(a, b, masked_m, expected_m)
    for _ in range(3):
        assert torch.equal(_run_masked(a, b, masked_m, expected_m).view(torch.int16), first.view(torch.int16))


def test_masked_cuda_graph_replay_follows_masked_m():
    g, m_max, n, k, expected_m = 6, 320, 4096, 512, 200
    a, b = _masked_problem(g, m_max, n, k, seed=99)
    masked_m = torch.tensor([320, 1, 250, 0, 129, 64], dtype=torch.int32, device="cuda")
    d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    for values in ([320, 1, 250, 0, 129, 64], [0, 320, 5, 200, 0, 300], [64] * 6, [0] * 6):
        masked_m.copy_(torch.tensor(values, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(d, a, b, values)


@pytest.mark.parametrize("case", K_GROUPED_CASES, ids=[c[0] for c in K_GROUPED_CASES])
def test_k_grouped(case):
    _, ks, m, n, mode = case
    gen = torch.Generator(device="cuda").manual_seed(sum(ks) + m + n)
    a = torch.randn(sum(ks), m, device="cuda", generator=gen).to(BF16)
    b = torch.randn(sum(ks), n, device="cuda", generator=gen).to(BF16)
    g = len(ks)
    c = None
    d = torch.full((g, m, n), float("nan"), device="cuda")
    if mode == "c":
        c = torch.randn(g, m, n, device="cuda", generator=gen) * 10
    elif mode == "in_place":
        d = torch.randn(g, m, n, device="cuda", generator=gen) * 10
        c = d
    base = torch.zeros(g, m, n, device="cuda") if c is None else c.clone()
    finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"), c=c)
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    off = 0
    for i, kg in enumerate(ks):
        want = base[i] + (a[off:off + kg].float().t() @ b[off:off + kg].float() if kg else 0)
        if kg == 0:
            assert torch.equal(d[i], want), f"group {i} (k = 0): d must equal c (or zeros)"
        else:
            diff = calc_diff(d[i], want)
            assert diff <= TOL, f"group {i}: vs fp32 product: calc_diff {diff:.3e}"
        off += kg
