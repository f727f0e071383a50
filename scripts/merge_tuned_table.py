"""Merge a `finegemm tune` run into a shipped table by the same-run rule: a shape without an entry
takes the tuner's winner; a shape with one switches only when the winner beat the old entry's
configuration by at least --min-gain in the same run (else the old entry stays as it is).

Usage: python3 scripts/merge_tuned_table.py --table finegemm/heuristics/tuned_sm90.json \
           --tuned $OUT/tuned_sm90.json --runs $OUT/tune_dense.json [--min-gain 1.01]
(--tuned: the table `tune --table` wrote, the shipped one plus the run's winners.)
"""
from __future__ import annotations

import argparse
import json

CONFIG_KEYS = ("block_m", "block_n", "num_stages", "num_splits", "num_multicast", "multicast_on_a", "tma_store",
               "half_promote", "ctas_per_sm", "k_batch")


def entry_key(e: dict) -> tuple:
    return (e["kind"], e["num_sms"], e["m"], e["n"], e["k"], e.get("out_fp32"), e.get("has_c"))


def same_config(cfg: dict, row: dict) -> bool:
    return all(row.get(k, cfg.get(k)) == cfg.get(k) for k in CONFIG_KEYS if k in cfg)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--tuned", required=True)
    ap.add_argument("--runs", required=True, nargs="+")
    ap.add_argument("--min-gain", type=float, default=1.01)
    args = ap.parse_args()
    table = json.load(open(args.table))
    tuned = json.load(open(args.tuned))
    rows = {}
    for path in args.runs:
        for r in json.load(open(path))["records"]:
            rows[(r["m"], r["n"], r["k"], r.get("layout"), bool(r.get("out_fp32", False)))] = r["candidates"]
    index = {entry_key(e): i for i, e in enumerate(table["entries"])}
    old_keys = set(index)
    added = switched = kept = 0
    for e in tuned["entries"]:
        key = entry_key(e)
        if key not in old_keys:
            table["entries"].append(e)
            added += 1
            continue
        old = table["entries"][index[key]]
        if old["config"] == e["config"]:
            continue
        layout = e["kind"].split("_", 1)[1] if e["kind"].startswith("bf16_") else None
        cands = rows.get((e["m"], e["n"], e["k"], layout, bool(e.get("out_fp32", False))), [])
        old_us = [c["us"] for c in cands if c.get("ok") and same_config(old["config"], c)]
        if not old_us or e["us"] * args.min_gain <= min(old_us):
            table["entries"][index[key]] = e
            switched += 1
            print(f"switch {key}: {min(old_us) if old_us else 'old config not timed'} -> {e['us']} us")
        else:
            kept += 1
            print(f"keep   {key}: old {min(old_us)} us vs winner {e['us']} us")
    with open(args.table, "w") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    print(f"{added} added, {switched} switched, {kept} kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
