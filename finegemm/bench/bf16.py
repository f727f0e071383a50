"""`python -m finegemm bench bf16`: finegemm BF16 GEMMs vs torch.matmul, all four layouts, one run.

Shapes: M in {64, 128, 4096} x the six (N, K) of DeepSeek-V3 (bf16 output), (N, K) in
{(256, 7168), (129280, 7168)} with fp32 output, and 8192^3. Every layout reads its operands in
the stored form (nt: A [M, K], B [N, K]; nn: B [K, N]; tn: A [K, M], B [K, N]; tt: A [K, M],
B [N, K]); torch gets the same storage through transposed views. Kernel-only times (profiler,
L2 flushed), TFLOPS, ratio to torch, calc_diff vs the fp32 product. Records of 1 ms or more
(dense and grouped) are timed in two rounds, finegemm then torch and torch then finegemm, and
report the means (us_rounds keeps both): at ~10 ms the order alone moved a ratio by 9% (NOTES v0.87).

Grouped records (--grouped, default on): m_grouped_bf16_gemm_nt_contiguous / _masked on the FP8
grouped bench's (G, m) x (N, K) sets (the same segment sizes) and k_grouped_bf16_gemm_tn_contiguous
(fp32 d accumulated in place) on its k-grouped set (the same k_g), each vs torch._grouped_mm in
bf16; calc_diff vs the exact reference (finegemm.reference, fp64) on the same data, on a seeded
sample of output rows when the full reference would be too heavy (calc_diff_rows). The summary
gives the geomean speedup over torch._grouped_mm (issue target: >= 1.3x). `--list` prints the
planned grouped records without a GPU.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib

import torch

from ._common import (REF_FLOPS, WARM_HELP, error_text, geomean, kernel_time_us, reverse_round_if_long,
                      run_metadata, sample_rows, set_clock_warmup, settle_ms_arg, sync, time_into)

DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_M = [64, 128, 4096]
FP32_NK = [(256, 7168), (129280, 7168)]
LAYOUTS = ("nt", "nn", "tn", "tt")


def bench_shapes() -> list[tuple[int, int, int, bool]]:
    """(m, n, k, out_fp32) of the suite."""
    shapes = [(m, n, k, False) for m in DENSE_M for (n, k) in DENSE_NK]
    shapes += [(m, n, k, True) for m in DENSE_M for (n, k) in FP32_NK]
    shapes += [(8192, 8192, 8192, False)]
    return shapes


def _stored(rows, cols, gen):
    pitch = -(-cols // 8) * 8
    return torch.randn(rows, pitch, device="cuda", dtype=torch.bfloat16, generator=gen)[:, :cols]


def _torch_fn(layout, a, b, out_fp32):
    A = a if layout[0] == "n" else a.t()  # [M, K]
    Bt = b.t() if layout[1] == "t" else b  # [K, N]
    if out_fp32:
        try:
            torch.mm(A, Bt, out_dtype=torch.float32)
            return (lambda: torch.mm(A, Bt, out_dtype=torch.float32)), "torch.mm(out_dtype=float32)"
        except Exception:
            pass
    return (lambda: torch.matmul(A, Bt)), "torch.matmul (bf16 out)"


def bench_one(layout, m, n, k, out_fp32, gen, num_tests):
    import finegemm
    from finegemm.testing import calc_diff

    a = _stored(m, k, gen) if layout[0] == "n" else _stored(k, m, gen)
    b = _stored(n, k, gen) if layout[1] == "t" else _stored(k, n, gen)
    d = torch.empty(m, n, device="cuda", dtype=torch.float32 if out_fp32 else torch.bfloat16)
    rec = {"layout": layout, "m": m, "n": n, "k": k, "out": "fp32" if out_fp32 else "bf16", "us": {}}
    fn = getattr(finegemm, f"bf16_gemm_{layout}")
    order = []  # (name, fn) as timed, for the reverse round

    def ours():
        fn(a, b, d)

    try:
        d.fill_(float("nan"))
        ours()
        torch.cuda.synchronize()
        A = a if layout[0] == "n" else a.t()
        B = b if layout[1] == "t" else b.t()
        if m * n <= (1 << 28):
            ref = A.float() @ B.float().t()
            rec["calc_diff"] = calc_diff(d.float(), ref)
            del ref
        rec["all_written"] = bool(not torch.isnan(d).any().item())
        rec["us"]["finegemm"] = kernel_time_us(ours, num_tests)
        order.append(("finegemm", ours))
    except Exception as exc:  # record and go on: one broken shape must not hide the others
        rec["error_finegemm"] = f"{type(exc).__name__}: {exc}"[:500]
    tfn = None
    try:
        tfn, what = _torch_fn(layout, a, b, out_fp32)
        rec["torch_op"] = what
        rec["us"]["torch"] = kernel_time_us(tfn, num_tests)
        order.append(("torch", tfn))
    except Exception as exc:
        rec["error_torch"] = f"{type(exc).__name__}: {exc}"[:300]
    reverse_round_if_long(rec, order, num_tests)
    flops = 2.0 * m * n * k
    ours_us, torch_us = rec["us"].get("finegemm"), rec["us"].get("torch")
    if ours_us:
        rec["tflops"] = flops / ours_us / 1e6
        rec["gbps"] = (2 * (m * k + n * k) + m * n * (4 if out_fp32 else 2)) / ours_us / 1e3
    if ours_us and torch_us:
        rec["speedup_vs_torch"] = torch_us / ours_us
    return rec


def _fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


# ----------------------------------------------------------------------------- grouped (MoE)
GROUPED_LAYOUTS = ("grouped_contiguous", "grouped_masked", "k_grouped")  # the issue target's set
# Also benched (own geomean, outside the target's): the contiguous set with B stored [G, K, N]
# (m_grouped_bf16_gemm_nn_contiguous, the MoE backward data gradient; torch._grouped_mm's own layout).
GROUPED_EXTRA_LAYOUTS = ("grouped_contiguous_nn",)
CONTIGUOUS_LAYOUTS = ("grouped_contiguous", "grouped_contiguous_nn")  # one record builder, B [G, N, K] / [G, K, N]
GROUPED_TARGET = 1.3  # issue target: geomean speedup over torch._grouped_mm (bf16)


def grouped_plan(layouts=GROUPED_LAYOUTS) -> list[dict]:
    """The grouped records, in run order (no GPU): the FP8 grouped bench's m-grouped sets (the same
    contiguous segment sizes: grouped.contiguous_problems) and its k-grouped set (same k_g)."""
    from .grouped import GROUPED_NK, MASKED_GM, contiguous_problems, k_grouped_problems

    plan = []
    for (g, m, n, k, ms) in contiguous_problems():
        for lay in CONTIGUOUS_LAYOUTS:
            if lay in layouts:
                plan.append({"layout": lay, "groups": g, "m": m, "n": n, "k": k, "ms": ms})
    if "grouped_masked" in layouts:
        for (g, m) in MASKED_GM:
            for (n, k) in GROUPED_NK:
                plan.append({"layout": "grouped_masked", "groups": g, "m": m, "n": n, "k": k})
    if "k_grouped" in layouts:
        for (g, m, n, ks, ek) in k_grouped_problems():
            plan.append({"layout": "k_grouped", "groups": g, "m": m, "n": n, "k": sum(ks), "ks": ks, "expected_k": ek})
    return plan


def _finish_grouped(rec, flops):
    us = rec["us"]
    rec["tflops"] = {name: flops / t / 1e6 for name, t in us.items() if t}
    ours, theirs = us.get("finegemm"), us.get("torch_grouped_mm")
    rec["speedup_vs_torch_grouped_mm"] = theirs / ours if ours and theirs else None
    return rec


def bench_grouped_contiguous(g, ms, n, k, gen, num_tests, *, device="cuda", timer=None, ref_flops=REF_FLOPS,
                             b_kn=False):
    """m_grouped_bf16_gemm_nt_contiguous vs torch._grouped_mm (2-D x 3-D, offs = padded segment ends);
    with b_kn the nn form (B stored [G, K, N], for both contenders)."""
    import finegemm
    from finegemm import reference

    from .grouped import contiguous_group_ids
    from finegemm.testing import calc_diff

    align_m = finegemm.get_mk_alignment_for_contiguous_layout()
    padded = [finegemm.align(m, align_m) for m in ms]
    m_total = sum(padded)
    valid, row = [], 0
    for m, p in zip(ms, padded):
        valid += range(row, row + m)
        row += p
    layout = torch.tensor(contiguous_group_ids(ms, align_m), dtype=torch.int32, device=device)
    a = torch.randn(m_total, k, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(g, n, k, device=device, dtype=torch.bfloat16, generator=gen)
    b_kn = b.transpose(1, 2).contiguous() if b_kn else None  # the nn storage, made outside the timed calls
    d = torch.empty(m_total, n, device=device, dtype=torch.bfloat16)
    rec = {"layout": "grouped_contiguous" if b_kn is None else "grouped_contiguous_nn", "groups": g, "m": sum(ms),
           "m_padded": m_total, "n": n, "k": k, "us": {}, "calc_diff": None}

    def ours():
        if b_kn is None:
            finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
        else:
            finegemm.m_grouped_bf16_gemm_nn_contiguous(a, b_kn, d, layout)

    rows = [valid[i] for i in sample_rows(len(valid), 2.0 * n * k, ref_flops)]
    rec["calc_diff_rows"] = len(rows)
    idx = torch.tensor(rows, dtype=torch.long, device=device)
    ref = None
    try:
        d.fill_(float("nan"))
        ours()
        sync(device)
        rec["all_written"] = bool(not torch.isnan(d).any().item())
        ref = reference.m_grouped_bf16_gemm_nt_contiguous(a[idx], b, layout[idx], out_dtype=torch.float32)
        rec["calc_diff"] = calc_diff(d[idx], ref)
    except Exception as exc:
        rec.setdefault("errors", {})["finegemm_check"] = error_text(exc)
    order = []  # (name, fn) as timed, for the reverse round
    time_into(rec, "finegemm", ours, num_tests, timer, order)
    offs = torch.tensor([sum(padded[:i + 1]) for i in range(g)], dtype=torch.int32, device=device)
    bt = b.transpose(1, 2) if b_kn is None else b_kn

    def theirs():
        return torch._grouped_mm(a, bt, offs=offs)

    rec["torch_op"] = (f"torch._grouped_mm(A [M, K], {'B^T' if b_kn is None else 'B row-major'} [G, K, N], "
                       f"offs=padded segment ends)")
    if time_into(rec, "torch_grouped_mm", theirs, num_tests, timer, order) and ref is not None:
        try:
            rec["calc_diff_torch_grouped_mm"] = calc_diff(theirs()[idx], ref)
        except Exception as exc:
            rec.setdefault("errors", {})["torch_grouped_mm_check"] = error_text(exc)
    reverse_round_if_long(rec, order, num_tests, timer)
    return _finish_grouped(rec, 2.0 * sum(ms) * n * k)


def bench_grouped_masked(g, m, n, k, gen, num_tests, *, device="cuda", timer=None, ref_flops=REF_FLOPS):
    """m_grouped_bf16_gemm_nt_masked (masked_m = m for every group, Mmax = align(m, 128)) vs
    torch._grouped_mm (3-D x 3-D over all Mmax rows: torch has no mask)."""
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    m_max = finegemm.align(m, 128)
    a = torch.randn(g, m_max, k, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(g, n, k, device=device, dtype=torch.bfloat16, generator=gen)
    masked_m = torch.full((g,), m, dtype=torch.int32, device=device)
    d = torch.empty(g, m_max, n, device=device, dtype=torch.bfloat16)
    rec = {"layout": "grouped_masked", "groups": g, "m": m, "m_max": m_max, "n": n, "k": k, "us": {},
           "calc_diff": None}

    def ours():
        finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m)

    rows = sample_rows(m, 2.0 * g * n * k, ref_flops)
    rec["calc_diff_rows"] = len(rows)
    idx = torch.tensor(rows, dtype=torch.long, device=device)
    ref = None
    try:
        d.fill_(float("nan"))
        ours()
        sync(device)
        rec["all_written"] = bool(not torch.isnan(d[:, :m]).any().item())
        sub_m = torch.full((g,), len(rows), dtype=torch.int32, device=device)
        ref = reference.m_grouped_bf16_gemm_nt_masked(a[:, idx], b, sub_m, out_dtype=torch.float32)
        rec["calc_diff"] = calc_diff(d[:, idx], ref)
    except Exception as exc:
        rec.setdefault("errors", {})["finegemm_check"] = error_text(exc)
    order = []
    time_into(rec, "finegemm", ours, num_tests, timer, order)
    bt = b.transpose(1, 2)

    def theirs():
        return torch._grouped_mm(a, bt)

    rec["torch_op"] = "torch._grouped_mm(A [G, Mmax, K], B^T [G, K, N]) (all Mmax rows)"
    if time_into(rec, "torch_grouped_mm", theirs, num_tests, timer, order) and ref is not None:
        try:
            rec["calc_diff_torch_grouped_mm"] = calc_diff(theirs()[:, idx], ref)
        except Exception as exc:
            rec.setdefault("errors", {})["torch_grouped_mm_check"] = error_text(exc)
    reverse_round_if_long(rec, order, num_tests, timer)
    return _finish_grouped(rec, 2.0 * g * m * n * k)


def bench_k_grouped_tn(g, m, n, ks, gen, num_tests, *, device="cuda", timer=None, ref_flops=REF_FLOPS):
    """k_grouped_bf16_gemm_tn_contiguous (fp32 d accumulated in place, c = d) vs torch._grouped_mm
    with offsets on K (2-D x 2-D, bf16 out, no accumulation)."""
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    sum_k = sum(ks)
    a = torch.randn(sum_k, m, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(sum_k, n, device=device, dtype=torch.bfloat16, generator=gen)
    ks_t = torch.tensor(ks, dtype=torch.int32, device=device)
    c0 = torch.randn(g, m, n, device=device, generator=gen)
    d = c0.clone()
    rec = {"layout": "k_grouped", "groups": g, "m": m, "n": n, "k": sum_k, "ks": list(ks), "us": {}, "calc_diff": None}
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    # Which CUDA path ran (A/B: set ops.sm90_bf16_gemm.K_GROUPED_SINGLE_LAUNCH = False for the v1 loop).
    rec["single_launch"] = bool(bf16_ops.K_GROUPED_SINGLE_LAUNCH)

    def ours():
        finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_t, c=d)

    rows = sample_rows(m, 2.0 * n * sum_k, ref_flops)
    rec["calc_diff_rows"] = len(rows)
    idx = torch.tensor(rows, dtype=torch.long, device=device)
    ref = None
    try:
        ours()
        sync(device)
        ref = reference.k_grouped_bf16_gemm_tn_contiguous(a[:, idx], b, ks)  # [G, rows, N], no C
        rec["calc_diff"] = calc_diff(d[:, idx], ref.double() + c0[:, idx].double())
    except Exception as exc:
        rec.setdefault("errors", {})["finegemm_check"] = error_text(exc)
    del c0
    order = []
    time_into(rec, "finegemm", ours, num_tests, timer, order)

    offs = torch.tensor([sum(ks[:i + 1]) for i in range(g)], dtype=torch.int32, device=device)
    candidates = [("torch._grouped_mm(A^T view [M, sum k], B [sum k, N], offs=K ends)", a.t())]
    errors = []
    for what, a_arg in candidates + [("torch._grouped_mm(A^T copied row-major [M, sum k], B, offs=K ends)", None)]:
        try:
            if a_arg is None:
                a_arg = a.t().contiguous()  # made once, outside the timed call
            out = torch._grouped_mm(a_arg, b, offs=offs)
            if tuple(out.shape) != (g, m, n):
                raise RuntimeError(f"output shape {tuple(out.shape)}, expected {(g, m, n)}")
            rec["torch_op"] = what
            if ref is not None:
                rec["calc_diff_torch_grouped_mm"] = calc_diff(out[:, idx], ref)
            del out
            time_into(rec, "torch_grouped_mm", lambda a_arg=a_arg: torch._grouped_mm(a_arg, b, offs=offs), num_tests,
                      timer, order)
            break
        except Exception as exc:
            errors.append(f"{what}: {error_text(exc, 250)}")
    if "torch_op" not in rec:
        rec.setdefault("errors", {})["torch_grouped_mm"] = " | ".join(errors)
        slices, off = [], 0
        for kg in ks:
            if kg:
                slices.append((a[off:off + kg], b[off:off + kg]))
            off += kg
        rec["torch_op"] = "torch.matmul(A_g^T, B_g) per group (bf16 out): torch._grouped_mm failed"
        time_into(rec, "torch_matmul_loop", lambda: [x.t() @ y for x, y in slices], num_tests, timer, order)
    reverse_round_if_long(rec, order, num_tests, timer)
    return _finish_grouped(rec, 2.0 * m * n * sum_k)


def _warmup_grouped(plan) -> None:
    """Compile/load the grouped records' kernels in parallel; failures are left to the timed calls."""
    try:
        import finegemm
        from finegemm.heuristics.sm90_bf16_gemm import GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED
        from finegemm.ops import sm90_bf16_gemm
    except Exception:
        return
    device = torch.cuda.current_device()
    align_m = finegemm.get_mk_alignment_for_contiguous_layout()
    jobs = []
    for r in plan:
        if r["layout"] in CONTIGUOUS_LAYOUTS:
            m_total = sum(finegemm.align(x, align_m) for x in r["ms"])
            nn = r["layout"] == "grouped_contiguous_nn"
            jobs.append(lambda r=r, mt=m_total, nn=nn: sm90_bf16_gemm.plan_grouped(
                GEMM_GROUPED_CONTIGUOUS, mt, r["n"], r["k"], r["groups"], 0, align_m, device, b_mn_major=nn))
        elif r["layout"] == "grouped_masked":
            jobs.append(lambda r=r: sm90_bf16_gemm.plan_grouped(
                GEMM_GROUPED_MASKED, finegemm.align(r["m"], 128), r["n"], r["k"], r["groups"], r["m"], 0, device))
        else:
            for kg in sorted(set(r["ks"])):
                if kg:
                    jobs.append(lambda r=r, kg=kg: sm90_bf16_gemm.warmup_shape(r["m"], r["n"], kg, "tn", True, True,
                                                                              device))

    def one(job):
        try:
            job()
        except Exception:
            pass

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, jobs))


def run_grouped(plan, gen, num_tests, *, device="cuda", timer=None, ref_flops=REF_FLOPS) -> list[dict]:
    """Run the grouped records of `plan`; one that fails outright is recorded with its error."""
    records = []
    for spec in plan:
        lay, g, m, n, k = spec["layout"], spec["groups"], spec["m"], spec["n"], spec["k"]
        kw = dict(device=device, timer=timer, ref_flops=ref_flops)
        try:
            if lay in CONTIGUOUS_LAYOUTS:
                rec = bench_grouped_contiguous(g, spec["ms"], n, k, gen, num_tests, b_kn=lay.endswith("_nn"), **kw)
            elif lay == "grouped_masked":
                rec = bench_grouped_masked(g, m, n, k, gen, num_tests, **kw)
            else:
                rec = bench_k_grouped_tn(g, m, n, spec["ks"], gen, num_tests, **kw)
        except Exception as exc:  # e.g. out of memory building the inputs
            rec = {**spec, "us": {}, "calc_diff": None, "error": error_text(exc, 600)}
        records.append(rec)
    return records


def grouped_summary(records) -> dict:
    """The issue target's geomean over GROUPED_LAYOUTS; the extra layouts' geomeans beside it;
    correctness lists over every grouped record."""
    recs = [r for r in records if r.get("layout") in GROUPED_LAYOUTS]
    every = [r for r in records if r.get("layout") in GROUPED_LAYOUTS + GROUPED_EXTRA_LAYOUTS]
    overall = geomean(r.get("speedup_vs_torch_grouped_mm") for r in recs)
    return {
        "geomean_speedup_vs_torch_grouped_mm": overall,
        "geomean_speedup_vs_torch_grouped_mm_by_layout": {
            lay: geomean(r.get("speedup_vs_torch_grouped_mm") for r in recs if r["layout"] == lay)
            for lay in GROUPED_LAYOUTS if any(r["layout"] == lay for r in recs)},
        "target": GROUPED_TARGET,
        "meets_target": None if overall is None else overall >= GROUPED_TARGET,
        "geomean_speedup_vs_torch_grouped_mm_extra": {
            lay: geomean(r.get("speedup_vs_torch_grouped_mm") for r in records if r.get("layout") == lay)
            for lay in GROUPED_EXTRA_LAYOUTS if any(r.get("layout") == lay for r in records)},
        "max_calc_diff": max((r["calc_diff"] for r in every if r.get("calc_diff") is not None), default=None),
        "not_fully_written": [(r["layout"], r["groups"], r["m"], r["n"], r["k"]) for r in every
                              if r.get("all_written") is False],
        "errors": [(r["layout"], r["groups"], r["m"], r["n"], r["k"], sorted(r.get("errors", {})) or r.get("error"))
                   for r in every if r.get("errors") or r.get("error")],
        "slower_than_torch_grouped_mm": [(r["layout"], r["groups"], r["m"], r["n"], r["k"]) for r in every
                                         if (r.get("speedup_vs_torch_grouped_mm") or 0) < 1.0],
    }


def _print_grouped(r) -> None:
    us = r["us"]
    theirs = us.get("torch_grouped_mm", us.get("torch_matmul_loop"))
    print(f"{r['layout']:>18} {r['groups']:>3} {r['m']:>6} {r['n']:>5} {r['k']:>6} | "
          f"{_fmt(us.get('finegemm'), '8.1f')} {_fmt(theirs, '8.1f')} | {_fmt(r.get('tflops', {}).get('finegemm'), '6.0f')} "
          f"{_fmt(r.get('speedup_vs_torch_grouped_mm'), '6.2f')} {_fmt(r.get('calc_diff'), '8.1e')} "
          f"{_fmt(r.get('calc_diff_rows'), '5d')}"
          + (f"  ERROR {r['error']}" if "error" in r else "")
          + (f"  errors: {sorted(r['errors'])}" if r.get("errors") else ""), flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finegemm bench bf16")
    p.add_argument("--out", default="benchmarks/results/bf16.json", help="JSON output path")
    p.add_argument("--num-tests", type=int, default=30)
    p.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=LAYOUTS,
                   help="dense layouts (give none for no dense records)")
    p.add_argument("--shapes", nargs="*", help="explicit M,N,K[,fp32] instead of the suite")
    p.add_argument("--grouped", action=argparse.BooleanOptionalAction, default=True,
                   help="grouped records (m-grouped contiguous/masked, k-grouped) vs torch._grouped_mm")
    p.add_argument("--grouped-layouts", nargs="*", default=list(GROUPED_LAYOUTS + GROUPED_EXTRA_LAYOUTS),
                   choices=GROUPED_LAYOUTS + GROUPED_EXTRA_LAYOUTS)
    p.add_argument("--ref-flops", type=float, default=REF_FLOPS,
                   help="fp64 reference budget (flops) per grouped record; larger records are checked exactly on "
                        "a seeded sample of output rows (calc_diff_rows says how many)")
    p.add_argument("--list", action="store_true", help="print the planned grouped records and exit (no GPU needed)")
    p.add_argument("--warm-ms", type=settle_ms_arg, default=0.0, help=WARM_HELP)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    plan = grouped_plan(args.grouped_layouts) if args.grouped else []
    if args.list:
        for r in plan:
            extra = {k: v for k, v in r.items() if k not in ("layout", "groups", "m", "n", "k")}
            print(f"{r['layout']:>18} G={r['groups']:<3} m={r['m']:<6} n={r['n']:<6} k={r['k']:<6} {extra or ''}")
        return 0

    set_clock_warmup(args.warm_ms)
    if not torch.cuda.is_available():
        print("bench bf16 needs a CUDA GPU")
        return 2
    from finegemm.ops import sm90_bf16_gemm

    if args.shapes:
        shapes = []
        for s in args.shapes:
            parts = s.split(",")
            shapes.append((int(parts[0]), int(parts[1]), int(parts[2]), len(parts) > 3 and parts[3] == "fp32"))
    else:
        shapes = bench_shapes()
    jobs = [(layout, *s) for s in shapes for layout in args.layouts]

    # Compile every kernel the shapes need up front, in parallel (nvcc is the slow part).
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda j: sm90_bf16_gemm.warmup_shape(j[1], j[2], j[3], j[0], j[4]), jobs))
    if plan:
        _warmup_grouped(plan)

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    records = []
    if jobs:
        print(f"{'lay':>3} {'M':>5} {'N':>6} {'K':>6} {'out':>4} | {'ours us':>8} {'torch us':>8} | "
              f"{'TFLOPS':>7} {'GB/s':>6} {'x torch':>7} {'diff':>8}")
    for (layout, m, n, k, out_fp32) in jobs:
        rec = bench_one(layout, m, n, k, out_fp32, gen, args.num_tests)
        records.append(rec)
        us = rec["us"]
        print(f"{layout:>3} {m:>5} {n:>6} {k:>6} {rec['out']:>4} | {_fmt(us.get('finegemm'), '8.2f')} "
              f"{_fmt(us.get('torch'), '8.2f')} | {_fmt(rec.get('tflops'), '7.0f')} {_fmt(rec.get('gbps'), '6.0f')} "
              f"{_fmt(rec.get('speedup_vs_torch'), '7.2f')} {_fmt(rec.get('calc_diff'), '8.1e')}"
              + (f"  ERROR {rec['error_finegemm']}" if "error_finegemm" in rec else ""), flush=True)

    summary = {
        "geomean_speedup_vs_torch": geomean(r.get("speedup_vs_torch") for r in records),
        "geomean_speedup_vs_torch_by_layout": {
            lay: geomean(r.get("speedup_vs_torch") for r in records if r["layout"] == lay) for lay in args.layouts},
        "max_calc_diff": max((r["calc_diff"] for r in records if r.get("calc_diff") is not None), default=None),
        "not_fully_written": [(r["layout"], r["m"], r["n"], r["k"]) for r in records if r.get("all_written") is False],
        "errors": [(r["layout"], r["m"], r["n"], r["k"]) for r in records if "error_finegemm" in r],
        "slower_than_torch": [(r["layout"], r["m"], r["n"], r["k"]) for r in records
                              if r.get("speedup_vs_torch", 0) < 1.0],
    }
    if plan:
        print(f"{'grouped layout':>18} {'G':>3} {'m':>6} {'N':>5} {'K':>6} | {'ours us':>8} {'torch us':>8} | "
              f"{'TFLOPS':>6} {'x torch':>6} {'diff':>8} {'rows':>5}")
        grouped = []
        for spec in plan:
            rec = run_grouped([spec], gen, args.num_tests, ref_flops=args.ref_flops)[0]
            _print_grouped(rec)
            grouped.append(rec)
            torch.cuda.empty_cache()
        summary["grouped"] = grouped_summary(grouped)
        records += grouped
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "suite": "bf16", "method": "kernel-only, torch profiler, 256 MB L2 flush "
           f"before each call, mean of {args.num_tests}", "warm_ms": args.warm_ms, "summary": summary,
           "records": records}
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0
