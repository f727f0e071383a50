"""Compile, without a GPU, every candidate kernel `python -m finegemm tune dense` will time.

Usage: FINEGEMM_CACHE_DIR=.fgcache python scripts/precompile_tune.py [--shapes M,N,K ...] [--top 16] [--b-group 2 4]
       [--masked | --masked-shapes G,M,N,K ...] [--wgrad] [--contiguous] [--k-grouped]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm import jit  # noqa: E402
from finegemm.bench.tune import _parse_shape, default_shapes, wgrad_default_shapes  # noqa: E402
from finegemm.heuristics._common import b_group_twins  # noqa: E402
from finegemm.heuristics.sm90_fp8_gemm import b_group_fits, candidate_configs  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402


def forced_test_configs(sms: int) -> list:
    """The configs tests/gpu/test_fp8_gemm_gpu.py::test_forced_tuner_families forces."""
    import ast

    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    src = (Path(__file__).resolve().parents[1] / "tests" / "gpu" / "test_fp8_gemm_gpu.py").read_text()
    start = src.index("FORCED_TUNER_VARIANTS = [")
    variants = ast.literal_eval(src[src.index("[", start):src.index("]\n", start) + 1])
    out = []
    for bn, splits, mc, tma, hp, cps, kbat in variants:
        for bm in ((64,) if cps == 2 else (64, 128)):
            out.append(make_config(4096, 7168, 7168, sms, False, False, bm, bn, max_stages(bm, bn, tma, ctas_per_sm=cps),
                                   splits, mc, mc == 2, tma, hp, ctas_per_sm=cps, k_batch=kbat))
    # ... and those of test_deep_ring_configs (split-K or not is the only shape-dependent choice).
    from finegemm.heuristics.sm90_fp8_gemm import MAX_STAGES
    start = src.index("DEEP_RING_VARIANTS = [")
    for bm, bn, splits, mc, mc_on_a, tma in ast.literal_eval(src[src.index("[", start):src.index("]\n", start) + 1]):
        for sp in {1, splits}:
            out.append(make_config(4096, 7168, 7168, sms, False, False, bm, bn, max_stages(bm, bn, tma, cap=MAX_STAGES),
                                   sp, mc, mc_on_a, tma))
    return out


def shipped_table_configs() -> list:
    """The configuration of every entry of the shipped tuned table (what the library will launch
    for those shapes; tests/gpu test each one)."""
    import json

    from finegemm.heuristics import tuned
    from finegemm.heuristics.sm90_fp8_gemm import tuned_entry_config

    out = []
    for e in json.loads(tuned.SHIPPED_TABLE.read_text())["entries"]:
        cfg = tuned_entry_config(e)
        if cfg.one_d_one_d and cfg.has_c and not ops.ACCUMULATE_C_IN_KERNEL_1D1D:
            cfg = dataclasses.replace(cfg, has_c=False)
        out.append(cfg)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--top", type=int, default=16)
    p.add_argument("--shapes", nargs="+", type=_parse_shape)
    p.add_argument("--curve", action="store_true")
    p.add_argument("--wgrad", action="store_true", help="also the candidates of `tune wgrad`")
    p.add_argument("--masked", action="store_true", help="also the candidates of `tune masked`")
    p.add_argument("--masked-shapes", nargs="+", type=_parse_shape, metavar="G,M,N,K",
                   help="also the candidates of `tune masked --shapes G,M,N,K ...` (instead of its defaults "
                        "with --masked)")
    p.add_argument("--contiguous", action="store_true", help="also the candidates of `tune contiguous`")
    p.add_argument("--k-grouped", action="store_true", help="also the candidates of `tune k_grouped`")
    p.add_argument("--block-m", type=int, default=None,
                   help="only that block_m's candidates (as `tune --block-m`; today's selections are table "
                        "entries or model choices, which scripts/precompile.py builds)")
    p.add_argument("--b-group", type=int, nargs="+", default=[], choices=(2, 4), metavar="G",
                   help="also the B-group twins `tune dense --b-group G` times")
    args = p.parse_args()
    cfgs = {}
    keep = (lambda c: True) if args.block_m is None else (lambda c: c.block_m == args.block_m)
    for (m, n, k) in args.shapes or default_shapes(args.curve):
        for cfg in b_group_twins(list(filter(keep, candidate_configs(m, n, k, args.sms, top=args.top))),
                                 args.b_group, b_group_fits):
            cfgs[ops._kernel_name(cfg)] = cfg
    if args.wgrad:
        for (m, n, k) in wgrad_default_shapes():
            for cfg in filter(keep, candidate_configs(m, n, k, args.sms, True, True, top=args.top, one_d_one_d=True)):
                if not ops.ACCUMULATE_C_IN_KERNEL_1D1D:  # C added after the kernel (ops: _AccumulateAfter)
                    cfg = dataclasses.replace(cfg, has_c=False)
                cfgs[ops._kernel_name(cfg)] = cfg
    if args.masked or args.masked_shapes:
        from finegemm.bench.tune import masked_default_shapes, masked_tune_candidates
        if any(len(s) != 4 for s in args.masked_shapes or ()):
            p.error("--masked-shapes takes G,M,N,K")
        for (g, m, n, k) in args.masked_shapes or masked_default_shapes():
            for cfg in masked_tune_candidates(g, m, n, k, args.sms, args.top)[0]:
                cfgs[ops._kernel_name(cfg)] = cfg
    if args.contiguous:
        from finegemm.bench.tune import contiguous_default_problems
        from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_CONTIGUOUS, grouped_candidate_configs
        from finegemm.utils import align
        for (g, _m, n, k, ms) in contiguous_default_problems():
            m_total = sum(align(m_g, 128) for m_g in ms)
            for cfg in grouped_candidate_configs(GEMM_GROUPED_CONTIGUOUS, m_total, n, k, g, args.sms, 0, 128,
                                                 top=args.top):
                cfgs[ops._kernel_name(cfg)] = cfg
    if args.k_grouped:
        from finegemm.bench.tune import k_grouped_default_problems
        from finegemm.heuristics.sm90_fp8_gemm import k_grouped_candidate_configs
        for (g, m, n, ks) in k_grouped_default_problems():
            for cfg in filter(keep, k_grouped_candidate_configs(m, n, ks, args.sms, True, top=args.top)):
                cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in shipped_table_configs():
        cfgs[ops._kernel_name(cfg)] = cfg
    for cfg in forced_test_configs(args.sms):
        cfgs[ops._kernel_name(cfg)] = cfg
    print(f"{len(cfgs)} candidate kernels")
    jit.build_many({name: ops._render_cfg(cfg) for name, cfg in cfgs.items()}, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
