"""CPU tests of the k-grouped FP8 GEMM in one launch (scheduler kind GEMM_K_GROUPED, recipe (1, 1, 128)):
rendering, configuration, the ops layer's arguments (launcher mocked), and with nvcc: the kernel
variants compile spill-free, their stage releases are fenced (SASS scan), and the host launcher
validates its arguments and builds the group table (order, offsets, chunks of 64 groups).
The GPU tests are in tests/gpu/test_fp8_wgrad_gpu.py.
"""
from __future__ import annotations

import ctypes
import dataclasses

import pytest

from test_fp8_kernel_compile import _check_reports, _releases_with_loads_in_flight, _sass

ISSUE_SHAPES = [(4, 4096, 7168, 8192), (8, 4096, 7168, 4096), (16, 7168, 2048, 2048)]  # (G, M, N, expected k)


def _issue_problems():
    from finegemm.bench.grouped import k_grouped_problems

    return [(ks, m, n) for (_g, m, n, ks, _ek) in k_grouped_problems()]


# ----------------------------------------------------------------------------- rendering, configs
def test_render_k_grouped_source():
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_K_GROUPED
    from finegemm.ops.sm90_fp8_gemm import render

    src = render(128, 208, 5, True, True, False, 2, False, gemm_kind=GEMM_K_GROUPED, one_d_one_d=True)
    assert "sm90_fp8_gemm_1d2d<128, 208, 5, true, true, false,\n" in src
    assert "2, false, false, false, 3, true>(" in src
    assert "const __grid_constant__ finegemm::impls::Sm90Fp8KGroupedParams groups" in src
    assert "groups.num_slots, &tmap_sfb, &groups);" in src and "__launch_bounds__(384, 1)" in src
    src = render(64, 112, 8, True, False, False, gemm_kind=GEMM_K_GROUPED, one_d_one_d=True)
    assert "sm90_fp8_gemm_1d2d<64, 112, 8, true, false, false,\n" in src and "__launch_bounds__(256, 1)" in src
    with pytest.raises(ValueError):
        render(128, 128, 4, True, False, True, gemm_kind=GEMM_K_GROUPED, one_d_one_d=True)  # split-K
    with pytest.raises(ValueError):
        render(128, 128, 4, True, False, False, gemm_kind=GEMM_K_GROUPED)  # 1D2D
    # The dense 1D1D source is not affected.
    assert "Sm90Fp8KGroupedParams" not in render(128, 208, 5, True, True, False, 2, False, one_d_one_d=True)


def test_k_grouped_plan_k_buckets():
    from finegemm.heuristics.sm90_fp8_gemm import k_grouped_plan_k

    assert k_grouped_plan_k([0, 0]) == (0, 0)
    assert k_grouped_plan_k([128]) == (1, 128)
    assert k_grouped_plan_k([0, 256, 0]) == (1, 256)
    assert k_grouped_plan_k([384, 0]) == (1, 384)
    for mean in range(128, 40000, 128):
        _, kp = k_grouped_plan_k([mean])
        assert mean <= kp <= 2 * mean and kp % 128 == 0
        assert kp == 128 or kp <= 1.5 * mean + 128  # buckets 128 x {1, 1.5, 2, 3, 4, 6, ...}
    # ks that move a little between steps share the plan.
    assert k_grouped_plan_k([9984, 9472, 7808, 7040]) == k_grouped_plan_k([9000, 9216, 8064, 7168])


def test_k_grouped_configs(capsys, monkeypatch):
    from finegemm.heuristics import sm90_fp8_gemm as h

    monkeypatch.setenv("FINEGEMM_PRINT_CONFIGS", "1")
    h.clear_cache()
    for ks, m, n in _issue_problems():
        for has_c in (False, True):
            cfg = h.select_k_grouped_config(m, n, ks, 132, has_c)
            g = len(ks)
            assert cfg.gemm_kind == h.GEMM_K_GROUPED and cfg.one_d_one_d and cfg.out_fp32
            assert cfg.has_c == has_c and cfg.num_splits == 1 and cfg.ctas_per_sm == 1
            assert (cfg.m, cfg.n, cfg.num_groups) == (m, n, g)
            assert cfg.block_n <= h.MAX_BLOCK_N_1D1D[cfg.block_m]
            assert cfg.grid == (132 if cfg.num_multicast == 1 else 2 * (132 // 2))  # every SM
            mb, nb = -(-m // cfg.block_m), -(-n // cfg.block_n)
            assert cfg.num_tiles == g * mb * nb
            assert cfg.num_units == g * h._units(m, n, cfg.block_m, cfg.block_n, 1, cfg.num_multicast,
                                                 cfg.multicast_on_a)[1]
            assert cfg.smem_bytes == h.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages, cfg.tma_store, True)
            assert cfg.num_stages <= h.max_stages(cfg.block_m, cfg.block_n, cfg.tma_store, True, cap=h.MAX_STAGES)
    out = capsys.readouterr().err
    assert out.count("sm90_fp8_gemm k-grouped G=") == 2 * len(ISSUE_SHAPES)
    # Small problem: a grid no larger than the units; empty groups count as units but not for K.
    cfg = h.select_k_grouped_config(100, 136, [0, 256, 512, 0], 132, True)
    assert cfg.grid <= cfg.num_units and cfg.k == 384 and cfg.num_groups == 4
    with pytest.raises(ValueError):
        h.select_k_grouped_config(100, 136, [0, 0], 132)
    with pytest.raises(ValueError):
        h.make_k_grouped_config(100, 136, 256, 2, 1, 132, True, 128, 224, 4)  # past MAX_BLOCK_N_1D1D
    with pytest.raises(ValueError):
        h.make_k_grouped_config(100, 136, 256, 2, 3, 132, True, 128, 128, 4)  # active > G


# ----------------------------------------------------------------------------- ops layer (launcher mocked)
def _mock_k_grouped(monkeypatch):
    """Plan with the heuristic (no compile); record the launcher's arguments, with the ks buffer
    read while the call is in progress (it lives only for the call)."""
    from finegemm.heuristics.sm90_fp8_gemm import select_k_grouped_config
    from finegemm.ops import sm90_fp8_k_grouped as kg

    launches = []

    def launcher(*args):
        g = args[8]
        ks = list((ctypes.c_int32 * g).from_address(args[7]))
        launches.append(dict(zip(
            ["fn", "a", "b", "sfa", "sfb", "d", "c", "ks_ptr", "G", "a_elems", "b_elems", "sf_rows", "m", "n", "ldd",
             "sfa_ld", "sfb_ld", "block_m", "block_n", "mc", "mc_a", "tma_store", "grid", "smem", "stream"],
            args), ks=ks))
        return 0

    monkeypatch.setattr(kg, "plan", lambda m, n, ks, has_c, dev, config=None: (
        config or select_k_grouped_config(m, n, ks, 132, has_c), 7))
    monkeypatch.setattr(kg, "_get_launcher", lambda: None)
    monkeypatch.setattr(kg, "_launcher", launcher)
    monkeypatch.setattr(kg, "_get_raw_stream", lambda dev: 0)
    return kg, launches


def _problem(torch, m, n, ks):
    fp8 = torch.float8_e4m3fn
    s = sum(ks)
    a = torch.zeros(m * s).to(fp8)
    b = torch.zeros(n * s).to(fp8)
    sfa = torch.rand(s // 128, m)
    sfb = torch.rand(s // 128, n)
    return a, sfa, b, sfb


@pytest.mark.parametrize("c_mode", ["none", "sep", "in_place"])
def test_k_grouped_ops_layer_launch_arguments(monkeypatch, c_mode):
    """One launcher call for all groups (no per-group Python launches): the whole 1-D A / B, the
    scale tensors themselves when their rows have a 16-byte pitch (one aligned copy otherwise), d
    and c as [G*M, N], ks as one int32 buffer, the config's fields in the right slots."""
    torch = pytest.importorskip("torch")
    from finegemm.ops import sm90_fp8_gemm as ops

    kg, launches = _mock_k_grouped(monkeypatch)
    monkeypatch.setattr(ops, "fp8_gemm_nt", lambda *a: pytest.fail("per-group launch on the one-launch path"))
    for m, n, ks in [(20, 36, [256, 0, 128, 384]), (18, 136, [0, 256, 128]), (64, 200, [128] * 130)]:
        a, sfa, b, sfb = _problem(torch, m, n, ks)
        g = len(ks)
        d = torch.full((g, m, n), float("nan"))
        c = None if c_mode == "none" else (d if c_mode == "in_place" else torch.randn(g, m, n))
        launches.clear()
        ops.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c)  # delegates (K_GROUPED_SINGLE_LAUNCH)
        assert len(launches) == 1
        L = launches[0]
        assert L["ks"] == ks and L["G"] == g and L["fn"] == 7
        assert (L["a"], L["b"], L["d"]) == (a.data_ptr(), b.data_ptr(), d.data_ptr())
        assert (L["a_elems"], L["b_elems"], L["sf_rows"]) == (m * sum(ks), n * sum(ks), sum(ks) // 128)
        assert (L["m"], L["n"], L["ldd"]) == (m, n, n)
        assert L["c"] == (None if c is None else c.data_ptr())
        if m % 4 == 0:
            assert L["sfa"] == sfa.data_ptr() and L["sfa_ld"] == m  # already the TMA layout: no copy
        else:
            assert L["sfa"] != sfa.data_ptr() and L["sfa_ld"] == ops.align(m, 4)
        assert L["sfb"] == sfb.data_ptr() and L["sfb_ld"] == n
        cfg = kg.plan(m, n, ks, c is not None, 0)[0]
        assert (L["block_m"], L["block_n"], L["mc"], L["mc_a"], L["tma_store"], L["grid"], L["smem"]) == (
            cfg.block_m, cfg.block_n, cfg.num_multicast, int(cfg.multicast_on_a), int(cfg.tma_store), cfg.grid,
            cfg.smem_bytes)
        assert torch.isnan(d).all() if c_mode != "in_place" else True  # left to the (mocked) kernel


def test_k_grouped_ops_layer_copies_and_empty(monkeypatch):
    torch = pytest.importorskip("torch")
    kg, launches = _mock_k_grouped(monkeypatch)
    m, n, ks = 20, 36, [256, 0, 128]
    g = len(ks)
    a, sfa, b, sfb = _problem(torch, m, n, ks)
    # d whose group stride is not M rows: computed into a compact buffer, copied back.
    big = torch.full((g, m + 2, n), 3.0)
    d = big[:, :m]
    kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, None)
    assert launches[-1]["d"] != d.data_ptr() and launches[-1]["ldd"] == n
    assert (big[:, m:] == 3.0).all()
    # c with another row pitch than d: one copy in d's layout.
    c_big = torch.randn(g, m, n + 4)
    kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, torch.empty(g, m, n), ks, c_big[..., :n])
    assert launches[-1]["c"] not in (None, c_big.data_ptr())
    # K-major scales (any strides are allowed): one aligned copy each.
    kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa.t().contiguous().t(), b, sfb.t().contiguous().t(),
                                        torch.empty(g, m, n), ks, None)
    assert launches[-1]["sfa_ld"] == 20 and launches[-1]["sfb_ld"] == 36
    # Every group empty: no launch, D = C or zeros.
    launches.clear()
    d = torch.full((2, m, n), float("nan"))
    kg.k_grouped_fp8_gemm_nt_contiguous(a[:0], sfa[:0], b[:0], sfb[:0], d, [0, 0], None)
    assert not launches and torch.equal(d, torch.zeros(2, m, n))
    c = torch.randn(2, m, n)
    kg.k_grouped_fp8_gemm_nt_contiguous(a[:0], sfa[:0], b[:0], sfb[:0], d, [0, 0], c)
    assert not launches and torch.equal(d, c)
    with pytest.raises(ValueError):  # scale rows must match sum(ks) / 128
        kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa[:1], b, sfb, torch.empty(g, m, n), ks, None)


def test_k_grouped_forced_config_must_match(monkeypatch):
    torch = pytest.importorskip("torch")
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_k_grouped as kg

    monkeypatch.setattr(kg._dense, "_load", lambda cfg, dev: pytest.fail("loaded a mismatched config"))
    m, n, ks = 20, 36, [256, 0, 128]
    a, sfa, b, sfb = _problem(torch, m, n, ks)
    with_c = h.make_k_grouped_config(m, n, 256, 3, 2, 132, True, 64, 64, 4)
    for config, c in [(with_c, None), (dataclasses.replace(with_c, has_c=False), torch.zeros(3, m, n)),
                      (dataclasses.replace(with_c, n=40), torch.zeros(3, m, n)),
                      (dataclasses.replace(with_c, gemm_kind=h.GEMM_NORMAL), torch.zeros(3, m, n))]:
        with pytest.raises(ValueError):
            kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, torch.empty(3, m, n), ks, c, config=config)


def test_k_grouped_per_group_path_behind_flag(monkeypatch):
    torch = pytest.importorskip("torch")
    from finegemm.ops import sm90_fp8_gemm as ops

    kg, launches = _mock_k_grouped(monkeypatch)
    calls = []
    monkeypatch.setattr(ops, "fp8_gemm_nt", lambda *args: calls.append(args))
    monkeypatch.setattr(ops, "K_GROUPED_SINGLE_LAUNCH", False)
    m, n, ks = 20, 36, [256, 0, 128]
    a, sfa, b, sfb = _problem(torch, m, n, ks)
    ops.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, torch.empty(3, m, n), ks, None)
    assert len(calls) == 2 and not launches


# ----------------------------------------------------------------------------- nvcc: host library
def _launcher_call(**kw):
    from finegemm.ops import sm90_fp8_k_grouped as kg

    launch = kg._get_launcher()
    ks = kw.pop("ks", [256, 0, 128])
    arr = None if ks is None else (ctypes.c_int32 * len(ks))(*ks)
    ks = ks or [256, 0, 128]
    m, n = kw.get("m", 64), kw.get("n", 64)
    s = sum(k for k in ks if k > 0)
    a = dict(fn=1, a=16, b=16, sfa=16, sfb=16, d=16, c=None, ks=None if arr is None else ctypes.addressof(arr),
             g=len(ks),
             a_elems=m * s, b_elems=n * s, sf_rows=s // 128, m=m, n=n, ldd=n, sfa_ld=m, sfb_ld=n, block_m=128,
             block_n=128, mc=1, mc_a=0, tma_store=0, grid=132, smem=100000, stream=0)
    a.update(kw)
    return launch(a["fn"], a["a"], a["b"], a["sfa"], a["sfb"], a["d"], a["c"], a["ks"], a["g"], a["a_elems"],
                  a["b_elems"], a["sf_rows"], a["m"], a["n"], a["ldd"], a["sfa_ld"], a["sfb_ld"], a["block_m"],
                  a["block_n"], a["mc"], a["mc_a"], a["tma_store"], a["grid"], a["smem"], a["stream"])


@pytest.mark.nvcc
def test_host_library_k_grouped_launcher_rejects_bad_arguments(cuda_driver_present):
    invalid = 100001  # fg::FG_ERROR_INVALID_ARGUMENT
    assert _launcher_call(fn=0) == invalid
    assert _launcher_call(sfb=None) == invalid
    assert _launcher_call(ks=None) == invalid
    assert _launcher_call(g=0) == invalid
    assert _launcher_call(ks=[256, 100]) == invalid  # k_g % 128
    assert _launcher_call(ks=[256, -128, 128]) == invalid
    assert _launcher_call(ks=[0, 0]) == invalid  # all empty: the caller's (no scale rows)
    assert _launcher_call(a_elems=64 * 384 - 1) == invalid  # A smaller than ks describe
    assert _launcher_call(b_elems=64 * 384 + 16) == invalid
    assert _launcher_call(sf_rows=4) == invalid
    assert _launcher_call(sfa_ld=62) == invalid and _launcher_call(sfb_ld=60) == invalid
    assert _launcher_call(ldd=63) == invalid
    assert _launcher_call(block_m=96) == invalid and _launcher_call(block_n=200) == invalid
    assert _launcher_call(mc=2, grid=131) == invalid and _launcher_call(mc=3) == invalid
    assert _launcher_call(grid=0) == invalid and _launcher_call(smem=0) == invalid
    assert _launcher_call(a=17) == invalid  # TMA base alignment
    assert _launcher_call(m=1 << 20, sfa_ld=1 << 20, ks=[128] * 4096) == invalid  # G * M rows past 2^31
    if not cuda_driver_present:
        assert _launcher_call() == 100000  # fg::FG_ERROR_NO_DRIVER: valid arguments reach the driver


def _slots(ks):
    from finegemm import jit

    lib = jit.host_library()
    g = len(ks)
    out = (ctypes.c_uint32 * (4 * max(g, 1)))()
    nl = ctypes.c_int(-1)
    arr = (ctypes.c_int32 * max(g, 1))(*ks)
    rc = lib.fg_sm90_fp8_k_grouped_slots(arr, g, out, ctypes.byref(nl))
    return rc, [tuple(out[4 * s:4 * s + 4]) for s in range(g)], nl.value


@pytest.mark.nvcc
@pytest.mark.parametrize("g", [1, 4, 63, 64, 65, 80, 128, 130])
def test_host_k_grouped_slot_table(g):
    """The group table the launcher builds: every group once, longest k_g first (ties in group
    order), its own kb offset (prefix sum in group order) and k-blocks, at most 64 groups per
    launch (G > 64: ceil(G / 64) launches)."""
    import random

    from finegemm import jit

    assert jit.host_library().fg_sm90_fp8_k_grouped_max_groups() == 64
    rng = random.Random(g)
    ks = [rng.choice([0, 128, 256, 1024, 4096]) for _ in range(g)]
    rc, slots, launches = _slots(ks)
    assert rc == 0 and launches == -(-g // 64)
    assert sorted(s[0] for s in slots) == list(range(g))
    offsets = [sum(ks[:i]) // 128 for i in range(g)]
    for s, (grp, kb_off, num_kb, launch) in enumerate(slots):
        assert kb_off == offsets[grp] and num_kb == ks[grp] // 128 and launch == s // 64
    order = [grp for grp, *_ in slots]
    assert order == sorted(range(g), key=lambda x: (-ks[x], x))
    assert _slots([128, 100])[0] == 100001 and _slots([-128])[0] == 100001


# ----------------------------------------------------------------------------- nvcc: kernels
def _issue_configs():
    from finegemm.heuristics import sm90_fp8_gemm as h

    out = []
    for ks, m, n in _issue_problems():
        for has_c in (False, True):
            out.append(h.select_k_grouped_config(m, n, ks, 132, has_c))
    return out


@pytest.mark.nvcc
def test_k_grouped_issue_configs_compile_spill_free():
    """The configs select_k_grouped_config picks on the issue's shapes (with and without C) and the
    k-grouped representatives: 0 spills, no stack / local memory, FP8 wgmma and TMA in SASS."""
    from finegemm import jit
    from finegemm.ops import sm90_fp8_gemm as ops

    jobs = {ops._kernel_name(c): ops._render_cfg(c) for c in _issue_configs()}
    jobs.update({label: ops.render(*args) for label, args in ops.representative_configs() if "kgrp" in label})
    reports = jit.compile_check(list(jobs.items()), raise_on_failure=False)
    _check_reports(reports)
    for r in reports:
        print(f"{r['label']}: {r['registers']} registers, spills {r['spill_stores']}/{r['spill_loads']}")
        sass = _sass(r["cubin"])
        if sass is None:
            continue
        assert "QGMMA" in sass and "UTMALDG" in sass, r["label"]
        assert "LDL" not in sass and "STL" not in sass, r["label"]
        if "_mc" in r["label"]:
            assert "UTMALDG.2D.MULTICAST" in sass, r["label"]


@pytest.mark.nvcc
def test_every_k_grouped_block_n_compiles_spill_free():
    """Every (block_m, block_n) select_k_grouped_config may return (the 1D1D range), with C (the
    register-heaviest epilogue), without and with a cluster sharing B."""
    from finegemm import jit
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_K_GROUPED, block_n_candidates, max_stages
    from finegemm.ops.sm90_fp8_gemm import render

    jobs = []
    for bm in (64, 128):
        for bn in block_n_candidates(bm, True):
            st = max_stages(bm, bn, False, True)
            for mc in (1, 2):
                jobs.append((f"bm{bm}_bn{bn}_s{st}_c{'_mcb' if mc == 2 else ''}_kgrp",
                             render(bm, bn, st, True, True, False, mc, False, gemm_kind=GEMM_K_GROUPED,
                                    one_d_one_d=True)))
    _check_reports(jit.compile_check(jobs, raise_on_failure=False))


@pytest.mark.nvcc
@pytest.mark.parametrize("bm, bn, has_c, mc, mc_a", [(128, 208, True, 2, False), (128, 128, True, 2, True),
                                                     (64, 112, False, 1, False)])
def test_k_grouped_stage_release_is_fenced_after_scale_loads(bm, bn, has_c, mc, mc_a):
    """The 1D1D race guard on the k-grouped kind: no consumer stage release while a shared-memory
    scale load may still be in flight."""
    from finegemm import jit
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    cfg = h.make_k_grouped_config(4096, 7168, 4096, 8, 8, 132, has_c, bm, bn, h.max_stages(bm, bn, False, True), mc,
                                  mc_a)
    sass = _sass(str(jit.build_cubin(ops._kernel_name(cfg), ops._render_cfg(cfg))))
    if sass is None:
        pytest.skip("no cuobjdump")
    assert "SYNCS.ARRIVE" in sass and "LDS" in sass
    assert _releases_with_loads_in_flight(sass) == 0


def test_k_grouped_candidates_and_entries(monkeypatch, tmp_path):
    """`tune k_grouped`: the planner's choice first, then distinct k-grouped configs of the same
    problem (no split-K, one CTA per SM; TMA-epilogue, half-promote and k-batch variants among
    them); a winner becomes an fp8_k_grouped entry at (M, N, planning K), which the planner then
    consults before the dense entry."""
    import json

    from finegemm.bench.tune import k_grouped_default_problems, table_entry
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.heuristics import tuned

    problems = k_grouped_default_problems()
    assert [p[0] for p in problems] == [4, 8, 16]
    g, m, n, ks = problems[0]
    cands = h.k_grouped_candidate_configs(m, n, ks, 132)
    assert cands[0] == h.select_k_grouped_config(m, n, ks, 132, True)
    assert len({(c.kernel_key(), c.grid) for c in cands}) == len(cands) > 10
    assert all(c.gemm_kind == h.GEMM_K_GROUPED and c.num_groups == g and c.num_splits == 1 and c.ctas_per_sm == 1
               and c.has_c for c in cands)
    assert any(c.tma_store for c in cands) and any(c.half_promote for c in cands) and any(c.k_batch > 1 for c in cands)
    # A winner (the last candidate, say) as a table entry, consulted for this problem.
    pick = cands[-1]
    best = {"block_m": pick.block_m, "block_n": pick.block_n, "num_stages": pick.num_stages, "num_splits": 1,
            "num_multicast": pick.num_multicast, "multicast_on_a": pick.multicast_on_a, "tma_store": pick.tma_store,
            "half_promote": pick.half_promote, "ctas_per_sm": 1, "k_batch": pick.k_batch, "us": 1.0}
    _, k_plan = h.k_grouped_plan_k(ks)
    rec = {"family": "k_grouped", "groups": g, "m": m, "n": n, "k": k_plan, "best": best, "model_us": 2.0}
    e = table_entry(rec, 132, {"gpu": "test", "commit": "0" * 40, "date": "now"})
    assert e["kind"] == h.K_GROUPED_KIND and e["out_fp32"] and e["has_c"] and (e["m"], e["n"], e["k"]) == (m, n, k_plan)
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [e])
    assert json.loads(path.read_text())["entries"][0]["kind"] == h.K_GROUPED_KIND
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    tuned.clear()
    h.clear_cache()
    try:
        cfg = h.select_k_grouped_config(m, n, ks, 132, True)
    finally:
        monkeypatch.delenv(tuned.TUNED_FILE_ENV)
        tuned.clear()
        h.clear_cache()
    assert (cfg.block_n, cfg.num_stages, cfg.tma_store, cfg.half_promote, cfg.k_batch) == (
        pick.block_n, pick.num_stages, pick.tma_store, pick.half_promote, pick.k_batch)


def test_k_grouped_no_c_entries_are_their_own(monkeypatch, tmp_path):
    """`tune k_grouped --no-c`: candidates built without C, and its winner an entry with has_c false
    that the call without C consults and the c = d call does not (their best tiles differ)."""
    from finegemm.bench.tune import k_grouped_default_problems, table_entry
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.heuristics import tuned

    g, m, n, ks = k_grouped_default_problems()[1]
    cands = h.k_grouped_candidate_configs(m, n, ks, 132, False)
    assert cands[0] == h.select_k_grouped_config(m, n, ks, 132, False)
    assert len(cands) > 10 and not any(c.has_c for c in cands)
    with_c = h.select_k_grouped_config(m, n, ks, 132, True)
    # A winner unlike either call's current choice, so that the lookup is visible.
    pick = next(c for c in cands[1:] if (c.block_m, c.block_n, c.num_stages) != (with_c.block_m, with_c.block_n,
                                                                                  with_c.num_stages)
                and (c.block_m, c.block_n, c.num_stages) != (cands[0].block_m, cands[0].block_n, cands[0].num_stages))
    best = {"block_m": pick.block_m, "block_n": pick.block_n, "num_stages": pick.num_stages, "num_splits": 1,
            "num_multicast": pick.num_multicast, "multicast_on_a": pick.multicast_on_a, "tma_store": pick.tma_store,
            "half_promote": pick.half_promote, "ctas_per_sm": 1, "k_batch": pick.k_batch, "us": 1.0}
    _, k_plan = h.k_grouped_plan_k(ks)
    rec = {"family": "k_grouped", "groups": g, "m": m, "n": n, "k": k_plan, "has_c": False, "best": best,
           "model_us": 2.0}
    e = table_entry(rec, 132, {"gpu": "test", "commit": "0" * 40, "date": "now"})
    assert e["kind"] == h.K_GROUPED_KIND and e["out_fp32"] and e["has_c"] is False
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [e])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    tuned.clear()
    h.clear_cache()
    try:
        no_c = h.select_k_grouped_config(m, n, ks, 132, False)
        c_eq_d = h.select_k_grouped_config(m, n, ks, 132, True)
    finally:
        monkeypatch.delenv(tuned.TUNED_FILE_ENV)
        tuned.clear()
        h.clear_cache()
    assert (no_c.block_m, no_c.block_n, no_c.num_stages, no_c.has_c) == (pick.block_m, pick.block_n,
                                                                          pick.num_stages, False)
    assert c_eq_d == with_c


def test_tune_no_c_only_for_wgrad_and_k_grouped():
    from finegemm.bench import tune

    for family in ("dense", "masked", "bf16"):
        with pytest.raises(SystemExit, match="--no-c applies to wgrad and k_grouped only"):
            tune.main([family, "--no-c"])
