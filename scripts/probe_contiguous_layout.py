"""What the m-grouped contiguous calls cost around their GEMM, before and after the GPU layout check
(finegemm/ops/contiguous_layout.py). GPU machine:

  python3 scripts/probe_contiguous_layout.py --out $OUT/contiguous_layout.json

- the check kernel's own time (profiler, L2 flushed before each call) for plain and psum
  layouts of M rows;
- per call, on a G = 8, N = 4096, K = 7168 problem (the bench's contiguous shape at a smaller M):
  "host" = the old path (the layout read on the host, which synchronizes, then the GEMM on
  checked ids), "gpu" = the public call as it is now, and its parts "check_only" (the layout
  kernel's launch) and "gemm_only" (the ops-level GEMM on checked ids). For each: host time per call with the
  GPU queue kept busy (the calls issued back to back, no sync) and wall time per call of the
  whole loop (issue to the last kernel's end).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm.bench._common import loop_us, profiled_kernel_us  # noqa: E402


def _kernel_us(fn, reps=30):
    """Mean device time of one kernel (per kernel, not per call) and the number of kernels seen."""
    times = profiled_kernel_us(fn, reps)
    return sum(times) / max(len(times), 1), len(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    import torch

    import finegemm
    from finegemm import quant
    from finegemm.api import _validate as _v
    from finegemm.ops import contiguous_layout as cl
    from finegemm.ops import sm90_fp8_gemm as ops

    out = {"gpu": torch.cuda.get_device_name(), "records": []}
    for m in (4096, 35000, 262144):
        alignment, g = 128, 8
        per = m // g // alignment * alignment
        ids = torch.full((m,), -1, dtype=torch.int32)
        ends = []
        for i in range(g):
            ids[i * per:i * per + per - 7] = i
            ends.append(i * per + per - 7)
        ids, ends = ids.cuda(), torch.tensor(ends, dtype=torch.int32, device="cuda")
        for psum, layout in ((False, ids), (True, ends)):
            us, n = _kernel_us(lambda: cl.checked_group_ids("probe", layout, m, g, psum, alignment))
            out["records"].append({"what": "check_kernel", "m": m, "psum": psum, "us": us, "events": n})
            print(f"check kernel m={m} psum={psum}: {us:.2f} us ({n} events)")
    finegemm.check_errors()

    g, n, k, per = 8, 4096, 7168, 512
    m = g * per
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(x)
    w = torch.randn(g, n, k, device="cuda", generator=gen).to(torch.bfloat16)
    qs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g)]
    b, sfb = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    layout = torch.arange(m, device="cuda", dtype=torch.int32) // per
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fn = "m_grouped_fp8_gemm_nt_contiguous"

    def host_path():  # the code before the GPU check: read the values on the host, then the GEMM
        _v.check_grouped_layout(fn, layout, m, g, False, 128)
        ops.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, layout, checked_ids=True)

    def gpu_path():
        finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout)

    gemm_us, _ = _kernel_us(lambda: ops.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, layout,
                                                                         checked_ids=True))
    out["records"].append({"what": "gemm_kernel", "m": m, "n": n, "k": k, "groups": g, "us": gemm_us})
    print(f"GEMM kernel {m}x{n}x{k} G={g}: {gemm_us:.1f} us")
    parts = (("check_only", lambda: cl.checked_group_ids(fn, layout, m, g, False, 128)),
             ("gemm_only", lambda: ops.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, layout, checked_ids=True)))
    for rnd in range(2):
        for name, call in (("host", host_path), ("gpu", gpu_path)) + parts:
            host_us, wall_us = loop_us(call, args.calls)
            out["records"].append({"what": "call", "path": name, "round": rnd, "m": m, "n": n, "k": k, "groups": g,
                                   "host_us_per_call": host_us, "wall_us_per_call": wall_us})
            print(f"round {rnd} {name:4s}: host {host_us:8.1f} us/call, wall {wall_us:8.1f} us/call")
    finegemm.check_errors()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
