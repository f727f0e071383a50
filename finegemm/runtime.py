"""Process-wide runtime knobs (DeepGEMM-compatible): SM budget, tensor-core utilisation hint, PDL,
and DeepGEMM's compile-dims and determinism switches (kept for callers; see why they change nothing).

They are plain module state read by the heuristics at plan time; changing them invalidates
nothing that is already compiled, only the choice of launch configuration for later calls. The
PDL setting is also handed to the host library, which reads it at every launch.
"""
from __future__ import annotations

_num_sms: int | None = None  # None: use every SM of the current device
_tc_util: int = 100
_pdl: bool = False
_ignore_compile_dims: bool = False
_deterministic: bool = False
_block_size_multiple_of: tuple[int, int] = (1, 1)


_sm_counts: dict[int, int] = {}  # device index -> its SM count (a property that never changes)


def device_sm_count(device: int) -> int:
    """The SM count of CUDA device `device`, read once per device (planning asks on every one-shot
    call: the host path of a GEMM call)."""
    n = _sm_counts.get(device)
    if n is None:
        import torch

        n = _sm_counts.setdefault(device, torch.cuda.get_device_properties(device).multi_processor_count)
    return n


def _device_sm_count() -> int:
    import torch

    if not torch.cuda.is_available():
        return 132  # H100/H200 SXM; only used for planning when no GPU is present
    return device_sm_count(torch.cuda.current_device())


def set_num_sms(num_sms: int) -> None:
    """Limit the number of SMs the persistent kernels use (1 ≤ num_sms ≤ the device's count)."""
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"num_sms must be an int, got {type(num_sms).__name__}")
    limit = _device_sm_count()
    if not 1 <= num_sms <= limit:
        raise ValueError(f"num_sms must be in [1, {limit}] (the device's SM count), got {num_sms}")
    global _num_sms
    _num_sms = num_sms


def get_num_sms_setting() -> int | None:
    """The raw set_num_sms value (None: whole device); cheap, for cache keys."""
    return _num_sms


def get_num_sms() -> int:
    """SMs the kernels may use: set_num_sms's value, else the whole device."""
    return _num_sms if _num_sms is not None else _device_sm_count()


def set_tc_util(tc_util: int) -> None:
    """Hint (percent, 1..100) of tensor-core throughput this GEMM may take when sharing the GPU."""
    if isinstance(tc_util, bool) or not isinstance(tc_util, int):
        raise TypeError(f"tc_util must be an int percentage, got {type(tc_util).__name__}")
    if not 1 <= tc_util <= 100:
        raise ValueError(f"tc_util must be in [1, 100], got {tc_util}")
    global _tc_util
    _tc_util = tc_util


def get_tc_util() -> int:
    return _tc_util


def _require_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def set_pdl(enable: bool) -> None:
    """Launch the GEMM kernels with programmatic dependent launch (PDL) from now on: a kernel may
    be scheduled while the kernel before it in the stream is still running, so its launch and
    prologue overlap that kernel's tail. Every finegemm GEMM kernel waits for its predecessor to
    complete (griddepcontrol.wait) before it reads or writes global memory, so results do not
    change; it pays where kernels run back to back (decoding, CUDA graphs). Applies to launches
    and graph captures made after the call, process-wide."""
    _require_bool("enable", enable)
    global _pdl
    _pdl = enable
    from finegemm.jit import runtime as jit_runtime

    jit_runtime.push_pdl(enable)


def get_pdl() -> bool:
    return _pdl


def set_ignore_compile_dims(value: bool) -> None:
    """DeepGEMM's switch to stop baking a call's `compiled_dims` (M, N or K) into its kernel.
    finegemm compiles a kernel per tile configuration and never per shape: M, N and K are always
    run-time arguments, so every call already runs as DeepGEMM's do with this set. The value is
    checked and kept (get_ignore_compile_dims); it changes no kernel and no launch."""
    _require_bool("value", value)
    global _ignore_compile_dims
    _ignore_compile_dims = value


def get_ignore_compile_dims() -> bool:
    return _ignore_compile_dims


def set_block_size_multiple_of(value: "int | tuple[int, int]", block_n_multiple_of: "int | None" = None) -> None:
    """DeepGEMM's constraint on its tile sizes (block_m and block_n multiples of the values):
    set_block_size_multiple_of(16), ((16, 32)) or (16, 32). DeepGEMM needs it where an epilogue's
    store block must divide a layout (e.g. its fused skip-head-mid remap); no finegemm function
    depends on the tile size for its result (fp8_gemm_nt_skip_head_mid remaps after the GEMM), so
    the tile stays the heuristic's choice. The values are checked (positive ints) and kept
    (get_block_size_multiple_of); they change nothing."""
    if block_n_multiple_of is None and isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise TypeError(f"set_block_size_multiple_of: value must be an int or a pair of ints, got {value!r}")
        value, block_n_multiple_of = value
    elif block_n_multiple_of is None:
        block_n_multiple_of = value
    pair = []
    for name, v in (("block_m multiple", value), ("block_n multiple", block_n_multiple_of)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"set_block_size_multiple_of: the {name} must be an int, got {type(v).__name__}")
        if v < 1:
            raise ValueError(f"set_block_size_multiple_of: the {name} must be >= 1, got {v}")
        pair.append(v)
    global _block_size_multiple_of
    _block_size_multiple_of = (pair[0], pair[1])


def get_block_size_multiple_of() -> tuple[int, int]:
    """(block_m multiple, block_n multiple) last set (default (1, 1))."""
    return _block_size_multiple_of


def use_deterministic_algorithms(enabled: bool = True) -> None:
    """DeepGEMM's request for results that do not change from run to run. finegemm's kernels give
    them without it: split-K partials are summed in split order (through the workspace or between
    the splits of a cluster), no kernel accumulates with atomics, and a call's plan depends only on
    its shapes, the tuned tables and these knobs, so repeated calls are bitwise equal (the GPU tests
    repeat calls and compare bits). The value is checked and kept (get_deterministic_algorithms);
    it changes nothing. Note that set_num_sms may change a plan (e.g. its split count), and with it
    the order of the sums."""
    _require_bool("enabled", enabled)
    global _deterministic
    _deterministic = enabled


def get_deterministic_algorithms() -> bool:
    return _deterministic


def check_errors() -> None:
    """Synchronize, then raise (ValueError) the first bad input value that a check on the GPU
    found since the last report. Today those are the m-grouped contiguous layouts: their values
    are checked on the GPU, so that the calls never synchronize and can be captured in a CUDA
    graph (finegemm/ops/contiguous_layout.py); the next such call also raises what was found."""
    import sys

    layout = sys.modules.get("finegemm.ops.contiguous_layout")
    if layout is not None:  # else no GPU check has run in this process
        layout.check_errors()
