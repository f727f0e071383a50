"""A/B of a kernel build over a fixed set of records from the three benches (GPU).

Each record is made by the bench's own function (so it is timed exactly like `finegemm bench`,
with the peer contender in the same record). Run it once per build variant in separate processes,
interleaved (A, B, A, B), with the variant selected through FINEGEMM_EXTRA_NVCC_FLAGS (part of the
kernel cache key, so both builds coexist in one cache):

  FINEGEMM_EXTRA_NVCC_FLAGS=-DFOO python3 scripts/probe_ab_cases.py --label foo --out $OUT/ab_foo_1.json

`--precompile` (no GPU) builds the kernels the cases select into FINEGEMM_CACHE_DIR instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FP8_DENSE = [(1024, 4096, 7168), (4096, 4096, 7168), (4096, 7168, 2048), (128, 4096, 7168), (64, 2112, 7168),
             (64, 4096, 7168), (128, 2112, 7168), (64, 7168, 16384), (128, 24576, 1536)]
FP8_MASKED = [(1, 1024, 4096, 7168), (2, 512, 4096, 7168), (4, 256, 4096, 7168), (1, 1024, 7168, 2048),
              (6, 1024, 4096, 7168), (32, 192, 7168, 2048)]
BF16_DENSE = [("nt", 128, 4096, 7168), ("tn", 128, 4096, 7168), ("tn", 128, 2112, 7168), ("nt", 64, 4096, 7168),
              ("nt", 128, 7168, 2048), ("nt", 4096, 2112, 7168), ("nt", 4096, 4096, 7168), ("nn", 4096, 7168, 2048),
              ("nt", 64, 2112, 7168), ("nn", 128, 2112, 7168), ("nt", 128, 32768, 512), ("tt", 64, 7168, 16384),
              ("nt", 128, 24576, 1536)]
BF16_MASKED = [(1, 1024, 4096, 7168), (4, 256, 7168, 2048)]

# `--set mid`: the M = 256-1024 curve (where the L2 hints' m-block bound falls) and the M = 128
# shapes whose tiles have two m-blocks sharing each B tile.
MID_FP8_DENSE = [(128, 4096, 7168), (128, 2112, 7168)] + [
    (m, n, k) for m in (256, 512, 1024) for n, k in ((4096, 7168), (7168, 2048), (32768, 512), (2112, 7168))]
MID_BF16_DENSE = [("nt", 128, 4096, 7168)] + [
    ("nt", m, n, k) for m in (256, 512, 1024) for n, k in ((4096, 7168), (7168, 2048), (32768, 512))]
# `--set lmhead`: the output-head shapes of `bench bf16` (fp32 d; a 5th field True = fp32 out).
LMHEAD_BF16_DENSE = [(lay, m, 129280, 7168, True) for m in (64, 128) for lay in ("nt", "nn", "tt")]
# `--set skinny`: M <= 128 where the tensor maps' L2 promotion moved the time (NOTES v0.39): FP8 at
# M = 64 / 128 over every (N, K) of the dense set and M = 16 on the short-K ones; BF16 in the four
# layouts on a long-K and a short-K shape.
_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
SKINNY_FP8_DENSE = [(m, n, k) for m in (64, 128) for n, k in _NK] + [
    (16, n, k) for n, k in ((24576, 1536), (32768, 512), (7168, 2048))]
SKINNY_BF16_DENSE = [(lay, m, n, k) for lay in ("nt", "tn", "nn", "tt") for m in (64, 128)
                     for n, k in ((4096, 7168), (24576, 1536))] + [(lay, 128, 2112, 7168) for lay in ("tn", "nn")]
# `--set fitted`: where the fitted A boxes act (NOTES v0.68 / v0.69: the last m-block of the FP8
# 1D2D dense kind and of BF16 K-major A), plus 64x32768x512 (moved across calls after v0.68).
FITTED_FP8_DENSE = [(m, n, k) for m in (1, 16, 32, 48) for n, k in _NK] + [(64, 32768, 512), (64, 7168, 16384)] + [
    (m, n, k) for m in (80, 136, 200, 300) for n, k in ((4096, 7168), (7168, 2048))]
FITTED_BF16_DENSE = [("nt", m, n, k) for m in (1, 16, 33, 65, 80, 100, 120)
                     for n, k in ((4096, 7168), (7168, 2048), (24576, 1536))] + [
    ("nn", m, 4096, 7168) for m in (16, 80)] + [("nt", 64, 4096, 7168), ("nt", 128, 4096, 7168)] + [
    ("nt", m, n, k) for m in (136, 200, 300) for n, k in ((4096, 7168), (7168, 2048))]
# `--set split`: the heuristics' split-cluster picks (one cluster per tile, the reduce-scatter
# epilogue: NOTES v1.04), FP8 at M = 1-256 and BF16 tiles up to 64 columns.
SPLIT_FP8_DENSE = [(m, n, 7168) for m in (1, 16, 32) for n in (2112, 4096)] + [
    (m, 7168, 16384) for m in (1, 16, 32)] + [(64, 2112, 7168), (64, 4096, 7168), (128, 2112, 7168),
                                               (128, 4096, 7168), (256, 2112, 7168)]
SPLIT_BF16_DENSE = [("nt", 1, 2112, 7168), ("nt", 16, 4096, 7168), ("nt", 64, 2112, 7168), ("nt", 128, 2112, 7168),
                    ("tn", 128, 2112, 7168), ("tn", 128, 4096, 7168), ("nn", 128, 2112, 7168),
                    ("tt", 128, 4096, 7168), ("tt", 16, 2112, 7168)]
SETS = {"fitted": (FITTED_FP8_DENSE, [], FITTED_BF16_DENSE, []), "split": (SPLIT_FP8_DENSE, [], SPLIT_BF16_DENSE, []),
        "anchor": (FP8_DENSE, FP8_MASKED, BF16_DENSE, BF16_MASKED), "mid": (MID_FP8_DENSE, [], MID_BF16_DENSE, []),
        "lmhead": ([], [], LMHEAD_BF16_DENSE, []), "skinny": (SKINNY_FP8_DENSE, [], SKINNY_BF16_DENSE, [])}


def precompile(sms: int, jobs: int, case_set: str) -> None:
    from finegemm import jit
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import sm90_fp8_gemm as h8
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    fp8_dense, fp8_masked, bf16_dense, bf16_masked = SETS[case_set]
    src = {}
    for m, n, k in fp8_dense:
        c = h8.select_config(m, n, k, sms, False, False)
        src[o8._kernel_name(c)] = o8._render_cfg(c)
    for g, m, n, k in fp8_masked:
        c = h8.select_grouped_config(h8.GEMM_GROUPED_MASKED, -(-m // 128) * 128, n, k, g, sms, expected_m=m)
        src[o8._kernel_name(c)] = o8._render_cfg(c)
    for lay, m, n, k, *fp32 in bf16_dense:
        c = hb.select_config(m, n, k, sms, lay[0] == "t", lay[1] == "n", bool(fp32 and fp32[0]), False)
        src[ob.kernel_name(c.kernel_key())] = ob.render(*c.kernel_key())
    for g, m, n, k in bf16_masked:
        c = hb.select_grouped_config(hb.GEMM_GROUPED_MASKED, -(-m // 128) * 128, n, k, g, sms, m, 0)
        src[ob.grouped_kernel_name(c.grouped_kernel_key())] = ob.render_grouped(*c.grouped_kernel_key())
    print(f"{len(src)} kernels")
    jit.build_many(src, jobs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default=os.environ.get("FINEGEMM_EXTRA_NVCC_FLAGS", "") or "base")
    ap.add_argument("--num-tests", type=int, default=30)
    ap.add_argument("--out")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--kinds", nargs="*", default=["fp8_dense", "fp8_masked", "bf16_dense", "bf16_masked"])
    ap.add_argument("--set", default="anchor", choices=sorted(SETS), help="which records (default: anchor)")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if args.precompile:
        precompile(args.sms, args.jobs, args.set)
        return 0
    import time

    import torch

    from finegemm.bench import bf16 as bench_bf16
    from finegemm.bench import dense as bench_dense
    from finegemm.bench import grouped as bench_grouped

    fp8_dense, fp8_masked, bf16_dense, bf16_masked = SETS[args.set]
    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []

    def add(kind, rec):
        rec["kind"], rec["label"] = kind, args.label
        us = {k: round(v, 2) for k, v in rec.get("us", {}).items() if v}
        print(json.dumps({"kind": kind, **{k: rec.get(k) for k in ("layout", "groups", "m", "n", "k")}, "us": us}),
              flush=True)
        records.append(rec)

    for m, n, k in fp8_dense if "fp8_dense" in args.kinds else []:
        time.sleep(0.3)
        add("fp8_dense", bench_dense.bench_shape(m, n, k, {}, gen, args.num_tests))
    for g, m, n, k in fp8_masked if "fp8_masked" in args.kinds else []:
        time.sleep(0.3)
        add("fp8_masked", bench_grouped.bench_masked(g, m, n, k, gen, args.num_tests))
    for lay, m, n, k, *fp32 in bf16_dense if "bf16_dense" in args.kinds else []:
        time.sleep(0.3)
        add("bf16_dense", bench_bf16.bench_one(lay, m, n, k, bool(fp32 and fp32[0]), gen, args.num_tests))
    for g, m, n, k in bf16_masked if "bf16_masked" in args.kinds else []:
        time.sleep(0.3)
        add("bf16_masked", bench_bf16.bench_grouped_masked(g, m, n, k, gen, args.num_tests))
    if args.out:
        from finegemm.bench._common import write_probe_json

        env = {k: v for k, v in os.environ.items()
               if v and (k == "FINEGEMM_EXTRA_NVCC_FLAGS" or k.startswith("FINEGEMM_DIAG_"))}
        write_probe_json(args.out, records, env=env, label=args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
