"""compile_check: compile representative sources of every kernel family and reject spills.

Kernel families register a render function returning [(label, source), ...]:

    from finegemm import jit
    jit.register_compile_check("sm90_fp8_gemm", lambda: [("bm128_bn128", render(...)), ...])
"""
from __future__ import annotations

import importlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Sequence

from . import compiler

RenderFn = Callable[[], Sequence[tuple[str, str]]]
_registry: dict[str, RenderFn] = {}
_registry_lock = threading.Lock()


def register_compile_check(name: str, render_fn: RenderFn) -> None:
    """Register (or replace) a kernel family's representative sources for compile_check."""
    if not callable(render_fn):
        raise TypeError("render_fn must be callable, returning a list of (label, source)")
    with _registry_lock:
        _registry[name] = render_fn


def registered_compile_checks() -> list[str]:
    _import_ops()
    with _registry_lock:
        return sorted(_registry)


def _import_ops() -> None:
    # Families register at import time; finegemm.ops' __init__ imports its modules.
    from . import trivial  # noqa: F401  (registers "trivial_add")

    try:
        importlib.import_module("finegemm.ops")
    except ImportError as exc:
        # Only a missing ops package is benign; an ImportError inside it is a real bug.
        if getattr(exc, "name", None) not in ("finegemm.ops",):
            raise


def _failure_reasons(rep: dict) -> list[str]:
    reasons = []
    if rep["spilled"]:
        reasons.append(f"spills ({rep['spill_stores']} B stores, {rep['spill_loads']} B loads)")
    if rep["stack_frame"]:
        reasons.append(f"{rep['stack_frame']} B stack frame")
    if rep.get("lmem"):
        reasons.append(f"{rep['lmem']} B local memory")
    if rep.get("wgmma_serialized"):
        reasons.append("ptxas serialized the wgmmas (C7514-type warning in the build log)")
    return reasons


def compile_check(configs: Iterable | None = None, *, raise_on_failure: bool = True,
                  max_workers: int | None = None) -> list[dict]:
    """Compile representative kernels and report ptxas resources.

    configs: None (every registered family), or an iterable of family names and/or
    (label, source) pairs. Returns one report per kernel: family, label, cubin, registers,
    spill_stores, spill_loads, stack_frame, smem, lmem, wgmma_serialized, ok, reasons, error.
    Raises RuntimeError (after compiling everything) when a kernel fails to build, spills, uses a
    stack frame / local memory, or has its wgmmas serialized by ptxas, unless raise_on_failure=False.
    """
    _import_ops()
    jobs: list[tuple[str, str, str]] = []  # (family, label, source)
    with _registry_lock:
        registry = dict(_registry)
    items = sorted(registry) if configs is None else list(configs)
    for item in items:
        if isinstance(item, str):
            if item not in registry:
                raise KeyError(f"no compile check registered as {item!r}; known: {sorted(registry)}")
            for label, source in registry[item]():
                jobs.append((item, label, source))
        else:
            label, source = item
            jobs.append(("custom", label, source))

    def run(job):
        family, label, source = job
        rep = {"family": family, "label": label, "cubin": None, "registers": 0, "spill_stores": 0,
               "spill_loads": 0, "stack_frame": 0, "smem": 0, "lmem": 0, "wgmma_serialized": False, "warnings": [],
               "error": None}
        try:
            cubin = compiler.build_cubin(family, source)
            parsed = compiler.ptxas_report(cubin)
            rep.update({k: parsed[k] for k in ("registers", "spill_stores", "spill_loads",
                                               "stack_frame", "smem", "lmem", "spilled", "wgmma_serialized", "warnings")})
            rep["cubin"] = str(cubin)
        except Exception as exc:  # reported per kernel, raised below
            rep["error"] = str(exc)
            rep["spilled"] = False
        rep["reasons"] = ([f"build failed: {rep['error'].splitlines()[0]}"] if rep["error"]
                          else _failure_reasons(rep))
        rep["ok"] = not rep["reasons"]
        return rep

    with ThreadPoolExecutor(max_workers=max_workers or 8) as pool:
        reports = list(pool.map(run, jobs))
    bad = [r for r in reports if not r["ok"]]
    if bad and raise_on_failure:
        lines = [f"  {r['family']}/{r['label']}: {'; '.join(r['reasons'])}" for r in bad]
        detail = "\n".join(r["error"] for r in bad if r["error"])
        raise RuntimeError("finegemm compile_check failed:\n" + "\n".join(lines) + ("\n" + detail if detail else ""))
    return reports
