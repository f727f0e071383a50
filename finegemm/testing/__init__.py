"""Testing utilities: numeric comparison, GPU timing, CUDA graph capture, benchmark shape sets."""

from finegemm.testing.bench import bench_events, bench_kineto, host_time_per_call
from finegemm.testing.graphs import capture_graph
from finegemm.testing.numeric import calc_diff, count_bytes

__all__ = ["calc_diff", "count_bytes", "bench_kineto", "bench_events", "host_time_per_call", "capture_graph"]
