"""Host cost of a moved call's lookup pieces on this machine's CPU (no GPU): the second-level key
(the C layout of five tensors), FINEGEMM_DISABLE_PATHS's read, gpu_validated, os.environ.get for
comparison, and MovedCalls.launch_for with a stand-in launch (its overlap checks, no re-pointing).

Usage: PYTHONPATH=. python3 scripts/probe_moved_lookup_cpu.py   (us per call, 20 000 calls each)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from finegemm.api import _validate as v  # noqa: E402


def per_call_us(fn, n: int = 20000) -> float:
    for _ in range(1000):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    a, b = torch.zeros(64, 256, dtype=torch.uint8), torch.zeros(128, 256, dtype=torch.uint8)
    sfa, sfb = torch.zeros(2, 64).t(), torch.zeros(1, 2)
    d = torch.zeros(64, 128, dtype=torch.bfloat16)
    tensors, rest = (a, sfa, b, sfb, d), (None, str, "nk", bool, False, 132)

    class StandIn:
        cacheable = True

        def head_pointers(self):
            return (a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d.data_ptr(), None)

        def rebound(self, pointers, copy=True):
            return self

    moved = v.MovedCalls(slots=(0, 2, 1, 3, 4, 5), output=4, inputs=(0, 1, 2, 3), c_index=5)
    found = moved.key(tensors, rest, False)
    if found is None:
        sys.exit("no C layout here (the tensor signature did not build)")
    moved.learn(found, tensors, StandIn())
    for name, fn in [("layout_key", lambda: v.MovedCalls.key(tensors, rest, False)),
                     ("disabled_paths", v.disabled_paths),
                     ("gpu_validated", lambda: v.gpu_validated("dense_moved_calls", frozenset())),
                     ("os_environ_get", lambda: os.environ.get(v.DISABLE_PATHS_ENV)),
                     ("launch_for", lambda: moved.launch_for(found))]:
        print(f"{name:16s} {per_call_us(fn):6.2f} us")


if __name__ == "__main__":
    main()
