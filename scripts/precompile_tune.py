"""Compile, without a GPU, every candidate kernel `python -m finegemm tune dense` will time.

Usage: FINEGEMM_CACHE_DIR=.fgcache python scripts/precompile_tune.py [--shapes M,N,K ...] [--top 16]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm import jit  # noqa: E402
from finegemm.bench.tune import _parse_shape, default_shapes  # noqa: E402
from finegemm.heuristics.sm90_fp8_gemm import candidate_configs  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--top", type=int, default=16)
    p.add_argument("--shapes", nargs="+", type=_parse_shape)
    args = p.parse_args()
    cfgs = {}
    for (m, n, k) in args.shapes or default_shapes():
        for cfg in candidate_configs(m, n, k, args.sms, top=args.top):
            cfgs[ops._kernel_name(cfg)] = cfg
    print(f"{len(cfgs)} candidate kernels")
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = [pool.submit(jit.build_cubin, name, ops._render_cfg(cfg)) for name, cfg in cfgs.items()]
        for i, f in enumerate(concurrent.futures.as_completed(futs), 1):
            f.result()
            print(f"\r{i}/{len(futs)} ({time.time() - t0:.0f} s)", end="", flush=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
