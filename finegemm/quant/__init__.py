"""FP8 casts with fine-grained scales, UE8M0 rounding and scale-layout transforms
(DeepGEMM-compatible names)."""

from finegemm.quant.casts import (
    FP8_DTYPE,
    FP8_MAX,
    ceil_to_ue8m0,
    per_block_cast_to_fp8,
    per_channel_cast_to_fp8,
    per_token_cast_to_fp8,
)
from finegemm.quant.layout import (
    get_k_alignment_for_contiguous_layout,
    get_m_alignment_for_contiguous_layout,
    get_mk_alignment_for_contiguous_layout,
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    get_theoretical_mk_alignment_for_contiguous_layout,
    get_tma_aligned_size,
    set_mk_alignment_for_contiguous_layout,
    transform_sf_into_required_layout,
)
from finegemm.utils import align, ceil_div

__all__ = [
    "FP8_DTYPE",
    "FP8_MAX",
    "align",
    "ceil_div",
    "ceil_to_ue8m0",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
    "get_mk_alignment_for_contiguous_layout",
    "set_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_k_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout",
]
