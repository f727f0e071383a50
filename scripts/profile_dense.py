"""Three calls of fp8_gemm_nt on one shape, for a profiler (ncu) to pick the last one.

  ncu -k regex:sm90_fp8_gemm --launch-skip 2 --launch-count 1 --section SpeedOfLight \
      python3 scripts/profile_dense.py 64,4096,7168
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finegemm  # noqa: E402
from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402


def main() -> int:
    m, n, k = (int(v) for v in sys.argv[1].split(","))
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
