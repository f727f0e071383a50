"""finegemm: FP8/BF16 tensor-core GEMMs for NVIDIA Hopper (SM90) under DeepGEMM's API.

CPU tensors run the exact PyTorch references (``finegemm.reference``); CUDA tensors run the
JIT-compiled SM90 kernels. See docs/ARCHITECTURE.md.
"""

__version__ = "0.1.0"

from finegemm import quant, reference, runtime, testing, utils
from finegemm.api import (
    bf16_gemm_nn,
    bf16_gemm_nt,
    bf16_gemm_tn,
    bf16_gemm_tt,
    cublaslt_gemm_nn,
    cublaslt_gemm_nt,
    cublaslt_gemm_tn,
    cublaslt_gemm_tt,
    einsum,
    fp8_einsum,
    fp8_gemm_nn,
    fp8_gemm_nt,
    fp8_gemm_nt_skip_head_mid,
    fp8_gemm_tn,
    fp8_gemm_tt,
    k_grouped_bf16_gemm_tn_contiguous,
    k_grouped_fp8_gemm_nt_contiguous,
    k_grouped_fp8_gemm_tn_contiguous,
    m_grouped_bf16_gemm_nn_contiguous,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
    m_grouped_fp8_gemm_nn_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
)
from finegemm.api.legacy import (
    gemm_fp8_fp8_bf16_nt,
    get_col_major_tma_aligned_tensor,
    get_m_alignment_for_contiguous_layout,
    k_grouped_wgrad_gemm_fp8_fp8_fp32_nt,
    m_grouped_gemm_fp8_fp8_bf16_nt_contiguous,
    m_grouped_gemm_fp8_fp8_bf16_nt_masked,
    wgrad_gemm_fp8_fp8_fp32_nt,
)
from finegemm.quant import (
    ceil_to_ue8m0,
    get_k_alignment_for_contiguous_layout,
    get_mk_alignment_for_contiguous_layout,
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    get_theoretical_mk_alignment_for_contiguous_layout,
    get_tma_aligned_size,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_token_cast_to_fp8,
    set_mk_alignment_for_contiguous_layout,
    transform_sf_into_required_layout,
)
from finegemm.runtime import (check_errors, get_block_size_multiple_of, get_deterministic_algorithms,
                               get_ignore_compile_dims, get_num_sms, get_pdl, get_tc_util, set_block_size_multiple_of,
                               set_ignore_compile_dims, set_num_sms, set_pdl, set_tc_util,
                               use_deterministic_algorithms)
from finegemm.utils import align, ceil_div

__all__ = [
    "__version__",
    # GEMMs
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
    "check_errors",
    # DeepGEMM's other products (finegemm.api.skip_head_mid / einsum / fp8_einsum / cublaslt)
    "fp8_gemm_nt_skip_head_mid",
    "einsum",
    "fp8_einsum",
    "cublaslt_gemm_nt",
    "cublaslt_gemm_nn",
    "cublaslt_gemm_tn",
    "cublaslt_gemm_tt",
    # DeepGEMM v1 names (finegemm.api.legacy)
    "gemm_fp8_fp8_bf16_nt",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "wgrad_gemm_fp8_fp8_fp32_nt",
    "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt",
    "get_col_major_tma_aligned_tensor",
    "get_m_alignment_for_contiguous_layout",
    # runtime knobs
    "set_num_sms",
    "get_num_sms",
    "set_tc_util",
    "get_tc_util",
    "set_pdl",
    "get_pdl",
    "set_ignore_compile_dims",
    "get_ignore_compile_dims",
    "use_deterministic_algorithms",
    "get_deterministic_algorithms",
    "set_block_size_multiple_of",
    "get_block_size_multiple_of",
    # utils
    "ceil_div",
    "align",
    # quantization and layouts
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "ceil_to_ue8m0",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout",
    "get_mk_alignment_for_contiguous_layout",
    "set_mk_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    # submodules
    "quant",
    "reference",
    "runtime",
    "testing",
    "utils",
]
