"""Per-record table of scripts/ab_probe_variants.sh's files: each variant's best-of-rounds finegemm
time, and its change against the first label given (default: "base").

Usage: python3 scripts/ab_summary.py [--base base] ab_*.json [--json summary.json]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict


def record_key(r: dict) -> str:
    parts = [r.get("kind", "")]
    if r.get("layout"):
        parts.append(r["layout"])
    if r.get("groups"):
        parts.append(f"G{r['groups']}")
    parts.append(f"{r['m']}x{r['n']}x{r['k']}")
    if r.get("out") == "fp32":
        parts.append("fp32")
    return " ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--base", default="base")
    ap.add_argument("--json")
    args = ap.parse_args()
    times: dict = defaultdict(lambda: defaultdict(list))  # key -> label -> [us per round]
    peers: dict = defaultdict(list)
    labels: list[str] = []
    for f in args.files:
        d = json.load(open(f))
        if d["label"] not in labels:
            labels.append(d["label"])
        for r in d["records"]:
            us = r.get("us", {})
            if us.get("finegemm"):
                times[record_key(r)][d["label"]].append(us["finegemm"])
            for name, v in us.items():
                if name != "finegemm" and v and not name.startswith("torch_bf16"):
                    peers[record_key(r)].append(v)
    labels.sort(key=lambda s: s != args.base)
    print(f"{'record':40s} " + " ".join(f"{lb:>16s}" for lb in labels) + "   peer")
    out = []
    for key, by_label in times.items():
        base = min(by_label.get(args.base, [0]) or [0])
        cells, row = [], {"record": key, "peer_us": min(peers[key]) if peers[key] else None}
        for lb in labels:
            v = min(by_label.get(lb, [0]) or [0])
            row[lb] = {"us_best": v, "us_rounds": by_label.get(lb, [])}
            cells.append(f"{v:8.2f}" + (f" ({(v / base - 1) * 100:+5.1f}%)" if base and lb != args.base else " " * 9))
        print(f"{key:40s} " + " ".join(f"{c:>16s}" for c in cells) + (f"   {row['peer_us']:.2f}" if row["peer_us"] else ""))
        out.append(row)
    if args.json:
        json.dump({"base": args.base, "labels": labels, "records": out}, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
