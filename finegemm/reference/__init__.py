"""Exact PyTorch references of every finegemm op (the source of truth for tests).

Canonical "NT" forms; inputs are dequantized to float64 (fp8 times its block scale), multiplied
and accumulated in float64, C added in float64, then cast to ``out_dtype``. They run on CPU and
CUDA tensors alike and return new tensors on the inputs' device.
"""

from finegemm.reference._common import dequantize, psum_layout_to_group_ids
from finegemm.reference.bf16 import (
    bf16_gemm_nt,
    k_grouped_bf16_gemm_tn_contiguous,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
)
from finegemm.reference.fp8 import (
    fp8_gemm_nt,
    k_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
)

__all__ = [
    "dequantize",
    "psum_layout_to_group_ids",
    "fp8_gemm_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "bf16_gemm_nt",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
]
