"""Exact BF16 GEMM references (fp64 accumulate), same layouts as the FP8 ones without scales."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm.reference._common import add_c, group_ids_from_layout, grouped_contiguous, ks_to_list, masked_rows

__all__ = [
    "bf16_gemm_nt",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
]

_F64 = torch.float64


def bf16_gemm_nt(
    a: torch.Tensor, b: torch.Tensor, c: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """D = C + A @ B^T. a: bf16 [M, K]; b: bf16 [N, K]; c: optional [M, N]. Returns out_dtype [M, N]."""
    return add_c(a.to(_F64) @ b.to(_F64).T, c).to(out_dtype)


def m_grouped_bf16_gemm_nt_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    grouped_layout: torch.Tensor,
    use_psum_layout: bool = False,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """a: bf16 [M, K]; b: bf16 [G, N, K]; grouped_layout as in m_grouped_fp8_gemm_nt_contiguous.

    Returns out_dtype [M, N]; rows in no group are zeros.
    """
    m, num_groups, n = a.shape[0], b.shape[0], b.shape[1]
    ids = group_ids_from_layout(grouped_layout, m, num_groups, use_psum_layout)
    out = grouped_contiguous(a.to(_F64), ids, num_groups, n, lambda g: b[g].to(_F64))
    return out.to(out_dtype)


def m_grouped_bf16_gemm_nt_masked(
    a: torch.Tensor, b: torch.Tensor, masked_m: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """a: bf16 [G, Mmax, K]; b: bf16 [G, N, K]; masked_m: int32 [G].

    Returns out_dtype [G, Mmax, N] with rows >= masked_m[g] set to zero.
    """
    out = a.to(_F64) @ b.to(_F64).transpose(1, 2)
    return masked_rows(out, masked_m).to(out_dtype)


def k_grouped_bf16_gemm_tn_contiguous(
    a: torch.Tensor, b: torch.Tensor, ks: Sequence[int] | torch.Tensor, c: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """D_g = C_g + A_g^T @ B_g, A_g / B_g the k_g rows of group g.

    a: bf16 [sum(k_g), M]; b: bf16 [sum(k_g), N]; ks: k_g per group (k_g = 0 allowed);
    c: optional [G, M, N]. Returns fp32 [G, M, N].
    """
    ks = ks_to_list(ks)
    if any(k < 0 for k in ks):
        raise ValueError(f"ks: every k_g must be non-negative, got {ks}")
    if sum(ks) != a.shape[0] or sum(ks) != b.shape[0]:
        raise ValueError(f"ks: sum(ks) = {sum(ks)} must equal a.shape[0] = {a.shape[0]} and b.shape[0] = {b.shape[0]}")
    m, n = a.shape[1], b.shape[1]
    out = torch.zeros((len(ks), m, n), dtype=_F64, device=a.device)
    off = 0
    for g, k in enumerate(ks):
        if k:
            out[g] = a[off : off + k].to(_F64).T @ b[off : off + k].to(_F64)
        off += k
    return add_c(out, c).to(torch.float32)
