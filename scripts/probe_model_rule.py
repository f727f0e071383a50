"""A dense model's choice with and without its skinny-shape rule, timed on shapes no tuned entry
serves: an out-of-sample check of the rule. --family fp8: the FP8 model's no-multicast rule for
M <= 128 (benchmarks/NOTES.md v0.66); --family bf16: the BF16 model's one 128-row m-block for
112 <= M <= 128 (v0.67; --bf16-min-m tries another lower bound).

  python3 scripts/probe_model_rule.py --out $OUT/model_rule.json [--family fp8|bf16] [--rounds 3]

Per shape: both configurations (tuned table off), each checked against the exact reference on a
NaN-poisoned output, then timed in alternation (kernel-only, L2 flushed) `rounds` times each; the
JSON keeps every time, the best of each and the peer's (cuBLAS blockwise / torch.matmul) for scale. A shape where the rule
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
BF16_SHAPES_M = [100, 112, 120, 128]  # the rule's range and one M below it
# More off-table (N, K) for the BF16 rule (Llama-2 7B / 13B, Qwen2-7B MLPs), where it changes more choices.
BF16_EXTRA_NK = [(11008, 4096), (4096, 11008), (13824, 5120), (5120, 13824), (18944, 3584), (3584, 18944)]


def describe(cfg) -> str:
    return (f"bm{cfg.block_m} bn{cfg.block_n} s{cfg.num_stages} split{cfg.num_splits}"
            f" mc{getattr(cfg, 'num_multicast', 1)}{'A' if getattr(cfg, 'multicast_on_a', False) else ''}"
            f"{' tma' if cfg.tma_store else ''} kb{getattr(cfg, 'k_batch', 1)}")


def compare(rec: dict, prepare, configs: dict, ref, m: int, n: int, args) -> None:
    """Each configuration (label -> config) checked against ref on a NaN-poisoned bf16 output,
    then all timed in alternation `args.rounds` times; fills rec."""
    import torch

    from finegemm.bench._common import kernel_time_us
    from finegemm.testing import calc_diff

    calls = {}
    for label, cfg in configs.items():
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        call = prepare(d, cfg)
        call()
        torch.cuda.synchronize()
        rec[f"calc_diff_{label}"] = calc_diff(d.float(), ref)
        rec[f"all_written_{label}"] = not bool(torch.isnan(d).any())
        calls[label] = (call, d)  # d stays alive: a prepared call holds raw pointers
    times = {label: [] for label in configs}
    for _ in range(args.rounds):
        for label, (call, _) in calls.items():
            times[label].append(kernel_time_us(call, args.num_tests))
    rec["us"] = times
    rec["best_us"] = {lb: min(v) for lb, v in times.items()}


def finish(records: list, args, family: str, peer: str) -> int:
    import statistics

    from finegemm.bench._common import run_metadata

    changed = [r for r in records if r["changed"]]
    summary = {"family": family, "shapes": len(records), "changed": len(changed)}
    if changed:
        summary["geomean_speedup_of_rule"] = statistics.geometric_mean(
            r["best_us"]["old"] / r["best_us"]["new"] for r in changed)
        summary["max_calc_diff"] = max(max(r["calc_diff_new"], r["calc_diff_old"]) for r in changed)
        summary["all_written"] = all(r["all_written_new"] and r["all_written_old"] for r in changed)
    for r in changed:
        print(f"{r['m']:5}x{r['n']:6}x{r['k']:6}: rule {r['best_us']['new']:8.2f} us, without "
              f"{r['best_us']['old']:8.2f} us ({r['best_us']['old'] / r['best_us']['new']:.3f}x), {peer} {r.get(peer)}")
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "command": "python3 scripts/probe_model_rule.py " + " ".join(sys.argv[1:]),
           "summary": summary, "records": records}
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def with_rule_toggled(h, attr: str, off_value: int, sms: int | None = None):
    """choice(m, n, k, with_rule) -> the model's configuration with `h.<attr>` as shipped or at
    off_value (the rule off), the table off and the plan cache cleared around it."""
    from finegemm.heuristics import tuned

    os.environ[tuned.DISABLE_TUNED_ENV] = "1"
    shipped = getattr(h, attr)
    if sms is None:
        import torch
        sms = torch.cuda.get_device_properties(0).multi_processor_count

    def choice(m, n, k, with_rule):
        setattr(h, attr, shipped if with_rule else off_value)
        h.clear_cache()
        try:
            return h.select_config(m, n, k, sms)
        finally:
            setattr(h, attr, shipped)
            h.clear_cache()
    return choice


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-tests", type=int, default=20)
    p.add_argument("--family", choices=("fp8", "bf16"), default="fp8")
    p.add_argument("--ms", type=int, nargs="+", help="M values instead of the family's default list")
    p.add_argument("--bf16-min-m", type=int,
                   help="try the BF16 rule from this M instead of the shipped MODEL_BM128_MIN_M")
    p.add_argument("--precompile", action="store_true",
                   help="(no GPU) build both choices' kernels into FINEGEMM_CACHE_DIR for 132 SMs")
    args = p.parse_args()
    if args.bf16_min_m is not None:
        from finegemm.heuristics import sm90_bf16_gemm as hb
        hb.MODEL_BM128_MIN_M = args.bf16_min_m
    if args.precompile:
        return precompile(args)
    return probe_bf16(args) if args.family == "bf16" else probe_fp8(args)


def precompile(args) -> int:
    from finegemm import jit
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import sm90_fp8_gemm as h8
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    if args.family == "bf16":
        choice = with_rule_toggled(hb, "MODEL_BM128_MAX_M", 64, sms=132)
        shapes = [(m, n, k) for n, k in SHAPES_NK + BF16_EXTRA_NK for m in args.ms or BF16_SHAPES_M]
        name, render = (lambda c: ob.kernel_name(c.kernel_key())), (lambda c: ob.render(*c.kernel_key()))
    else:
        choice = with_rule_toggled(h8, "MODEL_NO_MULTICAST_MAX_M", 0, sms=132)
        shapes = [(m, n, k) for n, k in SHAPES_NK for m in args.ms or SHAPES_M]
        name, render = o8._kernel_name, o8._render_cfg
    src = {}
    for m, n, k in shapes:
        for with_rule in (True, False):
            c = choice(m, n, k, with_rule)
            src[name(c)] = render(c)
    print(f"{len(src)} kernels")
    jit.build_many(src, 2)
    return 0


def probe_fp8(args) -> int:
    import torch

    from finegemm import reference
    from finegemm.bench._common import kernel_time_us
    from finegemm.bench.dense import _cublas_blockwise, _inputs
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    choice = with_rule_toggled(h, "MODEL_NO_MULTICAST_MAX_M", 0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for n, k in SHAPES_NK:
        for m in args.ms or SHAPES_M:
            new, old = choice(m, n, k, True), choice(m, n, k, False)
            rec = {"m": m, "n": n, "k": k, "new": describe(new), "old": describe(old), "changed": new != old}
            if new != old:
                _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
                ref = reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)
                compare(rec, lambda d, cfg: ops.prepare(a, sfa, b, sfb, d, config=cfg), {"new": new, "old": old},
                        ref, m, n, args)
                try:
                    rec["cublas_blockwise_us"] = kernel_time_us(_cublas_blockwise(a, sfa, b, sfb), args.num_tests)
                except Exception as exc:  # cuBLAS blockwise is a reference point only
                    rec["cublas_blockwise_us"] = None
                    rec["cublas_error"] = str(exc)[:200]
            records.append(rec)
    return finish(records, args, "fp8", "cublas_blockwise_us")


def probe_bf16(args) -> int:
    import torch

    from finegemm.bench._common import kernel_time_us
    from finegemm.heuristics import sm90_bf16_gemm as h
    from finegemm.ops import sm90_bf16_gemm as ops

    choice = with_rule_toggled(h, "MODEL_BM128_MAX_M", 64)  # MAX below MIN: the rule never applies
    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for n, k in SHAPES_NK + BF16_EXTRA_NK:
        for m in args.ms or BF16_SHAPES_M:
            new, old = choice(m, n, k, True), choice(m, n, k, False)
            rec = {"m": m, "n": n, "k": k, "new": describe(new), "old": describe(old), "changed": new != old}
            if new != old:
                a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
                b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
                compare(rec, lambda d, cfg: ops.prepare(a, b, d, layout="nt", config=cfg), {"new": new, "old": old},
                        a.float() @ b.float().t(), m, n, args)
                rec["torch_us"] = kernel_time_us(lambda: torch.matmul(a, b.t()), args.num_tests)
            records.append(rec)
    return finish(records, args, "bf16", "torch_us")


if __name__ == "__main__":
    sys.exit(main())
