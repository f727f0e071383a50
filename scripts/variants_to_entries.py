"""Table entries from a `probe_variants.py` run of forced dense FP8 configurations against the
library's choice ("auto"), by the same-run rule: a shape switches to its fastest forced case only
when that case's mean over the repeats beats auto's mean by at least --min-gain. Every case must
have passed the run's checks (calc_diff <= 1e-5, bitwise repeat).

  python3 scripts/variants_to_entries.py --runs $OUT/serial.json --table finegemm/heuristics/tuned_sm90.json \
      --commit <sha> [--min-gain 1.01] [--dry-run]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm.bench.tune import table_entry  # noqa: E402
from finegemm.heuristics import tuned  # noqa: E402

# probe_variants' case fields after "M,N,K:" (missing trailing ones take these defaults)
SPEC_FIELDS = ("block_m", "block_n", "num_stages", "num_multicast", "multicast_on_a", "tma_store", "half_promote",
               "k_batch", "num_splits", "ctas_per_sm")


def spec_config(spec: str) -> dict:
    v = [int(x) for x in spec.split(",")]
    v += [0] * (len(SPEC_FIELDS) - len(v))
    f = dict(zip(SPEC_FIELDS, v))
    return {"block_m": f["block_m"], "block_n": f["block_n"], "num_stages": f["num_stages"],
            "num_splits": max(f["num_splits"], 1), "num_multicast": max(f["num_multicast"], 1),
            "multicast_on_a": bool(f["multicast_on_a"]) and f["num_multicast"] == 2, "tma_store": bool(f["tma_store"]),
            "half_promote": bool(f["half_promote"]), "ctas_per_sm": max(f["ctas_per_sm"], 1),
            "k_batch": max(f["k_batch"], 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", default="NVIDIA H200 (132 SMs)")
    ap.add_argument("--num-sms", type=int, default=132)
    ap.add_argument("--min-gain", type=float, default=1.01)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    times = defaultdict(list)  # (m, n, k) -> spec -> [us]
    for path in args.runs:
        data = json.loads(Path(path).read_text())
        for r in data["records"] if isinstance(data, dict) else data:
            if r["calc_diff"] > 1e-5 or not r["repeat_bitwise"]:
                raise SystemExit(f"{r['case']}: failed its check in the run (calc_diff {r['calc_diff']}, "
                                 f"bitwise {r['repeat_bitwise']}): fix that first")
            times[(r["m"], r["n"], r["k"], r["case"].partition(":")[2])].append(r["us"])
    shapes = sorted({key[:3] for key in times})
    entries = []
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for m, n, k in shapes:
        auto = times.get((m, n, k, "auto"))
        forced = {spec: mean(v) for (mm, nn, kk, spec), v in times.items() if (mm, nn, kk) == (m, n, k) and spec != "auto"}
        if not auto or not forced:
            print(f"{m}x{n}x{k}: needs an auto case and a forced one")
            continue
        spec, us = min(forced.items(), key=lambda kv: kv[1])
        base = mean(auto)
        if us * args.min_gain <= base:
            print(f"switch {m}x{n}x{k}: auto {base:.2f} us -> {spec} {us:.2f} us ({base / us - 1:+.1%})")
            # The tuner's entry format; model_us: what the library selected before (table entry or
            # model), as the tuner's entries name the selection they beat.
            rec = {"family": "dense", "m": m, "n": n, "k": k, "best": {**spec_config(spec), "us": us},
                   "model_us": base}
            entries.append(table_entry(rec, args.num_sms, {"gpu": args.gpu, "commit": args.commit, "date": date}))
        else:
            print(f"keep   {m}x{n}x{k}: auto {base:.2f} us, best forced {spec} {us:.2f} us")
    if entries and not args.dry_run:
        tuned.merge_entries(args.table, entries)
    print(f"{len(entries)} switched{' (dry run)' if args.dry_run else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
