"""Per-kernel device times of one API call (torch profiler, L2 flushed), to see what a call launches.

  python3 scripts/probe_kernels.py      # masked G=1 m=1024 vs the dense call of the same shape
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finegemm  # noqa: E402


def kernels_of(fn, reps: int = 10) -> dict:
    flush = torch.empty(256 << 20 >> 2, dtype=torch.int32, device="cuda")
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    out = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "FillFunctor" not in e.name:
            out[e.name[:90]] += (e.device_time if hasattr(e, "device_time") else e.cuda_time) / reps
    return dict(out)


def main() -> int:
    g, m, n, k = 1, 1024, 4096, 7168
    a_bf = torch.randn(g, m, k, device="cuda", dtype=torch.bfloat16)
    qs = [finegemm.per_token_cast_to_fp8(a_bf[i]) for i in range(g)]
    a, sfa = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    ws = [finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda")) for _ in range(g)]
    b, sfb = torch.stack([w for w, _ in ws]), torch.stack([s for _, s in ws])
    masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
    d = torch.empty(g, m, n, device="cuda", dtype=torch.bfloat16)
    d2 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    calls = {
        "masked G=1": lambda: finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m),
        "dense": lambda: finegemm.fp8_gemm_nt((a[0], qs[0][1]), (b[0], sfb[0]), d2),
    }
    for name, fn in calls.items():
        for kname, us in kernels_of(fn).items():
            print(f"{name:12s} {us:8.2f} us  {kname}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
