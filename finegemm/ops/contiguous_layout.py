"""The m-grouped contiguous layouts, checked and turned into the kernels' per-row group ids on the GPU.

Reading grouped_layout on the host would synchronize the stream on every MoE GEMM (and a call
could not be captured in a CUDA graph): an inference engine or a training step would stall on
each one. So on CUDA the check runs on the GPU. The shipped path is the GEMM checking the layout
itself, plain ids or psum ends (one launch: in_kernel_check below, scheduler/contiguous_layout_check.cuh).
Its fallback, where FINEGEMM_DISABLE_PATHS names that capability, is this module's small kernel,
which does what the host validator (api/_validate.py, grouped_layout_violation) does on CPU
tensors, in the same stream, before the GEMM:

- plain layout (int32 [M], group id per row, -1 = padding): copies the ids for the GEMM, an id
  outside [-1, G) as -1 (its row is written as zeros: no group's weights are ever read out of
  bounds), and checks the three rules (ids in range, every group's run starting at a multiple
  of the alignment, one run per group);
- psum layout (int32 [G] cumulative row ends): expands the ends into per-row ids (rows of no
  group: -1) and checks its four rules (ends >= 0, non-decreasing, last <= M, no group ending
  inside the alignment gap). Whatever the ends hold, every id written is in [-1, G).

A broken rule is recorded (the first one, in the host validator's order, with its details) in a
small page-locked host buffer that the GPU writes directly: the host reads it without
synchronizing. check_pending(fn) raises it as the host validator's ValueError at the next
m-grouped contiguous call (the message says so) and finegemm.check_errors() synchronizes and
raises it at once. The GEMM itself runs on the checked ids: with a broken rule other than an id
out of range the rows' values are unspecified (never an out-of-bounds access).

CTAs of 1024 threads, 4 consecutive rows per thread (one 16-byte load of the plain ids where
aligned); a run starts where a row's id differs from the row above (one extra 4-byte load, an L1
hit beside the neighbour's). The CTAs meet in a small per-stream scratch (the split-K counters'
pattern: zero between launches, the last CTA zeroes it again), the psum ends sit in each CTA's
shared memory (G <= MAX_GROUPS with use_psum_layout). Rendered here, not under include/finegemm
(the GEMM kernels' cache keys hash those headers); launched through the driver (ctypes),
capturable in a CUDA graph (a capture gets scratch of its own).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Optional

import torch

from finegemm import jit, quant, runtime
from finegemm.api import _validate as _v
from finegemm.ops._runtime import SplitKWorkspace, is_capturing, launch_driver, libcuda, loaded_function, raw_stream

__all__ = ["render_contiguous_layout", "checked_group_ids", "check_pending", "check_errors", "MAX_GROUPS",
           "MAX_ROWS", "PreparedContiguous", "run_prepared", "can_prepare", "check_cuda_limits", "in_kernel_check",
           "IN_KERNEL_CAPABILITIES", "IN_KERNEL_PSUM_CAPABILITIES", "checks_in_kernel", "api_in_kernel_check"]

THREADS = 1024
ROWS_PER_CTA = 4 * THREADS  # rows per CTA and step (4 per thread: one 16-byte load)
MAX_GROUPS = 49152  # psum: the ends in shared memory (192 KB)
MAX_ROWS = 2**31 - 1 - ROWS_PER_CTA  # rows are int32 in the kernel
_SCRATCH_HEAD = 4  # the scratch words before the runs per group (see the kernel; mirrored by
# scheduler::kLayoutScratchHead, include/finegemm/scheduler/contiguous_layout_check.cuh)
# The GEMMs checking a plain layout themselves (one launch per call, that header): a kernel
# capability per family (validated on the H200; listing one in api/_validate.UNVALIDATED_ON_GPU, or
# naming it in FINEGEMM_DISABLE_PATHS, sends its calls back to the check kernel and the GEMM on its ids).
IN_KERNEL_CAPABILITIES = {"fp8": "fp8_contiguous_layout_in_gemm", "bf16": "bf16_contiguous_layout_in_gemm"}
# The GEMMs reading a psum layout's ends themselves (the kernels' kPsumLayout: the tile walkers
# search the ends, CTA 0's spare warp checks their rules; validated on an H100, 2026-12-05).
IN_KERNEL_PSUM_CAPABILITIES = {"fp8": "fp8_contiguous_psum_in_gemm", "bf16": "bf16_contiguous_psum_in_gemm"}
_RECORD_INTS = 8  # [code, function, a, b, c, G, alignment, M]

_SOURCE = """\
// grouped_layout (plain: int32 [m] ids; psum: int32 [g] ends) -> ids int32 [m] for the GEMM (every id
// in [-1, g)), and the first broken rule into `record` (page-locked host memory; codes as in
// finegemm/api/_validate.py: {range} range, {misaligned} misaligned, {split} split, {neg} psum < 0,
// {dec} psum decreasing, {past} psum past M, {gap} psum in the gap).
//
// Each CTA takes {rows} rows per step (4 per thread). The CTAs combine through `scratch` (int32
// [{head} + g], this stream's: ops/_runtime.SplitKWorkspace), whose every word is 0 between launches:
// maxima of order-preserving keys (so that 0 is the identity), runs per group, a ticket. The CTA
// that takes the last ticket reads them, records the broken rule and zeroes them again.
#include <climits>

__device__ __forceinline__ unsigned key_of(int x) {{ return static_cast<unsigned>(x) ^ 0x80000000u; }}  // order kept
__device__ __forceinline__ int int_of(unsigned k) {{ return static_cast<int>(k ^ 0x80000000u); }}

__device__ __forceinline__ unsigned block_max(unsigned v, unsigned* red) {{
  v = __reduce_max_sync(0xffffffffu, v);
  __syncthreads();  // red may still be read by the previous reduction
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  return __reduce_max_sync(0xffffffffu, red[threadIdx.x % 32]);  // {threads} / 32 == 32 warps
}}

extern "C" __global__ void __launch_bounds__({threads}) finegemm_entry(
    const int* __restrict__ layout, int* __restrict__ ids, int m, int g, int align_log2, int psum, int fn_id,
    unsigned* scratch, int* record) {{
  extern __shared__ int sh[];  // psum: the ends
  __shared__ unsigned red[32];
  __shared__ bool last;
  const int tid = threadIdx.x, alignment = 1 << align_log2;
  // scratch: [0] max key(x), [1] max ~key(x) (the minimum), [2] max ~row of a misaligned run start,
  // [3] ticket, [{head} ..) runs per group.
  unsigned* runs = scratch + {head};
  if (psum) {{
    for (int i = tid; i < g; i += {threads}) sh[i] = layout[i];
    __syncthreads();
  }}
  unsigned hi = 0, lo = 0, mis = 0;  // keys: 0 is "none"
  int grp = 0, start_grp = -1;       // psum: this thread's group (its rows only increase)
  long long start = 0;               // psum: the first row of group start_grp
  const bool vec_in = !psum && (reinterpret_cast<unsigned long long>(layout) % 16) == 0;
  const bool vec_out = (reinterpret_cast<unsigned long long>(ids) % 16) == 0;
  for (long long r0 = (static_cast<long long>(blockIdx.x) * {threads} + tid) * 4; r0 < m;
       r0 += static_cast<long long>(gridDim.x) * {rows}) {{
    int v[4], out[4];
    if (!psum) {{
      if (vec_in && r0 + 3 < m) {{
        const int4 q = __ldg(reinterpret_cast<const int4*>(layout + r0));
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
      }} else {{
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = r0 + e < m ? __ldg(layout + r0 + e) : -1;
      }}
    }}
    const int above = !psum && r0 > 0 ? __ldg(layout + r0 - 1) : INT_MIN;
#pragma unroll
    for (int e = 0; e < 4; ++e) {{
      const int r = static_cast<int>(r0) + e;
      if (psum) {{
        while (grp < g && sh[grp] <= r) ++grp;  // the first group ending past r (ends non-decreasing)
        if (grp != start_grp) {{
          start = grp == 0 ? 0LL : ((static_cast<long long>(sh[grp - 1]) + alignment - 1) >> align_log2) << align_log2;
          start_grp = grp;
        }}
        out[e] = grp < g && r >= start ? grp : -1;
        continue;
      }}
      const int x = v[e];
      const int up = e == 0 ? above : v[e - 1];
      if (r < m) {{
        hi = max(hi, key_of(x));
        lo = max(lo, ~key_of(x));
        if (x >= 0 && x < g && (r == 0 || up != x)) {{  // a run of group x starts at row r
          if ((r & (alignment - 1)) != 0) mis = max(mis, ~static_cast<unsigned>(r));
          atomicAdd(runs + x, 1u);
        }}
      }}
      out[e] = x >= -1 && x < g ? x : -1;
    }}
    if (vec_out && r0 + 3 < m) {{
      *reinterpret_cast<int4*>(ids + r0) = make_int4(out[0], out[1], out[2], out[3]);
    }} else {{
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (r0 + e < m) ids[r0 + e] = out[e];
    }}
  }}
  if (!psum) {{
    hi = block_max(hi, red);
    lo = block_max(lo, red);
    mis = block_max(mis, red);
    if (tid == 0) {{
      if (hi) atomicMax(scratch + 0, hi);
      if (lo) atomicMax(scratch + 1, lo);
      if (mis) atomicMax(scratch + 2, mis);
    }}
  }}
  __syncthreads();
  if (tid == 0) {{
    __threadfence();  // this CTA's atomics before its ticket
    last = atomicAdd(scratch + 3, 1u) == gridDim.x - 1;
  }}
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last CTA: the first broken rule, in the host validator's order; then scratch back to 0.
  unsigned first = 0, second = 0;  // keys ~index: plain split group / psum decreasing, psum gap
  if (psum) {{
    for (int i = tid; i < g; i += {threads}) {{
      const int end = sh[i];
      lo = max(lo, ~key_of(end));
      if (i > 0) {{
        const int prev = sh[i - 1];
        if (end < prev) first = max(first, ~static_cast<unsigned>(i));
        const long long gap_start = ((static_cast<long long>(prev) + alignment - 1) >> align_log2) << align_log2;
        if (end != prev && end < gap_start) second = max(second, ~static_cast<unsigned>(i));
      }}
    }}
    lo = block_max(lo, red);
    first = block_max(first, red);
    second = block_max(second, red);
  }} else {{
    for (int i = tid; i < g; i += {threads}) {{
      if (atomicAdd(runs + i, 0u) > 1u) second = max(second, ~static_cast<unsigned>(i));
    }}
    second = block_max(second, red);
  }}
  if (tid == 0) {{
    int code = 0, a = 0, b = 0, c = 0;
    if (!psum) {{
      const int vlo = int_of(~atomicAdd(scratch + 1, 0u)), vhi = int_of(atomicAdd(scratch + 0, 0u));
      const unsigned k_mis = atomicAdd(scratch + 2, 0u);
      if (vlo < -1 || vhi >= g) {{ code = {range}; a = vlo; b = vhi; }}
      else if (k_mis) {{ code = {misaligned}; a = static_cast<int>(~k_mis); b = layout[a]; }}
      else if (second) {{
        code = {split};
        a = static_cast<int>(~second);
        b = static_cast<int>(atomicAdd(runs + a, 0u));
      }}
    }} else if (g > 0) {{
      if (int_of(~lo) < 0) {{ code = {neg}; a = int_of(~lo); }}
      else if (first) {{ const int i = static_cast<int>(~first); code = {dec}; a = i; b = sh[i - 1]; c = sh[i]; }}
      else if (sh[g - 1] > m) {{ code = {past}; a = sh[g - 1]; }}
      else if (second) {{ const int i = static_cast<int>(~second); code = {gap}; a = i; b = sh[i - 1]; c = sh[i]; }}
    }}
    volatile int* rec = record;
    if (code != 0 && rec[0] == 0) {{  // the first broken rule since the host last read the record
      rec[1] = fn_id; rec[2] = a; rec[3] = b; rec[4] = c; rec[5] = g; rec[6] = alignment; rec[7] = m;
      __threadfence_system();
      rec[0] = code;
      __threadfence_system();
    }}
    scratch[0] = 0u; scratch[1] = 0u; scratch[2] = 0u; scratch[3] = 0u;
  }}
  if (!psum) {{
    __syncthreads();  // thread 0 has read runs[a]
    for (int i = tid; i < g; i += {threads}) runs[i] = 0u;
  }}
}}
"""


def render_contiguous_layout() -> str:
    return _SOURCE.format(threads=THREADS, rows=ROWS_PER_CTA, head=_SCRATCH_HEAD, range=_v.LAYOUT_RANGE,
                          misaligned=_v.LAYOUT_MISALIGNED,
                          split=_v.LAYOUT_SPLIT, neg=_v.LAYOUT_PSUM_NEGATIVE, dec=_v.LAYOUT_PSUM_DECREASING,
                          past=_v.LAYOUT_PSUM_PAST_M, gap=_v.LAYOUT_PSUM_GAP)


_lock = threading.Lock()
_record: Optional[ctypes.Array] = None  # page-locked, device-mapped int32 [_RECORD_INTS]
_record_dev = 0  # its device address
_functions: list[str] = []  # record's function index -> name


def _record_buffer() -> tuple[ctypes.Array, int]:
    """The error record: page-locked host memory every device writes through its mapping
    (allocated once per process, portable across contexts; never freed)."""
    global _record, _record_dev
    if _record is None:
        with _lock:
            if _record is None:
                cuda = libcuda()
                host, dev = ctypes.c_void_p(), ctypes.c_uint64()
                flags = 0x01 | 0x02  # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
                rc = cuda.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(4 * _RECORD_INTS), ctypes.c_uint(flags))
                if rc == 0:
                    rc = cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(dev), host, ctypes.c_uint(0))
                if rc != 0:
                    raise RuntimeError(f"finegemm: could not allocate the layout error record: {jit.error_string(rc)}")
                rec = (ctypes.c_int32 * _RECORD_INTS).from_address(host.value)
                ctypes.memset(host.value, 0, 4 * _RECORD_INTS)
                _record_dev = dev.value
                _record = rec
    return _record, _record_dev


_function_ids: dict[str, int] = {}


def _function_id(fn: str) -> int:
    fid = _function_ids.get(fn)
    if fid is None:
        with _lock:
            if fn not in _functions:
                _functions.append(fn)
            fid = _function_ids[fn] = _functions.index(fn)
    return fid


def _take_pending() -> Optional[str]:
    """The recorded broken rule as its ValueError message (and the record cleared), or None."""
    rec = _record
    if rec is None or rec[0] == 0:
        return None
    code, fn_id, a, b, c, g, alignment, m = (int(x) for x in rec)
    with _lock:
        fn = _functions[fn_id] if 0 <= fn_id < len(_functions) else "m-grouped contiguous GEMM"
    rec[0] = 0
    return _v.grouped_layout_message(fn, (code, a, b, c), m, g, alignment)


def check_pending(fn: str) -> None:
    """Raise the broken layout rule an earlier call's GPU check recorded (no synchronization:
    whatever has landed in the record so far)."""
    msg = _take_pending()
    if msg is not None:
        raise ValueError(f"{fn}: an earlier m-grouped contiguous call was given an invalid grouped_layout (found "
                         f"on the GPU, reported at this call): {msg}")


def check_errors() -> None:
    """Synchronize every device of this process, then raise the broken grouped_layout rule a
    GPU check recorded since the last report (ValueError with the host validator's message)."""
    if _record is None:
        return
    for dev in range(torch.cuda.device_count()):
        torch.cuda.synchronize(dev)
    msg = _take_pending()
    if msg is not None:
        raise ValueError(msg)


def _set_max_smem(fn: int) -> None:
    cuda = libcuda()
    max_dynamic_smem = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (the psum ends)
    rc = cuda.cuFuncSetAttribute(ctypes.c_void_p(fn), ctypes.c_int(max_dynamic_smem), ctypes.c_int(4 * MAX_GROUPS))
    if rc != 0:
        raise RuntimeError(f"finegemm: contiguous layout kernel: cuFuncSetAttribute failed: {jit.error_string(rc)}")


class _Params(ctypes.Structure):
    """The kernel's arguments, in its order (cuLaunchKernel reads each through params[i])."""
    _fields_ = [("layout", ctypes.c_void_p), ("ids", ctypes.c_void_p), ("m", ctypes.c_int), ("g", ctypes.c_int),
                ("align_log2", ctypes.c_int), ("psum", ctypes.c_int), ("fn_id", ctypes.c_int),
                ("scratch", ctypes.c_void_p), ("record", ctypes.c_void_p)]


def _argument_block() -> tuple[_Params, ctypes.Array]:
    """An argument block and the pointer array into it (what cuLaunchKernel takes)."""
    p = _Params()
    base = ctypes.addressof(p)
    fields = _Params._fields_
    return p, (ctypes.c_void_p * len(fields))(*[base + getattr(_Params, f).offset for f, _ in fields])


_tls = threading.local()


def _launch_params() -> tuple[_Params, ctypes.Array]:
    """This thread's argument block for one-shot launches, built once: per call only the fields are
    set (building ctypes objects per argument cost ~20 us of host time per call)."""
    block = getattr(_tls, "block", None)
    if block is None:
        block = _tls.block = _argument_block()
    return block


_scratch = SplitKWorkspace()  # the CTAs' meeting point, per (device, stream); every word 0 between launches
_ids = SplitKWorkspace()  # the prepared calls' ids buffers (its int32 "counters"), per (device, stream)
_driver_launch_address = 0  # cuLaunchKernel's address, for the launch shim


class _Plan:
    """What a launch of the check kernel needs besides the stream's scratch: the function, the grid,
    the shared memory and the argument values (the ids buffer's address excepted)."""

    __slots__ = ("func", "grid", "smem", "layout", "m", "g", "align_log2", "psum", "fn_id", "record")

    def __init__(self, fn: str, grouped_layout: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool,
                 alignment: int) -> None:
        global _driver_launch_address
        device = grouped_layout.device.index
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"{fn}: the mk alignment must be a power of two, got {alignment}")
        _, self.record = _record_buffer()
        self.func = loaded_function("contiguous_layout", render_contiguous_layout, device, _set_max_smem)
        sms = runtime.device_sm_count(device)
        if not _driver_launch_address:
            _driver_launch_address = ctypes.cast(launch_driver(), ctypes.c_void_p).value
        self.grid = min(-(-m // ROWS_PER_CTA), sms)
        self.smem = 4 * num_groups if use_psum_layout else 0
        self.layout, self.m, self.g = grouped_layout.data_ptr(), m, num_groups
        self.align_log2, self.psum, self.fn_id = alignment.bit_length() - 1, int(use_psum_layout), _function_id(fn)

    def fill(self, p: _Params, ids: int, scratch: int) -> None:
        p.layout, p.ids, p.m, p.g = self.layout, ids, self.m, self.g
        p.align_log2, p.psum, p.fn_id = self.align_log2, self.psum, self.fn_id
        p.scratch, p.record = scratch, self.record

    def launch(self, stream: int, params: ctypes.Array) -> None:
        fast = jit.fast_kernel_launch()
        if fast is not None:
            rc = fast(_driver_launch_address, self.func, self.grid, THREADS, self.smem, stream,
                      ctypes.addressof(params))
        else:
            rc = launch_driver()(self.func, self.grid, 1, 1, THREADS, 1, 1, self.smem, stream, params, None)
        if rc != 0:
            raise RuntimeError(f"finegemm: the contiguous layout kernel failed to launch: {jit.error_string(rc)}")


def checked_group_ids(fn: str, grouped_layout: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool,
                      alignment: int) -> torch.Tensor:
    """int32 [m] group id per row (every id in [-1, num_groups)) for the GEMM, from either layout
    encoding, with the layout's rules checked on the GPU (broken ones: check_pending /
    check_errors). grouped_layout: int32, contiguous, on the GPU; 0 < m <= MAX_ROWS, with a psum
    layout num_groups <= MAX_GROUPS; alignment a power of two (the callers' rules)."""
    device = grouped_layout.device.index
    if torch.cuda.current_device() != device:
        with torch.cuda.device(device):
            return checked_group_ids(fn, grouped_layout, m, num_groups, use_psum_layout, alignment)
    plan = _Plan(fn, grouped_layout, m, num_groups, use_psum_layout, alignment)
    ids = torch.empty(m, dtype=torch.int32, device=grouped_layout.device)
    stream = raw_stream(device)
    _, scratch = _scratch.pointers(0, _SCRATCH_HEAD + num_groups, grouped_layout.device, stream)
    p, params = _launch_params()
    plan.fill(p, ids.data_ptr(), scratch)
    plan.launch(stream, params)
    return ids


def checks_in_kernel(family: str, use_psum_layout: bool) -> bool:
    """Whether a call of the family ("fp8", "bf16") runs the GEMM that checks its layout itself:
    the family has such a GEMM for the layout's form (plain, psum), and the capability is not gated
    (api/_validate.gpu_validated)."""
    caps = IN_KERNEL_PSUM_CAPABILITIES if use_psum_layout else IN_KERNEL_CAPABILITIES
    cap = caps.get(family)
    return cap is not None and _v.gpu_validated(cap)


def api_in_kernel_check(fn: str, m: int, num_groups: int, alignment: int,
                        use_psum_layout: bool = False) -> tuple[int, int, int]:
    """The contiguous API's one-shot step for a GEMM that checks the layout itself (M > 0): raise
    what an earlier call's check recorded, the CUDA limits, then in_kernel_check's tuple."""
    check_pending(fn)
    check_cuda_limits(fn, m, num_groups, use_psum_layout)
    return in_kernel_check(fn, m, num_groups, alignment)


def in_kernel_check(fn: str, m: int, num_groups: int, alignment: int,
                    capturing: Optional[bool] = None) -> tuple[int, int, int]:
    """(scratch, record, layout_info) of a GEMM that checks a layout of m rows and num_groups groups
    itself, on the current stream (a graph capture gets scratch of its own): the launcher's last
    three arguments (scheduler/contiguous_layout_check.cuh; a psum check uses only the record and
    layout_info). alignment: a power of two."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"{fn}: the mk alignment must be a power of two, got {alignment}")
    _, record = _record_buffer()
    device = torch.cuda.current_device()
    stream = raw_stream(device)
    _, scratch = _scratch.pointers(0, _SCRATCH_HEAD + num_groups, torch.device("cuda", device), stream,
                                   capturing=capturing)
    return scratch, record, (_function_id(fn) << 8) | (alignment.bit_length() - 1)


def run_prepared(fn: str, prepared: Optional["PreparedContiguous"], grouped_layout: torch.Tensor, m: int,
                 num_groups: int, use_psum_layout: bool, prepare_gemm, prepare_checked=None) -> object:
    """A validated call (M, N, K, G > 0) run through `prepared` (or a new PreparedContiguous) given an
    entry for the current stream here, the GEMM's launch made by prepare_gemm(ids) (None where it
    cannot be prepared). prepare_checked(check): the launch of a GEMM that checks the layout itself
    (in_kernel_check's tuple; the caller passes one where checks_in_kernel holds), or None; a new
    PreparedContiguous takes it, and a kept one keeps the kind it was made with. Returns the PreparedContiguous that ran it;
    _v.ONE_SHOT (nothing launched) where the GEMM cannot be prepared; None (nothing launched) where
    no entry can be added now (graph capture, another current device). ValidatedCalls.run_kept's
    `prepare`."""
    device = grouped_layout.device.index
    if not can_prepare(device):
        return None
    check_pending(fn)
    check_cuda_limits(fn, m, num_groups, use_psum_layout)
    if prepared is None:
        prepared = PreparedContiguous(fn, grouped_layout, m, num_groups, use_psum_layout,
                                      quant.get_mk_alignment_for_contiguous_layout(),
                                      in_kernel=prepare_checked is not None)
    if not prepared.add_stream(prepare_gemm, prepare_checked):
        return _v.ONE_SHOT
    if not prepared():
        raise RuntimeError(f"{fn}: the prepared launch refused a stream it was prepared for")  # a bug, never silent
    return prepared


def can_prepare(device_index: int) -> bool:
    """Whether a call may take or add a PreparedContiguous entry now: not under graph capture, and
    the current device is the tensors' (the entries' launches run in the current context)."""
    return not is_capturing() and torch.cuda.current_device() == device_index


class PreparedContiguous:
    """A validated m-grouped contiguous call on CUDA, prepared per stream (the API's host fast
    path): the layout check into the stream's ids buffer, then the GEMM's prepared launch reading
    those ids; or (in_kernel: a GEMM that checks the layout itself) the GEMM's launch alone,
    with the stream's check scratch. Holds addresses, not the caller's tensors (the fast-path key
    pins every address, shape and stride).

    The ids buffer is one per (device, stream), shared by every prepared call on that stream and
    grown on demand (replaced buffers are kept alive: entries hold their addresses). Sharing is
    stream-ordered: a call's check writes the buffer after the previous call's GEMM has read it
    (the check is launched without programmatic dependent launch: it waits for that GEMM to end).
    So the memory held is the largest M per stream, not one buffer per kept call.

    A call on a stream without an entry, on another current device, or under graph capture (a
    graph needs buffers of its own) answers False: the caller takes the one-shot path, which may
    add_stream() for the stream."""

    __slots__ = ("fn", "in_kernel", "_plan", "_m", "_groups", "_alignment", "_device", "_streams")
    MAX_STREAMS = 8  # entries kept per call; more streams: the entries are cleared

    def __init__(self, fn: str, grouped_layout: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool,
                 alignment: int, in_kernel: bool = False) -> None:
        self.fn = fn
        self.in_kernel = in_kernel
        # The standalone check's plan (its kernel is not even loaded for a GEMM that checks itself).
        self._plan = None if in_kernel else _Plan(fn, grouped_layout, m, num_groups, use_psum_layout, alignment)
        self._m, self._groups, self._alignment = m, num_groups, alignment
        self._device = grouped_layout.device
        self._streams: dict[int, tuple] = {}

    def add_stream(self, prepare_gemm, prepare_checked=None) -> bool:
        """An entry for the current stream: the check's argument block and prepare_gemm(ids) (a
        prepared launch reading ids, the stream's buffer of at least M int32; or None where the
        GEMM cannot be prepared: then this call keeps the one-shot path); in_kernel, only
        prepare_checked(check) (the GEMM checking the layout itself on the stream's check scratch,
        in_kernel_check's tuple; None as before). Whether the entry was
        added; the caller's current device must be this call's, outside graph capture
        (can_prepare)."""
        index = self._device.index
        stream = raw_stream(index)
        if self.in_kernel:
            check = in_kernel_check(self.fn, self._m, self._groups, self._alignment, capturing=False)
            gemm = prepare_checked(check) if prepare_checked is not None else None
            if gemm is None:
                return False
            if len(self._streams) >= self.MAX_STREAMS:
                self._streams.clear()
            self._streams[stream] = (None, None, gemm)
            return True
        m = self._plan.m
        held = _ids.buffers.get((index, stream))
        if held is not None and held[1].numel() < m:
            m = max(m, 2 * held[1].numel())  # grown geometrically: the kept old buffers sum to less than the new
        _, ids_ptr = _ids.pointers(0, m, self._device, stream, capturing=False)
        ids = _ids.buffers[(index, stream)][1]
        gemm = prepare_gemm(ids)
        if gemm is None:
            return False
        _, scratch = _scratch.pointers(0, _SCRATCH_HEAD + self._plan.g, self._device, stream, capturing=False)
        p, params = _argument_block()
        self._plan.fill(p, ids_ptr, scratch)
        if len(self._streams) >= self.MAX_STREAMS:
            self._streams.clear()
        self._streams[stream] = (p, params, gemm)
        return True

    # The second level (api/_validate.MovedCalls) re-points a call whose GEMM checks the layout
    # itself: its entries' launches hold only the caller's tensors and the streams' check buffers.
    # A standalone check's plan holds grouped_layout's address in its argument block: not re-pointed.
    @property
    def cacheable(self) -> bool:
        return self.in_kernel and bool(self._streams) and all(e[2].cacheable for e in self._streams.values())

    def head_pointers(self) -> tuple:
        """The caller's tensor addresses the entries' GEMM launches hold (the same in every entry)."""
        return next(iter(self._streams.values()))[2].head_pointers()

    def rebound(self, pointers: tuple, copy: bool = True) -> "PreparedContiguous":
        """This call at other tensors of the same layout (MovedCalls): each stream's GEMM launch
        re-pointed (PreparedLaunch.rebound; with `copy`, the host library's copy of it,
        fg_rebind_prepared_<family>_contiguous), the streams' check buffers kept. Only for a
        cacheable one (a GEMM checking the layout itself)."""
        if not self.cacheable:
            raise ValueError("rebound: only a contiguous call whose GEMM checks the layout itself")
        new = object.__new__(PreparedContiguous)
        new.fn, new.in_kernel, new._plan = self.fn, True, None
        new._m, new._groups, new._alignment, new._device = self._m, self._groups, self._alignment, self._device
        new._streams = {stream: (None, None, entry[2].rebound(pointers, copy))
                        for stream, entry in self._streams.items()}
        return new

    def __call__(self) -> bool:
        """Check the layout and run the GEMM on the current stream: True, or False (nothing launched)
        where the caller must take the one-shot path."""
        check_pending(self.fn)
        index = self._device.index
        stream = raw_stream(index)
        entry = self._streams.get(stream)
        if entry is None or not can_prepare(index):
            return False
        if entry[1] is not None:  # the standalone check (a GEMM checking the layout itself has none)
            self._plan.launch(stream, entry[1])
        entry[2]()
        return True


jit.register_compile_check("contiguous_layout", lambda: [("t1024", render_contiguous_layout())])


def check_cuda_limits(fn: str, m: int, num_groups: int, use_psum_layout: bool) -> None:
    """The limits of the GPU layout check (ValueError naming the rule)."""
    if use_psum_layout and num_groups > MAX_GROUPS:
        raise ValueError(f"{fn}: on CUDA, with use_psum_layout, G must be <= {MAX_GROUPS} (the GPU layout check keeps "
                         f"the ends in shared memory), got G = {num_groups}")
    if m > MAX_ROWS:
        raise ValueError(f"{fn}: on CUDA M must be <= {MAX_ROWS} (int32 row indices), got M = {m}")


def api_group_ids(fn: str, grouped_layout: torch.Tensor, m: int, num_groups: int, use_psum_layout: bool,
                  alignment: int) -> Optional[torch.Tensor]:
    """The m-grouped contiguous API's layout step on CUDA (after the form checks): raise what an
    earlier call's GPU check recorded, then the checked per-row ids (None when m == 0)."""
    check_pending(fn)
    check_cuda_limits(fn, m, num_groups, use_psum_layout)
    if m == 0:
        return None
    return checked_group_ids(fn, grouped_layout, m, num_groups, use_psum_layout, alignment)
