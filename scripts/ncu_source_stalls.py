"""Summarize the warp-stall samples of an ncu source page (SASS) export.

    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof_sass.csv
    python3 scripts/ncu_source_stalls.py prof_sass.csv [--top 25] [--regions 0xe70,0x1f70 --names pre,loop,rest]

Prints the stall reasons over the whole kernel, optionally per address region (cut points are
offsets from the kernel's first instruction, as cuobjdump -sass prints them), and the
instructions with the most samples, each with its top reasons. Used to compare two builds of one
kernel (benchmarks/NOTES.md v0.86).
"""
from __future__ import annotations

import argparse
import collections
import csv


def load(path: str) -> tuple[list[str], list[dict]]:
    rows = list(csv.reader(open(path)))
    hdr = next(r for r in rows if r and r[0] == "Address")
    start = rows.index(hdr) + 1
    data = [dict(zip(hdr, r)) for r in rows[start:] if len(r) == len(hdr)]
    base = int(data[0]["Address"], 16)
    for d in data:
        d["off"] = int(d["Address"], 16) - base
    return hdr, data


def count(d: dict, key: str) -> int:
    v = d.get(key, "")
    return int(v) if v.strip().lstrip("-").isdigit() else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--regions", help="comma-separated cut offsets (hex), e.g. 0xe70,0x1f70")
    ap.add_argument("--names", help="comma-separated region names, one more than the cuts")
    args = ap.parse_args()
    hdr, data = load(args.csv)
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    total = collections.Counter()
    for d in data:
        for s in reasons:
            total[s[6:]] += count(d, s)
    n = sum(total.values()) or 1
    executed = sum(count(d, "Instructions Executed") for d in data)
    print(f"samples {n}, warp instructions executed {executed}")
    print("  " + ", ".join(f"{k}={v} ({100 * v / n:.1f}%)" for k, v in total.most_common(10)))

    if args.regions:
        cuts = [int(x, 16) for x in args.regions.split(",")]
        names = args.names.split(",") if args.names else [f"r{i}" for i in range(len(cuts) + 1)]
        if len(names) != len(cuts) + 1:
            raise SystemExit("--names: one more name than --regions cuts")
        per = collections.defaultdict(collections.Counter)
        for d in data:
            r = names[sum(1 for c in cuts if d["off"] >= c)]
            for s in reasons:
                per[r][s[6:]] += count(d, s)
            per[r]["_executed"] += count(d, "Instructions Executed")
        for r in names:
            c = per[r]
            tot = sum(v for k, v in c.items() if k != "_executed")
            top = " ".join(f"{k}={v}" for k, v in c.most_common(9) if k != "_executed")
            print(f"{r:10} samples={tot:7} executed={c['_executed']:11} {top}")

    data.sort(key=lambda d: -count(d, "Warp Stall Sampling (All Samples)"))
    for d in data[:args.top]:
        c = sorted(((s[6:], count(d, s)) for s in reasons if count(d, s)), key=lambda x: -x[1])[:4]
        print(f"{d['off']:05x} {count(d, 'Warp Stall Sampling (All Samples)'):>7} "
              f"ex={count(d, 'Instructions Executed'):>10} {d['Source'].strip()[:60]:60} {c}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
