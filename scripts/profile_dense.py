"""Three calls of fp8_gemm_nt on one shape, for a profiler (ncu) to pick the last one.

  ncu -k regex:sm90_fp8_gemm --launch-skip 2 --launch-count 1 --section SpeedOfLight \
      python3 scripts/profile_dense.py 64,4096,7168

A case of scripts/probe_variants.py ("M,N,K:bm,bn,stages,...") forces that configuration; a second
argument lifts the heuristic's stage cap as probe_variants.py --max-stages does.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finegemm  # noqa: E402
from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8  # noqa: E402


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from probe_variants import _config, _parse_case, set_max_stages

    from finegemm.ops import sm90_fp8_gemm as ops
    m, n, k, spec = _parse_case(sys.argv[1])
    set_max_stages(int(sys.argv[2]) if len(sys.argv) > 2 else None)
    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    if spec == "auto":
        def call():
            finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    else:
        from finegemm import runtime
        call = ops.prepare(a, sfa, b, sfb, d, config=_config(m, n, k, spec, runtime.get_num_sms()))
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
