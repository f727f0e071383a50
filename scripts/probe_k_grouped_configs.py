"""Time forced configurations of the one-launch k-grouped FP8 GEMM on the bench's problems (GPU).

For each `bench grouped` k-grouped record (same seeded ks), every candidate of candidates() runs
with c = d as the bench does, is checked bitwise against the heuristic's choice (the k-blocks are
promoted in the same order whatever the tile, so the results must be identical), and is timed
like the anchors (kernel time, L2 flushed). Prints TFLOPS per candidate, best first.
Usage: python scripts/probe_k_grouped_configs.py [--out FILE]
       (--list: the configs; --precompile: build them into FINEGEMM_CACHE_DIR; neither needs a GPU)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from finegemm.bench.grouped import k_grouped_inputs, k_grouped_problems  # noqa: E402
from finegemm.heuristics.sm90_fp8_gemm import (  # noqa: E402
    k_grouped_plan_k,
    make_k_grouped_config,
    max_stages,
    select_k_grouped_config,
)

BLOCK_NS = (128, 144, 160, 176, 192, 208)
MULTICAST = ((1, False), (2, True), (2, False))


def candidates(m, n, ks, num_sms=132, has_c=True):
    active, k_plan = k_grouped_plan_k(ks)
    out = []
    for bn in BLOCK_NS:
        for mc, mc_a in MULTICAST:
            try:
                out.append(make_k_grouped_config(m, n, k_plan, len(ks), active, num_sms, has_c, 128, bn,
                                                 max_stages(128, bn, False, True), mc, mc_a))
            except ValueError:
                pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--num-tests", type=int, default=10)
    args = ap.parse_args()
    problems = k_grouped_problems()
    if args.precompile:
        from finegemm import jit
        from finegemm.ops import sm90_fp8_gemm as ops

        cfgs = {ops._kernel_name(c): c for g, m, n, ks, _ in problems for c in candidates(m, n, ks)}
        jit.build_many({name: ops._render_cfg(c) for name, c in cfgs.items()}, 2)
        return 0
    if args.list:
        for g, m, n, ks, _ in problems:
            print(g, m, n, [(c.block_n, c.num_stages, c.num_multicast, c.multicast_on_a) for c in candidates(m, n, ks)])
        return 0
    from finegemm.bench._common import kernel_time_us, run_metadata
    from finegemm.ops import sm90_fp8_k_grouped as kg

    records = []
    gen = torch.Generator(device="cuda")
    for g, m, n, ks, expected_k in problems:
        gen.manual_seed(0)
        a, sfa, b, sfb, _, _ = k_grouped_inputs(m, n, ks, gen)
        c0 = torch.randn(g, m, n, device="cuda", generator=gen)
        ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
        d = c0.clone()
        kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c=d)
        want = d.clone()
        default = select_k_grouped_config(m, n, ks, 132, True)
        flops = 2.0 * m * n * sum(ks)
        rows = []
        # The heuristic's choice is timed first and again last: the two must agree, or the order
        # of the sweep (clocks, power) moved the times.
        for pos, cfg in enumerate([default] + candidates(m, n, ks) + [default]):
            row = {"block_n": cfg.block_n, "num_stages": cfg.num_stages, "num_multicast": cfg.num_multicast,
                   "multicast_on_a": cfg.multicast_on_a, "position": pos,
                   "default": (cfg.block_n, cfg.num_stages, cfg.num_multicast, cfg.multicast_on_a) ==
                              (default.block_n, default.num_stages, default.num_multicast, default.multicast_on_a)}
            try:
                d.copy_(c0)
                kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c=d, config=cfg)
                row["bitwise_equal"] = bool(torch.equal(d, want))

                def call(cfg=cfg):
                    kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c=d, config=cfg)
                row["us"] = kernel_time_us(call, args.num_tests)
                row["tflops"] = flops / row["us"] / 1e6
            except Exception as exc:  # one broken candidate must not hide the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
        rows.sort(key=lambda r: r.get("us", 1e18))
        records.append({"groups": g, "m": m, "n": n, "ks": ks, "expected_k": expected_k, "candidates": rows})
        print(f"G={g} M={m} N={n} K~{expected_k}:", flush=True)
        for r in rows[:6] + [r for r in rows[6:] if r["default"]]:
            print(f"   #{r['position']} bn{r['block_n']} s{r['num_stages']} mc{r['num_multicast']}"
                  f"{'A' if r['multicast_on_a'] else 'B'}"
                  f"{' (default)' if r['default'] else ''}: {r.get('tflops', 0):.0f} TFLOPS "
                  f"{r.get('us', 0):.1f} us bitwise={r.get('bitwise_equal')} {r.get('error', '')}", flush=True)
    del ks_t
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(run_metadata(), command=" ".join(["python", "scripts/probe_k_grouped_configs.py"] +
                                                             sys.argv[1:]), records=records), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
