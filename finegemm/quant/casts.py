"""Casts from bf16/fp32 to FP8 (e4m3fn) with fine-grained fp32 scales.

Every cast returns ``(q, sf)`` such that ``q.float() * sf`` (``sf`` broadcast over its block)
approximates ``x``. Scales are ``amax / 448`` per block (448 = largest finite e4m3fn value),
with amax clamped to >= 1e-4 so that all-zero blocks get a finite, non-zero scale. With
``use_ue8m0=True`` the scale is rounded *up* to a power of two (the UE8M0 format), which keeps
``|x / sf| <= 448`` so nothing saturates.
"""

from __future__ import annotations

import torch

from finegemm.quant.layout import get_mn_major_tma_aligned_tensor
from finegemm.utils import align, ceil_div

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
AMAX_EPS = 1e-4
BLOCK = 128

__all__ = [
    "FP8_DTYPE",
    "FP8_MAX",
    "ceil_to_ue8m0",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "per_channel_cast_to_fp8",
]


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round each element of a positive fp32 tensor up to the next power of two (2**ceil(log2 x)).

    Exact: uses ``frexp`` rather than ``log2`` (whose rounding can push a value just above a
    power of two down onto it). Zeros stay zero. Returns fp32, same shape/device as ``x``.
    """
    x = x.float()
    mantissa, exponent = torch.frexp(x.abs())
    # x = mantissa * 2**exponent with mantissa in [0.5, 1); mantissa == 0.5 means x is a power of 2.
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    out = torch.ldexp(torch.ones_like(x), exponent)
    return torch.where(x == 0, torch.zeros_like(x), out)


def _scale_from_amax(amax: torch.Tensor, use_ue8m0: bool) -> torch.Tensor:
    """fp32 amax -> fp32 scale (amax clamped, divided by 448, optionally rounded up to 2**e)."""
    scale = amax.float().clamp(min=AMAX_EPS) / FP8_MAX
    return ceil_to_ue8m0(scale) if use_ue8m0 else scale


def _quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale -> e4m3fn; the clamp guards against 1-ulp overshoot past 448 (would become NaN)."""
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def _check_2d(x: torch.Tensor, name: str) -> None:
    # TypeError for types / dtypes, ValueError for shapes: the API's convention (api/_validate.py).
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name}: x must be 2-D [rows, K], got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point or x.dtype == FP8_DTYPE:
        raise TypeError(f"{name}: x must be bf16/fp16/fp32, got {x.dtype}")


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ("1x128") cast.

    x: bf16/fp32 [M, K] (any K; the last K block may be partial).
    Returns (fp8 e4m3fn [M, K] contiguous, fp32 sf [M, ceil(K/128)]), one scale per row per
    128-wide K block. sf is stored MN-major with its column stride padded to 16 bytes (strides
    (1, align(M, 4))): the layout the SM90 kernels read with TMA, so passing it on costs no
    transposing copy per GEMM call. Its values are those of the plain [M, Kb] tensor; call
    ``.contiguous()`` for a row-major copy.
    """
    _check_2d(x, "per_token_cast_to_fp8")
    m, k = x.shape
    kb = ceil_div(k, BLOCK)
    # Zero padding never raises a block's amax, so the padded blocks give the same scales.
    padded = torch.zeros((m, kb * BLOCK), dtype=torch.float32, device=x.device)
    padded[:, :k] = x
    view = padded.view(m, kb, BLOCK)
    scale = _scale_from_amax(view.abs().amax(dim=2), use_ue8m0)  # [M, Kb]
    q = _quantize(view, scale.unsqueeze(2)).view(m, kb * BLOCK)[:, :k].contiguous()
    return q, get_mn_major_tma_aligned_tensor(scale)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block ("128x128") cast, for weights.

    x: bf16/fp32 [N, K] (any N, K; edge blocks may be partial).
    Returns (fp8 e4m3fn [N, K] contiguous, fp32 sf [ceil(N/128), ceil(K/128)] contiguous).
    """
    _check_2d(x, "per_block_cast_to_fp8")
    n, k = x.shape
    nb, kb = ceil_div(n, BLOCK), ceil_div(k, BLOCK)
    padded = torch.zeros((align(n, BLOCK), align(k, BLOCK)), dtype=torch.float32, device=x.device)
    padded[:n, :k] = x
    view = padded.view(nb, BLOCK, kb, BLOCK)
    scale = _scale_from_amax(view.abs().amax(dim=(1, 3)), use_ue8m0)  # [Nb, Kb]
    q = _quantize(view, scale[:, None, :, None]).view(nb * BLOCK, kb * BLOCK)[:n, :k].contiguous()
    return q, scale.contiguous()


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel cast: one scale per row over the whole K.

    x: bf16/fp32 [M, K]. Returns (fp8 e4m3fn [M, K] contiguous, fp32 sf [M]).
    """
    _check_2d(x, "per_channel_cast_to_fp8")
    xf = x.float()
    if x.shape[1] == 0:
        amax = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
    else:
        amax = xf.abs().amax(dim=1)
    scale = _scale_from_amax(amax, use_ue8m0)
    q = _quantize(xf, scale.unsqueeze(1)).contiguous()
    return q, scale.contiguous()
