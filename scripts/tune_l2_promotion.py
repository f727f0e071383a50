"""Choose the operand tensor maps' L2 promotion per shape (benchmarks/NOTES.md v0.40).

GPU machine: every shape's planned configuration (the shipped table's entry) is timed with each
promotion pair (A bytes, B bytes) in VARIANTS, the variants interleaved within one process and
repeated --rounds times (same-run rule, timed as the bench times: kernel-only, 256 MB flush). The
outputs of every variant must be bitwise equal to the default's (the promotion moves no math).
A pair other than the default wins a shape when it is faster than (256, 256) in every round and
its median is at least --min-gain faster.

  python3 scripts/tune_l2_promotion.py --precompile        # CPU machine, into FINEGEMM_CACHE_DIR
  python3 scripts/tune_l2_promotion.py --out $OUT/l2_promotion.json [--kinds fp8 fp8_masked bf16] [--rounds 3]

CPU machine: write the winners into the shipped tables' exact entries for those shapes (a shape
served by a nearby entry, or by the model, is reported and left alone):

  python3 scripts/tune_l2_promotion.py --apply benchmarks/results/<run>.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT = (256, 256)
VARIANTS = [DEFAULT, (128, 256), (256, 128), (128, 128)]
SKINNY_M = (1, 16, 32, 64, 128, 256)


def fp8_shapes() -> list[tuple]:
    from finegemm.bench.dense import DENSE_NK
    return [("fp8", None, m, n, k, False) for m in SKINNY_M for n, k in DENSE_NK]


def fp8_masked_shapes() -> list[tuple]:
    """(kind, groups, expected m, n, k, False): `bench grouped`'s masked records."""
    from finegemm.bench.grouped import GROUPED_NK, MASKED_GM
    return [("fp8_masked", g, m, n, k, False) for g, m in MASKED_GM for n, k in GROUPED_NK]


def bf16_shapes() -> list[tuple]:
    from finegemm.bench.bf16 import DENSE_NK, FP32_NK, LAYOUTS
    shapes = [("bf16", lay, m, n, k, False) for lay in LAYOUTS for m in (64, 128) for n, k in DENSE_NK]
    return shapes + [("bf16", lay, m, n, k, True) for lay in LAYOUTS for m in (64, 128) for n, k in FP32_NK]


def _prepare_variants(kind, layout, m, n, k, out_fp32, sms):
    """(config, {pair: (call, d)}, operands) of one shape, every pair on the same operands. A
    prepared call holds raw pointers only: the caller keeps `operands` alive while it runs.
    fp8_masked: `layout` is the group count, m the expected (and every group's) m; d's rows past
    it are never written (compare d[:, :m])."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(m + n + k)  # operands made as the benches make them
    if kind == "fp8_masked":
        import finegemm
        from finegemm.bench.grouped import _quantized_experts
        from finegemm.heuristics import sm90_fp8_gemm as h
        from finegemm.ops import sm90_fp8_gemm as ops
        g, m_max = layout, -(-m // 128) * 128
        qs = [finegemm.per_token_cast_to_fp8(torch.randn(m_max, k, device="cuda", generator=gen)) for _ in range(g)]
        a = torch.stack([q for q, _ in qs])
        sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.stack([s for _, s in qs]))
        _, b, sfb = _quantized_experts(g, n, k, gen)
        masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
        cfg = h.select_grouped_config(h.GEMM_GROUPED_MASKED, m_max, n, k, g, sms, m, 0)
        out = {}
        for p in VARIANTS:
            d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            c = dataclasses.replace(cfg, l2_promotion=p)
            out[p] = ((lambda d=d, c=c: ops.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, d, masked_m, m, config=c)),
                      d[:, :m])
        return cfg, out, (a, sfa, b, sfb, masked_m)

    if kind == "fp8":
        from finegemm.bench.dense import _inputs
        from finegemm.heuristics import sm90_fp8_gemm as h
        from finegemm.ops import sm90_fp8_gemm as ops
        _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
        cfg = h.select_config(m, n, k, sms)
        out = {}
        for p in VARIANTS:
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            out[p] = (ops.prepare(a, sfa, b, sfb, d, config=dataclasses.replace(cfg, l2_promotion=p)), d)
        return cfg, out, (a, sfa, b, sfb)
    from finegemm.bench.bf16 import _stored
    from finegemm.heuristics import sm90_bf16_gemm as h
    from finegemm.ops import sm90_bf16_gemm as ops
    a = _stored(m, k, gen) if layout[0] == "n" else _stored(k, m, gen)
    b = _stored(n, k, gen) if layout[1] == "t" else _stored(k, n, gen)
    cfg = h.select_config(m, n, k, sms, layout[0] == "t", layout[1] == "n", out_fp32, False)
    out = {}
    for p in VARIANTS:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if out_fp32 else torch.bfloat16)
        out[p] = (ops.prepare(a, b, d, layout=layout, config=dataclasses.replace(cfg, l2_promotion=p)), d)
    return cfg, out, (a, b)


def precompile(sms: int, jobs: int) -> None:
    from finegemm import jit
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import sm90_fp8_gemm as h8
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    src = {}
    for _, _, m, n, k, _ in fp8_shapes():
        c = h8.select_config(m, n, k, sms)
        src[o8._kernel_name(c)] = o8._render_cfg(c)
    for _, g, m, n, k, _ in fp8_masked_shapes():
        c = h8.select_grouped_config(h8.GEMM_GROUPED_MASKED, -(-m // 128) * 128, n, k, g, sms, m, 0)
        src[o8._kernel_name(c)] = o8._render_cfg(c)
    for _, lay, m, n, k, fp32 in bf16_shapes():
        c = hb.select_config(m, n, k, sms, lay[0] == "t", lay[1] == "n", fp32, False)
        src[ob.kernel_name(c.kernel_key())] = ob.render(*c.kernel_key())
    print(f"{len(src)} kernels")
    jit.build_many(src, jobs)


def run(args) -> int:
    import torch

    from finegemm import runtime
    from finegemm.bench._common import kernel_time_us, settle, write_probe_json

    sms = runtime.get_num_sms()
    sets = {"fp8": fp8_shapes, "fp8_masked": fp8_masked_shapes, "bf16": bf16_shapes}
    shapes = [s for kind in ("fp8", "fp8_masked", "bf16") if kind in args.kinds for s in sets[kind]()]
    records = []
    for kind, layout, m, n, k, out_fp32 in shapes:
        cfg, variants, operands = _prepare_variants(kind, layout, m, n, k, out_fp32, sms)
        for call, _ in variants.values():
            call()
        torch.cuda.synchronize()
        ref = variants[DEFAULT][1]
        # per variant: elements unlike the default's output (bitwise) and NaN left from the poison
        diffs = {f"{p[0]}/{p[1]}": [int((d.view(torch.int16 if d.dtype == torch.bfloat16 else torch.int32)
                                         != ref.view(torch.int16 if ref.dtype == torch.bfloat16 else torch.int32))
                                        .sum().item()), int(torch.isnan(d).sum().item())]
                 for p, (_, d) in variants.items()}
        equal = all(v == [0, 0] for v in diffs.values())
        times = {p: [] for p in VARIANTS}
        settle(200)
        for _ in range(args.rounds):
            for p, (call, _) in variants.items():
                times[p].append(kernel_time_us(call, args.num_tests))
        base = times[DEFAULT]
        med = {p: statistics.median(t) for p, t in times.items()}
        best = min(VARIANTS, key=lambda p: med[p])
        wins = (best != DEFAULT and all(t < b for t, b in zip(times[best], base))
                and med[DEFAULT] / med[best] >= args.min_gain)
        chosen = best if wins else DEFAULT
        rec = {"kind": kind, "layout": layout, "m": m, "n": n, "k": k, "out_fp32": out_fp32,
               "config": {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_splits": cfg.num_splits},
               "outputs_equal": bool(equal), "diff_nan": diffs,
               "us": {f"{a}/{b}": [round(x, 3) for x in t] for (a, b), t in times.items()},
               "chosen": list(chosen), "gain": round(med[DEFAULT] / med[chosen], 4)}
        records.append(rec)
        print(json.dumps({k_: rec[k_] for k_ in ("kind", "layout", "m", "n", "k", "chosen", "gain", "outputs_equal")}
                         | ({} if equal else {"diff_nan": diffs})), flush=True)
        del variants, operands
    write_probe_json(args.out, records, rounds=args.rounds, min_gain=args.min_gain,
                     variants=[list(p) for p in VARIANTS])
    return 0 if all(r["outputs_equal"] for r in records) else 1


def apply(path: str, fp8_table: Path, bf16_table: Path) -> int:
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import tuned
    from finegemm.heuristics.sm90_fp8_gemm import MASKED_KIND_PREFIX

    data = json.loads(Path(path).read_text())
    changes = {fp8_table: [], bf16_table: []}
    for r in data["records"]:
        if not r["outputs_equal"]:
            raise SystemExit(f"{path}: outputs differ for {r}: not applying")
        bf16 = r["kind"] == "bf16"
        table = bf16_table if bf16 else fp8_table
        kind = (hb.tuned_kind(r["layout"][0] == "t", r["layout"][1] == "n") if bf16
                else f"{MASKED_KIND_PREFIX}{r['layout']}" if r["kind"] == "fp8_masked" else "fp8_1d2d")
        entries = json.loads(table.read_text())["entries"]
        want = (kind, r["m"], r["n"], r["k"], r["out_fp32"], False)
        exact = [e for e in entries
                 if (e["kind"], e["m"], e["n"], e["k"], e.get("out_fp32", False), e.get("has_c", False)) == want]
        chosen = [int(x) for x in r["chosen"]]
        current = exact[0]["config"].get("l2_promotion", list(DEFAULT)) if exact else list(DEFAULT)
        if chosen == current:
            continue
        if not exact:
            print(f"skipped (no exact entry): {kind} {r['m']}x{r['n']}x{r['k']} -> {chosen}")
            continue
        e = json.loads(json.dumps(exact[0]))
        if chosen == list(DEFAULT):
            e["config"].pop("l2_promotion", None)
        else:
            e["config"]["l2_promotion"] = chosen
        e["l2_promotion_run"] = {"file": Path(path).name, "gain": r["gain"]}
        changes[table].append(e)
        print(f"{kind} {r['m']}x{r['n']}x{r['k']}: l2_promotion {current} -> {chosen} ({r['gain']:.3f}x)")
    for table, entries in changes.items():
        if entries:
            tuned.merge_entries(table, entries)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--apply", metavar="RUN_JSON")
    ap.add_argument("--fp8-table", type=Path, help="--apply: the FP8 table (default: the shipped one)")
    ap.add_argument("--bf16-table", type=Path, help="--apply: the BF16 table (default: the shipped one)")
    ap.add_argument("--precompile", action="store_true")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--kinds", nargs="*", default=["fp8", "bf16"], choices=["fp8", "fp8_masked", "bf16"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-tests", type=int, default=20)
    ap.add_argument("--min-gain", type=float, default=1.015)
    args = ap.parse_args()
    if args.apply:
        from finegemm.heuristics import tuned
        return apply(args.apply, args.fp8_table or tuned.SHIPPED_TABLE, args.bf16_table or tuned.SHIPPED_BF16_TABLE)
    if args.precompile:
        precompile(args.sms, args.jobs)
        return 0
    if not args.out:
        ap.error("--out (GPU run) or --apply (CPU) is required")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
