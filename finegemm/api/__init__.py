"""Public GEMM entry points (DeepGEMM names): validate, then run the exact reference on CPU
tensors or the SM90 kernels on CUDA tensors. One module per op family."""

from finegemm.api.bf16 import (
    bf16_gemm_nn,
    bf16_gemm_nt,
    bf16_gemm_tn,
    bf16_gemm_tt,
    k_grouped_bf16_gemm_tn_contiguous,
    m_grouped_bf16_gemm_nn_contiguous,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
)
from finegemm.api.dense_fp8 import fp8_gemm_nn, fp8_gemm_nt, fp8_gemm_tn, fp8_gemm_tt
from finegemm.api.grouped_fp8 import (
    k_grouped_fp8_gemm_nt_contiguous,
    k_grouped_fp8_gemm_tn_contiguous,
    m_grouped_fp8_gemm_nn_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
)
from finegemm.api.cublaslt import cublaslt_gemm_nn, cublaslt_gemm_nt, cublaslt_gemm_tn, cublaslt_gemm_tt
from finegemm.api.einsum import einsum
from finegemm.api.fp8_einsum import fp8_einsum
from finegemm.api.skip_head_mid import fp8_gemm_nt_skip_head_mid
from finegemm.api import legacy  # noqa: E402  DeepGEMM v1 names, on the functions above

__all__ = [
    "fp8_gemm_nt",
    "fp8_gemm_nn",
    "fp8_gemm_tn",
    "fp8_gemm_tt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_fp8_gemm_tn_contiguous",
    "bf16_gemm_nt",
    "bf16_gemm_nn",
    "bf16_gemm_tn",
    "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nn_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
    "fp8_gemm_nt_skip_head_mid",
    "einsum",
    "fp8_einsum",
    "cublaslt_gemm_nt",
    "cublaslt_gemm_nn",
    "cublaslt_gemm_tn",
    "cublaslt_gemm_tt",
]
