"""K-major copies of one-byte (FP8) operands for the k-grouped tn GEMM.

k_grouped_fp8_gemm_tn_contiguous receives A [sum(ks), M] / B [sum(ks), N] (each group's k_g rows),
but FP8 wgmma reads K-major operands only, so each group's rows are copied transposed into the nt
kernel's layout (X_g [cols, k_g], one group after another). PyTorch's generic copy of a transposed
one-byte view measured ~2.4 ms for the 386 MB of the first k-grouped bench shape (NOTES v0.83):
longer than the GEMM. This kernel moves 32 x 32 byte tiles through shared memory, so that both the
reads (rows of X) and the writes (rows of X_g^T) are coalesced.

The kernel is rendered here (not under include/finegemm: the GEMM kernels' cache keys hash those
headers) and launched through the driver's cuLaunchKernel (ctypes): one launch per non-empty group,
on the current stream (capturable in a CUDA graph).
"""
from __future__ import annotations

import ctypes
import threading

import torch

from finegemm import jit
from finegemm.ops._runtime import raw_stream

__all__ = ["render_transpose_u8", "k_major_groups"]

TILE = 32
ROWS_PER_PASS = 8  # blockDim = (TILE, ROWS_PER_PASS): each thread moves TILE / ROWS_PER_PASS bytes each way

_SOURCE = """\
// dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols (one-byte elements).
// Tile rows in grid.x (up to 2^31 - 1 tiles), tile columns in grid.y.
extern "C" __global__ void __launch_bounds__({threads}) finegemm_entry(
    const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, long long rows, long long cols,
    long long src_ld, long long dst_ld) {{
  __shared__ unsigned char tile[{tile}][{tile} + 1];
  const long long r0 = static_cast<long long>(blockIdx.x) * {tile};
  const long long c0 = static_cast<long long>(blockIdx.y) * {tile};
  for (int i = threadIdx.y; i < {tile}; i += {rows_per_pass}) {{
    const long long r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * src_ld + c];
  }}
  __syncthreads();
  for (int i = threadIdx.y; i < {tile}; i += {rows_per_pass}) {{
    const long long c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows) dst[c * dst_ld + r] = tile[threadIdx.x][i];
  }}
}}
"""


def render_transpose_u8() -> str:
    return _SOURCE.format(threads=TILE * ROWS_PER_PASS, tile=TILE, rows_per_pass=ROWS_PER_PASS)


_lock = threading.Lock()
_functions: dict[int, int] = {}  # device -> CUfunction
_driver = None


def _launcher():
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        f = lib.cuLaunchKernel
        u = ctypes.c_uint
        f.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                      ctypes.c_void_p]
        f.restype = ctypes.c_int
        _driver = f
    return _driver


def _function(device: int) -> int:
    fn = _functions.get(device)
    if fn is None:
        with _lock, torch.cuda.device(device):
            fn = jit.load_kernel("k_major_copy_u8", render_transpose_u8()).fn
            _functions[device] = fn
    return fn


def _transpose_into(src: torch.Tensor, dst: torch.Tensor, fn: int, stream: int) -> None:
    """dst [cols, rows] (row pitch rows) = src [rows, cols]^T, src with unit column stride."""
    rows, cols = src.shape
    grid_y = -(-cols // TILE)
    if grid_y > 65535:
        raise ValueError(f"k_major_copy: {cols} columns exceed the kernel's grid ({65535 * TILE})")
    args = [ctypes.c_void_p(src.data_ptr()), ctypes.c_void_p(dst.data_ptr()), ctypes.c_longlong(rows),
            ctypes.c_longlong(cols), ctypes.c_longlong(src.stride(0)), ctypes.c_longlong(rows)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    rc = _launcher()(ctypes.c_void_p(fn), -(-rows // TILE), grid_y, 1, TILE, ROWS_PER_PASS, 1, 0,
                     ctypes.c_void_p(stream), params, None)
    if rc != 0:
        raise RuntimeError(f"finegemm: the K-major copy kernel failed to launch: {jit.error_string(rc)}")


def k_major_groups(x: torch.Tensor, cols: int, ks: list[int]) -> torch.Tensor:
    """x [sum(ks), cols] (one-byte elements, any strides) -> 1-D [cols * sum(ks)]: group g's rows
    [start_g, start_g + k_g) stored transposed ([cols, k_g], row-major) at cols * start_g."""
    out = torch.empty(cols * sum(ks), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    if x.device.type != "cuda" or x.element_size() != 1:
        start = 0
        for k in ks:
            if k:
                out[cols * start:cols * (start + k)].view(cols, k).copy_(x[start:start + k].t())
            start += k
        return out
    if x.stride(1) != 1:
        x = x.contiguous()
    src_bytes, dst_bytes = x.view(torch.uint8), out.view(torch.uint8)
    fn = _function(x.device.index)
    stream = raw_stream(x.device.index)
    start = 0
    for k in ks:
        if k:
            _transpose_into(src_bytes[start:start + k], dst_bytes[cols * start:cols * (start + k)], fn, stream)
        start += k
    return out


jit.register_compile_check("k_major_copy_u8", lambda: [("tile32", render_transpose_u8())])
