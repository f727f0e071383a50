"""CUDA graph capture for tests and probes."""
from __future__ import annotations

from typing import Callable

import torch


def capture_graph(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """A CUDA graph of everything `fn` launches, captured on a side stream that first waits for the
    current one (so work queued before is not part of the graph), which then waits for the
    capture. Run `fn` once eagerly first: compiles and plans do not belong in a capture."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    return graph
