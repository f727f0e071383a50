"""Exact FP8 GEMM references: dequantize to fp64, accumulate in fp64, cast to out_dtype."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm.reference._common import (
    add_c,
    dequantize,
    group_ids_from_layout,
    grouped_contiguous,
    ks_to_list,
    masked_rows,
)

__all__ = [
    "fp8_gemm_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
]


def _sfb_granularity(recipe: Sequence[int]) -> int:
    if len(recipe) != 3 or recipe[0] != 1 or recipe[1] not in (1, 128) or recipe[2] != 128:
        raise ValueError(f"recipe: must be (1, 128, 128) or (1, 1, 128), got {tuple(recipe)}")
    return recipe[1]


def fp8_gemm_nt(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    recipe: Sequence[int] = (1, 128, 128),
) -> torch.Tensor:
    """D = C + dequant(A) @ dequant(B)^T.

    a: fp8 [M, K]; sfa: fp32 [M, ceil(K/128)]; b: fp8 [N, K];
    sfb: fp32 [ceil(N/128), ceil(K/128)] for recipe (1,128,128) or [N, ceil(K/128)] for (1,1,128);
    c: optional [M, N]. Returns out_dtype [M, N] on a's device.
    """
    a64 = dequantize(a, sfa, 1)
    b64 = dequantize(b, sfb, _sfb_granularity(recipe))
    return add_c(a64 @ b64.T, c).to(out_dtype)


def m_grouped_fp8_gemm_nt_contiguous(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    grouped_layout: torch.Tensor,
    use_psum_layout: bool = False,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """M-grouped GEMM over rows laid out contiguously (MoE forward).

    a: fp8 [M, K]; sfa: fp32 [M, ceil(K/128)]; b: fp8 [G, N, K]; sfb: fp32 [G, ceil(N/128), ceil(K/128)].
    grouped_layout: int32 [M] group per row (-1 = padding), or with use_psum_layout int32 [G]
    cumulative row ends (see psum_layout_to_group_ids). Returns out_dtype [M, N]; rows in no
    group are zeros.
    """
    m, num_groups, n = a.shape[0], b.shape[0], b.shape[1]
    ids = group_ids_from_layout(grouped_layout, m, num_groups, use_psum_layout)
    a64 = dequantize(a, sfa, 1)
    out = grouped_contiguous(a64, ids, num_groups, n, lambda g: dequantize(b[g], sfb[g], 128))
    return out.to(out_dtype)


def m_grouped_fp8_gemm_nt_masked(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    masked_m: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Batched GEMM where group g only uses its first masked_m[g] rows (MoE decode).

    a: fp8 [G, Mmax, K]; sfa: fp32 [G, Mmax, ceil(K/128)]; b: fp8 [G, N, K];
    sfb: fp32 [G, ceil(N/128), ceil(K/128)]; masked_m: int32 [G].
    Returns out_dtype [G, Mmax, N] with rows >= masked_m[g] set to zero.
    """
    out = dequantize(a, sfa, 1) @ dequantize(b, sfb, 128).transpose(1, 2)
    return masked_rows(out, masked_m).to(out_dtype)


def k_grouped_fp8_gemm_nt_contiguous(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    ks: Sequence[int] | torch.Tensor,
    m: int,
    n: int,
    c: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """K-grouped GEMM (MoE weight gradient), 1D1D recipe: D_g = C_g + dequant(A_g) @ dequant(B_g)^T.

    a: fp8 1-D, the A_g [M, k_g] (row-major) one after another; sfa: fp32 [sum(k_g)/128, M], group
    g's [k_g/128, M] rows after group g-1's. b: fp8 1-D of B_g [N, k_g]; sfb: fp32 [sum(k_g)/128, N].
    Every k_g % 128 == 0 (k_g = 0 allowed: D_g = C_g or zeros). c: optional [G, M, N].
    Returns fp32 [G, M, N].
    """
    ks = ks_to_list(ks)
    for g, k in enumerate(ks):
        if k < 0 or k % 128:
            raise ValueError(f"ks: every k_g must be a non-negative multiple of 128, got ks[{g}] = {k}")
    out = torch.zeros((len(ks), m, n), dtype=torch.float64, device=a.device)
    a_off = b_off = kb_off = 0
    for g, k in enumerate(ks):
        kb = k // 128
        if k:
            a_g = a[a_off : a_off + m * k].view(m, k)
            b_g = b[b_off : b_off + n * k].view(n, k)
            # Scales are stored K-block-major ([k/128, M]); the dequantizer wants [M, k/128].
            sfa_g = sfa[kb_off : kb_off + kb].T
            sfb_g = sfb[kb_off : kb_off + kb].T
            out[g] = dequantize(a_g, sfa_g, 1) @ dequantize(b_g, sfb_g, 1).T
        a_off, b_off, kb_off = a_off + m * k, b_off + n * k, kb_off + kb
    return add_c(out, c).to(torch.float32)
