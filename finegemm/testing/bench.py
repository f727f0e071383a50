"""Kernel timing on the GPU: profiler-based kernel-only time (with L2 flushed) and CUDA events.

All times are returned in seconds.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence, Union

import torch

__all__ = ["bench_kineto", "bench_events", "host_time_per_call"]


def _require_cuda(name: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{name} needs a CUDA device (torch.cuda.is_available() is False)")


def _flush_buffer(flush_l2: bool, nbytes: int) -> torch.Tensor | None:
    # Writing a buffer larger than L2 (50 MB on H100/H200) evicts the operands of the last call.
    if not flush_l2:
        return None
    return torch.empty(max(nbytes // 4, 1), dtype=torch.int, device="cuda")


def bench_kineto(
    fn: Callable[[], object],
    kernel_names: Union[str, Sequence[str]],
    num_tests: int = 30,
    flush_l2: bool = True,
    flush_l2_bytes: int = 256 << 20,
) -> Union[float, tuple[float, ...]]:
    """Mean kernel-only time per call of ``fn``, from torch.profiler's CUDA kernel records.

    For each substring in kernel_names, sums the durations of every kernel whose name contains it
    over num_tests calls and divides by num_tests. The L2 is flushed (a flush_l2_bytes buffer is
    zeroed) before each call; the flush kernel is not counted unless a substring matches it.
    Returns a float for a str kernel_names, else a tuple of floats in the same order.
    Raises RuntimeError without CUDA, or when a substring matches no kernel.
    """
    _require_cuda("bench_kineto")
    names = (kernel_names,) if isinstance(kernel_names, str) else tuple(kernel_names)
    flush = _flush_buffer(flush_l2, flush_l2_bytes)

    fn()  # warm-up: JIT compilation, allocator, lazy module loading
    torch.cuda.synchronize()

    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(num_tests):
            if flush is not None:
                flush.zero_()
            fn()
        torch.cuda.synchronize()

    totals_us = [0.0] * len(names)
    counts = [0] * len(names)
    seen = set()
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        seen.add(evt.name)
        for i, name in enumerate(names):
            if name in evt.name:
                totals_us[i] += evt.time_range.elapsed_us()
                counts[i] += 1
    for name, count in zip(names, counts):
        if count == 0:
            raise RuntimeError(f"bench_kineto: no kernel name contains {name!r}; kernels seen: {sorted(seen)}")
    times = tuple(t / num_tests * 1e-6 for t in totals_us)
    return times[0] if isinstance(kernel_names, str) else times


def bench_events(fn: Callable[[], object], num_tests: int = 30, flush_l2: bool = True) -> float:
    """Median time per call of ``fn`` between CUDA events (includes launch gaps), in seconds.

    The L2 flush (256 MB zeroed) happens before the start event, so it is not timed.
    Raises RuntimeError without CUDA.
    """
    _require_cuda("bench_events")
    flush = _flush_buffer(flush_l2, 256 << 20)
    fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e-3


def host_time_per_call(fn: Callable[[], object], iters: int = 1000) -> float:
    """Mean host (Python + launch) time per call of ``fn`` in seconds, by time.perf_counter.

    One warm-up call first; the GPU (when present) is synchronized once after the timed loop so
    queued work does not spill into the caller. Works without CUDA too (then it is pure CPU time).
    Use a problem that is cheap on the GPU: once the launch queue fills, the host blocks and the
    number becomes GPU time (a 4096^3 bf16 matmul reads ~35 us here for that reason).
    """
    if iters <= 0:
        raise ValueError(f"host_time_per_call: iters must be positive, got {iters}")
    fn()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    elapsed = time.perf_counter() - start
    if cuda:
        torch.cuda.synchronize()
    return elapsed / iters
