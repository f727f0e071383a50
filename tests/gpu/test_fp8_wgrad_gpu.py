"""GPU tests of the SM90 FP8 weight-gradient GEMMs, recipe (1, 1, 128) ("1D1D"): dense
fp8_gemm_nt/nn/tn/tt(..., recipe=(1, 1, 128)) and k_grouped_fp8_gemm_nt_contiguous / _tn_contiguous on
CUDA tensors.

Every case draws fresh random data, quantizes A and B per row and 128-wide K block
(quant.per_token_cast_to_fp8: sfa [M, Kb], sfb [N, Kb]), poisons d with NaN, runs the kernel and
checks against the exact dequantized reference (finegemm.reference, fp64): calc_diff <= 1e-5, d
fully written (no NaN left); against the fp32 product of the unquantized inputs: <= 1e-3.
C accumulation (separate c, and c = d in place), forced kernel configurations (both block_m,
multicast on A / on B, split-K), bitwise determinism; k-grouped: G = 1, 4, 16, empty groups
(k_g = 0: D_g = C_g or zeros), K from 128 to 8192, M % 4 != 0 (scale copies), c and in-place.
K-grouped in one launch (ops/sm90_fp8_k_grouped.py; the per-group v1 path runs the same cases for
A/B): G = 1, 4, 16, 64 and above the 64-group launch table (80, 130: two and three launches),
empty groups first / middle / last / all, M and N off the block grid (100 x 136), c None /
separate / d itself, strided d and c, forced configurations (block_m 64 / 128, multicast on A /
on B), an elementwise bound besides calc_diff, bitwise-identical repeats, CUDA graph replay.
The fp32 TMA epilogue (store without C, reduce-add with c = d, direct stores for a separate c or an
unaligned d), half-promote and k-block batches: each bitwise equal to the plain tile's direct
result, dense and k-grouped (M off the 64-row box grid, empty groups).

The case lists are module-level data: scripts/precompile.py reads them to build the kernels.
"""
from __future__ import annotations

import dataclasses
import random

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import quant, reference  # noqa: E402
from finegemm.testing import calc_diff, capture_graph  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


RECIPE = (1, 1, 128)

# Dense shapes (every M x N x K); with_c subsets; layouts; determinism.
DENSE_M = (1, 17, 128, 2112, 4097)
DENSE_N = (576, 2112, 7168)
DENSE_K = (512, 4096, 7296)
DENSE_SHAPES = [(m, n, k) for m in DENSE_M for n in DENSE_N for k in DENSE_K]
C_SHAPES = [(1, 576, 7296), (17, 2112, 4096), (128, 7168, 512), (2112, 576, 7296), (4097, 2112, 4096)]
LAYOUT_SHAPE = (128, 576, 1152)  # M, N multiples of 16: MN-major operands keep a 16-byte row pitch
DET_SHAPES = [(1, 576, 7296), (2112, 7168, 4096)]

# Forced (block_m, block_n, num_multicast, multicast_on_a, num_splits) on FORCED_SHAPE (with c).
FORCED = [(128, 208, 2, False, 1), (128, 128, 2, True, 1), (128, 192, 1, False, 3), (64, 112, 1, False, 1),
          (64, 16, 2, True, 1), (64, 208, 1, False, 4), (128, 144, 2, False, 1)]
FORCED_SHAPE = (257, 1000, 1152)

# The fp32 TMA epilogue (tma_store; a reduce-add when c is d): forced (block_m, block_n, num_multicast,
# multicast_on_a) on TMA_EPI_SHAPES, c None / d itself / separate (the last keeps direct stores).
TMA_EPI_CFGS = [(128, 208, 2, False), (128, 128, 1, False), (64, 176, 2, True), (128, 48, 1, False)]
TMA_EPI_SHAPES = [(257, 1000, 1152), (4097, 576, 512), (1, 200, 384)]
# Half-promote (two column-half wgmma groups per k-block): forced (block_m, block_n, num_multicast,
# multicast_on_a, tma_store) on TMA_EPI_SHAPES, against the whole-tile twin.
HALF_PROMOTE_CFGS = [(128, 176, 1, False, True), (128, 208, 2, False, True), (64, 208, 2, True, False),
                     (128, 16, 1, False, True), (128, 160, 1, False, False)]
# (The plain twins cover the column-scale prefetch of the 1D1D loop: all chunks at bn16, a part at
# bn160 / bn176 (12 / 4 chunks, the rest from shared memory), none at bn208.)
# k-block batches: forced (block_m, block_n, num_multicast, multicast_on_a, tma_store, k_batch), against k_batch 1.
KBATCH_CFGS = [(128, 128, 1, False, True, 2), (128, 96, 2, True, False, 2), (128, 64, 2, False, True, 4),
               (64, 112, 1, False, True, 2)]

# C staged in shared memory (c_stage, direct epilogue with C): forced (block_m, block_n,
# num_multicast, multicast_on_a, k_batch) on C_STAGE_SHAPES, against the same tile reading C from
# global memory and against the TMA reduce-add.
C_STAGE_CFGS = [(128, 128, 2, True, 2), (128, 128, 1, False, 1), (64, 96, 2, False, 1), (192, 64, 1, False, 1),
                (128, 192, 1, False, 1)]
C_STAGE_SHAPES = [(257, 1000, 1152), (4097, 576, 512), (1, 200, 384), (130, 4096, 128)]

# k-grouped: (id, M, N, ks, c mode in {"none", "sep", "in_place"})
K_GROUPED_CASES = [
    ("g1", 128, 576, [4096], "none"),
    ("g1_k128_c", 64, 2112, [128], "sep"),
    ("g4_empty", 256, 2112, [128, 0, 8192, 640], "none"),
    ("g4_c", 256, 576, [1024, 0, 256, 2048], "sep"),
    ("g4_in_place", 128, 7168, [512, 384, 0, 1280], "in_place"),
    ("g16_random", 64, 576, [random.Random(16).choice([0, 128, 256, 1024, 2048, 4096, 8192]) for _ in range(16)],
     "none"),
    ("g16_m17_n200", 17, 200, [random.Random(17).choice([0, 128, 384, 896, 1536]) for _ in range(16)], "sep"),
]
K_GROUPED_DET = ("det", 192, 2112, [1024, 128, 0, 4096], "sep")


def _draw_ks(g, seed, choices=(0, 128, 256, 384, 640, 1024)):
    rng = random.Random(seed)
    return [rng.choice(choices) for _ in range(g)]


# One-launch k-grouped cases (id, M, N, ks, c mode); both paths run them (PATHS).
K_GROUPED_ONE_LAUNCH_CASES = [
    ("g1", 128, 576, [4096], "none"),
    ("g1_m100_n136_c", 100, 136, [1152], "sep"),
    ("g4_zero_first", 256, 2112, [0, 1024, 384, 2048], "sep"),
    ("g4_zero_middle", 256, 576, [640, 0, 0, 128], "in_place"),
    ("g4_zero_last", 128, 7168, [512, 1280, 256, 0], "none"),
    ("g4_all_zero_c", 128, 576, [0, 0, 0, 0], "sep"),
    ("g4_all_zero", 64, 200, [0, 0, 0, 0], "none"),
    ("g4_m100_n136", 100, 136, [256, 0, 640, 128], "sep"),
    ("g4_m100_n136_in_place", 100, 136, [384, 128, 0, 1024], "in_place"),
    ("g4_m100_n136_none", 100, 136, [0, 768, 128, 256], "none"),
    ("g4_issue_tiles", 4096, 7168, [1024, 512, 0, 768], "in_place"),  # the M, N (bm128 bn208 mcb)
    ("g16", 256, 1024, _draw_ks(16, 160, (0, 128, 512, 1024, 2048, 4096)), "sep"),
    ("g16_issue_tiles", 7168, 2048, _draw_ks(16, 161, (128, 256, 384)), "in_place"),
    ("g64", 64, 256, _draw_ks(64, 64), "in_place"),
    ("g64_m100_n136", 100, 136, _draw_ks(64, 65), "sep"),
    ("g80_two_launches", 64, 136, _draw_ks(80, 80), "sep"),
    ("g130_three_launches", 40, 144, _draw_ks(130, 130), "in_place"),
    ("g130_none", 96, 200, _draw_ks(130, 131), "none"),
]
PATHS = ("one_launch", "per_group")
# Forced (block_m, block_n, num_multicast, multicast_on_a) of the k-grouped kernel on
# FORCED_K_GROUPED = (M, N, ks) with c; the last also with G = 70 (two launches).
FORCED_K_GROUPED_CFGS = [(128, 208, 2, False), (128, 128, 2, True), (128, 144, 1, False), (64, 112, 1, False),
                         (64, 16, 2, True), (64, 208, 2, False)]
FORCED_K_GROUPED = (257, 1000, [0, 1152, 128, 640, 256])
FORCED_K_GROUPED_MANY = (72, 328, _draw_ks(70, 70))
K_GROUPED_REPEAT = ("repeat", 192, 1000, _draw_ks(80, 81), "sep")
K_GROUPED_GRAPH = (256, 576, [512, 0, 1024, 128, 384])
# Launch counting: (ks, expected launches = ceil(G / 64)) on M x N = K_GROUPED_LAUNCH_COUNT_MN.
K_GROUPED_LAUNCH_COUNT = [(_draw_ks(g, 7 + g, (128, 256)), -(-g // 64)) for g in (4, 130)]
K_GROUPED_LAUNCH_COUNT_MN = (64, 136)


def _rows(m, k, gen):
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    q, s = quant.per_token_cast_to_fp8(x)
    return x, q, s


def _inputs(m, n, k, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, a, sfa = _rows(m, k, gen)
    w, b, sfb = _rows(n, k, gen)
    return x, w, a, sfa, b, sfb


def _check(d, a, sfa, b, sfb, x=None, w=None, c=None):
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=c, out_dtype=torch.float64, recipe=RECIPE)
    diff = calc_diff(d, ref)
    assert diff <= 1e-5, f"vs exact dequantized reference: calc_diff {diff:.3e}"
    if x is not None:
        user = x.float() @ w.float().T
        if c is not None:
            user = user + c
        diff_u = calc_diff(d, user)
        assert diff_u <= 1e-3, f"vs unquantized fp32 product: calc_diff {diff_u:.3e}"


@pytest.mark.parametrize("m,n,k", DENSE_SHAPES)
def test_dense_1d1d(m, n, k):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m * 7 + n * 3 + k)
    d = torch.full((m, n), float("nan"), device="cuda")
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, recipe=RECIPE)
    _check(d, a, sfa, b, sfb, x, w)


@pytest.mark.parametrize("m,n,k", C_SHAPES)
@pytest.mark.parametrize("mode", ["sep", "in_place"])
def test_dense_1d1d_accumulate(m, n, k, mode):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k + (1 if mode == "sep" else 2))
    c = torch.randn(m, n, device="cuda") * 4
    if mode == "sep":
        d = torch.full((m, n), float("nan"), device="cuda")
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c, recipe=RECIPE)
        assert torch.isfinite(c).all()  # c untouched
    else:
        d = c.clone()
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=RECIPE)  # D = D + A.B
    _check(d, a, sfa, b, sfb, x, w, c)


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
def test_dense_1d1d_layouts(layout):
    m, n, k = LAYOUT_SHAPE
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=len(layout) + ord(layout[0]) + ord(layout[1]))
    a_arg = (a, sfa) if layout[0] == "n" else (a.t().contiguous(), sfa.t().contiguous())
    b_arg = (b, sfb) if layout[1] == "t" else (b.t().contiguous(), sfb.t().contiguous())
    c = torch.randn(m, n, device="cuda") * 4
    d = torch.full((m, n), float("nan"), device="cuda")
    getattr(finegemm, f"fp8_gemm_{layout}")(a_arg, b_arg, d, c=c, recipe=RECIPE)
    _check(d, a, sfa, b, sfb, x, w, c)


def _forced_select(bm, bn, mc, mc_a, splits):
    from finegemm.heuristics import sm90_fp8_gemm as h

    real = h.select_config

    def forced(m, n, k, num_sms, out_fp32=False, has_c=False, allow_split_k=True, allow_multicast=True,
               one_d_one_d=False, **kwargs):
        cfg = real(m, n, k, num_sms, out_fp32, has_c, allow_split_k, allow_multicast, one_d_one_d=one_d_one_d,
                   **kwargs)
        if not one_d_one_d:
            return cfg
        return forced_config(cfg, bm, bn, mc, mc_a, splits, num_sms)

    return forced


def forced_config(cfg, bm, bn, mc, mc_a, splits, num_sms):
    """cfg (a 1D1D plan) with the kernel configuration replaced (also used by scripts/precompile.py)."""
    from finegemm.heuristics import sm90_fp8_gemm as h

    st = h.max_stages(bm, bn, False, True)
    tiles, units = h._units(cfg.m, cfg.n, bm, bn, splits, mc, mc_a)
    return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st, num_splits=splits, num_multicast=mc,
                               multicast_on_a=mc == 2 and mc_a, num_tiles=tiles, num_units=units,
                               grid=h._grid(units, num_sms, mc), smem_bytes=h.smem_bytes(bm, bn, st, False, True),
                               num_threads=h.num_threads(bm), tma_store=False)


@pytest.mark.parametrize("bm,bn,mc,mc_a,splits", FORCED)
def test_forced_configs(bm, bn, mc, mc_a, splits, monkeypatch):
    """Each kernel variant through the real kernel (heuristic overridden): block_m 64/128, narrow
    and widest block_n, 2-CTA multicast on A and on B, split-K; with C."""
    from finegemm.ops import sm90_fp8_gemm as ops

    monkeypatch.setattr(ops, "select_config", _forced_select(bm, bn, mc, mc_a, splits))
    monkeypatch.setattr(ops, "_plans", {})
    m, n, k = FORCED_SHAPE
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=bm + bn + splits)
    c = torch.randn(m, n, device="cuda") * 4
    d = torch.full((m, n), float("nan"), device="cuda")
    call = ops.prepare(a, sfa, b, sfb, d, c, RECIPE)
    assert (call.cfg.block_m, call.cfg.block_n, call.cfg.num_splits) == (bm, bn, splits)
    call()
    _check(d, a, sfa, b, sfb, x, w, c)


@pytest.mark.parametrize("m,n,k", DET_SHAPES)
def test_dense_1d1d_deterministic(m, n, k):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=3)
    c = torch.randn(m, n, device="cuda")
    first = None
    for _ in range(5):
        d = torch.full((m, n), float("nan"), device="cuda")
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c, recipe=RECIPE)
        if first is None:
            first = d.clone()
        else:
            assert torch.equal(d.view(torch.int32), first.view(torch.int32)), "results differ between identical calls"
    _check(first, a, sfa, b, sfb, x, w, c)


# ----------------------------------------------------------------------------- k-grouped
def _k_grouped_problem(m, n, ks, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a_parts, b_parts, sfa_parts, sfb_parts = [], [], [], []
    for kg in ks:
        if kg == 0:
            continue
        _, a, sfa = _rows(m, kg, gen)
        _, b, sfb = _rows(n, kg, gen)
        a_parts.append(a.reshape(-1))
        b_parts.append(b.reshape(-1))
        sfa_parts.append(sfa.t())  # [kg/128, M]
        sfb_parts.append(sfb.t())
    fp8 = torch.float8_e4m3fn
    a = torch.cat(a_parts) if a_parts else torch.empty(0, dtype=fp8, device="cuda")
    b = torch.cat(b_parts) if b_parts else torch.empty(0, dtype=fp8, device="cuda")
    sfa = torch.cat(sfa_parts).contiguous() if sfa_parts else torch.empty(0, m, device="cuda")
    sfb = torch.cat(sfb_parts).contiguous() if sfb_parts else torch.empty(0, n, device="cuda")
    return a, sfa, b, sfb


def _run_k_grouped(a, sfa, b, sfb, m, n, ks, mode, c0):
    g = len(ks)
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    if mode == "in_place":
        d = c0.clone()
        finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=d)
    else:
        d = torch.full((g, m, n), float("nan"), device="cuda")
        finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=c0 if mode == "sep" else None)
    return d


@pytest.mark.parametrize("case", K_GROUPED_CASES, ids=[c[0] for c in K_GROUPED_CASES])
def test_k_grouped(case):
    _, m, n, ks, mode = case
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=m + n + sum(ks))
    c0 = None if mode == "none" else torch.randn(len(ks), m, n, device="cuda") * 4
    d = _run_k_grouped(a, sfa, b, sfb, m, n, ks, mode, c0)
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    ref = reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n, c=c0)
    for g, kg in enumerate(ks):
        if kg == 0:
            expect = torch.zeros(m, n, device="cuda") if c0 is None else c0[g]
            assert torch.equal(d[g], expect), f"group {g} (k_g = 0) must be C_g or zeros"
        else:
            diff = calc_diff(d[g], ref[g])
            assert diff <= 1e-5, f"group {g} (k_g = {kg}): calc_diff {diff:.3e}"


def _as_tn(flat, m, ks):
    """The nt layout's groups as DeepGEMM's tn operand [sum(ks), m], with a padded row pitch (the tn
    function copies it)."""
    from finegemm.bench.grouped import k_grouped_tn_operand

    tn = k_grouped_tn_operand(flat, m, ks)
    padded = torch.empty(tn.shape[0], m + 16, dtype=tn.dtype, device=tn.device)
    padded[:, :m] = tn
    return padded[:, :m]


def _k_major_want(x, ks):
    want, start = [], 0
    for k in ks:
        want.append(x[start:start + k].view(torch.uint8).t().reshape(-1))
        start += k
    return torch.cat(want)


# (cols, ks, pitch): the word kernel (cols or pitch not multiples of 16, rows not multiples of 16) and
# the grouped kernel (partial column tiles: 2112 = 16.5 x 128, 48, 272; 70 groups: two launches)
K_MAJOR_COPY_CASES = [(1, [128], 0), (17, [128, 0, 384], 5), (136, [256, 128], 0), (4096, [1024, 0, 128, 2048], 16),
                      (7168, [128], 0), (33, [3, 70], 1), (2112, [128, 256, 0, 384], 0), (48, [128] * 70, 16),
                      (272, [384, 128], 32), (4096, [128, 136, 256], 0)]


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "per_group"])
@pytest.mark.parametrize("cols, ks, pitch", K_MAJOR_COPY_CASES)
def test_k_major_copy_matches_torch(cols, ks, pitch, grouped):
    """finegemm.ops.k_major_copy (the tn GEMM's tiled transpose kernels): bitwise the torch copy, for
    partial tiles, padded row pitches, empty groups and more groups than one grouped launch takes."""
    from finegemm.ops.k_major_copy import k_major_groups

    gen = torch.Generator(device="cuda").manual_seed(cols + sum(ks))
    rows = sum(ks)
    buf = torch.randint(0, 255, (rows, cols + pitch), device="cuda", generator=gen, dtype=torch.uint8)
    x = buf[:, :cols].view(torch.float8_e4m3fn)
    got = k_major_groups(x, cols, ks, grouped=grouped)
    assert torch.equal(got.view(torch.uint8), _k_major_want(x, ks))


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "per_group"])
@pytest.mark.parametrize("g, r, c, view", [(4, 7168, 2048, "plain"), (3, 200, 1000, "plain"), (2, 512, 576, "row_pitch"),
                                           (3, 256, 144, "group_gap"), (2, 128, 64, "not_unit_stride")])
def test_k_major_batched_matches_torch(g, r, c, view, grouped):
    """finegemm.ops.k_major_copy.k_major_batched (the FP8 nn contiguous GEMM's [G, K, N] -> [G, N, K]
    copy): bitwise torch's transpose, for aligned and unaligned sizes and strided views."""
    from finegemm.ops.k_major_copy import k_major_batched

    gen = torch.Generator(device="cuda").manual_seed(g * r + c)
    if view == "row_pitch":
        x = torch.randint(0, 255, (g, r, c + 16), device="cuda", dtype=torch.uint8, generator=gen)[:, :, :c]
    elif view == "group_gap":
        x = torch.randint(0, 255, (g, r + 3, c), device="cuda", dtype=torch.uint8, generator=gen)[:, :r]
    elif view == "not_unit_stride":
        x = torch.randint(0, 255, (g, c, r), device="cuda", dtype=torch.uint8, generator=gen).transpose(1, 2)
    else:
        x = torch.randint(0, 255, (g, r, c), device="cuda", dtype=torch.uint8, generator=gen)
    got = k_major_batched(x.view(torch.float8_e4m3fn), grouped=grouped)
    assert got.shape == (g, c, r) and got.is_contiguous()
    assert torch.equal(got.view(torch.uint8), x.transpose(1, 2).contiguous())


def test_k_major_copies_write_nothing_else(monkeypatch):
    """Both operands' groups in one grouped launch (B with a padded pitch and a 16-byte offset), the
    outputs placed inside poisoned buffers: every byte around them keeps its poison."""
    from finegemm.ops import k_major_copy as kc

    ks = [256, 0, 128, 384]
    a = torch.randint(0, 255, (sum(ks), 2112), device="cuda", dtype=torch.uint8)
    b_buf = torch.randint(0, 255, (sum(ks), 7168 + 48), device="cuda", dtype=torch.uint8)
    b = b_buf[:, 16:7168 + 16]
    guards = []
    real_empty = torch.empty

    def guarded_empty(n, dtype=None, device=None):  # the outputs: slices of poisoned buffers with 4 KB each side
        buf = torch.full((n + 8192,), 0x5A, dtype=torch.uint8, device=device)
        guards.append((buf, n))
        return buf[4096:4096 + n].view(dtype)

    monkeypatch.setattr(kc.torch, "empty", guarded_empty)
    launches = []
    real_launch = kc._launch_grouped
    monkeypatch.setattr(kc, "_launch_grouped", lambda launch, fn, stream: (launches.append(len(launch)),
                                                                          real_launch(launch, fn, stream)))
    got_a, got_b = kc.k_major_copies([(a.view(torch.float8_e4m3fn), 2112), (b.view(torch.float8_e4m3fn), 7168)], ks)
    monkeypatch.setattr(kc.torch, "empty", real_empty)
    assert launches == [6]  # three non-empty groups of each operand, one launch
    assert torch.equal(got_a.view(torch.uint8), _k_major_want(a.view(torch.float8_e4m3fn), ks))
    assert torch.equal(got_b.view(torch.uint8), _k_major_want(b.view(torch.float8_e4m3fn), ks))
    for buf, n in guards:
        assert bool((buf[:4096] == 0x5A).all()) and bool((buf[4096 + n:] == 0x5A).all()), "bytes written outside the output"


@pytest.mark.parametrize("case", K_GROUPED_CASES, ids=[c[0] for c in K_GROUPED_CASES])
def test_k_grouped_tn_matches_nt(case):
    """k_grouped_fp8_gemm_tn_contiguous (DeepGEMM's SM90 layout) on the same problem: bitwise the nt
    call's result (it copies each group K-major and runs the same kernel), empty groups included."""
    _, m, n, ks, mode = case
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=m + n + sum(ks) + 1)
    c0 = None if mode == "none" else torch.randn(len(ks), m, n, device="cuda")
    want = _run_k_grouped(a, sfa, b, sfb, m, n, ks, mode, c0)
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    at, bt = _as_tn(a, m, ks), _as_tn(b, n, ks)
    if mode == "in_place":
        d = c0.clone()
        finegemm.k_grouped_fp8_gemm_tn_contiguous((at, sfa), (bt, sfb), d, ks, ks_t, c=d)
    else:
        d = torch.full((len(ks), m, n), float("nan"), device="cuda")
        finegemm.k_grouped_fp8_gemm_tn_contiguous((at, sfa), (bt, sfb), d, ks, ks_t, c=c0 if mode == "sep" else None)
    assert torch.equal(d.view(torch.int32), want.view(torch.int32))


def _k_grouped_repeats(case, seed, times):
    """The first result of `times` identical k-grouped calls, each asserted bitwise equal to it."""
    _, m, n, ks, mode = case
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=seed)
    c0 = torch.randn(len(ks), m, n, device="cuda")
    first = None
    for _ in range(times):
        d = _run_k_grouped(a, sfa, b, sfb, m, n, ks, mode, c0)
        if first is None:
            first = d.clone()
        else:
            assert torch.equal(d.view(torch.int32), first.view(torch.int32)), "results differ between identical calls"
    return first, (a, sfa, b, sfb, m, n, ks, c0)


def test_k_grouped_deterministic():
    first, (a, sfa, b, sfb, m, n, ks, c0) = _k_grouped_repeats(K_GROUPED_DET, seed=99, times=5)
    ref = reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n, c=c0)
    assert calc_diff(first, ref) <= 1e-5


# ----------------------------------------------------------------------------- k-grouped, one launch
def _set_path(monkeypatch, path):
    from finegemm.ops import sm90_fp8_gemm as ops

    monkeypatch.setattr(ops, "K_GROUPED_SINGLE_LAUNCH", path == "one_launch")


def _check_k_grouped(d, a, sfa, b, sfb, m, n, ks, c0):
    """d against the exact reference: no NaN left, calc_diff <= 1e-5 per non-empty group, every
    element within 2e-3 of the group's largest |reference| (a wrong tile, group, k-block or a
    missing C is off by O(1) of that scale), and empty groups exactly C_g (or zeros)."""
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    ref = reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n, c=c0)
    for g, kg in enumerate(ks):
        if kg == 0:
            expect = torch.zeros(m, n, device="cuda") if c0 is None else c0[g]
            assert torch.equal(d[g], expect), f"group {g} (k_g = 0) must be C_g or zeros"
            continue
        diff = calc_diff(d[g], ref[g])
        assert diff <= 1e-5, f"group {g} (k_g = {kg}): calc_diff {diff:.3e}"
        err = (d[g].double() - ref[g].double()).abs().max().item()
        bound = 2e-3 * ref[g].double().abs().max().item() + 1e-6
        assert err <= bound, f"group {g} (k_g = {kg}): max |d - ref| = {err:.3e} > {bound:.3e}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", K_GROUPED_ONE_LAUNCH_CASES, ids=[c[0] for c in K_GROUPED_ONE_LAUNCH_CASES])
def test_k_grouped_one_launch(case, path, monkeypatch):
    _set_path(monkeypatch, path)
    _, m, n, ks, mode = case
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=m * 3 + n + sum(ks) + len(ks))
    c0 = None if mode == "none" else torch.randn(len(ks), m, n, device="cuda") * 4
    c_keep = None if c0 is None else c0.clone()
    d = _run_k_grouped(a, sfa, b, sfb, m, n, ks, mode, c0)
    if mode == "sep":
        assert torch.equal(c0, c_keep), "a separate c must stay untouched"
    _check_k_grouped(d, a, sfa, b, sfb, m, n, ks, c_keep)


def test_k_grouped_one_launch_is_one_launch_per_64_groups(monkeypatch):
    """The one-launch path really launches ceil(G / 64) kernels (no per-group launches): counted
    with the profiler on a G = 4 and a G = 130 problem."""
    from torch.profiler import ProfilerActivity, profile

    from finegemm.ops import sm90_fp8_k_grouped as kg

    _set_path(monkeypatch, "one_launch")
    m, n = K_GROUPED_LAUNCH_COUNT_MN
    for ks, expect in K_GROUPED_LAUNCH_COUNT:
        g = len(ks)
        assert expect == -(-g // kg.max_groups_per_launch())
        a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=g)
        d = torch.empty(g, m, n, device="cuda")
        _run_k_grouped(a, sfa, b, sfb, m, n, ks, "none", None)  # compile + plan outside the profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks,
                                                       torch.tensor(ks, dtype=torch.int32, device="cuda"))
            torch.cuda.synchronize()
        launches = [e for e in prof.events() if e.device_type.name == "CUDA" and "finegemm_entry" in e.name]
        assert len(launches) == expect, [e.name for e in prof.events() if e.device_type.name == "CUDA"]
        _check_k_grouped(d, a, sfa, b, sfb, m, n, ks, None)


def _forced_k_grouped(m, n, ks, has_c, bm, bn, mc, mc_a):
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h

    active, k_plan = h.k_grouped_plan_k(ks)
    return h.make_k_grouped_config(m, n, k_plan, len(ks), active, runtime.get_num_sms(), has_c, bm, bn,
                                   h.max_stages(bm, bn, False, True), mc, mc_a)


@pytest.mark.parametrize("bm,bn,mc,mc_a", FORCED_K_GROUPED_CFGS)
def test_k_grouped_forced_configs(bm, bn, mc, mc_a):
    """Each k-grouped kernel variant (heuristic overridden): block_m 64 / 128, narrow and widest
    block_n, no cluster, multicast on A and on B; with c, M and N off the block grid."""
    from finegemm.ops import sm90_fp8_k_grouped as kg

    problems = [FORCED_K_GROUPED] + ([FORCED_K_GROUPED_MANY] if (bm, bn) == (64, 208) else [])
    for m, n, ks in problems:
        a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=bm + bn + mc + len(ks))
        c0 = torch.randn(len(ks), m, n, device="cuda") * 4
        d = torch.full((len(ks), m, n), float("nan"), device="cuda")
        cfg = _forced_k_grouped(m, n, ks, True, bm, bn, mc, mc_a)
        kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c0, config=cfg)
        _check_k_grouped(d, a, sfa, b, sfb, m, n, ks, c0)


@pytest.mark.parametrize("mode", ["sep", "in_place", "none"])
def test_k_grouped_strided_d_and_c(mode, monkeypatch):
    """d (and c) whose group stride is not M rows, c with another row pitch than d: computed
    through compact copies, d's padding rows and columns untouched."""
    _set_path(monkeypatch, "one_launch")
    m, n, ks = 100, 136, [256, 0, 384, 128]
    g = len(ks)
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=5)
    big = torch.full((g, m + 3, n + 4), 7.0, device="cuda")
    d = big[:, :m, :n]
    c0 = torch.randn(g, m, n, device="cuda") * 4
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    if mode == "in_place":
        d.copy_(c0)
        finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=d)
    else:
        d.fill_(float("nan"))
        c_arg = None
        if mode == "sep":
            c_big = torch.zeros(g, m, n + 8, device="cuda")
            c_big[..., :n] = c0
            c_arg = c_big[..., :n]
        finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=c_arg)
    _check_k_grouped(d, a, sfa, b, sfb, m, n, ks, None if mode == "none" else c0)
    assert (big[:, m:, :] == 7.0).all() and (big[:, :, n:] == 7.0).all(), "padding of d written"


@pytest.mark.parametrize("path", PATHS)
def test_k_grouped_one_launch_bitwise_repeat(path, monkeypatch):
    _set_path(monkeypatch, path)
    first, (a, sfa, b, sfb, m, n, ks, c0) = _k_grouped_repeats(K_GROUPED_REPEAT, seed=123, times=4)
    _check_k_grouped(first, a, sfa, b, sfb, m, n, ks, c0)


def test_k_grouped_one_launch_cuda_graph(monkeypatch):
    """Captured once, replayed with new A, B, scales and C in the same tensors (the group table
    and tensor maps are captured by value: same addresses, same ks)."""
    _set_path(monkeypatch, "one_launch")
    m, n, ks = K_GROUPED_GRAPH
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=31)
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    c0 = torch.randn(len(ks), m, n, device="cuda")
    d = torch.full((len(ks), m, n), float("nan"), device="cuda")
    finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=c0)  # compile + plan
    torch.cuda.synchronize()
    graph = capture_graph(lambda: finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=c0))
    for seed in (1, 2, 3):
        a2, sfa2, b2, sfb2 = _k_grouped_problem(m, n, ks, seed=200 + seed)
        a.copy_(a2)
        sfa.copy_(sfa2)
        b.copy_(b2)
        sfb.copy_(sfb2)
        c0.copy_(torch.randn(len(ks), m, n, device="cuda"))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_k_grouped(d, a, sfa, b, sfb, m, n, ks, c0)


# ----------------------------------------------------------------------------- fp32 TMA epilogue
def _prepared_flags(call) -> int:
    import ctypes

    from finegemm import jit

    f = jit.host_library().fg_sm90_fp8_gemm_prepared_flags
    f.argtypes, f.restype = [ctypes.c_uint64], ctypes.c_int
    return f(call._handle)


def tma_epilogue_config(cfg, bm, bn, mc, mc_a, tma, num_sms, half_promote=False, k_batch=1, c_stage=False):
    """cfg (a 1D1D plan) with (bm, bn, multicast), the TMA epilogue on or off, half-promote,
    k-block batches and the C stage (also used by scripts/precompile.py)."""
    from finegemm.heuristics import sm90_fp8_gemm as h

    stages = h.max_stages(bm, bn, tma, True, c_stage=c_stage)
    return h.make_config(cfg.m, cfg.n, cfg.k, num_sms, True, cfg.has_c, bm, bn, stages, 1, mc, mc_a, tma, half_promote,
                         one_d_one_d=True, k_batch=k_batch, c_stage=c_stage)


def c_stage_configs(m, n, k, bm, bn, mc, mc_a, kbat, num_sms):
    """(c_stage, direct from global memory, TMA epilogue) configs of one C_STAGE_CFGS case, with C
    (also used by scripts/precompile.py)."""
    from finegemm.heuristics import sm90_fp8_gemm as h

    plan = h.select_config(m, n, k, num_sms, True, True, one_d_one_d=True)
    return (tma_epilogue_config(plan, bm, bn, mc, mc_a, False, num_sms, k_batch=kbat, c_stage=True),
            tma_epilogue_config(plan, bm, bn, mc, mc_a, False, num_sms, k_batch=kbat),
            tma_epilogue_config(plan, bm, bn, mc, mc_a, True, num_sms, k_batch=kbat))


@pytest.mark.parametrize("bm,bn,mc,mc_a,kbat", C_STAGE_CFGS)
@pytest.mark.parametrize("m,n,k", C_STAGE_SHAPES)
def test_dense_1d1d_c_stage(m, n, k, bm, bn, mc, mc_a, kbat):
    """C through shared memory (the producer's TMA loads) against the reference and bitwise equal
    to the same tile's C from global memory and (c = d) to the TMA reduce-add: the same fp32 add of
    C to the tile. c = d and a separate c (poisoned d); partial tiles at every edge (N = 200 and
    1000: a tile's last boxes are partly or wholly past N; M = 1, 257, 4097: past M)."""
    from finegemm import runtime
    from finegemm.ops import sm90_fp8_gemm as ops

    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k + bm + bn + kbat)
    sfa_t, sfb_t = quant.get_mn_major_tma_aligned_tensor(sfa), quant.get_mn_major_tma_aligned_tensor(sfb)
    c0 = torch.randn(m, n, device="cuda") * 4
    cst, direct, tma = c_stage_configs(m, n, k, bm, bn, mc, mc_a, kbat, runtime.get_num_sms())
    assert cst.c_stage and not direct.c_stage and tma.tma_store
    for mode in ("in_place", "sep"):
        out = {}
        for name, cfg in (("c_stage", cst), ("direct", direct), ("tma", tma)):
            if name == "tma" and mode == "sep":
                continue  # a separate c keeps the direct epilogue
            d = c0.clone() if mode == "in_place" else torch.full((m, n), float("nan"), device="cuda")
            call = ops._prepare_1d1d_kernel(a, sfa_t, b, sfb_t, d, d if mode == "in_place" else c0, cfg)
            call()
            torch.cuda.synchronize()
            if name != "tma":
                assert _prepared_flags(call) & 4, f"{name}: no map over C (c {mode})"
            out[name] = d
        _check(out["c_stage"], a, sfa, b, sfb, x, w, c0)
        for name in out:
            assert torch.equal(out["c_stage"].view(torch.int32), out[name].view(torch.int32)), \
                f"C stage and {name} epilogues differ (c {mode})"


@pytest.mark.parametrize("pad", [4, 2])
def test_dense_1d1d_c_stage_strided_c(pad):
    """A separate c with a row pitch of n + pad (d's pitch alike): a pitch of 16 bytes' multiple is
    staged through TMA, another is read from global memory by the same kernel (no map over C); the
    padding columns of d stay untouched either way."""
    from finegemm import runtime
    from finegemm.ops import sm90_fp8_gemm as ops

    m, n, k = 257, 1000, 640
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=100 + pad)
    big_d = torch.full((m, n + pad), 7.0, device="cuda")
    d = big_d[:, :n]
    big_c = torch.randn(m, n + pad, device="cuda")
    c = big_c[:, :n]
    cst = c_stage_configs(m, n, k, 128, 128, 1, False, 1, runtime.get_num_sms())[0]
    call = ops._prepare_1d1d_kernel(a, quant.get_mn_major_tma_aligned_tensor(sfa), b,
                                    quant.get_mn_major_tma_aligned_tensor(sfb), d, c, cst)
    call()
    torch.cuda.synchronize()
    assert bool(_prepared_flags(call) & 4) == (pad % 4 == 0)
    _check(d, a, sfa, b, sfb, x, w, c.clone())
    assert (big_d[:, n:] == 7.0).all(), "padding of d written"


# Two CTAs per SM with the register split (kCtasPerSm): (block_n, multicast, c_stage).
TWO_CTA_CFGS = [(128, 1, False), (128, 2, True), (96, 1, True), (160, 2, False), (64, 1, False)]
TWO_CTA_SHAPES = [(257, 1000, 1152), (4097, 576, 512), (1, 200, 384), (130, 4096, 128)]


def two_cta_configs(m, n, k, bn, mc, c_stage, has_c, num_sms):
    """(two CTAs per SM, the same tile with one CTA per SM) recipe (1, 1, 128) configs, block_m 64,
    the direct epilogue (also used by scripts/precompile.py)."""
    from finegemm.heuristics import sm90_fp8_gemm as h

    c_stage = c_stage and has_c
    stages = min(h.max_stages(64, bn, False, True, 2, c_stage=c_stage), 4)
    two = h.make_config(m, n, k, num_sms, True, has_c, 64, bn, stages, 1, mc, False, False, one_d_one_d=True,
                        ctas_per_sm=2, c_stage=c_stage)
    return two, dataclasses.replace(two, ctas_per_sm=1, grid=min(two.grid, num_sms))


@pytest.mark.parametrize("bn,mc,cst", TWO_CTA_CFGS)
@pytest.mark.parametrize("m,n,k", TWO_CTA_SHAPES)
def test_dense_1d1d_two_cta(m, n, k, bn, mc, cst):
    """block_m 64 built for two CTAs per SM (the producer's registers handed to the consumer
    warpgroup): the driver fits two per SM (a grid of 2 x SMs survives the occupancy check, so
    both CTAs really share SMs), and the result is the reference's and bitwise the one-CTA build's
    (the same tile and promotion order): without C, c = d and a separate c (poisoned d)."""
    from finegemm import runtime
    from finegemm.ops import sm90_fp8_gemm as ops

    num_sms = runtime.get_num_sms()
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k + bn + mc)
    sfa_t, sfb_t = quant.get_mn_major_tma_aligned_tensor(sfa), quant.get_mn_major_tma_aligned_tensor(sfb)
    c0 = torch.randn(m, n, device="cuda") * 4
    for mode in ("no_c", "in_place", "sep"):
        two, one = two_cta_configs(m, n, k, bn, mc, cst, mode != "no_c", num_sms)
        if two.num_units >= 2 * num_sms:
            fitted, _ = ops.plan(m, n, k, True, two.has_c, torch.cuda.current_device(), True, config=two)
            assert fitted.grid == two.grid == 2 * num_sms, f"two CTAs per SM did not fit: grid {fitted.grid}"
        out = {}
        for name, cfg in (("two", two), ("one", one)):
            if mode == "in_place":
                d = c0.clone()
            else:
                d = torch.full((m, n), float("nan"), device="cuda")
            c = None if mode == "no_c" else (d if mode == "in_place" else c0)
            ops._prepare_1d1d_kernel(a, sfa_t, b, sfb_t, d, c, cfg)()
            torch.cuda.synchronize()
            out[name] = d
        _check(out["two"], a, sfa, b, sfb, x, w, None if mode == "no_c" else c0)
        assert torch.equal(out["two"].view(torch.int32), out["one"].view(torch.int32)), \
            f"two-CTA and one-CTA builds differ ({mode})"


@pytest.mark.parametrize("bm,bn,mc,mc_a", TMA_EPI_CFGS)
@pytest.mark.parametrize("m,n,k", TMA_EPI_SHAPES)
def test_dense_1d1d_tma_epilogue(m, n, k, bm, bn, mc, mc_a):
    """The TMA epilogue against the reference, and bitwise equal to the same tile's direct
    epilogue (the same fp32 add, only performed at L2): c None (TMA store), c = d (TMA reduce-add),
    a separate c (the host keeps direct stores); partial tiles at every edge."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k + bm + bn)
    c0 = torch.randn(m, n, device="cuda") * 4
    for mode in ("none", "in_place", "sep"):
        has_c = mode != "none"
        plan = h.select_config(m, n, k, runtime.get_num_sms(), True, has_c, one_d_one_d=True)
        out = {}
        for tma in (True, False):
            cfg = tma_epilogue_config(plan, bm, bn, mc, mc_a, tma, runtime.get_num_sms())
            d = c0.clone() if mode == "in_place" else torch.full((m, n), float("nan"), device="cuda")
            c = {"none": None, "in_place": d, "sep": c0}[mode]
            call = ops._prepare_1d1d_kernel(a, quant.get_mn_major_tma_aligned_tensor(sfa), b,
                                            quant.get_mn_major_tma_aligned_tensor(sfb), d, c, cfg)
            call()
            torch.cuda.synchronize()
            flags = _prepared_flags(call)
            used = bool(flags & 2)
            assert used == (tma and mode != "sep"), f"TMA epilogue in use: {used} (tma_store={tma}, c {mode})"
            # The direct epilogue with C gets a map over C for the producer's L2 prefetch (flag 4).
            assert bool(flags & 4) == (has_c and not used), f"C prefetch map: flags {flags} (tma_store={tma}, c {mode})"
            out[tma] = d
        _check(out[True], a, sfa, b, sfb, x, w, None if mode == "none" else c0)
        assert torch.equal(out[True].view(torch.int32), out[False].view(torch.int32)), \
            f"TMA and direct epilogues differ (c {mode})"


@pytest.mark.parametrize("pad", [4, 2])
def test_dense_1d1d_tma_epilogue_strided_d(pad):
    """d with a row pitch of n + pad: a pitch of 16 bytes' multiple takes the TMA epilogue, another
    falls back to direct stores; the padding columns stay untouched either way."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    m, n, k = 257, 1000, 640
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=pad)
    big = torch.full((m, n + pad), 7.0, device="cuda")
    d = big[:, :n]
    c0 = torch.randn(m, n, device="cuda")
    d.copy_(c0)
    plan = h.select_config(m, n, k, runtime.get_num_sms(), True, True, one_d_one_d=True)
    cfg = tma_epilogue_config(plan, 128, 128, 1, False, True, runtime.get_num_sms())
    call = ops._prepare_1d1d_kernel(a, quant.get_mn_major_tma_aligned_tensor(sfa), b,
                                    quant.get_mn_major_tma_aligned_tensor(sfb), d, d, cfg)
    call()
    torch.cuda.synchronize()
    flags = _prepared_flags(call)
    assert bool(flags & 2) == (pad % 4 == 0)
    assert not flags & 4, "a C prefetch map with the TMA epilogue, or over a pitch TMA cannot address"
    _check(d, a, sfa, b, sfb, x, w, c0)
    assert (big[:, n:] == 7.0).all(), "padding of d written"


@pytest.mark.parametrize("mode", ["none", "in_place", "sep"])
@pytest.mark.parametrize("bm,bn,mc,mc_a", TMA_EPI_CFGS[:3])
def test_k_grouped_tma_epilogue(bm, bn, mc, mc_a, mode):
    """The k-grouped kernel with the TMA epilogue: M = 100 is off the 64-row box grid, so a box of
    a group's last tile reaches into the next group's rows unless the 3-D map drops them; empty
    groups (C_g or zeros); bitwise equal to the direct epilogue."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_k_grouped as kg

    m, n, ks = 100, 1000, [256, 0, 1152, 128, 640]
    g = len(ks)
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=bm + bn + len(mode))
    c0 = torch.randn(g, m, n, device="cuda") * 4
    active, k_plan = h.k_grouped_plan_k(ks)
    out = {}
    for tma in (True, False):
        cfg = h.make_k_grouped_config(m, n, k_plan, g, active, runtime.get_num_sms(), mode != "none", bm, bn,
                                      h.max_stages(bm, bn, tma, True), mc, mc_a, tma_store=tma)
        d = c0.clone() if mode == "in_place" else torch.full((g, m, n), float("nan"), device="cuda")
        c = {"none": None, "in_place": d, "sep": c0}[mode]
        kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c, config=cfg)
        out[tma] = d
    _check_k_grouped(out[True], a, sfa, b, sfb, m, n, ks, None if mode == "none" else c0)
    assert torch.equal(out[True].view(torch.int32), out[False].view(torch.int32)), "TMA and direct epilogues differ"


def test_tma_reduce_add_keeps_subnormal_c():
    """c = d holding fp32 subnormals where A @ B^T is zero (zero rows of A): the reduce-add must
    leave them as the direct epilogue does (C + 0 = C), not flush them to zero."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    m, n, k = 128, 256, 256
    _, _, a, sfa, b, sfb = _inputs(m, n, k, seed=11)
    a = a.clone()
    a[:64].view(torch.uint8).zero_()  # +0.0 in e4m3
    c0 = torch.randn(m, n, device="cuda") * 1e-39  # subnormal fp32 (< 1.18e-38)
    assert (c0.abs() < 1.17e-38).all() and (c0 != 0).any()
    plan = h.select_config(m, n, k, runtime.get_num_sms(), True, True, one_d_one_d=True)
    cfg = tma_epilogue_config(plan, 128, 128, 1, False, True, runtime.get_num_sms())
    d = c0.clone()
    call = ops._prepare_1d1d_kernel(a, quant.get_mn_major_tma_aligned_tensor(sfa), b,
                                    quant.get_mn_major_tma_aligned_tensor(sfb), d, d, cfg)
    call()
    torch.cuda.synchronize()
    assert bool(_prepared_flags(call) & 2)
    changed = d[:64].view(torch.int32) != c0[:64].view(torch.int32)
    assert not changed.any(), (
        f"{int(changed.sum())} of {changed.numel()} zero-product elements changed ({int((d[:64][changed] == 0).sum())} "
        f"to zero): d {d[:64][changed][:6].tolist()} vs c {c0[:64][changed][:6].tolist()}, at "
        f"{changed.nonzero()[:6].tolist()}")


# ----------------------------------------------------------------------------- half-promote, k-block batches
def _dense_twins(m, n, k, bm, bn, mc, mc_a, tma, seed, variant, what):
    """The tile with `variant` (make_config keywords) against the reference, and bitwise equal to
    the same tile without it (each output's wgmma dot products and promotion order are the same),
    with c None and c = d."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=seed)
    c0 = torch.randn(m, n, device="cuda") * 4
    for mode in ("none", "in_place"):
        plan = h.select_config(m, n, k, runtime.get_num_sms(), True, mode != "none", one_d_one_d=True)
        out = {}
        for on in (True, False):
            cfg = tma_epilogue_config(plan, bm, bn, mc, mc_a, tma, runtime.get_num_sms(), **(variant if on else {}))
            d = c0.clone() if mode == "in_place" else torch.full((m, n), float("nan"), device="cuda")
            ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d if mode == "in_place" else None, cfg)()
            out[on] = d
        _check(out[True], a, sfa, b, sfb, x, w, None if mode == "none" else c0)
        assert torch.equal(out[True].view(torch.int32), out[False].view(torch.int32)), \
            f"{what} and the plain tile differ (c {mode})"


def _k_grouped_twins(bm, bn, mc, mc_a, tma, seed, variant, what):
    """The k-grouped kernel with `variant` (groups of 1, 2, 5 and 9 k-blocks and an empty one, M off
    the block grid, c = d), bitwise equal to the same tile without it."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_k_grouped as kg

    m, n, ks = 100, 1000, [256, 0, 1152, 128, 640]
    g = len(ks)
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=seed)
    c0 = torch.randn(g, m, n, device="cuda") * 4
    active, k_plan = h.k_grouped_plan_k(ks)
    out = {}
    for on in (True, False):
        cfg = h.make_k_grouped_config(m, n, k_plan, g, active, runtime.get_num_sms(), True, bm, bn,
                                      h.max_stages(bm, bn, tma, True), mc, mc_a, tma_store=tma, **(variant if on else {}))
        d = c0.clone()
        kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, d, config=cfg)
        out[on] = d
    _check_k_grouped(out[True], a, sfa, b, sfb, m, n, ks, c0)
    assert torch.equal(out[True].view(torch.int32), out[False].view(torch.int32)), f"{what} and the plain tile differ"


@pytest.mark.parametrize("bm,bn,mc,mc_a,tma", HALF_PROMOTE_CFGS)
@pytest.mark.parametrize("m,n,k", TMA_EPI_SHAPES)
def test_dense_1d1d_half_promote(m, n, k, bm, bn, mc, mc_a, tma):
    _dense_twins(m, n, k, bm, bn, mc, mc_a, tma, m + 2 * n + k + bm + bn, {"half_promote": True}, "half-promote")


@pytest.mark.parametrize("bm,bn,mc,mc_a,tma", HALF_PROMOTE_CFGS[:3])
def test_k_grouped_half_promote(bm, bn, mc, mc_a, tma):
    _k_grouped_twins(bm, bn, mc, mc_a, tma, bm + bn + 7, {"half_promote": True}, "half-promote")


@pytest.mark.parametrize("bm,bn,mc,mc_a,tma,kbat", KBATCH_CFGS)
@pytest.mark.parametrize("m,n,k", TMA_EPI_SHAPES)
def test_dense_1d1d_k_batch(m, n, k, bm, bn, mc, mc_a, tma, kbat):
    """K = 384 / 512 / 1152: 3, 4 and 9 k-blocks, so whole batches and remainders."""
    _dense_twins(m, n, k, bm, bn, mc, mc_a, tma, m + 3 * n + k + bn + kbat, {"k_batch": kbat}, f"k_batch {kbat}")


@pytest.mark.parametrize("bm,bn,mc,mc_a,tma,kbat", KBATCH_CFGS[:3])
def test_k_grouped_k_batch(bm, bn, mc, mc_a, tma, kbat):
    _k_grouped_twins(bm, bn, mc, mc_a, tma, bm + bn + kbat, {"k_batch": kbat}, f"k_batch {kbat}")


# ----------------------------------------------------------------------------- block_m 192
# Three consumer warpgroups (only the tuner proposes them): (block_n, tma_store, half_promote).
THREE_WG_1D1D = [(96, True, False), (112, False, False), (128, True, True), (144, True, False), (144, False, True)]
# k-grouped (M, N, ks): one partial m-block per group; one full and one partial.
THREE_WG_K_GROUPED = [(100, 1000, [256, 0, 1152, 128, 640]), (200, 576, [640, 384])]


@pytest.mark.parametrize("bn,tma,hp", THREE_WG_1D1D)
@pytest.mark.parametrize("m,n,k", TMA_EPI_SHAPES)
def test_dense_1d1d_three_warpgroups(m, n, k, bn, tma, hp):
    """block_m 192 against the reference and bitwise equal to block_m 128 at the same block_n and
    epilogue (each output's dot products and promotion order are the same), c None and c = d."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + 5 * n + k + bn)
    c0 = torch.randn(m, n, device="cuda") * 4
    sms = runtime.get_num_sms()
    for mode in ("none", "in_place"):
        out = {}
        for bm in (192, 128):
            cfg = h.make_config(m, n, k, sms, True, mode != "none", bm, bn, h.max_stages(bm, bn, tma, True), 1, 1,
                                False, tma, hp, one_d_one_d=True)
            d = c0.clone() if mode == "in_place" else torch.full((m, n), float("nan"), device="cuda")
            ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d if mode == "in_place" else None, cfg)()
            out[bm] = d
        _check(out[192], a, sfa, b, sfb, x, w, None if mode == "none" else c0)
        assert torch.equal(out[192].view(torch.int32), out[128].view(torch.int32)), \
            f"block_m 192 and 128 differ (c {mode})"


@pytest.mark.parametrize("bn,tma,hp", THREE_WG_1D1D[:3])
def test_k_grouped_three_warpgroups(bn, tma, hp):
    """The k-grouped kernel at block_m 192 (M = 100 and 200: one partial m-block per group, and one
    full + one partial), bitwise equal to block_m 128."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_k_grouped as kg

    for m, n, ks in THREE_WG_K_GROUPED:
        g = len(ks)
        a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=m + bn)
        c0 = torch.randn(g, m, n, device="cuda") * 4
        active, k_plan = h.k_grouped_plan_k(ks)
        out = {}
        for bm in (192, 128):
            cfg = h.make_k_grouped_config(m, n, k_plan, g, active, runtime.get_num_sms(), True, bm, bn,
                                          h.max_stages(bm, bn, tma, True), 1, False, tma_store=tma, half_promote=hp)
            d = c0.clone()
            kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, d, config=cfg)
            out[bm] = d
        _check_k_grouped(out[192], a, sfa, b, sfb, m, n, ks, c0)
        assert torch.equal(out[192].view(torch.int32), out[128].view(torch.int32)), "block_m 192 and 128 differ"


def test_legacy_wgrad_names():
    """DeepGEMM v1's wgrad_gemm_fp8_fp8_fp32_nt / k_grouped_wgrad_gemm_fp8_fp8_fp32_nt accumulate
    into out: bitwise what the finegemm calls with c = out give (same kernels)."""
    m, n, k = C_SHAPES[1]
    _, _, a, sfa, b, sfb = _inputs(m, n, k, seed=91)
    start = torch.randn(m, n, device="cuda")
    out, want = start.clone(), start.clone()
    finegemm.wgrad_gemm_fp8_fp8_fp32_nt((a, sfa), (b, sfb), out)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), want, c=want, recipe=(1, 1, 128))
    assert torch.equal(out, want) and not torch.equal(out, start)
    _, m, n, ks, _ = K_GROUPED_CASES[4]  # the in-place case: c = d
    a, sfa, b, sfb = _k_grouped_problem(m, n, ks, seed=92)
    c0 = torch.randn(len(ks), m, n, device="cuda")
    out = c0.clone()
    finegemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt((a, sfa), (b, sfb), out, ks)
    assert torch.equal(out, _run_k_grouped(a, sfa, b, sfb, m, n, ks, "in_place", c0))
