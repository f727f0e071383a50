"""The fp64 references against independent, explicitly-blocked formulas written here."""

from __future__ import annotations

import pytest
import torch

from finegemm import quant, reference
from finegemm.testing import calc_diff

FP8 = torch.float8_e4m3fn
F64 = torch.float64
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _fp8(shape, gen) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * 3).to(FP8)


def _scales(shape, gen) -> torch.Tensor:
    return torch.rand(shape, generator=gen) * 1.5 + 0.25


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _direct_fp8(a, sfa, b, sfb, sfb_per_row: bool) -> torch.Tensor:
    """D[m, n] = sum_kb sfa[m, kb] * sfb[row_or_block(n), kb] * (A[m, kb] . B[n, kb]) in fp64."""
    m, k = a.shape
    n = b.shape[0]
    sfb_rows = torch.arange(n) if sfb_per_row else torch.arange(n) // 128
    d = torch.zeros((m, n), dtype=F64)
    for kb in range(_cdiv(k, 128)):
        ks = slice(kb * 128, min(k, kb * 128 + 128))
        partial = a[:, ks].to(F64) @ b[:, ks].to(F64).T
        d += sfa[:, kb, None].to(F64) * sfb[sfb_rows, kb][None, :].to(F64) * partial
    return d


def _close(x: torch.Tensor, y: torch.Tensor) -> None:
    assert x.shape == y.shape
    torch.testing.assert_close(x.cpu().to(F64), y.cpu().to(F64), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- dense FP8
@pytest.mark.parametrize("m,n,k", [(0, 64, 128), (1, 129, 160), (17, 129, 160), (17, 256, 384), (3, 5, 7)])
@pytest.mark.parametrize("recipe", [(1, 128, 128), (1, 1, 128)])
@pytest.mark.parametrize("with_c", [False, True])
def test_fp8_gemm_nt(m, n, k, recipe, with_c):
    gen = _gen(1000 + m * 7 + n + k + recipe[1] + with_c)
    a, b = _fp8((m, k), gen), _fp8((n, k), gen)
    sfa = _scales((m, _cdiv(k, 128)), gen)
    sfb_rows = n if recipe[1] == 1 else _cdiv(n, 128)
    sfb = _scales((sfb_rows, _cdiv(k, 128)), gen)
    c = torch.randn((m, n), generator=gen) if with_c else None
    expected = _direct_fp8(a, sfa, b, sfb, sfb_per_row=recipe[1] == 1)
    if c is not None:
        expected = expected + c.to(F64)
    _close(reference.fp8_gemm_nt(a, sfa, b, sfb, c, out_dtype=F64, recipe=recipe), expected)
    out = reference.fp8_gemm_nt(a, sfa, b, sfb, c, recipe=recipe)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    assert torch.equal(out, expected.to(torch.bfloat16))


def test_fp8_gemm_nt_rejects_bad_scale_shape():
    gen = _gen(1)
    a, b = _fp8((4, 256), gen), _fp8((8, 256), gen)
    with pytest.raises(ValueError, match="scales"):
        reference.fp8_gemm_nt(a, _scales((4, 1), gen), b, _scales((1, 2), gen))


@pytest.mark.parametrize("device", DEVICES)
def test_reference_keeps_device(device):
    gen = _gen(2)
    a, b = _fp8((3, 160), gen), _fp8((129, 160), gen)
    sfa, sfb = _scales((3, 2), gen), _scales((2, 2), gen)
    out = reference.fp8_gemm_nt(a.to(device), sfa.to(device), b.to(device), sfb.to(device), out_dtype=F64)
    assert out.device.type == device
    _close(out, _direct_fp8(a, sfa, b, sfb, sfb_per_row=False))


# ---------------------------------------------------------------- M-grouped contiguous
def _layout_rows(segments) -> torch.Tensor:
    """[(group, count), ...] -> int32 group id per row (group -1 = padding)."""
    ids = [g for g, count in segments for _ in range(count)]
    return torch.tensor(ids, dtype=torch.int32)


def _direct_grouped_rows(a, sfa, b, sfb, ids, n) -> torch.Tensor:
    """Row by row: D[r] = direct_fp8(A[r], B[ids[r]]) or zeros for ids[r] == -1."""
    d = torch.zeros((a.shape[0], n), dtype=F64)
    for r, g in enumerate(ids.tolist()):
        if g >= 0:
            d[r] = _direct_fp8(a[r : r + 1], sfa[r : r + 1], b[g], sfb[g], sfb_per_row=False)[0]
    return d


LAYOUTS = {
    # group 1 empty, a padding block between groups, group 3 followed by padding
    "gaps": [(0, 17), (-1, 15), (2, 30), (3, 1), (-1, 5)],
    # a full 128-row block of padding (a "group" of only -1 rows) and the last group empty
    "padding_block": [(1, 3), (-1, 128), (0, 40)],
    "all_padding": [(-1, 20)],
    "no_rows": [],
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_m_grouped_fp8_contiguous(name):
    gen = _gen(sum(map(ord, name)))
    num_groups, n, k = 4, 129, 160
    ids = _layout_rows(LAYOUTS[name])
    m = ids.numel()
    a, b = _fp8((m, k), gen), _fp8((num_groups, n, k), gen)
    sfa = _scales((m, 2), gen)
    sfb = _scales((num_groups, 2, 2), gen)
    expected = _direct_grouped_rows(a, sfa, b, sfb, ids, n)
    out = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ids, out_dtype=F64)
    _close(out, expected)
    out_bf16 = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ids)
    assert torch.equal(out_bf16, expected.to(torch.bfloat16))


def test_m_grouped_contiguous_rejects_out_of_range_ids():
    gen = _gen(3)
    a, b = _fp8((2, 128), gen), _fp8((2, 128, 128), gen)
    with pytest.raises(ValueError, match="grouped_layout"):
        reference.m_grouped_fp8_gemm_nt_contiguous(
            a, _scales((2, 1), gen), b, _scales((2, 1, 1), gen), torch.tensor([0, 2], dtype=torch.int32)
        )


@pytest.fixture
def restore_alignment():
    saved = quant.get_mk_alignment_for_contiguous_layout()
    yield
    quant.set_mk_alignment_for_contiguous_layout(saved)


def _direct_psum_ids(ends, m, alignment) -> torch.Tensor:
    ids = torch.full((m,), -1, dtype=torch.int32)
    prev_end = 0
    for g, end in enumerate(ends):
        start = 0 if g == 0 else -(-prev_end // alignment) * alignment
        for r in range(start, min(end, m)):
            ids[r] = g
        prev_end = end
    return ids


PSUMS = [
    ([100, 300, 300, 500], 520),  # empty group 2, unaligned ends, tail rows past the last end
    ([0, 0, 70], 200),  # leading empty groups
    ([128, 256], 256),  # exactly aligned, no gaps
    ([5, 6, 7, 8], 300),  # start_g > end_g: groups 1..3 are empty
    ([], 10),  # no groups at all
]


@pytest.mark.parametrize("alignment", [16, 32, 64, 128])
@pytest.mark.parametrize("ends,m", PSUMS)
def test_psum_layout_to_group_ids(ends, m, alignment):
    psum = torch.tensor(ends, dtype=torch.int32)
    got = reference.psum_layout_to_group_ids(psum, m, alignment)
    assert got.dtype == torch.int32 and got.shape == (m,)
    assert torch.equal(got, _direct_psum_ids(ends, m, alignment))


def test_psum_layout_rejects_decreasing():
    with pytest.raises(ValueError, match="non-decreasing"):
        reference.psum_layout_to_group_ids(torch.tensor([10, 5], dtype=torch.int32), 16, 16)


@pytest.mark.parametrize("alignment", [32, 128])
def test_m_grouped_fp8_contiguous_psum(alignment, restore_alignment):
    quant.set_mk_alignment_for_contiguous_layout(alignment)
    gen = _gen(40 + alignment)
    ends, m = [17, 17, 150, 200], 260
    num_groups, n, k = len(ends), 129, 160
    a, b = _fp8((m, k), gen), _fp8((num_groups, n, k), gen)
    sfa, sfb = _scales((m, 2), gen), _scales((num_groups, 2, 2), gen)
    ids = _direct_psum_ids(ends, m, alignment)
    expected = _direct_grouped_rows(a, sfa, b, sfb, ids, n)
    psum = torch.tensor(ends, dtype=torch.int32)
    out = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, psum, use_psum_layout=True, out_dtype=F64)
    _close(out, expected)
    # bf16 variant with the same layout: the group-wise product of the bf16 inputs.
    a16, b16 = torch.randn((m, k), generator=gen).bfloat16(), torch.randn((num_groups, n, k), generator=gen).bfloat16()
    exp16 = torch.zeros((m, n), dtype=F64)
    for r, g in enumerate(ids.tolist()):
        if g >= 0:
            exp16[r] = b16[g].to(F64) @ a16[r].to(F64)
    _close(reference.m_grouped_bf16_gemm_nt_contiguous(a16, b16, psum, True, out_dtype=F64), exp16)


# ---------------------------------------------------------------- M-grouped masked
@pytest.mark.parametrize("masked", [[0, 17, 5], [17, 17, 17], [0, 0, 0], [3, 0, 17]])
def test_m_grouped_fp8_masked(masked):
    gen = _gen(sum(masked) + 77 * len(masked) + masked[0])
    num_groups, m_max, n, k = 3, 17, 129, 160
    a, b = _fp8((num_groups, m_max, k), gen), _fp8((num_groups, n, k), gen)
    sfa, sfb = _scales((num_groups, m_max, 2), gen), _scales((num_groups, 2, 2), gen)
    masked_m = torch.tensor(masked, dtype=torch.int32)
    expected = torch.zeros((num_groups, m_max, n), dtype=F64)
    for g, rows in enumerate(masked):
        expected[g, :rows] = _direct_fp8(a[g, :rows], sfa[g, :rows], b[g], sfb[g], sfb_per_row=False)
    _close(reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m, out_dtype=F64), expected)
    assert torch.equal(reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked_m), expected.bfloat16())

    a16, b16 = torch.randn((num_groups, m_max, k), generator=gen).bfloat16(), torch.randn((num_groups, n, k), generator=gen).bfloat16()
    exp16 = torch.zeros((num_groups, m_max, n), dtype=F64)
    for g, rows in enumerate(masked):
        exp16[g, :rows] = a16[g, :rows].to(F64) @ b16[g].to(F64).T
    _close(reference.m_grouped_bf16_gemm_nt_masked(a16, b16, masked_m, out_dtype=F64), exp16)


# ---------------------------------------------------------------- K-grouped
@pytest.mark.parametrize("ks", [[128, 0, 256, 384], [0], [256], [0, 0]])
@pytest.mark.parametrize("with_c", [False, True])
def test_k_grouped_fp8(ks, with_c):
    gen = _gen(500 + sum(ks) + len(ks) + with_c)
    m, n, num_groups = 17, 129, len(ks)
    a, b = _fp8((m * sum(ks),), gen), _fp8((n * sum(ks),), gen)
    sfa, sfb = _scales((sum(ks) // 128, m), gen), _scales((sum(ks) // 128, n), gen)
    c = torch.randn((num_groups, m, n), generator=gen) if with_c else None
    expected = c.to(F64).clone() if with_c else torch.zeros((num_groups, m, n), dtype=F64)
    a_off = b_off = kb0 = 0
    for g, k in enumerate(ks):
        a_g = a[a_off : a_off + m * k].view(m, k).to(F64)
        b_g = b[b_off : b_off + n * k].view(n, k).to(F64)
        for kb in range(k // 128):
            blk = slice(kb * 128, kb * 128 + 128)
            scale = sfa[kb0 + kb][:, None].to(F64) * sfb[kb0 + kb][None, :].to(F64)
            expected[g] += scale * (a_g[:, blk] @ b_g[:, blk].T)
        a_off, b_off, kb0 = a_off + m * k, b_off + n * k, kb0 + k // 128
    out = reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n, c)
    assert out.dtype == torch.float32 and out.shape == (num_groups, m, n)
    torch.testing.assert_close(out, expected.float(), rtol=1e-6, atol=1e-6)
    # ks as a tensor is accepted too
    out_t = reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, torch.tensor(ks, dtype=torch.int32), m, n, c)
    assert torch.equal(out, out_t)


def test_k_grouped_fp8_rejects_unaligned_k():
    gen = _gen(4)
    with pytest.raises(ValueError, match="multiple of 128"):
        reference.k_grouped_fp8_gemm_nt_contiguous(
            _fp8((2 * 100,), gen), _scales((1, 2), gen), _fp8((2 * 100,), gen), _scales((1, 2), gen), [100], 2, 2
        )


@pytest.mark.parametrize("ks", [[7, 0, 160], [0], [1]])
@pytest.mark.parametrize("with_c", [False, True])
def test_k_grouped_bf16_tn(ks, with_c):
    gen = _gen(900 + sum(ks) + with_c)
    m, n = 17, 129
    a = torch.randn((sum(ks), m), generator=gen).bfloat16()
    b = torch.randn((sum(ks), n), generator=gen).bfloat16()
    c = torch.randn((len(ks), m, n), generator=gen) if with_c else None
    expected = torch.zeros((len(ks), m, n), dtype=F64)
    off = 0
    for g, k in enumerate(ks):
        for row in range(off, off + k):  # outer products, one K row at a time
            expected[g] += a[row].to(F64)[:, None] * b[row].to(F64)[None, :]
        if with_c:
            expected[g] += c[g].to(F64)
        off += k
    out = reference.k_grouped_bf16_gemm_tn_contiguous(a, b, ks, c)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected.float(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- BF16 dense / contiguous
@pytest.mark.parametrize("m,n,k", [(0, 64, 128), (1, 129, 160), (17, 129, 160)])
@pytest.mark.parametrize("with_c", [False, True])
def test_bf16_gemm_nt(m, n, k, with_c):
    gen = _gen(300 + m + n + k + with_c)
    a, b = torch.randn((m, k), generator=gen).bfloat16(), torch.randn((n, k), generator=gen).bfloat16()
    c = torch.randn((m, n), generator=gen) if with_c else None
    expected = torch.einsum("mk,nk->mn", a.to(F64), b.to(F64))
    if with_c:
        expected = expected + c.to(F64)
    _close(reference.bf16_gemm_nt(a, b, c, out_dtype=F64), expected)
    assert torch.equal(reference.bf16_gemm_nt(a, b, c), expected.bfloat16())


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_m_grouped_bf16_contiguous(name):
    gen = _gen(sum(map(ord, name)) + 1)
    ids = _layout_rows(LAYOUTS[name])
    m, num_groups, n, k = ids.numel(), 4, 129, 160
    a, b = torch.randn((m, k), generator=gen).bfloat16(), torch.randn((num_groups, n, k), generator=gen).bfloat16()
    expected = torch.zeros((m, n), dtype=F64)
    for r, g in enumerate(ids.tolist()):
        if g >= 0:
            expected[r] = b[g].to(F64) @ a[r].to(F64)
    _close(reference.m_grouped_bf16_gemm_nt_contiguous(a, b, ids, out_dtype=F64), expected)


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("m,n,k", [(64, 256, 512), (17, 129, 160)])
def test_quantized_gemm_close_to_unquantized(m, n, k):
    gen = _gen(7 + m)
    x = torch.randn((m, k), generator=gen).bfloat16()
    w = torch.randn((n, k), generator=gen).bfloat16()
    a, sfa = quant.per_token_cast_to_fp8(x)
    b, sfb = quant.per_block_cast_to_fp8(w)
    d = reference.fp8_gemm_nt(a, sfa, b, sfb)
    diff = calc_diff(d, x.float() @ w.float().T)
    assert 0 < diff < 1e-3
