"""Every k-grouped BF16 kernel (heuristics.k_grouped_kernel_keys(): block_m x block_n) on `bench
bf16`'s k-grouped problems, forced one at a time, timed as the bench times them (kernel-only, 256 MB
flush, c = d accumulated in place), the tiles interleaved within each of --rounds rounds. Each
forced tile's output (one call on a fresh copy of C) is checked against the model's tile's
(calc_diff <= 1e-6). Question: does a tile other than the model's pick win (the k-grouped BF16
kernel has no tuned table)?

  python3 scripts/probe_bf16_k_grouped_configs.py --out $OUT/bf16_k_grouped_configs.json
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--num-tests", type=int, default=10)
    args = ap.parse_args()

    import finegemm
    from finegemm.bench._common import kernel_time_us, settle, write_probe_json
    from finegemm.bench.bf16 import grouped_plan
    from finegemm.heuristics import sm90_bf16_gemm as h
    from finegemm.ops import sm90_bf16_gemm as ops
    from finegemm.testing import calc_diff
    from finegemm import runtime

    real = ops.select_k_grouped_config
    forced = {"tile": None}

    def select(m, n, k_avg, num_groups, num_sms, has_c=False):
        cfg = real(m, n, k_avg, num_groups, num_sms, has_c)
        if forced["tile"] is None:
            return cfg
        bm, bn = forced["tile"]
        st = h.k_grouped_max_stages(bm, bn)
        return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st,
                                   smem_bytes=h.k_grouped_smem_bytes(bm, bn, st), num_threads=h.num_threads(bm))

    ops.select_k_grouped_config = select
    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for p in grouped_plan(("k_grouped",)):
        g, m, n, ks = p["groups"], p["m"], p["n"], p["ks"]
        a = torch.randn(sum(ks), m, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(sum(ks), n, device="cuda", dtype=torch.bfloat16, generator=gen)
        ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
        c0 = torch.randn(g, m, n, device="cuda", generator=gen)
        model = real(m, n, h.k_grouped_k_bucket(-(-sum(ks) // g)), g, runtime.get_num_sms(), True)
        tiles = [(model.block_m, model.block_n)] + [(bm, bn) for bm, bn, _ in h.k_grouped_kernel_keys()
                                                    if (bm, bn) != (model.block_m, model.block_n)]
        outs, calls = {}, {}
        for tile in tiles:
            forced["tile"] = tile
            ops._plans.clear()
            d = c0.clone()
            finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_t, c=d)
            torch.cuda.synchronize()
            outs[tile] = d
            calls[tile] = (lambda d=d: finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_t, c=d))
        ref = outs[tiles[0]]
        diffs = {t: calc_diff(o, ref) for t, o in outs.items()}
        times = {t: [] for t in tiles}
        settle(200)
        for _ in range(args.rounds):
            for t in tiles:
                forced["tile"] = t
                ops._plans.clear()
                times[t].append(kernel_time_us(calls[t], args.num_tests))
        med = {t: statistics.median(v) for t, v in times.items()}
        rec = {"groups": g, "m": m, "n": n, "k": sum(ks), "model_tile": list(tiles[0]),
               "tiles": [{"block_m": t[0], "block_n": t[1], "us": [round(x, 2) for x in times[t]],
                          "calc_diff_vs_model": diffs[t], "ok": diffs[t] <= 1e-6} for t in tiles]}
        records.append(rec)
        best = min(tiles, key=lambda t: med[t])
        print(f"G={g} {m}x{n} k={sum(ks)}: model bm{tiles[0][0]} bn{tiles[0][1]} {med[tiles[0]]:.1f} us; best "
              f"bm{best[0]} bn{best[1]} {med[best]:.1f} us ({med[tiles[0]] / med[best]:.3f}x); "
              + ", ".join(f"{t[0]}x{t[1]}={med[t]:.0f}{'' if diffs[t] <= 1e-6 else ' BAD'}" for t in tiles), flush=True)
        del outs, calls, a, b, c0
        torch.cuda.empty_cache()
    forced["tile"] = None
    write_probe_json(args.out, records, rounds=args.rounds)
    return 0 if all(t["ok"] for r in records for t in r["tiles"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
