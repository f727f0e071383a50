"""Where do the contiguous FP8 records lose ~2% per row against the dense kernel? (GPU probe)

The two contiguous G = 4 records below DeepGEMM's goal (34048 x 4096 x 7168 and 34048 x 7168 x 2048,
the bench's segment sizes) run ~2% slower than the dense kernel's rate at 8192 rows would predict.
One process, every variant kernel-only with L2 flushed, interleaved over --rounds rounds:
  * api          the public call (one launch, layout checked in the kernel), as the bench times it;
  * ids          the contiguous kernel on pre-checked ids, the planner's config;
  * ids_equal    the same with four equal segments (no padding rows, no ragged boundary);
  * ids_g1       the same with one group (all rows group 0: B's rows never change);
  * dense_same   the dense kernel on A and B[0] with the contiguous config (A multicast);
  * dense_own    the dense kernel with its own plan (B multicast where the model takes it);
  * dense_mc_b   the dense kernel with the contiguous tile and a B multicast.

  python3 scripts/probe_contiguous_vs_dense.py [--rounds 3] [--out $OUT/contiguous_vs_dense.json]
  FINEGEMM_CACHE_DIR=.fgcache python3 scripts/probe_contiguous_vs_dense.py --precompile   # CPU
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [(4, 4096, 7168), (4, 7168, 2048)]


def configs(g: int, n: int, k: int, m_total: int, sms: int) -> dict:
    """The variants' configs (no GPU): the contiguous plan and the three dense ones."""
    import dataclasses

    from finegemm.heuristics.sm90_fp8_gemm import (GEMM_GROUPED_CONTIGUOUS, make_config, select_config,
                                                   select_grouped_config)
    cfg = select_grouped_config(GEMM_GROUPED_CONTIGUOUS, m_total, n, k, g, sms)
    same = make_config(m_total, n, k, sms, False, False, cfg.block_m, cfg.block_n, cfg.num_stages, 1,
                       cfg.num_multicast, cfg.multicast_on_a, cfg.tma_store, cfg.half_promote)
    mc_b = make_config(m_total, n, k, sms, False, False, cfg.block_m, cfg.block_n, cfg.num_stages, 1,
                       2, False, cfg.tma_store, cfg.half_promote)
    return {"grouped": cfg,
            "dense_same": dataclasses.replace(same, l2_promotion=cfg.l2_promotion),
            "dense_own": select_config(m_total, n, k, sms),
            "dense_mc_b": dataclasses.replace(mc_b, l2_promotion=cfg.l2_promotion)}


def padded_total(ms: list) -> int:
    return sum((m + 127) // 128 * 128 for m in ms)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-tests", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    from finegemm.bench.grouped import contiguous_problems
    problems = {(g, n, k): ms for (g, _m, n, k, ms) in contiguous_problems()}
    if args.precompile:
        from finegemm import jit
        from finegemm.ops import sm90_fp8_gemm as ops
        srcs = {}
        for g, n, k in CASES:
            for cfg in configs(g, n, k, padded_total(problems[(g, n, k)]), args.sms).values():
                srcs[ops._kernel_name(cfg)] = ops._render_cfg(cfg)
        jit.build_many(srcs, 2)
        return 0
    import torch

    import finegemm
    from finegemm import runtime
    from finegemm.bench._common import kernel_time_us
    from finegemm.bench.grouped import _quantized_experts
    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.ops.contiguous_layout import checked_group_ids

    sms = runtime.get_num_sms()
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = []
    for g, n, k in CASES:
        ms = problems[(g, n, k)]
        padded = [finegemm.align(m, 128) for m in ms]
        m_total = sum(padded)
        layout = torch.full((m_total,), -1, dtype=torch.int32, device="cuda")
        row = 0
        for i, (m, p) in enumerate(zip(ms, padded)):
            layout[row:row + m] = i
            row += p
        seg = m_total // g // 128 * 128  # equal aligned segments, the last one takes the rest
        equal = (torch.arange(m_total, device="cuda", dtype=torch.int32) // seg).clamp_(max=g - 1).to(torch.int32)
        one = torch.zeros(m_total, dtype=torch.int32, device="cuda")
        a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m_total, k, device="cuda", generator=gen))
        _, b, sfb = _quantized_experts(g, n, k, gen)
        d = torch.empty(m_total, n, device="cuda", dtype=torch.bfloat16)
        fn = "probe_contiguous_vs_dense"
        ids = {name: checked_group_ids(fn, lay, m_total, g, False, 128)
               for name, lay in (("ids", layout), ("ids_equal", equal), ("ids_g1", one))}
        cfgs = configs(g, n, k, m_total, sms)
        cfg = cfgs.pop("grouped")
        variants = {"api": lambda: finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout)}
        for name, t in ids.items():
            variants[name] = (lambda t=t: ops.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, t, config=cfg,
                                                                            checked_ids=True))
        d0 = torch.empty(m_total, n, device="cuda", dtype=torch.bfloat16)
        kernels = {"grouped": ops._kernel_name(cfg)}
        for name, c in cfgs.items():
            variants[name] = ops.prepare(a, sfa, b[0], sfb[0], d0, config=c)
            kernels[name] = ops._kernel_name(c)
        rec = {"groups": g, "m_total": m_total, "n": n, "k": k, "ms": ms, "kernels": kernels,
               "us_rounds": {name: [] for name in variants}}
        for r in range(args.rounds):
            names = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in names:
                rec["us_rounds"][name].append(round(kernel_time_us(variants[name], args.num_tests), 2))
        rec["us"] = {name: round(sorted(v)[len(v) // 2], 2) for name, v in rec["us_rounds"].items()}
        flops = 2.0 * m_total * n * k
        rec["tflops"] = {name: round(flops / us / 1e6, 1) for name, us in rec["us"].items()}
        # Correctness of the variants that compute the bench's problem: the ids run against the api.
        variants["api"]()
        ref = d.clone()
        variants["ids"]()
        rec["ids_equals_api"] = bool(torch.equal(ref, d))
        print(json.dumps(rec), flush=True)
        out.append(rec)
    if args.out:
        from finegemm.bench._common import write_probe_json
        write_probe_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
