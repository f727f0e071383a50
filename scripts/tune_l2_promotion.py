"""Choose the operand tensor maps' L2 promotion per shape (benchmarks/NOTES.md v0.40).

GPU machine: every shape's planned configuration (the shipped table's entry) is timed with each
promotion pair (A bytes, B bytes) in VARIANTS, the variants interleaved within one process and
repeated --rounds times (same-run rule, timed as the bench times: kernel-only, 256 MB flush). The
outputs of every variant must be bitwise equal to the default's (the promotion moves no math).
A pair other than the default wins a shape when it is faster than (256, 256) in every round and
its median is at least --min-gain faster.

  python3 scripts/tune_l2_promotion.py --precompile        # CPU machine, into FINEGEMM_CACHE_DIR
  python3 scripts/tune_l2_promotion.py --out $OUT/l2_promotion.json [--kinds fp8 fp8_masked bf16 bf16_masked
                                       bf16_contiguous] [--rounds 3]

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


def bf16_masked_shapes() -> list[tuple]:
    """(kind, groups, expected m, n, k, False): `bench bf16`'s masked records."""
    from finegemm.bench.grouped import GROUPED_NK, MASKED_GM
    return [("bf16_masked", g, m, n, k, False) for g, m in MASKED_GM for n, k in GROUPED_NK]


def bf16_contiguous_shapes() -> list[tuple]:
    """(kind, (groups, rows per group), stacked rows (padded), n, k, False): `bench bf16`'s
    contiguous records, with its segment sizes."""
    import finegemm
    from finegemm.bench.bf16 import grouped_plan
    align = finegemm.get_mk_alignment_for_contiguous_layout()
    return [("bf16_contiguous", (r["groups"], tuple(r["ms"])), sum(finegemm.align(x, align) for x in r["ms"]),
             r["n"], r["k"], False) for r in grouped_plan(("grouped_contiguous",))]


def bf16_shapes() -> list[tuple]:
    from finegemm.bench.bf16 import DENSE_NK, FP32_NK, LAYOUTS
    shapes = [("bf16", lay, m, n, k, False) for lay in LAYOUTS for m in (64, 128) for n, k in DENSE_NK]
    return shapes + [("bf16", lay, m, n, k, True) for lay in LAYOUTS for m in (64, 128) for n, k in FP32_NK]


SHAPE_SETS = {"fp8": fp8_shapes, "fp8_masked": fp8_masked_shapes, "bf16": bf16_shapes,
              "bf16_masked": bf16_masked_shapes, "bf16_contiguous": bf16_contiguous_shapes}
KINDS = tuple(SHAPE_SETS)


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

    if kind in ("bf16_masked", "bf16_contiguous"):
        return _prepare_bf16_grouped(kind, layout, m, n, k, sms, gen)

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


def _bf16_grouped_config(kind, layout, m, n, k, sms):
    """The planned configuration of a bf16_masked / bf16_contiguous shape (as the ops plan it)."""
    import finegemm
    from finegemm.heuristics import sm90_bf16_gemm as h
    if kind == "bf16_masked":
        return h.select_grouped_config(h.GEMM_GROUPED_MASKED, finegemm.align(m, 128), n, k, layout, sms, m, 0)
    return h.select_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, m, n, k, layout[0], sms, 0,
                                   finegemm.get_mk_alignment_for_contiguous_layout())


def _prepare_bf16_grouped(kind, layout, m, n, k, sms, gen):
    """_prepare_variants of the BF16 m-grouped kinds: masked (`layout` = G, m = every group's m;
    compare d[:, :m]) and contiguous (`layout` = (G, rows per group), m = stacked padded rows;
    padding rows are written as zeros, so all of d is compared)."""
    import torch

    import finegemm
    from finegemm.ops import sm90_bf16_gemm as ops
    cfg = _bf16_grouped_config(kind, layout, m, n, k, sms)
    out = {}
    if kind == "bf16_masked":
        g, m_max = layout, finegemm.align(m, 128)
        a = torch.randn(g, m_max, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
        for p in VARIANTS:
            d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            c = dataclasses.replace(cfg, l2_promotion=p)
            out[p] = ((lambda d=d, c=c: ops.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m, config=c)), d[:, :m])
        return cfg, out, (a, b, masked_m)
    g, ms = layout
    from finegemm.bench.grouped import contiguous_group_ids
    grouped = torch.tensor(contiguous_group_ids(ms, finegemm.get_mk_alignment_for_contiguous_layout()),
                           dtype=torch.int32, device="cuda")
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    for p in VARIANTS:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        c = dataclasses.replace(cfg, l2_promotion=p)
        out[p] = ((lambda d=d, c=c: ops.m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped, config=c)), d)
    return cfg, out, (a, b, grouped)


def precompile(sms: int, jobs: int, kinds) -> None:
    from finegemm import jit
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import sm90_fp8_gemm as h8
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    src = {}
    for kind, layout, m, n, k, fp32 in [s for kind in KINDS if kind in kinds for s in SHAPE_SETS[kind]()]:
        if kind == "fp8":
            c = h8.select_config(m, n, k, sms)
            src[o8._kernel_name(c)] = o8._render_cfg(c)
        elif kind == "fp8_masked":
            c = h8.select_grouped_config(h8.GEMM_GROUPED_MASKED, -(-m // 128) * 128, n, k, layout, sms, m, 0)
            src[o8._kernel_name(c)] = o8._render_cfg(c)
        elif kind == "bf16":
            c = hb.select_config(m, n, k, sms, layout[0] == "t", layout[1] == "n", fp32, False)
            src[ob.kernel_name(c.kernel_key())] = ob.render(*c.kernel_key())
        else:
            c = _bf16_grouped_config(kind, layout, m, n, k, sms)
            src[ob.grouped_kernel_name(c.grouped_kernel_key())] = ob.render_grouped(*c.grouped_kernel_key())
    print(f"{len(src)} kernels")
    jit.build_many(src, jobs)


def run(args) -> int:
    import torch

    from finegemm import runtime
    from finegemm.bench._common import kernel_time_us, settle, write_probe_json

    sms = runtime.get_num_sms()
    shapes = [s for kind in KINDS if kind in args.kinds for s in SHAPE_SETS[kind]()]
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
        rec = {"kind": kind, "layout": layout[0] if kind == "bf16_contiguous" else layout, "m": m, "n": n, "k": k,
               "out_fp32": out_fp32,
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


def _table_kind(r: dict) -> str:
    """The tuned-table kind of a run record (m-grouped records: `layout` is the group count)."""
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import sm90_fp8_gemm as h8
    kind = r["kind"]
    if kind == "bf16":
        return hb.tuned_kind(r["layout"][0] == "t", r["layout"][1] == "n")
    prefix = {"fp8_masked": h8.MASKED_KIND_PREFIX, "bf16_masked": hb.MASKED_KIND_PREFIX,
              "bf16_contiguous": hb.CONTIGUOUS_KIND_PREFIX}.get(kind)
    return "fp8_1d2d" if prefix is None else f"{prefix}{r['layout']}"


def apply(path: str, fp8_table: Path, bf16_table: Path) -> int:
    from finegemm.heuristics import tuned

    data = json.loads(Path(path).read_text())
    changes = {fp8_table: [], bf16_table: []}
    for r in data["records"]:
        if not r["outputs_equal"]:
            raise SystemExit(f"{path}: outputs differ for {r}: not applying")
        table = bf16_table if r["kind"].startswith("bf16") else fp8_table
        kind = _table_kind(r)
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
    ap.add_argument("--kinds", nargs="*", default=["fp8", "bf16"], choices=KINDS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-tests", type=int, default=20)
    ap.add_argument("--min-gain", type=float, default=1.015)
    args = ap.parse_args()
    if args.apply:
        from finegemm.heuristics import tuned
        return apply(args.apply, args.fp8_table or tuned.SHIPPED_TABLE, args.bf16_table or tuned.SHIPPED_BF16_TABLE)
    if args.precompile:
        precompile(args.sms, args.jobs, args.kinds)
        return 0
    if not args.out:
        ap.error("--out (GPU run) or --apply (CPU) is required")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
