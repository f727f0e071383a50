"""Command line: `python -m finegemm info|compile-check|warmup|check|bench`."""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from .bench import TUNE_FAMILIES


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("finegemm")
    except Exception:
        try:
            import finegemm

            return getattr(finegemm, "__version__", "unknown")
        except Exception:
            return "unknown"


def cmd_info(args) -> int:
    import torch

    from finegemm import jit

    print(f"finegemm       {_version()}  ({Path(__file__).resolve().parent})")
    print(f"python         {platform.python_version()}  ({sys.executable})")
    print(f"torch          {torch.__version__}  (CUDA {torch.version.cuda})")
    avail = torch.cuda.is_available()
    print(f"cuda available {avail}")
    if avail:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            print(f"  gpu {i}        {p.name}, {p.multi_processor_count} SMs, sm_{p.major}{p.minor}, "
                  f"{_human(p.total_memory)}")
    try:
        ver = ".".join(map(str, jit.nvcc_version()))
        print(f"nvcc           {jit.nvcc_path()}  (version {ver}, CUDA_HOME {jit.cuda_home()})")
    except RuntimeError as exc:
        print(f"nvcc           not found: {exc}")
    cache = jit.cache_dir()
    size = _dir_size(cache) if cache.exists() else 0
    nk = len(list((cache / "kernels").iterdir())) if (cache / "kernels").is_dir() else 0
    print(f"cache dir      {cache}  ({_human(size)}, {nk} kernels)")
    return 0


def cmd_compile_check(args) -> int:
    from finegemm import jit

    try:
        reports = jit.compile_check(args.only or None, raise_on_failure=False)
    except (RuntimeError, KeyError) as exc:
        print(f"compile-check: {exc}", file=sys.stderr)
        return 1
    header = f"{'kernel':<48} {'regs':>5} {'spill st':>9} {'spill ld':>9} {'stack':>6} {'smem':>7}  status"
    print(header)
    print("-" * len(header))
    for r in reports:
        label = f"{r['family']}/{r['label']}"
        status = "ok" if r["ok"] else "FAIL: " + "; ".join(r["reasons"])
        print(f"{label:<48} {r['registers']:>5} {r['spill_stores']:>9} {r['spill_loads']:>9} "
              f"{r['stack_frame']:>6} {r['smem']:>7}  {status}")
    bad = [r for r in reports if not r["ok"]]
    for r in bad:
        if r["error"]:
            print(f"\n{r['family']}/{r['label']}:\n{r['error']}", file=sys.stderr)
    print(f"{len(reports) - len(bad)}/{len(reports)} kernels ok")
    return 1 if bad else 0


def _parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be M,N,K (three integers), got {text!r}")
    if min(m, n, k) <= 0:
        raise argparse.ArgumentTypeError(f"shape dims must be positive, got {text!r}")
    return m, n, k


def cmd_warmup(args) -> int:
    try:
        mod = importlib.import_module("finegemm.ops.sm90_fp8_gemm")
    except ModuleNotFoundError as exc:
        if exc.name not in ("finegemm.ops", "finegemm.ops.sm90_fp8_gemm"):
            raise
        mod = None
    warm = getattr(mod, "warmup_shape", None) if mod is not None else None
    if warm is None:
        print("nothing to warm up (finegemm.ops.sm90_fp8_gemm.warmup_shape is not available)")
        return 0
    shapes = args.shapes
    done = 0
    failures = []
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs or min(8, os.cpu_count() or 1)) as pool:
        futures = {pool.submit(warm, m, n, k): (m, n, k) for (m, n, k) in shapes}
        for fut in as_completed(futures):
            done += 1
            try:
                fut.result()
            except Exception as exc:
                failures.append((futures[fut], exc))
            print(f"\rwarmup: {done}/{len(shapes)} shapes ({time.time() - t0:.1f} s)", end="", flush=True)
    print()
    for shape, exc in failures:
        print(f"warmup failed for M,N,K={','.join(map(str, shape))}: {exc}", file=sys.stderr)
    return 1 if failures else 0


def _dispatch(module: str, what: str, argv: list[str]) -> int:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            print(f"finegemm {what}: {module} is not available in this installation", file=sys.stderr)
            return 2
        raise
    main = getattr(mod, "main", None)
    if main is None:
        print(f"finegemm {what}: {module} has no main(argv)", file=sys.stderr)
        return 2
    rc = main(argv)
    return int(rc or 0)


def cmd_check(args) -> int:
    return _dispatch("finegemm.testing.gpu_check", "check", args.rest)


def cmd_bench(args) -> int:
    # Suites ship inside the package (finegemm/bench/<suite>.py) so an installed finegemm has them.
    return _dispatch(f"finegemm.bench.{args.suite}", "bench", args.rest)


def cmd_tune(args) -> int:
    return _dispatch("finegemm.bench.tune", "tune", [args.family] + args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finegemm", description="finegemm utilities")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("info", help="versions, GPU, nvcc, cache")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("compile-check", help="compile representative kernels; fail on spills/stack")
    s.add_argument("--only", action="append", metavar="FAMILY",
                   help="restrict to a registered kernel family (repeatable)")
    s.set_defaults(func=cmd_compile_check)

    s = sub.add_parser("warmup", help="compile the kernels that dense FP8 GEMM shapes use")
    s.add_argument("--shapes", nargs="+", type=_parse_shape, required=True, metavar="M,N,K")
    s.add_argument("--jobs", type=int, default=0, help="parallel compiles (default min(8, cpus))")
    s.set_defaults(func=cmd_warmup)

    s = sub.add_parser("check", help="GPU correctness check (finegemm.testing.gpu_check)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("bench", help="run a benchmark suite (benchmarks/bench_<suite>.py)")
    s.add_argument("suite")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("tune", help="time candidate configs per shape on the GPU; write a tuned table")
    s.add_argument("family", choices=TUNE_FAMILIES)
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_tune)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
