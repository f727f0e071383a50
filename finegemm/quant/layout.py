"""Scale-factor layouts the SM90 kernels read through TMA, and the M-alignment of
contiguous grouped layouts.

TMA requires every global stride to be a multiple of 16 bytes, so a per-row ("1x128") scale
tensor is stored MN-major (the MN index contiguous) with its MN extent padded to a multiple of
16 / element_size elements. 128x128 scales are tiny and read directly, so they stay K-major.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm.utils import align, ceil_div

__all__ = [
    "get_mk_alignment_for_contiguous_layout",
    "set_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "transform_sf_into_required_layout",
]

_VALID_MK_ALIGNMENTS = (16, 32, 64, 128)
_mk_alignment = 128


def get_mk_alignment_for_contiguous_layout() -> int:
    """Row alignment of each group's segment in M-contiguous grouped layouts (default 128).

    With ``use_psum_layout`` group g starts at ``align(end_{g-1}, this)``.
    """
    return _mk_alignment


def set_mk_alignment_for_contiguous_layout(value: int) -> None:
    """Set the contiguous-layout group alignment; one of 16, 32, 64, 128 (ValueError otherwise)."""
    global _mk_alignment
    if isinstance(value, bool) or not isinstance(value, int) or value not in _VALID_MK_ALIGNMENTS:
        raise ValueError(
            f"set_mk_alignment_for_contiguous_layout: value must be one of {_VALID_MK_ALIGNMENTS}, got {value!r}"
        )
    _mk_alignment = value


# DeepGEMM's older name for the same getter.
get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round x (elements) up so that x * element_size is a multiple of 16 bytes."""
    if element_size <= 0 or 16 % element_size != 0:
        raise ValueError(f"get_tma_aligned_size: element_size must divide 16, got {element_size}")
    if x < 0:
        raise ValueError(f"get_tma_aligned_size: x must be >= 0, got {x}")
    return align(x, 16 // element_size)


def _mn_major_strides(shape: Sequence[int], aligned_mn: int) -> tuple[int, ...]:
    if len(shape) == 2:
        return (1, aligned_mn)
    return (shape[2] * aligned_mn, 1, aligned_mn)


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """Same logical tensor, stored MN-major with the MN stride padded for TMA.

    sf: [MN, Kb] or [G, MN, Kb] (fp32 on SM90). Returns a tensor with equal shape and values whose
    strides are (1, aligned_mn) or (Kb * aligned_mn, 1, aligned_mn), aligned_mn =
    get_tma_aligned_size(MN, element_size). Returns ``sf`` itself when it already has that layout.
    """
    if sf.dim() not in (2, 3):
        raise ValueError(f"get_mn_major_tma_aligned_tensor: sf must be 2-D or 3-D, got shape {tuple(sf.shape)}")
    mn, kb = sf.shape[-2], sf.shape[-1]
    aligned_mn = get_tma_aligned_size(mn, sf.element_size())
    strides = _mn_major_strides(sf.shape, aligned_mn)
    if sf.stride() == strides:
        return sf
    lead = tuple(sf.shape[:-2])
    # Storage [.., Kb, aligned_mn]; the logical tensor is its [.., :, :MN] slice transposed.
    storage = torch.empty(lead + (kb, aligned_mn), dtype=sf.dtype, device=sf.device)
    out = storage[..., :mn].transpose(-1, -2)
    out.copy_(sf)
    return out


def transform_sf_into_required_layout(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: Sequence[int],
    num_groups: Optional[int] = None,
    is_sfa: bool = True,
    disable_ue8m0_cast: bool = False,
) -> torch.Tensor:
    """Put a scale tensor into the layout the SM90 kernels expect.

    recipe = (sfa MN granularity, sfb MN granularity, K granularity), e.g. (1, 128, 128) or
    (1, 1, 128). The MN granularity used is recipe[0] for sfa and recipe[1] for sfb.
    sf: fp32 [ceil(mn/gran_mn), ceil(k/128)], or [num_groups, ...] when num_groups is given.
    Per-row (gran 1) scales come back MN-major and TMA-aligned (get_mn_major_tma_aligned_tensor);
    128x128 scales come back contiguous fp32. ``disable_ue8m0_cast`` is accepted for API
    compatibility; SM90 keeps fp32 scales so there is no UE8M0 packing to disable.
    """
    name = "sfa" if is_sfa else "sfb"
    if len(recipe) != 3:
        raise ValueError(f"transform_sf_into_required_layout: recipe must have 3 entries, got {tuple(recipe)}")
    gran_mn = recipe[0] if is_sfa else recipe[1]
    gran_k = recipe[2]
    if gran_k != 128 or gran_mn not in (1, 128):
        raise ValueError(
            f"transform_sf_into_required_layout: SM90 supports {name} granularity (1 or 128, 128), "
            f"got ({gran_mn}, {gran_k}) from recipe {tuple(recipe)}"
        )
    if sf.dtype != torch.float32:
        raise ValueError(f"transform_sf_into_required_layout: SM90 needs fp32 {name}, got {sf.dtype}")
    expected = (ceil_div(mn, gran_mn), ceil_div(k, gran_k))
    if num_groups is not None:
        expected = (num_groups,) + expected
    if tuple(sf.shape) != expected:
        raise ValueError(
            f"transform_sf_into_required_layout: {name} must have shape "
            f"{'[num_groups, ' if num_groups is not None else '['}ceil(mn/{gran_mn}), ceil(k/{gran_k})] = "
            f"{list(expected)} for mn={mn}, k={k}, got {list(sf.shape)}"
        )
    if gran_mn == 1:
        return get_mn_major_tma_aligned_tensor(sf)
    return sf.contiguous()
