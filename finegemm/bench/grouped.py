"""`python -m finegemm bench grouped`: MoE and weight-gradient GEMMs — finegemm vs cuBLAS
blockwise (per group) vs torch bf16, on DeepGEMM's shape sets (anchors/h200.json), one run.

contiguous: G groups of m_g ~ U[0.7, 1.3] x expected rows (seeded), each segment padded to the
mk alignment with -1 rows, then whole alignments of rows moved between groups until the padded
rows equal the anchor's m_total (DeepGEMM's run): the same padded work, so the times compare;
masked: A [G, Mmax, K] with masked_m = m per group.
k_grouped: k_grouped_fp8_gemm_nt_contiguous, G groups of k_g ~ U[0.7, 1.3] x expected K rounded
up to 128 (seeded), 1x128 scales on both operands, fp32 D accumulated in place (c = d).
wgrad: dense fp8_gemm_nt with recipe (1, 1, 128), fp32 D accumulated in place (c = d).
Kernel-only times (profiler, L2 flushed); a contender that is not available records its error.
Records of 1 ms or more get a second round with the contenders in the reverse order and report
the means (us_rounds keeps both rounds: _common.reverse_round_if_long).
`--list` prints the planned records (shapes, drawn k_g) without a GPU.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random

import torch

from ._common import (
    REF_FLOPS,
    SETTLE_HELP,
    SETTLE_MS,
    error_text,
    fmt,
    geomean,
    load_anchors,
    reverse_round_if_long,
    run_metadata,
    sample_rows,
    WARM_HELP,
    set_clock_warmup,
    settle,
    settle_ms_arg,
    sync,
    time_into,
)
from .dense import DENSE_NK

GROUPED_NK = [(4096, 7168), (7168, 2048), (6144, 7168), (7168, 3072)]
CONTIGUOUS_GM = [(4, 8192), (8, 4096)]
MASKED_GM = [(1, 1024), (2, 512), (4, 256), (6, 1024), (32, 192), (32, 20)]
# k-grouped (MoE weight gradient): (G, M, N, expected k per group); k_g drawn by draw_ks.
K_GROUPED_GMNK = [(4, 4096, 7168, 8192), (8, 4096, 7168, 4096), (16, 7168, 2048, 2048)]
K_GROUPED_SEED = 0
# The draws walk DeepGEMM's six k-grouped test problems in order (one random.Random(seed)), as the
# anchors (anchors_h200.json k_grouped_wgrad) were drawn: the records get the anchors' exact k_g.
K_GROUPED_DRAW_ORDER = [(4, 4096, 7168, 8192), (4, 7168, 2048, 8192), (8, 4096, 7168, 4096),
                        (8, 7168, 2048, 4096), (16, 4096, 7168, 2048), (16, 7168, 2048, 2048)]
# Dense weight gradient, recipe (1, 1, 128): "dense" = (4096, N, K) over the dense (N, K) set;
# "anchor" = DeepGEMM's wgrad anchors (anchors_h200.json dense_wgrad_fp32_accumulate):
# (M, N, K) = (N_out, K_in, 4096 tokens).
WGRAD_M = 4096
WGRAD_SETS = ("dense", "anchor")
KINDS = ("contiguous", "masked", "k_grouped", "wgrad")
RECIPE_1D1D = (1, 1, 128)


def draw_ms(g: int, expected: int, rng: random.Random) -> list[int]:
    """Rows per group of a contiguous record: int(expected * U[0.7, 1.3]) each (rng advanced g times)."""
    return [int(expected * rng.uniform(0.7, 1.3)) for _ in range(g)]


def fit_ms_to_padded_total(ms: list[int], padded_total: int, alignment: int) -> list[int]:
    """ms with whole alignments of rows moved so that the padded rows sum to padded_total (a
    contiguous record then does the padded work of its anchor: DeepGEMM's m_total, so the times
    compare directly). Each step takes `alignment` rows from the largest group, or gives them to the
    smallest, so every group keeps its padding and the draws stay as even as they were; ms as drawn
    where the total already matches. ValueError where no such sizes exist (a total that is not a
    multiple of the alignment, or below one aligned segment per group)."""
    if alignment < 1 or padded_total % alignment or padded_total < len(ms) * alignment:
        raise ValueError(f"fit_ms_to_padded_total: {padded_total} rows cannot hold {len(ms)} segments aligned to "
                         f"{alignment}")
    out = list(ms)
    steps = (padded_total - sum(-(-m // alignment) * alignment for m in out)) // alignment
    while steps:
        if steps > 0:
            i = min(range(len(out)), key=lambda j: (out[j], j))
            out[i] += alignment
            steps -= 1
        else:
            i = max((j for j in range(len(out)) if out[j] > alignment), key=lambda j: (out[j], -j))
            out[i] -= alignment
            steps += 1
    return out


def contiguous_group_ids(ms: list[int], alignment: int) -> list[int]:
    """The per-row group ids of a contiguous layout: group i's ms[i] rows, then -1 up to the next
    multiple of `alignment` (where the next segment starts)."""
    ids = []
    for i, m in enumerate(ms):
        ids += [i] * m + [-1] * (-(-m // alignment) * alignment - m)
    return ids


def draw_ks(g: int, expected_k: int, rng: random.Random) -> list[int]:
    """K per group of a k-grouped record: expected_k * U[0.7, 1.3] rounded up to a multiple of 128."""
    return [-(-int(expected_k * rng.uniform(0.7, 1.3)) // 128) * 128 for _ in range(g)]


def k_grouped_problems(seed: int = K_GROUPED_SEED) -> list[tuple[int, int, int, list[int], int]]:
    """(G, M, N, ks, expected_k) of the k_grouped records (K_GROUPED_GMNK, in draw order): k_g drawn
    from one random.Random(seed) walking K_GROUPED_DRAW_ORDER."""
    rng = random.Random(seed)
    drawn = [(g, m, n, draw_ks(g, ek, rng), ek) for (g, m, n, ek) in K_GROUPED_DRAW_ORDER]
    return [p for p in drawn if (p[0], p[1], p[2], p[4]) in K_GROUPED_GMNK]


def wgrad_shapes(sets=WGRAD_SETS) -> list[tuple[str, int, int, int]]:
    """(set, M, N, K) of the wgrad records."""
    out = []
    if "dense" in sets:
        out += [("dense", WGRAD_M, n, k) for (n, k) in DENSE_NK]
    if "anchor" in sets:
        out += [("anchor", n, k, WGRAD_M) for (n, k) in DENSE_NK]
    return out


def _quantized_experts(g, n, k, gen):
    import finegemm

    b_bf16 = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    qs = [finegemm.per_block_cast_to_fp8(b_bf16[i]) for i in range(g)]
    return b_bf16, torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])


def _scaled_mm(a, sfa, b, sfb):
    return torch._scaled_mm(a, b.t(), scale_a=sfa, scale_b=sfb.t(), out_dtype=torch.bfloat16)


def _cublas_views(views):
    """Each group's (a, sfa, b, sfb) with sfa in the MN-major copy cuBLASLt reads, made once here
    (outside the timed loop, as the dense bench does): the contender is timed on its kernels only."""
    return [(a, sfa.t().contiguous().t(), b, sfb) for a, sfa, b, sfb in views]


def _time(rec, name, fn, num_tests, timer=None, order=None):
    # one missing contender must not hide the others (see _common.time_into)
    return time_into(rec, name, fn, num_tests, timer, order)


def bench_contiguous(g, ms, n, k, gen, num_tests):
    """ms: rows per group (contiguous_problems())."""
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    align_m = finegemm.get_mk_alignment_for_contiguous_layout()
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

    order = []  # (name, fn) as timed, for the reverse round of long records
    _time(rec, "finegemm", ours, num_tests, order=order)
    if "finegemm" in rec["us"]:
        ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, layout, out_dtype=torch.float32)
        rec["calc_diff"] = calc_diff(d.float(), ref)
    # cuBLASLt's blockwise kernels reject most drawn segment lengths (CUBLAS_STATUS_NOT_SUPPORTED,
    # e.g. M % 4 != 0): the loop runs each group's aligned segment (its padding rows included),
    # which is the work our kernel does too.
    views = _cublas_views([(a[s:s + p], sfa[s:s + p], b[i], sfb[i]) for i, (s, p) in enumerate(zip(starts, padded))])
    _time(rec, "cublas_blockwise_loop", lambda: [_scaled_mm(*v) for v in views], num_tests, order=order)
    offs = torch.tensor([sum(padded[:i + 1]) for i in range(g)], dtype=torch.int32, device="cuda")
    bt = b_bf16.transpose(1, 2)
    _time(rec, "torch_grouped_mm_bf16", lambda: torch._grouped_mm(a_bf16, bt, offs=offs), num_tests, order=order)
    reverse_round_if_long(rec, order, num_tests)
    return rec


def masked_inputs(g, m, n, k, gen):
    """A masked record's operands: A [G, Mmax = align(m, 128), K] bf16 and its per-token FP8 cast,
    the experts' B (_quantized_experts), masked_m = m for every group, an empty d [G, Mmax, N];
    returns (a_bf16, a, sfa, b, sfb, masked_m, d)."""
    import finegemm

    m_max = finegemm.align(m, 128)
    a_bf16 = torch.randn(g, m_max, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    qs = [finegemm.per_token_cast_to_fp8(a_bf16[i]) for i in range(g)]
    a = torch.stack([q for q, _ in qs])
    # Stacking makes the scales K-major; hand the kernel the MN-major TMA-aligned layout it reads
    # (what a quantizer for this kernel emits), so the timed call is the GEMM alone.
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.stack([s for _, s in qs]))
    _, b, sfb = _quantized_experts(g, n, k, gen)
    masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
    d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    return a_bf16, a, sfa, b, sfb, masked_m, d


def bench_masked(g, m, n, k, gen, num_tests):
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    _, a, sfa, b, sfb, masked_m, d = masked_inputs(g, m, n, k, gen)
    rec = {"kind": "masked", "groups": g, "m": m, "n": n, "k": k, "us": {}, "calc_diff": None}

    def ours():
        finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)

    order = []
    _time(rec, "finegemm", ours, num_tests, order=order)
    if "finegemm" in rec["us"]:
        ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m, out_dtype=torch.float32)
        rec["calc_diff"] = max(calc_diff(d[i, :m].float(), ref[i, :m]) for i in range(g))
    views = _cublas_views([(a[i, :m], sfa[i, :m], b[i], sfb[i]) for i in range(g)])
    _time(rec, "cublas_blockwise_loop", lambda: [_scaled_mm(*v) for v in views], num_tests, order=order)
    reverse_round_if_long(rec, order, num_tests)
    return rec


# ----------------------------------------------------------------------------- recipe (1, 1, 128)
def _rows_of(x, rows):
    """x[rows] for any dtype (fp8 gathered through a uint8 view: not every build indexes fp8)."""
    if x.element_size() == 1 and x.dtype != torch.uint8:
        return x.view(torch.uint8)[rows].view(x.dtype)
    return x[rows]


def _edge_index(size: int, span: int, device) -> torch.Tensor:
    """The first and the last `span` indices of range(size) (all when size <= 2 * span)."""
    if size <= 2 * span:
        return torch.arange(size, device=device)
    return torch.cat([torch.arange(span, device=device), torch.arange(size - span, size, device=device)])


def _blockwise_spot_check(out, a, sfa, b, sfb) -> float:
    """calc_diff of out's corner blocks (first/last 64 rows x first/last 256 columns) against the
    exact recipe (1, 1, 128) reference: a contender that reads the scales in another layout than
    it was given computes a wrong product without raising."""
    from finegemm import reference
    from finegemm.testing import calc_diff

    ri = _edge_index(a.shape[0], 64, a.device)
    ci = _edge_index(b.shape[0], 256, b.device)
    ref = reference.fp8_gemm_nt(_rows_of(a, ri), sfa[ri], _rows_of(b, ci), sfb[ci], out_dtype=torch.float32,
                                recipe=RECIPE_1D1D)
    return calc_diff(out[ri][:, ci].float(), ref)


def cublas_blockwise_1x128(a, sfa, b, sfb):
    """cuBLASLt blockwise 1x128 x 1x128 (both operands per-row scaled along K) through torch.

    a fp8 [M, K] (K-major), sfa fp32 [M, K/128] with strides (1, M) (MN-major); b fp8 [N, K],
    sfb fp32 [N, K/128] with strides (1, N). Tries, in order: torch.nn.functional.scaled_mm with
    ScalingType.BlockWise1x128 on both operands (torch >= 2.10; scales as given); the legacy
    torch._scaled_mm with scale_b [K/128, N] stored K-major (the form that works for 128x128
    weights), then stored N-major; fp32 output first, then bf16 for each. Scale copies are made
    here, once, outside the timed call. An attempt counts only if it runs and its output's corner
    blocks match the exact reference (calc_diff < 1e-4). Returns (fn, description) of the first
    that does, else raises RuntimeError listing every attempt.
    """
    attempts = []
    F = torch.nn.functional
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        bw = F.ScalingType.BlockWise1x128
        for od in (torch.float32, torch.bfloat16):
            attempts.append((f"F.scaled_mm(BlockWise1x128 x BlockWise1x128, output_dtype={od})",
                             lambda od=od: F.scaled_mm(a, b.t(), sfa, bw, sfb, bw, output_dtype=od)))
    sfb_kmajor = sfb.contiguous().t()  # [K/128, N], strides (1, K/128)
    sfb_nmajor = sfb.t()  # [K/128, N], strides (N, 1) for an MN-major sfb
    for label, scale_b in (("K-major", sfb_kmajor), ("N-major", sfb_nmajor)):
        for od in (torch.float32, torch.bfloat16):
            attempts.append((f"torch._scaled_mm(scale_a [M, K/128] MN-major, scale_b [K/128, N] {label}, "
                             f"out_dtype={od})",
                             lambda od=od, sb=scale_b: torch._scaled_mm(a, b.t(), scale_a=sfa, scale_b=sb,
                                                                        out_dtype=od)))
    errors = []
    for what, fn in attempts:
        try:
            out = fn()
            sync(a.device)
            if tuple(out.shape) != (a.shape[0], b.shape[0]):
                raise RuntimeError(f"output shape {tuple(out.shape)}")
            diff = _blockwise_spot_check(out, a, sfa, b, sfb)
            if not diff < 1e-4:
                raise RuntimeError(f"wrong result: calc_diff {diff:.2e} against the exact reference")
            return fn, what
        except Exception as exc:
            msg = " ".join(error_text(exc, 2000).split())
            errors.append(f"{what}: {msg if len(msg) <= 260 else msg[:130] + ' ... ' + msg[-130:]}")
    raise RuntimeError(" | ".join(errors) if errors else "no blockwise API")


def _tflops(rec, flops):
    rec["tflops"] = {name: flops / us / 1e6 for name, us in rec["us"].items() if us}


def k_grouped_inputs(m, n, ks, gen, device="cuda"):
    """The k-grouped problem, quantized 1x128 along K on both sides, plus its bf16 originals.

    Returns (a, sfa, b, sfb, a_bf16, b_bf16): a fp8 1-D (A_g [M, k_g] one after another), sfa
    fp32 [sum(ks)/128, M] (contiguous); b, sfb likewise with N; a_bf16 [M, sum(ks)] and b_bf16
    [N, sum(ks)] (group g's columns at its K offset).
    """
    import finegemm

    a_parts, b_parts, sfa_parts, sfb_parts, xa, xb = [], [], [], [], [], []
    for kg in ks:
        if kg == 0:
            continue
        x = torch.randn(m, kg, device=device, dtype=torch.bfloat16, generator=gen)
        w = torch.randn(n, kg, device=device, dtype=torch.bfloat16, generator=gen)
        qa, sa = finegemm.per_token_cast_to_fp8(x)
        qb, sb = finegemm.per_token_cast_to_fp8(w)
        a_parts.append(qa.reshape(-1).view(torch.uint8))
        b_parts.append(qb.reshape(-1).view(torch.uint8))
        sfa_parts.append(sa.t())  # [k_g/128, M]
        sfb_parts.append(sb.t())
        xa.append(x)
        xb.append(w)
    fp8 = torch.float8_e4m3fn
    a = torch.cat(a_parts).view(fp8)
    b = torch.cat(b_parts).view(fp8)
    sfa = torch.cat(sfa_parts).contiguous()
    sfb = torch.cat(sfb_parts).contiguous()
    a_bf16 = torch.cat(xa, dim=1)
    b_bf16 = torch.cat(xb, dim=1)
    return a, sfa, b, sfb, a_bf16, b_bf16


def k_grouped_tn_operand(flat: torch.Tensor, cols: int, ks) -> torch.Tensor:
    """The nt layout's groups (X_g [cols, k_g] flattened one after another) as DeepGEMM's tn operand
    [sum(ks), cols], group g's k_g rows after group g-1's."""
    rows, start = [], 0
    for k in ks:
        rows.append(flat[cols * start:cols * (start + k)].view(cols, k).t())
        start += k
    return torch.cat(rows) if rows else flat.view(0, cols)


def _k_grouped_group_views(a, sfa, b, sfb, m, n, ks):
    """Per non-empty group: (g, A_g [M, k_g], sfa_g [M, k_g/128] MN-major, B_g, sfb_g)."""
    out = []
    a_off = b_off = kb_off = 0
    for g, kg in enumerate(ks):
        kb = kg // 128
        if kg:
            out.append((g, a[a_off:a_off + m * kg].view(m, kg), sfa[kb_off:kb_off + kb].t(),
                        b[b_off:b_off + n * kg].view(n, kg), sfb[kb_off:kb_off + kb].t()))
        a_off, b_off, kb_off = a_off + m * kg, b_off + n * kg, kb_off + kb
    return out


def k_grouped_reference_rows(a, sfa, b, sfb, m, n, ks, rows):
    """Exact (finegemm.reference, fp64) D_g = A_g @ B_g.T without C, fp32 [G, len(rows), N], on the
    output rows `rows` of every group (the same data: A_g's rows and sfa's columns gathered)."""
    from finegemm import reference

    if len(rows) == m:
        return reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n)
    idx = torch.tensor(rows, dtype=torch.long, device=a.device)
    parts = [_rows_of(a_g, idx).reshape(-1).view(torch.uint8) for _, a_g, _, _, _ in
             _k_grouped_group_views(a, sfa, b, sfb, m, n, ks)]
    a_sub = torch.cat(parts).view(a.dtype) if parts else a[:0]
    return reference.k_grouped_fp8_gemm_nt_contiguous(a_sub, sfa[:, idx], b, sfb, ks, len(rows), n)


def _k_grouped_path() -> str:
    """Which k-grouped implementation the record times (ops K_GROUPED_SINGLE_LAUNCH, for A/B runs)."""
    try:
        from finegemm.ops import sm90_fp8_gemm

        return "one_launch" if sm90_fp8_gemm.K_GROUPED_SINGLE_LAUNCH else "per_group"
    except Exception:
        return "unknown"


def bench_k_grouped(g, m, n, ks, gen, num_tests, *, expected_k=None, device="cuda", timer=None,
                    ref_flops=REF_FLOPS):
    """One k_grouped record: finegemm.k_grouped_fp8_gemm_nt_contiguous (fp32 d, c = d), a
    per-group cuBLAS blockwise 1x128 x 1x128 loop, and torch bf16 (torch._grouped_mm with K
    offsets, else a per-group matmul loop)."""
    import finegemm
    from finegemm.testing import calc_diff

    assert len(ks) == g
    sum_k = sum(ks)
    rec = {"kind": "k_grouped", "groups": g, "m": m, "n": n, "k": sum_k, "ks": list(ks), "expected_k": expected_k,
           "us": {}, "calc_diff": None, "contender_ops": {}, "finegemm_path": _k_grouped_path()}
    a, sfa, b, sfb, a_bf16, b_bf16 = k_grouped_inputs(m, n, ks, gen, device)
    ks_t = torch.tensor(ks, dtype=torch.int32, device=device)
    c0 = torch.randn(g, m, n, device=device, generator=gen)
    d = c0.clone()

    def ours():
        finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=d)

    # Correctness first (one call from d = c0), against the exact reference on the same data.
    rows = sample_rows(m, 2.0 * n * sum_k, ref_flops)
    rec["calc_diff_rows"] = len(rows)
    ref = None
    try:
        ours()
        sync(device)
        ref = k_grouped_reference_rows(a, sfa, b, sfb, m, n, ks, rows)
        idx = torch.tensor(rows, dtype=torch.long, device=device)
        rec["calc_diff"] = calc_diff(d[:, idx], ref.double() + c0[:, idx].double())
    except Exception as exc:
        rec.setdefault("errors", {})["finegemm_check"] = error_text(exc)
    del c0
    order = []  # (name, fn) as timed, for the reverse round of long records
    _time(rec, "finegemm", ours, num_tests, timer, order)
    _time_without_c(rec, lambda out: finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), out, ks, ks_t),
                    d, num_tests, timer, order)
    # DeepGEMM's SM90 layout of the same problem (A [sum(ks), M], B [sum(ks), N]): the function's
    # per-group K-major copies are timed with its GEMM (what a caller holding that layout pays).
    a_tn, b_tn = k_grouped_tn_operand(a, m, ks), k_grouped_tn_operand(b, n, ks)
    rec["contender_ops"]["finegemm_tn"] = "k_grouped_fp8_gemm_tn_contiguous, c = d (K-major copies + the same GEMM)"
    _time(rec, "finegemm_tn", lambda: finegemm.k_grouped_fp8_gemm_tn_contiguous((a_tn, sfa), (b_tn, sfb), d, ks, ks_t,
                                                                                 c=d), num_tests, timer, order)

    # cuBLAS blockwise, one call per non-empty group (no C: it cannot accumulate into fp32 D).
    views = _k_grouped_group_views(a, sfa, b, sfb, m, n, ks)
    try:
        fns, whats = [], []
        for _, a_g, sfa_g, b_g, sfb_g in views:
            fn, what = cublas_blockwise_1x128(a_g, sfa_g, b_g, sfb_g)
            fns.append(fn)
            whats.append(what)
        rec["contender_ops"]["cublas_blockwise_loop"] = " + ".join(sorted(set(whats))) + " per group"
        if ref is not None:
            idx = torch.tensor(rows, dtype=torch.long, device=device)
            outs = [fn() for fn in fns]
            rec.setdefault("calc_diff_contenders", {})["cublas_blockwise_loop"] = max(
                calc_diff(out[idx].float(), ref[gi]) for (gi, *_), out in zip(views, outs))
            del outs
        _time(rec, "cublas_blockwise_loop", lambda: [fn() for fn in fns], num_tests, timer, order)
    except Exception as exc:
        rec.setdefault("errors", {})["cublas_blockwise_loop"] = error_text(exc, 1500)
    del ref

    # torch bf16: one grouped call with offsets on K (2-D x 2-D), else a matmul per group.
    offs = torch.tensor([sum(ks[:i + 1]) for i in range(g)], dtype=torch.int32, device=device)
    b_t = b_bf16.t()  # [sum(ks), N], column-major

    def grouped_mm():
        return torch._grouped_mm(a_bf16, b_t, offs=offs)

    grouped_ok = False
    try:
        out = grouped_mm()
        if tuple(out.shape) != (g, m, n):
            raise RuntimeError(f"torch._grouped_mm returned shape {tuple(out.shape)}, expected {(g, m, n)}")
        del out
        rec["contender_ops"]["torch_grouped_mm_bf16"] = "torch._grouped_mm(A [M, sum k], B^T [sum k, N], offs=K ends)"
        grouped_ok = _time(rec, "torch_grouped_mm_bf16", grouped_mm, num_tests, timer, order)
    except Exception as exc:
        rec.setdefault("errors", {})["torch_grouped_mm_bf16"] = error_text(exc)
    if not grouped_ok:
        slices, off = [], 0
        for kg in ks:
            if kg:
                slices.append((a_bf16[:, off:off + kg], b_bf16[:, off:off + kg]))
            off += kg
        rec["contender_ops"]["torch_matmul_loop_bf16"] = "torch.matmul(A_g, B_g.T) per group, bf16 out"
        _time(rec, "torch_matmul_loop_bf16", lambda: [x @ w.t() for x, w in slices], num_tests, timer, order)
    reverse_round_if_long(rec, order, num_tests, timer)
    _tflops(rec, 2.0 * m * n * sum_k)
    return rec


def _time_without_c(rec, call, like, num_tests, timer, order=None) -> None:
    """Times `call(out)` into a fresh fp32 `out` like `like`, with no C: D = A B as cuBLAS computes
    it (it cannot accumulate into fp32 D), so "finegemm_no_c" vs "cublas_blockwise*" compares the
    same bytes (the accumulating call also reads C: up to 2x the output traffic at small K). `out`
    lives as long as the timed call (a reverse round times it again)."""
    out = torch.empty_like(like)
    rec["contender_ops"]["finegemm_no_c"] = "finegemm, same call with c=None (D = A B, no accumulation)"
    _time(rec, "finegemm_no_c", lambda: call(out), num_tests, timer, order)


def bench_wgrad(m, n, k, gen, num_tests, *, shape_set="dense", device="cuda", timer=None, ref_flops=REF_FLOPS):
    """One wgrad record: dense fp8_gemm_nt with recipe (1, 1, 128), fp32 d accumulated in place
    (c = d); cuBLAS blockwise 1x128 x 1x128; torch bf16 matmul."""
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    rec = {"kind": "wgrad", "set": shape_set, "groups": 1, "m": m, "n": n, "k": k, "us": {}, "calc_diff": None,
           "contender_ops": {}}
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=gen)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=gen)
    a, sfa = finegemm.per_token_cast_to_fp8(x)  # sfa [M, K/128], MN-major (no copy per call)
    b, sfb = finegemm.per_token_cast_to_fp8(w)
    c0 = torch.randn(m, n, device=device, generator=gen)
    d = c0.clone()

    def ours():
        finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=RECIPE_1D1D)

    rows = sample_rows(m, 2.0 * n * k, ref_flops)
    rec["calc_diff_rows"] = len(rows)
    idx = torch.tensor(rows, dtype=torch.long, device=device)
    ref = None
    try:
        ours()
        sync(device)
        a_rows = a if len(rows) == m else _rows_of(a, idx)
        sfa_rows = sfa if len(rows) == m else sfa[idx]
        ref = reference.fp8_gemm_nt(a_rows, sfa_rows, b, sfb, out_dtype=torch.float32, recipe=RECIPE_1D1D)
        rec["calc_diff"] = calc_diff(d[idx], ref.double() + c0[idx].double())
    except Exception as exc:
        rec.setdefault("errors", {})["finegemm_check"] = error_text(exc)
    del c0
    order = []
    _time(rec, "finegemm", ours, num_tests, timer, order)
    _time_without_c(rec, lambda out: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), out, recipe=RECIPE_1D1D), d, num_tests,
                    timer, order)
    try:
        fn, what = cublas_blockwise_1x128(a, sfa, b, sfb)
        rec["contender_ops"]["cublas_blockwise"] = what
        if ref is not None:
            rec.setdefault("calc_diff_contenders", {})["cublas_blockwise"] = calc_diff(fn()[idx].float(), ref)
        _time(rec, "cublas_blockwise", fn, num_tests, timer, order)
    except Exception as exc:
        rec.setdefault("errors", {})["cublas_blockwise"] = error_text(exc, 1500)
    del ref
    rec["contender_ops"]["torch_bf16"] = "x @ w.T (bf16 out)"
    _time(rec, "torch_bf16", lambda: x @ w.t(), num_tests, timer, order)
    reverse_round_if_long(rec, order, num_tests, timer)
    _tflops(rec, 2.0 * m * n * k)
    return rec


def _warmup_1d1d(problems, device=None) -> None:
    """Compile/load the recipe (1, 1, 128) kernels of (m, n, k, has_c) problems in parallel (nvcc
    is the slow part; a failure here is left for the timed call to record)."""
    import concurrent.futures

    try:
        from finegemm.ops import sm90_fp8_gemm
    except Exception:
        return

    def one(p):
        try:
            sm90_fp8_gemm.warmup_shape(p[0], p[1], p[2], True, p[3], device, one_d_one_d=True)
        except Exception:
            pass

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, sorted(set(problems))))


def planned_1d1d_problems(kinds=KINDS, wgrad_sets=WGRAD_SETS) -> list[tuple[int, int, int, bool]]:
    """(m, n, k, has_c) of every dense recipe (1, 1, 128) launch the k_grouped and wgrad records make
    (k-grouped: the per-group path's launches, one per non-empty group, with c since c = d; the
    one-launch path compiles its own kernel at the record's correctness call; wgrad: c = d and the
    finegemm_no_c timing)."""
    out = []
    if "k_grouped" in kinds:
        for (_g, m, n, ks, _ek) in k_grouped_problems():
            out += [(m, n, kg, True) for kg in ks if kg]
    if "wgrad" in kinds:
        out += [(m, n, k, has_c) for (_s, m, n, k) in wgrad_shapes(wgrad_sets) for has_c in (True, False)]
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finegemm bench grouped")
    p.add_argument("--out", default="benchmarks/results/grouped.json")
    p.add_argument("--num-tests", type=int, default=10)
    p.add_argument("--settle-ms", type=settle_ms_arg, default=SETTLE_MS, help=SETTLE_HELP)
    p.add_argument("--warm-ms", type=settle_ms_arg, default=0.0, help=WARM_HELP)
    p.add_argument("--kinds", nargs="*", default=list(KINDS), choices=KINDS)
    p.add_argument("--wgrad-sets", nargs="*", default=list(WGRAD_SETS), choices=WGRAD_SETS,
                   help="wgrad shapes: dense = (4096, N, K) over the dense (N, K) set; anchor = DeepGEMM's "
                        "wgrad anchors (N_out, K_in, 4096)")
    p.add_argument("--ref-flops", type=float, default=REF_FLOPS,
                   help="fp64 reference budget (flops) per k_grouped / wgrad record; larger records are checked "
                        "exactly on a seeded sample of output rows (calc_diff_rows says how many)")
    p.add_argument("--list", action="store_true", help="print the planned records and exit (no GPU needed)")
    return p


def contiguous_problems(alignment: int = 128) -> list[tuple]:
    """(G, expected m, N, K, rows per group) of the contiguous records, in run order: draw_ms from
    one random.Random(0), fitted to the anchor's m_total where the anchors have the shape
    (fit_ms_to_padded_total; the anchors' totals are padded to 128, the library's mk alignment)."""
    rng = random.Random(0)
    totals = {(r["groups"], r["expected_m_per_group"], r["n"], r["k"]): r.get("m_total")
              for r in load_anchors().get("m_grouped_contiguous", [])}
    out = []
    for (g, m) in CONTIGUOUS_GM:
        for (n, k) in GROUPED_NK:
            ms = draw_ms(g, m, rng)
            total = totals.get((g, m, n, k))
            out.append((g, m, n, k, fit_ms_to_padded_total(ms, total, alignment) if total else ms))
    return out


def plan_records(kinds=KINDS, wgrad_sets=WGRAD_SETS) -> list[dict]:
    """The records a run makes, in run order, as parameter dicts (no tensors, no GPU): contiguous
    (with the segment sizes the run draws), masked, k_grouped (with the drawn k_g), wgrad."""
    plan = []
    if "contiguous" in kinds:
        for (g, m, n, k, ms) in contiguous_problems():
            plan.append({"kind": "contiguous", "groups": g, "m": m, "n": n, "k": k, "ms": ms})
    for (g, m) in (MASKED_GM if "masked" in kinds else []):
        for (n, k) in GROUPED_NK:
            plan.append({"kind": "masked", "groups": g, "m": m, "n": n, "k": k})
    if "k_grouped" in kinds:
        for (g, m, n, ks, ek) in k_grouped_problems():
            plan.append({"kind": "k_grouped", "groups": g, "m": m, "n": n, "k": sum(ks), "ks": ks, "expected_k": ek})
    if "wgrad" in kinds:
        for (shape_set, m, n, k) in wgrad_shapes(wgrad_sets):
            plan.append({"kind": "wgrad", "set": shape_set, "groups": 1, "m": m, "n": n, "k": k})
    return plan


_NEW_CONTENDERS = {"k_grouped": ("cublas_blockwise_loop", ("torch_grouped_mm_bf16", "torch_matmul_loop_bf16")),
                   "wgrad": ("cublas_blockwise", ("torch_bf16",))}


def _attach_new_kind_anchors(rec, anchors) -> None:
    us = rec["us"]
    ours = us.get("finegemm")
    cublas_name, bf16_names = _NEW_CONTENDERS[rec["kind"]]
    bf16_name = next((nm for nm in bf16_names if nm in us), None)
    rec["speedup_vs_cublas_blockwise"] = us[cublas_name] / ours if ours and us.get(cublas_name) else None
    no_c = us.get("finegemm_no_c")
    rec["speedup_vs_cublas_blockwise_no_c"] = us[cublas_name] / no_c if no_c and us.get(cublas_name) else None
    rec["speedup_vs_torch_bf16"] = us[bf16_name] / ours if ours and bf16_name else None
    rec["speedup_vs_deepgemm"] = None
    if rec["kind"] == "k_grouped":
        a = {(r["groups"], r["m"], r["n"]): r for r in anchors.get("k_grouped_wgrad", [])}.get(
            (rec["groups"], rec["m"], rec["n"]))
        if a:
            dg_tf, dg_us = a.get("tflops", {}).get("deepgemm_2_6_1"), a.get("us", {}).get("deepgemm_2_6_1")
            rec["deepgemm_anchor_tflops"] = dg_tf
            rec["deepgemm_anchor_us"] = dg_us
            rec["goal_tflops"] = a.get("goal_tflops")
            rec["deepgemm_same_ks"] = a.get("ks") == rec.get("ks")
            mine = rec.get("tflops", {}).get("finegemm")
            if rec["deepgemm_same_ks"] and dg_us and ours:
                rec["speedup_vs_deepgemm"] = dg_us / ours  # the same problem: compare times
            elif dg_tf and mine:
                rec["speedup_vs_deepgemm"] = mine / dg_tf  # other k_g draws: compare TFLOPS
    else:
        a = {(r["m"], r["n"], r["k"]): r for r in anchors.get("dense_wgrad_fp32_accumulate", [])}.get(
            (rec["m"], rec["n"], rec["k"]))
        if a:
            dg = a.get("us", {}).get("deepgemm_2_6_1")
            rec["deepgemm_anchor_us"] = dg
            rec["goal_us"] = a.get("goal_us")
            if dg and ours:
                rec["speedup_vs_deepgemm"] = dg / ours


def _print_plan(plan) -> None:
    for r in plan:
        extra = {k: v for k, v in r.items() if k not in ("kind", "groups", "m", "n", "k")}
        print(f"{r['kind']:>10} G={r['groups']:<3} m={r['m']:<6} n={r['n']:<6} k={r['k']:<6} {extra if extra else ''}")


def _summary(records) -> dict:
    m_grouped = [r for r in records if r["kind"] in ("contiguous", "masked")]
    summary = {"geomean_speedup_vs_deepgemm": geomean(r.get("speedup_vs_deepgemm") for r in m_grouped)}
    for kind in ("k_grouped", "wgrad"):
        recs = [r for r in records if r["kind"] == kind]
        if not recs:
            continue
        summary[kind] = {
            "geomean_speedup_vs_deepgemm" + ("" if kind == "k_grouped" else "_anchor_set"):
                geomean(r.get("speedup_vs_deepgemm") for r in recs),
            "geomean_speedup_vs_cublas_blockwise": geomean(r.get("speedup_vs_cublas_blockwise") for r in recs),
            # like for like: our call without C against cuBLAS (which does not accumulate)
            "geomean_speedup_vs_cublas_blockwise_no_c": geomean(r.get("speedup_vs_cublas_blockwise_no_c")
                                                                for r in recs),
            "geomean_speedup_vs_torch_bf16": geomean(r.get("speedup_vs_torch_bf16") for r in recs),
            "geomean_tflops": geomean(r.get("tflops", {}).get("finegemm") for r in recs),
            "max_calc_diff": max((r["calc_diff"] for r in recs if r.get("calc_diff") is not None), default=None),
        }
    summary["errors"] = [(r["kind"], r["groups"], r["m"], r["n"], r["k"], sorted(r.get("errors", {})))
                         for r in records if r.get("errors") or r.get("error")]
    return summary


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    plan = plan_records(args.kinds, args.wgrad_sets)
    if args.list:
        _print_plan(plan)
        return 0
    if not torch.cuda.is_available():
        print("bench grouped needs a CUDA GPU")
        return 2
    anchors = load_anchors()
    anchor_c = {(r["groups"], r["expected_m_per_group"], r["n"], r["k"]): r for r in anchors.get("m_grouped_contiguous", [])}
    anchor_m = {(r["groups"], r["expected_m_per_group"], r["n"], r["k"]): r for r in anchors.get("m_grouped_masked", [])}
    _warmup_1d1d(planned_1d1d_problems(args.kinds, args.wgrad_sets))
    set_clock_warmup(args.warm_ms)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    records = []
    for spec in plan:
        kind, g, m, n, k = spec["kind"], spec["groups"], spec["m"], spec["n"], spec["k"]
        settle(args.settle_ms)
        try:
            if kind == "contiguous":
                anchor = anchor_c.get((g, m, n, k), {})
                rec = bench_contiguous(g, spec["ms"], n, k, gen, args.num_tests)
                rec["deepgemm_anchor_us"] = anchor.get("us", {}).get("deepgemm")
                rec["anchor_m_total"] = anchor.get("m_total")
            elif kind == "masked":
                rec = bench_masked(g, m, n, k, gen, args.num_tests)
                rec["deepgemm_anchor_us"] = anchor_m.get((g, m, n, k), {}).get("us", {}).get("deepgemm")
            elif kind == "k_grouped":
                rec = bench_k_grouped(g, m, n, spec["ks"], gen, args.num_tests, expected_k=spec["expected_k"],
                                      ref_flops=args.ref_flops)
            else:
                rec = bench_wgrad(m, n, k, gen, args.num_tests, shape_set=spec["set"], ref_flops=args.ref_flops)
        except Exception as exc:  # e.g. out of memory building the inputs: record and go on
            rec = {**spec, "us": {}, "calc_diff": None, "error": error_text(exc, 600)}
        if kind in ("k_grouped", "wgrad") and "error" not in rec:
            _attach_new_kind_anchors(rec, anchors)
        records.append(rec)
        if kind in ("k_grouped", "wgrad"):
            torch.cuda.empty_cache()

    old = [r for r in records if r["kind"] in ("contiguous", "masked")]
    if old:
        print(f"{'kind':>10} {'G':>3} {'m':>6} {'N':>5} {'K':>5} | {'ours':>8} {'cuBLAS loop':>11} {'bf16 grp':>9} {'DG':>8} | {'x DG':>5} {'diff':>8}")
    for r in old:
        us = r["us"]
        ours, dg = us.get("finegemm"), r.get("deepgemm_anchor_us")
        r["speedup_vs_deepgemm"] = dg / ours if ours and dg else None
        print(f"{r['kind']:>10} {r['groups']:>3} {r['m']:>6} {r['n']:>5} {r['k']:>5} | {fmt(ours):>8} "
              f"{fmt(us.get('cublas_blockwise_loop')):>11} {fmt(us.get('torch_grouped_mm_bf16')):>9} {fmt(dg):>8} | "
              f"{fmt(r['speedup_vs_deepgemm']):>5} {r['calc_diff'] if r.get('calc_diff') is not None else '-'}")
    new = [r for r in records if r["kind"] in ("k_grouped", "wgrad")]
    if new:
        print(f"{'kind':>10} {'G':>3} {'M':>6} {'N':>6} {'K':>6} | {'ours us':>8} {'cuBLAS':>8} {'bf16':>8} | "
              f"{'TFLOPS':>6} {'DG TF':>6} | {'x cuBLAS':>8} {'x bf16':>6} {'x DG':>5} | {'diff':>8} {'rows':>5}")
    for r in new:
        us = r["us"]
        cublas_name, bf16_names = _NEW_CONTENDERS[r["kind"]]
        bf16_us = next((us[nm] for nm in bf16_names if nm in us), None)
        dg_tf = r.get("deepgemm_anchor_tflops")
        if dg_tf is None and r.get("deepgemm_anchor_us") and r["kind"] == "wgrad":
            dg_tf = 2.0 * r["m"] * r["n"] * r["k"] / r["deepgemm_anchor_us"] / 1e6
        print(f"{r['kind']:>10} {r['groups']:>3} {r['m']:>6} {r['n']:>6} {r['k']:>6} | {fmt(us.get('finegemm')):>8} "
              f"{fmt(us.get(cublas_name)):>8} {fmt(bf16_us):>8} | {fmt(r.get('tflops', {}).get('finegemm'), '.0f'):>6} "
              f"{fmt(dg_tf, '.0f'):>6} | {fmt(r.get('speedup_vs_cublas_blockwise'), '.2f'):>8} "
              f"{fmt(r.get('speedup_vs_torch_bf16'), '.2f'):>6} {fmt(r.get('speedup_vs_deepgemm'), '.2f'):>5} | "
              f"{fmt(r.get('calc_diff'), '8.1e')} {fmt(r.get('calc_diff_rows'), 'd'):>5}"
              + (f"  ERROR {r['error']}" if "error" in r else "")
              + (f"  errors: {sorted(r['errors'])}" if r.get("errors") else ""))
    summary = _summary(records)
    print(json.dumps(summary, indent=1))
    out = {**run_metadata(), "suite": "grouped", "method": "kernel-only, torch profiler, 256 MB L2 flush before each "
           f"call, mean of {args.num_tests}", "settle_ms": args.settle_ms, "warm_ms": args.warm_ms,
           "summary": summary, "records": records}
    path = pathlib.Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0
