"""DeepGEMM's first API (the names of its 2025 releases up to the v2 rename), on today's functions.

Inference engines and training stacks written against ``deep_gemm.gemm_fp8_fp8_bf16_nt`` and
friends switch by changing the import; each name below is a thin call of the function it became:

=========================================  ==================================================
DeepGEMM v1 name                           finegemm call
=========================================  ==================================================
gemm_fp8_fp8_bf16_nt(lhs, rhs, out)        fp8_gemm_nt(lhs, rhs, out)
m_grouped_gemm_fp8_fp8_bf16_nt_contiguous  m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out,
  (lhs, rhs, out, m_indices)                 m_indices)
m_grouped_gemm_fp8_fp8_bf16_nt_masked      m_grouped_fp8_gemm_nt_masked(lhs, rhs, out,
  (lhs, rhs, out, masked_m, expected_m)      masked_m, expected_m)
wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out)  fp8_gemm_nt(lhs, rhs, out, c=out, recipe=(1, 1, 128))
k_grouped_wgrad_gemm_fp8_fp8_fp32_nt       k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out,
  (lhs, rhs, out, batch_sizes)               batch_sizes, <batch_sizes on out's device>, c=out)
get_col_major_tma_aligned_tensor(x)        get_mn_major_tma_aligned_tensor(x)
get_m_alignment_for_contiguous_layout()    get_mk_alignment_for_contiguous_layout()
=========================================  ==================================================

The weight-gradient names accumulate into ``out`` (out += lhs @ rhs.T), as they did. Argument
rules are those of the finegemm function (its docstring); an error names both functions and
maps the arguments (lhs -> a, rhs -> b, out -> d). The k-grouped name copies ``batch_sizes`` to
the device on every call (DeepGEMM v1 launched once per group); under a CUDA graph use
k_grouped_fp8_gemm_nt_contiguous with a ks_tensor of your own.
"""
from __future__ import annotations

import functools
from typing import Sequence

import torch

from finegemm.api.dense_fp8 import fp8_gemm_nt
from finegemm.api.grouped_fp8 import (
    k_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
)
from finegemm.quant import get_mk_alignment_for_contiguous_layout, get_mn_major_tma_aligned_tensor

__all__ = [
    "gemm_fp8_fp8_bf16_nt",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked",
    "wgrad_gemm_fp8_fp8_fp32_nt",
    "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt",
    "get_col_major_tma_aligned_tensor",
    "get_m_alignment_for_contiguous_layout",
]

_ARG_MAP = "lhs -> a, rhs -> b, out -> d"


def _renamed(name: str, target: str, exc: Exception) -> Exception:
    return type(exc)(f"{name} (DeepGEMM v1 name of {target}; {_ARG_MAP}): {exc}")


def _legacy(target: str):
    """Name the legacy function and its target in the argument errors of the target."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (ValueError, TypeError, NotImplementedError) as exc:
                raise _renamed(fn.__name__, target, exc) from exc
        call.legacy_target = target
        return call
    return wrap


def renamed_error(name: str, exc: Exception) -> Exception:
    """`exc` (raised for a call of v1 function `name` after it returned: finegemm.check_errors
    reporting a GPU-side check) worded as the v1 function's own argument errors."""
    return _renamed(name, globals()[name].legacy_target, exc)


@_legacy("fp8_gemm_nt")
def gemm_fp8_fp8_bf16_nt(lhs: tuple[torch.Tensor, torch.Tensor], rhs: tuple[torch.Tensor, torch.Tensor],
                         out: torch.Tensor) -> None:
    """out [M, N] bf16 = lhs @ rhs.T with 1x128 lhs and 128x128 rhs scales (fp8_gemm_nt)."""
    fp8_gemm_nt(lhs, rhs, out)


@_legacy("m_grouped_fp8_gemm_nt_contiguous")
def m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs: tuple[torch.Tensor, torch.Tensor],
                                              rhs: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                              m_indices: torch.Tensor) -> None:
    """Row r of out = lhs[r] @ rhs[m_indices[r]].T; m_indices int32 [M] (-1: padding row, written as
    zeros), constant over each get_m_alignment_for_contiguous_layout() rows."""
    m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)


@_legacy("m_grouped_fp8_gemm_nt_masked")
def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs: tuple[torch.Tensor, torch.Tensor],
                                          rhs: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                          masked_m: torch.Tensor, expected_m: int) -> None:
    """out[g, :masked_m[g]] = lhs[g, :masked_m[g]] @ rhs[g].T; masked_m int32 [G] read on the GPU."""
    m_grouped_fp8_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m)


@_legacy("fp8_gemm_nt with recipe (1, 1, 128)")
def wgrad_gemm_fp8_fp8_fp32_nt(lhs: tuple[torch.Tensor, torch.Tensor], rhs: tuple[torch.Tensor, torch.Tensor],
                               out: torch.Tensor) -> None:
    """out [M, N] fp32 += lhs @ rhs.T with 1x128 scales on both operands (per row, per 128 of K)."""
    fp8_gemm_nt(lhs, rhs, out, c=out, recipe=(1, 1, 128))


@_legacy("k_grouped_fp8_gemm_nt_contiguous")
def k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs: tuple[torch.Tensor, torch.Tensor],
                                         rhs: tuple[torch.Tensor, torch.Tensor], out: torch.Tensor,
                                         batch_sizes: Sequence[int]) -> None:
    """out[g] [M, N] fp32 += A_g @ B_g.T for each group, lhs / rhs flattened groups of [M, k_g] /
    [N, k_g] (k_g = batch_sizes[g], multiples of 128) with scales [sum(k_g) / 128, M] / [.., N]."""
    if not isinstance(batch_sizes, (list, tuple)):
        raise TypeError(f"batch_sizes must be a list or tuple of ints, got {type(batch_sizes).__name__}")
    for g, k in enumerate(batch_sizes):  # before the int32 copy (which would truncate or overflow)
        # A wrong type is a TypeError, as k_grouped_fp8_gemm_nt_contiguous raises for its ks (the
        # fuzz compares the exception types of the two names).
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"batch_sizes[{g}] must be an int in [0, 2**31), got {k!r} of type {type(k).__name__}")
        if not 0 <= k < 2**31:
            raise ValueError(f"batch_sizes[{g}] must be an int in [0, 2**31), got {k!r}")
    device = out.device if isinstance(out, torch.Tensor) else "cpu"
    ks_tensor = torch.tensor(list(batch_sizes), dtype=torch.int32, device=device)
    k_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, batch_sizes, ks_tensor, c=out)


def get_col_major_tma_aligned_tensor(x: torch.Tensor) -> torch.Tensor:
    """get_mn_major_tma_aligned_tensor under its v1 name (the scales stored column-major, padded)."""
    return get_mn_major_tma_aligned_tensor(x)


def get_m_alignment_for_contiguous_layout() -> int:
    """get_mk_alignment_for_contiguous_layout under its v1 name."""
    return get_mk_alignment_for_contiguous_layout()
