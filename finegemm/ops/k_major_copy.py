"""K-major copies of one-byte (FP8) operands for the k-grouped tn GEMM.

k_grouped_fp8_gemm_tn_contiguous receives A [sum(ks), M] / B [sum(ks), N] (each group's k_g rows),
but FP8 wgmma reads K-major operands only, so each group's rows are copied transposed into the nt
kernel's layout (X_g [cols, k_g], one group after another). PyTorch's generic copy of a transposed
one-byte view measured ~2.5 ms for the 386 MB of the first k-grouped bench shape (NOTES v0.84):
longer than the GEMM. This kernel moves 64 x 64 byte tiles, transposing 4 x 4 byte blocks in
registers and passing 4-byte words through shared memory, so that both the reads (rows of X) and
the writes (rows of X_g^T) are coalesced words.

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

TILE = 64  # bytes per side of a tile
THREADS = (16, 16)  # blockDim: each thread moves a 4 x 4 byte block per tile
TILES_PER_BLOCK = 4  # tiles along the rows per block: fewer, longer blocks (block launches set the
                     # speed of small tiles: 32 x 32 byte tiles ran at ~0.4 TB/s, NOTES v0.84)

_SOURCE = """\
// dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols (one-byte elements).
// Block (bx, by): tiles of {tile} x {tile} bytes at rows {tiles} * bx + t (t < {tiles}), columns by.
// Thread (tx, ty) loads the 4 x 4 bytes at rows 4 ty.., columns 4 tx.. (one 4-byte word per row),
// transposes them in registers (__byte_perm) and parks the 4 column words in shared memory; then
// each thread stores words along dst rows (16 threads: 64 contiguous bytes). Words where aligned
// (`vec`: src_ld, cols, rows and both bases multiples of 4), bytes with bounds checks elsewhere.
extern "C" __global__ void __launch_bounds__(256) finegemm_entry(
    const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, long long rows, long long cols,
    long long src_ld, long long dst_ld, int vec) {{
  __shared__ unsigned int words[{tile}][{tile} / 4 + 1];  // [tile column][word of 4 rows]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long c0 = static_cast<long long>(blockIdx.y) * {tile};
  for (int t = 0; t < {tiles}; ++t) {{
    const long long r0 = (static_cast<long long>(blockIdx.x) * {tiles} + t) * {tile};
    if (r0 >= rows) break;
    unsigned int w[4];
    const long long c = c0 + 4 * tx;
    for (int e = 0; e < 4; ++e) {{
      const long long r = r0 + 4 * ty + e;
      if (vec) {{
        w[e] = (r < rows && c < cols) ? *reinterpret_cast<const unsigned int*>(src + r * src_ld + c) : 0u;
      }} else {{
        w[e] = 0u;
        for (int b = 0; b < 4; ++b)
          if (r < rows && c + b < cols) w[e] |= static_cast<unsigned int>(src[r * src_ld + c + b]) << (8 * b);
      }}
    }}
    const unsigned int t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[2], w[3], 0x5140);
    const unsigned int t2 = __byte_perm(w[0], w[1], 0x7362), t3 = __byte_perm(w[2], w[3], 0x7362);
    words[4 * tx + 0][ty] = __byte_perm(t0, t1, 0x5410);  // column 4 tx + j: rows 4 ty .. 4 ty + 3
    words[4 * tx + 1][ty] = __byte_perm(t0, t1, 0x7632);
    words[4 * tx + 2][ty] = __byte_perm(t2, t3, 0x5410);
    words[4 * tx + 3][ty] = __byte_perm(t2, t3, 0x7632);
    __syncthreads();
    for (int j = 0; j < 4; ++j) {{
      const int i = ty + 16 * j;  // the tile's column: dst's row c0 + i
      const long long cc = c0 + i, r = r0 + 4 * tx;
      if (cc >= cols) continue;
      const unsigned int v = words[i][tx];
      if (vec) {{
        if (r < rows) *reinterpret_cast<unsigned int*>(dst + cc * dst_ld + r) = v;
      }} else {{
        for (int b = 0; b < 4; ++b)
          if (r + b < rows) dst[cc * dst_ld + r + b] = static_cast<unsigned char>(v >> (8 * b));
      }}
    }}
    __syncthreads();
  }}
}}
"""


def render_transpose_u8() -> str:
    return _SOURCE.format(tile=TILE, tiles=TILES_PER_BLOCK)


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
    vec = int(src.stride(0) % 4 == 0 and cols % 4 == 0 and rows % 4 == 0 and src.data_ptr() % 4 == 0
              and dst.data_ptr() % 4 == 0)
    args = [ctypes.c_void_p(src.data_ptr()), ctypes.c_void_p(dst.data_ptr()), ctypes.c_longlong(rows),
            ctypes.c_longlong(cols), ctypes.c_longlong(src.stride(0)), ctypes.c_longlong(rows), ctypes.c_int(vec)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    rc = _launcher()(ctypes.c_void_p(fn), -(-rows // (TILE * TILES_PER_BLOCK)), grid_y, 1, THREADS[0], THREADS[1], 1,
                     0, ctypes.c_void_p(stream), params, None)
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


jit.register_compile_check("k_major_copy_u8", lambda: [(f"tile{TILE}", render_transpose_u8())])
