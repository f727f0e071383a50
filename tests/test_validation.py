"""One test per validation rule of the public API (finegemm.api): each error names the function,
the argument and the rule; TypeError for types/dtypes, ValueError for shapes/strides/values."""
from __future__ import annotations

import ast
import pathlib

import pytest
import torch

import finegemm
from finegemm.utils import ceil_div

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
F32 = torch.float32


# ----------------------------------------------------------------------------- builders
def _fp8(*shape):
    return torch.randn(*shape).to(FP8)


def _sf(*shape):
    return torch.ones(*shape, dtype=F32)


def fp8_args(layout="nt", M=32, N=256, K=256, recipe=None, d_dtype=BF16, with_c=False):
    """Valid keyword arguments for fp8_gemm_<layout>."""
    kb = ceil_div(K, 128)
    gran_n = 1 if recipe == (1, 1, 128) else 128
    nb = ceil_div(N, gran_n)
    if layout[0] == "n":
        a = (_fp8(M, K), _sf(M, kb))
    else:
        a = (_fp8(K, M), _sf(kb, M))
    if layout[1] == "t":
        b = (_fp8(N, K), _sf(nb, kb))
    else:
        b = (_fp8(K, N), _sf(kb, nb))
    kw = dict(a=a, b=b, d=torch.empty(M, N, dtype=d_dtype))
    if recipe is not None:
        kw["recipe"] = recipe
    if with_c:
        kw["c"] = torch.zeros(M, N, dtype=F32)
    return kw


def call_fp8(layout="nt", **kw):
    getattr(finegemm, f"fp8_gemm_{layout}")(**kw)


def mg_args(M=256, N=256, K=256, G=2):
    gl = torch.full((M,), -1, dtype=torch.int32)
    gl[0:100] = 0
    gl[128:200] = 1
    return dict(
        a=(_fp8(M, K), _sf(M, ceil_div(K, 128))),
        b=(_fp8(G, N, K), _sf(G, ceil_div(N, 128), ceil_div(K, 128))),
        d=torch.empty(M, N, dtype=BF16),
        grouped_layout=gl,
    )


def masked_args(G=2, Mmax=64, N=256, K=256):
    return dict(
        a=(_fp8(G, Mmax, K), _sf(G, Mmax, ceil_div(K, 128))),
        b=(_fp8(G, N, K), _sf(G, ceil_div(N, 128), ceil_div(K, 128))),
        d=torch.empty(G, Mmax, N, dtype=BF16),
        masked_m=torch.tensor([10, 64], dtype=torch.int32),
        expected_m=32,
    )


def kg_args(M=64, N=128, ks=(128, 256)):
    ks = list(ks)
    s = sum(ks)
    return dict(
        a=(_fp8(M * s), _sf(s // 128, M)),
        b=(_fp8(N * s), _sf(s // 128, N)),
        d=torch.empty(len(ks), M, N, dtype=F32),
        ks=ks,
        ks_tensor=torch.tensor(ks, dtype=torch.int32),
    )


def bf16_args(layout="nt", M=32, N=64, K=64, d_dtype=BF16):
    a = torch.randn(M, K, dtype=BF16) if layout[0] == "n" else torch.randn(K, M, dtype=BF16)
    b = torch.randn(N, K, dtype=BF16) if layout[1] == "t" else torch.randn(K, N, dtype=BF16)
    return dict(a=a, b=b, d=torch.empty(M, N, dtype=d_dtype))


def test_builders_are_valid():
    for layout in ("nt", "nn", "tn", "tt"):
        call_fp8(layout, **fp8_args(layout))
        call_fp8(layout, **fp8_args(layout, recipe=(1, 1, 128), d_dtype=F32, with_c=True))
        getattr(finegemm, f"bf16_gemm_{layout}")(**bf16_args(layout))
    finegemm.m_grouped_fp8_gemm_nt_contiguous(**mg_args())
    finegemm.m_grouped_fp8_gemm_nt_masked(**masked_args())
    finegemm.k_grouped_fp8_gemm_nt_contiguous(**kg_args())


# ----------------------------------------------------------------------------- tuple arguments
def test_pair_must_be_tuple():
    kw = fp8_args()
    kw["a"] = kw["a"][0]
    with pytest.raises(TypeError, match=r"fp8_gemm_nt: a must be a 2-tuple of tensors \(A, sfa\), got Tensor"):
        call_fp8(**kw)


def test_pair_must_have_two_items():
    kw = fp8_args()
    kw["b"] = kw["b"] + (kw["b"][1],)
    with pytest.raises(TypeError, match=r"fp8_gemm_nt: b must be a 2-tuple .*length 3"):
        call_fp8(**kw)


def test_pair_items_must_be_tensors():
    kw = fp8_args()
    kw["a"] = (kw["a"][0], 1.0)
    with pytest.raises(TypeError, match=r"a\[1\] \(sfa\) must be a torch.Tensor, got float"):
        call_fp8(**kw)


def test_d_must_be_tensor():
    kw = fp8_args()
    kw["d"] = [1, 2]
    with pytest.raises(TypeError, match=r"fp8_gemm_nt: d must be a torch.Tensor, got list"):
        call_fp8(**kw)


def test_c_must_be_tensor_or_none():
    kw = fp8_args(d_dtype=F32)
    kw["c"] = 0.0
    with pytest.raises(TypeError, match=r"c must be a torch.Tensor or None, got float"):
        call_fp8(**kw)


# ----------------------------------------------------------------------------- dtypes
def test_a_dtype():
    kw = fp8_args()
    kw["a"] = (kw["a"][0].to(BF16), kw["a"][1])
    with pytest.raises(TypeError, match=r"^fp8_gemm_nt: a\[0\] \(A\) must be torch.float8_e4m3fn, got torch.bfloat16$"):
        call_fp8(**kw)


def test_b_dtype():
    kw = fp8_args(layout="nn")
    kw["b"] = (kw["b"][0].to(torch.float8_e5m2), kw["b"][1])
    with pytest.raises(TypeError, match=r"fp8_gemm_nn: b\[0\] \(B\) must be torch.float8_e4m3fn, got torch.float8_e5m2"):
        call_fp8("nn", **kw)


def test_sfa_dtype():
    kw = fp8_args()
    kw["a"] = (kw["a"][0], kw["a"][1].to(BF16))
    with pytest.raises(TypeError, match=r"a\[1\] \(sfa\) must be torch.float32.*got torch.bfloat16"):
        call_fp8(**kw)


def test_sfb_dtype():
    kw = fp8_args()
    kw["b"] = (kw["b"][0], kw["b"][1].to(torch.int32))
    with pytest.raises(TypeError, match=r"b\[1\] \(sfb\) must be torch.float32.*got torch.int32"):
        call_fp8(**kw)


def test_d_dtype():
    kw = fp8_args(d_dtype=torch.float16)
    with pytest.raises(TypeError, match=r"fp8_gemm_nt: d must be torch.bfloat16 or torch.float32, got torch.float16"):
        call_fp8(**kw)


def test_c_requires_fp32_d():
    kw = fp8_args(d_dtype=BF16)
    kw["c"] = torch.zeros(32, 256, dtype=F32)
    with pytest.raises(TypeError, match=r"d must be torch.float32 when c is given.*got d of dtype torch.bfloat16"):
        call_fp8(**kw)


def test_c_dtype():
    kw = fp8_args(d_dtype=F32)
    kw["c"] = torch.zeros(32, 256, dtype=BF16)
    with pytest.raises(TypeError, match=r"c must be torch.float32.*got torch.bfloat16"):
        call_fp8(**kw)


def test_recipe_1d1d_requires_fp32_d():
    kw = fp8_args(recipe=(1, 1, 128), d_dtype=BF16)
    with pytest.raises(TypeError, match=r"d must be torch.float32 with recipe \(1, 1, 128\).*got torch.bfloat16"):
        call_fp8(**kw)


# ----------------------------------------------------------------------------- ranks and shapes
def test_a_rank():
    kw = fp8_args()
    kw["a"] = (kw["a"][0].unsqueeze(0), kw["a"][1])
    with pytest.raises(ValueError, match=r"a\[0\] \(A\) must be a 2-D tensor \[M, K\], got 3-D"):
        call_fp8(**kw)


def test_sfb_rank():
    kw = fp8_args()
    kw["b"] = (kw["b"][0], kw["b"][1].reshape(-1))
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must be a 2-D tensor"):
        call_fp8(**kw)


def test_k_must_agree():
    kw = fp8_args(K=256)
    kw["b"] = (_fp8(256, 384), _sf(2, 3))
    with pytest.raises(ValueError, match=r"fp8_gemm_nt: K of a\[0\] .* and b\[0\] .* must agree, got K=256 and K=384"):
        call_fp8(**kw)


def test_k_must_agree_transposed_layouts():
    kw = fp8_args(layout="tn", K=256)
    kw["b"] = (_fp8(384, 256), _sf(3, 2))
    with pytest.raises(ValueError, match=r"fp8_gemm_tn: K of a\[0\] \(A\) \(stored \[K, M\].*must agree"):
        call_fp8("tn", **kw)


def test_d_shape():
    kw = fp8_args()
    kw["d"] = torch.empty(32, 128, dtype=BF16)
    with pytest.raises(ValueError, match=r"d must have shape \[M, N\] = \[32, 256\], got \[32, 128\]"):
        call_fp8(**kw)


def test_c_shape():
    kw = fp8_args(d_dtype=F32)
    kw["c"] = torch.zeros(16, 256, dtype=F32)
    with pytest.raises(ValueError, match=r"c must have shape \[M, N\] = \[32, 256\], got \[16, 256\]"):
        call_fp8(**kw)


def test_sfa_shape_ceil_k():
    kw = fp8_args(K=272)  # ceil(272/128) = 3
    kw["a"] = (kw["a"][0], _sf(32, 2))
    with pytest.raises(ValueError, match=r"a\[1\] \(sfa\) must have shape \[M, ceil\(K/128\)\].* = \[32, 3\], got \[32, 2\]"):
        call_fp8(**kw)


def test_sfa_shape_transposed_layout():
    kw = fp8_args(layout="tt")
    kw["a"] = (kw["a"][0], _sf(32, 2))  # should be [ceil(K/128), M] = [2, 32]
    with pytest.raises(ValueError, match=r"fp8_gemm_tt: a\[1\] \(sfa\) must have shape \[ceil\(K/128\), M\]"):
        call_fp8("tt", **kw)


def test_sfb_shape_block_recipe():
    kw = fp8_args(N=200)  # ceil(200/128) = 2
    kw["b"] = (kw["b"][0], _sf(200, 2))
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must have shape \[ceil\(N/128\), ceil\(K/128\)\].* = \[2, 2\]"):
        call_fp8(**kw)


def test_sfb_shape_row_recipe():
    kw = fp8_args(recipe=(1, 1, 128), d_dtype=F32)
    kw["b"] = (kw["b"][0], _sf(2, 2))
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must have shape \[N, ceil\(K/128\)\].*recipe \(1, 1, 128\)"):
        call_fp8(**kw)


def test_sfb_shape_kn_layout():
    kw = fp8_args(layout="nn", N=384)
    kw["b"] = (kw["b"][0], _sf(3, 2))  # should be [ceil(K/128), ceil(N/128)] = [2, 3]
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must have shape \[ceil\(K/128\), ceil\(N/128\)\] for B \[K, N\]"):
        call_fp8("nn", **kw)


# ----------------------------------------------------------------------------- devices
def test_same_device():
    kw = fp8_args()
    kw["b"] = (kw["b"][0], torch.empty(2, 2, dtype=F32, device="meta"))
    with pytest.raises(ValueError, match=r"all tensors must be on the same device; d is on cpu but b\[1\] \(sfb\) is on meta"):
        call_fp8(**kw)


def test_supported_device():
    kw = fp8_args()
    kw["d"] = torch.empty(32, 256, dtype=BF16, device="meta")
    with pytest.raises(ValueError, match=r"d must be on a CPU or CUDA device.*got device meta"):
        call_fp8(**kw)


# ----------------------------------------------------------------------------- alignment / strides
def test_k_multiple_of_16():
    kw = fp8_args(K=200)
    with pytest.raises(ValueError, match=r"fp8_gemm_nt: K must be a multiple of 16 \(16 bytes of FP8; TMA rule\), got K=200"):
        call_fp8(**kw)


def test_operand_inner_stride():
    kw = fp8_args()
    a_full = _fp8(32, 512)
    kw["a"] = (a_full[:, ::2], kw["a"][1])
    with pytest.raises(ValueError, match=r"a\[0\] \(A\) \(stored \[M, K\]\) must have a contiguous last dimension \(stride 1"):
        call_fp8(**kw)


def test_operand_row_pitch():
    kw = fp8_args(layout="nn", N=256)
    b_full = _fp8(256, 264)
    kw["b"] = (b_full[:, :256], kw["b"][1])  # row pitch 264 bytes
    with pytest.raises(ValueError, match=r"b\[0\] \(B\) \(stored \[K, N\]\) must have every outer stride a multiple of 16 bytes.*264 bytes"):
        call_fp8("nn", **kw)


def test_operand_mn_major_needs_padded_rows():
    kw = fp8_args(layout="tn", M=40)  # A stored [K, M] with M = 40: row pitch 40 bytes
    with pytest.raises(ValueError, match=r"fp8_gemm_tn: a\[0\] \(A\) \(stored \[K, M\]\) must have every outer stride a multiple of 16 bytes"):
        call_fp8("tn", **kw)


def test_padded_view_is_accepted():
    kw = fp8_args(layout="tn", M=40)
    a_pad = _fp8(256, 48)
    kw["a"] = (a_pad[:, :40], kw["a"][1])
    call_fp8("tn", **kw)


def test_operand_base_alignment():
    kw = fp8_args()
    flat = _fp8(32 * 256 + 16)
    kw["a"] = (flat[8 : 8 + 32 * 256].view(32, 256), kw["a"][1])
    with pytest.raises(ValueError, match=r"a\[0\] \(A\) .* must start at a 16-byte aligned address \(TMA rule\), got data_ptr\(\) % 16 = 8"):
        call_fp8(**kw)


def test_d_row_pitch():
    kw = fp8_args(N=256)
    d_full = torch.empty(32, 260, dtype=BF16)
    kw["d"] = d_full[:, :256]
    with pytest.raises(ValueError, match=r"fp8_gemm_nt: d \[M, N\] must have every outer stride a multiple of 16 bytes \(TMA needs a 16-byte row pitch\)"):
        call_fp8(**kw)


def test_d_contiguous_bf16_needs_n_multiple_of_8():
    kw = fp8_args(N=100)
    with pytest.raises(ValueError, match=r"d \[M, N\] must have every outer stride a multiple of 16 bytes.*200 bytes"):
        call_fp8(**kw)


def test_d_inner_stride():
    kw = fp8_args()
    kw["d"] = torch.empty(256, 32, dtype=BF16).t()
    with pytest.raises(ValueError, match=r"d \[M, N\] must have a contiguous last dimension"):
        call_fp8(**kw)


def test_c_row_pitch():
    kw = fp8_args(d_dtype=F32)
    kw["c"] = torch.zeros(32, 258, dtype=F32)[:, :256]
    with pytest.raises(ValueError, match=r"c \[M, N\] must have every outer stride a multiple of 16 bytes"):
        call_fp8(**kw)


def test_scales_may_have_any_strides():
    kw = fp8_args()
    kw["a"] = (kw["a"][0], _sf(2, 32).t())  # column-major sfa
    kw["b"] = (kw["b"][0], _sf(4, 4)[::2, ::2])
    call_fp8(**kw)


# ----------------------------------------------------------------------------- aliasing
def test_d_must_not_overlap_a():
    M, N, K = 32, 256, 256
    buf = torch.empty(M * N * 4, dtype=torch.uint8)
    A = buf[: M * K].view(FP8).view(M, K)
    d = buf[: M * N * 2].view(BF16).view(M, N)
    kw = fp8_args(M=M, N=N, K=K)
    kw["a"] = (A, kw["a"][1])
    kw["d"] = d
    with pytest.raises(ValueError, match=r"fp8_gemm_nt: d must not overlap a\[0\] \(A\) in memory"):
        call_fp8(**kw)


def test_d_must_not_overlap_b():
    kw = fp8_args(d_dtype=F32, N=256, K=256, M=32)
    buf = torch.empty(32 * 256 * 4 + 256 * 256, dtype=torch.uint8)
    d = buf[: 32 * 256 * 4].view(F32).view(32, 256)
    B = buf[32 * 256 * 2 : 32 * 256 * 2 + 256 * 256].view(FP8).view(256, 256)
    kw["b"] = (B, kw["b"][1])
    kw["d"] = d
    with pytest.raises(ValueError, match=r"d must not overlap b\[0\] \(B\)"):
        call_fp8(**kw)


def test_d_must_not_overlap_scales():
    kw = fp8_args(d_dtype=F32)
    d = kw["d"]
    kw["a"] = (kw["a"][0], d.view(-1)[:64].view(32, 2))
    with pytest.raises(ValueError, match=r"d must not overlap a\[1\] \(sfa\)"):
        call_fp8(**kw)


def test_c_may_be_d_but_not_partially_overlap():
    kw = fp8_args(d_dtype=F32)
    kw["c"] = kw["d"]
    call_fp8(**kw)  # in-place accumulation is allowed
    buf = torch.zeros(33 * 256, dtype=F32)
    kw["d"] = buf[: 32 * 256].view(32, 256)
    kw["c"] = buf[256:].view(32, 256)
    with pytest.raises(ValueError, match=r"c must either be d itself .* or not overlap d in memory"):
        call_fp8(**kw)


# ----------------------------------------------------------------------------- scalar arguments
@pytest.mark.parametrize("recipe", [(1, 128, 1), (128, 128, 128), [1, 64, 128]])
def test_recipe_value(recipe):
    kw = fp8_args()
    kw["recipe"] = recipe
    with pytest.raises(ValueError, match=r"fp8_gemm_nt: recipe must be one of \(1, 128, 128\) or \(1, 1, 128\)"):
        call_fp8(**kw)


@pytest.mark.parametrize("recipe", ["1x128", (1, 128), (1, 128.0, 128)])
def test_recipe_type(recipe):
    kw = fp8_args()
    kw["recipe"] = recipe
    with pytest.raises(TypeError, match=r"fp8_gemm_nt: recipe must be None or a tuple of 3 ints"):
        call_fp8(**kw)


def test_recipe_list_accepted():
    call_fp8(**fp8_args(recipe=[1, 128, 128]))


def test_compiled_dims_type():
    kw = fp8_args()
    kw["compiled_dims"] = None
    with pytest.raises(TypeError, match=r"compiled_dims must be a str"):
        call_fp8(**kw)


def test_compiled_dims_value():
    kw = fp8_args()
    kw["compiled_dims"] = "nkx"
    with pytest.raises(ValueError, match=r"compiled_dims must contain only distinct letters from 'mnk'.*'nkx'"):
        call_fp8(**kw)


def test_disable_ue8m0_cast_type():
    kw = fp8_args()
    kw["disable_ue8m0_cast"] = 1
    with pytest.raises(TypeError, match=r"disable_ue8m0_cast must be a bool, got int"):
        call_fp8(**kw)


# ----------------------------------------------------------------------------- m-grouped contiguous
FN_MG = "m_grouped_fp8_gemm_nt_contiguous"


def test_mg_recipe_only_block():
    kw = mg_args()
    kw["recipe"] = (1, 1, 128)
    with pytest.raises(ValueError, match=rf"{FN_MG}: recipe must be None or \(1, 128, 128\) for m-grouped"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_d_dtype():
    kw = mg_args()
    kw["d"] = kw["d"].float()
    with pytest.raises(TypeError, match=rf"{FN_MG}: d must be torch.bfloat16, got torch.float32"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_b_rank():
    kw = mg_args()
    kw["b"] = (kw["b"][0][0], kw["b"][1])
    with pytest.raises(ValueError, match=r"b\[0\] \(B\) must be a 3-D tensor \[G, N, K\]"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_sfb_shape():
    kw = mg_args()
    kw["b"] = (kw["b"][0], _sf(2, 2, 3))
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must have shape \[G, ceil\(N/128\), ceil\(K/128\)\] = \[2, 2, 2\]"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_grouped_layout_dtype():
    kw = mg_args()
    kw["grouped_layout"] = kw["grouped_layout"].long()
    with pytest.raises(TypeError, match=rf"{FN_MG}: grouped_layout must be torch.int32, got torch.int64"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_grouped_layout_shape():
    kw = mg_args()
    kw["grouped_layout"] = kw["grouped_layout"][:128]
    with pytest.raises(ValueError, match=r"grouped_layout must have shape \[M\] = \[256\], got \[128\]"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


@pytest.mark.parametrize("bad", [2, -2])
def test_mg_group_ids_in_range(bad):
    kw = mg_args()
    kw["grouped_layout"][5] = bad
    with pytest.raises(ValueError, match=r"grouped_layout values must be -1 \(padding row\) or a group id in \[0, G=2\)"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_group_start_aligned():
    kw = mg_args()
    gl = torch.full((256,), -1, dtype=torch.int32)
    gl[0:100] = 0
    gl[100:200] = 1  # group 1 starts at row 100, not a multiple of 128
    kw["grouped_layout"] = gl
    with pytest.raises(ValueError, match=r"each group's first row must be at a multiple of the alignment 128.*group 1 starting at row 100"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_group_rows_contiguous():
    kw = mg_args()
    gl = torch.full((256,), -1, dtype=torch.int32)
    gl[0:10] = 0
    gl[128:140] = 0  # group 0 appears twice
    kw["grouped_layout"] = gl
    with pytest.raises(ValueError, match=r"the rows of one group must be contiguous \(one run\), got group 0 in 2 separate runs"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_use_psum_layout_type():
    kw = mg_args()
    kw["use_psum_layout"] = 0
    with pytest.raises(TypeError, match=r"use_psum_layout must be a bool, got int"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_psum_shape():
    kw = mg_args()
    kw["use_psum_layout"] = True
    with pytest.raises(ValueError, match=r"grouped_layout must have shape \[G\] \(with use_psum_layout\) = \[2\], got \[256\]"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


@pytest.mark.parametrize(
    "psum, rule",
    [
        ([200, 100], r"must be non-decreasing, got grouped_layout\[0\] = 200 > grouped_layout\[1\] = 100"),
        ([100, 300], r"must end at <= M = 256, got last end 300"),
        ([-1, 100], r"must be >= 0, got minimum -1"),
        ([100, 120], r"must not end a group inside the alignment gap: group 1 starts at align\(100, 128\) = 128 .* got end 120"),
    ],
)
def test_mg_psum_values(psum, rule):
    kw = mg_args()
    kw["grouped_layout"] = torch.tensor(psum, dtype=torch.int32)
    kw["use_psum_layout"] = True
    with pytest.raises(ValueError, match=rf"{FN_MG}: grouped_layout \(psum row ends\) " + rule):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_k_multiple_of_16():
    kw = mg_args(K=136)
    with pytest.raises(ValueError, match=rf"{FN_MG}: K must be a multiple of 16"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


def test_mg_b_strides():
    kw = mg_args()
    B = _fp8(2, 256, 264)[:, :, :256]
    kw["b"] = (B, kw["b"][1])
    with pytest.raises(ValueError, match=r"b\[0\] \(B\) \[G, N, K\] must have every outer stride a multiple of 16 bytes"):
        finegemm.m_grouped_fp8_gemm_nt_contiguous(**kw)


# ----------------------------------------------------------------------------- masked
FN_MK = "m_grouped_fp8_gemm_nt_masked"


def test_masked_m_dtype():
    kw = masked_args()
    kw["masked_m"] = kw["masked_m"].long()
    with pytest.raises(TypeError, match=rf"{FN_MK}: masked_m must be torch.int32, got torch.int64"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


def test_masked_m_shape():
    kw = masked_args()
    kw["masked_m"] = torch.tensor([1, 2, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"masked_m must have shape \[G\] = \[2\], got \[3\]"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


@pytest.mark.parametrize("vals", [[65, 1], [-1, 3]])
def test_masked_m_values(vals):
    kw = masked_args()
    kw["masked_m"] = torch.tensor(vals, dtype=torch.int32)
    with pytest.raises(ValueError, match=rf"{FN_MK}: masked_m values must be in \[0, Mmax=64\]"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


def test_expected_m_negative():
    kw = masked_args()
    kw["expected_m"] = -1
    with pytest.raises(ValueError, match=rf"{FN_MK}: expected_m must be >= 0, got -1"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


def test_expected_m_type():
    kw = masked_args()
    kw["expected_m"] = 3.0
    with pytest.raises(TypeError, match=r"expected_m must be an int, got float"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


def test_masked_group_count_agrees():
    kw = masked_args()
    kw["b"] = (_fp8(3, 256, 256), _sf(3, 2, 2))
    with pytest.raises(ValueError, match=r"G of a\[0\] \(A \[G, Mmax, K\]\) and b\[0\] \(B \[G, N, K\]\) must agree, got 2 and 3"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


def test_masked_sfa_shape():
    kw = masked_args()
    kw["a"] = (kw["a"][0], _sf(2, 64, 3))
    with pytest.raises(ValueError, match=r"a\[1\] \(sfa\) must have shape \[G, Mmax, ceil\(K/128\)\] = \[2, 64, 2\]"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


def test_masked_d_shape():
    kw = masked_args()
    kw["d"] = torch.empty(2, 32, 256, dtype=BF16)
    with pytest.raises(ValueError, match=r"d must have shape \[G, Mmax, N\] = \[2, 64, 256\]"):
        finegemm.m_grouped_fp8_gemm_nt_masked(**kw)


# ----------------------------------------------------------------------------- k-grouped
FN_KG = "k_grouped_fp8_gemm_nt_contiguous"


def test_ks_must_be_list():
    kw = kg_args()
    kw["ks"] = kw["ks_tensor"]
    with pytest.raises(TypeError, match=rf"{FN_KG}: ks must be a list of ints \(K of each group\), got Tensor"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_ks_items_ints():
    kw = kg_args()
    kw["ks"] = [128.0, 256]
    with pytest.raises(TypeError, match=r"ks must be a list of ints, got ks\[0\] of type float"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


@pytest.mark.parametrize("ks", [[-128, 512], [100, 284]])
def test_ks_values(ks):
    kw = kg_args()
    kw["ks"] = ks
    with pytest.raises(ValueError, match=r"ks values must be non-negative multiples of 128 \(one K block\), got ks\[0\]"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_ks_length():
    kw = kg_args()
    kw["ks"] = [128, 128, 128]
    with pytest.raises(ValueError, match=r"len\(ks\) must equal G = d.shape\[0\] = 2, got len\(ks\) = 3"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_ks_tensor_matches():
    kw = kg_args()
    kw["ks_tensor"] = torch.tensor([256, 128], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"ks_tensor must hold the same values as ks, got ks = \[128, 256\] and ks_tensor = \[256, 128\]"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_ks_tensor_dtype():
    kw = kg_args()
    kw["ks_tensor"] = kw["ks_tensor"].long()
    with pytest.raises(TypeError, match=r"ks_tensor must be torch.int32, got torch.int64"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_a_numel():
    kw = kg_args()
    kw["a"] = (_fp8(64 * 384 - 16), kw["a"][1])
    with pytest.raises(ValueError, match=r"a\[0\] \(A\) must have M \* sum\(ks\) = 64 \* 384 = 24576 elements, got 24560"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_b_rank():
    kw = kg_args()
    kw["b"] = (kw["b"][0].view(128, 384), kw["b"][1])
    with pytest.raises(ValueError, match=r"b\[0\] \(B\) must be a 1-D tensor"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_sfb_shape():
    kw = kg_args()
    kw["b"] = (kw["b"][0], _sf(128, 3))
    with pytest.raises(ValueError, match=r"b\[1\] \(sfb\) must have shape \[sum\(ks\)/128, N\] = \[3, 128\]"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_d_dtype():
    kw = kg_args()
    kw["d"] = kw["d"].to(BF16)
    with pytest.raises(TypeError, match=rf"{FN_KG}: d must be torch.float32.*got torch.bfloat16"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_recipe():
    kw = kg_args()
    kw["recipe"] = (1, 128, 128)
    with pytest.raises(ValueError, match=rf"{FN_KG}: recipe must be one of \(1, 1, 128\)"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_a_contiguous():
    kw = kg_args()
    kw["a"] = (_fp8(2 * 64 * 384)[::2], kw["a"][1])
    with pytest.raises(ValueError, match=r"a\[0\] \(A\) \(1-D\) must be contiguous \(stride 1\), got stride 2"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


def test_kg_c_shape():
    kw = kg_args()
    kw["c"] = torch.zeros(2, 64, 64, dtype=F32)
    with pytest.raises(ValueError, match=r"c must have shape \[G, M, N\] = \[2, 64, 128\]"):
        finegemm.k_grouped_fp8_gemm_nt_contiguous(**kw)


# ----------------------------------------------------------------------------- bf16
def test_bf16_a_dtype():
    kw = bf16_args()
    kw["a"] = kw["a"].float()
    with pytest.raises(TypeError, match=r"^bf16_gemm_nt: a must be torch.bfloat16, got torch.float32$"):
        finegemm.bf16_gemm_nt(**kw)


def test_bf16_k_multiple_of_8():
    kw = bf16_args(K=60)
    with pytest.raises(ValueError, match=r"bf16_gemm_nt: K must be a multiple of 8 \(16 bytes of BF16; TMA rule\), got K=60"):
        finegemm.bf16_gemm_nt(**kw)


def test_bf16_c_requires_fp32_d():
    kw = bf16_args(layout="tn")
    kw["c"] = torch.zeros(32, 64, dtype=F32)
    with pytest.raises(TypeError, match=r"bf16_gemm_tn: d must be torch.float32 when c is given"):
        finegemm.bf16_gemm_tn(**kw)


def test_bf16_k_agree():
    kw = bf16_args(layout="nn")
    kw["b"] = torch.randn(32, 64, dtype=BF16)
    with pytest.raises(ValueError, match=r"bf16_gemm_nn: K of a \(stored \[M, K\] = \[32, 64\]\) and b \(stored \[K, N\] = \[32, 64\]\) must agree"):
        finegemm.bf16_gemm_nn(**kw)


def test_bf16_a_must_be_tensor():
    kw = bf16_args()
    kw["a"] = (kw["a"], None)
    with pytest.raises(TypeError, match=r"bf16_gemm_nt: a must be a torch.Tensor, got tuple"):
        finegemm.bf16_gemm_nt(**kw)


def test_bf16_grouped_b_dtype():
    kw = dict(a=torch.randn(128, 64, dtype=BF16), b=torch.randn(2, 64, 64), d=torch.empty(128, 64, dtype=BF16),
              grouped_layout=torch.zeros(128, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"m_grouped_bf16_gemm_nt_contiguous: b must be torch.bfloat16, got torch.float32"):
        finegemm.m_grouped_bf16_gemm_nt_contiguous(**kw)


def test_bf16_masked_values():
    kw = dict(a=torch.randn(2, 16, 64, dtype=BF16), b=torch.randn(2, 64, 64, dtype=BF16),
              d=torch.empty(2, 16, 64, dtype=BF16), masked_m=torch.tensor([3, 17], dtype=torch.int32), expected_m=8)
    with pytest.raises(ValueError, match=r"m_grouped_bf16_gemm_nt_masked: masked_m values must be in \[0, Mmax=16\]"):
        finegemm.m_grouped_bf16_gemm_nt_masked(**kw)


def test_bf16_k_grouped_shapes():
    kw = dict(a=torch.randn(256, 64, dtype=BF16), b=torch.randn(384, 64, dtype=BF16),
              d=torch.empty(2, 64, 64, dtype=F32), ks=[128, 128], ks_tensor=torch.tensor([128, 128], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"k_grouped_bf16_gemm_tn_contiguous: b must have shape \[sum\(ks\), N\] = \[256, 64\], got \[384, 64\]"):
        finegemm.k_grouped_bf16_gemm_tn_contiguous(**kw)


def test_bf16_k_grouped_mn_row_pitch():
    kw = dict(a=torch.randn(128, 60, dtype=BF16), b=torch.randn(128, 64, dtype=BF16),
              d=torch.empty(1, 60, 64, dtype=F32), ks=[128], ks_tensor=torch.tensor([128], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"a \[sum\(ks\), M\] must have every outer stride a multiple of 16 bytes"):
        finegemm.k_grouped_bf16_gemm_tn_contiguous(**kw)


# ----------------------------------------------------------------------------- house rules
def test_no_assert_statements_in_api():
    api_dir = pathlib.Path(finegemm.api.__file__).parent
    for path in api_dir.glob("*.py"):
        tree = ast.parse(path.read_text())
        asserts = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert)]
        assert not asserts, f"{path.name} uses assert for validation at lines {asserts}"


def test_nan_inf_are_not_errors():
    kw = fp8_args(d_dtype=F32)
    A = kw["a"][0].clone()
    A[0, 0] = float("nan")
    kw["a"] = (A, kw["a"][1])
    kw["b"][1][0, 0] = float("inf")
    call_fp8(**kw)
    assert torch.isnan(kw["d"][0]).any()


def test_self_overlapping_output_is_rejected():
    """Found missing by the API fuzz (tests/test_fuzz_cpu.py): an output whose elements share memory
    (an expanded view) was accepted; CPU then failed inside torch and CUDA would race."""
    a = torch.randn(4, 64).to(torch.bfloat16)
    b = torch.randn(8, 64).to(torch.bfloat16)
    d = torch.empty(8, dtype=torch.bfloat16).expand(4, 8)
    with pytest.raises(ValueError, match=r"^bf16_gemm_nt: d must not have elements that share memory"):
        finegemm.bf16_gemm_nt(a, b, d)
    rows = torch.empty(4 * 16, dtype=torch.bfloat16).as_strided((4, 16), (8, 1))  # rows overlap by half
    with pytest.raises(ValueError, match=r"d must not have elements that share memory"):
        finegemm.bf16_gemm_nt(a, torch.randn(16, 64).to(torch.bfloat16), rows)


def test_disabled_paths_follow_every_environment_write(monkeypatch):
    """FINEGEMM_DISABLE_PATHS is read through os.environ's own dict (api/_validate._environment_reader,
    ~10x cheaper per moved call): every way of writing the variable from Python is seen at once,
    and a name without a fallback still raises, naming the variable."""
    import os

    from finegemm.api import _validate

    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
    assert _validate.disabled_paths() == frozenset()
    monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "host_rebind")
    assert _validate.disabled_paths() == {"host_rebind"}
    os.environ["FINEGEMM_DISABLE_PATHS"] = "dense_moved_calls:masked_moved_calls"
    assert _validate.disabled_paths() == {"dense_moved_calls", "masked_moved_calls"}
    os.environ.update(FINEGEMM_DISABLE_PATHS="")
    assert _validate.disabled_paths() == frozenset()
    del os.environ["FINEGEMM_DISABLE_PATHS"]
    assert _validate.disabled_paths() == frozenset()
    os.environ.setdefault("FINEGEMM_DISABLE_PATHS", "no_such_path")
    with pytest.raises(ValueError, match=r"FINEGEMM_DISABLE_PATHS='no_such_path': unknown path\(s\)"):
        _validate.disabled_paths()
    os.environ.pop("FINEGEMM_DISABLE_PATHS")
    assert _validate.disabled_paths() == frozenset()
    assert _validate.gpu_validated("host_rebind") is True
