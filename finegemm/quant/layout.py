"""Scale-factor layouts the SM90 kernels read through TMA, and the M-alignment of
contiguous grouped layouts.

TMA requires every global stride to be a multiple of 16 bytes, so a per-row ("1x128") scale
tensor is stored MN-major (the MN index contiguous) with its MN extent padded to a multiple of
16 / element_size elements. 128x128 scales are tiny and read directly, so they stay K-major.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm.utils import align, ceil_div, check_bool, check_int, check_tensor

__all__ = [
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


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: Optional[int] = None,
                                                       num_groups: Optional[int] = None) -> int:
    """The alignment to pass to set_mk_alignment_for_contiguous_layout (DeepGEMM's name) for
    groups of about `expected_m` rows each (num_groups is accepted for DeepGEMM's newer signature
    and not needed). The SM90 kernels take 64 or 128 (a tile never spans two groups): 64 when
    expected_m <= 64, where a group fits one 64-row tile and 128 would compute at least twice the
    rows it has; 128 otherwise (and without a hint), the alignment the kernels are tuned for."""
    fn = "get_theoretical_mk_alignment_for_contiguous_layout"
    if expected_m is not None:
        check_int(fn, "expected_m", expected_m, 0)
    if num_groups is not None:
        check_int(fn, "num_groups", num_groups, 0)
    return 64 if expected_m is not None and expected_m <= 64 else 128


# DeepGEMM's older names for the same getter (M-grouped and K-grouped layouts share the alignment).
get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round x (elements) up so that x * element_size is a multiple of 16 bytes."""
    fn = "get_tma_aligned_size"
    check_int(fn, "x", x, 0)
    check_int(fn, "element_size", element_size, 1)
    if 16 % element_size != 0:
        raise ValueError(f"{fn}: element_size must divide 16, got {element_size}")
    return align(x, 16 // element_size)


def _mn_major_strides(shape: Sequence[int], aligned_mn: int) -> tuple[int, ...]:
    if len(shape) == 2:
        return (1, aligned_mn)
    return (shape[2] * aligned_mn, 1, aligned_mn)


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """Same logical tensor, stored MN-major with the MN stride padded for TMA.

    sf: [MN, Kb] or [G, MN, Kb] (fp32 on SM90; any dtype whose size divides 16 bytes). Returns a
    tensor with equal shape and values whose strides are (1, aligned_mn) or
    (Kb * aligned_mn, 1, aligned_mn), aligned_mn = get_tma_aligned_size(MN, element_size). Returns
    ``sf`` itself when it already has that layout.
    """
    fn = "get_mn_major_tma_aligned_tensor"
    check_tensor(fn, "sf", sf)
    if sf.dim() not in (2, 3):
        raise ValueError(f"{fn}: sf must be 2-D or 3-D, got shape {tuple(sf.shape)}")
    if 16 % sf.element_size() != 0:
        raise TypeError(f"{fn}: sf's element size must divide 16 bytes, got {sf.dtype}")
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


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor) -> torch.Tensor:
    """fp32 scales as packed UE8M0 (DeepGEMM's SM100 scale layout), MN-major and TMA-aligned.

    sf: fp32 [MN, Kb] or [G, MN, Kb]. Each value keeps its 8-bit biased exponent only (2^e -> e +
    127: exact for the powers of two that ceil_to_ue8m0 / the casts' ue8m0 option produce; other
    positive values are rounded down to a power of two; the sign is dropped). Four consecutive Kb
    entries share one int32, entry 4 j + i in byte i (little-endian; entries past Kb are 0).
    Returns int32 [MN, ceil(Kb/4)] (or [G, ...]) with strides (1, aligned_mn) (or (ceil(Kb/4) *
    aligned_mn, 1, aligned_mn)), aligned_mn = get_tma_aligned_size(MN, 4). finegemm's SM90 kernels
    read fp32 scales; this serves code shared with SM100 DeepGEMM callers.
    """
    fn = "get_mn_major_tma_aligned_packed_ue8m0_tensor"
    check_tensor(fn, "sf", sf)
    if sf.dtype != torch.float32:
        raise TypeError(f"{fn}: sf must be torch.float32, got {sf.dtype}")
    if sf.dim() not in (2, 3):
        raise ValueError(f"{fn}: sf must be 2-D or 3-D, got shape {tuple(sf.shape)}")
    kb = sf.shape[-1]
    if kb == 0:  # nothing to pack (an empty last dimension cannot be viewed as int32)
        return get_mn_major_tma_aligned_tensor(torch.zeros(sf.shape, dtype=torch.int32, device=sf.device))
    exponents = ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    padded = torch.zeros(tuple(sf.shape[:-1]) + (4 * ceil_div(kb, 4),), dtype=torch.uint8, device=sf.device)
    padded[..., :kb] = exponents
    return get_mn_major_tma_aligned_tensor(padded.view(torch.int32))


def _granularity(fn: str, recipe: object, recipe_ab: object, is_sfa: bool) -> tuple[int, int]:
    """(MN granularity, K granularity) of one operand's scales from DeepGEMM's recipe (sfa MN,
    sfb MN, K) or recipe_ab (this operand's (MN, K)); exactly one of them is given."""
    if (recipe is None) == (recipe_ab is None):
        raise ValueError(f"{fn}: pass exactly one of recipe (3 ints) and recipe_ab (2 ints), "
                         f"got recipe={recipe!r}, recipe_ab={recipe_ab!r}")
    name, value, size = ("recipe", recipe, 3) if recipe is not None else ("recipe_ab", recipe_ab, 2)
    if not isinstance(value, (tuple, list)) or len(value) != size or any(
            isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise TypeError(f"{fn}: {name} must be a tuple of {size} ints, got {value!r}")
    if size == 2:
        return value[0], value[1]
    return (value[0] if is_sfa else value[1]), value[2]


def transform_sf_into_required_layout(
    sf: torch.Tensor,
    mn: int,
    k: int,
    recipe: Optional[Sequence[int]] = None,
    num_groups: Optional[int] = None,
    is_sfa: bool = False,
    disable_ue8m0_cast: bool = False,
    recipe_ab: Optional[Sequence[int]] = None,
) -> torch.Tensor:
    """Put a scale tensor into the layout the SM90 kernels expect (DeepGEMM's name, arguments and
    defaults: ``is_sfa`` False means sfb).

    recipe = (sfa MN granularity, sfb MN granularity, K granularity), e.g. (1, 128, 128) or
    (1, 1, 128); the MN granularity used is recipe[0] for sfa and recipe[1] for sfb. Or
    recipe_ab = (MN granularity, K granularity) of this operand (DeepGEMM's newer form); pass
    exactly one. SM90 takes MN granularity 1 or 128 and K granularity 128.
    sf: fp32 [ceil(mn/gran_mn), ceil(k/128)], or [num_groups, ...] when num_groups is given.
    Per-row (gran 1) scales come back MN-major and TMA-aligned (get_mn_major_tma_aligned_tensor);
    128x128 scales come back contiguous fp32. ``disable_ue8m0_cast`` is accepted for API
    compatibility; SM90 keeps fp32 scales so there is no UE8M0 packing to disable.
    """
    fn = "transform_sf_into_required_layout"
    check_tensor(fn, "sf", sf)
    check_int(fn, "mn", mn, 0)
    check_int(fn, "k", k, 0)
    if num_groups is not None:
        check_int(fn, "num_groups", num_groups, 0)
    check_bool(fn, "is_sfa", is_sfa)
    check_bool(fn, "disable_ue8m0_cast", disable_ue8m0_cast)
    name = "sfa" if is_sfa else "sfb"
    gran_mn, gran_k = _granularity(fn, recipe, recipe_ab, is_sfa)
    if gran_k != 128 or gran_mn not in (1, 128):
        raise ValueError(
            f"{fn}: SM90 supports {name} granularity (1 or 128, 128), got ({gran_mn}, {gran_k}) from "
            f"{'recipe' if recipe is not None else 'recipe_ab'} {tuple(recipe if recipe is not None else recipe_ab)}"
        )
    if sf.dtype != torch.float32:
        raise TypeError(f"{fn}: SM90 needs fp32 {name}, got {sf.dtype}")
    expected = (ceil_div(mn, gran_mn), ceil_div(k, gran_k))
    if num_groups is not None:
        expected = (num_groups,) + expected
    if tuple(sf.shape) != expected:
        raise ValueError(
            f"{fn}: {name} must have shape "
            f"{'[num_groups, ' if num_groups is not None else '['}ceil(mn/{gran_mn}), ceil(k/{gran_k})] = "
            f"{list(expected)} for mn={mn}, k={k}, got {list(sf.shape)}"
        )
    if gran_mn == 1:
        return get_mn_major_tma_aligned_tensor(sf)
    return sf.contiguous()
