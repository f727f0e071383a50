"""A dense model's choice with and without its skinny-shape rule, timed on shapes no tuned entry
serves: an out-of-sample check of the rule. --family fp8: the FP8 model's no-multicast rule for
M <= 128 (benchmarks/NOTES.md v0.66); --family bf16: the BF16 model's one 128-row m-block for
64 < M <= 128 (v0.67).

  python3 scripts/probe_model_rule.py --out $OUT/model_rule.json [--family fp8|bf16] [--rounds 3]

Per shape: both configurations (tuned table off), each checked against the exact reference on a
NaN-poisoned output, then timed in alternation (kernel-only, L2 flushed) `rounds` times each; the
JSON keeps every time, the best of each and cuBLAS blockwise's for scale. A shape where the rule
does not change the choice is listed and not timed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Off-table (N, K): Qwen-32B-like attention / MLP, Mixtral-like gate, GPT-like 12288 / 3072.
SHAPES_NK = [(5120, 5120), (25600, 5120), (5120, 25600), (14336, 4096), (12288, 4096), (3072, 12288),
             (2560, 8192)]
SHAPES_M = [1, 8, 32, 64, 100, 128]
BF16_SHAPES_M = [65, 80, 100, 128]
# More off-table (N, K) for the BF16 rule (Llama-2 7B / 13B, Qwen2-7B MLPs), where it changes more choices.
BF16_EXTRA_NK = [(11008, 4096), (4096, 11008), (13824, 5120), (5120, 13824), (18944, 3584), (3584, 18944)]


def describe(cfg) -> str:
    return (f"bm{cfg.block_m} bn{cfg.block_n} s{cfg.num_stages} split{cfg.num_splits} mc{cfg.num_multicast}"
            f"{'A' if cfg.multicast_on_a else ''}{' tma' if cfg.tma_store else ''} kb{cfg.k_batch}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-tests", type=int, default=20)
    p.add_argument("--family", choices=("fp8", "bf16"), default="fp8")
    p.add_argument("--ms", type=int, nargs="+", help="M values instead of the family's default list")
    args = p.parse_args()
    if args.family == "bf16":
        return probe_bf16(args)

    import torch

    from finegemm import reference
    from finegemm.bench._common import kernel_time_us, run_metadata
    from finegemm.bench.dense import _cublas_blockwise, _inputs
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.heuristics import tuned
    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.testing import calc_diff

    os.environ[tuned.DISABLE_TUNED_ENV] = "1"
    rule_max_m = h.MODEL_NO_MULTICAST_MAX_M

    def choice(m, n, k, with_rule):
        h.MODEL_NO_MULTICAST_MAX_M = rule_max_m if with_rule else 0
        h.clear_cache()
        try:
            return h.select_config(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count)
        finally:
            h.MODEL_NO_MULTICAST_MAX_M = rule_max_m
            h.clear_cache()

    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for n, k in SHAPES_NK:
        for m in args.ms or SHAPES_M:
            new, old = choice(m, n, k, True), choice(m, n, k, False)
            rec = {"m": m, "n": n, "k": k, "new": describe(new), "old": describe(old), "changed": new != old}
            if new != old:
                _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
                ref = reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)
                calls, times = {}, {"new": [], "old": []}
                for label, cfg in (("new", new), ("old", old)):
                    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                    call = ops.prepare(a, sfa, b, sfb, d, config=cfg)
                    call()
                    torch.cuda.synchronize()
                    rec[f"calc_diff_{label}"] = calc_diff(d.float(), ref)
                    rec[f"all_written_{label}"] = not bool(torch.isnan(d).any())
                    calls[label] = (call, d)  # d stays alive: a prepared call holds raw pointers
                for _ in range(args.rounds):
                    for label in ("new", "old"):
                        times[label].append(kernel_time_us(calls[label][0], args.num_tests))
                rec["us"] = times
                rec["best_us"] = {lb: min(v) for lb, v in times.items()}
                try:
                    rec["cublas_blockwise_us"] = kernel_time_us(_cublas_blockwise(a, sfa, b, sfb), args.num_tests)
                except Exception as exc:  # cuBLAS blockwise is a reference point only
                    rec["cublas_blockwise_us"] = None
                    rec["cublas_error"] = str(exc)[:200]
                print(f"{m:5}x{n:6}x{k:6}: rule {rec['best_us']['new']:8.2f} us, without {rec['best_us']['old']:8.2f} us"
                      f" ({rec['best_us']['old'] / rec['best_us']['new']:.3f}x), cuBLAS {rec['cublas_blockwise_us']}",
                      flush=True)
            records.append(rec)
    changed = [r for r in records if r["changed"]]
    import statistics
    summary = {"shapes": len(records), "changed": len(changed)}
    if changed:
        summary["geomean_speedup_of_rule"] = statistics.geometric_mean(
            r["best_us"]["old"] / r["best_us"]["new"] for r in changed)
        summary["max_calc_diff"] = max(max(r["calc_diff_new"], r["calc_diff_old"]) for r in changed)
        summary["all_written"] = all(r["all_written_new"] and r["all_written_old"] for r in changed)
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "command": "python3 scripts/probe_model_rule.py " + " ".join(sys.argv[1:]),
           "summary": summary, "records": records}
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def probe_bf16(args) -> int:
    import statistics

    import torch

    import finegemm
    from finegemm.bench._common import kernel_time_us, run_metadata
    from finegemm.heuristics import sm90_bf16_gemm as h
    from finegemm.heuristics import tuned
    from finegemm.ops import sm90_bf16_gemm as ops
    from finegemm.testing import calc_diff

    os.environ[tuned.DISABLE_TUNED_ENV] = "1"
    rule_max_m = h.MODEL_BM128_MAX_M
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def choice(m, n, k, with_rule):
        h.MODEL_BM128_MAX_M = rule_max_m if with_rule else 64
        h.clear_cache()
        try:
            return h.select_config(m, n, k, sms)
        finally:
            h.MODEL_BM128_MAX_M = rule_max_m
            h.clear_cache()

    def describe_bf16(cfg) -> str:
        return f"bm{cfg.block_m} bn{cfg.block_n} s{cfg.num_stages} split{cfg.num_splits}"

    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for n, k in SHAPES_NK + BF16_EXTRA_NK:
        for m in args.ms or BF16_SHAPES_M:
            new, old = choice(m, n, k, True), choice(m, n, k, False)
            rec = {"m": m, "n": n, "k": k, "new": describe_bf16(new), "old": describe_bf16(old), "changed": new != old}
            if new != old:
                a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
                b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
                ref = a.float() @ b.float().t()
                calls, times = {}, {"new": [], "old": []}
                for label, cfg in (("new", new), ("old", old)):
                    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                    call = ops.prepare(a, b, d, layout="nt", config=cfg)
                    call()
                    torch.cuda.synchronize()
                    rec[f"calc_diff_{label}"] = calc_diff(d.float(), ref)
                    rec[f"all_written_{label}"] = not bool(torch.isnan(d).any())
                    calls[label] = (call, d)  # d stays alive: a prepared call holds raw pointers
                for _ in range(args.rounds):
                    for label in ("new", "old"):
                        times[label].append(kernel_time_us(calls[label][0], args.num_tests))
                rec["us"] = times
                rec["best_us"] = {lb: min(v) for lb, v in times.items()}
                rec["torch_us"] = kernel_time_us(lambda: torch.matmul(a, b.t()), args.num_tests)
                print(f"{m:5}x{n:6}x{k:6}: rule {rec['best_us']['new']:8.2f} us, without {rec['best_us']['old']:8.2f} us"
                      f" ({rec['best_us']['old'] / rec['best_us']['new']:.3f}x), torch {rec['torch_us']:.2f}", flush=True)
            records.append(rec)
    changed = [r for r in records if r["changed"]]
    summary = {"family": "bf16", "shapes": len(records), "changed": len(changed)}
    if changed:
        summary["geomean_speedup_of_rule"] = statistics.geometric_mean(
            r["best_us"]["old"] / r["best_us"]["new"] for r in changed)
        summary["max_calc_diff"] = max(max(r["calc_diff_new"], r["calc_diff_old"]) for r in changed)
        summary["all_written"] = all(r["all_written_new"] and r["all_written_old"] for r in changed)
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "command": "python3 scripts/probe_model_rule.py " + " ".join(sys.argv[1:]),
           "summary": summary, "records": records}
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
