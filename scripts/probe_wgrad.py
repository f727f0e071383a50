"""Where the recipe (1, 1, 128) time goes: the same shapes through 1D2D bf16 / fp32 / fp32 + C and
1D1D fp32 / fp32 + C (kernel-only, L2 flushed). Prints one line per (shape, variant)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finegemm  # noqa: E402
from finegemm.bench._common import kernel_time_us  # noqa: E402
from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402

SHAPES = [(4096, 32768, 512), (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048)]


def main() -> int:
    for m, n, k in SHAPES:
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b2, sfb2 = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        b1, sfb1 = per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d16 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        d32 = torch.zeros(m, n, device="cuda", dtype=torch.float32)
        variants = {
            "1d2d bf16": lambda: finegemm.fp8_gemm_nt((a, sfa), (b2, sfb2), d16),
            "1d2d fp32": lambda: finegemm.fp8_gemm_nt((a, sfa), (b2, sfb2), d32),
            "1d2d fp32+C": lambda: finegemm.fp8_gemm_nt((a, sfa), (b2, sfb2), d32, c=d32),
            "1d1d fp32": lambda: finegemm.fp8_gemm_nt((a, sfa), (b1, sfb1), d32, recipe=(1, 1, 128)),
            "1d1d fp32+C": lambda: finegemm.fp8_gemm_nt((a, sfa), (b1, sfb1), d32, c=d32, recipe=(1, 1, 128)),
        }
        for name, fn in variants.items():
            us = kernel_time_us(fn, 10)
            print(f"{m}x{n}x{k} {name:12s} {us:9.1f} us {2 * m * n * k / us / 1e6:7.0f} TFLOPS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
