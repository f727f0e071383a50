"""`python -m finegemm bench grouped`: MoE GEMMs — finegemm vs cuBLAS blockwise per group vs
torch._grouped_mm (bf16), on DeepGEMM's shape sets (anchors/h200.json), one run.

contiguous: G groups of m_g ~ U[0.7, 1.3] x expected rows (seeded), each segment padded to the
mk alignment with -1 rows; masked: A [G, Mmax, K] with masked_m = m per group.
Kernel-only times (profiler, L2 flushed); a contender that is not available records its error.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random

import torch

from ._common import geomean, kernel_time_us, load_anchors, run_metadata

GROUPED_NK = [(4096, 7168), (7168, 2048), (6144, 7168), (7168, 3072)]
CONTIGUOUS_GM = [(4, 8192), (8, 4096)]
MASKED_GM = [(1, 1024), (2, 512), (4, 256), (6, 1024), (32, 192), (32, 20)]


def _quantized_experts(g, n, k, gen):
    import finegemm

    b_bf16 = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    qs = [finegemm.per_block_cast_to_fp8(b_bf16[i]) for i in range(g)]
    return b_bf16, torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])


def _scaled_mm(a, sfa, b, sfb):
    return torch._scaled_mm(a, b.t(), scale_a=sfa.t().contiguous().t(), scale_b=sfb.t(), out_dtype=torch.bfloat16)


def _time(rec, name, fn, num_tests):
    try:
        fn()
        rec["us"][name] = kernel_time_us(fn, num_tests)
    except Exception as exc:  # one missing contender must not hide the others
        rec.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"[:300]


def bench_contiguous(g, expected, n, k, gen, rng, num_tests):
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    align_m = finegemm.get_mk_alignment_for_contiguous_layout()
    ms = [int(expected * rng.uniform(0.7, 1.3)) for _ in range(g)]
    padded = [finegemm.align(m, align_m) for m in ms]
    m_total = sum(padded)
    layout = torch.full((m_total,), -1, dtype=torch.int32, device="cuda")
    starts, row = [], 0
    for i, (m, p) in enumerate(zip(ms, padded)):
        layout[row:row + m] = i
        starts.append(row)
        row += p
    a_bf16 = torch.randn(m_total, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    a, sfa = finegemm.per_token_cast_to_fp8(a_bf16)
    b_bf16, b, sfb = _quantized_experts(g, n, k, gen)
    d = torch.empty(m_total, n, device="cuda", dtype=torch.bfloat16)
    rec = {"kind": "contiguous", "groups": g, "m": sum(ms), "m_padded": m_total, "n": n, "k": k, "us": {},
           "calc_diff": None, "padding_waste": 1 - sum(ms) / m_total}

    def ours():
        finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout)

    _time(rec, "finegemm", ours, num_tests)
    if "finegemm" in rec["us"]:
        ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, layout, out_dtype=torch.float32)
        rec["calc_diff"] = calc_diff(d.float(), ref)
    views = [(a[s:s + m], sfa[s:s + m], b[i], sfb[i]) for i, (s, m) in enumerate(zip(starts, ms))]
    _time(rec, "cublas_blockwise_loop", lambda: [_scaled_mm(*v) for v in views], num_tests)
    offs = torch.tensor([sum(padded[:i + 1]) for i in range(g)], dtype=torch.int32, device="cuda")
    bt = b_bf16.transpose(1, 2)
    _time(rec, "torch_grouped_mm_bf16", lambda: torch._grouped_mm(a_bf16, bt, offs=offs), num_tests)
    return rec


def bench_masked(g, m, n, k, gen, num_tests):
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    m_max = finegemm.align(m, 128)
    a_bf16 = torch.randn(g, m_max, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    qs = [finegemm.per_token_cast_to_fp8(a_bf16[i]) for i in range(g)]
    a = torch.stack([q for q, _ in qs])
    sfa = torch.stack([s for _, s in qs])
    b_bf16, b, sfb = _quantized_experts(g, n, k, gen)
    masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
    d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    rec = {"kind": "masked", "groups": g, "m": m, "n": n, "k": k, "us": {}, "calc_diff": None}

    def ours():
        finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)

    _time(rec, "finegemm", ours, num_tests)
    if "finegemm" in rec["us"]:
        ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m, out_dtype=torch.float32)
        rec["calc_diff"] = max(calc_diff(d[i, :m].float(), ref[i, :m]) for i in range(g))
    views = [(a[i, :m], sfa[i, :m], b[i], sfb[i]) for i in range(g)]
    _time(rec, "cublas_blockwise_loop", lambda: [_scaled_mm(*v) for v in views], num_tests)
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m finegemm bench grouped")
    p.add_argument("--out", default="benchmarks/results/grouped.json")
    p.add_argument("--num-tests", type=int, default=10)
    p.add_argument("--kinds", nargs="*", default=["contiguous", "masked"], choices=["contiguous", "masked"])
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench grouped needs a CUDA GPU")
        return 2
    anchors = load_anchors()
    anchor_c = {(r["groups"], r["expected_m_per_group"], r["n"], r["k"]): r for r in anchors.get("m_grouped_contiguous", [])}
    anchor_m = {(r["groups"], r["expected_m_per_group"], r["n"], r["k"]): r for r in anchors.get("m_grouped_masked", [])}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    rng = random.Random(0)
    records = []
    for (g, m) in (CONTIGUOUS_GM if "contiguous" in args.kinds else []):
        for (n, k) in GROUPED_NK:
            rec = bench_contiguous(g, m, n, k, gen, rng, args.num_tests)
            rec["deepgemm_anchor_us"] = anchor_c.get((g, m, n, k), {}).get("us", {}).get("deepgemm")
            records.append(rec)
    for (g, m) in (MASKED_GM if "masked" in args.kinds else []):
        for (n, k) in GROUPED_NK:
            rec = bench_masked(g, m, n, k, gen, args.num_tests)
            rec["deepgemm_anchor_us"] = anchor_m.get((g, m, n, k), {}).get("us", {}).get("deepgemm")
            records.append(rec)
    print(f"{'kind':>10} {'G':>3} {'m':>6} {'N':>5} {'K':>5} | {'ours':>8} {'cuBLAS loop':>11} {'bf16 grp':>9} {'DG':>8} | {'x DG':>5} {'diff':>8}")
    for r in records:
        us = r["us"]
        ours, dg = us.get("finegemm"), r.get("deepgemm_anchor_us")
        r["speedup_vs_deepgemm"] = dg / ours if ours and dg else None
        fmt = lambda v: f"{v:.1f}" if isinstance(v, (int, float)) else "-"
        print(f"{r['kind']:>10} {r['groups']:>3} {r['m']:>6} {r['n']:>5} {r['k']:>5} | {fmt(ours):>8} "
              f"{fmt(us.get('cublas_blockwise_loop')):>11} {fmt(us.get('torch_grouped_mm_bf16')):>9} {fmt(dg):>8} | "
              f"{fmt(r['speedup_vs_deepgemm']):>5} {r['calc_diff'] if r['calc_diff'] is not None else '-'}")
    summary = {"geomean_speedup_vs_deepgemm": geomean(r["speedup_vs_deepgemm"] for r in records)}
    out = {**run_metadata(), "suite": "grouped", "summary": summary, "records": records}
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0
