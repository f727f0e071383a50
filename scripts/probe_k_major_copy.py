"""Time the k-grouped tn GEMM's K-major copies alone: the grouped kernel (every group of A and B in
one launch) against the per-group word kernel, on the k-grouped bench problems (NOTES v0.87).

    python3 scripts/probe_k_major_copy.py --out $OUT/k_major_copy.json

Kernel-only, L2 flushed (finegemm.bench._common.kernel_time_us); bytes = one read and one write of
A [sum(ks), M] and B [sum(ks), N]; the copies are checked bitwise against torch first.
"""
from __future__ import annotations

import argparse

import torch

from finegemm.bench._common import kernel_time_us, write_probe_json
from finegemm.bench.grouped import k_grouped_problems
from finegemm.ops.k_major_copy import k_major_copies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tests", type=int, default=30)
    args = ap.parse_args()
    records = []
    for g, m, n, ks, _ek in k_grouped_problems():
        gen = torch.Generator(device="cuda").manual_seed(g + m + n)
        a = torch.randint(0, 255, (sum(ks), m), device="cuda", dtype=torch.uint8, generator=gen).view(torch.float8_e4m3fn)
        b = torch.randint(0, 255, (sum(ks), n), device="cuda", dtype=torch.uint8, generator=gen).view(torch.float8_e4m3fn)
        items = [(a, m), (b, n)]
        want = k_major_copies(items, ks, grouped=False)
        got = k_major_copies(items, ks, grouped=True)
        same = all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(got, want))
        rec = {"g": g, "m": m, "n": n, "sum_k": sum(ks), "bitwise_equal": same, "us": {}, "tbps": {}}
        moved = 2 * (m + n) * sum(ks)
        for name, grouped in (("per_group", False), ("grouped", True)):
            us = kernel_time_us(lambda: k_major_copies(items, ks, grouped=grouped), num_tests=args.tests)
            rec["us"][name], rec["tbps"][name] = us, moved / us / 1e6
        print(f"G{g} {m}x{n} sum k {sum(ks)}: per-group {rec['us']['per_group']:.1f} us "
              f"({rec['tbps']['per_group']:.2f} TB/s), grouped {rec['us']['grouped']:.1f} us "
              f"({rec['tbps']['grouped']:.2f} TB/s), bitwise equal {same}", flush=True)
        records.append(rec)
    write_probe_json(args.out, records)


if __name__ == "__main__":
    main()
