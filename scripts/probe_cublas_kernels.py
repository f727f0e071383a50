"""Which kernels does cuBLAS run on the shapes where it beats us, and how long do they take? (GPU)

cuBLAS kernel names carry their tile, cluster and split / stream-K choice (e.g.
"..._128x64x64_cluster1x2x1_..." or "...splitKreduce..."), which tells what schedule a shape
rewards. For each shape: the kernels of one torch call with their device times (torch profiler),
and the finegemm call on the same operands, both timed like the benches (kernel-only, L2 flushed).

  python3 scripts/probe_cublas_kernels.py [--cases KIND,LAYOUT,M,N,K ...] [--out $OUT/cublas_kernels.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (kind, layout, m, n, k): BF16 via torch.matmul, FP8 1x128 / 128x128 via torch._scaled_mm.
CASES = [
    ("bf16", "nt", 128, 4096, 7168), ("bf16", "tn", 128, 4096, 7168), ("bf16", "tn", 128, 2112, 7168),
    ("bf16", "nt", 64, 4096, 7168), ("bf16", "nt", 4096, 2112, 7168), ("bf16", "nt", 4096, 4096, 7168),
    ("fp8", "nt", 1024, 4096, 7168), ("fp8", "nt", 2048, 4096, 7168), ("fp8", "nt", 256, 24576, 1536),
    ("fp8", "nt", 256, 32768, 512),
]


def kernels_of(fn):
    import torch
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name[:160], round(getattr(e, "device_time", 0.0) or e.cuda_time, 2)) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-tests", type=int, default=30)
    ap.add_argument("--cases", nargs="+", metavar="KIND,LAYOUT,M,N,K", help="default: CASES (bf16 or fp8)")
    ap.add_argument("--out")
    args = ap.parse_args()
    cases = CASES
    if args.cases:
        cases = [(kind, layout, int(m), int(n), int(k))
                 for kind, layout, m, n, k in (c.split(",") for c in args.cases)]
    import torch

    import finegemm
    from finegemm.bench._common import kernel_time_us
    from finegemm.bench.bf16 import _stored, _torch_fn
    from finegemm.bench.grouped import _cublas_views, _scaled_mm

    gen = torch.Generator(device="cuda").manual_seed(0)
    out = []
    for kind, layout, m, n, k in cases:
        rec = {"kind": kind, "layout": layout, "m": m, "n": n, "k": k}
        if kind == "bf16":
            a = _stored(m, k, gen) if layout[0] == "n" else _stored(k, m, gen)
            b = _stored(n, k, gen) if layout[1] == "t" else _stored(k, n, gen)
            d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            fn = getattr(finegemm, f"bf16_gemm_{layout}")
            ours = lambda: fn(a, b, d)  # noqa: E731
            theirs, _ = _torch_fn(layout, a, b, False)
        else:
            a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=gen))
            b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=gen))
            d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ours = lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)  # noqa: E731
            (view,) = _cublas_views([(a, sfa, b, sfb)])
            theirs = lambda: _scaled_mm(*view)  # noqa: E731
        rec["cublas_kernels"] = kernels_of(theirs)
        rec["finegemm_kernels"] = kernels_of(ours)
        rec["us_finegemm"] = kernel_time_us(ours, args.num_tests)
        rec["us_cublas"] = kernel_time_us(theirs, args.num_tests)
        print(json.dumps(rec), flush=True)
        out.append(rec)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
