"""Shared pieces of the benchmark suites: kernel-only timing, run metadata, anchors."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import torch

_FLUSH_KERNEL_MARK = "FillFunctor"  # the kernel of torch's zero_(), used as the L2 flush


_warm_ms = 0.0  # set_clock_warmup(): GPU busy time before each kernel_time_us


def set_clock_warmup(ms: float) -> None:
    """Keep the GPU busy `ms` milliseconds (L2-flush memsets) before every contender's timing, so
    each is timed at ramped clocks: after the benches' idle settle time the first contender of a
    record would otherwise run while the clocks still rise (benchmarks/NOTES.md v0.19)."""
    global _warm_ms
    _warm_ms = float(ms)


def busy_gpu(ms: float, buf: torch.Tensor) -> None:
    """At least `ms` milliseconds of device work (memsets of `buf`), measured with CUDA events."""
    if ms <= 0:
        return
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(8):
            buf.zero_()
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= ms:
            return


_READ_FLUSH_KERNEL_MARK = "sum_functor"  # the reduction kernel of flush_mode "read"


def kernel_time_us(fn, num_tests: int = 30, flush_l2: bool = True, warmup: int = 3, flush_mode: str = "zero") -> float:
    """Mean device time per call of every kernel `fn` launches (the L2 flush excluded), in µs.

    Timed as the anchors were: torch profiler (CUPTI) kernel durations, 256 MB L2 flush before
    each call, so launch gaps and host work are not counted. Contenders that launch helper
    kernels (scale transposes, split-K reductions) pay for them here. With set_clock_warmup(),
    the GPU is kept busy that long first (every contender alike). flush_mode "zero" (the
    anchors') writes the buffer, leaving the L2 full of dirty lines the timed kernels must write
    back as they evict them; "read" sums it instead (clean lines; scripts/probe_flush_mode.py).
    """
    if flush_mode not in ("zero", "read"):
        raise ValueError(f"kernel_time_us: flush_mode must be 'zero' or 'read', got {flush_mode!r}")
    flush = torch.empty(256 << 20 >> 2, dtype=torch.int32, device="cuda") if flush_l2 or _warm_ms > 0 else None
    busy_gpu(_warm_ms, flush)
    if not flush_l2:
        flush = None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if flush is not None and flush_mode == "read":
        # one reduction kernel over the buffer as fp32 (all zeros), no conversion copy
        flush_f32 = flush.view(torch.float32)
        flush_sum = torch.empty((), dtype=torch.float32, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(num_tests):
            if flush is not None:
                if flush_mode == "zero":
                    flush.zero_()
                else:
                    torch.sum(flush_f32, dim=0, out=flush_sum)
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if _FLUSH_KERNEL_MARK in evt.name or "Memset" in evt.name or "Memcpy" in evt.name:
            continue
        if flush_mode == "read" and _READ_FLUSH_KERNEL_MARK in evt.name:
            continue
        total += evt.device_time if hasattr(evt, "device_time") else evt.cuda_time
    return total / num_tests


SETTLE_MS = 300.0
SETTLE_HELP = ("idle time before each record (every contender of the record alike): a short shape timed right "
               "after multi-ms ones ran up to ~20%% slow at lowered clocks (benchmarks/NOTES.md v0.17)")


WARM_HELP = ("GPU busy time (memsets) before each contender's timing, so that every contender is timed at "
             "ramped clocks after the settle time (0: off)")


def settle_ms_arg(text: str) -> float:
    """argparse type of --settle-ms: a finite number of milliseconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value >= 0.0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number of milliseconds >= 0, got {text!r}")
    return value


def settle(ms: float) -> None:
    """Let the GPU idle `ms` milliseconds (clocks recover after a sustained heavy record)."""
    torch.cuda.synchronize()
    time.sleep(ms / 1e3)


def host_time_us(fn, iters: int = 200) -> float:
    """Host time per call (validation, planning, launch), in µs.

    The GPU is first given a long sleep kernel so that the timed calls only queue behind it:
    the measurement is then the host's alone, not the kernels' duration (which is what a plain
    loop measures once the launch queue fills).
    """
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        torch.cuda._sleep(200_000_000)  # ~0.1 s at ~2 GHz, far longer than iters host calls
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - start) / iters * 1e6)
        torch.cuda.synchronize()
    return best


def profiled_kernel_us(fn, reps: int, names=("finegemm_entry", "contiguous_layout")) -> list[float]:
    """Device times (us) of the kernels whose name contains one of `names` over `reps` calls of fn,
    the L2 flushed (a 256 MB write) before each call (torch's profiler; one warm-up call first)."""
    return [us for name, us in profiled_kernels(fn, reps) if any(n in name for n in names)]


def profiled_kernels(fn, reps: int) -> list[tuple[str, float]]:
    """(name, device us) of every kernel `reps` calls of fn launch, the flush excluded (as
    profiled_kernel_us)."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    return [(e.name, e.device_time) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and _FLUSH_KERNEL_MARK not in e.name
            and "Memset" not in e.name]


def loop_us(fn, calls: int, warmup: int = 3) -> tuple[float, float]:
    """(host, wall) us per call of `calls` back-to-back calls (no sync between them): the host time
    to issue each with the GPU queue kept busy, and the whole loop's time to the last kernel's end
    per call (what a serving loop sees)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def commit_id() -> str:
    env = os.environ.get("FINEGEMM_COMMIT")
    if env:
        return env
    root = pathlib.Path(__file__).resolve().parents[2]
    marker = root / ".commit"
    if marker.exists():
        return marker.read_text().strip()
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=root, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return "unknown"


def run_metadata() -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "gpu": f"{props.name} ({props.multi_processor_count} SMs)",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit_id(),
        "command": " ".join(["python -m finegemm"] + sys.argv[1:]) if sys.argv else "",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def write_probe_json(path, records: list, **extra) -> None:
    """A probe's results with the run's metadata (GPU, date, commit) and its command line."""
    out = {**run_metadata(), "command": " ".join(sys.argv), **extra, "records": records}
    pathlib.Path(path).write_text(json.dumps(out, indent=1, default=str))


ANCHORS_PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "anchors_h200.json"


def load_anchors() -> dict:
    if ANCHORS_PATH.exists():
        return json.loads(ANCHORS_PATH.read_text())
    return {}


def geomean(values) -> float | None:
    import math

    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# ----------------------------------------------------------------------------- reference checks
# Budget of the exact (fp64) reference per record: ~1 s of FP64 tensor-core work on an H200.
# Records whose full reference would cost more are checked on a seeded sample of output rows
# (every column, all of K): exact on those rows, cheap on any shape.
REF_FLOPS = 5e13
REF_MIN_ROWS = 128


def sample_rows(m: int, flops_per_row: float, budget: float = REF_FLOPS, seed: int = 0,
                min_rows: int = REF_MIN_ROWS) -> list[int]:
    """Sorted output-row indices to check against the fp64 reference: all m rows when
    m * flops_per_row fits the budget, else max(min_rows, budget / flops_per_row) rows drawn
    without replacement (random.Random(seed)), always with the first and the last row."""
    import random

    if m <= 0:
        return []
    want = m if flops_per_row <= 0 else int(budget // flops_per_row)
    want = max(want, min_rows)
    if want >= m:
        return list(range(m))
    want = max(want, 2)
    picked = set(random.Random(seed).sample(range(1, m - 1), want - 2)) | {0, m - 1}
    return sorted(picked)


def sync(device) -> None:
    """Wait for the device's queued work (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def error_text(exc: BaseException, limit: int = 300) -> str:
    return f"{type(exc).__name__}: {exc}"[:limit]


def time_into(rec: dict, name: str, fn, num_tests: int, timer=None, order: list | None = None) -> bool:
    """rec["us"][name] = kernel time of fn (timer(fn, num_tests), default kernel_time_us); an
    exception is recorded in rec["errors"][name] instead (one broken contender must not hide the
    others). Returns whether a time was recorded; if so, (name, fn) is appended to `order` (the
    record's contenders as timed, for reverse_round_if_long)."""
    timer = timer or kernel_time_us
    try:
        fn()
        rec["us"][name] = timer(fn, num_tests)
    except Exception as exc:
        rec.setdefault("errors", {})[name] = error_text(exc)
        return False
    if order is not None:
        order.append((name, fn))
    return True


LONG_RECORD_US = 1000.0  # records this long get a second, reverse-order round (reverse_round_if_long)


def reverse_round_if_long(rec: dict, order: list, num_tests: int, timer=None, long_us: float = LONG_RECORD_US) -> bool:
    """A record whose slowest timed contender takes `long_us` or more is timed once more, its
    contenders in the reverse order; rec["us"] becomes the mean of both rounds and
    rec["us_rounds"][name] keeps [first, second]. A record of milliseconds is long enough for
    the GPU's state (clocks at the power limit, L2) to follow whoever ran before it, so the
    first-timed contender of a record is timed in a different state than the last (a 10 ms
    BF16 record moved by 9% with the order alone: benchmarks/NOTES.md v0.87). A contender that
    fails in the second round keeps its first time and records the error under "<name>_round2".
    Returns whether a second round ran."""
    timed = [(name, fn) for name, fn in order if name in rec["us"]]
    if len(timed) < 2 or max(rec["us"][name] for name, _ in timed) < long_us:
        return False
    timer = timer or kernel_time_us
    second = {}
    for name, fn in reversed(timed):
        try:
            second[name] = timer(fn, num_tests)
        except Exception as exc:
            rec.setdefault("errors", {})[f"{name}_round2"] = error_text(exc)
    rec["us_rounds"] = {name: [rec["us"][name], second[name]] for name, _ in timed if name in second}
    for name, (first, again) in rec["us_rounds"].items():
        rec["us"][name] = (first + again) / 2
    return True


def fmt(v, spec: str = ".1f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"
