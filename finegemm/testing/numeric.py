"""Numeric comparison helpers."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["calc_diff", "count_bytes"]


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2*sum(x*y) / sum(x*x + y*y), computed in float64.

    0 for identical tensors, 2 for y = -x; a scale-aware error measure (about the squared
    relative error). Both all-zero (or empty) -> 0.0. x and y must broadcast; returns a float.
    """
    x = x.to(torch.float64)
    y = y.to(device=x.device, dtype=torch.float64)
    denominator = (x * x + y * y).sum().item()
    if denominator == 0.0:
        return 0.0
    return 1.0 - 2.0 * (x * y).sum().item() / denominator


def count_bytes(*tensors: Any) -> int:
    """Total numel * element_size over the given tensors (nested lists/tuples walked; None skipped)."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        if isinstance(t, (list, tuple)):
            total += count_bytes(*t)
        elif isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
        else:
            raise TypeError(f"count_bytes: expected tensors (or lists of them), got {type(t).__name__}")
    return total
