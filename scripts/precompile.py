"""Compile, without a GPU, the FP8 GEMM kernels a list of shapes needs into FINEGEMM_CACHE_DIR.

The cache key does not depend on the machine (source, headers, flags, nvcc version), so a cache
built here is a cache hit on a GPU machine with the same nvcc: GPU time is not spent in nvcc.
Usage: FINEGEMM_CACHE_DIR=.fgcache python scripts/precompile.py [--sms 132] [--jobs 2]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm import jit  # noqa: E402
from finegemm.bench.dense import CURVE_M, DENSE_M, DENSE_NK  # noqa: E402
from finegemm.heuristics.sm90_fp8_gemm import select_config  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402


def gpu_test_shapes() -> list[tuple[int, int, int]]:
    shapes = [(m, n, k) for m in (1, 17, 64, 128, 4097) for n in (576, 2112, 7168) for k in (512, 7168, 7296, 144)]
    shapes += [(1, 129280, 7168), (17, 129280, 512), (1, 129280, 144)]
    shapes += [(m, n, k) for m in (1, 17, 64, 128, 4097) for n in (576, 2112, 4096, 7168) for k in (512, 2048, 7168, 7296)]
    return shapes


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    bench = [(m, n, k) for m in DENSE_M + CURVE_M for (n, k) in DENSE_NK]
    cfgs = {}
    for (m, n, k) in bench + gpu_test_shapes():
        for out_fp32, has_c in ((False, False), (True, False), (True, True)):
            cfg = select_config(m, n, k, args.sms, out_fp32, has_c)
            cfgs[ops._kernel_name(cfg)] = cfg
    print(f"{len(cfgs)} kernel configurations")
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
