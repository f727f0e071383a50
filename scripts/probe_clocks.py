"""The SM clock and board power while a GEMM runs back to back (GPU machine).

Question (benchmarks/NOTES.md v0.51): at M = 4096, do the FP8 / BF16 GEMMs (ours and the peers)
run at the clock the datasheet peaks assume, or below it at the board's power limit? The
datasheet figures (989 TFLOPS BF16, 1979 FP8, dense) are 4096 / 8192 FLOP per SM-cycle at
1830 MHz; FLOP per SM-cycle at the measured clock says how close a kernel is to the tensor
cores' rate, whatever the clock.

Per case: the call back to back for --seconds (no L2 flush: a steady state, as in training),
nvidia-smi sampling clocks.sm / power.draw every 50 ms meanwhile; the samples of the middle half
of the run are summarised. Achieved TFLOPS come from the calls' own wall time (CUDA events over
the whole run), so they include launch gaps (none show at these sizes).

  python3 scripts/probe_clocks.py --out $OUT/clocks.json
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FLOP_PER_SM_CYCLE = {"fp8": 8192, "bf16": 4096}


def fp8_cases(m, n, k):
    import torch

    import finegemm
    from finegemm.bench.dense import _cublas_blockwise, _inputs

    _, _, a, sfa, b, sfb = _inputs(m, n, k, torch.Generator(device="cuda").manual_seed(m + n + k))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return [("finegemm", lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)),
            ("cublas_blockwise", _cublas_blockwise(a, sfa, b, sfb))]


def bf16_cases(m, n, k):
    import torch

    import finegemm

    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return [("finegemm", lambda: finegemm.bf16_gemm_nt(a, b, d)), ("torch", lambda: torch.matmul(a, b.t()))]


def run_case(fn, seconds: float) -> dict:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, t0 = 0, time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    out, _ = smi.communicate()
    samples = []
    for line in out.splitlines():
        try:
            clk, pwr = (float(v) for v in line.split(","))
            samples.append((clk, pwr))
        except ValueError:
            continue
    mid = samples[len(samples) // 4: max(len(samples) // 4 + 1, 3 * len(samples) // 4)]
    return {"calls": calls, "us_per_call": start.elapsed_time(end) * 1e3 / calls, "samples": len(samples),
            "sm_clock_mhz_median": statistics.median(c for c, _ in mid) if mid else None,
            "sm_clock_mhz_min": min(c for c, _ in mid) if mid else None,
            "power_w_median": statistics.median(p for _, p in mid) if mid else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    from finegemm.bench._common import write_probe_json

    plan = [("fp8", 4096, 7168, 16384), ("fp8", 4096, 4096, 7168), ("bf16", 4096, 4096, 7168)]
    records = []
    for kind, m, n, k in plan:
        for name, fn in (fp8_cases if kind == "fp8" else bf16_cases)(m, n, k):
            r = run_case(fn, args.seconds)
            tflops = 2 * m * n * k / r["us_per_call"] / 1e6
            clk = r["sm_clock_mhz_median"]
            r.update(kind=kind, m=m, n=n, k=k, contender=name, tflops=tflops,
                     flop_per_sm_cycle=tflops * 1e12 / (132 * clk * 1e6) if clk else None,
                     peak_flop_per_sm_cycle=FLOP_PER_SM_CYCLE[kind])
            records.append(r)
            print(f"{kind} {m}x{n}x{k} {name:18s} {r['us_per_call']:8.1f} us {tflops:7.1f} TFLOPS  "
                  f"clock {clk} MHz (min {r['sm_clock_mhz_min']})  {r['power_w_median']} W  "
                  f"{r['flop_per_sm_cycle'] or 0:6.0f} / {FLOP_PER_SM_CYCLE[kind]} FLOP per SM-cycle", flush=True)
    if args.out:
        write_probe_json(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
