"""FP8 casts (error bounds, UE8M0 scales) and scale-layout helpers."""

from __future__ import annotations

import pytest
import torch

from finegemm import quant

FP8 = torch.float8_e4m3fn
# Scales are amax / 448 computed as amax * fp32(1/448): what DeepGEMM's `x_amax / 448.0` computes on
# CUDA (a multiplication by the divisor's fp32 reciprocal), on every device.
INV_448 = torch.tensor(1 / 448, dtype=torch.float32)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _expand(sf: torch.Tensor, rows_per: int, shape) -> torch.Tensor:
    """Broadcast block scales [ceil(R/rows_per), ceil(K/128)] to a [R, K] tensor."""
    r, k = shape
    return sf.repeat_interleave(rows_per, 0)[:r].repeat_interleave(128, 1)[:, :k]


def _check_roundtrip(x: torch.Tensor, q: torch.Tensor, scale_full: torch.Tensor) -> None:
    """|x - q*s| <= 2^-4 |x| (3 mantissa bits) + 2^-10 s (half the smallest subnormal step)."""
    assert q.dtype == FP8 and q.shape == x.shape
    qf = q.float()
    assert torch.isfinite(qf).all() and (qf.abs() <= 448).all()
    xf = x.float()
    err = (xf - qf * scale_full).abs()
    bound = xf.abs() * 2**-4 + scale_full * 2**-10
    assert (err <= bound * (1 + 1e-6)).all()


def _is_pow2(t: torch.Tensor) -> bool:
    mantissa, _ = torch.frexp(t)
    return bool((mantissa == 0.5).all())


@pytest.mark.parametrize("m,k", [(1, 128), (17, 160), (64, 512), (5, 7), (0, 256)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_per_token_cast(m, k, dtype, ue8m0):
    gen = _gen(m * 1000 + k)
    x = (torch.randn((m, k), generator=gen) * torch.logspace(-3, 3, max(k, 1))[:k]).to(dtype)
    q, sf = quant.per_token_cast_to_fp8(x, use_ue8m0=ue8m0)
    assert sf.dtype == torch.float32 and sf.shape == (m, -(-k // 128))
    full = _expand(sf, 1, (m, k))
    _check_roundtrip(x, q, full)
    # Scale is (at least, for ue8m0) amax / 448 of each 1x128 block (times fp32(1/448)).
    padded = torch.nn.functional.pad(x.float(), (0, sf.shape[1] * 128 - k))
    amax = padded.view(m, sf.shape[1], 128).abs().amax(dim=2).clamp(min=1e-4)
    exact = amax * INV_448
    if ue8m0:
        assert _is_pow2(sf) and (sf >= exact).all() and (sf < 2 * exact).all()
    else:
        torch.testing.assert_close(sf, exact, rtol=0, atol=0)
        # The block maximum lands exactly on 448.
        qmax = torch.nn.functional.pad(q.float().abs(), (0, sf.shape[1] * 128 - k)).view(m, sf.shape[1], 128).amax(dim=2)
        assert (qmax == 448).all()


@pytest.mark.parametrize("n,k", [(128, 128), (129, 160), (300, 500), (1, 1)])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_per_block_cast(n, k, ue8m0):
    gen = _gen(n + 31 * k)
    x = torch.randn((n, k), generator=gen).bfloat16()
    q, sf = quant.per_block_cast_to_fp8(x, use_ue8m0=ue8m0)
    assert sf.shape == (-(-n // 128), -(-k // 128)) and sf.dtype == torch.float32
    _check_roundtrip(x, q, _expand(sf, 128, (n, k)))
    for nb in range(sf.shape[0]):
        for kb in range(sf.shape[1]):
            block = x[nb * 128 : nb * 128 + 128, kb * 128 : kb * 128 + 128].float()
            exact = block.abs().max().clamp(min=1e-4) * INV_448
            if ue8m0:
                assert _is_pow2(sf[nb, kb]) and exact <= sf[nb, kb] < 2 * exact
            else:
                assert sf[nb, kb] == exact


@pytest.mark.parametrize("k,mn", [(256, 9), (300, 12), (1, 5), (128, 0)])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_per_channel_cast(k, mn, ue8m0):
    """DeepGEMM's per-channel cast: one scale per column per 128 rows of x [K, MN] (a partial last
    row block allowed), sf [ceil(K/128), MN] with its rows padded to 16 bytes."""
    gen = _gen(11 + k)
    x = torch.randn((k, mn), generator=gen) * torch.arange(1, mn + 1)[None, :]
    q, sf = quant.per_channel_cast_to_fp8(x, use_ue8m0=ue8m0)
    kb = -(-k // 128)
    assert sf.shape == (kb, mn) and q.shape == x.shape and q.is_contiguous()
    if kb > 1 and mn > 1:
        assert sf.stride() == (-(-mn // 4) * 4, 1)
    _check_roundtrip(x, q, sf.repeat_interleave(128, 0)[:k])
    padded = torch.nn.functional.pad(x, (0, 0, 0, kb * 128 - k))
    exact = padded.view(kb, 128, mn).abs().amax(dim=1).clamp(min=1e-4) * INV_448
    if ue8m0:
        assert _is_pow2(sf) and (sf >= exact).all() and (sf < 2 * exact).all()
    else:
        assert torch.equal(sf, exact)


def test_per_channel_cast_feeds_the_tn_gemm():
    """The casts give each layout's scales as the GEMMs take them: per_channel for operands stored
    [K, MN] (fp8_gemm_tn with recipe (1, 1, 128)), per_token for [MN, K]."""
    import finegemm

    gen = _gen(5)
    m, n, k = 48, 32, 304  # [K, MN] operands: MN rows of 16 bytes (TMA), K % 16 == 0, a partial K block
    a_km, b_kn = torch.randn((k, m), generator=gen), torch.randn((k, n), generator=gen)
    a, sfa = quant.per_channel_cast_to_fp8(a_km)
    b, sfb = quant.per_channel_cast_to_fp8(b_kn)
    d = torch.full((m, n), float("nan"))
    finegemm.fp8_gemm_tn((a, sfa), (b, sfb), d, recipe=(1, 1, 128))
    want = a_km.t().double() @ b_kn.double()
    assert finegemm.testing.calc_diff(d, want) < 1e-3
    b_nk = torch.randn((n, k), generator=gen)
    b2, sfb2 = quant.per_token_cast_to_fp8(b_nk)
    finegemm.fp8_gemm_tt((a, sfa), (b2, sfb2), d, recipe=(1, 1, 128))
    assert finegemm.testing.calc_diff(d, a_km.t().double() @ b_nk.t().double()) < 1e-3


@pytest.mark.parametrize("fn", ["per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8"])
@pytest.mark.parametrize("gran_k", [32, 64, 200])
def test_cast_granularity(fn, gran_k):
    """gran_k (DeepGEMM's argument): blocks of gran_k; 128 is the default."""
    x = torch.randn((300, 260), generator=_gen(gran_k))
    q, sf = getattr(quant, fn)(x, use_ue8m0=False, gran_k=gran_k)
    kb = -(-300 // gran_k), -(-260 // gran_k)
    shapes = {"per_token_cast_to_fp8": (300, kb[1]), "per_block_cast_to_fp8": kb, "per_channel_cast_to_fp8": (kb[0], 260)}
    assert sf.shape == shapes[fn]
    q128, sf128 = getattr(quant, fn)(x)
    assert sf128.shape != sf.shape
    rows = gran_k if fn != "per_token_cast_to_fp8" else 1
    cols = gran_k if fn != "per_channel_cast_to_fp8" else 1
    full = sf.repeat_interleave(rows, 0)[:300].repeat_interleave(cols, 1)[:, :260]
    _check_roundtrip(x, q, full)


@pytest.mark.parametrize("ue8m0", [False, True])
def test_non_finite_blocks_dequantize_to_nan(ue8m0):
    """A block holding inf / NaN gets an inf / NaN scale: all of it dequantizes to NaN, its
    neighbours are untouched (before, UE8M0 rounded an inf scale to 1 and the inf became 448)."""
    x = torch.randn((2, 384))
    x[0, 3], x[1, 200] = float("inf"), float("nan")
    q, sf = quant.per_token_cast_to_fp8(x, use_ue8m0=ue8m0)
    assert sf[0, 0] == float("inf") and sf[1, 1].isnan()
    deq = q.float() * sf.repeat_interleave(128, 1)
    assert deq[0, :128].isnan().all() and deq[1, 128:256].isnan().all()
    assert deq[0, 128:].isfinite().all() and deq[1, :128].isfinite().all() and deq[1, 256:].isfinite().all()


def test_zero_blocks_get_floor_scale():
    x = torch.zeros((2, 200))
    x[1, 150] = 3.0
    q, sf = quant.per_token_cast_to_fp8(x)
    assert (q[0].float() == 0).all()
    assert sf[0, 0] == pytest.approx(1e-4 / 448) and sf[1, 0] == pytest.approx(1e-4 / 448)
    assert sf[1, 1] == pytest.approx(3.0 / 448) and q[1, 150].float() == 448


def test_ceil_to_ue8m0_exact():
    x = torch.tensor([1.0, 1.5, 0.3, 2.0**-20, 3 * 2.0**100, 1.0 + 2**-23, 0.0, -1.5, 2.0**-140, float("inf")])
    expected = torch.tensor([1.0, 2.0, 0.5, 2.0**-20, 2.0**102, 2.0, 0.0, 2.0, 2.0**-140, float("inf")])
    assert torch.equal(quant.ceil_to_ue8m0(x), expected)
    assert quant.ceil_to_ue8m0(torch.tensor([float("nan")])).isnan().all()


def test_casts_reject_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        quant.per_token_cast_to_fp8(torch.zeros(4))
    with pytest.raises(TypeError, match="bf16"):
        quant.per_block_cast_to_fp8(torch.zeros((4, 4), dtype=torch.int32))
    with pytest.raises(TypeError, match=r"^per_channel_cast_to_fp8: x must be a torch.Tensor, got list"):
        quant.per_channel_cast_to_fp8([1.0, 2.0])
    with pytest.raises(TypeError, match=r"^per_token_cast_to_fp8: use_ue8m0 must be a bool, got int"):
        quant.per_token_cast_to_fp8(torch.zeros((4, 4)), 1)
    with pytest.raises(ValueError, match=r"^per_block_cast_to_fp8: gran_k must be >= 1, got 0"):
        quant.per_block_cast_to_fp8(torch.zeros((4, 4)), gran_k=0)
    with pytest.raises(NotImplementedError, match=r"^per_token_cast_to_fp8: use_packed_ue8m0=True"):
        quant.per_token_cast_to_fp8(torch.zeros((4, 512)), True, 128, True)


def test_reexports():
    assert quant.ceil_div(129, 128) == 2 and quant.align(129, 128) == 256


# ---------------------------------------------------------------- layouts
def test_get_tma_aligned_size():
    assert quant.get_tma_aligned_size(5, 4) == 8
    assert quant.get_tma_aligned_size(8, 4) == 8
    assert quant.get_tma_aligned_size(3, 2) == 8
    assert quant.get_tma_aligned_size(17, 1) == 32
    assert quant.get_tma_aligned_size(0, 4) == 0
    with pytest.raises(ValueError, match="element_size"):
        quant.get_tma_aligned_size(5, 3)
    with pytest.raises(ValueError, match=r"x must be >= 0, got -3"):
        quant.get_tma_aligned_size(-3, 4)


@pytest.mark.parametrize("mn,kb", [(5, 2), (8, 3), (129, 2), (1, 1)])
def test_mn_major_2d(mn, kb):
    sf = torch.rand((mn, kb), generator=_gen(mn))
    out = quant.get_mn_major_tma_aligned_tensor(sf)
    aligned = -(-mn // 4) * 4
    assert out.shape == sf.shape and out.stride() == (1, aligned) and torch.equal(out, sf)
    assert quant.get_mn_major_tma_aligned_tensor(out) is out


@pytest.mark.parametrize("g,mn,kb", [(3, 5, 2), (2, 8, 4), (1, 129, 2)])
def test_mn_major_3d(g, mn, kb):
    sf = torch.rand((g, mn, kb), generator=_gen(g * mn))
    out = quant.get_mn_major_tma_aligned_tensor(sf)
    aligned = -(-mn // 4) * 4
    assert out.shape == sf.shape and out.stride() == (kb * aligned, 1, aligned) and torch.equal(out, sf)
    assert quant.get_mn_major_tma_aligned_tensor(out) is out


def test_mn_major_returns_input_when_already_laid_out():
    sf = torch.rand((3, 8)).T  # [8, 3], strides (1, 8)
    assert quant.get_mn_major_tma_aligned_tensor(sf) is sf


def test_mn_major_rejects_bad_rank():
    with pytest.raises(ValueError, match="2-D or 3-D"):
        quant.get_mn_major_tma_aligned_tensor(torch.zeros(4))


def test_transform_sf_layouts():
    mn, k = 129, 300
    sfa = torch.rand((mn, 3))
    out = quant.transform_sf_into_required_layout(sfa, mn, k, (1, 128, 128), is_sfa=True)
    assert out.stride() == (1, 132) and torch.equal(out, sfa)

    sfb = torch.rand((3, 2)).T  # non-contiguous [2, 3]
    out = quant.transform_sf_into_required_layout(sfb, mn, k, (1, 128, 128), is_sfa=False)
    assert out.is_contiguous() and torch.equal(out, sfb)

    sfb_rows = torch.rand((mn, 3))
    out = quant.transform_sf_into_required_layout(sfb_rows, mn, k, (1, 1, 128), is_sfa=False)
    assert out.stride() == (1, 132) and torch.equal(out, sfb_rows)

    grouped = torch.rand((4, mn, 3))
    out = quant.transform_sf_into_required_layout(grouped, mn, k, (1, 128, 128), num_groups=4, is_sfa=True)
    assert out.stride() == (3 * 132, 1, 132) and torch.equal(out, grouped)

    # DeepGEMM's defaults and its newer per-operand recipe_ab form.
    sfb = torch.rand((2, 3))
    assert quant.transform_sf_into_required_layout(sfb, mn, k, (1, 128, 128)) is not None  # is_sfa=False: sfb
    out = quant.transform_sf_into_required_layout(sfa, mn, k, recipe_ab=(1, 128))
    assert out.stride() == (1, 132) and torch.equal(out, sfa)


def test_transform_sf_errors():
    with pytest.raises(ValueError, match=r"ceil\(mn/1\), ceil\(k/128\)"):
        quant.transform_sf_into_required_layout(torch.rand((10, 2)), 10, 300, (1, 128, 128), is_sfa=True)
    with pytest.raises(ValueError, match="num_groups"):
        quant.transform_sf_into_required_layout(torch.rand((10, 3)), 10, 300, (1, 128, 128), num_groups=2, is_sfa=True)
    with pytest.raises(ValueError, match="granularity"):
        quant.transform_sf_into_required_layout(torch.rand((10, 3)), 10, 300, (1, 64, 128), is_sfa=False)
    with pytest.raises(TypeError, match="fp32"):
        quant.transform_sf_into_required_layout(torch.zeros((10, 3), dtype=torch.int32), 10, 300, (1, 128, 128))
    with pytest.raises(ValueError, match="exactly one of recipe"):
        quant.transform_sf_into_required_layout(torch.rand((1, 3)), 10, 300, (1, 128, 128), recipe_ab=(128, 128))


def test_mk_alignment_setter():
    saved = quant.get_mk_alignment_for_contiguous_layout()
    assert saved == 128
    try:
        for v in (16, 32, 64, 128):
            quant.set_mk_alignment_for_contiguous_layout(v)
            assert quant.get_mk_alignment_for_contiguous_layout() == v
            assert quant.get_m_alignment_for_contiguous_layout() == v
        for bad in (0, 8, 48, 256, -16, True, 128.0):
            with pytest.raises(ValueError, match="16, 32, 64, 128"):
                quant.set_mk_alignment_for_contiguous_layout(bad)
    finally:
        quant.set_mk_alignment_for_contiguous_layout(saved)


# ----------------------------------------------------------------------------- packed UE8M0 scales
@pytest.mark.parametrize("shape", [(5, 7), (130, 4), (1, 1), (3, 17, 9), (2, 0, 5), (4, 0)])
def test_packed_ue8m0_tensor_bytes_and_layout(shape):
    """Each int32 holds the biased exponents of four consecutive K entries (entry 4 j + i in byte
    i, zeros past K); MN-major with the MN stride padded to 16 bytes; non-powers of two keep their
    exponent (rounded down), the sign is dropped."""
    g = torch.Generator().manual_seed(sum(shape))
    sf = torch.exp2(torch.randint(-40, 40, shape, generator=g).float())
    if sf.numel():
        sf.view(-1)[0] = -3.0  # exponent 1 (the sign dropped), mantissa 1.5 dropped
    out = quant.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    mn, k = shape[-2], shape[-1]
    kp = -(-k // 4)
    assert out.dtype == torch.int32 and out.shape == (*shape[:-1], kp)
    aligned = -(-mn // 4) * 4
    assert out.stride()[-2:] == (1, aligned) or out.numel() == 0
    lead = shape[0] if len(shape) == 3 else 1
    flat_sf, flat_out = sf.reshape(lead, mn, k), out.reshape(lead, mn, kp)
    for b in range(flat_sf.shape[0]):
        for i in range(mn):
            for j in range(kp):
                want = 0
                for t in range(4):
                    if 4 * j + t < k:
                        want |= (int(torch.frexp(flat_sf[b, i, 4 * j + t].abs()).exponent) - 1 + 127) << (8 * t)
                want = want - (1 << 32) if want >= 1 << 31 else want
                assert int(flat_out[b, i, j]) == want, (b, i, j)


def test_packed_ue8m0_tensor_rules():
    with pytest.raises(TypeError, match="^get_mn_major_tma_aligned_packed_ue8m0_tensor: sf must be torch.float32"):
        quant.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(4, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="^get_mn_major_tma_aligned_packed_ue8m0_tensor: sf must be 2-D or 3-D"):
        quant.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(4))
    with pytest.raises(TypeError, match="get_mn_major_tma_aligned_packed_ue8m0_tensor: sf must be a torch.Tensor"):
        quant.get_mn_major_tma_aligned_packed_ue8m0_tensor([1.0])
