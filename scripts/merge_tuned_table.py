"""Merge a `finegemm tune` run into a shipped table by the same-run rule: a shape without an entry
takes the tuner's winner; a shape with one switches only when the winner beat the old entry's
configuration by at least --min-gain in the same run, or when the old configuration failed its
check there; an entry whose configuration the run did not time stays as it is.

Usage: python3 scripts/merge_tuned_table.py --table finegemm/heuristics/tuned_sm90.json \
           --tuned $OUT/tuned_sm90.json --runs $OUT/tune_dense.json [--min-gain 1.01]
(--tuned: the table `tune --table` wrote, the shipped one plus the run's winners.)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm.heuristics import tuned  # noqa: E402


FP32_FAMILIES = ("wgrad", "k_grouped")


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def shape_key(e: dict) -> tuple:
    """An entry's identity in a table: tuned.merge_entries' key (exact fields, then M and K)."""
    return tuned.entry_key(e["kind"], e["num_sms"], e["n"], e.get("out_fp32", False), e.get("has_c", False)) + (
        int(e["m"]), int(e["k"]))


def same_config(cfg: dict, row: dict) -> bool:
    """Whether a tuner candidate row ran the entry's configuration (absent optional fields: defaults)."""
    want = {**tuned.OPTIONAL_FIELDS, **cfg}
    return all({**tuned.OPTIONAL_FIELDS, **row}.get(f) == want[f] for f in (*tuned.CONFIG_FIELDS, *tuned.OPTIONAL_FIELDS))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--tuned", required=True)
    ap.add_argument("--runs", required=True, nargs="+")
    ap.add_argument("--min-gain", type=float, default=1.01)
    args = ap.parse_args()
    shipped = {shape_key(e): e for e in _load(args.table)["entries"]}
    rows = {}
    for path in args.runs:
        for r in _load(path)["records"]:
            # The recipe (1, 1, 128) families write fp32 D without saying so in the record.
            fp32 = r.get("out_fp32", r.get("family") in FP32_FAMILIES)
            rows[(r["m"], r["n"], r["k"], r.get("layout"), bool(fp32), r.get("family") == "k_grouped")] = r["candidates"]
    take, added, kept = [], 0, 0
    for e in _load(args.tuned)["entries"]:
        old = shipped.get(shape_key(e))
        if old is None:
            take.append(e)
            added += 1
            continue
        if old["config"] == e["config"]:
            continue
        layout = e["kind"].split("_", 1)[1] if e["kind"].startswith("bf16_") else None
        cands = rows.get((e["m"], e["n"], e["k"], layout, bool(e.get("out_fp32", False)), e["kind"] == "fp8_k_grouped"),
                         [])
        old_rows = [c for c in cands if same_config(old["config"], c)]
        old_us = [c["us"] for c in old_rows if c.get("ok") and c.get("us")]
        if not old_rows:
            # Nothing to compare with: the run did not time what the table selects today (a run
            # against another table, or a tuner older than its `current` candidate, v0.86).
            kept += 1
            print(f"keep   {shape_key(e)}: old config not timed in this run (winner {e['us']} us)")
        elif not old_us or e["us"] * args.min_gain <= min(old_us):
            take.append(e)
            print(f"switch {shape_key(e)}: {min(old_us) if old_us else 'old config failed'} -> {e['us']} us")
        else:
            kept += 1
            print(f"keep   {shape_key(e)}: old {min(old_us)} us vs winner {e['us']} us")
    tuned.merge_entries(args.table, take)
    print(f"{added} added, {len(take) - added} switched, {kept} kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
