"""`python -m finegemm tune dense`: time the plausible configurations of each shape, keep the fastest.

For every shape: the candidates of heuristics.candidate_configs (the model's best, the best of
each family it ranks lower, half-promote twins), each checked against the exact reference on
fresh data (calc_diff <= 1e-5, output poisoned with NaN and fully written, a repeat bitwise
identical) before it is timed like the benchmarks (kernel-only, L2 flushed). A candidate that fails
the check is reported and never enters the table. The winner goes into a tuned table
(heuristics/tuned.py) that select_config consults; --out keeps every candidate's time.

  python -m finegemm tune dense                          # the 18 anchor shapes
  python -m finegemm tune dense --shapes 64,2112,7168 --table my_tuned.json
  FINEGEMM_TUNED_FILE=my_tuned.json python my_server.py  # use it
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import pathlib
import sys
import time

import torch

from finegemm.heuristics.sm90_fp8_gemm import FP8_BLOCK_MS, unique_launches

from . import TUNE_FAMILIES
from ._common import kernel_time_us, run_metadata


def _parse_shape(text: str) -> tuple[int, ...]:
    """M,N,K (dense, wgrad) or G,M,N,K (masked)."""
    try:
        dims = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be M,N,K or G,M,N,K (integers), got {text!r}")
    if len(dims) not in (3, 4) or min(dims) <= 0 or dims[-1] % 16:
        raise argparse.ArgumentTypeError(f"shape needs 3 or 4 positive dims and K % 16 == 0, got {text!r}")
    return dims


def wgrad_default_shapes() -> list[tuple[int, int, int]]:
    """The recipe (1, 1, 128) launches of `bench grouped`: its wgrad shapes and the k-grouped
    problems at their expected K (per-group K find these entries by nearness)."""
    from .grouped import k_grouped_problems, wgrad_shapes
    shapes = [(m, n, k) for (_s, m, n, k) in wgrad_shapes()]
    shapes += [(m, n, ek) for (_g, m, n, _ks, ek) in k_grouped_problems()]
    return list(dict.fromkeys(shapes))


def default_shapes(curve: bool = False) -> list[tuple[int, int, int]]:
    """The 18 anchor shapes of `bench dense` (with curve: also its M curve on the same N, K)."""
    from .dense import CURVE_M, DENSE_M, DENSE_NK
    return [(m, n, k) for m in DENSE_M + (CURVE_M if curve else []) for (n, k) in DENSE_NK]


BLOCK_M_FAMILIES = ("dense", "wgrad", "k_grouped")  # the families `--block-m` narrows
HALF_PROMOTE_FAMILIES = ("dense", "masked", "contiguous")  # ... and `--half-promote`
B_GROUP_FAMILIES = ("dense", "bf16")  # ... and `--b-group` (the dense kinds read B in k-block groups)


def _restrict(cands: list, current, block_m: int | None, half_promote: bool = False) -> list:
    """--block-m / --half-promote: the candidates of that block_m / the half-promoted ones, after
    the configuration the library selects today (table entry or model), so a merge can compare the
    two in the same run."""
    if block_m is None and not half_promote:
        return cands
    keep = [c for c in cands if (block_m is None or c.block_m == block_m) and (c.half_promote or not half_promote)]
    return unique_launches([current] + keep)


def _same_launch(a, b) -> bool:
    """Whether two configurations are the same launch (every field but the model's estimate)."""
    return type(a) is type(b) and dataclasses.replace(a, est_us=0.0) == dataclasses.replace(b, est_us=0.0)


def _with_current(cands: list, current) -> tuple[list, int]:
    """The candidates with `current` (what the library selects today: its table entry, or the
    model's choice) among them, and its index. The candidate generators do not reproduce every
    table entry (an entry's l2_promotion, a tile of an older candidate set); a run that did not
    time it cannot say whether its winner beats what users get now (five of twelve skinny winners
    were slower than the entries they would have replaced: benchmarks/NOTES.md v0.86)."""
    for i, c in enumerate(cands):
        if _same_launch(c, current):
            return cands, i
    return cands[:1] + [current] + cands[1:], min(1, len(cands))


def _mark_current(rows: list, index: int, rec: dict) -> dict:
    rows[index]["current"] = True
    rec["current_us"] = rows[index].get("us")
    return rec


def tune_shape(m: int, n: int, k: int, num_sms: int, top: int, num_tests: int, gen, log=print,
               family: str = "dense", block_m: int | None = None, half_promote: bool = False,
               has_c: bool = True, b_groups=()) -> dict:
    """Every candidate's check and time for one shape; returns the shape's record. family
    "dense": recipe (1, 128, 128), bf16 d; "wgrad": recipe (1, 1, 128), fp32 d accumulated in
    place (c = d), as weight gradients are, or with has_c=False written without C (the first
    micro-batch's D = A B; entries of their own, has_c false)."""
    from finegemm import reference
    from finegemm.heuristics._common import b_group_twins
    from finegemm.heuristics.sm90_fp8_gemm import b_group_fits, candidate_configs, select_config
    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.testing import calc_diff

    from .dense import _inputs

    wgrad = family == "wgrad"
    with_c = wgrad and has_c
    if wgrad:
        from finegemm.quant import per_token_cast_to_fp8
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=gen))
        b, sfb = per_token_cast_to_fp8(torch.randn(n, k, device="cuda", generator=gen))
        # C at the product's scale (std ~ sqrt(K)): an error in C must move calc_diff as much as one
        # in the product does (a unit-scale C would be diluted ~1/K).
        c0 = torch.randn(m, n, device="cuda", generator=gen) * float(k) ** 0.5 if has_c else None
        ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=c0, out_dtype=torch.float32, recipe=(1, 1, 128))
        d = c0.clone() if has_c else torch.empty(m, n, device="cuda", dtype=torch.float32)
    else:
        _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
        ref = reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        c0 = None
    current = select_config(m, n, k, num_sms, wgrad, with_c, one_d_one_d=wgrad)
    cands = candidate_configs(m, n, k, num_sms, out_fp32=wgrad, has_c=with_c, top=top, one_d_one_d=wgrad)
    cands, cur = _with_current(_restrict(cands, current, block_m, half_promote), current)
    cands = b_group_twins(cands, b_groups, b_group_fits)  # appended: the index of current holds

    def row_of(cfg):
        return {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_stages": cfg.num_stages,
                "num_splits": cfg.num_splits, "num_multicast": cfg.num_multicast,
                "multicast_on_a": cfg.multicast_on_a, "tma_store": cfg.tma_store, "half_promote": cfg.half_promote,
                "ctas_per_sm": cfg.ctas_per_sm, "k_batch": cfg.k_batch, "l2_promotion": list(cfg.l2_promotion),
                "c_stage": cfg.c_stage, "b_group": cfg.b_group}

    def check(cfg):
        if with_c:  # accumulates in place: each run starts from C
            call = ops.prepare(a, sfa, b, sfb, d, c=d, recipe=(1, 1, 128), config=cfg)
            first = _run_twice(call, d, lambda: d.copy_(c0))
        elif wgrad:
            call = ops.prepare(a, sfa, b, sfb, d, recipe=(1, 1, 128), config=cfg)
            first = _run_twice(call, d)
        else:
            call = ops.prepare(a, sfa, b, sfb, d, config=cfg)
            first = _run_twice(call, d)
        diff = calc_diff(d.float(), ref)
        # Elementwise too: a few wrong elements barely move calc_diff on a big output.
        tol = 1e-2 * ref.abs().max().item() + 1e-6
        close = bool(((d.float() - ref).abs() <= tol).all())
        if with_c:  # the product part alone (C must not hide an error in it, nor the reverse)
            diff = max(diff, calc_diff((d - c0).float(), ref - c0))
        ok = (diff <= 1e-5 and close and not torch.isnan(first).any() and not torch.isnan(d).any()
              and torch.equal(first, d))
        return call, diff, ok

    rows, best = _time_candidates(cands, lambda c: ops._load(c, d.device.index), row_of, check, num_tests)
    rec = _mark_current(rows, cur, {
        "family": family, "m": m, "n": n, "k": k, **({"has_c": has_c} if wgrad else {}), "candidates": rows,
        "model_us": rows[0].get("us"), "best_us": best["us"] if best else None, "best": best})
    detail = (f"bm{best['block_m']} bn{best['block_n']} s{best['num_stages']} split{best['num_splits']} "
              f"mc{best['num_multicast']}{'A' if best['multicast_on_a'] else ''}{' hp' if best['half_promote'] else ''}"
              f"{' tma' if best['tma_store'] else ''}{' 2cta' if best['ctas_per_sm'] == 2 else ''}"
              f"{' kb%d' % best['k_batch'] if best['k_batch'] > 1 else ''}{' cst' if best['c_stage'] else ''}"
              f"{' bg%d' % best['b_group'] if best['b_group'] > 1 else ''}") \
        if best else ""
    _log_result(log, f"{m:>5}x{n:>6}x{k:>6}{' no C' if wgrad and not with_c else ''}", rows, best, detail)
    return rec


def _run_twice(call, d, reset=None):
    """call() twice, d poisoned with NaN (or reset()) before each: returns the first result (the
    second stays in d) for the fully-written and bitwise-repeat checks."""
    reset = reset or (lambda: d.fill_(float("nan")))
    reset()
    call()
    first = d.clone()
    reset()
    call()
    torch.cuda.synchronize()
    return first


def _grouped_row(cfg) -> dict:
    """A grouped candidate's config fields, as table_entry writes them."""
    return {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_stages": cfg.num_stages, "num_splits": 1,
            "num_multicast": cfg.num_multicast, "multicast_on_a": cfg.multicast_on_a, "tma_store": cfg.tma_store,
            "half_promote": cfg.half_promote, "ctas_per_sm": 1, "k_batch": 1, "l2_promotion": list(cfg.l2_promotion)}


def _time_candidates(cands, load, row_of, check, num_tests):
    """Load every candidate (in parallel), then per candidate check(cfg) -> (call, calc_diff, ok) and,
    when ok, time call. A candidate that fails or cannot launch is reported in its row, never
    timed. Returns (rows, the best ok row or None); rows[0] is the model's choice."""
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(load, cands))
    rows = []
    for i, cfg in enumerate(cands):
        row = {**row_of(cfg), "model_us": round(cfg.est_us, 3), "model_choice": i == 0}
        try:
            call, diff, ok = check(cfg)
            row["calc_diff"] = diff
            row["ok"] = bool(ok)
            cluster = getattr(call, "cluster_size", None)  # the host's launch: pairs, split cluster
            if cluster is not None:
                row["cluster"] = cluster()
            if row["ok"]:
                row["us"] = kernel_time_us(call, num_tests)
        except Exception as exc:  # a candidate that cannot launch is reported, not fatal
            row["ok"] = False
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    good = [r for r in rows if r.get("ok")]
    return rows, (min(good, key=lambda r: r["us"]) if good else None)


def _log_result(log, label: str, rows: list, best, detail: str) -> None:
    ok = sum(1 for r in rows if r.get("ok"))
    cur = next((r for r in rows[1:] if r.get("current")), None)  # today's table entry, where not the model's
    now = f", current {cur['us']:8.2f} us" if cur and cur.get("us") else (", current failed" if cur else "")
    if best and rows[0].get("us"):
        log(f"{label}: model {rows[0]['us']:8.2f} us{now} -> best {best['us']:8.2f} us "
            f"({rows[0]['us'] / best['us']:.3f}x) {detail} [{ok}/{len(rows)} ok]")
    else:
        log(f"{label}: no timing ({ok}/{len(rows)} candidates ok)")
    for r in rows:
        if not r.get("ok"):
            log(f"   FAILED candidate {r}")


def _grouped_detail(best) -> str:
    return (f"bm{best['block_m']} bn{best['block_n']} s{best['num_stages']} mc{best['num_multicast']}"
            f"{' tma' if best['tma_store'] else ''}") if best else ""


def _padded_layout(ms: list[int]) -> tuple[torch.Tensor, int, int]:
    """(grouped_layout int32 [M], M, alignment): groups of ms rows, each segment padded to the
    contiguous-layout alignment with -1 rows (bench grouped's layout)."""
    import finegemm
    align_m = finegemm.get_mk_alignment_for_contiguous_layout()
    padded = [finegemm.align(m, align_m) for m in ms]
    layout = torch.full((sum(padded),), -1, dtype=torch.int32, device="cuda")
    row = 0
    for i, (m, p) in enumerate(zip(ms, padded)):
        layout[row:row + m] = i
        row += p
    return layout, sum(padded), align_m


def _masked_check(d, first, ref, m: int) -> tuple[float, bool]:
    """(calc_diff, ok) of a masked call run twice: the valid rows of every group match the exact
    reference, are fully written and bitwise repeatable; rows >= m stay untouched (NaN poison)."""
    from finegemm.testing import calc_diff
    diff = max(calc_diff(d[j, :m].float(), ref[j, :m]) for j in range(d.shape[0]))
    untouched = bool(torch.isnan(d[:, m:]).all()) and bool(torch.isnan(first[:, m:]).all())
    ok = (diff <= 1e-5 and untouched and not torch.isnan(first[:, :m]).any()
          and not torch.isnan(d[:, :m]).any() and torch.equal(first[:, :m], d[:, :m]))
    return diff, ok


def _contiguous_check(d, first, ref, layout) -> tuple[float, bool]:
    """(calc_diff, ok) of a contiguous call run twice: exact reference, padding rows zero, fully
    written, bitwise repeatable."""
    from finegemm.testing import calc_diff
    diff = calc_diff(d.float(), ref)
    ok = (diff <= 1e-5 and bool((d[layout < 0] == 0).all()) and not torch.isnan(d).any()
          and torch.equal(first, d))
    return diff, ok


def masked_default_shapes() -> list[tuple[int, int, int, int]]:
    """(G, m per group, N, K) of `bench grouped`'s masked records."""
    from .grouped import GROUPED_NK, MASKED_GM
    return [(g, m, n, k) for (g, m) in MASKED_GM for (n, k) in GROUPED_NK]


def masked_tune_candidates(g: int, m: int, n: int, k: int, num_sms: int, top: int,
                           half_promote: bool = False) -> tuple[list, int]:
    """(the configs `tune masked` times for (G, m per group, N, K), the index of today's selection
    among them); scripts/precompile_tune.py --masked-shapes compiles the same list."""
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED, grouped_candidate_configs, select_grouped_config
    from finegemm.utils import align

    m_max = align(m, 128) + 128
    current = select_grouped_config(GEMM_GROUPED_MASKED, m_max, n, k, g, num_sms, m, 0)
    cands = grouped_candidate_configs(GEMM_GROUPED_MASKED, m_max, n, k, g, num_sms, m, 0, top=top)
    return _with_current(_restrict(cands, current, None, half_promote), current)


def tune_masked_shape(g: int, m: int, n: int, k: int, num_sms: int, top: int, num_tests: int, gen, log=print,
                      half_promote: bool = False) -> dict:
    """m_grouped_fp8_gemm_nt_masked with masked_m = m in every group (Mmax = m rounded up to 128,
    plus 128 so that rows >= masked_m exist in every group): every candidate checked (valid rows vs
    the exact reference, rows >= masked_m untouched, a bitwise repeat with fresh poison) and timed."""
    import finegemm
    from finegemm import reference
    from finegemm.ops import sm90_fp8_gemm as ops

    m_max = finegemm.align(m, 128) + 128
    qs = [finegemm.per_token_cast_to_fp8(torch.randn(m_max, k, device="cuda", generator=gen)) for _ in range(g)]
    a, sfa = torch.stack([q for q, _ in qs]), torch.stack([s_ for _, s_ in qs])
    ws = [finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=gen)) for _ in range(g)]
    b, sfb = torch.stack([w for w, _ in ws]), torch.stack([s_ for _, s_ in ws])
    masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
    ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m, out_dtype=torch.float32)
    d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    cands, cur = masked_tune_candidates(g, m, n, k, num_sms, top, half_promote)

    def check(cfg):
        def call():
            ops.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, d, masked_m, m, config=cfg)
        first = _run_twice(call, d)
        return (call, *_masked_check(d, first, ref, m))

    rows, best = _time_candidates(cands, lambda c: ops._load(c, d.device.index), _grouped_row, check, num_tests)
    rec = _mark_current(rows, cur, {"family": "masked", "groups": g, "m": m, "n": n, "k": k, "candidates": rows,
                                    "model_us": rows[0].get("us"), "best_us": best["us"] if best else None,
                                    "best": best})
    _log_result(log, f"masked G={g:>2} m={m:>5} {n:>6}x{k:>6}", rows, best, _grouped_detail(best))
    return rec


def contiguous_default_problems() -> list[tuple[int, int, int, int, list[int]]]:
    """(G, expected m per group, N, K, per-group m) of `bench grouped`'s contiguous records, with
    the segment sizes that run draws."""
    from .grouped import plan_records
    return [(r["groups"], r["m"], r["n"], r["k"], r["ms"]) for r in plan_records(kinds=("contiguous",))]


def tune_contiguous_shape(g: int, expected: int, n: int, k: int, ms: list[int], num_sms: int, top: int,
                          num_tests: int, gen, log=print, half_promote: bool = False) -> dict:
    """m_grouped_fp8_gemm_nt_contiguous on `bench grouped`'s layout: groups of ms rows, segments
    padded to the alignment (padding rows must come out as zeros). Every candidate checked (exact
    reference, poisoned output, bitwise repeat) and timed; the entry is keyed by the stacked rows
    (what the op plans with) and G."""
    import finegemm
    from finegemm import reference
    from finegemm.heuristics.sm90_fp8_gemm import (GEMM_GROUPED_CONTIGUOUS, grouped_candidate_configs,
                                                   select_grouped_config)
    from finegemm.ops import sm90_fp8_gemm as ops

    from .grouped import _quantized_experts

    layout, m_total, align_m = _padded_layout(ms)
    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m_total, k, device="cuda", generator=gen))
    _, b, sfb = _quantized_experts(g, n, k, gen)
    ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, layout, out_dtype=torch.float32)
    d = torch.empty(m_total, n, device="cuda", dtype=torch.bfloat16)
    current = select_grouped_config(GEMM_GROUPED_CONTIGUOUS, m_total, n, k, g, num_sms, 0, align_m)
    cands = grouped_candidate_configs(GEMM_GROUPED_CONTIGUOUS, m_total, n, k, g, num_sms, 0, align_m, top=top)
    cands, cur = _with_current(_restrict(cands, current, None, half_promote), current)

    def check(cfg):
        def call():
            ops.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, layout, config=cfg)
        first = _run_twice(call, d)
        return (call, *_contiguous_check(d, first, ref, layout))

    rows, best = _time_candidates(cands, lambda c: ops._load(c, d.device.index), _grouped_row, check, num_tests)
    rec = _mark_current(rows, cur, {"family": "contiguous", "groups": g, "m": m_total, "expected_m": expected, "n": n,
                                    "k": k, "candidates": rows, "model_us": rows[0].get("us"),
                                    "best_us": best["us"] if best else None, "best": best})
    _log_result(log, f"contiguous G={g} m={m_total:>6} {n:>5}x{k:>5}", rows, best, _grouped_detail(best))
    return rec


def k_grouped_default_problems() -> list[tuple[int, int, int, list[int]]]:
    """(G, M, N, ks) of `bench grouped`'s k_grouped records (the ks that run draws)."""
    from .grouped import k_grouped_problems
    return [(g, m, n, list(ks)) for (g, m, n, ks, _ek) in k_grouped_problems()]


def tune_k_grouped_problem(g: int, m: int, n: int, ks: list[int], num_sms: int, top: int, num_tests: int, gen,
                           log=print, block_m: int | None = None, has_c: bool = True) -> dict:
    """k_grouped_fp8_gemm_nt_contiguous with c = d (weight gradients; has_c=False: without C, the
    first micro-batch's D = A B) on one problem: every candidate of
    heuristics.k_grouped_candidate_configs checked (exact reference on sampled output rows of every
    group, C and product separately, bitwise repeat from the same C, or from a NaN-poisoned D
    without C) and timed. The entry (kind K_GROUPED_KIND, has_c as tuned) is keyed by (M, N,
    planning K): what select_k_grouped_config looks up. The two calls get their own entries because
    their best tiles differ (benchmarks/NOTES.md v0.85: without C, G = 8, the c = d tile is 14%
    faster than the model's)."""
    from finegemm.heuristics.sm90_fp8_gemm import k_grouped_candidate_configs, k_grouped_plan_k
    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.ops import sm90_fp8_k_grouped as kg
    from finegemm.testing import calc_diff

    from ._common import REF_FLOPS, sample_rows
    from .grouped import k_grouped_inputs, k_grouped_reference_rows

    assert len(ks) == g
    a, sfa, b, sfb, _, _ = k_grouped_inputs(m, n, ks, gen)
    # C at the product's scale, as tune_shape's wgrad family; without C, D is poisoned before each call.
    c0 = torch.randn(g, m, n, device="cuda", generator=gen) * float(max(sum(ks) // max(g, 1), 1)) ** 0.5 \
        if has_c else None
    d = c0.clone() if has_c else torch.empty(g, m, n, device="cuda", dtype=torch.float32)
    rows = sample_rows(m, 2.0 * n * sum(ks), REF_FLOPS)
    idx = torch.tensor(rows, dtype=torch.long, device="cuda")
    prod_ref = k_grouped_reference_rows(a, sfa, b, sfb, m, n, ks, rows).double()
    c_rows = c0[:, idx].double() if has_c else None
    cands = k_grouped_candidate_configs(m, n, ks, num_sms, has_c, top=top)
    cands = _restrict(cands, cands[0], block_m)  # the first is select_k_grouped_config's choice

    def row_of(cfg):
        return {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_stages": cfg.num_stages, "num_splits": 1,
                "num_multicast": cfg.num_multicast, "multicast_on_a": cfg.multicast_on_a, "tma_store": cfg.tma_store,
                "half_promote": cfg.half_promote, "ctas_per_sm": 1, "k_batch": cfg.k_batch,
                "l2_promotion": list(cfg.l2_promotion)}

    def check(cfg):
        def call():
            kg.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, d if has_c else None, config=cfg)
        first = _run_twice(call, d, (lambda: d.copy_(c0)) if has_c else None)
        sub = d[:, idx].double()
        if has_c:
            diff = max(calc_diff(sub, prod_ref + c_rows), calc_diff(sub - c_rows, prod_ref))
        else:
            diff = calc_diff(sub, prod_ref)
        ok = diff <= 1e-5 and not torch.isnan(first).any() and torch.equal(first, d)
        return call, diff, ok

    rows_, best = _time_candidates(cands, lambda c: ops._load(c, d.device.index), row_of, check, num_tests)
    _, k_plan = k_grouped_plan_k(ks)
    rec = _mark_current(rows_, 0, {  # the first candidate is select_k_grouped_config's choice
        "family": "k_grouped", "groups": g, "m": m, "n": n, "k": k_plan, "ks": list(ks), "has_c": has_c,
        "candidates": rows_, "model_us": rows_[0].get("us"), "best_us": best["us"] if best else None, "best": best})
    detail = (f"bm{best['block_m']} bn{best['block_n']} s{best['num_stages']} mc{best['num_multicast']}"
              f"{'A' if best['multicast_on_a'] else ''}{' hp' if best['half_promote'] else ''}"
              f"{' tma' if best['tma_store'] else ''}{' kb%d' % best['k_batch'] if best['k_batch'] > 1 else ''}"
              ) if best else ""
    _log_result(log, f"k_grouped G={g} {m:>5}x{n:>5} k~{k_plan}{'' if has_c else ' no C'}", rows_, best, detail)
    return rec


def _bf16_grouped_row(cfg) -> dict:
    """An m-grouped BF16 candidate's config fields, as table_entry writes them (TMA-store epilogue,
    no cluster, no split)."""
    return {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_stages": cfg.num_stages, "num_splits": 1,
            "num_multicast": 1, "multicast_on_a": False, "tma_store": True, "half_promote": False, "ctas_per_sm": 1,
            "k_batch": 1, "l2_promotion": list(cfg.l2_promotion)}


def _bf16_grouped_detail(best) -> str:
    return f"bm{best['block_m']} bn{best['block_n']} s{best['num_stages']}" if best else ""


def tune_bf16_masked_shape(g: int, m: int, n: int, k: int, num_sms: int, num_tests: int, gen, log=print) -> dict:
    """m_grouped_bf16_gemm_nt_masked with masked_m = m in every group (Mmax = m rounded up to 128,
    plus 128): every tile of the kernel space checked (valid rows vs the exact reference, rows >=
    masked_m untouched, a bitwise repeat with fresh poison) and timed; the entry is keyed by the
    expected m (= m) and G, as the op plans."""
    from finegemm import reference
    from finegemm.heuristics.sm90_bf16_gemm import GEMM_GROUPED_MASKED, grouped_candidate_configs, select_grouped_config
    from finegemm.ops import sm90_bf16_gemm as ops
    from finegemm.utils import align

    m_max = align(m, 128) + 128
    a = torch.randn(g, m_max, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
    ref = reference.m_grouped_bf16_gemm_nt_masked(a, b, masked_m, out_dtype=torch.float32)
    d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    cands, cur = _with_current(grouped_candidate_configs(GEMM_GROUPED_MASKED, m_max, n, k, g, num_sms, m, 0),
                               select_grouped_config(GEMM_GROUPED_MASKED, m_max, n, k, g, num_sms, m, 0))

    def check(cfg):
        def call():
            ops.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m, config=cfg)
        first = _run_twice(call, d)
        return (call, *_masked_check(d, first, ref, m))

    rows, best = _time_candidates(cands, lambda c: ops.load_grouped(c, d.device.index), _bf16_grouped_row,
                                  check, num_tests)
    rec = _mark_current(rows, cur, {"family": "bf16_masked", "groups": g, "m": m, "n": n, "k": k, "candidates": rows,
                                    "model_us": rows[0].get("us"), "best_us": best["us"] if best else None,
                                    "best": best})
    _log_result(log, f"bf16 masked G={g:>2} m={m:>5} {n:>6}x{k:>6}", rows, best, _bf16_grouped_detail(best))
    return rec


def tune_bf16_contiguous_shape(g: int, expected: int, n: int, k: int, ms: list[int], num_sms: int, num_tests: int,
                               gen, log=print) -> dict:
    """m_grouped_bf16_gemm_nt_contiguous on `bench grouped`'s layout (groups of ms rows, segments
    padded to the alignment; padding rows must come out as zeros): every tile checked (exact
    reference, poisoned output, bitwise repeat) and timed; the entry is keyed by the stacked rows
    and G, as the op plans."""
    from finegemm import reference
    from finegemm.heuristics.sm90_bf16_gemm import (GEMM_GROUPED_CONTIGUOUS, grouped_candidate_configs,
                                                    select_grouped_config)
    from finegemm.ops import sm90_bf16_gemm as ops

    layout, m_total, align_m = _padded_layout(ms)
    a = torch.randn(m_total, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    ref = reference.m_grouped_bf16_gemm_nt_contiguous(a, b, layout, out_dtype=torch.float32)
    d = torch.empty(m_total, n, device="cuda", dtype=torch.bfloat16)
    cands, cur = _with_current(
        grouped_candidate_configs(GEMM_GROUPED_CONTIGUOUS, m_total, n, k, g, num_sms, 0, align_m),
        select_grouped_config(GEMM_GROUPED_CONTIGUOUS, m_total, n, k, g, num_sms, 0, align_m))

    def check(cfg):
        def call():
            ops.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, config=cfg)
        first = _run_twice(call, d)
        return (call, *_contiguous_check(d, first, ref, layout))

    rows, best = _time_candidates(cands, lambda c: ops.load_grouped(c, d.device.index), _bf16_grouped_row,
                                  check, num_tests)
    rec = _mark_current(rows, cur, {"family": "bf16_contiguous", "groups": g, "m": m_total, "expected_m": expected,
                                    "n": n, "k": k, "candidates": rows, "model_us": rows[0].get("us"),
                                    "best_us": best["us"] if best else None, "best": best})
    _log_result(log, f"bf16 contiguous G={g} m={m_total:>6} {n:>5}x{k:>5}", rows, best, _bf16_grouped_detail(best))
    return rec


def bf16_default_shapes() -> list[tuple[int, int, int, bool]]:
    """(m, n, k, out_fp32) of `bench bf16` but 8192^3: its dense set (bf16 d) and its fp32-d shapes."""
    from .bf16 import bench_shapes
    return [s for s in bench_shapes() if s[0] != 8192]


def bf16_tune_shapes(shapes=None) -> list[tuple[int, int, int, bool]]:
    """(m, n, k, out_fp32) that `tune bf16` times: the given M,N,K shapes, each with the output dtype
    `bench bf16` times it with (fp32 d for N = 256 / 129280), so the entry is the one the bench's
    call looks up (other shapes: bf16 d); by default bf16_default_shapes()."""
    if not shapes:
        return bf16_default_shapes()
    bench_fp32 = {s[:3]: s[3] for s in bf16_default_shapes()}
    return [(*s, bench_fp32.get(tuple(s), False)) for s in shapes]


def bf16_tune_candidates(m: int, n: int, k: int, layout: str, num_sms: int, top: int, out_fp32: bool = False,
                         b_groups=(), multicast: bool = False) -> tuple[list, int]:
    """(the configs `tune bf16` times for a dense problem, the index of today's selection among
    them): the candidates, their B-group twins, and with multicast the 2-CTA pair twins of the
    first ones (multicast_twins); scripts/precompile_bf16.py --tune-shapes compiles the same list."""
    from finegemm.heuristics._common import b_group_twins
    from finegemm.heuristics.sm90_bf16_gemm import (LAYOUTS, b_group_fits, candidate_configs, multicast_twins,
                                                    select_config)

    a_mn, b_mn = LAYOUTS[layout]
    cands, cur = _with_current(candidate_configs(m, n, k, num_sms, a_mn, b_mn, out_fp32=out_fp32, top=top),
                               select_config(m, n, k, num_sms, a_mn, b_mn, out_fp32=out_fp32))
    cands = b_group_twins(cands, b_groups, b_group_fits)
    return (multicast_twins(cands, num_sms) if multicast else cands), cur


def tune_bf16_shape(m: int, n: int, k: int, layout: str, num_sms: int, top: int, num_tests: int, gen,
                    log=print, out_fp32: bool = False, b_groups=(), multicast: bool = False) -> dict:
    """Every candidate (heuristics.sm90_bf16_gemm.candidate_configs) of a dense BF16 problem: checked
    against the fp32 product on a NaN-poisoned output, twice (bitwise equal), then timed; with
    multicast, also the 2-CTA pair twins of the first ones (multicast_twins)."""
    from finegemm.heuristics.sm90_bf16_gemm import LAYOUTS
    from finegemm.ops import sm90_bf16_gemm as ops
    from finegemm.testing import calc_diff

    a_mn, b_mn = LAYOUTS[layout]
    a = torch.randn((k, m) if a_mn else (m, k), device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn((k, n) if b_mn else (n, k), device="cuda", generator=gen).to(torch.bfloat16)
    ref = (a.t() if a_mn else a).float() @ (b if b_mn else b.t()).float()
    d = torch.empty(m, n, device="cuda", dtype=torch.float32 if out_fp32 else torch.bfloat16)
    cands, cur = bf16_tune_candidates(m, n, k, layout, num_sms, top, out_fp32, b_groups, multicast)

    def row_of(cfg):
        return {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_stages": cfg.num_stages,
                "num_splits": cfg.num_splits, "num_multicast": cfg.num_multicast,
                "multicast_on_a": cfg.multicast_on_a,
                "tma_store": cfg.tma_store, "half_promote": False, "l2_promotion": list(cfg.l2_promotion),
                "b_group": cfg.b_group}  # today's selection may carry its entry's B group

    def check(cfg):
        call = ops.prepare(a, b, d, None, layout, config=cfg)
        first = _run_twice(call, d)
        diff = calc_diff(d.float(), ref)
        return call, diff, diff <= 1e-5 and not torch.isnan(d).any() and torch.equal(first, d)

    rows, best = _time_candidates(cands, lambda c: ops._load(c, d.device.index), row_of, check, num_tests)
    rec = _mark_current(rows, cur, {"family": "bf16", "layout": layout, "m": m, "n": n, "k": k, "out_fp32": out_fp32,
                                    "candidates": rows, "model_us": rows[0].get("us"),
                                    "best_us": best["us"] if best else None, "best": best})
    pair = (" mc" + ("A" if best["multicast_on_a"] else "B")) if best and best["num_multicast"] > 1 else ""
    detail = (f"bm{best['block_m']} bn{best['block_n']} split{best['num_splits']}"
              f"{' bg%d' % best['b_group'] if best['b_group'] > 1 else ''}{pair}") if best else ""
    _log_result(log, f"{layout} {m:>5}x{n:>6}x{k:>6}{' fp32' if out_fp32 else ''}", rows, best, detail)
    return rec


def table_entry(rec: dict, num_sms: int, meta: dict) -> dict | None:
    from finegemm.heuristics.tuned import CONFIG_FIELDS, OPTIONAL_FIELDS

    best = rec.get("best")
    if not best:
        return None
    wgrad = rec.get("family") == "wgrad"
    from finegemm.heuristics.sm90_fp8_gemm import CONTIGUOUS_KIND_PREFIX, MASKED_KIND_PREFIX
    masked = rec.get("family") == "masked"
    kind = f"{MASKED_KIND_PREFIX}{rec['groups']}" if masked else "fp8_1d1d" if wgrad else "fp8_1d2d"
    if rec.get("family") == "k_grouped":  # fp32 d, accumulated in place as wgrad unless tuned without C
        from finegemm.heuristics.sm90_fp8_gemm import K_GROUPED_KIND
        kind, wgrad = K_GROUPED_KIND, True
    has_c = wgrad and rec.get("has_c", True)  # the fp32 families were tuned with c = d unless --no-c
    if rec.get("family") == "contiguous":
        kind = f"{CONTIGUOUS_KIND_PREFIX}{rec['groups']}"
    if rec.get("family") in ("bf16_masked", "bf16_contiguous"):
        from finegemm.heuristics import sm90_bf16_gemm as bh
        prefix = bh.MASKED_KIND_PREFIX if rec["family"] == "bf16_masked" else bh.CONTIGUOUS_KIND_PREFIX
        kind = f"{prefix}{rec['groups']}"
    out_fp32 = wgrad
    if rec.get("family") == "bf16":
        kind = f"bf16_{rec['layout']}"
        out_fp32 = rec.get("out_fp32", False)
    best = {**best, **{f: best.get(f, v) for f, v in OPTIONAL_FIELDS.items()}}
    config = {f: best[f] for f in (*CONFIG_FIELDS, *OPTIONAL_FIELDS)}
    if list(config["l2_promotion"]) == OPTIONAL_FIELDS["l2_promotion"]:
        del config["l2_promotion"]  # the default: entries name it only where a measurement chose another
    else:
        config["l2_promotion"] = list(config["l2_promotion"])
    if not config["c_stage"]:
        del config["c_stage"]  # likewise: only the entries that chose the C stage name it
    if config["b_group"] == 1:
        del config["b_group"]  # and the B group
    return {"kind": kind, "num_sms": num_sms, "m": rec["m"], "n": rec["n"],
            "k": rec["k"], "out_fp32": out_fp32, "has_c": has_c, "config": config,
            "us": round(best["us"], 3), "model_us": round(rec["model_us"], 3) if rec.get("model_us") else None,
            "gpu": meta.get("gpu"), "commit": meta.get("commit"), "date": meta.get("date")}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finegemm tune", description=__doc__.split("\n")[0])
    p.add_argument("family", choices=TUNE_FAMILIES,
                   help="dense: recipe (1, 128, 128), bf16 out; wgrad: recipe (1, 1, 128), fp32 out += in place "
                        "(--no-c: without C); masked: m-grouped masked (--shapes G,M,N,K); contiguous: m-grouped contiguous "
                        "(--shapes G,expected M,N,K; bench grouped's layout); bf16: the dense BF16 kernel, bf16 out "
                        "(--layouts; entries go to a bf16 table, heuristics/tuned_sm90_bf16.json when shipped); "
                        "bf16_masked / bf16_contiguous: the m-grouped BF16 kernels (shapes as masked / contiguous; "
                        "the bf16 table too); k_grouped: k_grouped_fp8_gemm_nt_contiguous with c = d (--no-c: "
                        "without C) on bench grouped's problems (entries of kind fp8_k_grouped)")
    p.add_argument("--layouts", nargs="+", default=["nt", "nn", "tn", "tt"], choices=["nt", "nn", "tn", "tt"],
                   help="bf16 family: the layouts to tune")
    p.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="M,N,K", help="default: the 18 anchor shapes")
    p.add_argument("--curve", action="store_true", help="also the M curve of `bench dense` (1 ... 8192)")
    p.add_argument("--top", type=int, default=16, help="the model's best N candidates (plus family bests)")
    p.add_argument("--num-tests", type=int, default=10)
    p.add_argument("--block-m", type=int, default=None, choices=FP8_BLOCK_MS,
                   help="dense / wgrad / k_grouped: only that block_m's candidates, plus today's selection")
    p.add_argument("--half-promote", action="store_true",
                   help="dense / masked / contiguous: only the half-promoted candidates (incl. the serial halves "
                        "of block_n > 208), plus today's selection")
    p.add_argument("--no-c", action="store_true",
                   help="wgrad / k_grouped: tune the call without C (D = A B) instead of c = d; its entries have "
                        "has_c false")
    p.add_argument("--b-group", type=int, nargs="+", default=[], choices=(2, 4), metavar="G",
                   help="dense / bf16: also a twin of every candidate reading B in boxes of G k-blocks where "
                        "the group fits (b_group_fits), so an entry names a group only where this run chose it")
    p.add_argument("--multicast", action="store_true",
                   help="bf16: also 2-CTA pair twins (A or B shared through TMA multicast) of the first non-split "
                        "candidates, so an entry names a pair only where this run chose it")
    p.add_argument("--table", default=None, help="tuned table to add the winners to (default: print only)")
    p.add_argument("--out", default=None, help="JSON with every candidate's check and time")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.block_m is not None and args.family not in BLOCK_M_FAMILIES:
        raise SystemExit(f"finegemm tune {args.family}: --block-m applies to {', '.join(BLOCK_M_FAMILIES)} only")
    if args.no_c and args.family not in ("wgrad", "k_grouped"):
        raise SystemExit(f"finegemm tune {args.family}: --no-c applies to wgrad and k_grouped only")
    if args.half_promote and args.family not in HALF_PROMOTE_FAMILIES:
        raise SystemExit(f"finegemm tune {args.family}: --half-promote applies to {', '.join(HALF_PROMOTE_FAMILIES)} "
                         "only")
    if args.b_group and args.family not in B_GROUP_FAMILIES:
        raise SystemExit(f"finegemm tune {args.family}: --b-group applies to {', '.join(B_GROUP_FAMILIES)} only")
    if args.multicast and args.family != "bf16":
        raise SystemExit(f"finegemm tune {args.family}: --multicast applies to bf16 only")
    if not torch.cuda.is_available():
        print("finegemm tune: needs a CUDA GPU", file=sys.stderr)
        return 2
    from finegemm import runtime

    num_sms = runtime.get_num_sms()
    meta = run_metadata()
    gen = torch.Generator(device="cuda").manual_seed(0)
    t0 = time.time()
    if args.family in ("masked", "bf16_masked"):
        shapes = args.shapes or masked_default_shapes()
        if args.family == "masked":
            records = [tune_masked_shape(*shape, num_sms, args.top, args.num_tests, gen, half_promote=args.half_promote)
                       for shape in shapes]
        else:
            records = [tune_bf16_masked_shape(*shape, num_sms, args.num_tests, gen) for shape in shapes]
    elif args.family in ("contiguous", "bf16_contiguous"):
        if args.shapes:
            import random

            from .grouped import draw_ms
            rng = random.Random(0)
            problems = [(g, m, n, k, draw_ms(g, m, rng)) for (g, m, n, k) in args.shapes]
        else:
            problems = contiguous_default_problems()
        if args.family == "contiguous":
            records = [tune_contiguous_shape(*p, num_sms, args.top, args.num_tests, gen, half_promote=args.half_promote)
                       for p in problems]
        else:
            records = [tune_bf16_contiguous_shape(*p, num_sms, args.num_tests, gen) for p in problems]
    elif args.family == "k_grouped":
        if args.shapes:
            raise SystemExit("finegemm tune k_grouped: --shapes is not supported (the problems are bench grouped's)")
        records = [tune_k_grouped_problem(*p, num_sms, args.top, args.num_tests, gen, block_m=args.block_m,
                                          has_c=not args.no_c)
                   for p in k_grouped_default_problems()]
    elif args.family == "bf16":
        shapes = bf16_tune_shapes(args.shapes)
        records = [tune_bf16_shape(m, n, k, layout, num_sms, args.top, args.num_tests, gen, out_fp32=fp32,
                                   b_groups=args.b_group, multicast=args.multicast)
                   for (m, n, k, fp32) in shapes for layout in args.layouts]
    else:
        shapes = args.shapes or (wgrad_default_shapes() if args.family == "wgrad" else default_shapes(args.curve))
        records = [tune_shape(m, n, k, num_sms, args.top, args.num_tests, gen, family=args.family,
                              block_m=args.block_m, half_promote=args.half_promote, has_c=not args.no_c,
                              b_groups=args.b_group)
                   for (m, n, k) in shapes]
    print(f"tuned {len(records)} shapes in {time.time() - t0:.0f} s")
    failed = sum(1 for r in records for c in r["candidates"] if not c.get("ok"))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({**meta, "command": " ".join(["python -m finegemm tune"] + list(argv or sys.argv[1:])),
                                                      "num_sms": num_sms, "records": records}, indent=1))
    if args.table:
        from finegemm.heuristics import tuned
        entries = [e for e in (table_entry(r, num_sms, meta) for r in records) if e]
        tuned.merge_entries(args.table, entries)
        print(f"{len(entries)} entries written to {args.table}")
    if failed:
        print(f"{failed} candidate(s) failed their check (see above)", file=sys.stderr)
    return 1 if failed else 0
