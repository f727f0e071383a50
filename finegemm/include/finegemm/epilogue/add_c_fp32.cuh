// Adds the fp32 C tile to a consumer warpgroup's accumulator fragment, before any store to D.
//
// Fragment layout (wgmma m64nNk32 D, one thread): acc[4 j + 2 h + {0, 1}] is row r0 + 8 h, columns
// n0 + 8 j + col_in_chunk + {0, 1}. C uses D's row pitch ldd; vec: C and D allow two-element
// vector accesses (even N and ldd, 8-byte aligned bases; the host checks it).
//
// Why a pass of its own: c may be d (accumulate in place), so a load placed after a store to d can
// not be hoisted above it, and interleaved load / add / store pays one HBM latency per chunk
// (4096x32768x512 fp32 + C: 1431 us vs 426 us this way, benchmarks/NOTES.md v0.6). Interior tiles
// load unconditionally, which the compiler issues back to back; edge tiles keep per-element
// guards. Each element is read and written by the same thread only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <finegemm/epilogue/swizzle.cuh>
#include <finegemm/ptx/common.cuh>

namespace finegemm {
namespace epilogue {

template <uint32_t BLOCK_N, uint32_t kNumChunks, uint32_t kNumAcc>
__device__ __forceinline__ void add_c_fp32(float (&acc)[kNumAcc], const float* c_ptr, uint32_t m0, uint32_t r0,
                                           uint32_t wg_rows_end, uint32_t n0, uint32_t col_in_chunk, uint32_t ldd,
                                           uint32_t N, uint32_t row_limit, bool vec) {
  static_assert(kNumAcc == 4 * kNumChunks && kNumChunks * 8 == BLOCK_N, "wgmma D fragment of a BLOCK_N tile");
  if (vec && wg_rows_end <= row_limit && n0 + BLOCK_N <= N) {
    const float* c_row0 = c_ptr + static_cast<size_t>(m0 + r0) * ldd + n0 + col_in_chunk;
    const float* c_row1 = c_row0 + static_cast<size_t>(8) * ldd;
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j) {
      const float2 v0 = __ldcs(reinterpret_cast<const float2*>(c_row0 + 8 * j));
      const float2 v1 = __ldcs(reinterpret_cast<const float2*>(c_row1 + 8 * j));
      acc[4 * j + 0] += v0.x;
      acc[4 * j + 1] += v0.y;
      acc[4 * j + 2] += v1.x;
      acc[4 * j + 3] += v1.y;
    }
    return;
  }
#pragma unroll
  for (uint32_t h = 0; h < 2; ++h) {
    const uint32_t row = m0 + r0 + 8 * h;
    if (row >= row_limit) continue;
    const size_t row_off = static_cast<size_t>(row) * ldd;
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j) {
      const uint32_t col = n0 + 8 * j + col_in_chunk;
      if (col >= N) continue;
      const size_t off = row_off + col;
      if (vec) {
        const float2 cv = __ldcs(reinterpret_cast<const float2*>(c_ptr + off));
        acc[4 * j + 2 * h + 0] += cv.x;
        acc[4 * j + 2 * h + 1] += cv.y;
      } else {
        acc[4 * j + 2 * h + 0] += __ldcs(c_ptr + off);
        if (col + 1 < N) acc[4 * j + 2 * h + 1] += __ldcs(c_ptr + off + 1);
      }
    }
  }
}

// The same addition with C already in shared memory (the kernel's kCStage): one consumer
// warpgroup's 64 rows as the producer TMA-loaded them through the fp32 epilogue map, BLOCK_N / 32
// boxes of 64 rows x 32 columns (128-byte rows, 128B swizzle: swizzle.cuh) at c_buf, box b holding
// columns [32 b, 32 b + 32) of the tile. The same acc += c per element as add_c_fp32, so D is
// bitwise the same; the zeros TMA put outside the tensor land only in elements never stored.
// lane_row: the thread's first fragment row inside the 64 (16 warp + lane / 4).
template <uint32_t BLOCK_N, uint32_t kNumAcc>
__device__ __forceinline__ void add_c_fp32_staged(float (&acc)[kNumAcc], uint32_t c_buf, uint32_t lane_row,
                                                  uint32_t lane) {
  static_assert(BLOCK_N % 32 == 0 && kNumAcc == BLOCK_N / 2, "32-column boxes of a BLOCK_N fragment");
  const uint32_t half = (lane % 2) * 8;  // the thread's float2 is half a 16-byte chunk
#pragma unroll
  for (uint32_t b = 0; b < BLOCK_N / 32; ++b) {
    const uint32_t box = c_buf + b * (64 * 128);
#pragma unroll
    for (uint32_t jj = 0; jj < 4; ++jj) {
      const uint32_t j = 4 * b + jj;
      const uint32_t q = 2 * jj + (lane % 4) / 2;  // chunk of columns 8 jj + 2 (lane % 4) + {0, 1}
      const float2 v0 = ptx::ld_shared_v2_f32(box + swizzled_chunk_offset<128>(lane_row, q) + half);
      const float2 v1 = ptx::ld_shared_v2_f32(box + swizzled_chunk_offset<128>(lane_row + 8, q) + half);
      acc[4 * j + 0] += v0.x;
      acc[4 * j + 1] += v0.y;
      acc[4 * j + 2] += v1.x;
      acc[4 * j + 3] += v1.y;
    }
  }
}

}  // namespace epilogue
}  // namespace finegemm
