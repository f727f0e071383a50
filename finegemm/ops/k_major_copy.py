"""K-major copies of one-byte (FP8) operands: SM90's FP8 wgmma reads K-major operands only.

Three callers copy MN-major operands transposed into the nt kernels' layout per call:
k_grouped_fp8_gemm_tn_contiguous (A [sum(ks), M] / B [sum(ks), N] -> X_g [cols, k_g], one group
after another: k_major_copies), m_grouped_fp8_gemm_nn_contiguous (B [G, K, N] -> [G, N, K]:
k_major_batched) and fp8_gemm_nn / tn / tt (A [K, M] / B [K, N] as G = 1, both in one launch:
k_major_transposes). PyTorch's generic copy of a transposed one-byte view ran at ~0.15-0.4 TB/s
(NOTES v0.84, v0.87): longer than the GEMMs.

Two kernels, rendered here (not under include/finegemm: the GEMM kernels' cache keys hash those
headers) and launched through the driver's cuLaunchKernel (ctypes) on the current stream
(capturable in a CUDA graph):
- the grouped kernel: every group of every operand in one launch (up to 64 per launch, described in
  the launch's parameters), 128 x 128 byte tiles moved as 16-byte pieces; for groups whose rows,
  columns, row pitch and addresses are multiples of 16 bytes (the k-grouped GEMM's ks are multiples
  of 128, so in practice every group whose M / N and pitch are multiples of 16). One launch instead
  of one per group and operand matters most for many small groups (G = 16 at 7168 x 2048: 32
  launches, each with its own ramp and tail, NOTES v0.87);
- the word kernel (any alignment), one launch per remaining group: 64 x 64 byte tiles, 4 x 4 byte
  blocks transposed in registers, 4-byte words through shared memory, so that both the reads (rows
  of X) and the writes (rows of X_g^T) are coalesced words.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch

from finegemm import jit
from finegemm.ops._runtime import launch_driver, loaded_function, raw_stream

__all__ = ["render_transpose_u8", "render_grouped_transpose_u8", "k_major_groups", "k_major_copies", "k_major_batched",
           "k_major_transposes", "GroupCopy", "plan_grouped_copies"]

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


GROUPED_TILE = 128  # bytes per side of the grouped kernel's tile (16 KB of shared memory per block)
GROUPED_THREADS = 256
GROUPED_ALIGN = 16  # bytes: rows, cols, row pitch and both addresses of a group on the grouped path
MAX_GROUPS_PER_LAUNCH = 64  # the launch's parameter block: 8 + 64 * 56 bytes, inside the 4 KB limit

_GROUPED_SOURCE = """\
// Many copies in one launch: for each group j, dst_j[c * rows_j + r] = src_j[r * src_ld_j + c]
// (r < rows_j, c < cols_j; one-byte elements). The host guarantees rows, cols, src_ld and both
// addresses are multiples of 16 bytes. Block b takes tile b - tile_start[j] of the group j whose
// tile range holds b: 128 x 128 bytes, row-major over (row tile, column tile).
// Read: 16-byte pieces, 8 threads per 128-byte row piece (a warp reads 4 whole lines), parked in
// shared memory with the piece index XOR-ed with the row's 16-row slab index, so that the column
// reads below spread over all 32 banks. Write: thread (slab q = lane / 4, column quad
// c4 = 4 warp + lane % 4) gathers the 16 x 4 bytes of rows 16 q.. and columns 4 c4.., transposes
// them as four 4 x 4 blocks in registers (__byte_perm) and writes 16 bytes to each of the 4
// destination rows (8 threads per 128 bytes of a destination row).
struct GroupCopy {
  const unsigned char* src;
  unsigned char* dst;
  long long rows, cols, src_ld, tile_start, tiles_c;
};
struct GroupCopies {
  int count, pad;
  GroupCopy group[MAX_GROUPS];
};

extern "C" __global__ void __launch_bounds__(256) finegemm_entry(const __grid_constant__ GroupCopies p) {
  __shared__ __align__(16) uint4 tile[128][8];  // [row][16-byte piece, swizzled]
  const long long b = blockIdx.x;
  int lo = 0, hi = p.count - 1;  // the last group whose first tile is <= b (every group has >= 1 tile)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.group[mid].tile_start <= b) lo = mid; else hi = mid - 1;
  }
  const GroupCopy& g = p.group[lo];
  const unsigned t = static_cast<unsigned>(b - g.tile_start), tiles_c = static_cast<unsigned>(g.tiles_c);
  const long long r0 = 128ll * (t / tiles_c), c0 = 128ll * (t % tiles_c);  // 32-bit division: grid < 2^31
  const int tid = threadIdx.x;

  const int piece = tid & 7, band_row = tid >> 3;
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long r = r0 + band_row + 32 * i, c = c0 + 16 * piece;
    v[i] = (r < g.rows && c < g.cols) ? __ldg(reinterpret_cast<const uint4*>(g.src + r * g.src_ld + c))
                                      : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = band_row + 32 * i;
    tile[row][piece ^ ((row >> 4) & 7)] = v[i];
  }
  __syncthreads();

  const int lane = tid & 31, warp = tid >> 5;
  const int q = lane >> 2, c4 = 4 * warp + (lane & 3);  // column quad c4 lies in piece `warp`
  const unsigned int* words = reinterpret_cast<const unsigned int*>(&tile[0][0]);
  unsigned int col[4][4];  // [column j of the quad][rows 16 q + 4 m .. + 3]
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    unsigned int w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = words[(16 * q + 4 * m + e) * 32 + 4 * (warp ^ q) + (lane & 3)];
    const unsigned int t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[2], w[3], 0x5140);
    const unsigned int t2 = __byte_perm(w[0], w[1], 0x7362), t3 = __byte_perm(w[2], w[3], 0x7362);
    col[0][m] = __byte_perm(t0, t1, 0x5410);
    col[1][m] = __byte_perm(t0, t1, 0x7632);
    col[2][m] = __byte_perm(t2, t3, 0x5410);
    col[3][m] = __byte_perm(t2, t3, 0x7632);
  }
  const long long r = r0 + 16 * q;
  if (r < g.rows) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long c = c0 + 4 * c4 + j;
      if (c < g.cols)
        *reinterpret_cast<uint4*>(g.dst + c * g.rows + r) = make_uint4(col[j][0], col[j][1], col[j][2], col[j][3]);
    }
  }
}
"""


def render_grouped_transpose_u8() -> str:
    return _GROUPED_SOURCE.replace("MAX_GROUPS", str(MAX_GROUPS_PER_LAUNCH))


class GroupCopy(NamedTuple):
    """One group's copy: `rows` x `cols` bytes at `src` (row pitch `src_ld`) -> [cols, rows] at `dst`."""
    src: int
    dst: int
    rows: int
    cols: int
    src_ld: int


def _fits_grouped_kernel(g: GroupCopy) -> bool:
    return all(v % GROUPED_ALIGN == 0 for v in (g.src, g.dst, g.rows, g.cols, g.src_ld))


def plan_grouped_copies(groups: list[GroupCopy]) -> tuple[list[list[tuple[GroupCopy, int, int]]], list[GroupCopy]]:
    """Split non-empty copies into launches of the grouped kernel and the rest (the word kernel).

    Returns (launches, rest): each launch a list of at most MAX_GROUPS_PER_LAUNCH
    (group, tile_start, tiles_c) with tile_start the launch-local index of the group's first tile
    (so a launch's grid is the last tile_start plus that group's tile count)."""
    launches: list[list[tuple[GroupCopy, int, int]]] = []
    rest: list[GroupCopy] = []
    current: list[tuple[GroupCopy, int, int]] = []
    tiles = 0
    for g in groups:
        if g.rows <= 0 or g.cols <= 0:
            continue
        if not _fits_grouped_kernel(g):
            rest.append(g)
            continue
        if len(current) == MAX_GROUPS_PER_LAUNCH:
            launches.append(current)
            current, tiles = [], 0
        tiles_c = -(-g.cols // GROUPED_TILE)
        current.append((g, tiles, tiles_c))
        tiles += tiles_c * -(-g.rows // GROUPED_TILE)
    if current:
        launches.append(current)
    return launches, rest


def launch_tiles(launch: list[tuple[GroupCopy, int, int]]) -> int:
    """The grid of one planned launch: one block per 128 x 128 byte tile of its groups."""
    g, start, tiles_c = launch[-1]
    return start + tiles_c * -(-g.rows // GROUPED_TILE)


class _GroupCopyParams(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p), ("rows", ctypes.c_longlong),
                ("cols", ctypes.c_longlong), ("src_ld", ctypes.c_longlong), ("tile_start", ctypes.c_longlong),
                ("tiles_c", ctypes.c_longlong)]


class _GroupCopiesParams(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int), ("pad", ctypes.c_int), ("group", _GroupCopyParams * MAX_GROUPS_PER_LAUNCH)]


def _launch_grouped(launch: list[tuple[GroupCopy, int, int]], fn: int, stream: int) -> None:
    p = _GroupCopiesParams()
    p.count = len(launch)
    for i, (g, start, tiles_c) in enumerate(launch):
        p.group[i] = _GroupCopyParams(g.src, g.dst, g.rows, g.cols, g.src_ld, start, tiles_c)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(p), ctypes.c_void_p))
    rc = launch_driver()(ctypes.c_void_p(fn), launch_tiles(launch), 1, 1, GROUPED_THREADS, 1, 1, 0,
                         ctypes.c_void_p(stream), params, None)
    if rc != 0:
        raise RuntimeError(f"finegemm: the grouped K-major copy kernel failed to launch: {jit.error_string(rc)}")


def _launch_word(g: GroupCopy, fn: int, stream: int) -> None:
    """dst [cols, rows] (row pitch rows) = src [rows, cols]^T through the word kernel (any alignment)."""
    grid_y = -(-g.cols // TILE)
    if grid_y > 65535:
        raise ValueError(f"k_major_copy: {g.cols} columns exceed the kernel's grid ({65535 * TILE})")
    vec = int(all(v % 4 == 0 for v in (g.src_ld, g.cols, g.rows, g.src, g.dst)))
    args = [ctypes.c_void_p(g.src), ctypes.c_void_p(g.dst), ctypes.c_longlong(g.rows), ctypes.c_longlong(g.cols),
            ctypes.c_longlong(g.src_ld), ctypes.c_longlong(g.rows), ctypes.c_int(vec)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    rc = launch_driver()(ctypes.c_void_p(fn), -(-g.rows // (TILE * TILES_PER_BLOCK)), grid_y, 1, THREADS[0],
                         THREADS[1], 1, 0, ctypes.c_void_p(stream), params, None)
    if rc != 0:
        raise RuntimeError(f"finegemm: the K-major copy kernel failed to launch: {jit.error_string(rc)}")


def k_major_copies(items: list[tuple[torch.Tensor, int]], ks: list[int], *, grouped: bool = True) -> list[torch.Tensor]:
    """For each (x, cols) of `items`: x [sum(ks), cols] (one-byte elements, any strides) -> 1-D
    [cols * sum(ks)]: group g's rows [start_g, start_g + k_g) stored transposed ([cols, k_g],
    row-major) at cols * start_g. On CUDA every group of every item goes through one launch of the
    grouped kernel where its addresses allow 16-byte pieces (`grouped=False`: the word kernel for
    every group, one launch each; for comparisons), the rest through the word kernel."""
    outs = []
    copies: list[GroupCopy] = []
    keep = []  # contiguous copies made here must outlive the launches (stream-ordered frees are safe)
    for x, cols in items:
        out = torch.empty(cols * sum(ks), dtype=x.dtype, device=x.device)
        outs.append(out)
        if out.numel() == 0:
            continue
        if x.device.type != "cuda" or x.element_size() != 1:
            start = 0
            for k in ks:
                if k:
                    out[cols * start:cols * (start + k)].view(cols, k).copy_(x[start:start + k].t())
                start += k
            continue
        if x.stride(1) != 1:
            x = x.contiguous()
            keep.append(x)
        src, dst, ld, start = x.data_ptr(), out.data_ptr(), x.stride(0), 0
        for k in ks:
            if k:
                copies.append(GroupCopy(src + start * ld, dst + cols * start, k, cols, ld))
            start += k
    if copies:
        _run_copies(copies, outs[0].device.index, grouped)
    return outs


def _run_copies(copies: list[GroupCopy], device: int, grouped: bool = True) -> None:
    if torch.cuda.current_device() != device:  # launch in the tensors' device's context
        with torch.cuda.device(device):
            return _run_copies(copies, device, grouped)
    stream = raw_stream(device)
    launches, rest = plan_grouped_copies(copies) if grouped else ([], copies)  # callers pass no empty copies
    if launches:
        fn = loaded_function("k_major_copy_u8_grouped", render_grouped_transpose_u8, device)
        for launch in launches:
            _launch_grouped(launch, fn, stream)
    if rest:
        fn = loaded_function("k_major_copy_u8", render_transpose_u8, device)
        for g in rest:
            _launch_word(g, fn, stream)


def k_major_batched(x: torch.Tensor, *, grouped: bool = True) -> torch.Tensor:
    """x [G, R, C] (one-byte elements, any strides) -> a new contiguous [G, C, R] with
    out[g] = x[g].T: the FP8 nn contiguous GEMM's [G, K, N] weights as the nt kernel's [G, N, K].
    PyTorch's own copy of the transposed one-byte view moved ~0.15-0.4 TB/s, this ~4 (NOTES v0.84,
    v0.87)."""
    return k_major_transposes([x], grouped=grouped)[0]


def k_major_transposes(xs: list[torch.Tensor], *, grouped: bool = True) -> list[torch.Tensor]:
    """k_major_batched of each [G, R, C] tensor of `xs` (same device), every copy in one launch of
    the grouped kernel where it can: the dense GEMMs' MN-major A [K, M] and B [K, N] as G = 1."""
    outs, copies, keep = [], [], []
    for x in xs:
        G, R, C = x.shape
        out = torch.empty(G, C, R, dtype=x.dtype, device=x.device)
        outs.append(out)
        if out.numel() == 0:
            continue
        if x.device.type != "cuda" or x.element_size() != 1:
            out.copy_(x.transpose(1, 2))
            continue
        if x.stride(2) != 1 and C > 1:
            x = x.contiguous()
            keep.append(x)  # alive until the launches are queued (stream-ordered frees are safe)
        src, dst = x.data_ptr(), out.data_ptr()
        copies += [GroupCopy(src + g * x.stride(0), dst + g * C * R, R, C, x.stride(1)) for g in range(G)]
    if copies:
        _run_copies(copies, outs[0].device.index, grouped)
    return outs


def k_major_groups(x: torch.Tensor, cols: int, ks: list[int], *, grouped: bool = True) -> torch.Tensor:
    """x [sum(ks), cols] (one-byte elements, any strides) -> 1-D [cols * sum(ks)]: group g's rows
    [start_g, start_g + k_g) stored transposed ([cols, k_g], row-major) at cols * start_g."""
    return k_major_copies([(x, cols)], ks, grouped=grouped)[0]


jit.register_compile_check("k_major_copy_u8", lambda: [(f"tile{TILE}", render_transpose_u8())])
jit.register_compile_check("k_major_copy_u8_grouped", lambda: [("tile128", render_grouped_transpose_u8())])
