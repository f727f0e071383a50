"""How fast can one kernel read the weight of a skinny GEMM? (GPU machine, needs Triton.)

For the M <= 128 dense shapes the kernel time is bound by reading B [N, K] (fp8) once. This probe
times read-only Triton kernels over a B-sized buffer, as the anchors time kernels (profiler
kernel time, 256 MB L2 flush before each call):
  contiguous   each program sums one contiguous chunk (the best case for DRAM pages)
  tiles_128B   each program walks K in 128-byte steps over a BLOCK_N-row tile, as a GEMM with
               128-wide K blocks reads B (one 128-byte piece per row per step; rows K bytes apart)
  tiles_512B   the same with 512-byte steps (four K blocks per step)
and reports TB/s against B's bytes. If even `contiguous` needs T µs for B's bytes, no GEMM
on that shape can finish in less: the measured floor our skinny-shape goals can be held against.
Usage: python scripts/probe_read_floor.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from finegemm.bench._common import kernel_time_us, run_metadata  # noqa: E402

SHAPES = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]


@triton.jit
def _sum_contiguous(x_ptr, out_ptr, n_elems, chunk, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    start = pid * chunk
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for off in range(start, start + chunk, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=idx < n_elems, other=0)
    tl.store(out_ptr + pid, tl.sum(acc))


@triton.jit
def _sum_tiles(x_ptr, out_ptr, n_rows, row_words, k_words_per_split,
               BLOCK_N: tl.constexpr, STEP: tl.constexpr):
    # x viewed as int32 words [n_rows, row_words]; program (tile, split) reads rows
    # [tile*BLOCK_N, +BLOCK_N) x words [split*k_words_per_split, +k_words_per_split) in STEP-word steps.
    tile = tl.program_id(0)
    split = tl.program_id(1)
    rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N, STEP], dtype=tl.int32)
    k0 = split * k_words_per_split
    for kw in range(k0, k0 + k_words_per_split, STEP):
        cols = kw + tl.arange(0, STEP)
        ptrs = x_ptr + rows[:, None] * row_words + cols[None, :]
        acc += tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < row_words), other=0)
    tl.store(out_ptr + tile * tl.num_programs(1) + split, tl.sum(acc))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--num-tests", type=int, default=30)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    records = []
    for n, k in SHAPES:
        nbytes = n * k
        x = torch.randint(-2**30, 2**30, (nbytes // 4,), dtype=torch.int32, device="cuda")
        rec = {"n": n, "k": k, "mbytes": nbytes / 1e6, "us": {}}
        # contiguous: a few programs per SM, chunk a multiple of BLOCK.
        for per_sm in (2, 4, 8):
            block = 2048
            programs = sms * per_sm
            chunk = triton.cdiv(triton.cdiv(x.numel(), programs), block) * block
            grid = (triton.cdiv(x.numel(), chunk),)
            out = torch.empty(grid[0], dtype=torch.int32, device="cuda")
            rec["us"][f"contiguous_{per_sm}per_sm"] = kernel_time_us(
                lambda: _sum_contiguous[grid](x, out, x.numel(), chunk, BLOCK=block), args.num_tests)
        row_words = k // 4
        for block_n, step_bytes in ((64, 128), (128, 128), (64, 512), (128, 512)):
            step = step_bytes // 4
            tiles = triton.cdiv(n, block_n)
            splits = max(1, min(row_words // step, (2 * sms + tiles - 1) // tiles))
            per_split = triton.cdiv(triton.cdiv(row_words, splits), step) * step
            splits = triton.cdiv(row_words, per_split)
            out = torch.empty(tiles * splits, dtype=torch.int32, device="cuda")
            rec["us"][f"tiles_bn{block_n}_{step_bytes}B"] = kernel_time_us(
                lambda: _sum_tiles[(tiles, splits)](x, out, n, row_words, per_split, BLOCK_N=block_n, STEP=step),
                args.num_tests)
        rec["best_us"] = min(rec["us"].values())
        rec["best_TBps"] = nbytes / rec["best_us"] / 1e6
        records.append(rec)
        print(f"B {n}x{k} ({nbytes / 1e6:.1f} MB): " +
              ", ".join(f"{name} {us:.2f}" for name, us in rec["us"].items()) +
              f" | best {rec['best_us']:.2f} us = {rec['best_TBps']:.2f} TB/s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(run_metadata(), command=" ".join(["python", "scripts/probe_read_floor.py"] + sys.argv[1:]), records=records), f, indent=1)


if __name__ == "__main__":
    main()
