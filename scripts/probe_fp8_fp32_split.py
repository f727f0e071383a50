"""FP8 GEMMs with an fp32 D (plain or += C) on skinny shapes, where the heuristics pick a split
cluster (GPU): each call checked against the reference on a NaN-poisoned D, then timed like the
benches (kernel-only, L2 flushed). Run once per build variant in separate processes, interleaved,
e.g. the spread split reduction (v1.08) against the warp form:

  python3 scripts/probe_fp8_fp32_split.py --label base --out $OUT/base_1.json
  FINEGEMM_EXTRA_NVCC_FLAGS=-DFINEGEMM_DIAG_SPLIT_CLUSTER_WARP_REDUCE \
      python3 scripts/probe_fp8_fp32_split.py --label warp --out $OUT/warp_1.json

Precompile (no GPU): `python -m finegemm warmup --kinds fp8_fp32 fp8_fp32_c --shapes <SHAPES below>`.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (m, n, k): the router and attention-output sizes at decode batch sizes.
SHAPES = [(64, 256, 7168), (128, 256, 7168), (17, 576, 7296), (64, 2112, 7168), (128, 2112, 7168),
          (64, 4096, 7168), (128, 4096, 7168), (33, 7168, 2048)]


def _configs(sms: int, with_c: bool):
    """Each shape with the heuristics' configuration (the tables, then the model), for the record."""
    from finegemm.heuristics import sm90_fp8_gemm as h8

    return [(s, h8.select_config(*s, sms, True, with_c)) for s in SHAPES]


def run(label: str, num_tests: int, out: str) -> int:
    import torch

    import finegemm
    from finegemm import reference
    from finegemm.bench._common import kernel_time_us, write_probe_json
    from finegemm.bench.dense import _inputs
    from finegemm.testing import calc_diff

    gen = torch.Generator(device="cuda").manual_seed(0)
    records, bad = [], 0
    for with_c in (False, True):
        for (m, n, k), cfg in _configs(finegemm.get_num_sms(), with_c):
            _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
            c = torch.randn(m, n, device="cuda", generator=gen) if with_c else None
            d = torch.full((m, n), float("nan"), device="cuda")
            finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c)
            ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=c, out_dtype=torch.float32)
            diff = calc_diff(d, ref)
            ok = bool(torch.isfinite(d).all()) and diff < 1e-5
            bad += not ok
            us = kernel_time_us(lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c), num_tests) if ok else None
            rec = {"label": label, "m": m, "n": n, "k": k, "c": with_c, "us": us, "calc_diff": diff,
                   "config": f"bm{cfg.block_m} bn{cfg.block_n} s{cfg.num_stages} x{cfg.num_splits}"}
            records.append(rec)
            print(f"{label:6s} {m:4d}x{n:5d}x{k:5d} {'+C' if with_c else '  '} {rec['config']:20s} "
                  f"{us if us is None else round(us, 2)} us  calc_diff {diff:.2e}", flush=True)
    if out:
        write_probe_json(out, records, label=label, flags=os.environ.get("FINEGEMM_EXTRA_NVCC_FLAGS", ""))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default=os.environ.get("FINEGEMM_EXTRA_NVCC_FLAGS", "") or "base")
    ap.add_argument("--num-tests", type=int, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    return run(args.label, args.num_tests, args.out)


if __name__ == "__main__":
    sys.exit(main())
