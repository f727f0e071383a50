"""Validation helpers shared by the public API (finegemm.api.*).

Every check raises (never ``assert``): ``TypeError`` for a wrong Python type or tensor dtype,
``ValueError`` for a wrong shape, stride, device, alignment or value. Every message names the
public function, the argument (``a[0] (A)``, ``b[1] (sfb)``, ``d``, ...), the rule, and what was
given, e.g. ``fp8_gemm_nt: a[0] (A) must be torch.float8_e4m3fn, got torch.bfloat16``.

The rules are the same for CPU and CUDA tensors, so that code validated on CPU keeps working on
the GPU. The memory-layout rules come from TMA (the Hopper tensor-memory accelerator that loads
operands and stores D): the innermost dimension must have stride 1, every other stride times
the element size must be a multiple of 16 bytes, and the base address must be 16-byte aligned.
"""
from __future__ import annotations

import functools
import os
from typing import Iterable, Optional, Sequence

import torch

from finegemm import quant, runtime
from finegemm.utils import check_bool, check_int, check_tensor  # noqa: F401  (the API's shared argument checks)

__all__ = [
    "FP8",
    "RECIPE_1D2D",
    "RECIPE_1D1D",
    "on_cuda",
    "check_tensor",
    "check_optional_tensor",
    "check_pair",
    "check_dtype",
    "check_rank",
    "check_shape",
    "check_same_device",
    "check_tma_layout",
    "check_contiguous_1d",
    "check_k_alignment",
    "check_no_overlap",
    "check_c_alias",
    "check_out_dtype_with_c",
    "normalize_recipe",
    "check_compiled_dims",
    "check_bool",
    "check_contiguous_flags",
    "check_int",
    "check_grouped_layout",
    "check_grouped_layout_form",
    "typed_key",
    "ValidatedCalls",
    "ONE_SHOT",
    "run_prepared_launch",
    "contiguous_layout_values",
    "tensor_key",
    "grouped_layout_violation",
    "grouped_layout_message",
    "check_cuda_mk_alignment",
    "check_masked_m",
    "check_ks",
    "fmt_shape",
    "check_gemm_shapes",
    "require_gpu_validated",
    "gpu_validated",
    "UNVALIDATED_ON_GPU",
    "FALLBACK_CAPABILITIES",
    "DISABLE_PATHS_ENV",
    "disabled_paths",
]

FP8 = torch.float8_e4m3fn
RECIPE_1D2D = (1, 128, 128)
RECIPE_1D1D = (1, 1, 128)
TMA_ALIGN = 16  # bytes: TMA base-address and stride granularity

_SUPPORTED_DEVICE_TYPES = ("cpu", "cuda")


def typed_key(*values) -> tuple:
    """The host fast paths' key of non-tensor arguments: each value with its type (and a
    sequence's items with theirs), so that an argument the validation rejects never matches a
    validated one by equality alone (True == 1, 1.0 == 1). A loop, not a generator: half the time
    (~0.5 us of a grouped call's host time)."""
    out = []
    for v in values:
        t = type(v)
        if t in _PLAIN_TYPES:
            out.append((t, v))
        elif isinstance(v, (tuple, list)):
            out.append((t, tuple([(type(x), x) for x in v])))
        else:
            out.append((t, v))
    return tuple(out)


_PLAIN_TYPES = frozenset((int, bool, float, str, type(None)))  # typed_key's common values, tested first


def _no_signature(*tensors) -> None:
    return None


_signature_fn = None  # jit.tensor_signature's C function once looked up, else _no_signature


def signature_fn():
    """The C key of a call's tensors (jit.tensor_signature: bytes with each tensor's address,
    shape, strides, dtype and device; ~0.2 us for five tensors instead of ~3.5 us through the
    Python accessors), or a stand-in that answers None (the caller then builds the key in Python).
    Looked up on the first CUDA call (it builds the Python launch shim)."""
    global _signature_fn
    fn = _signature_fn
    if fn is None:
        from finegemm.jit import tensor_signature

        fn = _signature_fn = tensor_signature.load() or _no_signature
    return fn


def tensor_key(*tensors: torch.Tensor) -> tuple:
    """The host fast paths' key of tensors: what the validation rules read of each (address,
    shape, strides, dtype), flat (a nested tuple per tensor costs more to build and hash); the C
    signature's one bytes object where every tensor is a plain torch.Tensor."""
    sig = (_signature_fn or signature_fn())(*tensors)
    return (sig,) if sig is not None else python_tensor_key(tensors)


def python_tensor_key(tensors) -> tuple:
    """tensor_key through PyTorch's Python accessors (tensor subclasses, or no C signature)."""
    key = ()
    for t in tensors:
        key += (t.data_ptr(), t.shape, t.stride(), t.dtype)
    return key


def keep_bounded(cache: dict, key: object, value: object, limit: int) -> None:
    """cache[key] = value, the cache cleared first when it holds `limit` entries (the host fast
    paths' caches: a loop over ever new tensors must not grow them without bound)."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value


def _no_layout(*tensors) -> None:
    return None


_layout_fn = None  # jit.tensor_signature's tensor_layout once looked up, else _no_layout


def layout_fn():
    """The C layout of a call's tensors and their addresses (jit.tensor_signature.load_layout:
    (bytes, addresses)), or a stand-in that answers None (no second level then)."""
    global _layout_fn
    fn = _layout_fn
    if fn is None:
        from finegemm.jit import tensor_signature

        fn = _layout_fn = tensor_signature.load_layout() or _no_layout
    return fn


class MovedCalls:
    """The second level of a dense family's host fast path: its validated calls by layout, for
    calls whose tensors moved.

    Why: the first level (the family's dict of call keys) matches only tensors at the addresses
    of a validated call. An eager loop whose activations or outputs move to new addresses paid
    the whole validation again (~28 us of Python on a slow CPU) and a new plan. Every rule of a
    dense call, and every choice its planning makes, reads only shapes, strides, dtypes, devices,
    each base address modulo 16 (TMA alignment, vector stores) and whether c is d, except the
    overlap rules. So a call whose tensors have the layout (jit's tensor_layout: all of those but
    the addresses) of a validated one passes every other rule too, and its launch is the
    validated one's at the new addresses. What is checked per call here: the output's byte span
    against each input's (and c's against d's where c is not d), as check_no_overlap and
    check_c_alias would; any overlap goes to the validating path, which raises or accepts.

    `slots`: for each tensor pointer of a prepared launch (its head_pointers()), the index of its
    tensor in the call's tensor tuple (an index past its end: c absent, the pointer None).
    `output`: d's index; `inputs`: the indices whose spans d must not meet; `c_index`: c's.
    `switch`: the FALLBACK_CAPABILITIES name that turns this level off (asked per moved call).

    The m-grouped calls have one too (ValidatedCalls' `moved`): their rules read the same things,
    masked_m's and grouped_layout's values are read on the GPU only, and their launches hold those
    tensors' addresses (contiguous: only a GEMM that checks the layout itself; ops/contiguous_layout
    PreparedContiguous.rebound).
    """

    def __init__(self, slots: tuple, output: int, inputs: tuple, c_index: int, limit: int = 1024,
                 switch: str = "dense_moved_calls") -> None:
        self._slots = slots
        self._output = output
        self._inputs = inputs
        self._c_index = c_index
        self._limit = limit
        self._switch = switch
        self._entries: dict = {}

    @staticmethod
    def key(tensors: tuple, rest: tuple, c_is_d: bool) -> Optional[tuple]:
        """(the second-level key, the tensors' addresses), or None (no C layout: a tensor
        subclass, or the shim off)."""
        found = (_layout_fn or layout_fn())(*tensors)
        if found is None:
            return None
        return (found[0], c_is_d) + rest, found[1]

    def launch_for(self, found: Optional[tuple]) -> object:
        """The validated launch of found's layout re-pointed at its addresses (not run), or None:
        no such layout, or an overlap for the validating path to judge."""
        if found is None:
            return None
        key, addresses = found
        entry = self._entries.get(key)
        if entry is None:
            return None
        disabled = disabled_paths()  # read once per moved call (the environment is slow to read)
        if not gpu_validated(self._switch, disabled):
            return None
        launch, extents = entry
        lo = addresses[self._output]
        hi = lo + extents[self._output]
        for i in self._inputs:
            if addresses[i] < hi and lo < addresses[i] + extents[i]:
                return None
        c = self._c_index
        if c < len(addresses) and not key[1] and addresses[c] < hi and lo < addresses[c] + extents[c]:
            return None
        n = len(addresses)
        # copy: the launch takes the host library's copy where its family has one (else it encodes anew).
        return launch.rebound(tuple([addresses[i] if i < n else None for i in self._slots]),
                              copy=gpu_validated("host_rebind", disabled))

    def learn(self, found: Optional[tuple], tensors: tuple, launch: object) -> None:
        """Keep a validated call's cacheable prepared launch for its layout (found: key()'s
        answer for its tensors). Only a launch whose head points at the call's own tensors
        (no copies, no views at other addresses) can be re-pointed."""
        if found is None or not getattr(launch, "cacheable", False) or not hasattr(launch, "rebound"):
            return
        key, addresses = found
        n = len(addresses)
        if launch.head_pointers() != tuple([addresses[i] if i < n else None for i in self._slots]):
            return
        keep_bounded(self._entries, key, (launch, tuple([_byte_extent(t) for t in tensors])), self._limit)


def _byte_extent(t: torch.Tensor) -> int:
    """Bytes from t's first element to past its last (0 for an empty tensor): _byte_span's length,
    which depends on the layout only (MovedCalls keeps it per layout)."""
    if 0 in t.shape:
        return 0
    extent = 1
    for s, st in zip(t.shape, t.stride()):
        extent += (s - 1) * st
    return extent * t.element_size()


class ValidatedCalls:
    """The keys of validated CUDA calls (api fast paths: a call whose key was seen skips the
    argument checks), each with what the API kept for it: True, or a prepared launch of its own
    (ops/*: addresses and buffers of its own, never the caller's tensors). Bounded (cleared when
    full)."""

    def __init__(self, limit: int = 4096, moved: Optional[MovedCalls] = None, signature_at: int = 1) -> None:
        self._keys: dict = {}
        self._limit = limit
        # The second level (MovedCalls), for calls whose kept launches hold only the caller's
        # tensors' addresses (m-grouped masked and contiguous, fp8_einsum): keyed by the C layout
        # and the rest of a first-level key (the function name, the typed arguments), whose C
        # signature is at `signature_at` (1 after key()'s function name; 0 in fp8_call_key's keys).
        self._moved = moved
        self._signature_at = signature_at

    def key(self, fn: str, d: object, tensors, values: tuple) -> Optional[tuple]:
        """(fn, tensor_key(*tensors()), typed_key(*values, the SM budget, the mk alignment)) of a
        CUDA call, or None (CPU tensors, odd arguments: the validating path raises what is wrong)."""
        try:
            if not on_cuda(d):
                return None
            return (fn,) + tensor_key(*tensors()) + typed_key(
                *values, runtime.get_num_sms_setting(), quant.get_mk_alignment_for_contiguous_layout())
        except Exception:
            return None

    def launch(self, key: Optional[tuple], validate, *args, tensors=None) -> object:
        """What the caller is to launch with: the value kept for its key when seen; else, with a
        second level and `tensors` (a function answering the call's tensors, in the order of
        `moved`'s slots), the launch of a validated call of the same layout re-pointed at these
        tensors (kept for the key); else, when validate(*args) (every argument check; it runs CPU
        and empty-product calls itself and returns False) returned True, True (and the key is
        kept); else False."""
        try:
            if key is not None:
                kept = self._keys.get(key)
                if kept is not None:
                    return kept
        except TypeError:  # an unhashable argument: validate (and raise what is wrong)
            key = None
        if tensors is not None and self._moved is not None and key is not None:
            found = self._moved_key(key, tensors())
            moved = self._moved.launch_for(found)
            if moved is not None:
                self.keep(key, moved)
                return moved
        if not validate(*args):
            return False
        self.keep(key, True)
        return True

    def _moved_key(self, key: tuple, tensors: tuple) -> Optional[tuple]:
        """MovedCalls.key of a call whose first-level key is `key` (None where that key is not
        the C signature's: a tensor subclass, or the shim off)."""
        at = self._signature_at
        if type(key[at]) is not bytes:
            return None
        moved = self._moved
        c = moved._c_index
        c_is_d = c < len(tensors) and tensors[c] is tensors[moved._output]
        return MovedCalls.key(tensors, key[:at] + key[at + 1:], c_is_d)

    def run_kept(self, key: Optional[tuple], kept: object, prepare, tensors=None) -> bool:
        """Run a validated CUDA call (`kept`: launch()'s answer) through a prepared launch: True when
        one ran it, False when the caller is to launch it with every argument (one-shot).

        A kept prepared launch runs it unless it answers False (not for this stream or state now).
        Otherwise prepare(the kept launch, or None for a call without one) runs it through a
        prepared launch and returns that launch (kept for the key), or returns ONE_SHOT where the
        call can never be prepared (an input copied per call: kept, so it is not tried again), or
        None where it cannot be prepared now (graph capture, another current device). With a
        second level and `tensors` (as launch's), a launch prepared for the key is kept for its
        layout too (MovedCalls.learn: only one that holds the caller's own tensors)."""
        if kept is ONE_SHOT:
            return False
        if kept is not True and kept() is not False:
            return True
        made = prepare(None if kept is True else kept)
        if made is None:
            return False
        if kept is True:
            self.keep(key, made)
            if tensors is not None and self._moved is not None and key is not None and made is not ONE_SHOT:
                t = tensors()
                self._moved.learn(self._moved_key(key, t), t, made)
        return made is not ONE_SHOT

    def keep(self, key: Optional[tuple], value: object) -> None:
        """Keep `value` (truthy) for a validated call's key (None: nothing is kept)."""
        if key is None:
            return
        keep_bounded(self._keys, key, value, self._limit)


ONE_SHOT = "one-shot"  # ValidatedCalls' value of a validated call that cannot be prepared


def ran_kept(kept: object) -> bool:
    """The top of a seen CUDA call's hot path: runs `kept` (ValidatedCalls.launch's answer) when it
    is a prepared launch, and says whether it launched. False for True / ONE_SHOT and for a launch
    that answers False (not for this stream or state now): the caller then plans the call, and
    run_kept asks the launch again before preparing another."""
    return kept is not True and kept is not ONE_SHOT and kept() is not False


def run_prepared_launch(prepared: object) -> object:
    """ValidatedCalls.run_kept's `prepare` step for a launch that serves every call of its key
    (ops prepare_*: None where the call cannot be prepared): runs it and returns it, or ONE_SHOT."""
    if prepared is None:
        return ONE_SHOT
    prepared()
    return prepared


def on_cuda(t: torch.Tensor) -> bool:
    """True when the op must run on the GPU path (tests monkeypatch this to exercise routing).
    `is_cuda` rather than `device.type`: the latter builds a torch.device per call (~0.4 us of
    the host fast path's budget)."""
    return t.is_cuda


def fmt_shape(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _type_name(x: object) -> str:
    return type(x).__name__


# ----------------------------------------------------------------------------- basic types
def check_optional_tensor(fn: str, name: str, x: object) -> Optional[torch.Tensor]:
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor or None, got {_type_name(x)}")
    return x


def check_pair(fn: str, name: str, x: object, labels: tuple[str, str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` must be a 2-tuple (or 2-list) ``(data, scales)`` of tensors."""
    if not isinstance(x, (tuple, list)):
        raise TypeError(
            f"{fn}: {name} must be a 2-tuple of tensors ({labels[0]}, {labels[1]}), got {_type_name(x)}"
        )
    if len(x) != 2:
        raise TypeError(
            f"{fn}: {name} must be a 2-tuple of tensors ({labels[0]}, {labels[1]}), got a {_type_name(x)} "
            f"of length {len(x)}"
        )
    for i in range(2):
        if not isinstance(x[i], torch.Tensor):
            raise TypeError(f"{fn}: {name}[{i}] ({labels[i]}) must be a torch.Tensor, got {_type_name(x[i])}")
    return x[0], x[1]


def check_dtype(fn: str, name: str, t: torch.Tensor, allowed: Sequence[torch.dtype], why: str = "") -> None:
    if t.dtype not in allowed:
        want = " or ".join(str(d) for d in allowed)
        raise TypeError(f"{fn}: {name} must be {want}{why}, got {t.dtype}")


def check_rank(fn: str, name: str, t: torch.Tensor, rank: int, what: str) -> None:
    if t.dim() != rank:
        raise ValueError(
            f"{fn}: {name} must be a {rank}-D tensor {what}, got {t.dim()}-D with shape {fmt_shape(t.shape)}"
        )


def check_shape(fn: str, name: str, t: torch.Tensor, expected: tuple, what) -> None:
    """``expected`` a tuple of ints; ``what`` spells the symbolic shape, e.g. ``[M, ceil(K/128)]``
    (or a zero-argument callable returning it, formatted only on failure)."""
    if t.shape != expected:
        if callable(what):
            what = what()
        raise ValueError(
            f"{fn}: {name} must have shape {what} = {fmt_shape(expected)}, got {fmt_shape(t.shape)}"
        )


def check_same_device(fn: str, tensors: dict[str, Optional[torch.Tensor]]) -> torch.device:
    """All tensors on one device, and that device is CPU or CUDA. Returns the device."""
    items = [(k, v) for k, v in tensors.items() if v is not None]
    first_name, first = items[0]
    dev = first.device
    if dev.type == "cuda" or dev.type == "cpu":
        if all(v.device == dev for _, v in items):
            return dev
    if dev.type not in _SUPPORTED_DEVICE_TYPES:
        raise ValueError(
            f"{fn}: {first_name} must be on a CPU or CUDA device (CPU runs the exact reference, CUDA the "
            f"SM90 kernels), got device {dev}"
        )
    for name, t in items[1:]:
        if t.device != dev:
            raise ValueError(
                f"{fn}: all tensors must be on the same device; {first_name} is on {dev} but {name} is on {t.device}"
            )
    return dev


# ----------------------------------------------------------------------------- memory layout
def check_tma_layout(fn: str, name: str, t: torch.Tensor, what: str) -> None:
    """TMA rule: inner stride 1, other strides * element size % 16 == 0, base pointer 16-byte aligned.

    Strides of dimensions of size <= 1 are irrelevant (never stepped over) and are not checked.
    ``what`` describes the stored layout, e.g. ``"B [K, N] (N contiguous)"``.
    """
    shape = t.shape
    if 0 in shape:
        return
    strides = t.stride()
    es = t.element_size()
    if shape[-1] > 1 and strides[-1] != 1:
        raise ValueError(
            f"{fn}: {name} {what} must have a contiguous last dimension (stride 1; TMA rule), got strides "
            f"{tuple(t.stride())} for shape {fmt_shape(t.shape)}"
        )
    for dim in range(len(shape) - 1):
        if shape[dim] > 1 and (strides[dim] * es) % TMA_ALIGN != 0:
            raise ValueError(
                f"{fn}: {name} {what} must have every outer stride a multiple of 16 bytes (TMA needs a 16-byte "
                f"row pitch), got stride {t.stride(dim)} elements x {es} bytes = {t.stride(dim) * es} bytes in "
                f"dimension {dim} (shape {fmt_shape(t.shape)}, strides {tuple(t.stride())}); pad the last "
                f"dimension to a multiple of {TMA_ALIGN // es} elements and pass a view"
            )
    if t.data_ptr() % TMA_ALIGN != 0:
        raise ValueError(
            f"{fn}: {name} {what} must start at a 16-byte aligned address (TMA rule), got data_ptr() % 16 = "
            f"{t.data_ptr() % TMA_ALIGN} (a view offset by {t.storage_offset()} elements)"
        )


def check_contiguous_1d(fn: str, name: str, t: torch.Tensor, what: str, aligned: bool = False) -> None:
    """A 1-D tensor read through a raw pointer: stride 1 (and 16-byte aligned base when ``aligned``)."""
    if t.numel() > 1 and t.stride(0) != 1:
        raise ValueError(f"{fn}: {name} {what} must be contiguous (stride 1), got stride {t.stride(0)}")
    if aligned and t.numel() > 0 and t.data_ptr() % TMA_ALIGN != 0:
        raise ValueError(
            f"{fn}: {name} {what} must start at a 16-byte aligned address (TMA rule), got data_ptr() % 16 = "
            f"{t.data_ptr() % TMA_ALIGN}"
        )


def check_k_alignment(fn: str, k: int, element_size: int, kind: str) -> None:
    """K * element size must be a multiple of 16 bytes (a K-major row is one TMA box row)."""
    mult = TMA_ALIGN // element_size
    if k % mult != 0:
        raise ValueError(
            f"{fn}: K must be a multiple of {mult} ({TMA_ALIGN} bytes of {kind}; TMA rule), got K={k}"
        )


def _byte_span(t: torch.Tensor) -> Optional[tuple[int, int]]:
    extent = _byte_extent(t)
    if extent == 0:
        return None
    start = t.data_ptr()
    return start, start + extent


def _has_self_overlap(t: torch.Tensor) -> bool:
    """Two elements of t at one address: in stride order, some dimension's stride does not step
    past everything the smaller-stride dimensions reach (e.g. an expanded, stride-0 dimension)."""
    dims = sorted((st, s) for s, st in zip(t.shape, t.stride()) if s > 1)
    reach = 0  # elements spanned by the dimensions seen so far, minus one
    for st, s in dims:
        if st <= reach:
            return True
        reach += st * (s - 1)
    return False


def check_no_overlap(fn: str, out_name: str, out: torch.Tensor, inputs: dict[str, Optional[torch.Tensor]]) -> None:
    """The output must not share memory with any input (checked on the byte spans, conservatively),
    nor with itself (each element written once: a stride-0 or overlapping view would race)."""
    if out.numel() > 1 and _has_self_overlap(out):
        raise ValueError(
            f"{fn}: {out_name} must not have elements that share memory (each output element is written once), "
            f"got shape {fmt_shape(out.shape)} with strides {tuple(out.stride())} (e.g. an expanded view: pass a "
            f"tensor of its own)"
        )
    so = _byte_span(out)
    if so is None:
        return
    out_storage = out.untyped_storage()
    o_lo = out_storage.data_ptr()
    o_hi = o_lo + out_storage.nbytes()
    for name, t in inputs.items():
        if t is None or t.device != out.device:
            continue
        storage = t.untyped_storage()
        lo = storage.data_ptr()
        if lo >= o_hi or lo + storage.nbytes() <= o_lo:
            continue  # disjoint allocations (fast path)
        st = _byte_span(t)
        if st is None:
            continue
        if so[0] < st[1] and st[0] < so[1]:
            raise ValueError(
                f"{fn}: {out_name} must not overlap {name} in memory (the kernel reads {name} while writing "
                f"{out_name}), got {out_name} bytes [{so[0]:#x}, {so[1]:#x}) and {name} bytes [{st[0]:#x}, {st[1]:#x})"
            )


def check_c_alias(fn: str, c: Optional[torch.Tensor], d: torch.Tensor) -> None:
    """c may be d itself (in-place accumulation, same shape and strides) but must not partially overlap it."""
    if c is None:
        return
    sc, sd = _byte_span(c), _byte_span(d)
    if sc is None or sd is None or c.device != d.device:
        return
    if sc[0] < sd[1] and sd[0] < sc[1]:
        same = c.data_ptr() == d.data_ptr() and tuple(c.shape) == tuple(d.shape) and c.stride() == d.stride()
        if not same:
            raise ValueError(
                f"{fn}: c must either be d itself (same data_ptr, shape and strides: in-place accumulation) or "
                f"not overlap d in memory, got c (shape {fmt_shape(c.shape)}, strides {tuple(c.stride())}) "
                f"partially overlapping d (shape {fmt_shape(d.shape)}, strides {tuple(d.stride())})"
            )


def check_out_dtype_with_c(fn: str, d: torch.Tensor, c: Optional[torch.Tensor]) -> None:
    """Rule: c (accumulation input) is only allowed with an fp32 d, and c must be fp32 too."""
    if c is None:
        return
    check_dtype(fn, "c", c, (torch.float32,), " (the accumulation input)")
    if d.dtype != torch.float32:
        raise TypeError(
            f"{fn}: d must be torch.float32 when c is given (accumulation happens in fp32: D = C + A @ B), "
            f"got d of dtype {d.dtype}"
        )


# ----------------------------------------------------------------------------- scalar arguments
def normalize_recipe(
    fn: str, recipe: object, allowed: Sequence[tuple[int, int, int]], default: tuple[int, int, int]
) -> tuple[int, int, int]:
    """None -> default; else a tuple/list of 3 ints that must be one of ``allowed``."""
    if recipe is None:
        return default
    want = " or ".join(str(r) for r in allowed)
    if not isinstance(recipe, (tuple, list)):
        raise TypeError(f"{fn}: recipe must be None or a tuple of 3 ints ({want}), got {_type_name(recipe)}")
    if len(recipe) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in recipe):
        raise TypeError(f"{fn}: recipe must be None or a tuple of 3 ints ({want}), got {recipe!r}")
    r = tuple(int(v) for v in recipe)
    if r not in [tuple(a) for a in allowed]:
        raise ValueError(f"{fn}: recipe must be one of {want} on SM90, got {r}")
    return r  # type: ignore[return-value]


_COMMON_COMPILED_DIMS = frozenset(("", "m", "n", "k", "mn", "nk", "mk", "mnk", "nm", "kn", "km"))


def check_compiled_dims(fn: str, compiled_dims: object) -> None:
    """A hint of which of m/n/k to bake into the kernel: a str of distinct letters from 'mnk'."""
    if compiled_dims in _COMMON_COMPILED_DIMS:
        return
    if not isinstance(compiled_dims, str):
        raise TypeError(f"{fn}: compiled_dims must be a str made of the letters 'm', 'n', 'k', got {_type_name(compiled_dims)}")
    if any(ch not in "mnk" for ch in compiled_dims) or len(set(compiled_dims)) != len(compiled_dims):
        raise ValueError(
            f"{fn}: compiled_dims must contain only distinct letters from 'mnk' (e.g. 'nk', 'mn'), got {compiled_dims!r}"
        )


def check_contiguous_flags(fn: str, use_psum_layout: object, ensure_zero_padding: object,
                           expected_m_for_psum_layout: object) -> None:
    """DeepGEMM's contiguous-layout flags: checked; finegemm always writes padding rows as zeros,
    and plans a psum call from its real row count (the expected m is a hint it does not need)."""
    check_bool(fn, "use_psum_layout", use_psum_layout)
    check_bool(fn, "ensure_zero_padding", ensure_zero_padding)
    if expected_m_for_psum_layout is not None:
        check_int(fn, "expected_m_for_psum_layout", expected_m_for_psum_layout, 0)
        if not use_psum_layout:
            raise ValueError(f"{fn}: expected_m_for_psum_layout is only meaningful with use_psum_layout=True")


# ----------------------------------------------------------------------------- grouped layouts
def check_cuda_mk_alignment(fn: str, d: torch.Tensor, alignment: int) -> None:
    """The SM90 kernels read one group id per tile of 64 or 128 rows, so a layout whose segments
    start at multiples of 16 or 32 rows could put two groups in one tile: refused on CUDA (the
    CPU reference runs it), whatever the shapes, so that the rule does not depend on M or K."""
    if on_cuda(d) and alignment % 64:
        raise NotImplementedError(
            f"{fn}: on CUDA the contiguous layout's mk alignment must be 64 or 128 (a kernel tile of 64 / 128 "
            f"rows never spans two groups), got {alignment}; set_mk_alignment_for_contiguous_layout(64 or 128)")


# Rules of the m-grouped contiguous layouts that their values can break, as (code, a, b, c): the
# codes are shared with the GPU's check (finegemm/ops/contiguous_layout.py records them), so a
# broken rule reads the same whether the host or the GPU found it (grouped_layout_message).
LAYOUT_RANGE = 1            # plain: a value outside [-1, G): (lo, hi) of all values
LAYOUT_MISALIGNED = 2       # plain: a group's first row off the alignment: (row, group)
LAYOUT_SPLIT = 3            # plain: a group in several runs: (group, runs)
LAYOUT_PSUM_NEGATIVE = 4    # psum: an end < 0: (minimum,)
LAYOUT_PSUM_DECREASING = 5  # psum: ends[g - 1] > ends[g]: (g, ends[g - 1], ends[g])
LAYOUT_PSUM_PAST_M = 6      # psum: the last end > M: (last,)
LAYOUT_PSUM_GAP = 7         # psum: a group ends inside the alignment gap: (g, ends[g - 1], ends[g])


def check_grouped_layout_form(fn: str, gl: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool) -> None:
    """dtype, rank, shape and contiguity of an m-grouped contiguous layout (reads no value)."""
    check_dtype(fn, "grouped_layout", gl, (torch.int32,))
    if use_psum_layout:
        check_rank(fn, "grouped_layout", gl, 1, "(with use_psum_layout: [G] cumulative row ends)")
        check_shape(fn, "grouped_layout", gl, (num_groups,), "[G] (with use_psum_layout)")
    else:
        check_rank(fn, "grouped_layout", gl, 1, "([M] group id per row)")
        check_shape(fn, "grouped_layout", gl, (m,), "[M]")
    check_contiguous_1d(fn, "grouped_layout", gl, "")


def grouped_layout_violation(v: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool,
                             alignment: int) -> Optional[tuple[int, int, int, int]]:
    """The first broken rule of layout values `v` (int64, CPU) as (code, a, b, c), or None.

    Plain layout ([M]): row r belongs to group v[r] in [0, G) or is padding (-1); the rows of one
    group form one run, which starts at a multiple of ``alignment``. PSUM layout ([G] cumulative
    row ends): non-negative, non-decreasing, last <= M; group g owns rows [align(end_{g-1}), end_g),
    so a non-empty group's end must not fall inside the alignment gap after the previous group.
    The order of the checks (the first broken rule wins) is the GPU check's too.
    """
    if v.numel() == 0:
        return None
    if use_psum_layout:
        lo = int(v.min())
        if lo < 0:
            return (LAYOUT_PSUM_NEGATIVE, lo, 0, 0)
        if v.numel() > 1:
            dec = (v[1:] < v[:-1]).nonzero()
            if dec.numel():
                g = int(dec[0, 0]) + 1
                return (LAYOUT_PSUM_DECREASING, g, int(v[g - 1]), int(v[g]))
        last = int(v[-1])
        if last > m:
            return (LAYOUT_PSUM_PAST_M, last, 0, 0)
        if v.numel() > 1:
            prev, cur = v[:-1], v[1:]
            start = (prev + alignment - 1) // alignment * alignment
            bad = ((cur != prev) & (cur < start)).nonzero()
            if bad.numel():
                g = int(bad[0, 0]) + 1
                return (LAYOUT_PSUM_GAP, g, int(prev[g - 1]), int(cur[g - 1]))
        return None
    lo, hi = int(v.min()), int(v.max())
    if lo < -1 or hi >= num_groups:
        return (LAYOUT_RANGE, lo, hi, 0)
    change = torch.ones(v.numel(), dtype=torch.bool)
    change[1:] = v[1:] != v[:-1]
    starts = change.nonzero().flatten()
    vals = v[starts]
    real = vals >= 0
    misaligned = (real & (starts % alignment != 0)).nonzero().flatten()
    if misaligned.numel():
        i = int(misaligned[0])
        return (LAYOUT_MISALIGNED, int(starts[i]), int(vals[i]), 0)
    counts = torch.bincount(vals[real], minlength=num_groups)
    split = (counts > 1).nonzero().flatten()
    if split.numel():
        g = int(split[0])
        return (LAYOUT_SPLIT, g, int(counts[g]), 0)
    return None


def grouped_layout_message(fn: str, violation: tuple[int, int, int, int], m: int, num_groups: int,
                           alignment: int) -> str:
    """The error message of a broken layout rule (grouped_layout_violation's tuple)."""
    code, a, b, c = violation
    if code == LAYOUT_RANGE:
        return (f"{fn}: grouped_layout values must be -1 (padding row) or a group id in [0, G={num_groups}), got "
                f"values in [{a}, {b}]")
    if code == LAYOUT_MISALIGNED:
        return (f"{fn}: grouped_layout: each group's first row must be at a multiple of the alignment {alignment} "
                f"(get_mk_alignment_for_contiguous_layout(); pad with -1 rows), got group {b} starting at row {a}")
    if code == LAYOUT_SPLIT:
        return (f"{fn}: grouped_layout: the rows of one group must be contiguous (one run), got group {a} in {b} "
                f"separate runs")
    if code == LAYOUT_PSUM_NEGATIVE:
        return f"{fn}: grouped_layout (psum row ends) must be >= 0, got minimum {a}"
    if code == LAYOUT_PSUM_DECREASING:
        return (f"{fn}: grouped_layout (psum row ends) must be non-decreasing, got grouped_layout[{a - 1}] = {b} > "
                f"grouped_layout[{a}] = {c}")
    if code == LAYOUT_PSUM_PAST_M:
        return f"{fn}: grouped_layout (psum row ends) must end at <= M = {m}, got last end {a}"
    if code == LAYOUT_PSUM_GAP:
        start = (b + alignment - 1) // alignment * alignment
        return (f"{fn}: grouped_layout (psum row ends) must not end a group inside the alignment gap: group {a} "
                f"starts at align({b}, {alignment}) = {start} (the mk alignment), so its end must be >= that or equal "
                f"to the previous end (empty group), got end {c}")
    raise ValueError(f"{fn}: unknown grouped_layout violation code {code}")


def contiguous_layout_values(fn: str, d: torch.Tensor, gl: torch.Tensor, m: int, num_groups: int,
                             use_psum_layout: bool, alignment: int, empty: bool) -> bool:
    """The m-grouped contiguous calls' layout step at validation. CPU: the values checked here
    (False). CUDA: the form here, the values on the GPU (no sync): for an empty product (M, N, K
    or G zero) the check runs now (False, the caller finishes the call), else True: the caller's
    launch step runs it (ops/contiguous_layout.api_group_ids) before the GEMM, in every call."""
    if not on_cuda(d):
        check_grouped_layout(fn, gl, m, num_groups, use_psum_layout, alignment)
        return False
    check_grouped_layout_form(fn, gl, m, num_groups, use_psum_layout)
    if not empty:
        return True
    from finegemm.ops.contiguous_layout import api_group_ids  # lazy: the CUDA stack

    api_group_ids(fn, gl, m, num_groups, use_psum_layout, alignment)  # the rules hold for empty products too
    return False


def check_grouped_layout(
    fn: str, gl: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool, alignment: int
) -> None:
    """Validate an m-grouped contiguous layout, its values included (grouped_layout_violation's
    rules). Reads the values: synchronizes on CUDA tensors, so the CUDA paths check the form here
    and the values on the GPU (finegemm.ops.contiguous_layout)."""
    check_grouped_layout_form(fn, gl, m, num_groups, use_psum_layout)
    if gl.numel() == 0:
        return
    v = gl.detach().to(device="cpu", dtype=torch.int64)  # synchronizes with the GPU on CUDA tensors
    bad = grouped_layout_violation(v, m, num_groups, use_psum_layout, alignment)
    if bad is not None:
        raise ValueError(grouped_layout_message(fn, bad, m, num_groups, alignment))


def check_masked_m(fn: str, masked_m: torch.Tensor, num_groups: int, m_max: int, check_values: bool) -> None:
    """int32 [G] with values in [0, Mmax]; the values are only checked when ``check_values``
    (CPU tensors): on CUDA masked_m stays on the GPU (CUDA graphs) and the kernel clamps."""
    check_dtype(fn, "masked_m", masked_m, (torch.int32,))
    check_rank(fn, "masked_m", masked_m, 1, "([G] valid rows per group)")
    check_shape(fn, "masked_m", masked_m, (num_groups,), "[G]")
    check_contiguous_1d(fn, "masked_m", masked_m, "")
    if check_values and masked_m.numel():
        lo, hi = int(masked_m.min()), int(masked_m.max())
        if lo < 0 or hi > m_max:
            raise ValueError(f"{fn}: masked_m values must be in [0, Mmax={m_max}], got values in [{lo}, {hi}]")


def check_ks(fn: str, ks: object, ks_tensor: torch.Tensor, num_groups: int, check_values: bool) -> list[int]:
    """ks: list of G Python ints, each >= 0 and % 128 == 0; ks_tensor: int32 [G] equal to ks.

    The equality of ks_tensor and ks is checked when ``check_values`` (CPU tensors) only: reading
    a CUDA tensor would synchronize, and the kernel plans from ks alone.
    """
    if not isinstance(ks, (list, tuple)):
        raise TypeError(f"{fn}: ks must be a list of ints (K of each group), got {_type_name(ks)}")
    for i, k in enumerate(ks):
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"{fn}: ks must be a list of ints, got ks[{i}] of type {_type_name(k)}")
        if k < 0 or k % 128 != 0:
            raise ValueError(
                f"{fn}: ks values must be non-negative multiples of 128 (one K block), got ks[{i}] = {k}"
            )
    if len(ks) != num_groups:
        raise ValueError(f"{fn}: len(ks) must equal G = d.shape[0] = {num_groups}, got len(ks) = {len(ks)}")
    check_dtype(fn, "ks_tensor", ks_tensor, (torch.int32,))
    check_rank(fn, "ks_tensor", ks_tensor, 1, "([G] K of each group)")
    check_shape(fn, "ks_tensor", ks_tensor, (num_groups,), "[G]")
    check_contiguous_1d(fn, "ks_tensor", ks_tensor, "")
    if check_values and num_groups:
        got = [int(x) for x in ks_tensor.tolist()]
        if got != [int(k) for k in ks]:
            raise ValueError(f"{fn}: ks_tensor must hold the same values as ks, got ks = {list(ks)} and ks_tensor = {got}")
    return [int(k) for k in ks]


def check_gemm_shapes(fn: str, a_name: str, A: torch.Tensor, b_name: str, B: torch.Tensor, d: torch.Tensor,
                      c: Optional[torch.Tensor], a_mk: bool, b_nk: bool) -> tuple[int, int, int]:
    """Ranks and agreement of a 2-D GEMM's operands for one layout suffix; returns (M, N, K).

    a_mk: A is stored [M, K] (else [K, M]); b_nk: B is stored [N, K] (else [K, N]).
    """
    a_what = "[M, K]" if a_mk else "[K, M]"
    b_what = "[N, K]" if b_nk else "[K, N]"
    check_rank(fn, a_name, A, 2, a_what)
    check_rank(fn, b_name, B, 2, b_what)
    check_rank(fn, "d", d, 2, "[M, N]")
    M, K = A.shape if a_mk else (A.shape[1], A.shape[0])
    N, Kb = B.shape if b_nk else (B.shape[1], B.shape[0])
    if K != Kb:
        raise ValueError(
            f"{fn}: K of {a_name} (stored {a_what} = {fmt_shape(A.shape)}) and {b_name} (stored {b_what} = "
            f"{fmt_shape(B.shape)}) must agree, got K={K} and K={Kb}"
        )
    check_shape(fn, "d", d, (M, N), "[M, N]")
    if c is not None:
        check_rank(fn, "c", c, 2, "[M, N]")
        check_shape(fn, "c", c, (M, N), "[M, N]")
    return M, N, K


# Kernels that are built and pass their CPU-side checks (compile, spills, routing) but have not yet
# passed their GPU tests. An unvalidated kernel could return wrong numbers or fault, which in a
# serving process is the worst outcome, so CUDA calls raise until a GPU run validates them:
# tests/gpu/<file> names the suite that lifts each entry (remove the entry when it passes).
UNVALIDATED_ON_GPU: dict[str, tuple[str, str, str]] = {
    # Entry format: capability -> (what, issue, "tests/gpu/<suite>.py"). Lifted so far: 1D1D wgrad,
    # k-grouped FP8, grouped BF16 (H200, 2026-11-30, _gated_gpu_tests_d71a433.log); the fused
    # skip-head-mid epilogue and the FP8 / BF16 contiguous GEMMs checking their layout themselves
    # (H200, 2026-12-05: 2026-12-05_h200_pending_gpu_tests_0ea216f.log, _gpu_tests_6e678d3.log);
    # fp8_einsum's heads-packed kernel and the FP8 / BF16 contiguous GEMMs reading psum ends
    # themselves (H100, the lent card, 2026-12-05: 2026-12-05_h100_gpu_tests_a59da10.log, 2529
    # passed; sanitizers _h100_sanitize_*_einsum_psum_a59da10.log); fp8_einsum's heads-packed kernel
    # gathering sfa in place (H100, 2026-12-05: _h100_gpu_tests_extras_eaf3d65.log, 176 passed;
    # _h100_sanitize_*_einsum_eaf3d65.log); the host fast paths' second levels and copies
    # (host_rebind, masked / contiguous / einsum_moved_calls: H100, 2026-12-07, 735778f:
    # _h100_fastcall_gpu_tests_735778f.log, memcheck clean, the whole GPU suite with them open
    # _h100_gpu_suite_gates_lifted_735778f.log, 2824 passed).
    "skip_head_mid_moved_calls": ("fp8_gemm_nt_skip_head_mid's second level (v1.26: a validated layout at new "
                                  "addresses re-points the kept fused launch; until then such a call is validated and "
                                  "planned again)", "#3", "tests/gpu/test_fastcall_gpu.py"),
}
ENABLE_UNVALIDATED_ENV = "FINEGEMM_ENABLE_UNVALIDATED"


# The capabilities that have a fallback path (asked through gpu_validated): FINEGEMM_DISABLE_PATHS
# can switch them off, e.g. to rule one out when a serving process misbehaves, or to time the
# fallback in the same run (scripts/ab_bench_variants.sh).
FALLBACK_CAPABILITIES = {
    "fp8_skip_head_mid_fused": "fp8_gemm_nt_skip_head_mid writes a scratch [M, N] and copies it into d",
    "fp8_contiguous_layout_in_gemm": "the FP8 contiguous calls run the layout-check kernel, then the GEMM on its ids",
    "bf16_contiguous_layout_in_gemm": "the BF16 contiguous calls run the layout-check kernel, then the GEMM on its ids",
    "fp8_einsum_heads_packed": "fp8_einsum (bf16 d) copies A head-major, runs the masked GEMM into a scratch, copies "
                               "it into d",
    "fp8_einsum_sfa_in_place": "fp8_einsum's heads-packed kernel reads an MN-major copy of sfa (made per call) through "
                               "a TMA map, one-shot launches",
    "fp8_einsum_tma_store": "fp8_einsum's heads-packed kernel (sfa read in place) stores a bf16 d directly from "
                            "registers instead of through TMA",
    "fp8_contiguous_psum_in_gemm": "the FP8 contiguous calls with use_psum_layout run the layout-check kernel (the ends "
                                   "into per-row ids), then the GEMM on its ids",
    "bf16_contiguous_psum_in_gemm": "the BF16 contiguous calls with use_psum_layout run the layout-check kernel, then "
                                    "the GEMM on its ids",
    "dense_moved_calls": "a dense call whose tensors moved (a validated layout at new addresses) is validated and "
                         "planned again (50-120 us of host time instead of 16-31 on an H100 host)",
    "masked_moved_calls": "an m-grouped masked call (FP8 or BF16) whose tensors moved is validated and planned again",
    "contiguous_moved_calls": "an m-grouped contiguous call (FP8 or BF16) whose tensors moved is validated and planned "
                              "again",
    "einsum_moved_calls": "an fp8_einsum call whose tensors moved is validated and planned again",
    "skip_head_mid_moved_calls": "an fp8_gemm_nt_skip_head_mid call whose tensors moved is validated and planned "
                                 "again",
    "host_rebind": "a moved call's launch (dense, masked, contiguous, fp8_einsum's or the skip-head-mid GEMM's) is "
                   "encoded anew instead of copied by the host library (~7-10 us more host time on an H100 host)",
}
DISABLE_PATHS_ENV = "FINEGEMM_DISABLE_PATHS"


def _environment_reader(name: str):
    """A function answering whether the environment variable `name` is set (its value as os.environ
    stores it, or None) in ~0.1 us: a lookup in os.environ's own dict, which every os.environ write
    updates (os.environ.get encodes the key and decodes the value: ~1.4 us a read, paid per moved
    call before). Where os.environ has no such dict, os.environ.get itself."""
    data, encodekey = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and callable(encodekey):
        key = encodekey(name)
        return lambda: data.get(key)
    return lambda: os.environ.get(name)


_disable_paths_set = _environment_reader(DISABLE_PATHS_ENV)
_NO_PATHS: frozenset = frozenset()


def disabled_paths() -> frozenset:
    """The capabilities FINEGEMM_DISABLE_PATHS names (separated by ',' or ':'); a name that is not
    in FALLBACK_CAPABILITIES raises ValueError naming the variable and the allowed names."""
    if _disable_paths_set() is None:  # the usual case, asked per moved call: no decoding
        return _NO_PATHS
    return _parse_disabled_paths(os.environ.get(DISABLE_PATHS_ENV, ""))


@functools.lru_cache(maxsize=8)
def _parse_disabled_paths(raw: str) -> frozenset:
    """disabled_paths for one value of the variable (parsed once: one-shot calls ask per call)."""
    names = frozenset(x.strip() for x in raw.replace(":", ",").split(",") if x.strip())
    unknown = sorted(names - FALLBACK_CAPABILITIES.keys())
    if unknown:
        raise ValueError(f"{DISABLE_PATHS_ENV}={raw!r}: unknown path(s) {unknown}; the paths with a fallback are "
                         f"{sorted(FALLBACK_CAPABILITIES)}")
    return names


def gpu_validated(capability: str, disabled: Optional[frozenset] = None) -> bool:
    """Whether a kernel capability with a fallback may run on CUDA: it passed its GPU suite (or
    FINEGEMM_ENABLE_UNVALIDATED=1) and FINEGEMM_DISABLE_PATHS does not name it (`disabled`: that
    variable's names when the caller has read them already; each read of the environment costs
    ~1-2 us). Asked when a call is planned, not on a kept call's hot path; require_gpu_validated
    raises instead."""
    if capability in (disabled_paths() if disabled is None else disabled):
        return False
    return capability not in UNVALIDATED_ON_GPU or os.environ.get(ENABLE_UNVALIDATED_ENV) == "1"


def require_gpu_validated(fn: str, capability: str) -> None:
    """Raise NotImplementedError for a CUDA call into a kernel that has not passed its GPU tests,
    unless FINEGEMM_ENABLE_UNVALIDATED=1 (its own GPU tests and early adopters)."""
    entry = UNVALIDATED_ON_GPU.get(capability)
    if entry is None or os.environ.get(ENABLE_UNVALIDATED_ENV) == "1":
        return
    what, issue, suite = entry
    raise NotImplementedError(
        f"{fn}: the SM90 CUDA kernel for {what} is built but has not yet passed its GPU tests "
        f"({suite}, issue {issue}); set {ENABLE_UNVALIDATED_ENV}=1 to run it anyway. CPU tensors run "
        f"the exact reference"
    )
