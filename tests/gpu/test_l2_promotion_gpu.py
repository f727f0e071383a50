"""GPU tests of the operand maps' L2 promotion choice (heuristics: Fp8GemmConfig / Bf16GemmConfig
.l2_promotion): every pair gives bitwise the default's result, fully written and correct, on odd
shapes, split-K included. The promotion only changes how L2 fetches the operands."""
from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from finegemm import quant, reference, runtime  # noqa: E402
from finegemm.heuristics import sm90_bf16_gemm as hb  # noqa: E402
from finegemm.heuristics import sm90_fp8_gemm as h8  # noqa: E402
from finegemm.ops import sm90_bf16_gemm as ob  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as o8  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

PAIRS = [(0, 0), (64, 256), (128, 128), (256, 128), (128, 256)]
SHAPES = [(1, 576, 7168), (17, 2112, 7296), (128, 24576, 1536), (130, 7168, 2048)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_fp8_every_pair_matches_the_default(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a, sfa = quant.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=g))
    b, sfb = quant.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=g))
    cfg = h8.select_config(m, n, k, runtime.get_num_sms())
    ref = reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float64)
    outs = []
    for pair in [(256, 256)] + PAIRS:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        o8.prepare(a, sfa, b, sfb, d, config=dataclasses.replace(cfg, l2_promotion=pair))()
        assert not torch.isnan(d).any(), f"{pair}: d not fully written"
        assert calc_diff(d, ref) <= 1e-5, pair
        outs.append(d)
    for d, pair in zip(outs[1:], PAIRS):
        assert torch.equal(d.view(torch.int16), outs[0].view(torch.int16)), pair


def _mn_major(t):
    """t^T stored [K, rows] with a row pitch TMA accepts (a multiple of 8 elements)."""
    rows, k = t.shape
    store = torch.empty(k, -(-rows // 8) * 8, device="cuda", dtype=t.dtype)
    store[:, :rows].copy_(t.t())
    return store[:, :rows]


@pytest.mark.parametrize("layout", ["nt", "tn"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_bf16_every_pair_matches_the_default(layout, m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    a = x if layout[0] == "n" else _mn_major(x)
    b = w if layout[1] == "t" else _mn_major(w)
    cfg = hb.select_config(m, n, k, runtime.get_num_sms(), layout[0] == "t", layout[1] == "n")
    ref = x.double() @ w.double().t()
    outs = []
    for pair in [(256, 256)] + PAIRS:
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ob.prepare(a, b, d, layout=layout, config=dataclasses.replace(cfg, l2_promotion=pair))()
        assert not torch.isnan(d).any(), f"{pair}: d not fully written"
        assert calc_diff(d, ref) <= 1e-5, pair
        outs.append(d)
    for d, pair in zip(outs[1:], PAIRS):
        assert torch.equal(d.view(torch.int16), outs[0].view(torch.int16)), pair


@pytest.mark.parametrize("g,m,n,k", [(3, 17, 576, 7168), (2, 130, 2112, 2048)])
def test_bf16_masked_every_pair_matches_the_default(g, m, n, k):
    """BF16 m-grouped masked (the grouped launcher's own promotion argument): rows past masked_m
    stay as they were (the poison), rows below it are the default's bits."""
    gen = torch.Generator(device="cuda").manual_seed(g + m + n + k)
    m_max = -(-m // 64) * 64 + 64
    a = torch.randn(g, m_max, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(g, n, k, device="cuda", generator=gen).to(torch.bfloat16)
    masked_m = torch.tensor([m, 0, m_max][:g], dtype=torch.int32, device="cuda")
    cfg = hb.select_grouped_config(hb.GEMM_GROUPED_MASKED, m_max, n, k, g, runtime.get_num_sms(), m, 0)
    outs = []
    for pair in [(256, 256)] + PAIRS:
        d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ob.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m,
                                         config=dataclasses.replace(cfg, l2_promotion=pair))
        for i, rows in enumerate(masked_m.tolist()):
            assert not torch.isnan(d[i, :rows]).any(), f"{pair}: group {i} not fully written"
            assert torch.isnan(d[i, rows:]).all(), f"{pair}: group {i} written past masked_m"
            if rows:
                ref = a[i, :rows].double() @ b[i].double().t()
                assert calc_diff(d[i, :rows], ref) <= 1e-5, (pair, i)
        outs.append(d)
    for d, pair in zip(outs[1:], PAIRS):
        assert torch.equal(d.view(torch.int16), outs[0].view(torch.int16)), pair


def test_bf16_contiguous_every_pair_matches_the_default():
    """BF16 m-grouped contiguous, with a padding segment and an empty group: every pair gives
    the default's bits (padding rows zero)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    n, k, align = 2112, 7168, quant.get_mk_alignment_for_contiguous_layout()
    sizes = [(0, 200), (-1, 128), (2, 128), (1, 17)]  # (group id, rows); group 3 is empty
    ids = torch.cat([torch.full((-(-r // align) * align if gid >= 0 else r,), -1, dtype=torch.int32)
                     .index_fill_(0, torch.arange(r), gid) for gid, r in sizes]).cuda()
    mt = ids.numel()
    a = torch.randn(mt, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(4, n, k, device="cuda", generator=gen).to(torch.bfloat16)
    cfg = hb.select_grouped_config(hb.GEMM_GROUPED_CONTIGUOUS, mt, n, k, 4, runtime.get_num_sms(), 0, align)
    ref = reference.m_grouped_bf16_gemm_nt_contiguous(a, b, ids, out_dtype=torch.float64)
    outs = []
    for pair in [(256, 256)] + PAIRS:
        d = torch.full((mt, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ob.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ids, config=dataclasses.replace(cfg, l2_promotion=pair))
        assert not torch.isnan(d).any(), f"{pair}: d not fully written"
        assert calc_diff(d, ref) <= 1e-5, pair
        outs.append(d)
    for d, pair in zip(outs[1:], PAIRS):
        assert torch.equal(d.view(torch.int16), outs[0].view(torch.int16)), pair
