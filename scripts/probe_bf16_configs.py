"""Time forced configurations of the dense BF16 kernel against torch.matmul (GPU machine).

A case is "M,N,K,layout[,f32]:auto" (the heuristic's choice) or
"M,N,K,layout[,f32]:bm,bn,splits[,stages][,direct][,mca|mcb]" (stages: the model's ring unless
given, as the heuristic does; "direct": the kernel without the bf16 staging, fp32 D only; "mca" /
"mcb": a 2-CTA multicast pair sharing A / B); ",f32" for an fp32 D (the router shapes' output). --rounds R times every case
R times, the cases interleaved in each round (same-run A/Bs).
Each record names the CTAs per cluster the host launched (> 1: the split cluster). Every case is checked against the fp32 product on fresh
data (calc_diff) before it is timed (kernel-only, L2 flushed); torch.matmul is timed in the same
process.

  FINEGEMM_CACHE_DIR=.fgcache python3 scripts/probe_bf16_configs.py --precompile CASES   # CPU
  python3 scripts/probe_bf16_configs.py CASES --out $OUT/bf16_configs.json                # GPU
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm.heuristics import sm90_bf16_gemm as heur  # noqa: E402
from finegemm.ops import sm90_bf16_gemm as ops  # noqa: E402


def parse(case: str):
    shape, _, spec = case.partition(":")
    m, n, k, layout, *out = shape.split(",")
    if out not in ([], ["f32"]):
        raise SystemExit(f"bad case {case!r}: the optional fifth field is f32")
    return int(m), int(n), int(k), layout, bool(out), spec or "auto"


def config(m, n, k, layout, f32, spec, sms):
    a_mn, b_mn = heur.LAYOUTS[layout]
    if spec == "auto":
        return heur.select_config(m, n, k, sms, a_mn, b_mn, f32)
    fields = spec.split(",")
    flags = {f for f in fields if not f.isdigit()}
    if flags - {"direct", "mca", "mcb"} or flags >= {"mca", "mcb"}:
        raise SystemExit(f"bad config {spec!r}: the flags are direct and one of mca / mcb")
    bm, bn, splits, *stages = (int(v) for v in fields if v.isdigit())
    mc = "mca" in flags or "mcb" in flags
    forced = heur.make_config(m, n, k, sms, a_mn, b_mn, f32, False, bm, bn, splits,
                              num_stages=stages[0] if stages else None, direct_epilogue="direct" in flags,
                              num_multicast=2 if mc else 1, multicast_on_a="mca" in flags)
    # The tensor maps' L2 promotion is the shape's (a tuned entry's), whatever the tile, and so is
    # the B group where the forced ring allows it: the same host settings as the auto pick, so an
    # A/B of two rings or tiles times the kernels alone.
    auto = heur.select_config(m, n, k, sms, a_mn, b_mn, f32)
    forced = dataclasses.replace(forced, l2_promotion=auto.l2_promotion)
    if auto.b_group > 1 and heur.b_group_fits(forced, auto.b_group):
        forced = dataclasses.replace(forced, b_group=auto.b_group)
    return forced


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--num-tests", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.precompile:
        from finegemm import jit
        srcs = {}
        for c in args.cases:
            cfg = config(*parse(c), args.sms)
            key = cfg.kernel_key()
            srcs[ops.kernel_name(key)] = ops.render(*key)
        jit.build_many(srcs, 2)
        return 0

    import torch

    from finegemm import runtime
    from finegemm.bench._common import kernel_time_us, write_probe_json
    from finegemm.bench.bf16 import _torch_fn
    from finegemm.testing.numeric import calc_diff
    sms = runtime.get_num_sms()
    out = []
    for rnd, c in ((r, c) for r in range(args.rounds) for c in args.cases):
        m, n, k, layout, f32, spec = parse(c)
        cfg = config(m, n, k, layout, f32, spec, sms)
        a_mn, b_mn = heur.LAYOUTS[layout]
        a = torch.randn((k, m) if a_mn else (m, k), device="cuda", dtype=torch.bfloat16)
        b = torch.randn((k, n) if b_mn else (n, k), device="cuda", dtype=torch.bfloat16)
        dtype = torch.float32 if f32 else torch.bfloat16
        d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        call = ops.prepare(a, b, d, None, layout, config=cfg)
        call()
        torch.cuda.synchronize()
        op_a = a.t() if a_mn else a
        op_b = b if b_mn else b.t()
        diff = calc_diff(d.float(), op_a.float() @ op_b.float())
        us = kernel_time_us(call, num_tests=args.num_tests)
        torch_fn, _ = _torch_fn(layout, a, b, f32)  # the bench's contender (fp32 out through out_dtype)
        us_torch = kernel_time_us(torch_fn, num_tests=args.num_tests)
        rec = {"case": c, "m": m, "n": n, "k": k, "layout": layout, "block_m": cfg.block_m, "block_n": cfg.block_n,
               "splits": cfg.num_splits, "stages": cfg.num_stages, "b_group": cfg.b_group,
               "direct": cfg.direct_epilogue, "round": rnd,
               "out_fp32": f32,
               "cluster": call.cluster_size(), "us": us, "us_torch": us_torch,
               "speedup_vs_torch": us_torch / us, "calc_diff": diff}
        out.append(rec)
        print(f"{c:44s} bm{cfg.block_m} bn{cfg.block_n} s{cfg.num_splits} st{cfg.num_stages} g{cfg.b_group}: {us:7.2f} us  "
              f"torch {us_torch:7.2f}  x{us_torch / us:.3f}  diff {diff:.1e}", flush=True)
    if args.out:
        write_probe_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
