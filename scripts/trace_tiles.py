"""Per-tile timeline of the dense FP8 kernel (clock64 stamps; developer instrumentation).

Builds the kernel with -DFINEGEMM_TRACE_TILES (ptx/trace.cuh), runs one launch with a trace
buffer after the split-K partial slabs in the workspace (all of it without split-K), and
summarises, in SM cycles, where a consumer warpgroup's time goes per tile (split-K: per unit; its
"epilogue" is the partial store, and for the last split of a tile also the reduction):
  head->full   tile head to its first full stage (waiting for data / the scheduler)
  mainloop     first full stage to the last promotion
  epilogue     last promotion to the end of the epilogue
  gap          end of the epilogue to the next tile's head (loop overhead)
plus the per-k-block time against the tensor core's rate (8192 FP8 flops per SM-cycle), the
producer's lead (how early its first load of a tile is issued before the consumers reach it), and
the skew between the two consumer warpgroups. Cases are those of scripts/probe_variants.py
("M,N,K:auto" or "M,N,K:bm,bn,stages,mc,mc_on_a,tma[,hp[,kb]]").
A split cluster (one tile per CTA, the splits reduced through distributed shared memory) also
reports its tail: partial_write (last promotion to the partial in shared memory), barrier_wait
(the cluster barrier: the wait for the later split), gather (the owned rows summed from the peers),
store (issuing D), exit_wait (to the consumer's exit, after the last cluster barrier), and the
kernel's entry to the first tile head and to the consumer's exit.

  FINEGEMM_CACHE_DIR=.fgcache python3 scripts/trace_tiles.py --precompile CASES   # CPU machine
  python3 scripts/trace_tiles.py CASES --out $OUT/trace.json                        # GPU machine
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from pathlib import Path

os.environ["FINEGEMM_EXTRA_NVCC_FLAGS"] = (os.environ.get("FINEGEMM_EXTRA_NVCC_FLAGS", "") +
                                           " -DFINEGEMM_TRACE_TILES").strip()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_variants import _config, _parse_case, set_max_stages  # noqa: E402

TILES, EVENTS, ROLES = 64, 8, 3  # ptx/trace.cuh
FLOPS_PER_SM_CYCLE = 8192


def _med(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def summarise(tr, cfg, m, n, k) -> dict:
    """tr: int64 [ctas, ROLES, TILES, EVENTS] (0 = not written)."""
    per = {"head_to_full": [], "mainloop": [], "epilogue": [], "gap": [], "wg_skew_full": [],
           "producer_lead": [], "kernel_span": [], "partial_write": [], "barrier_wait": [], "gather": [],
           "store": [], "exit_wait": [], "entry_to_head": [], "entry_to_exit": []}
    num_kb_tile = (k + 127) // 128 / cfg.num_splits  # per work unit (split-K: the mean of the splits)
    for cta in range(tr.shape[0]):
        c = tr[cta]
        starts = [int(c[r, 0, 0]) for r in range(ROLES) if c[r, 0, 0] > 0]
        if not starts:
            continue
        ends = [int(c[r, t, 3]) for r in range(2) for t in range(TILES) if c[r, t, 3] > 0]
        if ends:
            per["kernel_span"].append(max(ends) - min(starts))
        entry = int(c[2, 0, 3])  # the kernel's entry (ptx/trace.cuh)
        if entry > 0 and c[0, 0, 0] > 0:
            per["entry_to_head"].append(int(c[0, 0, 0]) - entry)
            if c[0, 0, 7] > 0:
                per["entry_to_exit"].append(int(c[0, 0, 7]) - entry)
        for wg in range(2):
            for t in range(TILES):
                e = c[wg, t]
                if e[0] == 0 or e[1] == 0 or e[2] == 0 or e[3] == 0:
                    continue
                per["head_to_full"].append(int(e[1] - e[0]))
                per["mainloop"].append(int(e[2] - e[1]))
                per["epilogue"].append(int(e[3] - e[2]))
                if e[4] > 0 and e[5] > 0:  # split cluster tail (ptx/trace.cuh events 4-7)
                    per["partial_write"].append(int(e[4] - e[2]))
                    per["barrier_wait"].append(int(e[5] - e[4]))
                    if e[6] > 0:
                        per["gather"].append(int(e[6] - e[5]))
                        per["store"].append(int(e[3] - e[6]))
                    if t == 0 and e[7] > 0:
                        per["exit_wait"].append(int(e[7] - e[3]))
                if t + 1 < TILES and c[wg, t + 1, 0] > 0:
                    per["gap"].append(int(c[wg, t + 1, 0] - e[3]))
                if wg == 0 and c[1, t, 1] > 0:
                    per["wg_skew_full"].append(abs(int(c[1, t, 1] - e[1])))
                if wg == 0 and c[2, t, 1] > 0:
                    per["producer_lead"].append(int(e[1] - c[2, t, 1]))
    bm, bn = cfg.block_m, cfg.block_n
    ideal_kb = 2 * bm * bn * 128 / FLOPS_PER_SM_CYCLE
    ml = _med(per["mainloop"])
    tile_cycles = ml + _med(per["head_to_full"]) + _med(per["epilogue"]) + _med(per["gap"])
    return {
        "median_cycles": {key: _med(v) for key, v in per.items()},
        "p90_cycles": {key: (float(sorted(v)[int(0.9 * (len(v) - 1))]) if v else float("nan"))
                       for key, v in per.items()},
        "tiles_traced": len(per["mainloop"]),
        "k_blocks_per_tile": num_kb_tile,
        "ideal_cycles_per_k_block": ideal_kb,
        "mainloop_cycles_per_k_block": ml / num_kb_tile,
        "mainloop_efficiency": ideal_kb * num_kb_tile / ml if ml else float("nan"),
        "tile_efficiency": ideal_kb * num_kb_tile / tile_cycles if tile_cycles else float("nan"),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--max-stages", type=int, help="lift the heuristic's stage cap (<= 16)")
    ap.add_argument("--flush-l2", action="store_true",
                    help="flush L2 (256 MB memset) before the traced launch, as the benchmarks time")
    ap.add_argument("--out")
    args = ap.parse_args()
    set_max_stages(args.max_stages)
    from finegemm import jit
    from finegemm.ops import sm90_fp8_gemm as ops
    if args.precompile:
        srcs = {}
        for c in args.cases:
            m, n, k, spec = _parse_case(c)
            cfg = _config(m, n, k, spec, args.sms)
            srcs[ops._kernel_name(cfg)] = ops._render_cfg(cfg)
        jit.build_many(srcs, 2)
        return 0

    import torch

    from finegemm import runtime
    from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8
    sms = runtime.get_num_sms()
    results = []
    for c in args.cases:
        m, n, k, spec = _parse_case(c)
        cfg = _config(m, n, k, spec, sms)
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        call = ops.prepare(a, sfa, b, sfb, d, config=cfg)
        # Every launch of the traced kernel goes through the trace buffer: a plain call() passes no
        # workspace to a split cluster (its partials meet in shared memory), and the trace build
        # then stamped past a null pointer (an illegal address on the H100, NOTES v1.11).
        handle = call._make_handle()
        assert handle, "no prepared launch"
        grid = cfg.grid
        # Split-K: the kernel's partial slabs come first in the workspace, the trace after them
        # (impls/sm90_fp8_gemm_1d2d.cuh); the per-tile counters reset themselves.
        slab_words = cfg.workspace_floats // 2  # int64 words (the float count is even)
        buf = torch.zeros(slab_words + grid * ROLES * TILES * EVENTS + 1024, device="cuda", dtype=torch.int64)
        trace = buf[slab_words:]
        counters = torch.zeros(cfg.num_counters + 64, device="cuda", dtype=torch.int32)
        stream = torch.cuda.current_stream().cuda_stream
        launch = call._ns[call._names[2]]
        flush = torch.empty(256 << 20 >> 2, dtype=torch.int32, device="cuda") if args.flush_l2 else None
        for _ in range(4):  # warm-up launches, then the last launch's stamps are kept
            trace.zero_()
            if flush is not None:
                flush.zero_()
            rc = launch(handle, buf.data_ptr(), counters.data_ptr() if cfg.split_k else None, stream)
            assert rc == 0, rc
        torch.cuda.synchronize()
        tr = trace[: grid * ROLES * TILES * EVENTS].view(grid, ROLES, TILES, EVENTS).cpu().numpy()
        rec = {"case": c, "config": ops._kernel_name(cfg), "m": m, "n": n, "k": k, "flush_l2": args.flush_l2,
               **summarise(tr, cfg, m, n, k)}
        results.append(rec)
        med = rec["median_cycles"]
        print(f"{c} {rec['config']}: per tile head->full {med['head_to_full']:.0f}, mainloop {med['mainloop']:.0f} "
              f"({rec['mainloop_cycles_per_k_block']:.0f}/kb vs ideal {rec['ideal_cycles_per_k_block']:.0f}), "
              f"epilogue {med['epilogue']:.0f}, gap {med['gap']:.0f}; producer lead {med['producer_lead']:.0f}, "
              f"WG skew {med['wg_skew_full']:.0f}; mainloop eff {rec['mainloop_efficiency']:.3f}, "
              f"tile eff {rec['tile_efficiency']:.3f}; span {med['kernel_span']:.0f}", flush=True)
        if not math.isnan(med["barrier_wait"]):
            print(f"  split tail: partial write {med['partial_write']:.0f}, barrier wait {med['barrier_wait']:.0f} "
                  f"(p90 {rec['p90_cycles']['barrier_wait']:.0f}), gather {med['gather']:.0f}, store "
                  f"{med['store']:.0f}, exit wait {med['exit_wait']:.0f}; entry to head "
                  f"{med['entry_to_head']:.0f}, entry to exit {med['entry_to_exit']:.0f}", flush=True)
    if args.out:
        from finegemm.bench._common import write_probe_json
        write_probe_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
