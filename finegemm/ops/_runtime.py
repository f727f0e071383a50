"""Per-call CUDA plumbing shared by the kernel families (ops/sm90_*.py).

- raw_stream(device_index): the current stream as an int without building a torch.cuda.Stream
  (~0.1 µs against ~1-2 µs).
- is_capturing(): whether the current stream is being captured into a CUDA graph.
- SplitKWorkspace: the fp32 partial-tile workspace and int32 per-tile counters a split-K launch
  needs, one pair per (device, stream), grown on demand. The counters are zeroed once when
  allocated; the kernels leave them at zero, so no memset runs per call. Under graph capture a
  launch gets buffers of its own (allocated during capture, kept alive for the process), so graph
  replays never share buffers with eager calls. Replaced buffers are kept alive too: kernels
  queued on other streams may still use them.
"""
from __future__ import annotations

import threading

import torch

__all__ = ["raw_stream", "is_capturing", "SplitKWorkspace"]

try:
    raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - torch builds without the private binding
    def raw_stream(device_index: int) -> int:
        return torch.cuda.current_stream(device_index).cuda_stream

try:
    is_capturing = torch._C._cuda_isCurrentStreamCapturing
except AttributeError:  # pragma: no cover
    is_capturing = torch.cuda.is_current_stream_capturing


class SplitKWorkspace:
    """Split-K buffers of one kernel family: `buffers[(device index, stream)] = (workspace, counters)`."""

    MIN_COUNTERS = 1024

    def __init__(self) -> None:
        self.buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.retired: list = []  # graph-private and replaced buffers, kept alive
        self._lock = threading.Lock()

    def pointers(self, need_ws: int, need_cnt: int, device: torch.device, stream: int,
                 capturing: bool | None = None) -> tuple[int, int]:
        """(workspace, counters) device pointers with at least need_ws floats / need_cnt ints."""
        if capturing is None:
            capturing = is_capturing()
        if capturing:
            ws = torch.empty(need_ws, dtype=torch.float32, device=device)
            cnt = torch.zeros(need_cnt, dtype=torch.int32, device=device)
            with self._lock:
                self.retired.append((ws, cnt))
            return ws.data_ptr(), cnt.data_ptr()
        key = (device.index, stream)
        buf = self.buffers.get(key)
        if buf is None or buf[0].numel() < need_ws or buf[1].numel() < need_cnt:
            old_ws = buf[0].numel() if buf is not None else 0
            old_cnt = buf[1].numel() if buf is not None else 0
            ws = torch.empty(max(need_ws, old_ws), dtype=torch.float32, device=device)
            # Zeroed on this stream, before the kernel that first uses them (stream order).
            cnt = torch.zeros(max(need_cnt, old_cnt, self.MIN_COUNTERS), dtype=torch.int32, device=device)
            with self._lock:
                if key in self.buffers:
                    self.retired.append(self.buffers[key])
                self.buffers[key] = buf = (ws, cnt)
        return buf[0].data_ptr(), buf[1].data_ptr()
