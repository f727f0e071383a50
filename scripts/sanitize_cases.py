"""A few small calls of every validated GPU kernel, for compute-sanitizer (memcheck, racecheck,
synccheck): `compute-sanitizer --tool memcheck python3 scripts/sanitize_cases.py`.

Small shapes on purpose (the tools slow kernels down 10-100x) that still reach the edge paths:
partial tiles in M, N and K, split-K fix-up, 2-CTA multicast, TMA-store and direct epilogues,
grouped padding rows and masked rows. Exits non-zero if a result is wrong.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finegemm  # noqa: E402
from finegemm import reference  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402


def _fp8_dense(m, n, k, out=torch.bfloat16):
    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n, device="cuda", dtype=out)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    return calc_diff(d.float(), reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32))


def _fp8_masked(g, m_max, n, k):
    qs = [finegemm.per_token_cast_to_fp8(torch.randn(m_max, k, device="cuda")) for _ in range(g)]
    a, sfa = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    ws = [finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda")) for _ in range(g)]
    b, sfb = torch.stack([w for w, _ in ws]), torch.stack([s for _, s in ws])
    masked_m = torch.randint(0, m_max + 1, (g,), dtype=torch.int32, device="cuda")
    d = torch.zeros(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m_max)
    ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m, out_dtype=torch.float32)
    return calc_diff(d.float(), ref)


def _masked_forced_tile(family, bn, tma=True, serial_halves=False):
    """A masked call on a forced tile: block_m 192 (three consumer warpgroups), or with serial_halves
    (FP8) block_m 128 with block_n > 208 half-promoted serially. Mmax 256 (the second m-block's A
    box runs past each group's rows), masked_m cutting a warpgroup, 0 and Mmax."""
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.heuristics import sm90_fp8_gemm as h8
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    g, m_max, n, k, sms = 4, 256, 1000, 640, torch.cuda.get_device_properties(0).multi_processor_count
    masked_m = torch.tensor([256, 193, 70, 0], dtype=torch.int32, device="cuda")
    d = torch.zeros(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    if family == "bf16":
        a = torch.randn(g, m_max, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
        cfg = hb.make_grouped_config(hb.GEMM_GROUPED_MASKED, m_max, n, k, g, sms, 192, 0, 192, bn)
        ob.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 192, config=cfg)
        ref = reference.m_grouped_bf16_gemm_nt_masked(a, b, masked_m, out_dtype=torch.float32)
    else:
        qs = [finegemm.per_token_cast_to_fp8(torch.randn(m_max, k, device="cuda")) for _ in range(g)]
        a, sfa = torch.stack([q for q, _ in qs]), torch.stack([s_ for _, s_ in qs])
        ws = [finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda")) for _ in range(g)]
        b, sfb = torch.stack([w for w, _ in ws]), torch.stack([s_ for _, s_ in ws])
        bm = 128 if serial_halves else 192
        cfg = h8.make_grouped_config(h8.GEMM_GROUPED_MASKED, m_max, n, k, g, sms, 192, 0, bm, bn,
                                     h8.max_stages(bm, bn, tma), 1, tma, half_promote=serial_halves)
        o8.m_grouped_fp8_gemm_nt_masked(a, finegemm.get_mn_major_tma_aligned_tensor(sfa), b, sfb, d, masked_m, 192,
                                        config=cfg)
        ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m, out_dtype=torch.float32)
    return calc_diff(d.float(), ref)


def _bf16(layout, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_in = a if layout[0] == "n" else a.t().contiguous()
    b_in = b if layout[1] == "t" else b.t().contiguous()
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    getattr(finegemm, f"bf16_gemm_{layout}")(a_in, b_in, d)
    return calc_diff(d.float(), a.float() @ b.float().t())


def _bf16_tile(layout, m, n, k, bm, bn, splits, out_fp32, multicast=None):
    """A BF16 layout on a forced tile (heuristics.make_config), e.g. the 32-column N-major B tiles;
    multicast "a" / "b": a 2-CTA pair sharing that operand. The prepared call skips the API's
    checks: an M-major A needs 2 M bytes % 16 == 0 (TMA)."""
    from finegemm.heuristics import sm90_bf16_gemm as heur
    from finegemm.ops import sm90_bf16_gemm as ops

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_in = a if layout[0] == "n" else a.t().contiguous()
    b_in = b if layout[1] == "t" else b.t().contiguous()
    d = torch.empty(m, n, device="cuda", dtype=torch.float32 if out_fp32 else torch.bfloat16)
    a_mn, b_mn = heur.LAYOUTS[layout]
    cfg = heur.make_config(m, n, k, finegemm.get_num_sms(), a_mn, b_mn, out_fp32, False, bm, bn, splits,
                           num_multicast=2 if multicast else 1, multicast_on_a=multicast == "a")
    ops.prepare(a_in, b_in, d, None, layout, config=cfg)()
    return calc_diff(d.float(), a.float() @ b.float().t())


def _fp8_wgrad(m, n, k):
    """Recipe (1, 1, 128), fp32 d accumulated in place (c is d): the C-first epilogue pass."""
    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.randn(m, n, device="cuda")
    c0 = d.clone()
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d, recipe=(1, 1, 128))
    ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=c0, out_dtype=torch.float32, recipe=(1, 1, 128))
    return calc_diff(d, ref)


def _fp8_forced(m, n, k, **kw):
    """A tuner-only variant (two CTAs per SM, k-block batches) forced through the ops layer."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages
    from finegemm.ops import sm90_fp8_gemm as ops

    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    bn, splits, tma, cps, kbat = kw["bn"], kw["splits"], kw["tma"], kw["cps"], kw["kbat"]
    bm = kw.get("bm", 64)
    cfg = make_config(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count, False, False, bm, bn,
                      max_stages(bm, bn, tma, ctas_per_sm=cps), splits, 1, False, tma, ctas_per_sm=cps, k_batch=kbat)
    ops.prepare(a, sfa, b, sfb, d, config=cfg)()
    return calc_diff(d.float(), reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32))


def _fp8_tile(m, n, k, bm, bn, mc=1, on_a=False, tma=False, hp=False):
    """A forced bm128 tile: the scale warp (tiles straddling two scale blocks, multicast pairs), the
    wide bn224 loop that reads B scales from global, or (hp above bn208) the serial halves."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages
    from finegemm.ops import sm90_fp8_gemm as ops

    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cfg = make_config(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count, False, False, bm, bn,
                      min(4, max_stages(bm, bn, tma)), 1, mc, on_a, tma, half_promote=hp)
    ops.prepare(a, sfa, b, sfb, d, config=cfg)()
    return calc_diff(d.float(), reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32))


def wgrad_tile_config(m, n, k, bm, bn, mc, on_a, c_mode, half_promote=False, k_batch=1, sms=132):
    """The forced recipe (1, 1, 128) configuration of _fp8_wgrad_tile (scripts/precompile.py builds
    these too)."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    return make_config(m, n, k, sms, True, c_mode != "none", bm, bn, min(4, max_stages(bm, bn, True, True)), 1, mc,
                       on_a, True, one_d_one_d=True, half_promote=half_promote, k_batch=k_batch)


def _fp8_wgrad_tile(m, n, k, bm, bn, mc, on_a, c_mode, half_promote=False, k_batch=1):
    """Recipe (1, 1, 128) with a forced tile and the fp32 TMA epilogue: c None (TMA store), d
    itself (TMA reduce-add) or separate (the host keeps direct stores); optionally the
    half-promote or k-batch main loop."""
    from finegemm.ops import sm90_fp8_gemm as ops

    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
    c0 = torch.randn(m, n, device="cuda")
    d = c0.clone() if c_mode == "in_place" else torch.empty(m, n, device="cuda")
    c = {"none": None, "in_place": d, "sep": c0}[c_mode]
    cfg = wgrad_tile_config(m, n, k, bm, bn, mc, on_a, c_mode, half_promote, k_batch,
                            torch.cuda.get_device_properties(0).multi_processor_count)
    ops.prepare(a, sfa, b, sfb, d, c, (1, 1, 128), config=cfg)()
    ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=None if c is None else c0, out_dtype=torch.float32,
                                recipe=(1, 1, 128))
    return calc_diff(d, ref)


def wgrad_two_cta_config(m, n, k, bn, c_stage, sms=132):
    """block_m 64 for two CTAs per SM (the register split), c = d, direct epilogue, C staged or not
    (scripts/precompile.py builds these too)."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    st = min(4, max_stages(64, bn, False, True, 2, c_stage=c_stage))
    return make_config(m, n, k, sms, True, True, 64, bn, st, 1, 1, False, False, one_d_one_d=True, ctas_per_sm=2,
                       c_stage=c_stage)


def _fp8_wgrad_two_cta(m, n, k, bn, c_stage):
    """Two co-resident CTAs per SM accumulating in place (c = d): both CTAs' C stages, rings and
    epilogues share the SM; a grid of 2 x SMs with several tiles per CTA."""
    from finegemm.ops import sm90_fp8_gemm as ops

    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
    c0 = torch.randn(m, n, device="cuda")
    d = c0.clone()
    cfg = wgrad_two_cta_config(m, n, k, bn, c_stage, torch.cuda.get_device_properties(0).multi_processor_count)
    ops.prepare(a, sfa, b, sfb, d, d, (1, 1, 128), config=cfg)()
    ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=c0, out_dtype=torch.float32, recipe=(1, 1, 128))
    return calc_diff(d, ref)


# Two-CTA recipe (1, 1, 128) cases: (name, _fp8_wgrad_two_cta arguments); precompile.py builds them.
WGRAD_TWO_CTA = [
    ("fp8 wgrad two CTAs/SM bm64 bn128, C staged, c is d", (1000, 4000, 256, 128, True)),
    ("fp8 wgrad two CTAs/SM bm64 bn160, c is d (direct)", (1000, 4000, 256, 160, False)),
]


def _bf16_grouped_contiguous(ms, n, k, b_kn=False):
    """nt, or with b_kn nn (B stored [G, K, N] in a strided buffer: padded rows and groups)."""
    g = len(ms)
    a = torch.randn(sum(ms), k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    layout = torch.cat([torch.full((m,), i, dtype=torch.int32) for i, m in enumerate(ms)]).cuda()
    d = torch.empty(sum(ms), n, device="cuda", dtype=torch.bfloat16)
    if b_kn:
        ld, gap = n + 8, 64
        kn = torch.zeros(g * (k * ld + gap), device="cuda", dtype=torch.bfloat16).as_strided((g, k, n), (k * ld + gap, ld, 1))
        kn.copy_(b.transpose(1, 2))
        finegemm.m_grouped_bf16_gemm_nn_contiguous(a, kn, d, layout)
    else:
        finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    ref = torch.cat([a[sum(ms[:i]):sum(ms[:i + 1])].float() @ b[i].float().t() for i in range(g)])
    return calc_diff(d.float(), ref)


def _prepared_repeats():
    """The grouped calls' kept prepared launches (API fast path): each call repeated with the same
    tensors and new layout / masked_m values (FP8 contiguous plain and psum, BF16 contiguous, FP8 and
    BF16 masked), on the current stream and a side stream; the worst calc_diff."""
    from finegemm import quant

    g, n, k, rows = 3, 576, 512, 640
    x = torch.randn(rows, k, device="cuda").to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(x)
    w = torch.randn(g, n, k, device="cuda").to(torch.bfloat16)
    qs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g)]
    b, sfb = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    ids = torch.full((rows,), -1, dtype=torch.int32, device="cuda")
    ends = torch.zeros(g, dtype=torch.int32, device="cuda")
    d = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    worst, side = 0.0, torch.cuda.Stream()
    for rnd, ms in enumerate(([128, 0, 300], [1, 256, 129], [0, 0, 0], [200, 200, 100])):
        host, row, e = torch.full((rows,), -1, dtype=torch.int32), 0, []
        for i, m in enumerate(ms):
            host[row:row + m] = i
            e.append(row + m)
            row += finegemm.align(m, 128)
        ids.copy_(host)
        ends.copy_(torch.tensor(e, dtype=torch.int32))
        stream = side if rnd % 2 else torch.cuda.current_stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for call in (lambda: finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ids),
                         lambda: finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ends,
                                                                           use_psum_layout=True)):
                call()
                ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, host.cuda(), out_dtype=torch.float32)
                worst = max(worst, calc_diff(d.float(), ref))
            finegemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, ids)
            ref = reference.m_grouped_bf16_gemm_nt_contiguous(x, w, host.cuda(), out_dtype=torch.float32)
            worst = max(worst, calc_diff(d.float(), ref))
        torch.cuda.current_stream().wait_stream(stream)
    finegemm.check_errors()
    m_max = 192
    am, sfam = quant.per_token_cast_to_fp8(torch.randn(g * m_max, k, device="cuda").to(torch.bfloat16))
    am, sfam = am.view(g, m_max, k), finegemm.get_mn_major_tma_aligned_tensor(sfam.contiguous().view(g, m_max, -1))
    xm = torch.randn(g, m_max, k, device="cuda").to(torch.bfloat16)
    masked = torch.zeros(g, dtype=torch.int32, device="cuda")
    dm = torch.zeros(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    for values in ([192, 0, 17], [1, 100, 192], [0, 0, 0]):
        masked.copy_(torch.tensor(values, dtype=torch.int32))
        finegemm.m_grouped_fp8_gemm_nt_masked((am, sfam), (b, sfb), dm, masked, 100)
        ref = reference.m_grouped_fp8_gemm_nt_masked(am, sfam, b, sfb, masked, out_dtype=torch.float32)
        rows_ok = torch.arange(m_max, device="cuda")[None, :] < masked[:, None]
        worst = max(worst, calc_diff(dm[rows_ok].float(), ref[rows_ok]) if rows_ok.any() else 0.0)
        finegemm.m_grouped_bf16_gemm_nt_masked(xm, w, dm, masked, 100)
        ref = reference.m_grouped_bf16_gemm_nt_masked(xm, w, masked, out_dtype=torch.float32)
        worst = max(worst, calc_diff(dm[rows_ok].float(), ref[rows_ok]) if rows_ok.any() else 0.0)
    return worst


def _fp8_k_grouped(ks, m, n, with_c):
    """k-grouped (recipe (1, 1, 128)) in one launch: empty groups, partial tiles, c is d."""
    g, total = len(ks), sum(ks)
    a_parts = [finegemm.per_token_cast_to_fp8(torch.randn(m, kg, device="cuda")) for kg in ks if kg]
    b_parts = [finegemm.per_token_cast_to_fp8(torch.randn(n, kg, device="cuda")) for kg in ks if kg]
    a = torch.cat([q.reshape(-1) for q, _ in a_parts])
    b = torch.cat([q.reshape(-1) for q, _ in b_parts])
    sfa = torch.cat([s.t().contiguous() for _, s in a_parts])  # [sum(ks)/128, M]
    sfb = torch.cat([s.t().contiguous() for _, s in b_parts])
    d = torch.randn(g, m, n, device="cuda")
    c0 = d.clone()
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=d if with_c else None)
    ref = reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n, c=c0 if with_c else None)
    assert total == sum(ks)
    return calc_diff(d, ref)


def _k_major_copies(ks, cols_a, cols_b, pitch_pad):
    """The tn GEMM's K-major copies (grouped kernel where aligned, word kernel elsewhere): 0 when
    bitwise the torch transpose, 1 otherwise (so the calc_diff bound applies)."""
    from finegemm.ops.k_major_copy import k_major_copies

    items = []
    for cols in (cols_a, cols_b):
        buf = torch.randint(0, 255, (sum(ks), cols + pitch_pad), device="cuda", dtype=torch.uint8)
        items.append((buf[:, :cols].view(torch.float8_e4m3fn), cols))
    outs = k_major_copies(items, ks)
    for (x, cols), out in zip(items, outs):
        start, want = 0, []
        for k in ks:
            want.append(x[start:start + k].view(torch.uint8).t().reshape(-1))
            start += k
        if not torch.equal(out.view(torch.uint8), torch.cat(want)):
            return 1.0
    return 0.0


def _bf16_k_grouped(ks, m, n, mode="sep"):
    """One launch of the k-grouped kind: edge tiles (m, n not multiples of the tile), an empty group.
    mode "sep": C separate from d (direct epilogue; the empty group's tiles store C); "in_place":
    c is d (the fp32 TMA reduce-add); "none": no C (the fp32 TMA store)."""
    g = len(ks)
    a = torch.randn(sum(ks), -(-m // 8) * 8, device="cuda", dtype=torch.bfloat16)[:, :m]
    b = torch.randn(sum(ks), n, device="cuda", dtype=torch.bfloat16)
    c = torch.zeros(g, m, n, device="cuda") if mode == "none" else torch.randn(g, m, n, device="cuda")
    d = c.clone() if mode == "in_place" else torch.empty(g, m, n, device="cuda")
    finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"),
                                               c={"sep": c, "in_place": d, "none": None}[mode])
    offs = [sum(ks[:i]) for i in range(g)]
    ref = torch.stack([c[i] + a[o:o + k].float().t() @ b[o:o + k].float() for i, (o, k) in enumerate(zip(offs, ks))])
    return calc_diff(d, ref)


# Forced recipe (1, 1, 128) tiles: (name, _fp8_wgrad_tile arguments); scripts/precompile.py builds them.
WGRAD_TILES = [
    ("fp8 wgrad bm128 bn208 multicast B, TMA reduce-add", (300, 1000, 640, 128, 208, 2, False, "in_place")),
    ("fp8 wgrad bm128 bn128 multicast A, TMA store", (129, 1000, 640, 128, 128, 2, True, "none")),
    ("fp8 wgrad bm128 bn208 half-promote, TMA reduce-add", (300, 1000, 640, 128, 208, 1, False, "in_place", True)),
    ("fp8 wgrad bm128 bn128 k-batch 2 (odd k-block count), TMA store",
     (129, 600, 640, 128, 128, 1, False, "none", False, 2)),
    ("fp8 wgrad bm128 bn80 k-batch 4 multicast B, separate c (direct)",
     (300, 400, 896, 128, 80, 2, False, "sep", False, 4)),
    ("fp8 wgrad bm128 bn160 (column scales partly prefetched), TMA reduce-add",
     (300, 1000, 640, 128, 160, 1, False, "in_place")),
    ("fp8 wgrad bm128 bn176 multicast B (16 of 22 chunks' column scales prefetched), TMA reduce-add",
     (300, 1000, 640, 128, 176, 2, False, "in_place")),
    ("fp8 wgrad bm128 bn112 half-promote (7-chunk halves), TMA store",
     (129, 600, 640, 128, 112, 1, False, "none", True)),
    ("fp8 wgrad bm192 bn128 (three consumer WGs), TMA reduce-add", (385, 1000, 640, 192, 128, 1, False, "in_place")),
    ("fp8 wgrad bm192 bn144 half-promote, separate c (direct)", (200, 600, 384, 192, 144, 1, False, "sep", True)),
    ("fp8 wgrad bm64 bn176, separate c (direct)", (65, 600, 384, 64, 176, 1, False, "sep")),
]

def _contiguous_problem(rows, ids, g, n, k, family):
    """Random FP8 operands of an m-grouped contiguous call (rows of A, g groups) and the
    exact fp32 product of the family's call on per-row ids: (a, sfa, b, sfb, x, w, d, ref); x and w
    are A and B as bf16 (the BF16 call's operands)."""
    from finegemm import quant

    a, sfa = quant.per_token_cast_to_fp8(torch.randn(rows, k, device="cuda").to(torch.bfloat16))
    w = torch.randn(g, n, k, device="cuda").to(torch.bfloat16)
    qs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g)]
    b, sfb = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    d = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    x = a.to(torch.bfloat16)
    if family == "fp8":
        ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ids, out_dtype=torch.float32)
    else:
        ref = reference.m_grouped_bf16_gemm_nt_contiguous(x, w, ids, out_dtype=torch.float32)
    return a, sfa, b, sfb, x, w, d, ref


def _contiguous_layout_in_gemm(ms, n, k, family):
    """The contiguous GEMM (family "fp8" / "bf16") checking a plain layout itself (the shipped
    path): valid calls one-shot and kept, then a layout with an id past G and a misaligned
    run (reported, its out-of-range rows zeros), then a valid call again; the worst calc_diff of the
    valid calls."""
    from finegemm.api import _validate as _v
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8
    from finegemm.ops import contiguous_layout

    g = len(ms)
    rows = sum(finegemm.align(m, 128) for m in ms)
    host, row = torch.full((rows,), -1, dtype=torch.int32), 0
    for i, m in enumerate(ms):
        host[row:row + m] = i
        row += finegemm.align(m, 128)
    ids = host.cuda()
    a, sfa, b, sfb, x, w, d, ref = _contiguous_problem(rows, ids, g, n, k, family)

    def call(layout):
        if family == "fp8":
            finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout)
        else:
            finegemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, layout)

    api = grouped_fp8 if family == "fp8" else api_bf16
    saved = api._validated_contiguous
    api._validated_contiguous = _v.ValidatedCalls()
    assert contiguous_layout.checks_in_kernel(family, False), "the in-GEMM check is gated"
    worst = 0.0
    try:
        finegemm.check_errors()
        for _ in range(2):  # one-shot, then the kept launch
            call(ids)
            worst = max(worst, calc_diff(d.float(), ref))
        bad = ids.clone()
        bad[rows - 1] = g
        bad[383] = 2  # group 2 (rows 384..512) now starts off the alignment
        call(bad)
        try:
            finegemm.check_errors()
            worst = 1.0  # not reported
        except ValueError:
            pass
        if not bool((d[rows - 1] == 0).all()):
            worst = 1.0
        call(ids)
        worst = max(worst, calc_diff(d.float(), ref))
        finegemm.check_errors()
    finally:
        api._validated_contiguous = saved
    return worst


def _contiguous_psum_in_gemm(ms, n, k, alignment, family="fp8"):
    """The contiguous GEMM (family "fp8" / "bf16") reading psum ends itself (gate opened here) at an mk alignment:
    valid calls one-shot and kept (rows of no group zeros), then ends past M and decreasing ends
    (each reported, d written in full), then a valid call again; the worst calc_diff of the valid
    calls (1.0 for a broken rule not reported or a row left unwritten)."""
    import os

    from finegemm import quant
    from finegemm.api import _validate as _v
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8
    from finegemm.reference._common import psum_layout_to_group_ids

    quant.set_mk_alignment_for_contiguous_layout(alignment)
    os.environ[_v.ENABLE_UNVALIDATED_ENV] = "1"
    api = grouped_fp8 if family == "fp8" else api_bf16
    saved = api._validated_contiguous
    api._validated_contiguous = _v.ValidatedCalls()
    try:
        ends, row = [], 0
        for m in ms:
            row = (finegemm.align(row, alignment) if row else 0) + m
            ends.append(row)
        rows = finegemm.align(row, alignment) + alignment
        host = torch.tensor(ends, dtype=torch.int32)
        ids = psum_layout_to_group_ids(host, rows, alignment).cuda()
        g = len(ms)
        a, sfa, b, sfb, x, w, d, ref = _contiguous_problem(rows, ids, g, n, k, family)

        def call(layout):
            d.fill_(float("nan"))
            if family == "fp8":
                finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=True)
            else:
                finegemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, layout, use_psum_layout=True)

        worst = 0.0
        finegemm.check_errors()
        for _ in range(2):  # one-shot, then the kept launch
            call(host.cuda())
            worst = max(worst, calc_diff(d.float(), ref))
        for i, value in ((g - 1, rows + 1), (1, ends[0] - 1)):
            bad = host.clone()
            bad[i] = value
            call(bad.cuda())
            try:
                finegemm.check_errors()
                worst = 1.0  # not reported
            except ValueError:
                pass
            if bool(torch.isnan(d).any()):
                worst = 1.0
        call(host.cuda())
        worst = max(worst, calc_diff(d.float(), ref))
        finegemm.check_errors()
        return worst
    finally:
        api._validated_contiguous = saved
        os.environ.pop(_v.ENABLE_UNVALIDATED_ENV, None)
        quant.set_mk_alignment_for_contiguous_layout(128)


def _skip_head_mid_fused(m, heads, splits, k):
    """fp8_gemm_nt_skip_head_mid through the fused epilogue: the written columns against the
    reference, the gap of every head untouched (else a diff of 1)."""
    from finegemm.ops import sm90_fp8_gemm as o8

    left, mid, right = splits
    n = heads * (left + right)
    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.full((m, n + heads * mid), 3.0, device="cuda", dtype=torch.bfloat16)
    assert o8.prepare_skip_head_mid(a, sfa, b, sfb, d, splits) is not None, "not the fused path"
    finegemm.fp8_gemm_nt_skip_head_mid((a, sfa), (b, sfb), d, splits)
    packed = d.float().view(m, heads, left + mid + right)
    if not bool((packed[:, :, left:left + mid] == 3.0).all()):
        return 1.0
    ref = reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32).view(m, heads, left + right)
    got = torch.cat([packed[:, :, :left], packed[:, :, left + mid:]], dim=2)
    return calc_diff(got, ref)


def _fp8_einsum_heads_packed(batch, heads, r, n, pad_d, f32_c=False, sfa_mn_major=False):
    """fp8_einsum's heads-packed kernel (gate opened here): A read as [b, h*r], sfa gathered in
    place (sfa_mn_major: a [b, h, kb] view of an MN-major tensor), d written as [b, h*n] in place
    (bf16, or fp32 accumulating into itself: c = d); d's row padding untouched (else a diff of 1)."""
    import os

    from finegemm.ops import sm90_fp8_gemm as o8

    os.environ["FINEGEMM_ENABLE_UNVALIDATED"] = "1"
    try:
        a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(batch * heads, r, device="cuda"))
        a, sfa = a.view(batch, heads, r), sfa.view(batch, heads, -1)
        if sfa_mn_major:
            sfa = sfa.permute(2, 0, 1).contiguous().permute(1, 2, 0)
        ws = [finegemm.per_block_cast_to_fp8(torch.randn(n, r, device="cuda")) for _ in range(heads)]
        b, sfb = torch.stack([w for w, _ in ws]), torch.stack([s for _, s in ws])
        buf = torch.full((batch, heads * n + pad_d), 3.0, device="cuda",
                         dtype=torch.float32 if f32_c else torch.bfloat16)
        d = buf[:, :heads * n].view(batch, heads, n)
        c = d if f32_c else None
        if f32_c:
            d.copy_(torch.randn(batch, heads, n, device="cuda"))
        c0 = d.float().clone()
        assert o8.heads_packed_layouts(a, d, c), "not the heads-packed layouts"
        finegemm.fp8_einsum("bhr,hdr->bhd", (a, sfa), (b, sfb), d, c=c)
        if not bool((buf[:, heads * n:] == 3.0).all()):
            return 1.0
        ref = torch.stack([reference.fp8_gemm_nt(a[:, h], sfa[:, h], b[h], sfb[h], out_dtype=torch.float32)
                           for h in range(heads)], dim=1)
        if f32_c:
            ref = ref + c0
        return calc_diff(d.float(), ref)
    finally:
        del os.environ["FINEGEMM_ENABLE_UNVALIDATED"]


# B boxes over 2 or 4 k-blocks (b_group, NOTES v1.05): (name, family, problem and tile). FP8: (m, n,
# k, block_m, block_n, stages, splits, tma_store, group); BF16: (layout, m, n, k, block_m, block_n,
# stages, splits, out_fp32, group). Split clusters, partial M and N tiles, both stores.
B_GROUP_TILES = [
    ("fp8 b-groups of 4, split cluster bm64 bn64 x2, partial M", "fp8", (17, 1000, 7168, 64, 64, 8, 2, False, 4)),
    ("fp8 b-groups of 2, bm128 bn128 TMA store, partial M and N", "fp8", (129, 584, 1024, 128, 128, 4, 1, True, 2)),
    # tt: A is M-major, its row pitch M * 2 bytes, which TMA wants a multiple of 16 (M % 8 == 0)
    ("bf16 b-groups of 2, tt split cluster bm64 bn64 x2, partial M", "bf16",
     ("tt", 104, 264, 2048, 64, 64, 8, 2, False, 2)),
    ("bf16 b-groups of 4, nt bm64 bn112 TMA store, partial M and N", "bf16",
     ("nt", 136, 600, 1024, 64, 112, 8, 1, False, 4)),
]


def b_group_config(family, case, sms=132):
    """The forced configuration of a B_GROUP_TILES case, with its group (scripts/precompile.py and
    precompile_bf16.py build these too)."""
    import dataclasses

    if family == "fp8":
        from finegemm.heuristics.sm90_fp8_gemm import make_config

        m, n, k, bm, bn, stages, splits, tma, group = case
        cfg = make_config(m, n, k, sms, False, False, bm, bn, stages, splits, 1, False, tma)
    else:
        from finegemm.heuristics import sm90_bf16_gemm as heur

        layout, m, n, k, bm, bn, stages, splits, out_fp32, group = case
        cfg = heur.make_config(m, n, k, sms, layout[0] == "t", layout[1] == "n", out_fp32, False, bm, bn, splits,
                               num_stages=stages)
    return dataclasses.replace(cfg, b_group=group)


def _b_group_tile(family, case):
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    cfg = b_group_config(family, case, torch.cuda.get_device_properties(0).multi_processor_count)
    m, n, k = cfg.m, cfg.n, cfg.k
    if family == "fp8":
        a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        o8.prepare(a, sfa, b, sfb, d, config=cfg)()
        return calc_diff(d.float(), reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32))
    layout = case[0]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_in = a if layout[0] == "n" else a.t().contiguous()
    d = torch.empty(m, n, device="cuda", dtype=torch.float32 if cfg.out_fp32 else torch.bfloat16)
    ob.prepare(a_in, b, d, None, layout, config=cfg)()
    return calc_diff(d.float(), a.float() @ b.float().t())


CASES = [
    *[(name, lambda f=fam, c=case: _b_group_tile(f, c)) for name, fam, case in B_GROUP_TILES],
    ("fp8 contiguous psum, ends read in the GEMM, alignment 64",
     lambda: _contiguous_psum_in_gemm([300, 0, 129, 1, 640, 7, 256, 1, 90], 576, 512, 64)),
    ("fp8 contiguous psum, ends read in the GEMM, alignment 128",
     lambda: _contiguous_psum_in_gemm([1, 17, 0, 4097, 5], 2112, 512, 128)),
    ("bf16 contiguous psum, ends read in the GEMM, alignment 64",
     lambda: _contiguous_psum_in_gemm([300, 0, 129, 1, 640, 7], 576, 512, 64, "bf16")),
    ("fp8 einsum heads packed, partial M and N tiles, padded d rows",
     lambda: _fp8_einsum_heads_packed(130, 64, 256, 200, 8)),
    ("fp8 einsum heads packed, sfa gathered from an MN-major tensor, partial M tile",
     lambda: _fp8_einsum_heads_packed(33, 8, 512, 128, 0, sfa_mn_major=True)),
    ("fp8 einsum heads packed, multicast A tile", lambda: _fp8_einsum_heads_packed(5, 16, 512, 128, 0)),
    ("fp8 einsum heads packed, fp32 d += c (c is d), padded rows",
     lambda: _fp8_einsum_heads_packed(70, 4, 256, 40, 4, f32_c=True)),
    ("fp8 skip head mid, fused epilogue, partial M", lambda: _skip_head_mid_fused(130, 5, (128, 64, 128), 512)),
    ("grouped prepared launches, repeated calls on two streams", _prepared_repeats),
    *[(f"{fam} contiguous, layout checked in the GEMM",
       lambda f=fam: _contiguous_layout_in_gemm([300, 0, 129, 1, 640, 7, 256, 1, 90], 576, 512, f))
      for fam in ("fp8", "bf16")],
    ("fp8 k-grouped one launch, c is d", lambda: _fp8_k_grouped([256, 0, 384, 128], 100, 136, True)),
    ("fp8 k-grouped one launch, no c", lambda: _fp8_k_grouped([0, 128, 256], 65, 200, False)),
    ("fp8 wgrad 1d1d, c is d", lambda: _fp8_wgrad(129, 576, 640)),
    *[(name, lambda a=args: _fp8_wgrad_tile(*a)) for name, args in WGRAD_TILES],
    *[(name, lambda a=args: _fp8_wgrad_two_cta(*a)) for name, args in WGRAD_TWO_CTA],
    ("fp8 bm192 bn128 (three consumer WGs), scale warp", lambda: _fp8_tile(385, 1000, 1664, 192, 128)),
    ("fp8 two CTAs/SM + split-K", lambda: _fp8_forced(17, 2112, 1664, bn=32, splits=4, tma=False, cps=2, kbat=1)),
    ("fp8 k-batch 4, TMA store", lambda: _fp8_forced(65, 576, 1664, bn=32, splits=1, tma=True, cps=1, kbat=4)),
    ("fp8 k-batch 2, odd k-blocks", lambda: _fp8_forced(130, 1000, 1664, bn=96, splits=1, tma=False, cps=1, kbat=2)),
    ("bf16 grouped contiguous", lambda: _bf16_grouped_contiguous([128, 256, 128], 576, 512)),
    ("bf16 grouped contiguous nn, K % 64 != 0, strided B", lambda: _bf16_grouped_contiguous([128, 256, 128], 200, 200,
                                                                                          True)),
    ("fp8 dense split-K", lambda: _fp8_dense(17, 576, 7296)),
    ("fp8 dense partial tiles", lambda: _fp8_dense(129, 2112, 512)),
    ("fp8 dense fp32 out", lambda: _fp8_dense(65, 576, 1024, torch.float32)),
    ("fp8 masked", lambda: _fp8_masked(3, 192, 576, 512)),
    ("fp8 masked bm192 bn128 (three consumer WGs), TMA store", lambda: _masked_forced_tile("fp8", 128)),
    ("fp8 masked bm192 bn144 (three consumer WGs), direct", lambda: _masked_forced_tile("fp8", 144, False)),
    ("bf16 masked bm192 bn128 (three consumer WGs)", lambda: _masked_forced_tile("bf16", 128)),
    ("bf16 masked bm192 bn64 (three consumer WGs)", lambda: _masked_forced_tile("bf16", 64)),
    ("fp8 bm128 bn176 multicast B, TMA store", lambda: _fp8_tile(300, 1000, 1664, 128, 176, 2, False, True)),
    ("fp8 bm128 bn208 multicast A", lambda: _fp8_tile(129, 1000, 5248, 128, 208, 2, True)),
    ("fp8 bm128 bn224 wide loop", lambda: _fp8_tile(129, 600, 640, 128, 224)),
    ("fp8 bm128 bn256 serial halves, TMA store", lambda: _fp8_tile(300, 1000, 1664, 128, 256, tma=True, hp=True)),
    ("fp8 bm128 bn224 serial halves, multicast B", lambda: _fp8_tile(300, 1000, 640, 128, 224, 2, False, hp=True)),
    ("fp8 masked bm128 bn256 serial halves, TMA store", lambda: _masked_forced_tile("fp8", 256, serial_halves=True)),
    ("bf16 nt", lambda: _bf16("nt", 129, 576, 512)),
    ("bf16 tn", lambda: _bf16("tn", 128, 576, 520)),
    ("k-major copies, grouped kernel (partial column tiles, padded pitch)",
     lambda: _k_major_copies([256, 0, 128, 384], 2112, 272, 16)),
    ("k-major copies, word kernel (unaligned columns)", lambda: _k_major_copies([128, 256], 100, 136, 3)),
    ("bf16 k-grouped one launch", lambda: _bf16_k_grouped([128, 0, 256], 100, 136)),
    ("bf16 k-grouped, c is d (TMA reduce-add)", lambda: _bf16_k_grouped([128, 0, 256], 100, 200, "in_place")),
    ("bf16 k-grouped, no c (TMA store)", lambda: _bf16_k_grouped([0, 256, 128], 130, 136, "none")),
    ("bf16 nn bm64 bn32 split-K (32-column N-major B)", lambda: _bf16_tile("nn", 64, 256, 7168, 64, 32, 7, True)),
    ("bf16 tn bm128 bn32 TMA store (32-column N-major B)", lambda: _bf16_tile("tn", 136, 104, 1024, 128, 32, 1, False)),
    # v1.09's model rings for an N-major B (bm64: bn256 3 stages, bn192 4, bn128 6), partial M, N and K
    ("bf16 n-major ring nn bm64 bn256 s3, partial M and N", lambda: _bf16_tile("nn", 40, 600, 1032, 64, 256, 1, False)),
    ("bf16 n-major ring tn bm64 bn192 s4 fp32 out", lambda: _bf16_tile("tn", 64, 456, 1096, 64, 192, 1, True)),
    ("bf16 n-major ring nn bm64 bn128 s6, partial N", lambda: _bf16_tile("nn", 17, 392, 776, 64, 128, 1, False)),
    # The tall tile (block_m 256, four consumer warpgroups; forced): TMA store over a partial
    # m-block and N, direct fp32 stores, an M-major A.
    ("bf16 tall tile nt bm256 bn128 TMA store, partial M and N", lambda: _bf16_tile("nt", 300, 600, 1032, 256, 128, 1,
                                                                                  False)),
    ("bf16 tall tile tn bm256 bn64 fp32 out", lambda: _bf16_tile("tn", 264, 200, 520, 256, 64, 1, True)),
    ("bf16 tall tile tt bm256 bn128, M = 24", lambda: _bf16_tile("tt", 24, 392, 776, 256, 128, 1, False)),
    # 2-CTA multicast pairs (forced): a phantom partner (odd m- / n-block counts), K-major halves
    # (boxes of half the rows) and MN-major halves (half the 64-wide boxes), the tall tile.
    ("bf16 multicast B nt bm128 bn176, 3 m-blocks", lambda: _bf16_tile("nt", 300, 600, 1032, 128, 176, 1, False, "b")),
    ("bf16 multicast A tn bm128 bn128, 5 n-blocks, fp32 out", lambda: _bf16_tile("tn", 136, 584, 520, 128, 128, 1, True,
                                                                                  "a")),
    ("bf16 multicast B nn bm128 bn256, M = 17", lambda: _bf16_tile("nn", 17, 640, 776, 128, 256, 1, False, "b")),
    ("bf16 multicast A tt tall bm256 bn128", lambda: _bf16_tile("tt", 264, 392, 520, 256, 128, 1, False, "a")),
    ("bf16 nt bm128 bn112", lambda: _bf16_tile("nt", 129, 600, 512, 128, 112, 1, False)),
    ("bf16 tt bm128 bn112 fp32 out", lambda: _bf16_tile("tt", 136, 600, 520, 128, 112, 1, True)),
    # Tuned-table configurations (heuristics/tuned_sm90_bf16.json): block_m 128 split-K, and
    # block_n 32 split-K on a partial m-block (M = 100 is served by the M = 128 entry).
    ("bf16 tn tuned bm128 split-K", lambda: _bf16("tn", 128, 2112, 7168)),
    ("bf16 nt tuned bm128 bn32 split-K, partial M", lambda: _bf16("nt", 100, 2112, 7168)),
    # Split-K through distributed shared memory (one CTA per unit, so the host launches each tile's
    # splits as one cluster): partial tiles, 2 to 8 splits, k-batch, both kernels.
    ("fp8 split cluster bm64 bn64 x4, partial N and K", lambda: _fp8_forced(17, 576, 7296, bn=64, splits=4, tma=False,
                                                                             cps=1, kbat=1)),
    ("fp8 split cluster bm64 bn32 x2, k-batch 2", lambda: _fp8_forced(64, 1000, 7168, bn=32, splits=2, tma=False,
                                                                       cps=1, kbat=2)),
    ("fp8 split cluster bm128 bn128 x4, partial M and N", lambda: _fp8_forced(130, 1000, 7168, bm=128, bn=128,
                                                                               splits=4, tma=False, cps=1, kbat=1)),
    ("fp8 split cluster bm64 bn112 x5, partial N and K", lambda: _fp8_forced(40, 500, 2176, bn=112, splits=5,
                                                                              tma=False, cps=1, kbat=1)),
    ("bf16 split cluster nt bm64 bn32 x8, fp32 out, partial M", lambda: _bf16_tile("nt", 100, 256, 7168, 64, 32, 8,
                                                                                   True)),
    ("bf16 split cluster tt bm128 bn64 x3, partial M and N", lambda: _bf16_tile("tt", 136, 200, 2056, 128, 64, 3,
                                                                                 False)),
    ("bf16 split cluster nn bm128 bn32 x2", lambda: _bf16_tile("nn", 128, 2112, 7168, 128, 32, 2, False)),
    ("bf16 split cluster nt bm64 bn64 x5, partial M and N", lambda: _bf16_tile("nt", 40, 300, 4104, 64, 64, 5, True)),
]


def main() -> int:
    torch.manual_seed(0)
    bad = 0
    only = sys.argv[1:]  # optional substrings: run only the cases whose name contains one
    for name, fn in CASES:
        if only and not any(o in name for o in only):
            continue
        diff = fn()
        torch.cuda.synchronize()
        ok = diff <= 1e-5
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: calc_diff {diff:.2e}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
