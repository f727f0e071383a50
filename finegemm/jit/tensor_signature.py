"""The host fast paths' tensor key in C: `load()` answers the shim's tensor_signature(*tensors)
(jit/fastcall.cpp) once it is configured and checked, or None (the callers then build the same
information in Python).

Why: a seen call's key reads four things of each of its five or six tensors (address, shape,
strides, dtype). Through PyTorch's Python bindings that is ~20 calls of 0.1-0.25 us: about half
of a cached dense call's host time. The shim reads them through PyTorch's stable C accessors
(aoti_torch_get_*, exported by libtorch) in ~0.03 us per tensor.

What is assumed, and checked before use: a torch.Tensor's Python object holds its at::Tensor (one
TensorImpl pointer) at a small fixed offset. The offset is found by comparing the object's words
with Tensor._cdata (the TensorImpl address) on probe tensors, and then every field the shim reads
is compared with the Python accessors on probes of several dtypes, ranks, views and strides. Any
disagreement, a missing accessor, or FINEGEMM_DISABLE_TENSOR_SIGNATURE=1 leaves the C path off.
"""
from __future__ import annotations

import ctypes
import os
import struct
import threading
from pathlib import Path
from typing import Callable, Optional

_ACCESSORS = ("data_ptr", "dim", "sizes", "strides", "dtype", "device_type", "device_index")
_CANDIDATE_OFFSETS = (16, 24, 32)  # after the object header: `at::Tensor cdata` (16) or MaybeOwned (24)

_lock = threading.Lock()
# "fn": the configured function or None; "why": why it is off (for `finegemm info`); "layout": the
# shim's tensor_layout where it agrees with the signature (absent otherwise)
_state: dict = {}


def load() -> Optional[Callable]:
    """The shim's tensor_signature, configured and checked (once per process), or None."""
    if "fn" in _state:
        return _state["fn"]
    with _lock:
        if "fn" not in _state:
            try:
                fn, why = _configure()
            except Exception as exc:  # noqa: BLE001 - anything unexpected keeps the Python key, once
                fn, why = None, f"{type(exc).__name__}: {exc}"
                _switch_off()
            _state["fn"], _state["why"] = fn, why
        return _state["fn"]


def load_layout() -> Optional[Callable]:
    """The shim's tensor_layout(*tensors) -> (bytes, addresses): tensor_signature without the
    addresses (the host fast paths' second level, api/_validate.MovedCalls), or None where the
    signature is off or the two disagree on the probes."""
    load()
    return _state.get("layout")


def status() -> str:
    """Whether the C key is in use, and if not, why (after load())."""
    if "fn" not in _state:
        return "not loaded yet"
    return "on" if _state["fn"] is not None else f"off ({_state['why']})"


def _accessor_addresses() -> Optional[list]:
    """The aoti_torch_get_* addresses from the loaded libtorch (None when one is missing)."""
    import torch

    lib_dir = Path(torch.__file__).resolve().parent / "lib"
    candidates = [lib_dir / name for name in ("libtorch_cpu.so", "libtorch.so")] + [None]
    for path in candidates:
        try:
            lib = ctypes.CDLL(str(path) if path is not None else None)  # already loaded: its handle
            return [ctypes.cast(getattr(lib, f"aoti_torch_get_{name}"), ctypes.c_void_p).value
                    for name in _ACCESSORS]
        except (OSError, AttributeError):
            continue
    return None


def _probes() -> list:
    import torch

    base = torch.arange(6 * 40, dtype=torch.float32).reshape(6, 40)
    fp8 = torch.zeros(64, 48, dtype=torch.uint8).view(torch.float8_e4m3fn)
    return [
        base, base.t(), base[1:, 3:], base[:, ::2], base.view(torch.int32), base.reshape(2, 3, 40)[1],
        torch.zeros(4, 6, dtype=torch.bfloat16).t(), fp8, fp8[5:], fp8.view(torch.uint8),
        torch.zeros(3, 4, 5, dtype=torch.float16).permute(2, 0, 1), torch.zeros(0, 7), torch.zeros(()),
        torch.nn.Parameter(torch.zeros(2, 3)),
    ]


def _decode(sig: bytes) -> list:
    words = struct.unpack(f"<{len(sig) // 8}q", sig)
    out, i = [], 0
    while i < len(words):
        dim = words[i]
        out.append((words[i + 1] & (2 ** 64 - 1), words[i + 2], words[i + 3], words[i + 4],
                    tuple(words[i + 5:i + 5 + dim]), tuple(words[i + 5 + dim:i + 5 + 2 * dim])))
        i += 5 + 2 * dim
    return out


def _configure() -> tuple[Optional[Callable], str]:
    if os.environ.get("FINEGEMM_DISABLE_TENSOR_SIGNATURE", "0") not in ("", "0"):
        return None, "FINEGEMM_DISABLE_TENSOR_SIGNATURE"
    from finegemm.jit import runtime

    module = runtime.fastcall_module()
    if module is None:
        return None, "the Python launch shim is unavailable"
    import torch

    addresses = _accessor_addresses()
    if addresses is None or not all(addresses):
        return None, "libtorch does not export the aoti_torch_get_* accessors"
    probes = _probes()
    offsets = [off for off in _CANDIDATE_OFFSETS
               if all(module.impl_word(p, off) == p._cdata for p in probes)]
    if len(offsets) != 1:
        return None, f"the TensorImpl word of a tensor object was not found at one offset ({offsets})"
    module.configure_tensor_abi(offsets[0], torch.Tensor, torch.nn.Parameter, *addresses)
    why = _check(module.tensor_signature, probes)
    if why:
        _switch_off()
        return None, why
    layout = getattr(module, "tensor_layout", None)
    if layout is not None and not _check_layout(layout, module.tensor_signature, probes):
        _state["layout"] = layout
    return module.tensor_signature, ""


def _switch_off() -> None:
    """The shim's tensor_signature answers None from now on (offset 0: nothing else is read)."""
    from finegemm.jit import runtime

    module = runtime.fastcall_module()
    if module is not None:
        module.configure_tensor_abi(0, type, type, *[0] * len(_ACCESSORS))


def _check(signature: Callable, probes: list) -> str:
    """'' when the shim's words equal the Python accessors' on every probe, else what differs."""
    import torch

    dtype_codes: dict = {}
    for p in probes:
        sig = signature(p)
        if type(sig) is not bytes:
            return f"no signature for a probe {tuple(p.shape)} {p.dtype}"
        (ptr, dtype, dev_type, dev_index, sizes, strides), = _decode(sig)
        if (ptr, sizes, strides) != (p.data_ptr(), tuple(p.shape), p.stride()):
            return f"a probe's words differ: {(ptr, sizes, strides)} vs {(p.data_ptr(), tuple(p.shape), p.stride())}"
        if (dev_type, dev_index) != (0, -1):  # CPU probes: c10::DeviceType::CPU, no index
            return f"a CPU probe reads as device ({dev_type}, {dev_index})"
        if dtype_codes.setdefault(p.dtype, dtype) != dtype:
            return f"one dtype ({p.dtype}) read as two codes"
    if len(set(dtype_codes.values())) != len(dtype_codes):
        return "two dtypes read as one code"
    # Several tensors concatenate; anything but a plain tensor / Parameter is refused.
    a, b = probes[0], probes[1]
    if _decode(signature(a, b)) != _decode(signature(a)) + _decode(signature(b)):
        return "a two-tensor signature is not the concatenation of one-tensor ones"

    class _Sub(torch.Tensor):
        pass

    if any(signature(x) is not None for x in (a.as_subclass(_Sub), None, 3, "x", (a,))):
        return "a non-tensor or a tensor subclass got a signature"
    return ""


def _check_layout(layout: Callable, signature: Callable, probes: list) -> str:
    """'' when tensor_layout answers each probe list's signature with every address word reduced
    modulo 16, and the addresses; else what differs."""
    for tensors in [(p,) for p in probes] + [(probes[0], probes[1], probes[7])]:
        got = layout(*tensors)
        sig = signature(*tensors)
        if type(got) is not tuple or len(got) != 2 or type(got[0]) is not bytes:
            return "tensor_layout answered no layout for a probe"
        masked = [(ptr % 16, *rest) for ptr, *rest in _decode(sig)]
        if [tuple(x) for x in _decode(got[0])] != masked or got[1] != tuple(t.data_ptr() for t in tensors):
            return "tensor_layout disagrees with tensor_signature on a probe"
    if layout(probes[0], None) is not None:
        return "tensor_layout answered a non-tensor"
    return ""
