"""What programmatic dependent launch (finegemm.set_pdl) saves where GEMMs run back to back (GPU).

For each shape, a CUDA graph of CHAIN consecutive GEMM calls is captured twice, with PDL off and
on; every call reads its own weight (WEIGHTS copies, cycled, more bytes than the L2 holds, as
consecutive layers would) and writes its own output. Reported per call: the graph's replay time
divided by CHAIN (median of replays, both graphs interleaved), and beside it the isolated kernel
time (kernel_time_us: L2 flushed, as the bench) so the gap between kernels shows.

  python scripts/probe_pdl.py [--out FILE] [--chain 16] [--replays 50]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import finegemm  # noqa: E402
from finegemm.bench._common import kernel_time_us, run_metadata  # noqa: E402
from finegemm.testing import capture_graph  # noqa: E402

WEIGHTS = 8
FP8_SHAPES = [(64, 2112, 7168), (64, 7168, 2048), (64, 24576, 1536), (128, 4096, 7168), (128, 32768, 512),
              (128, 7168, 16384), (4096, 7168, 2048)]
BF16_SHAPES = [(64, 2112, 7168), (64, 256, 7168), (128, 4096, 7168)]


def _fp8_calls(m, n, k):
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda") + 0.5)
    ws = [(torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn),
           torch.rand((n + 127) // 128, k // 128, device="cuda") + 0.5) for _ in range(WEIGHTS)]
    ds = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(WEIGHTS)]
    return [lambda b=b, d=d: finegemm.fp8_gemm_nt((a, sfa), b, d) for b, d in zip(ws, ds)]


def _bf16_calls(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    out = torch.float32 if n == 256 else torch.bfloat16  # the router's fp32 logits
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(WEIGHTS)]
    ds = [torch.empty(m, n, device="cuda", dtype=out) for _ in range(WEIGHTS)]
    return [lambda b=b, d=d: finegemm.bf16_gemm_nt(a, b, d) for b, d in zip(ws, ds)]


def _capture(calls, chain, pdl):
    def run_chain():
        for i in range(chain):
            calls[i % len(calls)]()

    finegemm.set_pdl(pdl)
    try:
        return capture_graph(run_chain)
    finally:
        finegemm.set_pdl(False)


def _replay_us(graph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def measure(calls, chain, replays) -> dict:
    for fn in calls:
        fn()  # compile / plan outside the captures
    torch.cuda.synchronize()
    graphs = {"off": _capture(calls, chain, False), "on": _capture(calls, chain, True)}
    times = {name: [] for name in graphs}
    for _ in range(3):
        for g in graphs.values():
            g.replay()
    for _ in range(replays):
        for name, g in graphs.items():  # interleaved: drift hits both alike
            times[name].append(_replay_us(g))
    rec = {f"chain_per_call_us_pdl_{name}": statistics.median(t) / chain for name, t in times.items()}
    rec["isolated_kernel_us"] = kernel_time_us(calls[0], num_tests=30)
    rec["saved_per_call_us"] = rec["chain_per_call_us_pdl_off"] - rec["chain_per_call_us_pdl_on"]
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--chain", type=int, default=16)
    ap.add_argument("--replays", type=int, default=50)
    args = ap.parse_args()
    records = []
    for kind, shapes, make in (("fp8", FP8_SHAPES, _fp8_calls), ("bf16", BF16_SHAPES, _bf16_calls)):
        for m, n, k in shapes:
            rec = {"kind": kind, "m": m, "n": n, "k": k, **measure(make(m, n, k), args.chain, args.replays)}
            records.append(rec)
            print(f"{kind} {m}x{n}x{k}: isolated {rec['isolated_kernel_us']:.2f} us, chain per call "
                  f"{rec['chain_per_call_us_pdl_off']:.2f} (PDL off) / {rec['chain_per_call_us_pdl_on']:.2f} (on): "
                  f"{rec['saved_per_call_us']:+.2f} us", flush=True)
            torch.cuda.empty_cache()
    out = dict(run_metadata(), command=" ".join(["python", "scripts/probe_pdl.py"] + sys.argv[1:]),
               chain=args.chain, weights=WEIGHTS, replays=args.replays, records=records)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
