"""Repeat dense BF16 calls and report where results differ (race hunting, GPU).

Each case is a layout and shape; every call writes a NaN-poisoned d, and is compared bitwise with
the first call and with the fp32 product. --promotions alternates the given L2 promotion pairs
(the same kernel) call by call, as scripts/tune_l2_promotion.py does.

  python3 scripts/probe_bf16_determinism.py --cases nt,128,2112,7168 nn,128,2112,7168 --reps 40 \
      --promotions 256/256 128/256
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm.heuristics import sm90_bf16_gemm as hb  # noqa: E402
from finegemm.ops import sm90_bf16_gemm as ob  # noqa: E402


def run_case(layout: str, m: int, n: int, k: int, reps: int, promotions: list, fp32: bool) -> bool:
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    ref = (a.float() @ b.float().t())
    a = a if layout[0] == "n" else a.t().contiguous()
    b = b if layout[1] == "t" else b.t().contiguous()
    cfg = hb.select_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", fp32, False)
    dtype = torch.float32 if fp32 else torch.bfloat16
    d = torch.empty(m, n, device="cuda", dtype=dtype)
    calls = [ob.prepare(a, b, d, layout=layout, config=dataclasses.replace(cfg, l2_promotion=p)) for p in promotions]
    first, bad, nans = None, 0, 0
    bits = torch.int32 if fp32 else torch.int16
    for i in range(reps):
        d.fill_(float("nan"))
        calls[i % len(calls)]()
        out = d.clone()
        nans += int(torch.isnan(out).sum().item())
        if first is None:
            first = out
            continue
        diff = out.view(bits) != first.view(bits)
        if diff.any():
            bad += 1
            if bad <= 3:
                idx = diff.nonzero()
                r, c = idx[0].tolist()
                print(f"  call {i} (promotion {promotions[i % len(promotions)]}): {idx.shape[0]} elements differ, "
                      f"first ({r},{c}) {first[r, c].item():.6f} vs {out[r, c].item():.6f}; tile rows "
                      f"{sorted(set((idx[:, 0] // cfg.block_m).tolist()))[:6]} tile cols "
                      f"{sorted(set((idx[:, 1] // cfg.block_n).tolist()))[:8]}", flush=True)
    err = ((first.float() - ref).norm() / ref.norm()).item()
    ok = bad == 0 and nans == 0
    print(f"{layout} {m}x{n}x{k}{' fp32' if fp32 else ''} bm{cfg.block_m} bn{cfg.block_n} s{cfg.num_stages} "
          f"splits{cfg.num_splits}: {bad}/{reps - 1} calls differ, {nans} NaN, rel err {err:.2e} "
          f"-> {'ok' if ok else 'FAIL'}", flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["nt,128,2112,7168"])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--promotions", nargs="+", default=["256/256"])
    ap.add_argument("--fp32", action="store_true")
    args = ap.parse_args()
    promotions = [tuple(int(x) for x in p.split("/")) for p in args.promotions]
    ok = True
    for case in args.cases:
        layout, m, n, k = case.split(",")
        ok &= run_case(layout, int(m), int(n), int(k), args.reps, promotions, args.fp32)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
