"""The memory floor of a skinny GEMM, measured: how long does the GPU take just to read A and B
and write D of a shape, timed exactly as `bench dense` times the GEMMs (CUPTI kernel time, 256 MB
L2 flush before each call)? The anchors' "memory-bound floor" is bytes / peak HBM bandwidth; this
probe gives the floor a kernel can reach (launch, first-byte latency, tail and the flush's dirty
L2 included), next to finegemm's fp8_gemm_nt on the same shapes in the same run.

The streaming kernel (Triton, compiled on the GPU machine) reads one buffer of the shape's A + B
bytes with 16-byte loads and writes D's bytes; the best of several grid sizes, block sizes and
warp counts is the floor. Developer probe, not part of the library.

  python3 scripts/read_floor.py [M,N,K ...] [--out $OUT/read_floor.json]
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_SHAPES = [f"{m},{n},{k}" for m in (1, 64, 128) for n, k in
                  ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))]


def main() -> int:
    import torch
    import triton
    import triton.language as tl

    import finegemm
    from finegemm.bench._common import kernel_time_us, write_probe_json
    from finegemm.bench.dense import _inputs

    @triton.jit
    def stream(src, n_src, dst, n_dst, sink, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        for start in range(pid * BLOCK, n_src, step):
            idx = start + offs
            acc += tl.load(src + idx, mask=idx < n_src, other=0)
        for start in range(pid * BLOCK, n_dst, step):
            idx = start + offs
            tl.store(dst + idx, acc, mask=idx < n_dst)
        tl.store(sink + pid, tl.sum(acc, axis=0))  # keeps every load live

    p = argparse.ArgumentParser()
    p.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES)
    p.add_argument("--num-tests", type=int, default=30)
    p.add_argument("--out")
    args = p.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    records = []
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split(","))
        read_bytes = m * k + n * k  # fp8 A and B (the scales add < 1%)
        write_bytes = m * n * 2     # bf16 D
        src = torch.zeros((read_bytes + 3) // 4, dtype=torch.int32, device="cuda")
        dst = torch.empty((write_bytes + 3) // 4, dtype=torch.int32, device="cuda")
        best = None
        for block, warps, ctas in itertools.product((1024, 2048, 4096), (4, 8), (1, 2, 4, 8)):
            grid = num_sms * ctas
            sink = torch.empty(grid, dtype=torch.int32, device="cuda")

            def run(block=block, warps=warps, grid=grid, sink=sink):
                stream[(grid,)](src, src.numel(), dst, dst.numel(), sink, BLOCK=block, num_warps=warps)

            us = kernel_time_us(run, num_tests=args.num_tests)
            if best is None or us < best[0]:
                best = (us, block, warps, grid)
        _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        fg_us = kernel_time_us(lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d), num_tests=args.num_tests)
        total = read_bytes + write_bytes
        rec = {"m": m, "n": n, "k": k, "bytes": total, "floor_us": best[0],
               "floor_tbps": total / best[0] / 1e6, "floor_config": {"block": best[1], "warps": best[2],
                                                                     "grid": best[3]},
               "finegemm_us": fg_us, "finegemm_over_floor": fg_us / best[0],
               "hbm_peak_floor_us": total / 4.8e6}
        records.append(rec)
        print(f"{m:5d}x{n:6d}x{k:6d}: read+write floor {best[0]:6.2f} us ({rec['floor_tbps']:.2f} TB/s, "
              f"block {best[1]} warps {best[2]} grid {best[3]}), bytes/4.8 TB/s {rec['hbm_peak_floor_us']:6.2f} us, "
              f"finegemm {fg_us:6.2f} us = {rec['finegemm_over_floor']:.2f}x the floor", flush=True)
    if args.out:
        write_probe_json(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
