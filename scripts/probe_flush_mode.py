"""Kernel-only times of the skinny dense shapes after a dirty L2 flush (the anchors' method: a
256 MB buffer zeroed before each call) and after a clean one (the same buffer read), for
finegemm, cuBLAS blockwise and torch bf16 in the same run (GPU). The difference is what the
timed kernel pays to write back the flush's dirty lines it evicts (benchmarks/NOTES.md v0.38).

  python3 scripts/probe_flush_mode.py --out $OUT/flush_mode.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finegemm  # noqa: E402
from finegemm.bench._common import kernel_time_us, write_probe_json  # noqa: E402
from finegemm.bench.dense import _cublas_blockwise  # noqa: E402
from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402
from finegemm.testing.shapes import DENSE_NK  # noqa: E402

SHAPES = [(m, n, k) for m in (64, 128) for n, k in DENSE_NK] + [(4096, 4096, 7168), (4096, 7168, 2048)]


def _kernel_names(fn) -> list[str]:
    """Every kernel a read flush plus one call launch (to check what kernel_time_us excludes)."""
    flush = torch.zeros(256 << 20 >> 2, dtype=torch.float32, device="cuda")
    out = torch.empty((), dtype=torch.float32, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.sum(flush, dim=0, out=out)  # as kernel_time_us's read flush
        fn()
        torch.cuda.synchronize()
    return sorted({e.name[:120] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--num-tests", type=int, default=20)
    args = ap.parse_args()
    records = []
    for m, n, k in SHAPES:
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        a16, b16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(n, k, device="cuda",
                                                                                      dtype=torch.bfloat16)
        fns = {"finegemm": lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d),
               "cublas_blockwise": _cublas_blockwise(a, sfa, b, sfb),
               "torch_bf16": lambda: a16 @ b16.t()}
        rec = {"m": m, "n": n, "k": k, "us": {}}
        if not records:
            rec["kernels_of_a_read_flush_and_each_contender"] = {name: _kernel_names(fn) for name, fn in fns.items()}
            print(rec["kernels_of_a_read_flush_and_each_contender"], flush=True)
        for mode in ("zero", "read", "zero"):  # zero twice: the second is the repeat
            for name, fn in fns.items():
                key = f"{name}_{mode}" if f"{name}_{mode}" not in rec["us"] else f"{name}_{mode}_2"
                rec["us"][key] = kernel_time_us(fn, args.num_tests, flush_mode=mode)
        print(m, n, k, {kk: round(v, 2) if v else v for kk, v in rec["us"].items()}, flush=True)
        records.append(rec)
    write_probe_json(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
