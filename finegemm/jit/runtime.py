"""Host library (ctypes) and kernel loading."""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import compiler

_lib_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def _declare_common(lib: ctypes.CDLL) -> None:
    lib.fg_load_function.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                     ctypes.POINTER(ctypes.c_uint64)]
    lib.fg_load_function.restype = ctypes.c_int
    lib.fg_error_string.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.fg_error_string.restype = None
    lib.fg_launch_trivial_add.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.fg_launch_trivial_add.restype = ctypes.c_int
    lib.fg_set_pdl.argtypes = [ctypes.c_int]
    lib.fg_set_pdl.restype = None
    lib.fg_get_pdl.argtypes = []
    lib.fg_get_pdl.restype = ctypes.c_int


def host_library() -> ctypes.CDLL:
    """The host launcher library (every include/finegemm/host/*.cpp), built (cached) and loaded
    once per process. Loading it needs no GPU or driver: libcuda is dlopen'ed on first use.
    Kernel families set the argtypes/restype of their own fg_launch_<family> once."""
    global _lib
    lib = _lib
    if lib is not None:
        return lib
    with _lib_lock:
        if _lib is None:
            path = compiler.build_host_library()
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
            _declare_common(lib)
            from finegemm import runtime

            lib.fg_set_pdl(1 if runtime.get_pdl() else 0)
            _lib = lib
        return _lib


_fastcall_lock = threading.Lock()
_fastcall: object = None  # None: not tried yet; False: unavailable; else the shim's module


def fastcall():
    """The Python launch shim's call_prepared(function address, handle, workspace, counters,
    stream) (jit/fastcall.cpp), built and loaded once per process; None when it cannot be built or
    FINEGEMM_DISABLE_FASTCALL=1 (the prepared launches then go through ctypes). A build failure is
    reported once as a warning: the calls stay correct, only ~0.5 us slower."""
    global _fastcall
    fn = _fastcall
    if fn is None:
        with _fastcall_lock:
            if _fastcall is None:
                _fastcall = _load_fastcall()
            fn = _fastcall
    return fn.call_prepared if fn else None


def fastcall_module():
    """The Python launch shim's module (jit/fastcall.cpp), or None as fastcall()."""
    fastcall()
    return _fastcall or None


def fast_kernel_launch():
    """The Python launch shim's launch_kernel(cuLaunchKernel address, function, grid_x, block_x,
    shared bytes, stream, params address) (jit/fastcall.cpp), or None as fastcall()."""
    fastcall()
    fn = _fastcall
    return fn.launch_kernel if fn else None


def _load_fastcall():
    import importlib.machinery
    import importlib.util
    import os
    import warnings

    if os.environ.get("FINEGEMM_DISABLE_FASTCALL", "0") not in ("", "0"):
        return False
    try:
        path = compiler.build_python_shim()
        loader = importlib.machinery.ExtensionFileLoader("_finegemm_fastcall", str(path))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader("_finegemm_fastcall", loader))
        loader.exec_module(module)
        return module
    except Exception as exc:  # noqa: BLE001 - any failure keeps the ctypes path
        warnings.warn(f"finegemm: the Python launch shim is unavailable, prepared launches use ctypes: {exc}",
                      RuntimeWarning, stacklevel=3)
        return False


def push_pdl(enable: bool) -> None:
    """Hands finegemm.set_pdl's value to the host library when it is loaded (else host_library
    does it on loading). Under the loading lock, so that a concurrent load cannot miss it."""
    with _lib_lock:
        if _lib is not None:
            _lib.fg_set_pdl(1 if enable else 0)


def error_string(code: int) -> str:
    """The driver's (or finegemm's) description of a CUresult returned by the host library."""
    buf = ctypes.create_string_buffer(512)
    host_library().fg_error_string(int(code), buf, len(buf))
    return buf.value.decode(errors="replace")


def check(result: int) -> None:
    """Raise RuntimeError (with the driver's error string) when a host-library call failed."""
    if result != 0:
        raise RuntimeError(f"finegemm: CUDA driver call failed: {error_string(result)}")


@dataclass(frozen=True)
class Kernel:
    fn: int  # CUfunction as an int, pass to fg_launch_<family>
    cubin: Path
    name: str
    smem_bytes: int
    entry: str = "finegemm_entry"
    device: int = 0


_kernels_lock = threading.Lock()
_loaded: dict[tuple, Kernel] = {}  # (cubin path, entry, smem, device) -> Kernel
_by_source: dict[tuple, Kernel] = {}  # (name, source, entry, smem, flags, device) -> Kernel (fast path)


def _current_device() -> int:
    import torch

    torch.cuda.init()
    return torch.cuda.current_device()


def load_function(cubin: Path, name: str, entry: str = "finegemm_entry", smem_bytes: int = 0,
                  device: int | None = None) -> Kernel:
    """Load `entry` of an already built cubin (once per process per cubin/entry/smem/device)."""
    if device is None:
        device = _current_device()
    key = (str(cubin), entry, int(smem_bytes), device)
    k = _loaded.get(key)
    if k is not None:
        return k
    with _kernels_lock:
        k = _loaded.get(key)
        if k is None:
            lib = host_library()
            out = ctypes.c_uint64(0)
            rc = lib.fg_load_function(str(cubin).encode(), entry.encode(), int(smem_bytes), device,
                                      ctypes.byref(out))
            if rc != 0:
                raise RuntimeError(
                    f"finegemm: loading {entry!r} from {cubin} (kernel {name!r}, smem {smem_bytes} B, "
                    f"device {device}) failed: {error_string(rc)}"
                )
            k = Kernel(fn=int(out.value), cubin=Path(cubin), name=name, smem_bytes=int(smem_bytes),
                       entry=entry, device=device)
            _loaded[key] = k
        return k


def load_kernel(name: str, source: str, entry: str = "finegemm_entry", smem_bytes: int = 0,
                extra_flags: Sequence[str] = ()) -> Kernel:
    """Build (cached on disk) and load (cached in-process) a rendered kernel on the current device."""
    device = _current_device()
    fast = (name, source, entry, int(smem_bytes), tuple(extra_flags), device)
    k = _by_source.get(fast)
    if k is not None:
        return k
    cubin = compiler.build_cubin(name, source, extra_flags)
    k = load_function(cubin, name, entry, smem_bytes, device)
    _by_source[fast] = k
    return k
