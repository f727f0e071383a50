"""Small helpers shared by every layer, and DeepGEMM's `deep_gemm.utils` surface.

ceil_div, align, write_empty_product and the argument checks check_tensor / check_bool / check_int
live here (every layer imports them). DeepGEMM also keeps its casts and scale-layout helpers under
`utils` (`deep_gemm.utils`, `.utils.math`, `.utils.layout`), so code written against it finds them
here too: the submodules `math` and `layout` re-export finegemm.quant, and this module resolves
those names lazily (finegemm.quant imports this module, so importing it back at load time would be
circular).
"""

import torch


def ceil_div(x: int, y: int) -> int:
    """Smallest integer >= x / y for non-negative x and positive y."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """Round x up to a multiple of y."""
    return ceil_div(x, y) * y


def check_tensor(fn: str, name: str, x: object) -> torch.Tensor:
    """TypeError naming the function and argument unless x is a torch.Tensor; returns x."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_bool(fn: str, name: str, v: object) -> None:
    """TypeError naming the function and argument unless v is a bool (the API's convention)."""
    if not isinstance(v, bool):
        raise TypeError(f"{fn}: {name} must be a bool, got {type(v).__name__}")


def check_int(fn: str, name: str, v: object, minimum: int) -> int:
    """TypeError unless v is an int (bools excluded), ValueError below `minimum`."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{fn}: {name} must be an int, got {type(v).__name__}")
    if v < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {v}")
    return v


def write_empty_product(d, c) -> None:
    """D = C + (a product over an empty K): d gets c, or zeros without c (c may be d itself)."""
    if c is None:
        d.zero_()
    elif c is not d:
        d.copy_(c)


# DeepGEMM's utils names served by finegemm.quant (resolved on first use, PEP 562).
_QUANT_NAMES = (
    "ceil_to_ue8m0", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8",
    "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mk_alignment_for_contiguous_layout",
    "get_m_alignment_for_contiguous_layout", "get_k_alignment_for_contiguous_layout",
    "set_mk_alignment_for_contiguous_layout",
)

__all__ = ["ceil_div", "align", *_QUANT_NAMES]


def __getattr__(name: str):
    if name in _QUANT_NAMES:
        from finegemm import quant

        return getattr(quant, name)
    raise AttributeError(f"module 'finegemm.utils' has no attribute {name!r}")
