"""Compile, without a GPU, the FP8 GEMM kernels a list of shapes needs into FINEGEMM_CACHE_DIR.

The cache key does not depend on the machine (source, headers, flags, nvcc version), so a cache
built here is a cache hit on a GPU machine with the same nvcc: GPU time is not spent in nvcc.
Usage: FINEGEMM_CACHE_DIR=.fgcache python scripts/precompile.py [--sms 132] [--jobs 2]
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm import jit  # noqa: E402
from finegemm.bench.dense import CURVE_M, DENSE_M, DENSE_NK  # noqa: E402
from finegemm.heuristics.sm90_fp8_gemm import (  # noqa: E402
    GEMM_GROUPED_CONTIGUOUS,
    GEMM_GROUPED_MASKED,
    make_config,
    max_stages,
    select_config,
    select_grouped_config,
)
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402


def gpu_test_shapes() -> list[tuple[int, int, int]]:
    shapes = [(m, n, k) for m in (1, 17, 64, 128, 4097) for n in (576, 2112, 7168) for k in (512, 7168, 7296, 144)]
    shapes += [(1, 129280, 7168), (17, 129280, 512), (1, 129280, 144)]
    shapes += [(m, n, k) for m in (1, 17, 64, 128, 4097) for n in (576, 2112, 4096, 7168) for k in (512, 2048, 7168, 7296)]
    return shapes


def grouped_configs(sms: int) -> list:
    """The m-grouped configs of tests/gpu/test_grouped_fp8_gpu.py and `bench grouped` (same
    planning arguments as the calls they make)."""
    import dataclasses
    import importlib.util
    import random

    from finegemm.bench import grouped as bench
    from finegemm.utils import align

    spec = importlib.util.spec_from_file_location("_grouped_gpu_cases", Path(__file__).resolve().parents[1] / "tests"
                                                  / "gpu" / "test_grouped_fp8_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    out = []
    C, M = GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED
    for _, ms, n, k, pad_after, _psum in t.CONTIGUOUS_CASES + [t.FORCED_CONTIGUOUS]:
        m_total, _ = t.contiguous_rows(ms, 128, pad_after)
        out.append(select_grouped_config(C, m_total, n, k, len(ms), sms, 0, 128))
    for ms, al in (([64, 10, 100, 0, 64], 64),):
        out.append(select_grouped_config(C, t.contiguous_rows(ms, al)[0], 2112, 1024, len(ms), sms, 0, al))
    for _, g, m_max, n, k, _masked, em in t.MASKED_CASES + [t.FORCED_MASKED]:
        out.append(select_grouped_config(M, m_max, n, k, g, sms, em, 0))
    out.append(select_grouped_config(M, 320, 7168, 2048, 6, sms, 200, 0))  # the graph test
    forced = []
    for bm, bn, mc, tma in t.FORCED:
        st = max_stages(bm, bn, tma)
        for cfg in (out[len(t.CONTIGUOUS_CASES)], out[-2]):  # FORCED_CONTIGUOUS / FORCED_MASKED plans
            forced.append(dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st, num_multicast=mc,
                                              multicast_on_a=mc == 2, tma_store=tma))
    out += forced
    # bench grouped: the same random segment sizes (random.Random(0), same call order).
    rng = random.Random(0)
    align_m = 128
    for (g, m) in bench.CONTIGUOUS_GM:
        for (n, k) in bench.GROUPED_NK:
            ms = [int(m * rng.uniform(0.7, 1.3)) for _ in range(g)]
            out.append(select_grouped_config(C, sum(align(x, align_m) for x in ms), n, k, g, sms, 0, align_m))
    for (g, m) in bench.MASKED_GM:
        for (n, k) in bench.GROUPED_NK:
            out.append(select_grouped_config(M, align(m, 128), n, k, g, sms, m, 0))
    return out


def wgrad_configs(sms: int) -> list:
    """The recipe (1, 1, 128) configs of tests/gpu/test_fp8_wgrad_gpu.py (dense, forced, and the
    per-group dense launches of the k-grouped cases), with the planning arguments of its calls,
    and those of `bench grouped`'s k_grouped and wgrad records (fp32 d, c = d)."""
    import importlib.util

    from finegemm.bench import grouped as bench

    spec = importlib.util.spec_from_file_location("_wgrad_gpu_cases", Path(__file__).resolve().parents[1] / "tests"
                                                  / "gpu" / "test_fp8_wgrad_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    out = []
    for (m, n, k) in t.DENSE_SHAPES:
        out.append(select_config(m, n, k, sms, True, False, one_d_one_d=True))
    for (m, n, k) in t.C_SHAPES + [t.LAYOUT_SHAPE] + t.DET_SHAPES:
        out.append(select_config(m, n, k, sms, True, True, one_d_one_d=True))
    m, n, k = t.FORCED_SHAPE
    base = select_config(m, n, k, sms, True, True, one_d_one_d=True)
    for bm, bn, mc, mc_a, splits in t.FORCED:
        out.append(t.forced_config(base, bm, bn, mc, mc_a, splits, sms))
    # The fp32 TMA epilogue tests (forced tile, TMA on and off, with and without C).
    for (m, n, k) in t.TMA_EPI_SHAPES + [(257, 1000, 640), (128, 256, 256)]:
        for has_c in (False, True):
            plan = select_config(m, n, k, sms, True, has_c, one_d_one_d=True)
            for bm, bn, mc, mc_a in t.TMA_EPI_CFGS:
                for tma in (True, False):
                    out.append(t.tma_epilogue_config(plan, bm, bn, mc, mc_a, tma, sms))
            for bm, bn, mc, mc_a, tma in t.HALF_PROMOTE_CFGS:
                for hp in (True, False):
                    out.append(t.tma_epilogue_config(plan, bm, bn, mc, mc_a, tma, sms, half_promote=hp))
            for bm, bn, mc, mc_a, tma, kbat in t.KBATCH_CFGS:
                for kb in (kbat, 1):
                    out.append(t.tma_epilogue_config(plan, bm, bn, mc, mc_a, tma, sms, k_batch=kb))
    # C staged in shared memory against C from global memory and the TMA reduce-add (test_dense_1d1d_c_stage*).
    for (m, n, k) in t.C_STAGE_SHAPES + [(257, 1000, 640)]:
        for bm, bn, mc, mc_a, kbat in t.C_STAGE_CFGS:
            out += list(t.c_stage_configs(m, n, k, bm, bn, mc, mc_a, kbat, sms))
    # Two CTAs per SM against one (test_dense_1d1d_two_cta).
    for (m, n, k) in t.TWO_CTA_SHAPES:
        for bn, mc, cst in t.TWO_CTA_CFGS:
            for has_c in (False, True):
                out += list(t.two_cta_configs(m, n, k, bn, mc, cst, has_c, sms))
    # block_m 192 against block_m 128 (test_dense_1d1d_three_warpgroups).
    for (m, n, k) in t.TMA_EPI_SHAPES:
        for has_c in (False, True):
            for bn, tma, hp in t.THREE_WG_1D1D:
                for bm in (192, 128):
                    out.append(make_config(m, n, k, sms, True, has_c, bm, bn, max_stages(bm, bn, tma, True), 1, 1,
                                           False, tma, hp, one_d_one_d=True))
    # k-grouped, per-group path (K_GROUPED_SINGLE_LAUNCH False, parametrized in the GPU tests too).
    per_group = t.K_GROUPED_CASES + [t.K_GROUPED_DET] + t.K_GROUPED_ONE_LAUNCH_CASES + [t.K_GROUPED_REPEAT]
    for _, m, n, ks, mode in per_group:
        for kg in ks:
            if kg:
                out.append(select_config(m, n, kg, sms, True, mode != "none", one_d_one_d=True))
    # bench grouped: k_grouped (per-group path: one dense launch per non-empty group) and wgrad records.
    for (m, n, k, has_c) in bench.planned_1d1d_problems():
        out.append(select_config(m, n, k, sms, True, has_c, one_d_one_d=True))
    return out + k_grouped_configs(sms, t)


def k_grouped_configs(sms: int, t) -> list:
    """The one-launch k-grouped configs (scheduler kind GEMM_K_GROUPED) of tests/gpu/test_fp8_wgrad_gpu.py
    (`t`: that module) and of `bench grouped`'s k_grouped records (c = d)."""
    from finegemm.bench import grouped as bench
    from finegemm.heuristics.sm90_fp8_gemm import k_grouped_plan_k, make_k_grouped_config, select_k_grouped_config

    out = []
    cases = t.K_GROUPED_CASES + [t.K_GROUPED_DET] + t.K_GROUPED_ONE_LAUNCH_CASES + [t.K_GROUPED_REPEAT]
    problems = [(m, n, ks, mode != "none") for _, m, n, ks, mode in cases]
    problems += [(m, n, ks, True) for m, n, ks in [t.K_GROUPED_GRAPH]]
    problems += [(t.K_GROUPED_LAUNCH_COUNT_MN[0], t.K_GROUPED_LAUNCH_COUNT_MN[1], ks, False)
                 for ks, _ in t.K_GROUPED_LAUNCH_COUNT]
    for (g, m, n, ks, _ek) in bench.k_grouped_problems():
        problems += [(m, n, ks, True), (m, n, ks, False)]  # c = d, and the finegemm_no_c timing
    for m, n, ks, has_c in problems:
        if any(ks):
            out.append(select_k_grouped_config(m, n, ks, sms, has_c))
    ks = [256, 0, 1152, 128, 640]  # test_k_grouped_tma_epilogue
    active, k_plan = k_grouped_plan_k(ks)
    for bm, bn, mc, mc_a in t.TMA_EPI_CFGS[:3]:
        for has_c in (False, True):
            for tma in (True, False):
                out.append(make_k_grouped_config(100, 1000, k_plan, len(ks), active, sms, has_c, bm, bn,
                                                 max_stages(bm, bn, tma, True), mc, mc_a, tma_store=tma))
    for bm, bn, mc, mc_a, tma in t.HALF_PROMOTE_CFGS[:3]:
        for hp in (True, False):
            out.append(make_k_grouped_config(100, 1000, k_plan, len(ks), active, sms, True, bm, bn,
                                             max_stages(bm, bn, tma, True), mc, mc_a, tma_store=tma, half_promote=hp))
    for bm, bn, mc, mc_a, tma, kbat in t.KBATCH_CFGS[:3]:
        for kb in (kbat, 1):
            out.append(make_k_grouped_config(100, 1000, k_plan, len(ks), active, sms, True, bm, bn,
                                             max_stages(bm, bn, tma, True), mc, mc_a, tma_store=tma, k_batch=kb))
    for bn, tma, hp in t.THREE_WG_1D1D[:3]:  # test_k_grouped_three_warpgroups
        for m, n, ks in t.THREE_WG_K_GROUPED:
            active, k_plan = k_grouped_plan_k(ks)
            for bm in (192, 128):
                out.append(make_k_grouped_config(m, n, k_plan, len(ks), active, sms, True, bm, bn,
                                                 max_stages(bm, bn, tma, True), 1, False, tma_store=tma, half_promote=hp))
    for m, n, ks in [t.FORCED_K_GROUPED, t.FORCED_K_GROUPED_MANY]:
        active, k_plan = k_grouped_plan_k(ks)
        for bm, bn, mc, mc_a in t.FORCED_K_GROUPED_CFGS:
            out.append(make_k_grouped_config(m, n, k_plan, len(ks), active, sms, True, bm, bn,
                                             max_stages(bm, bn, False, True), mc, mc_a))
    return out


def bench_1d1d_configs(sms: int) -> list:
    """Only `bench grouped`'s wgrad and k_grouped kernels (for an A/B of build variants)."""
    from finegemm.bench import grouped as bench
    from finegemm.heuristics.sm90_fp8_gemm import select_k_grouped_config

    out = [select_config(m, n, k, sms, True, has_c, one_d_one_d=True)
           for (m, n, k, has_c) in bench.planned_1d1d_problems()]
    for (_g, m, n, ks, _ek) in bench.k_grouped_problems():
        if any(ks):
            out += [select_k_grouped_config(m, n, ks, sms, has_c) for has_c in (True, False)]
    return out


def skip_head_mid_configs(sms: int) -> list:
    """The fused skip-head-mid kernels of tests/gpu/test_deepgemm_extras_gpu.py and of
    scripts/sanitize_cases.py (the plain plan's tile with the head splits, where it serves them)."""
    from finegemm.ops.sm90_fp8_gemm import tma_store_box_cols

    spec = importlib.util.spec_from_file_location("_extras_gpu_cases", Path(__file__).resolve().parents[1] / "tests"
                                                  / "gpu" / "test_deepgemm_extras_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    problems = [(m, heads * (splits[0] + splits[2]), k, splits) for splits, heads, k in t.SKIP_HEAD_MID_CASES
                for m in t.SKIP_HEAD_MID_M]
    problems += [(m, n, 512, (128, 64, 128)) for m, n in ((128, 8192), (4096, 32768), (128, 32768))]
    problems.append((130, 5 * 256, 512, (128, 64, 128)))  # sanitize_cases.py
    out = []
    for m, n, k, (left, mid, right) in problems:
        cfg = select_config(m, n, k, sms, False, False)
        box = tma_store_box_cols(cfg.block_n)
        if mid and cfg.tma_store and not cfg.split_k and left % box == 0 and right % box == 0:
            out.append(dataclasses.replace(cfg, head_splits=(left, mid, right)))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only-1d1d", action="store_true",
                   help="only the recipe (1, 1, 128) configurations (e.g. for an A/B build of that loop)")
    p.add_argument("--bench-1d1d", action="store_true",
                   help="only `bench grouped`'s wgrad / k_grouped kernels (an A/B build of the 1D1D loop)")
    p.add_argument("--shapes", nargs="+", metavar="M,N,K",
                   help="only the bf16-output configurations of these dense shapes (an A/B build of "
                        "`bench dense --shapes`)")
    args = p.parse_args()
    cfgs = {}
    if args.shapes:
        for triple in args.shapes:
            m, n, k = (int(v) for v in triple.split(","))
            cfg = select_config(m, n, k, args.sms, False, False)
            cfgs[ops._kernel_name(cfg)] = cfg
        return build(cfgs, args.jobs)

    def add_1d1d(cfg) -> None:
        if cfg.has_c and not ops.ACCUMULATE_C_IN_KERNEL_1D1D:  # ops: _AccumulateAfter
            cfg = dataclasses.replace(cfg, has_c=False)
        cfgs[ops._kernel_name(cfg)] = cfg

    if args.bench_1d1d:
        for cfg in bench_1d1d_configs(args.sms):
            add_1d1d(cfg)
        return build(cfgs, args.jobs)
    bench = [(m, n, k) for m in DENSE_M + CURVE_M for (n, k) in DENSE_NK]
    for (m, n, k) in bench + gpu_test_shapes():
        for out_fp32, has_c in ((False, False), (True, False), (True, True)):
            cfg = select_config(m, n, k, args.sms, out_fp32, has_c)
            cfgs[ops._kernel_name(cfg)] = cfg
    # block_m 192, 1D2D (tests/gpu/test_fp8_gemm_gpu.py::test_three_warpgroup_tiles).
    spec = importlib.util.spec_from_file_location("_fp8_gpu_cases", Path(__file__).resolve().parents[1] / "tests"
                                                  / "gpu" / "test_fp8_gemm_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    for (m, n, k) in t.THREE_WG_SHAPES:
        for bn, st in t.THREE_WG_1D2D:
            for bm, stages in ((192, st), (128, max_stages(128, bn))):
                cfg = make_config(m, n, k, args.sms, False, False, bm, bn, stages)
                cfgs[ops._kernel_name(cfg)] = cfg
    # Split clusters against the workspace path (test_split_cluster_matches_workspace_path).
    for (m, n, k, bm, bn, splits, kbat, f32_c) in t.SPLIT_CLUSTER_CASES:
        cfg = make_config(m, n, k, args.sms, f32_c, f32_c, bm, bn, max_stages(bm, bn), splits, k_batch=kbat)
        cfgs[ops._kernel_name(cfg)] = cfg
    # The TMA-stored split clusters inside a window of a wider d (test_split_cluster_tma_store_stays_in_d).
    for (m, n, k, bm, bn, splits) in t.SPLIT_TMA_STORE_CASES:
        cfg = make_config(m, n, k, args.sms, False, False, bm, bn, max_stages(bm, bn), splits)
        cfgs[ops._kernel_name(cfg)] = cfg
    # B boxes over several k-blocks against one-k-block boxes (test_b_group_matches_one_k_block_boxes).
    for (m, n, k, bm, bn, stages, splits, mc_a, kbat, tmas, f32_c, hp, group) in t.B_GROUP_CASES:
        base = make_config(m, n, k, args.sms, f32_c, f32_c, bm, bn, stages, splits, 2 if mc_a else 1, mc_a, tmas, hp,
                           k_batch=kbat)
        for cfg in (base, dataclasses.replace(base, b_group=group)):
            cfgs[ops._kernel_name(cfg)] = cfg
    # The workspace path with one and several units per CTA, and NaN partials
    # (test_split_workspace_one_unit_matches_several, test_split_k_nan_partials).
    for (m, n, k, bm, bn, splits, kbat, f32_c) in t.SPLIT_WORKSPACE_CASES:
        cfg = make_config(m, n, k, args.sms, f32_c, f32_c, bm, bn, max_stages(bm, bn), splits, k_batch=kbat)
        cfgs[ops._kernel_name(cfg)] = cfg
    for out_fp32 in (False, True):
        for bn, splits in ((144, 4), (64, 2)):
            cfg = make_config(17, 1000, 7168, args.sms, out_fp32, False, 64, bn, max_stages(64, bn), splits)
            cfgs[ops._kernel_name(cfg)] = cfg
    # The fitted-A-box tiles (test_fitted_a_boxes).
    for (bm, bn, splits, mc, mc_a, tma) in t.FITTED_A_VARIANTS:
        cfg = make_config(1, 2112, 7296, args.sms, False, False, bm, bn, max_stages(bm, bn, tma), splits, mc, mc_a, tma)
        cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in grouped_configs(args.sms):
        cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in wgrad_configs(args.sms):
        if cfg.one_d_one_d:
            add_1d1d(cfg)
        else:
            cfgs[ops._kernel_name(cfg)] = cfg
    # The forced recipe (1, 1, 128) tiles of scripts/sanitize_cases.py.
    spec = importlib.util.spec_from_file_location("_sanitize_cases", Path(__file__).resolve().parent
                                                  / "sanitize_cases.py")
    sc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sc)
    for _, tile in sc.WGRAD_TILES:
        add_1d1d(sc.wgrad_tile_config(*tile, sms=args.sms))
    for _, case in sc.WGRAD_TWO_CTA:
        add_1d1d(sc.wgrad_two_cta_config(*case, sms=args.sms))
    for _, family, case in sc.B_GROUP_TILES:
        if family == "fp8":
            cfg = sc.b_group_config(family, case, sms=args.sms)
            cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in fuzz_configs(args.sms):
        if cfg.one_d_one_d:
            add_1d1d(cfg)
        else:
            cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in skip_head_mid_configs(args.sms):
        cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in fp8_einsum_configs(args.sms):
        cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in psum_in_gemm_plans(args.sms):
        cfgs[ops._kernel_name(cfg)] = cfg
    # Every contiguous kernel's twins that check a plain layout / read psum ends themselves (the
    # in-kernel checks: their GPU tests run the same calls with the capabilities opened).
    for cfg in [c for c in cfgs.values() if c.gemm_kind == GEMM_GROUPED_CONTIGUOUS and not c.layout_check]:
        for psum in (False, True):
            twin = dataclasses.replace(cfg, layout_check=True, psum_layout=psum)
            cfgs[ops._kernel_name(twin)] = twin
    if args.only_1d1d:
        cfgs = {name: cfg for name, cfg in cfgs.items() if cfg.one_d_one_d}
    return build(cfgs, args.jobs)


def psum_in_gemm_plans(sms: int) -> list:
    """The contiguous plans of tests/gpu/test_contiguous_layout_gpu.py's psum-in-GEMM test (its
    groups at alignments 64 and 128) and of scripts/probe_psum_in_gemm.py (the twins that read the
    ends are added with every contiguous plan's)."""
    import importlib.util
    import random

    tests = Path(__file__).resolve().parents[1] / "tests"
    sys.path.insert(0, str(tests))
    spec = importlib.util.spec_from_file_location("_contiguous_layout_gpu_cases", tests / "gpu" /
                                                  "test_contiguous_layout_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    out = []
    for ms in t.PSUM_IN_GEMM_MS:
        for al in (64, 128):
            rows = t.psum_rows(ms, al)[1]
            out.append(select_grouped_config(GEMM_GROUPED_CONTIGUOUS, rows, t.PSUM_IN_GEMM_N, t.PSUM_IN_GEMM_K,
                                             len(ms), sms, 0, al))
    spec = importlib.util.spec_from_file_location("_probe_psum", Path(__file__).resolve().parent /
                                                  "probe_psum_in_gemm.py")
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    for g, m_total in p.problem_rows(random.Random(0)):
        out.append(select_grouped_config(GEMM_GROUPED_CONTIGUOUS, m_total, p.N, p.K, g, sms, 0, p.ALIGNMENT))
    return out


def fp8_einsum_configs(sms: int) -> list:
    """The kernels of tests/gpu/test_deepgemm_extras_gpu.py's fp8_einsum tests: the masked plan
    over the heads (bf16 d) and the dense fp32 plans of one head (with and without c)."""
    spec = importlib.util.spec_from_file_location("_extras_gpu_cases", Path(__file__).resolve().parents[1] / "tests"
                                                  / "gpu" / "test_deepgemm_extras_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    spec = importlib.util.spec_from_file_location("_probe_fp8_einsum", Path(__file__).resolve().parent
                                                  / "probe_fp8_einsum.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    out = []
    for batch, heads, r, n in t.FP8_EINSUM_SHAPES + [(40, 8, 512, 128), (32, 16, 512, 128)]:
        out.append(select_grouped_config(GEMM_GROUPED_MASKED, batch, n, r, heads, sms, batch, 0))
        for has_c in (False, True):
            out.append(select_config(batch, n, r, sms, True, has_c))
    # The heads-packed kernel (its GPU tests, the sanitizer cases, scripts/probe_fp8_einsum.py),
    # and the masked plan the probe's composition takes.
    packed = [(b, h, r, n) for b, h, r, n, _, _ in t.HEADS_PACKED_CASES]
    packed += [(8, 4, 256, 64), (32, 16, 512, 128), (130, 64, 256, 200), (5, 16, 512, 128)]
    packed += [(b, probe.HEADS, probe.R, probe.D) for b in probe.BATCHES]
    for batch, heads, r, n in packed:
        if r % 128 == 0:  # sfa through its MN-major copy, and gathered in place
            out += [ops.heads_packed_config(batch, n, r, heads, sms, sfa_gather=g) for g in (False, True)]
        out.append(select_grouped_config(GEMM_GROUPED_MASKED, batch, n, r, heads, sms, batch, 0))
    # fp32 d with and without c on the heads-packed tile (test_fp8_einsum_heads_packed_fp32, the
    # sanitizer case), and the per-head dense plans of the composition they are compared with.
    for batch, heads, r, n in [(b, h, r, n) for b, h, r, n, _, _ in t.HEADS_PACKED_CASES[:4]] + [(70, 4, 256, 40)]:
        for has_c in (False, True):
            out += [ops.heads_packed_config(batch, n, r, heads, sms, True, has_c, sfa_gather=g) for g in (False, True)]
            out.append(select_config(batch, n, r, sms, True, has_c))
    return out


def fuzz_configs(sms: int) -> list:
    """The FP8 kernels of tests/gpu/test_fuzz_gpu.py's valid, large and settings cases, of
    tests/gpu/test_concurrency_gpu.py, tests/gpu/test_huge_outputs_gpu.py and of
    tests/gpu/test_output_bounds_gpu.py (their plan arguments, finegemm.testing.fuzz.kernel_plans'
    tuples, as the ops' plan functions pass them to the heuristics; a settings case's SM budget in
    place of `sms`, and no two-CTA tiles under a budget, as ops.sm90_fp8_gemm.plan decides)."""
    from finegemm.heuristics.sm90_fp8_gemm import select_k_grouped_config

    plans = set()
    for name in ("test_fuzz_gpu", "test_output_bounds_gpu", "test_concurrency_gpu", "test_huge_outputs_gpu"):
        spec = importlib.util.spec_from_file_location(f"_{name}", Path(__file__).resolve().parents[1] / "tests"
                                                      / "gpu" / f"{name}.py")
        t = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(t)
        plans |= {(None, p) for p in t.planned_kernels()}
        if hasattr(t, "planned_large_kernels"):
            plans |= {(None, p) for p in t.planned_large_kernels()}
        if hasattr(t, "planned_settings_kernels"):
            plans |= t.planned_settings_kernels()
    out = []
    for budget, p in sorted(plans, key=repr):
        kind, args = p[0], p[1:]
        n_sms = sms if budget is None else budget
        if kind == "fp8":
            m, n, k, out_fp32, has_c, one_d_one_d = args
            out.append(select_config(m, n, k, n_sms, out_fp32, has_c, one_d_one_d=one_d_one_d,
                                     allow_two_cta=n_sms >= sms))
        elif kind == "fp8_grouped":
            out.append(select_grouped_config(*args[:5], n_sms, *args[5:]))
        elif kind == "fp8_heads":
            batch, n, r, heads, out_fp32, has_c = args
            out += [ops.heads_packed_config(batch, n, r, heads, n_sms, out_fp32, has_c, sfa_gather=g)
                    for g in (False, True)]
        elif kind == "fp8_k_grouped":
            m, n, ks, has_c = args
            out.append(select_k_grouped_config(m, n, list(ks), n_sms, has_c))
    return out


def build(cfgs: dict, jobs: int) -> int:
    print(f"{len(cfgs)} kernel configurations")
    jit.build_many({name: ops._render_cfg(cfg) for name, cfg in cfgs.items()}, jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
