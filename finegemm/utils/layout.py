"""DeepGEMM's `deep_gemm.utils.layout` names: scale layouts and contiguous-layout alignment
(finegemm.quant.layout)."""

from finegemm.quant.layout import (get_k_alignment_for_contiguous_layout, get_m_alignment_for_contiguous_layout,
                                   get_mk_alignment_for_contiguous_layout,
                                   get_mn_major_tma_aligned_packed_ue8m0_tensor, get_mn_major_tma_aligned_tensor,
                                   get_tma_aligned_size, set_mk_alignment_for_contiguous_layout,
                                   transform_sf_into_required_layout)

__all__ = ["get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
           "transform_sf_into_required_layout",
           "get_mk_alignment_for_contiguous_layout", "set_mk_alignment_for_contiguous_layout",
           "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout"]
