"""CPU tests of the m-grouped contiguous GEMMs (FP8 and BF16) that check a plain grouped_layout
themselves (one launch per call; scheduler/contiguous_layout_check.cuh, the kernels' kLayoutCheck): its constants
against the Python ones, a model of the warp-per-CTA algorithm against the host validator, the
rendered source, the routing behind the gate, and with nvcc: every contiguous tile compiles
spill-free with the check, its consumers' k-loops unchanged (the host launcher's refusals:
tests/test_fp8_kernel_compile.py). The same for the FP8 GEMM reading a psum layout's ends itself
(kPsumLayout: models of the walkers' search and of CTA 0's check against the reference expansion
and the host validator).
The kernel itself runs in tests/gpu/test_contiguous_layout_gpu.py.
"""
from __future__ import annotations

import ctypes
import dataclasses
import random
import re
from pathlib import Path

import pytest
import torch

from finegemm.api import _validate as _v
from finegemm.ops import contiguous_layout as cl

from test_contiguous_layout import INT_MAX, INT_MIN, random_layout

HEADER = Path(__file__).resolve().parents[1] / "finegemm/include/finegemm/scheduler/contiguous_layout_check.cuh"


def test_header_constants_mirror_python():
    text = HEADER.read_text()

    def const(name):
        m = re.search(rf"constexpr (?:int|uint32_t) {name} = (\d+);", text)
        assert m, name
        return int(m.group(1))

    assert const("kLayoutRange") == _v.LAYOUT_RANGE
    assert const("kLayoutMisaligned") == _v.LAYOUT_MISALIGNED
    assert const("kLayoutSplit") == _v.LAYOUT_SPLIT
    assert const("kLayoutScratchHead") == cl._SCRATCH_HEAD
    assert const("kLayoutPsumNegative") == _v.LAYOUT_PSUM_NEGATIVE
    assert const("kLayoutPsumDecreasing") == _v.LAYOUT_PSUM_DECREASING
    assert const("kLayoutPsumPastM") == _v.LAYOUT_PSUM_PAST_M
    assert const("kLayoutPsumGap") == _v.LAYOUT_PSUM_GAP


def psum_group_model(ends: list[int], m0: int, align_log2: int) -> int:
    """scheduler::TileWalker::psum_group step for step (32-bit ints): the group of the tile whose
    first row is m0, or G where m0 lies in no group."""
    g = len(ends)
    lo, step = 0, (1 << (g.bit_length() - 1)) if g else 0
    while step:
        probe = lo + step
        end = ends[min(probe, g) - 1]
        lo = probe if probe <= g and end <= m0 else lo
        step >>= 1
    prev = 0 if lo == 0 else ends[lo - 1]
    mask = (1 << align_log2) - 1
    start = 0 if prev <= 0 else ((prev % 2**32) + mask) & ~mask & 0xFFFFFFFF
    return lo if lo < g and m0 >= start else g


def psum_tile_rows_model(ends: list[int], m: int, block_m: int, align_log2: int) -> list[int]:
    """The group id each row of D gets from the psum GEMM's walkers and epilogue: per tile, the
    walker's group (or skip), and the epilogue pads rows at or past that group's end."""
    g = len(ends)
    out = []
    for m0 in range(0, m, block_m):
        grp = psum_group_model(ends, m0, align_log2)
        skip = grp >= g
        assert 0 <= grp <= g  # the GEMM never reads weights of a group it does not have
        end = 0 if skip else ends[grp]
        out += [-1 if (skip or row >= end) else grp for row in range(m0, min(m0 + block_m, m))]
    return out


def psum_check_model(ends: list[int], m: int, alignment: int):
    """scheduler::check_psum_layout_warp: lanes stride over the ends (minimum, first decreasing
    index, first index ending in the gap), then lane 0 reports the first broken rule."""
    g = len(ends)
    if g == 0:
        return None
    lo, dec, gap = INT_MAX, None, None
    for i in range(g):
        lo = min(lo, ends[i])
        if i > 0:
            prev = ends[i - 1]
            if ends[i] < prev and dec is None:
                dec = i
            # C++ (prev + step - 1) / step * step in 64 bits, truncating toward zero (a negative prev
            # never reaches the gap rule: the negative rule comes first)
            x = prev + alignment - 1
            start = (abs(x) // alignment) * alignment * (1 if x >= 0 else -1)
            if ends[i] != prev and ends[i] < start and gap is None:
                gap = i
    if lo < 0:
        return (_v.LAYOUT_PSUM_NEGATIVE, lo, 0, 0)
    if dec is not None:
        return (_v.LAYOUT_PSUM_DECREASING, dec, ends[dec - 1], ends[dec])
    if ends[-1] > m:
        return (_v.LAYOUT_PSUM_PAST_M, ends[-1], 0, 0)
    if gap is not None:
        return (_v.LAYOUT_PSUM_GAP, gap, ends[gap - 1], ends[gap])
    return None


@pytest.mark.parametrize("alignment", [64, 128])
def test_psum_models_match_the_reference_and_the_host_validator(alignment):
    """On random valid and broken psum layouts: CTA 0's check reports the host validator's first
    broken rule with its details; on valid ones the rows the walkers and the epilogue give every
    group (and the zeros of gaps and rows past the last end) are the reference expansion's, for
    every block_m that divides the alignment; on broken ones no group outside [0, G) is read."""
    from finegemm.reference._common import psum_layout_to_group_ids

    rng = random.Random(7 * alignment)
    broken = 0
    for trial in range(500):
        values, m, g = random_layout(rng, alignment, psum=True)
        if trial % 7 == 0:  # wide values: the 32-bit arithmetic at its limits
            values[rng.randrange(g)] = rng.choice([INT_MAX, INT_MAX - 5, INT_MIN, 2**30 + 1])
        want = _v.grouped_layout_violation(torch.tensor(values, dtype=torch.int64), m, g, True, alignment)
        assert psum_check_model(values, m, alignment) == want, (values, m, g)
        broken += want is not None
        for block_m in (64, 128):
            if block_m > alignment or m == 0:
                continue
            rows = psum_tile_rows_model(values, m, block_m, alignment.bit_length() - 1)
            if want is None:
                assert rows == psum_layout_to_group_ids(torch.tensor(values), m, alignment).tolist(), (values, m)
    assert broken > 100


def test_psum_group_model_mirrors_the_header():
    """The model above is the header's function (both families' walkers call it): the same steps,
    in the same order (a guard against the two drifting apart silently)."""
    text = HEADER.read_text()
    body = text[text.index("uint32_t psum_layout_group(const int* __restrict__ ends"):]
    body = body[:body.index("\n}\n")]
    pieces = ("1u << (31 - __clz(g))", "const uint32_t probe = lo + step;", "__ldg(ends + (probe < g ? probe : g) - 1)",
              "lo = (probe <= g && end <= row) ? probe : lo;", "__ldg(ends + (lo == 0 ? 0u : lo - 1))",
              "(static_cast<uint32_t>(prev) + mask) & ~mask", "(lo < g && m0 >= start) ? lo : g")
    at = [body.find(p) for p in pieces]
    assert -1 not in at and at == sorted(at), list(zip(pieces, at))
    for walker in ("persistent.cuh", "grouped_bf16.cuh"):
        assert "psum_layout_group(grouped, num_groups, m0, align_log2)" in (HEADER.parent / walker).read_text()


def in_kernel_model(layout: list[int], m: int, g: int, alignment: int, grid: int):
    """The kernel's algorithm step for step: CTA c checks the 32-row chunks c, c + grid, ..., lane
    l row l of each; maxima of keys, runs per group, then the last CTA's report.
    Returns (rows visited, violation or None)."""
    lo, hi, first = INT_MAX, INT_MIN, INT_MAX
    runs = [0] * g
    visited = []
    for cta in range(grid):
        for r0 in range(cta * 32, m, grid * 32):
            for lane in range(32):
                r = r0 + lane
                if r >= m:
                    continue
                visited.append(r)
                x = layout[r]
                up = layout[r - 1] if r > 0 else INT_MIN
                lo, hi = min(lo, x), max(hi, x)
                if 0 <= x < g and up != x:
                    if r % alignment:
                        first = min(first, r)
                    runs[x] += 1
    split = min([i for i in range(g) if runs[i] > 1], default=INT_MAX)
    if lo < -1 or hi >= g:
        return visited, (_v.LAYOUT_RANGE, lo, hi, 0)
    if first != INT_MAX:
        return visited, (_v.LAYOUT_MISALIGNED, first, layout[first], 0)
    if split != INT_MAX:
        return visited, (_v.LAYOUT_SPLIT, split, runs[split], 0)
    return visited, None


@pytest.mark.parametrize("alignment", [64, 128])
def test_in_kernel_model_matches_the_host_validator(alignment):
    """On random valid and broken plain layouts and grids of 1 to 200 CTAs (more CTAs than rows
    included): every row is visited once, and the first broken rule with its details is the host
    validator's."""
    rng = random.Random(alignment)
    broken = 0
    for _ in range(300):
        values, m, g = random_layout(rng, alignment, psum=False)
        if m == 0:
            continue
        grid = rng.choice([1, 2, 3, 7, 132, 200])
        visited, got = in_kernel_model(values, m, g, alignment, grid)
        assert sorted(visited) == list(range(m))
        want = _v.grouped_layout_violation(torch.tensor(values, dtype=torch.int64), m, g, False, alignment)
        assert got == (None if want is None else tuple(want)), (values, m, g, grid)
        broken += want is not None
    assert broken > 50  # both kinds of layout were drawn


def test_layout_check_render_rules():
    from finegemm.heuristics.sm90_fp8_gemm import (GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED, GEMM_NORMAL,
                                                   select_grouped_config)
    from finegemm.ops import sm90_fp8_gemm as ops

    src = ops.render(128, 128, 5, False, False, False, 2, True, False, True, GEMM_GROUPED_CONTIGUOUS,
                     layout_check=True)
    assert "unsigned* layout_scratch, int* layout_record,\n    uint32_t layout_info)" in src
    assert "&tmap_a_last, layout_scratch, layout_record, layout_info);" in src
    assert ", 1, false, 1, false, 1, 0, 0, 0, true>(" in src  # kLayoutCheck, the other tail at defaults
    plain = ops.render(128, 128, 5, False, False, False, 2, True, False, True, GEMM_GROUPED_CONTIGUOUS)
    assert "layout_scratch" not in plain
    for kind in (GEMM_NORMAL, GEMM_GROUPED_MASKED):
        with pytest.raises(ValueError, match="layout_check"):
            ops.render(128, 128, 5, False, False, False, gemm_kind=kind, layout_check=True)
    base = select_grouped_config(GEMM_GROUPED_CONTIGUOUS, 34048, 4096, 7168, 4, 132)
    checked = dataclasses.replace(base, layout_check=True)
    assert ops._kernel_name(checked) == ops._kernel_name(base) + "_lchk"
    assert checked.kernel_key() != base.kernel_key() and checked.grid == base.grid
    assert ops._render_cfg(checked) == ops.render(base.block_m, base.block_n, base.num_stages, False, False, False,
                                                  base.num_multicast, base.multicast_on_a, base.half_promote,
                                                  base.tma_store, GEMM_GROUPED_CONTIGUOUS, k_batch=base.k_batch,
                                                  layout_check=True)
    # The psum twin: one more template argument (kPsumLayout), its own name and key, the same grid.
    psum_src = ops.render(128, 128, 5, False, False, False, 2, True, False, True, GEMM_GROUPED_CONTIGUOUS,
                          layout_check=True, psum_layout=True)
    assert ", 1, false, 1, false, 1, 0, 0, 0, true, false, true>(" in psum_src
    assert psum_src.replace(", false, true>(", ">(") == src
    with pytest.raises(ValueError, match="psum_layout"):
        ops.render(128, 128, 5, False, False, False, gemm_kind=GEMM_GROUPED_CONTIGUOUS, psum_layout=True)
    psum_cfg = dataclasses.replace(base, layout_check=True, psum_layout=True)
    assert ops._kernel_name(psum_cfg) == ops._kernel_name(base) + "_lchk_psum"
    assert psum_cfg.kernel_key() != checked.kernel_key() and psum_cfg.grid == base.grid
    assert ops._render_cfg(psum_cfg) == ops.render(base.block_m, base.block_n, base.num_stages, False, False, False,
                                                   base.num_multicast, base.multicast_on_a, base.half_promote,
                                                   base.tma_store, GEMM_GROUPED_CONTIGUOUS, k_batch=base.k_batch,
                                                   layout_check=True, psum_layout=True)


def test_bf16_layout_check_render_rules():
    from finegemm.heuristics.sm90_bf16_gemm import GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED
    from finegemm.ops import sm90_bf16_gemm as ops

    src = ops.render_grouped(128, 128, 6, GEMM_GROUPED_CONTIGUOUS, True, layout_check=True)
    assert "const int* grouped, uint32_t num_groups, unsigned* layout_scratch, int* layout_record, uint32_t " \
           "layout_info) {" in src
    assert "false, true, false, true, 1, true>(" in src and "nullptr, nullptr, layout_scratch, layout_record, " \
                                                            "layout_info);" in src
    assert "layout_scratch" not in ops.render_grouped(128, 128, 6, GEMM_GROUPED_CONTIGUOUS, True)
    with pytest.raises(ValueError, match="layout_check"):
        ops.render_grouped(128, 128, 6, GEMM_GROUPED_MASKED, layout_check=True)
    key = (128, 128, 6, GEMM_GROUPED_CONTIGUOUS, True)
    assert ops.grouped_kernel_name(key + (True,)) == ops.grouped_kernel_name(key) + "_lchk"


def _contiguous_tiles():
    """(label, source, unchecked twin's source) of every contiguous tile select_grouped_config may
    return: block_m 64 / 128, every block_n, TMA or direct epilogue, with or without multicast A,
    and the serial-halves tiles."""
    from finegemm.heuristics.sm90_fp8_gemm import (GEMM_GROUPED_CONTIGUOUS, block_n_candidates, max_stages,
                                                   serial_halves)
    from finegemm.ops.sm90_fp8_gemm import render

    out = []
    for bm in (64, 128):
        for bn in block_n_candidates(bm):
            for tma in (True, False):
                for mc in (1, 2):
                    hp = serial_halves(bm, bn, True)
                    st = max_stages(bm, bn, tma)
                    args = (bm, bn, st, False, False, False, mc, mc == 2, hp, tma, GEMM_GROUPED_CONTIGUOUS)
                    out.append((f"bm{bm}_bn{bn}_s{st}{'_tmas' if tma else ''}{'_mca' if mc == 2 else ''}"
                                f"{'_hp' if hp else ''}", render(*args, layout_check=True), render(*args)))
    return out + _bf16_contiguous_tiles()


def _bf16_contiguous_tiles():
    """The same for every BF16 contiguous kernel select_grouped_config may pick (nt and nn)."""
    from finegemm.heuristics.sm90_bf16_gemm import GEMM_GROUPED_CONTIGUOUS, grouped_kernel_keys
    from finegemm.ops.sm90_bf16_gemm import grouped_kernel_name, render_grouped

    return [(grouped_kernel_name(key), render_grouped(*key, True), render_grouped(*key))
            for key in grouped_kernel_keys() if key[3] == GEMM_GROUPED_CONTIGUOUS]


@pytest.mark.nvcc
def test_layout_checked_tiles_compile_clean():
    """Every contiguous tile with the check compiles spill-free, and its consumers' wgmma k-loops
    are the unchecked twin's (the check lives in a producer warp): as many loops, the same wgmmas
    and barrier waits, lengths within 3 instructions (register allocation moves a few). A
    broadcast of the last CTA's flag by __shfl_sync made the bm64 loops 15-20 instructions longer."""
    from finegemm import jit
    from sass_tools import sass, wgmma_k_loops

    tiles = _contiguous_tiles()
    jobs = [(f"{label}_lchk", src) for label, src, _ in tiles]
    reports = jit.compile_check(jobs, raise_on_failure=False)
    bad = [(r["label"], r["reasons"]) for r in reports if not r["ok"]]
    assert len(reports) == len(jobs) and not bad, bad
    # The k-loops of a sample of tiles against their twins (cuobjdump: Triton's, where present).
    sample = tiles[:: max(1, len(tiles) // 12)] + _bf16_contiguous_tiles()[::3]
    twins = jit.compile_check([(label, twin) for label, _, twin in sample], raise_on_failure=False)
    checked = {r["label"]: r for r in reports}
    for twin in twins:
        text_twin = sass(str(twin["cubin"]))
        if text_twin is None:
            pytest.skip("no cuobjdump")
        text = sass(str(checked[twin["label"] + "_lchk"]["cubin"]))
        assert "ATOMG" in text or "RED" in text, twin["label"]  # the check's atomics are there
        loops, loops_twin = wgmma_k_loops(text), wgmma_k_loops(text_twin)
        assert loops and len(loops) == len(loops_twin), twin["label"]
        for loop, loop_twin in zip(loops, loops_twin):
            for op in ("QGMMA", "HGMMA", "SYNCS", "BAR", "WARPGROUP"):
                assert sum(op in i for i in loop) == sum(op in i for i in loop_twin), (twin["label"], op)
            assert abs(len(loop) - len(loop_twin)) <= 3, (twin["label"], len(loop), len(loop_twin))


@pytest.mark.nvcc
def test_psum_tiles_compile_clean():
    """Every FP8 and BF16 contiguous tile reading psum ends compiles spill-free, and its consumers'
    k-loops are the plain checked twin's (the search is branch-free, in 32 bits: with 64-bit alignment arithmetic
    the bm64 loops lost their uniform-datapath addressing, +16 instructions per k-block)."""
    from finegemm import jit
    from finegemm.heuristics.sm90_bf16_gemm import GEMM_GROUPED_CONTIGUOUS, grouped_kernel_keys
    from finegemm.ops.sm90_bf16_gemm import grouped_kernel_name, render_grouped
    from sass_tools import sass, wgmma_k_loops

    tiles = [(label, src) for label, src, _ in _contiguous_tiles() if label.startswith("bm")]  # the FP8 ones
    jobs = [(f"{label}_lchk_psum", src.replace(", true>(", ", true, false, true>(", 1)) for label, src in tiles]
    assert all(", true, false, true>(" in src for _, src in jobs)
    bf16 = [(grouped_kernel_name(key), render_grouped(*key, True)) for key in grouped_kernel_keys()
            if key[3] == GEMM_GROUPED_CONTIGUOUS]
    tiles += bf16
    jobs += [(f"{label}_lchk_psum", render_grouped(*key, True, True)) for key in grouped_kernel_keys()
             if key[3] == GEMM_GROUPED_CONTIGUOUS for label in [grouped_kernel_name(key)]]
    reports = jit.compile_check(jobs, raise_on_failure=False)
    bad = [(r["label"], r["reasons"]) for r in reports if not r["ok"]]
    assert len(reports) == len(jobs) and not bad, bad
    sample = tiles[:-len(bf16)][:: max(1, len(tiles) // 12)] + bf16[::3]
    twins = jit.compile_check([(f"{label}_lchk", src) for label, src in sample], raise_on_failure=False)
    psum = {r["label"]: r for r in reports}
    for twin in twins:
        text_twin = sass(str(twin["cubin"]))
        if text_twin is None:
            pytest.skip("no cuobjdump")
        loops = wgmma_k_loops(sass(str(psum[twin["label"] + "_psum"]["cubin"])))
        loops_twin = wgmma_k_loops(text_twin)
        assert loops and len(loops) == len(loops_twin), twin["label"]
        for loop, loop_twin in zip(loops, loops_twin):
            for op in ("QGMMA", "HGMMA", "SYNCS", "BAR", "WARPGROUP"):
                assert sum(op in i for i in loop) == sum(op in i for i in loop_twin), (twin["label"], op)
            # Not longer (a few of register allocation's moves aside); shorter happens: ptxas kept
            # bm64 bn16's stage base in a uniform register here and re-derived it in the plain twin.
            assert len(loop) <= len(loop_twin) + 3, (twin["label"], len(loop), len(loop_twin))


def _gate(monkeypatch, family: str, closed: bool) -> None:
    """List the family's in-GEMM check capability as unvalidated (closed) or not (the shipped state)."""
    monkeypatch.delenv(_v.ENABLE_UNVALIDATED_ENV, raising=False)
    cap = cl.IN_KERNEL_CAPABILITIES[family]
    if closed:
        monkeypatch.setitem(_v.UNVALIDATED_ON_GPU, cap, ("x", "#4", "tests/gpu/test_contiguous_layout_gpu.py"))
    elif cap in _v.UNVALIDATED_ON_GPU:
        monkeypatch.delitem(_v.UNVALIDATED_ON_GPU, cap)


def test_in_gemm_check_is_shipped_validated():
    """Both families' in-GEMM layout checks passed their GPU suite (plain layouts on the H200, psum
    ends on an H100, 2026-12-05): both layout forms take them by default, and each has its fallback
    (the check kernel + the GEMM on its ids) for FINEGEMM_DISABLE_PATHS."""
    for family in ("fp8", "bf16"):
        assert cl.IN_KERNEL_CAPABILITIES[family] not in _v.UNVALIDATED_ON_GPU
        assert cl.checks_in_kernel(family, False) and cl.checks_in_kernel(family, True)
    assert set(cl.IN_KERNEL_PSUM_CAPABILITIES) == {"fp8", "bf16"}
    assert set(cl.IN_KERNEL_PSUM_CAPABILITIES.values()) <= set(_v.FALLBACK_CAPABILITIES) - set(_v.UNVALIDATED_ON_GPU)


def test_layout_checked_launch_refuses_a_layout_of_the_other_form():
    """The kernel reads G ends (psum) or M ids (plain): the ops refuse a layout whose length is the
    other form's before planning or launching anything (a psum kernel handed M ids, or a plain
    kernel handed G ends, would read past the tensor)."""
    from finegemm.ops import sm90_bf16_gemm as bf16_ops
    from finegemm.ops import sm90_fp8_gemm as fp8_ops

    M, N, K, G = 256, 128, 128, 4
    a, sfa = torch.zeros(M, K, dtype=torch.float8_e4m3fn), torch.ones(M, 1)
    b, sfb = torch.zeros(G, N, K, dtype=torch.float8_e4m3fn), torch.ones(G, 1, 1)
    d = torch.empty(M, N, dtype=torch.bfloat16)
    ids, ends = torch.zeros(M, dtype=torch.int32), torch.tensor([64, 128, 192, 256], dtype=torch.int32)
    for layout, psum in ((ids, True), (ends, False), (ends.to(torch.int64), True)):
        with pytest.raises(ValueError, match=f"in-kernel checked {'psum' if psum else 'plain'} layout must be int32"):
            fp8_ops._layout_checked_arguments(a, sfa, b, sfb, d, layout, (0, 0, 0), psum)
        with pytest.raises(ValueError, match=f"in-kernel checked {'psum' if psum else 'plain'} layout must be int32"):
            bf16_ops._layout_checked_arguments(a.to(torch.bfloat16), b.to(torch.bfloat16), d, layout, False, (0, 0, 0),
                                               psum)


def test_disable_paths_closes_the_psum_gemm_alone(monkeypatch):
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_contiguous_psum_in_gemm")
    assert not cl.checks_in_kernel("fp8", True) and cl.checks_in_kernel("fp8", False)
    assert cl.checks_in_kernel("bf16", True)


def test_api_routes_plain_layouts_to_the_checking_gemm_behind_the_gate(monkeypatch):
    """On faked CUDA: with the gate closed a plain layout goes through the standalone check and the
    GEMM on its ids; with it open (the shipped state) the GEMM gets the caller's layout and the
    stream's check buffers and no check kernel runs; psum layouts keep the check kernel; an earlier
    call's recorded error is raised before anything is launched."""
    import finegemm
    from finegemm.api import grouped_fp8 as api
    from test_api_cpu import _FakeOps, _install_fake_ops, rand_fp8, rand_sf

    fake = _FakeOps()
    _install_fake_ops(monkeypatch, fake)
    layout_calls, checks = [], []
    monkeypatch.setattr(_v, "on_cuda", lambda t: True)
    monkeypatch.setattr(cl, "can_prepare", lambda index: False)  # one-shot calls
    monkeypatch.setattr(cl, "api_group_ids", lambda fn, gl, m, g, psum, al: layout_calls.append((fn, psum)) or
                        torch.zeros(m, dtype=torch.int32))
    monkeypatch.setattr(cl, "in_kernel_check", lambda fn, m, g, al: checks.append((fn, m, g, al)) or (1, 2, 3))
    M, N, K, G = 256, 128, 128, 2
    layout = torch.zeros(M, dtype=torch.int32)
    ends = torch.tensor([100, 256], dtype=torch.int32)
    a, b = (rand_fp8(M, K), rand_sf(M, 1)), (rand_fp8(G, N, K), rand_sf(G, 1, 1))
    b_kn = (rand_fp8(G, K, N), rand_sf(G, 1, 1))
    d = torch.empty(M, N, dtype=torch.bfloat16)

    def fresh():
        monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())

    _gate(monkeypatch, "fp8", closed=True)
    fresh()
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, layout)
    assert fake.calls[-1][0] == "contiguous" and layout_calls == [("m_grouped_fp8_gemm_nt_contiguous", False)]
    assert not checks

    _gate(monkeypatch, "fp8", closed=False)
    fresh()
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, layout)
    kind, A_, sfa_, B_, sfb_, d_, gl_, check_ = fake.calls[-1]
    assert kind == "contiguous_layout_checked" and gl_ is layout and check_ == (1, 2, 3)
    assert A_ is a[0] and B_ is b[0] and d_ is d and len(layout_calls) == 1
    assert checks == [("m_grouped_fp8_gemm_nt_contiguous", M, G, 128)]
    finegemm.m_grouped_fp8_gemm_nn_contiguous(a, b_kn, d, layout)  # B copied K-major, the same one launch
    assert fake.calls[-1][0] == "contiguous_layout_checked" and fake.calls[-1][3].shape == (G, N, K)
    assert len(layout_calls) == 1 and len(checks) == 2
    psum_cap = cl.IN_KERNEL_PSUM_CAPABILITIES["fp8"]
    assert psum_cap not in _v.UNVALIDATED_ON_GPU  # shipped (GPU suite passed, 2026-12-05)
    monkeypatch.setitem(_v.UNVALIDATED_ON_GPU, psum_cap, ("x", "#4", "tests/gpu/test_contiguous_layout_gpu.py"))
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)  # gated psum: the check kernel
    assert fake.calls[-1][0] == "contiguous" and layout_calls[-1] == ("m_grouped_fp8_gemm_nt_contiguous", True)
    # The GEMM reading the ends itself (the shipped state): one launch on the ends.
    monkeypatch.delitem(_v.UNVALIDATED_ON_GPU, psum_cap)
    fresh()
    n_layout = len(layout_calls)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)
    kind, A_, _, B_, _, d_, gl_, check_ = fake.calls[-1]
    assert kind == "contiguous_psum_checked" and gl_ is ends and check_ == (1, 2, 3) and A_ is a[0] and d_ is d
    assert len(layout_calls) == n_layout and checks[-1] == ("m_grouped_fp8_gemm_nt_contiguous", M, G, 128)
    rec = (ctypes.c_int32 * 8)()
    monkeypatch.setattr(cl, "_record", rec)
    rec[1], rec[2], rec[3], rec[5], rec[6], rec[7] = cl._function_id("x"), -7, 3, G, 128, M
    rec[0] = _v.LAYOUT_RANGE
    n_calls = len(fake.calls)
    with pytest.raises(ValueError, match="an earlier m-grouped contiguous call"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, layout)
    assert len(fake.calls) == n_calls


def test_bf16_api_routes_plain_layouts_to_the_checking_gemm_behind_the_gate(monkeypatch):
    """The BF16 contiguous calls on faked CUDA: the gate closed, the check kernel and the GEMM on its
    ids; open (shipped), one launch of the checking GEMM on the caller's layout (nt and nn, B read in place);
    psum layouts keep the check kernel."""
    import finegemm
    from finegemm.api import bf16 as api
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    launched, layout_calls, kws = [], [], []
    monkeypatch.setattr(_v, "on_cuda", lambda t: True)
    monkeypatch.setattr(cl, "can_prepare", lambda index: False)  # one-shot calls
    monkeypatch.setattr(cl, "api_group_ids", lambda fn, gl, m, g, psum, al: layout_calls.append(psum) or
                        torch.zeros(m, dtype=torch.int32))
    monkeypatch.setattr(cl, "in_kernel_check", lambda fn, m, g, al: (7, 8, 9))
    for name in ("m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous",
                 "m_grouped_bf16_gemm_contiguous_layout_checked"):
        monkeypatch.setattr(bf16_ops, name, lambda *args, _n=name, **kw: launched.append((_n,) + args) or
                            kws.append(kw))
    M, N, K, G = 256, 128, 128, 2
    layout = torch.zeros(M, dtype=torch.int32)
    a = torch.randn(M, K).to(torch.bfloat16)
    b, b_kn = torch.randn(G, N, K).to(torch.bfloat16), torch.randn(G, K, N).to(torch.bfloat16)
    d = torch.empty(M, N, dtype=torch.bfloat16)
    _gate(monkeypatch, "bf16", closed=True)
    monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    assert launched[-1][0] == "m_grouped_bf16_gemm_nt_contiguous" and layout_calls == [False]
    _gate(monkeypatch, "bf16", closed=False)
    monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())
    for bb, b_kn_ in ((b, False), (b_kn, True)):
        (finegemm.m_grouped_bf16_gemm_nn_contiguous if b_kn_ else finegemm.m_grouped_bf16_gemm_nt_contiguous)(
            a, bb, d, layout)
        name, a_, b_, d_, gl_, b_kn_got, check_ = launched[-1]
        assert name == "m_grouped_bf16_gemm_contiguous_layout_checked" and gl_ is layout and b_ is bb
        assert a_ is a and d_ is d and b_kn_got is b_kn_ and check_ == (7, 8, 9)
    assert layout_calls == [False]
    ends = torch.tensor([100, 256], dtype=torch.int32)
    psum_cap = cl.IN_KERNEL_PSUM_CAPABILITIES["bf16"]
    assert psum_cap not in _v.UNVALIDATED_ON_GPU  # shipped (GPU suite passed, 2026-12-05)
    monkeypatch.setitem(_v.UNVALIDATED_ON_GPU, psum_cap, ("x", "#5", "tests/gpu/test_contiguous_layout_gpu.py"))
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)  # gated: the check kernel
    assert launched[-1][0] == "m_grouped_bf16_gemm_nt_contiguous" and layout_calls == [False, True]
    # The GEMM reading the ends itself (the shipped state): one launch on the ends.
    monkeypatch.delitem(_v.UNVALIDATED_ON_GPU, psum_cap)
    monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)
    name, a_, b_, d_, gl_, b_kn_got, check_ = launched[-1]
    assert name == "m_grouped_bf16_gemm_contiguous_layout_checked" and gl_ is ends and check_ == (7, 8, 9)
    assert layout_calls == [False, True] and kws[-1] == {"psum": True}


def test_prepared_contiguous_in_kernel_entries(monkeypatch):
    """PreparedContiguous for a GEMM that checks the layout itself: no check plan (its kernel is
    never loaded), an entry per stream holding the GEMM prepared on that stream's check buffers,
    and a call launches the GEMM alone (a psum layout's too: the FP8 GEMM reading the ends)."""
    stream = [11]
    monkeypatch.setattr(cl, "_Plan", lambda *args: pytest.fail("the standalone check was planned"))
    monkeypatch.setattr(cl, "raw_stream", lambda index: stream[0])
    monkeypatch.setattr(cl, "can_prepare", lambda index: True)
    monkeypatch.setattr(cl, "in_kernel_check", lambda fn, m, g, al, capturing=None: (1000 + stream[0], 5, al))
    layout = torch.zeros(256, dtype=torch.int32)
    psum_call = cl.PreparedContiguous("f", torch.tensor([0, 100, 200, 256], dtype=torch.int32), 256, 4, True, 128,
                                      in_kernel=True)
    psum_launches = []
    assert psum_call.add_stream(None, lambda check: lambda: psum_launches.append(check)) and psum_call()
    assert psum_launches == [(1011, 5, 128)]
    call = cl.PreparedContiguous("f", layout, 256, 4, False, 128, in_kernel=True)
    launches = []
    assert not call.add_stream(lambda ids: pytest.fail("the ids GEMM was prepared"))  # no checked preparer
    assert call.add_stream(None, lambda check: lambda: launches.append(check))
    assert call() and call()
    assert launches == [(1011, 5, 128), (1011, 5, 128)]
    stream[0] = 12
    assert not call()
    assert call.add_stream(None, lambda check: lambda: launches.append(check)) and call()
    assert launches[-1] == (1012, 5, 128)


def test_disable_paths_switches_to_the_fallback(monkeypatch):
    """FINEGEMM_DISABLE_PATHS names paths with a fallback (',' or ':' between them): those report
    not validated (the contiguous calls then take the check kernel; skip-head-mid its scratch);
    an unknown name raises ValueError naming the variable and the allowed names."""
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_contiguous_layout_in_gemm")
    assert not cl.checks_in_kernel("fp8", False) and cl.checks_in_kernel("bf16", False)
    assert _v.gpu_validated("fp8_skip_head_mid_fused")
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, " bf16_contiguous_layout_in_gemm:fp8_skip_head_mid_fused ,")
    assert cl.checks_in_kernel("fp8", False) and not cl.checks_in_kernel("bf16", False)
    assert not _v.gpu_validated("fp8_skip_head_mid_fused")
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_contiguous_layout_in_gem")
    with pytest.raises(ValueError, match=r"FINEGEMM_DISABLE_PATHS=.*fp8_contiguous_layout_in_gem'.*"
                                         r"fp8_contiguous_layout_in_gemm"):
        cl.checks_in_kernel("fp8", False)
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "")
    assert all(_v.gpu_validated(c) for c in _v.FALLBACK_CAPABILITIES if c not in _v.UNVALIDATED_ON_GPU)
    assert set(cl.IN_KERNEL_CAPABILITIES.values()) <= set(_v.FALLBACK_CAPABILITIES)
