"""Shared pieces of the references: dequantization to float64 and grouped-layout decoding."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from finegemm.utils import ceil_div

__all__ = ["dequantize", "psum_layout_to_group_ids", "group_ids_from_layout", "ks_to_list"]


def dequantize(x: torch.Tensor, sf: torch.Tensor, gran_mn: int, gran_k: int = 128) -> torch.Tensor:
    """fp8 (or any float) [..., MN, K] times fp32 scales [..., ceil(MN/gran_mn), ceil(K/gran_k)] -> fp64.

    Each scale covers a gran_mn x gran_k block; the last partial block in MN or K uses that
    block's scale. Leading (group) dimensions must match between x and sf.
    """
    mn, k = x.shape[-2], x.shape[-1]
    expected = tuple(x.shape[:-2]) + (ceil_div(mn, gran_mn), ceil_div(k, gran_k))
    if tuple(sf.shape) != expected:
        raise ValueError(
            f"dequantize: scales for a {tuple(x.shape)} operand with {gran_mn}x{gran_k} blocks must have "
            f"shape {expected}, got {tuple(sf.shape)}"
        )
    s = sf.to(torch.float64)
    if gran_mn != 1:
        s = s.repeat_interleave(gran_mn, dim=-2)[..., :mn, :]
    s = s.repeat_interleave(gran_k, dim=-1)[..., :k]
    return x.to(torch.float64) * s


def psum_layout_to_group_ids(psum: torch.Tensor, m: int, alignment: int) -> torch.Tensor:
    """Decode a "psum" contiguous layout into one group id per row.

    psum: int [G] non-decreasing cumulative row ends end_g. Group g owns rows [start_g, end_g) with
    start_0 = 0 and start_g = align(end_{g-1}, alignment) (empty when start_g >= end_g).
    Returns int32 [m] on psum's device: the owning group, or -1 for rows in no segment (alignment
    gaps and rows past the last end).
    """
    device = psum.device
    ends = psum.to(torch.int64).reshape(-1)
    if ends.numel() == 0:
        return torch.full((m,), -1, dtype=torch.int32, device=device)
    if bool((ends[1:] < ends[:-1]).any()) or bool((ends < 0).any()):
        raise ValueError(f"psum_layout_to_group_ids: psum must be non-negative and non-decreasing, got {ends.tolist()}")
    starts = torch.zeros_like(ends)
    starts[1:] = (ends[:-1] + alignment - 1) // alignment * alignment
    rows = torch.arange(m, dtype=torch.int64, device=device)
    # First group whose end is > row; the row belongs to it iff it is at or past that group's start.
    g = torch.searchsorted(ends, rows, right=True)
    inside = g < ends.numel()
    g_clamped = g.clamp(max=ends.numel() - 1)
    inside &= rows >= starts[g_clamped]
    return torch.where(inside, g, torch.full_like(g, -1)).to(torch.int32)


def group_ids_from_layout(
    grouped_layout: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool
) -> torch.Tensor:
    """int32 group id per row ([m], -1 = no group) from either contiguous-layout encoding."""
    if use_psum_layout:
        from finegemm.quant import get_mk_alignment_for_contiguous_layout

        if grouped_layout.numel() != num_groups:
            raise ValueError(
                f"grouped_layout: with use_psum_layout it must have one end per group ({num_groups}), "
                f"got {grouped_layout.numel()}"
            )
        return psum_layout_to_group_ids(grouped_layout, m, get_mk_alignment_for_contiguous_layout())
    ids = grouped_layout.reshape(-1)
    if ids.numel() != m:
        raise ValueError(f"grouped_layout: must have one entry per row ({m}), got {ids.numel()}")
    if m and bool(((ids < -1) | (ids >= num_groups)).any()):
        raise ValueError(f"grouped_layout: entries must be -1 or in [0, {num_groups}), got out-of-range ids")
    return ids.to(torch.int32)


def grouped_contiguous(
    a64: torch.Tensor, group_ids: torch.Tensor, num_groups: int, n: int, b_group: Callable[[int], torch.Tensor]
) -> torch.Tensor:
    """fp64 [M, N]: row r = a64[r] @ b_group(ids[r]).T, zeros where ids[r] == -1.

    a64: fp64 [M, K]; b_group(g) -> fp64 [N, K]. Loops over groups, never over rows.
    """
    out = torch.zeros((a64.shape[0], n), dtype=torch.float64, device=a64.device)
    for g in range(num_groups):
        rows = (group_ids == g).nonzero().squeeze(1)
        if rows.numel():
            out[rows] = a64[rows] @ b_group(g).T
    return out


def masked_rows(out: torch.Tensor, masked_m: torch.Tensor) -> torch.Tensor:
    """Zero rows m >= masked_m[g] of out [G, Mmax, N] (in place) and return it."""
    rows = torch.arange(out.shape[1], device=out.device)
    keep = rows[None, :] < masked_m.to(device=out.device, dtype=torch.int64).reshape(-1, 1)
    # masked_fill rather than multiply: garbage (inf/NaN) in dropped rows must not leak.
    return out.masked_fill_(~keep.unsqueeze(2), 0)


def ks_to_list(ks: Sequence[int] | torch.Tensor) -> list[int]:
    """k-grouped sizes as Python ints (accepts a list/tuple or a 1-D integer tensor)."""
    if isinstance(ks, torch.Tensor):
        return [int(v) for v in ks.reshape(-1).tolist()]
    return [int(v) for v in ks]


def add_c(d: torch.Tensor, c: Optional[torch.Tensor]) -> torch.Tensor:
    """d (fp64) + c (any float dtype) in fp64; shapes must match exactly."""
    if c is None:
        return d
    if tuple(c.shape) != tuple(d.shape):
        raise ValueError(f"c: must have shape {tuple(d.shape)}, got {tuple(c.shape)}")
    return d + c.to(torch.float64)
