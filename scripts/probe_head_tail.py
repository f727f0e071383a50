"""Does the output head's last partial wave cost time? (GPU)

BF16 128 x N x 7168 with fp32 out (the model's output head, N = 129280) at N around it: 505 tiles
of 128 x 256 are 3.83 waves on 132 SMs. If the time follows N (bytes of the weight), the kernel is
bandwidth-bound through the tail and balancing the last wave buys nothing; if N = 126720 (3.75
waves) and 135168 (4.0 waves) take about the same time, the tail idles SMs worth balancing.

  python scripts/probe_head_tail.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import finegemm  # noqa: E402
from finegemm.bench._common import kernel_time_us, run_metadata  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    m, k = 128, 7168
    records = []
    for n in (126720, 129280, 132000, 135168):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.float32)
        us = kernel_time_us(lambda: finegemm.bf16_gemm_nt(a, b, d), num_tests=20)
        rec = {"m": m, "n": n, "k": k, "us": {"finegemm": us},
               "weight_TBps": n * k * 2 / us / 1e6, "tiles_128x256": -(-n // 256)}
        records.append(rec)
        print(f"128x{n}x{k} fp32: finegemm {us:.1f} us ({rec['weight_TBps']:.2f} TB/s of weight)", flush=True)
        del a, b, d
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(run_metadata(), command=" ".join(["python", "scripts/probe_head_tail.py"] + sys.argv[1:]),
                           records=records), f, indent=1)


if __name__ == "__main__":
    main()
