"""`python -m finegemm bench dense`: finegemm vs cuBLAS blockwise vs torch bf16 on one GPU, one run.

Shapes: M in {64, 128, 4096} x the six (N, K) of DeepSeek-V3 (the anchors), then the M curve
{1, 16, 32, 256, 1024, 2048, 8192}. Kernel-only times (profiler, L2 flushed), TFLOPS, GB/s,
ratios to cuBLAS blockwise and to DeepGEMM's anchor, geometric means, host time per call.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib

import torch

from ._common import (SETTLE_HELP, SETTLE_MS, WARM_HELP, geomean, host_time_us, kernel_time_us, load_anchors,
                      run_metadata, set_clock_warmup, settle, settle_ms_arg)

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_M = [64, 128, 4096]
CURVE_M = [1, 16, 32, 256, 1024, 2048, 8192]


def _inputs(m, n, k, gen):
    from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8

    a_bf16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b_bf16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    a, sfa = per_token_cast_to_fp8(a_bf16)
    b, sfb = per_block_cast_to_fp8(b_bf16)
    return a_bf16, b_bf16, a, sfa, b, sfb


def _cublas_blockwise(a, sfa, b, sfb):
    # cuBLASLt blockwise scaling through torch (SM90, torch >= 2.9): 1x128 scales for A given
    # MN-major, 128x128 for B given transposed; fails when ceil(K/128) % 4 != 0 on some versions.
    scale_a = sfa.t().contiguous().t()
    scale_b = sfb.t()
    def run():
        return torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    run()
    return run


def bench_shape(m, n, k, anchors_by_shape, gen, num_tests):
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    a_bf16, b_bf16, a, sfa, b, sfb = _inputs(m, n, k, gen)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    rec = {"m": m, "n": n, "k": k, "us": {}, "calc_diff": None}

    def ours():
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)

    try:
        d.fill_(float("nan"))
        ours()
        torch.cuda.synchronize()
        ref = reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)
        rec["calc_diff"] = calc_diff(d.float(), ref)
        rec["calc_diff_vs_unquantized"] = calc_diff(d.float(), a_bf16.float() @ b_bf16.float().t())
        rec["all_written"] = bool(not torch.isnan(d).any().item())
        del ref
        rec["us"]["finegemm"] = kernel_time_us(ours, num_tests)
        if m in (64, 4096) and n == 2112:  # host cost does not depend on the shape: sample two
            rec["host_us_per_call"] = host_time_us(ours)
    except Exception as exc:  # record and go on: one broken shape must not hide the others
        rec["error_finegemm"] = f"{type(exc).__name__}: {exc}"
    try:
        cublas = _cublas_blockwise(a, sfa, b, sfb)
        rec["us"]["cublas_blockwise"] = kernel_time_us(cublas, num_tests)
        if "host_us_per_call" in rec:
            rec["host_us_per_call_torch_scaled_mm"] = host_time_us(cublas)
    except Exception as exc:
        rec["error_cublas_blockwise"] = f"{type(exc).__name__}: {exc}"[:300]
    rec["us"]["torch_bf16"] = kernel_time_us(lambda: a_bf16 @ b_bf16.t(), num_tests)

    flops = 2.0 * m * n * k
    nbytes = m * k + n * k + 2 * m * n + 4 * (m + n // 128 + 1) * ((k + 127) // 128)
    ours_us = rec["us"].get("finegemm")
    if ours_us:
        rec["tflops"] = flops / ours_us / 1e6
        rec["gbps"] = nbytes / ours_us / 1e3
    cub = rec["us"].get("cublas_blockwise")
    if ours_us and cub:
        rec["speedup_vs_cublas_blockwise"] = cub / ours_us
    anchor = anchors_by_shape.get((m, n, k))
    if anchor:
        rec["deepgemm_anchor_us"] = anchor["us"]["deepgemm"]
        rec["goal_us"] = anchor.get("goal_us")
        rec["floor_us"] = anchor.get("floor_us")
        if ours_us:
            rec["speedup_vs_deepgemm"] = anchor["us"]["deepgemm"] / ours_us
    return rec


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finegemm bench dense")
    p.add_argument("--out", default="benchmarks/results/dense.json", help="JSON output path")
    p.add_argument("--no-curve", action="store_true", help="only the 18 anchor shapes")
    p.add_argument("--num-tests", type=int, default=30)
    p.add_argument("--shapes", nargs="*", help="explicit M,N,K triples instead of the sets")
    p.add_argument("--settle-ms", type=settle_ms_arg, default=SETTLE_MS, help=SETTLE_HELP)
    p.add_argument("--warm-ms", type=settle_ms_arg, default=0.0, help=WARM_HELP)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    if not torch.cuda.is_available():
        print("bench dense needs a CUDA GPU")
        return 2
    from finegemm.ops import sm90_fp8_gemm

    anchors = load_anchors()
    anchors_by_shape = {(r["m"], r["n"], r["k"]): r for r in anchors.get("dense", [])}
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes]
    else:
        shapes = [(m, n, k) for m in DENSE_M for (n, k) in DENSE_NK]
        if not args.no_curve:
            shapes += [(m, n, k) for m in CURVE_M for (n, k) in DENSE_NK]

    # Compile every kernel the shapes need up front, in parallel (nvcc is the slow part).
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda s: sm90_fp8_gemm.warmup_shape(*s), shapes))

    set_clock_warmup(args.warm_ms)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    records = []
    print(f"{'M':>5} {'N':>6} {'K':>6} | {'ours us':>8} {'cuBLAS':>8} {'bf16':>8} {'DG':>7} | "
          f"{'TFLOPS':>7} {'GB/s':>6} {'x cuBLAS':>8} {'x DG':>6} {'diff':>8} {'host us':>7}")
    for (m, n, k) in shapes:
        settle(args.settle_ms)
        rec = bench_shape(m, n, k, anchors_by_shape, gen, args.num_tests)
        records.append(rec)
        us = rec["us"]
        print(f"{m:>5} {n:>6} {k:>6} | {_fmt(us.get('finegemm'), '8.2f')} {_fmt(us.get('cublas_blockwise'), '8.2f')} "
              f"{_fmt(us.get('torch_bf16'), '8.2f')} {_fmt(rec.get('deepgemm_anchor_us'), '7.2f')} | "
              f"{_fmt(rec.get('tflops'), '7.0f')} {_fmt(rec.get('gbps'), '6.0f')} "
              f"{_fmt(rec.get('speedup_vs_cublas_blockwise'), '8.2f')} {_fmt(rec.get('speedup_vs_deepgemm'), '6.2f')} "
              f"{_fmt(rec.get('calc_diff'), '8.1e')} {_fmt(rec.get('host_us_per_call'), '7.1f')}"
              + (f"  ERROR {rec['error_finegemm']}" if "error_finegemm" in rec else ""), flush=True)

    anchor_recs = [r for r in records if (r["m"], r["n"], r["k"]) in anchors_by_shape]
    summary = {
        "geomean_speedup_vs_deepgemm_18": geomean(r.get("speedup_vs_deepgemm") for r in anchor_recs),
        "geomean_speedup_vs_cublas_blockwise_18": geomean(r.get("speedup_vs_cublas_blockwise") for r in anchor_recs),
        "max_calc_diff": max((r["calc_diff"] for r in records if r.get("calc_diff") is not None), default=None),
        "shapes_slower_than_deepgemm": [(r["m"], r["n"], r["k"]) for r in anchor_recs
                                        if r.get("speedup_vs_deepgemm", 0) < 1.0],
        # A shape cuBLAS blockwise cannot run (it rejects M = 1) is not "slower"; one we failed is.
        "shapes_slower_than_cublas": [(r["m"], r["n"], r["k"]) for r in records
                                      if r.get("speedup_vs_cublas_blockwise", 0) < 1.0
                                      and (r["us"].get("cublas_blockwise") or not r["us"].get("finegemm"))],
    }
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "suite": "dense", "method": "kernel-only, torch profiler, 256 MB L2 flush "
           f"before each call, mean of {args.num_tests}", "settle_ms": args.settle_ms, "warm_ms": args.warm_ms,
           "summary": summary, "records": records}
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0
