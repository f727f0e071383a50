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
