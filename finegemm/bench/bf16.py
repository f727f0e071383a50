"""`python -m finegemm bench bf16`: finegemm BF16 GEMMs vs torch.matmul, all four layouts, one run.

Shapes: M in {64, 128, 4096} x the six (N, K) of DeepSeek-V3 (bf16 output), (N, K) in
{(256, 7168), (129280, 7168)} with fp32 output, and 8192^3. Every layout reads its operands in
the stored form (nt: A [M, K], B [N, K]; nn: B [K, N]; tn: A [K, M], B [K, N]; tt: A [K, M],
B [N, K]); torch gets the same storage through transposed views. Kernel-only times (profiler,
L2 flushed), TFLOPS, ratio to torch, calc_diff vs the fp32 product.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib

import torch

from ._common import geomean, kernel_time_us, run_metadata

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_M = [64, 128, 4096]
FP32_NK = [(256, 7168), (129280, 7168)]
LAYOUTS = ("nt", "nn", "tn", "tt")


def bench_shapes() -> list[tuple[int, int, int, bool]]:
    """(m, n, k, out_fp32) of the suite."""
    shapes = [(m, n, k, False) for m in DENSE_M for (n, k) in DENSE_NK]
    shapes += [(m, n, k, True) for m in DENSE_M for (n, k) in FP32_NK]
    shapes += [(8192, 8192, 8192, False)]
    return shapes


def _stored(rows, cols, gen):
    pitch = -(-cols // 8) * 8
    return torch.randn(rows, pitch, device="cuda", dtype=torch.bfloat16, generator=gen)[:, :cols]


def _torch_fn(layout, a, b, out_fp32):
    A = a if layout[0] == "n" else a.t()  # [M, K]
    Bt = b.t() if layout[1] == "t" else b  # [K, N]
    if out_fp32:
        try:
            torch.mm(A, Bt, out_dtype=torch.float32)
            return (lambda: torch.mm(A, Bt, out_dtype=torch.float32)), "torch.mm(out_dtype=float32)"
        except Exception:
            pass
    return (lambda: torch.matmul(A, Bt)), "torch.matmul (bf16 out)"


def bench_one(layout, m, n, k, out_fp32, gen, num_tests):
    import finegemm
    from finegemm.testing import calc_diff

    a = _stored(m, k, gen) if layout[0] == "n" else _stored(k, m, gen)
    b = _stored(n, k, gen) if layout[1] == "t" else _stored(k, n, gen)
    d = torch.empty(m, n, device="cuda", dtype=torch.float32 if out_fp32 else torch.bfloat16)
    rec = {"layout": layout, "m": m, "n": n, "k": k, "out": "fp32" if out_fp32 else "bf16", "us": {}}
    fn = getattr(finegemm, f"bf16_gemm_{layout}")

    def ours():
        fn(a, b, d)

    try:
        d.fill_(float("nan"))
        ours()
        torch.cuda.synchronize()
        A = a if layout[0] == "n" else a.t()
        B = b if layout[1] == "t" else b.t()
        if m * n <= (1 << 28):
            ref = A.float() @ B.float().t()
            rec["calc_diff"] = calc_diff(d.float(), ref)
            del ref
        rec["all_written"] = bool(not torch.isnan(d).any().item())
        rec["us"]["finegemm"] = kernel_time_us(ours, num_tests)
    except Exception as exc:  # record and go on: one broken shape must not hide the others
        rec["error_finegemm"] = f"{type(exc).__name__}: {exc}"[:500]
    try:
        tfn, what = _torch_fn(layout, a, b, out_fp32)
        rec["torch_op"] = what
        rec["us"]["torch"] = kernel_time_us(tfn, num_tests)
    except Exception as exc:
        rec["error_torch"] = f"{type(exc).__name__}: {exc}"[:300]
    flops = 2.0 * m * n * k
    ours_us, torch_us = rec["us"].get("finegemm"), rec["us"].get("torch")
    if ours_us:
        rec["tflops"] = flops / ours_us / 1e6
        rec["gbps"] = (2 * (m * k + n * k) + m * n * (4 if out_fp32 else 2)) / ours_us / 1e3
    if ours_us and torch_us:
        rec["speedup_vs_torch"] = torch_us / ours_us
    return rec


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m finegemm bench bf16")
    p.add_argument("--out", default="benchmarks/results/bf16.json", help="JSON output path")
    p.add_argument("--num-tests", type=int, default=30)
    p.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=LAYOUTS)
    p.add_argument("--shapes", nargs="*", help="explicit M,N,K[,fp32] instead of the suite")
    args = p.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench bf16 needs a CUDA GPU")
        return 2
    from finegemm.ops import sm90_bf16_gemm

    if args.shapes:
        shapes = []
        for s in args.shapes:
            parts = s.split(",")
            shapes.append((int(parts[0]), int(parts[1]), int(parts[2]), len(parts) > 3 and parts[3] == "fp32"))
    else:
        shapes = bench_shapes()
    jobs = [(layout, *s) for s in shapes for layout in args.layouts]

    # Compile every kernel the shapes need up front, in parallel (nvcc is the slow part).
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda j: sm90_bf16_gemm.warmup_shape(j[1], j[2], j[3], j[0], j[4]), jobs))

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    records = []
    print(f"{'lay':>3} {'M':>5} {'N':>6} {'K':>6} {'out':>4} | {'ours us':>8} {'torch us':>8} | "
          f"{'TFLOPS':>7} {'GB/s':>6} {'x torch':>7} {'diff':>8}")
    for (layout, m, n, k, out_fp32) in jobs:
        rec = bench_one(layout, m, n, k, out_fp32, gen, args.num_tests)
        records.append(rec)
        us = rec["us"]
        print(f"{layout:>3} {m:>5} {n:>6} {k:>6} {rec['out']:>4} | {_fmt(us.get('finegemm'), '8.2f')} "
              f"{_fmt(us.get('torch'), '8.2f')} | {_fmt(rec.get('tflops'), '7.0f')} {_fmt(rec.get('gbps'), '6.0f')} "
              f"{_fmt(rec.get('speedup_vs_torch'), '7.2f')} {_fmt(rec.get('calc_diff'), '8.1e')}"
              + (f"  ERROR {rec['error_finegemm']}" if "error_finegemm" in rec else ""), flush=True)

    summary = {
        "geomean_speedup_vs_torch": geomean(r.get("speedup_vs_torch") for r in records),
        "geomean_speedup_vs_torch_by_layout": {
            lay: geomean(r.get("speedup_vs_torch") for r in records if r["layout"] == lay) for lay in args.layouts},
        "max_calc_diff": max((r["calc_diff"] for r in records if r.get("calc_diff") is not None), default=None),
        "not_fully_written": [(r["layout"], r["m"], r["n"], r["k"]) for r in records if r.get("all_written") is False],
        "errors": [(r["layout"], r["m"], r["n"], r["k"]) for r in records if "error_finegemm" in r],
        "slower_than_torch": [(r["layout"], r["m"], r["n"], r["k"]) for r in records
                              if r.get("speedup_vs_torch", 0) < 1.0],
    }
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "suite": "bf16", "method": "kernel-only, torch profiler, 256 MB L2 flush "
           f"before each call, mean of {args.num_tests}", "summary": summary, "records": records}
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0
