"""Compile, without a GPU, every BF16 GEMM kernel the GPU tests and the bf16 bench use into
FINEGEMM_CACHE_DIR (the cache key does not depend on the machine: source, headers, flags, nvcc
version; so a cache built here is a hit on a GPU machine with the same nvcc and headers).

By default that is every kernel the heuristic can pick (heuristics.sm90_bf16_gemm.all_kernel_keys(),
which tests/gpu/test_bf16_gemm_gpu.py::test_every_kernel runs anyway); --shapes-only compiles
just the configs select_config returns for the test and bench shapes. Always: every m-grouped
kernel (heuristics.grouped_kernel_keys(), which tests/gpu/test_bf16_grouped_gpu.py forces one by
one), every k-grouped kernel (heuristics.k_grouped_kernel_keys(), forced one by one there too; the
bench's k-grouped records use the heuristic's pick among them), the dense tn kernels of the v1
per-group k-grouped path (ops.K_GROUPED_SINGLE_LAUNCH = False, A/B runs), and the kernels of
`bench bf16`'s grouped records (m-grouped configs and the per-group dense tn launches).
Usage: FINEGEMM_CACHE_DIR=.fgcache python scripts/precompile_bf16.py [--sms 132] [--jobs 2] [--shapes-only]
       [--b-group-twins 2 [4]] [--tune-shapes M,N,K ... [--tune-layouts nt ...] [--multicast]]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm import jit  # noqa: E402
from finegemm.bench.tune import _parse_shape  # noqa: E402
from finegemm.bench.bf16 import GROUPED_EXTRA_LAYOUTS, GROUPED_LAYOUTS, bench_shapes, grouped_plan  # noqa: E402
from finegemm.heuristics.sm90_bf16_gemm import (  # noqa: E402
    GEMM_GROUPED_CONTIGUOUS,
    GEMM_GROUPED_MASKED,
    LAYOUTS,
    all_kernel_keys,
    grouped_kernel_keys,
    k_grouped_k_bucket,
    k_grouped_kernel_keys,
    make_config,
    select_config,
    select_grouped_config,
    select_k_grouped_config,
)
from finegemm.ops import sm90_bf16_gemm as ops  # noqa: E402


def gpu_test_shapes() -> list[tuple[int, int, int]]:
    """(m, n, k) of tests/gpu/test_bf16_gemm_gpu.py (outside the forced-config test)."""
    shapes = [(m, n, k) for m in (1, 17, 128, 4097) for n in (576, 2112, 7168) for k in (512, 7168, 4104)]
    shapes += [(300, 2112, 7168), (1, 2112, 7168), (4097, 7168, 7168), (17, 2112, 4104), (128, 7168, 7168),
               (128, 2112, 7168), (17, 576, 4104), (4097, 2112, 512)]
    return shapes


def k_grouped_test_problems() -> list[tuple[int, int, int, bool]]:
    """(m, n, k_g, has_c) of the dense tn launches of tests/gpu/test_bf16_grouped_gpu.py's k-grouped
    cases (read from the test module, without importing pytest machinery beyond its import)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tests" / "gpu" / "test_bf16_grouped_gpu.py"
    try:
        spec = importlib.util.spec_from_file_location("_fg_bf16_grouped_gpu_cases", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        cases = mod.K_GROUPED_CASES
    except Exception as e:  # pragma: no cover - pytest/torch missing: nothing to add
        print(f"note: k-grouped test cases not read ({e})")
        return []
    return [(m, n, kg, mode != "none") for _, ks, m, n, mode in cases for kg in ks if kg]


def bench_grouped_configs(sms: int) -> list:
    """The m-grouped configs of `bench bf16`'s grouped records, with the planning arguments of the
    calls they make (ops.sm90_bf16_gemm: contiguous -> (m_total, expected 0, mk alignment);
    masked -> (Mmax, expected_m = m, alignment 0))."""
    from finegemm.quant import get_mk_alignment_for_contiguous_layout
    from finegemm.utils import align

    al = get_mk_alignment_for_contiguous_layout()
    out = []
    for r in grouped_plan(GROUPED_LAYOUTS + GROUPED_EXTRA_LAYOUTS):
        if r["layout"] in ("grouped_contiguous", "grouped_contiguous_nn"):
            m_total = sum(align(x, al) for x in r["ms"])
            out.append(select_grouped_config(GEMM_GROUPED_CONTIGUOUS, m_total, r["n"], r["k"], r["groups"], sms, 0, al,
                                             r["layout"] == "grouped_contiguous_nn"))
        elif r["layout"] == "grouped_masked":
            out.append(select_grouped_config(GEMM_GROUPED_MASKED, align(r["m"], 128), r["n"], r["k"], r["groups"], sms,
                                             r["m"], 0))
    return out


def bench_k_grouped_problems() -> list[tuple[int, int, int, bool]]:
    """(m, n, k_g, has_c) of the dense tn launches of `bench bf16`'s k-grouped records (c = d)."""
    return [(r["m"], r["n"], kg, True) for r in grouped_plan() if r["layout"] == "k_grouped" for kg in r["ks"] if kg]


def bench_k_grouped_configs(sms: int) -> list:
    """The k-grouped configs of `bench bf16`'s k-grouped records (c = d), planned as
    ops.plan_k_grouped does (mean k rounded up to a power of two)."""
    out = []
    for r in grouped_plan():
        if r["layout"] == "k_grouped":
            g = r["groups"]
            k_plan = k_grouped_k_bucket(-(-sum(r["ks"]) // g))
            out.append(select_k_grouped_config(r["m"], r["n"], k_plan, g, sms, True))
    return out


def _bf16_gpu_test_module():
    """tests/gpu/test_bf16_gemm_gpu.py as a module (its forced-config case lists)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bf16_gpu_cases", Path(__file__).resolve().parents[1] / "tests"
                                                  / "gpu" / "test_bf16_gemm_gpu.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    return t


def b_group_test_configs() -> list:
    """The forced configurations of tests/gpu/test_bf16_gemm_gpu.py's B-group cases (with and
    without the group) and of scripts/sanitize_cases.py's BF16 B-group tiles."""
    import dataclasses
    import importlib.util

    t = _bf16_gpu_test_module()
    out = []
    for (layout, m, n, k, bm, bn, stages, splits, f32_c, group) in t.B_GROUP_CASES:
        base = make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", f32_c, f32_c, bm, bn, splits,
                           num_stages=stages)
        out += [base, dataclasses.replace(base, b_group=group)]
    spec = importlib.util.spec_from_file_location("_sanitize_cases", Path(__file__).resolve().parent
                                                  / "sanitize_cases.py")
    sc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sc)
    out += [sc.b_group_config(family, case) for _, family, case in sc.B_GROUP_TILES if family == "bf16"]
    return out


def tall_tile_test_configs() -> list:
    """The forced tall-tile configurations of tests/gpu/test_bf16_gemm_gpu.py::test_tall_tile."""
    t = _bf16_gpu_test_module()
    return [t.tall_config(m, n, k, bn, layout, o) for (m, n, k, bn) in t.TALL_SHAPES for layout in LAYOUTS
            for o in t.TALL_OUTS]


def multicast_test_configs() -> list:
    """The forced multicast pairs of tests/gpu/test_bf16_gemm_gpu.py (test_multicast_pairs and the
    bit-equality test against lone CTAs)."""
    t = _bf16_gpu_test_module()
    cfgs = [t.multicast_config(m, n, k, bm, bn, on_a, layout, o) for (m, n, k, bm, bn, on_a) in t.MC_CASES
            for layout in LAYOUTS for o in ("bf16", "fp32", "fp32+c") if t.multicast_case_fits(bm, bn, on_a, layout)]
    from finegemm.heuristics.sm90_bf16_gemm import make_config
    for layout, (a_mn, b_mn) in LAYOUTS.items():
        for mc, on_a in ((1, False), (2, False), (2, True)):
            cfgs.append(make_config(300, 1000, 2048, 132, a_mn, b_mn, False, False, 128, 128, 1, num_multicast=mc,
                                    multicast_on_a=on_a))
    return cfgs


def b_group_twin_configs(sms: int, groups=()) -> list:
    """The B-group twins `tune bf16 --b-group G` times on the tuner's default M <= 128 shapes (the
    layouts with K-major B, where a group can fit), so a re-tune call compiles nothing."""
    from finegemm.bench.tune import bf16_tune_shapes
    from finegemm.heuristics._common import b_group_twins
    from finegemm.heuristics.sm90_bf16_gemm import b_group_fits, candidate_configs

    out = []
    if not groups:
        return out
    for (m, n, k, f32) in bf16_tune_shapes():
        if m > 128:
            continue
        for layout in ("nt", "tt"):
            a_mn, b_mn = LAYOUTS[layout]
            cands = candidate_configs(m, n, k, sms, a_mn, b_mn, out_fp32=f32)
            out += [c for c in b_group_twins(cands, groups, b_group_fits) if c.b_group > 1]
    return out


def tune_configs(sms: int, shapes, layouts, multicast: bool, top: int = 16) -> list:
    """What `tune bf16 --shapes ... --layouts ... [--multicast]` times (bf16 out, its default top),
    so that a re-tune call on the GPU compiles nothing."""
    from finegemm.bench.tune import bf16_tune_candidates

    return [c for (m, n, k) in shapes for layout in layouts
            for c in bf16_tune_candidates(m, n, k, layout, sms, top, multicast=multicast)[0]]


def kernel_sources(sms: int, shapes_only: bool = False, b_group_twins=()) -> dict[str, str]:
    """{kernel name: rendered source} of everything this script compiles."""
    keys = {}
    if not shapes_only:
        for key in all_kernel_keys():
            keys[ops.kernel_name(key)] = key
    problems = [(m, n, k, f32) for (m, n, k, f32) in bench_shapes()]
    problems += [(m, n, k, f32) for (m, n, k) in gpu_test_shapes() for f32 in (False, True)]
    for (m, n, k, f32) in problems:
        for a_mn, b_mn in LAYOUTS.values():
            for has_c in ((False, True) if f32 else (False,)):
                cfg = select_config(m, n, k, sms, a_mn, b_mn, f32, has_c)
                keys[ops.kernel_name(cfg.kernel_key())] = cfg.kernel_key()
    for (m, n, k, has_c) in k_grouped_test_problems() + bench_k_grouped_problems():
        cfg = select_config(m, n, k, sms, True, True, True, has_c)
        keys[ops.kernel_name(cfg.kernel_key())] = cfg.kernel_key()
    if not shapes_only:  # test_b_group_matches_one_k_block_boxes' and test_tall_tile's forced configs
        for cfg in b_group_test_configs() + tall_tile_test_configs() + multicast_test_configs():
            keys[ops.kernel_name(cfg.kernel_key())] = cfg.kernel_key()
    for cfg in b_group_twin_configs(sms, b_group_twins):
        keys[ops.kernel_name(cfg.kernel_key())] = cfg.kernel_key()
    sources = {name: ops.render(*key) for name, key in keys.items()}
    gkeys = set(grouped_kernel_keys()) | {cfg.grouped_kernel_key() for cfg in bench_grouped_configs(sms)}
    for key in sorted(gkeys):
        sources[ops.grouped_kernel_name(key)] = ops.render_grouped(*key)
        if key[3] == GEMM_GROUPED_CONTIGUOUS:  # the twins that check a plain layout / read psum ends themselves
            sources[ops.grouped_kernel_name(key + (True,))] = ops.render_grouped(*key, True)
            sources[ops.grouped_kernel_name(key + (True, True))] = ops.render_grouped(*key, True, True)
    kkeys = set(k_grouped_kernel_keys()) | {cfg.k_grouped_kernel_key() for cfg in bench_k_grouped_configs(sms)}
    for key in sorted(kkeys):
        sources[ops.k_grouped_kernel_name(key)] = ops.render_k_grouped(*key)
    return sources


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--shapes-only", action="store_true")
    p.add_argument("--b-group-twins", type=int, nargs="+", default=[], choices=(2, 4), metavar="G",
                   help="also the B-group twins `tune bf16 --b-group G` times on its M <= 128 shapes")
    p.add_argument("--tune-shapes", nargs="+", default=[], type=_parse_shape, metavar="M,N,K",
                   help="also what `tune bf16 --shapes M,N,K ...` times (with --tune-layouts, --multicast)")
    p.add_argument("--tune-layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS),
                   help="--tune-shapes: the layouts `tune bf16 --layouts` times (default: all four)")
    p.add_argument("--multicast", action="store_true", help="--tune-shapes: also the 2-CTA pair twins")
    args = p.parse_args()
    if any(len(s) != 3 for s in args.tune_shapes):
        p.error("--tune-shapes takes M,N,K")
    sources = kernel_sources(args.sms, args.shapes_only, args.b_group_twins)
    for cfg in tune_configs(args.sms, args.tune_shapes, args.tune_layouts, args.multicast):
        sources[ops.kernel_name(cfg.kernel_key())] = ops.render(*cfg.kernel_key())
    print(f"{len(sources)} kernel configurations")
    jit.build_many(sources, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
