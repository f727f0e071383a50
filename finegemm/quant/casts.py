"""Casts from bf16 / fp16 / fp32 to FP8 (e4m3fn) with fine-grained fp32 scales (DeepGEMM's names
and arguments: x, use_ue8m0, gran_k).

Every cast returns ``(q, sf)`` such that ``q.float() * sf`` (``sf`` broadcast over its block)
approximates ``x``. Scales are ``amax / 448`` per block (448 = largest finite e4m3fn value;
computed as amax * fp32(1/448), and q as x * (1 / sf): DeepGEMM's arithmetic, the same bits on
CPU and CUDA),
with amax clamped to >= 1e-4 so that all-zero blocks get a finite, non-zero scale. With
``use_ue8m0=True`` the scale is rounded *up* to a power of two (the UE8M0 format), which keeps
``|x / sf| <= 448`` so nothing saturates. A block holding inf or NaN gets an inf / NaN scale, so it
dequantizes to NaN (never to finite values). Every function raises TypeError / ValueError naming
itself, the argument and the rule for bad input.
"""

from __future__ import annotations

import struct

import torch

from finegemm.quant.layout import get_mn_major_tma_aligned_tensor
from finegemm.utils import ceil_div, check_bool, check_int, check_tensor

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
    """Round the magnitude of each element up to the next power of two (2**ceil(log2 |x|)).

    Exact: uses ``frexp`` rather than ``log2`` (whose rounding can push a value just above a
    power of two down onto it). Zeros stay zero; inf stays inf and NaN stays NaN (a block with a
    non-finite amax keeps a non-finite scale, so it never dequantizes to finite values). Returns
    fp32, same shape / device as ``x``.
    """
    x = check_tensor("ceil_to_ue8m0", "x", x).float().abs()
    mantissa, exponent = torch.frexp(x)
    # x = mantissa * 2**exponent with mantissa in [0.5, 1); mantissa == 0.5 means x is a power of 2.
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    out = torch.ldexp(torch.ones_like(x), exponent)
    # frexp leaves inf / NaN with exponent 0 (out = 1): keep them, and zeros, as they are.
    return torch.where((x == 0) | ~torch.isfinite(x), x, out)


# fp32(1 / 448), exactly representable as a Python float. The arithmetic is DeepGEMM's as PyTorch runs
# it on CUDA (a division by a Python scalar becomes a multiplication by its fp32 reciprocal there,
# not on CPU): written out, the casts give bitwise the same q and sf on CPU and CUDA, and DeepGEMM's.
INV_FP8_MAX = struct.unpack("f", struct.pack("f", 1.0 / FP8_MAX))[0]


def _scale_from_amax(amax: torch.Tensor, use_ue8m0: bool) -> torch.Tensor:
    """fp32 amax -> fp32 scale: max(amax, 1e-4) * fp32(1/448), optionally rounded up to 2**e."""
    scale = amax.float().clamp(min=AMAX_EPS) * INV_FP8_MAX
    return ceil_to_ue8m0(scale) if use_ue8m0 else scale


def _quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x * (1 / scale) -> e4m3fn; the clamp guards against an overshoot past 448 by rounding."""
    return (x * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def _check_cast_args(fn: str, x: object, use_ue8m0: object, gran_k: object) -> torch.Tensor:
    # TypeError for types / dtypes, ValueError for shapes and values: the API's convention
    # (api/_validate.py).
    x = check_tensor(fn, "x", x)
    if x.dim() != 2:
        raise ValueError(f"{fn}: x must be 2-D, got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point or x.dtype in (FP8_DTYPE, torch.float8_e5m2):
        raise TypeError(f"{fn}: x must be bf16 / fp16 / fp32 / fp64, got {x.dtype}")
    check_bool(fn, "use_ue8m0", use_ue8m0)
    check_int(fn, "gran_k", gran_k, 1)
    return x


def per_token_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False, gran_k: int = BLOCK,
                          use_packed_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ("1 x gran_k") cast, for activations (A [M, K] of the GEMMs).

    x: floating point [M, K] (any K: the last K block may be partial; any strides).
    Returns (fp8 e4m3fn [M, K] contiguous, fp32 sf [M, ceil(K/gran_k)]), one scale per row per
    gran_k-wide K block (the SM90 kernels read gran_k = 128). sf is stored MN-major with its column
    stride padded to 16 bytes (strides (1, align(M, 4))): the layout the SM90 kernels read with TMA,
    so passing it on costs no transposing copy per GEMM call. Its values are those of the plain
    [M, Kb] tensor; call ``.contiguous()`` for a row-major copy.
    use_packed_ue8m0 (DeepGEMM's SM100 format, 4 exponents per int32) is not built: SM90 kernels
    take fp32 scales (NotImplementedError when True).
    """
    fn = "per_token_cast_to_fp8"
    x = _check_cast_args(fn, x, use_ue8m0, gran_k)
    check_bool(fn, "use_packed_ue8m0", use_packed_ue8m0)
    if use_packed_ue8m0:
        raise NotImplementedError(
            f"{fn}: use_packed_ue8m0=True (int32-packed UE8M0 scales) is an SM100 layout that finegemm's SM90 "
            f"kernels do not read; call with use_ue8m0=True for power-of-two fp32 scales"
        )
    m, k = x.shape
    kb = ceil_div(k, gran_k)
    # Zero padding never raises a block's amax, so the padded blocks give the same scales.
    padded = torch.zeros((m, kb * gran_k), dtype=torch.float32, device=x.device)
    padded[:, :k] = x
    view = padded.view(m, kb, gran_k)
    scale = _scale_from_amax(view.abs().amax(dim=2), use_ue8m0)  # [M, Kb]
    q = _quantize(view, scale.unsqueeze(2)).view(m, kb * gran_k)[:, :k].contiguous()
    return q, get_mn_major_tma_aligned_tensor(scale)


def per_block_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False,
                          gran_k: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block ("gran_k x gran_k") cast, for weights (B [N, K]; the SM90 kernels read 128 x 128).

    x: floating point [N, K] (any N, K: edge blocks may be partial; any strides).
    Returns (fp8 e4m3fn [N, K] contiguous, fp32 sf [ceil(N/gran_k), ceil(K/gran_k)] contiguous).
    """
    x = _check_cast_args("per_block_cast_to_fp8", x, use_ue8m0, gran_k)
    n, k = x.shape
    nb, kb = ceil_div(n, gran_k), ceil_div(k, gran_k)
    padded = torch.zeros((nb * gran_k, kb * gran_k), dtype=torch.float32, device=x.device)
    padded[:n, :k] = x
    view = padded.view(nb, gran_k, kb, gran_k)
    scale = _scale_from_amax(view.abs().amax(dim=(1, 3)), use_ue8m0)  # [Nb, Kb]
    q = _quantize(view, scale[:, None, :, None]).view(nb * gran_k, kb * gran_k)[:n, :k].contiguous()
    return q, scale.contiguous()


def per_channel_cast_to_fp8(x: torch.Tensor, use_ue8m0: bool = False,
                            gran_k: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel cast along the rows (DeepGEMM's meaning): one scale per column per gran_k rows.

    For an operand stored K-outer, [K, MN] (A [K, M] of fp8_gemm_tn / _tt, B [K, N] of _nn / _tn,
    recipe (1, 1, 128)): its scales [ceil(K/gran_k), MN] are exactly the sfa / sfb those
    functions take for it. x: floating point [K, MN] (any K: the last row block may be partial,
    where DeepGEMM requires K % gran_k == 0; any strides).
    Returns (fp8 e4m3fn [K, MN] contiguous, fp32 sf [ceil(K/gran_k), MN]); sf's rows are padded to
    16 bytes (strides (align(MN, 4), 1), a view of the first MN columns), the TMA-aligned layout.
    """
    x = _check_cast_args("per_channel_cast_to_fp8", x, use_ue8m0, gran_k)
    k, mn = x.shape
    kb = ceil_div(k, gran_k)
    padded = torch.zeros((kb * gran_k, mn), dtype=torch.float32, device=x.device)
    padded[:k] = x
    view = padded.view(kb, gran_k, mn)
    scale = _scale_from_amax(view.abs().amax(dim=1), use_ue8m0)  # [Kb, MN]
    q = _quantize(view, scale.unsqueeze(1)).view(kb * gran_k, mn)[:k].contiguous()
    # [Kb, MN] row-major is MN-major: only the row pitch may need padding for TMA.
    return q, get_mn_major_tma_aligned_tensor(scale.t()).t()
