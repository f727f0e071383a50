"""Does the order of the contenders move a long BF16 record? `bench bf16` times finegemm, then
torch, once each per record; for the ~11 ms fp32-output vocab-head GEMMs (4096 x 129280 x 7168) the
same finegemm configuration measured 9.8 ms in a tune run and 12.3 ms in the bench (NOTES v0.87).
Here each layout's two contenders are timed in rounds of alternating order (ABBA ...), in one
process, with the bench's data and timer.

    python3 scripts/probe_bf16_order.py --out $OUT/bf16_order.json [--shapes 4096,129280,7168] [--rounds 4]
"""
from __future__ import annotations

import argparse
import statistics

import torch

import finegemm
from finegemm.bench._common import kernel_time_us, settle, write_probe_json
from finegemm.bench.bf16 import _stored, _torch_fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", nargs="+", default=["4096,129280,7168"])
    ap.add_argument("--layouts", nargs="+", default=["nt", "nn", "tn", "tt"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tests", type=int, default=20)
    ap.add_argument("--settle-ms", type=float, default=300.0)
    args = ap.parse_args()
    records = []
    for shape in args.shapes:
        m, n, k = (int(v) for v in shape.split(","))
        out_fp32 = n in (256, 129280)
        gen = torch.Generator(device="cuda").manual_seed(0)
        d = torch.empty(m, n, device="cuda", dtype=torch.float32 if out_fp32 else torch.bfloat16)
        for layout in args.layouts:
            a = _stored(m, k, gen) if layout[0] == "n" else _stored(k, m, gen)
            b = _stored(n, k, gen) if layout[1] == "t" else _stored(k, n, gen)
            fn = getattr(finegemm, f"bf16_gemm_{layout}")
            contenders = {"finegemm": lambda: fn(a, b, d), "torch": _torch_fn(layout, a, b, out_fp32)[0]}
            us = {name: [] for name in contenders}
            for r in range(args.rounds):
                order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
                for name in order:
                    settle(args.settle_ms)
                    us[name].append(kernel_time_us(contenders[name], args.tests))
            rec = {"layout": layout, "m": m, "n": n, "k": k, "out": "fp32" if out_fp32 else "bf16", "us_rounds": us,
                   "order": "finegemm first in even rounds, torch first in odd rounds",
                   "us": {name: statistics.mean(v) for name, v in us.items()}}
            rec["speedup_vs_torch"] = rec["us"]["torch"] / rec["us"]["finegemm"]
            print(f"{layout} {m}x{n}x{k}: finegemm {[round(x) for x in us['finegemm']]} us, "
                  f"torch {[round(x) for x in us['torch']]} us -> {rec['speedup_vs_torch']:.3f}x", flush=True)
            records.append(rec)
            del a, b
    write_probe_json(args.out, records)


if __name__ == "__main__":
    main()
