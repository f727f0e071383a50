"""What reading psum ends inside the GEMM (FP8 and BF16) saves per m-grouped contiguous call (benchmarks/NOTES.md
v0.99). GPU machine:

  python3 scripts/probe_psum_in_gemm.py --out $OUT/psum_in_gemm.json

For MoE problems from a decode-sized prefill to the bench's size (G experts of N = 4096, K = 7168,
group sizes drawn around `per`, psum ends with the 128-row alignment gaps), two paths of the same
public call (`use_psum_layout=True`), interleaved, two rounds (the order alternates between rounds:
at ~1.5 ms per call the GPU's clock drifts within a round):
- "check_kernel": the shipped path (the layout kernel expands the ends into per-row ids, then the GEMM);
- "in_gemm": the GEMM reading the ends itself (the gated `{fp8,bf16}_contiguous_psum_in_gemm`, opened here).
Before timing, each problem's outputs of the two paths are compared bitwise (the same tiles, so the
same sums). Per path: GPU time per call (the sum of its kernels, profiler, L2 flushed before each
call), host time per call (calls issued back to back, no sync) and wall time per call of that loop.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm.bench._common import loop_us, profiled_kernel_us  # noqa: E402

PROBLEMS = [(8, 32), (8, 128), (8, 512), (32, 64), (4, 8192)]  # (G, rows per group, expected)
N, K, ALIGNMENT = 4096, 7168, 128


def problem_ms(rng: random.Random) -> list[tuple[int, list[int], list[int], int]]:
    """(G, group sizes, psum ends, rows of A) of each problem, drawn in PROBLEMS' order."""
    out = []
    for g, per in PROBLEMS:
        ms = [max(0, int(per * rng.uniform(0.7, 1.3))) for _ in range(g)]
        ends, row = [], 0
        for m in ms:
            row = (_align(row) if row else 0) + m
            ends.append(row)
        out.append((g, ms, ends, _align(row)))
    return out


def problem_rows(rng: random.Random) -> list[tuple[int, int]]:
    """(G, rows of A) of each problem (scripts/precompile.py plans them)."""
    return [(g, rows) for g, _, _, rows in problem_ms(rng)]


def _align(x: int) -> int:
    return (x + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _gpu_us(fn, reps: int) -> tuple[float, int]:
    """Mean GPU time of one call (all of its kernels), L2 flushed before each call."""
    times = profiled_kernel_us(fn, reps)
    return sum(times) / reps, len(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default=None, help="G,PER: time only that problem of PROBLEMS")
    ap.add_argument("--families", nargs="+", default=["fp8", "bf16"], choices=["fp8", "bf16"])
    ap.add_argument("--plain-calls", type=int, default=0,
                    help="instead of timing, N plain calls of each path per round (for a profiler such as "
                         "ncu to time: scripts/device_run.sh psum_ncu)")
    args = ap.parse_args()
    import os

    import torch

    import finegemm
    from finegemm import quant
    from finegemm.api import _validate as _v
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8
    from finegemm.ops import contiguous_layout as cl

    def route(family: str, in_gemm: bool) -> None:
        # The path is shipped: its fallback (the check kernel, then the GEMM) is the switch's.
        if in_gemm:
            os.environ.pop(_v.DISABLE_PATHS_ENV, None)
        else:
            os.environ[_v.DISABLE_PATHS_ENV] = cl.IN_KERNEL_PSUM_CAPABILITIES[family]
        assert cl.checks_in_kernel(family, True) == in_gemm, cl.IN_KERNEL_PSUM_CAPABILITIES[family]
        for api in (api_fp8, api_bf16):
            api._validated_contiguous = _v.ValidatedCalls()  # no kept launch of the other path

    out = {"gpu": torch.cuda.get_device_name(), "n": N, "k": K, "alignment": ALIGNMENT, "records": []}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for (g, per), (_, ms, ends, rows) in zip(PROBLEMS, problem_ms(random.Random(0))):
        if args.only and args.only != f"{g},{per}":
            continue
        x = torch.randn(rows, K, device="cuda", generator=gen).to(torch.bfloat16)
        a, sfa = quant.per_token_cast_to_fp8(x)
        w = torch.randn(g, N, K, device="cuda", generator=gen).to(torch.bfloat16)
        qs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g)]
        b, sfb = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
        del qs
        layout = torch.tensor(ends, dtype=torch.int32, device="cuda")
        d = torch.empty(rows, N, device="cuda", dtype=torch.bfloat16)
        for family in args.families:
            def call():
                if family == "fp8":
                    finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=True)
                else:
                    finegemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, layout, use_psum_layout=True)

            outs = {}
            for in_gemm in (False, True):
                route(family, in_gemm)
                d.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                outs[in_gemm] = d.clone()
            finegemm.check_errors()
            same = bool(torch.equal(outs[False], outs[True]))
            rec = {"family": family, "groups": g, "ms": ms, "m": rows, "bitwise_equal": same}
            print(f"{family} G={g} rows={rows} ms~{per}: bitwise equal {same}")
            del outs
            for rnd in range(args.rounds):
                for in_gemm in ((False, True) if rnd % 2 == 0 else (True, False)):  # the order alternates
                    route(family, in_gemm)
                    name = "in_gemm" if in_gemm else "check_kernel"
                    if args.plain_calls:
                        for _ in range(args.plain_calls):
                            call()
                        torch.cuda.synchronize()
                        print(f"  round {rnd} {name}: {args.plain_calls} calls")
                        continue
                    gpu_us, events = _gpu_us(call, args.reps)
                    host_us, wall_us = loop_us(call, args.calls)
                    rec.setdefault(name, []).append({"round": rnd, "gpu_us": gpu_us,
                                                     "kernels_per_call": events / args.reps,
                                                     "host_us_per_call": host_us, "wall_us_per_call": wall_us})
                    print(f"  round {rnd} {name:12s}: GPU {gpu_us:8.2f} us/call ({events / args.reps:.0f} kernels), "
                          f"host {host_us:6.1f}, wall {wall_us:8.1f} us/call")
            out["records"].append(rec)
            finegemm.check_errors()
        del a, sfa, b, sfb, d, x, w
        torch.cuda.empty_cache()
    os.environ.pop(_v.ENABLE_UNVALIDATED_ENV, None)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
