"""Three calls of the recipe (1, 1, 128) GEMM (fp32 D accumulated in place, as `bench grouped`'s
wgrad records) on one shape, for ncu to pick the last one; --precompile builds its kernel here.

  FINEGEMM_LINEINFO=1 FINEGEMM_CACHE_DIR=.fgcache python3 scripts/profile_wgrad.py 7168,2048,4096 --precompile
  ncu -k regex:finegemm_entry --launch-skip 2 --launch-count 1 --set full python3 scripts/profile_wgrad.py 7168,2048,4096
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("shape", help="M,N,K")
    p.add_argument("--precompile", action="store_true")
    args = p.parse_args()
    m, n, k = (int(x) for x in args.shape.split(","))
    if args.precompile:
        from finegemm import jit
        from finegemm.heuristics.sm90_fp8_gemm import select_config
        from finegemm.ops import sm90_fp8_gemm as ops

        cfg = select_config(m, n, k, 132, True, True, one_d_one_d=True)
        jit.build_many({ops._kernel_name(cfg): ops._render_cfg(cfg)}, 1)
        print(cfg)
        return 0
    import torch

    import finegemm
    from finegemm.quant import per_token_cast_to_fp8

    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.zeros(m, n, device="cuda")
    for _ in range(3):
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=(1, 1, 128))
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
