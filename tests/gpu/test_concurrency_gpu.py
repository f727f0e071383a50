"""Calls from several host threads at once, each thread on its own CUDA stream (what a serving
engine with one stream per request batch does).

Every call must give bitwise what the same call gives alone on the default stream: the host's
caches (plans, prepared launches, fast-path keys), the per-stream split-K buffers and the split
clusters must not leak one call's state into another's. The threads run first, so where this
module runs alone their calls also plan (and look up kernels) concurrently. The skinny cases
(decode-sized M with the anchors' long K: split-K, split clusters, k-batches) are also checked
against the CPU reference, which the fuzz's small cases never reach.
"""
from __future__ import annotations

import os
import random
import threading

import pytest

torch = pytest.importorskip("torch")

from finegemm.testing import fuzz  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

NUM_THREADS = 8
SKINNY_SEEDS = range(600_000, 600_000 + int(os.environ.get("FINEGEMM_CONCURRENCY_SKINNY_CASES", "48")))
SMALL_SEEDS = range(100_000, 100_064)  # test_fuzz_gpu.py's first valid cases
LARGE_SEEDS = range(500_000, 500_008)  # and its first large ones


def _cases() -> list:
    out = [(f"skinny {s}", fuzz.skinny_case(s)) for s in SKINNY_SEEDS]
    out += [(f"valid {s}", fuzz.valid_case(s)) for s in SMALL_SEEDS]
    out += [(f"large {s}", fuzz.large_case(s)) for s in LARGE_SEEDS]
    return out


def planned_kernels() -> set:
    """Every kernel plan of this module's cases (read by scripts/precompile.py)."""
    return {p for _, case in _cases() for p in fuzz.kernel_plans(case)}


@pytest.fixture(scope="module")
def warm():
    plans = sorted({p for _, case in _cases() if case.fn.startswith("bf16") for p in fuzz.kernel_plans(case)},
                   key=repr)
    # BF16 kernels only: the FP8 plans are left to the threads (built ahead by precompile.py, so
    # that they plan concurrently without compiling for minutes).
    fuzz.warm_plans(plans, torch.cuda.current_device(), min(16, os.cpu_count() or 4))
    return len(plans)


def _outputs(case, stream) -> dict:
    with torch.cuda.stream(stream):
        out = fuzz.run_case(case, "cuda")
        if out.error is not None:
            raise AssertionError(f"{case.describe()}: {type(out.error).__name__}: {out.error}")
        vals = {name: out.mat.kwargs[name].detach().clone() for name in case.outputs}
    stream.synchronize()
    return vals


def test_threads_on_their_own_streams_match_serial_calls(warm):
    cases = [(label, case) for label, case in _cases() if not case.unsupported_on_cuda()]
    results: dict = {}
    errors: list = []

    def worker(tid: int) -> None:
        stream = torch.cuda.Stream()
        order = list(range(len(cases)))
        random.Random(tid).shuffle(order)
        try:
            for i in order[: len(order) // 2 + tid]:  # different mixes per thread
                results[(tid, i)] = _outputs(cases[i][1], stream)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {tid}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(NUM_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not errors, "\n".join(errors)

    serial = {}
    problems = []
    for i, (label, case) in enumerate(cases):
        serial[i] = _outputs(case, torch.cuda.current_stream())
        if label.startswith("skinny"):
            want = fuzz.output_values(fuzz.run_case(case, "cpu"), case)
            got = {name: v.cpu() for name, v in serial[i].items()}
            problems += [f"{label}: {case.describe()}: {p}" for p in fuzz.compare_outputs(got, want)]
    for (tid, i), vals in sorted(results.items()):
        label, case = cases[i]
        for name, v in vals.items():
            if not fuzz.bitwise_equal(v, serial[i][name]):
                problems.append(f"thread {tid}, {label}: {case.describe()}: {name} differs from the serial call")
    assert len(results) >= NUM_THREADS * len(cases) // 2
    assert not problems, "\n".join(problems)
