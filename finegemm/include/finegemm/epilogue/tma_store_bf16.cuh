// Epilogue of a consumer warpgroup's 64 x BLOCK_N fp32 accumulator fragment (wgmma layout) into
// bf16 through a swizzled shared-memory staging buffer and TMA stores (S2G), overlapped with
// the warpgroup's next tile:
//   (1) the thread that issued the previous stores waits until they have READ the buffer
//       (cp.async.bulk.wait_group.read 0), then a warpgroup-local named barrier;
//   (2) all 128 threads write their fragment with stmatrix (stage_warp_rows; no bank conflicts: the swizzle);
//   (3) fence.proxy.async.shared::cta (each writer) + named barrier;
//   (4) one thread issues the TMA stores (one per column box) and commits, without waiting.
// At kernel end, the issuing thread must call finish() (wait_group 0) before exiting.
//
// Layout: the BLOCK_N columns are cut into boxes of kSwizzleBytes (128, 64 or 32 bytes: the
// largest dividing the row's bytes); each box is 64 rows x kSwizzleBytes, stored with the TMA
// swizzle of that span (16-byte chunk c of row r at chunk c ^ ((r * span / 128) % (span / 16))).
// The host's D tensor map uses box (kSwizzleBytes / 2 cols, 64 rows) and the same swizzle
// (host/sm90_fp8_gemm.cpp mirrors the rule). Out-of-bounds rows/cols are dropped by TMA.
//
// Head splits (kHeadMid > 0, fp8_gemm_nt_skip_head_mid): the GEMM's columns are heads of
// kHeadLeft + kHeadRight, and D holds each head as kHeadLeft + kHeadMid + kHeadRight columns with
// the middle ones never written. Each box's column is remapped (a box lies within one side of a
// head: kBoxCols divides both sides); D's map spans D's full width, so boxes past the GEMM's last
// column remap past D's last one and TMA drops them as before.
#pragma once

#include <cstdint>

#include <finegemm/epilogue/swizzle.cuh>
#include <finegemm/ptx/common.cuh>
#include <finegemm/ptx/diag.cuh>
#include <finegemm/ptx/stmatrix.cuh>
#include <finegemm/ptx/tma.cuh>

namespace finegemm {
namespace epilogue {

template <uint32_t BLOCK_N, uint32_t kHeadLeft = 0, uint32_t kHeadMid = 0, uint32_t kHeadRight = 0>
struct TmaStoreBf16 {
  static_assert(BLOCK_N % 16 == 0, "stmatrix x4 writes two 8-column chunks at a time");
  static constexpr uint32_t kRowBytes = BLOCK_N * 2;
  static constexpr uint32_t kSwizzleBytes = kRowBytes % 128 == 0 ? 128 : (kRowBytes % 64 == 0 ? 64 : 32);
  static constexpr uint32_t kChunksPerBox = kSwizzleBytes / 16;
  static constexpr uint32_t kNumBoxes = kRowBytes / kSwizzleBytes;
  static constexpr uint32_t kBoxCols = kSwizzleBytes / 2;
  static_assert(kHeadMid == 0 || (kHeadLeft % kBoxCols == 0 && kHeadRight % kBoxCols == 0 &&
                                  kHeadLeft + kHeadRight > 0),
                "head splits: every store box within one side of a head");

  // D's column of the GEMM's column `col` (the box's first): itself, or its place around the gap.
  // (__host__ too: tests/test_fp8_kernel_compile.py runs it on the CPU over every box of a tiling.)
  __host__ __device__ __forceinline__ static int32_t d_column(int32_t col) {
    if constexpr (kHeadMid == 0) {
      return col;
    } else {
      constexpr uint32_t kPerHead = kHeadLeft + kHeadRight;
      const uint32_t c = static_cast<uint32_t>(col);
      const uint32_t head = c / kPerHead, j = c - head * kPerHead;
      return static_cast<int32_t>(head * (kPerHead + kHeadMid) + j + (j >= kHeadLeft ? kHeadMid : 0u));
    }
  }
  static constexpr uint32_t kBoxBytes = 64 * kSwizzleBytes;  // multiple of 1024: swizzle atoms stay aligned
  static constexpr uint32_t kBytes = 64 * kRowBytes;         // one warpgroup's staging buffer

  // Shared-memory byte offset of 16-byte chunk `chunk` (columns 8 chunk .. +7) of row `row`.
  __device__ __forceinline__ static uint32_t offset(uint32_t row, uint32_t chunk) {
    return (chunk / kChunksPerBox) * kBoxBytes + swizzled_chunk_offset<kSwizzleBytes>(row, chunk % kChunksPerBox);
  }

  // One warp's 16 fragment rows (16 warp .. +15) into the staging buffer with stmatrix (conflict-free
  // thanks to the swizzle); keep0 / keep1 mask the upper / lower row's bits (all-zero bits: +0.0).
  // Lane l addresses row l % 8 of matrix l / 8: matrices {rows 0-7, rows 8-15} x {chunk j, j+1}.
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void stage_warp_rows(const float (&fin)[kNumAcc], uint32_t buf, uint32_t warp,
                                                         uint32_t lane, uint32_t keep0, uint32_t keep1) {
    const uint32_t mat = lane / 8;
    const uint32_t row = warp * 16 + (mat % 2) * 8 + lane % 8;
    const uint32_t chunk_off = mat / 2;
#pragma unroll
    for (uint32_t j = 0; j < BLOCK_N / 8; j += 2) {
      ptx::stmatrix_x4(buf + offset(row, j + chunk_off), ptx::pack_bf16x2(fin[4 * j + 0], fin[4 * j + 1]) & keep0,
                       ptx::pack_bf16x2(fin[4 * j + 2], fin[4 * j + 3]) & keep1,
                       ptx::pack_bf16x2(fin[4 * j + 4], fin[4 * j + 5]) & keep0,
                       ptx::pack_bf16x2(fin[4 * j + 6], fin[4 * j + 7]) & keep1);
    }
  }

  // Called by all 128 threads of the warpgroup. buf: this warpgroup's staging buffer (shared
  // address, 1024-aligned); fin: the thread's fragment (register 4j+{0,1}: row 16 warp + lane/4,
  // cols 8j + 2 (lane%4) + {0,1}; 4j+{2,3}: 8 rows below); (col0, row0): the box's global origin.
  // zero_rows: bit h set = the thread's row h (0: upper, 1: 8 below) is stored as zeros whatever
  // the fragment holds (an m-grouped padding row): masked at packing, so the accumulators are
  // never rewritten (rewriting them spilled the 128 x 256 tile).
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void store(const float (&fin)[kNumAcc], uint32_t buf, const void* tmap_d,
                                               uint32_t barrier_id, int32_t col0, int32_t row0,
                                               uint32_t zero_rows = 0) {
    static_assert(kNumAcc == BLOCK_N / 2, "fragment size");
    const uint32_t tid = threadIdx.x % 128;
    const uint32_t warp = tid / 32, lane = tid % 32;
    // (1) the previous tile's stores from this buffer have been read out
    if (tid == 0) ptx::tma_store_wait_read<0>();
    ptx::named_barrier_sync(barrier_id, 128);
    // (2) every warp stages its 16 rows
    const uint32_t keep0 = (zero_rows & 1u) ? 0u : ~0u;  // all-zero bits: +0.0 even for a NaN fragment
    const uint32_t keep1 = (zero_rows & 2u) ? 0u : ~0u;
    stage_warp_rows(fin, buf, warp, lane, keep0, keep1);
    // (3) generic-proxy writes visible to the TMA (async proxy), then everyone has written
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(barrier_id, 128);
    // (4) one thread stores every column box and commits; completion is awaited at the next reuse
    if (tid == 0 && !diag::kNoDTma) {  // (developer bound: ptx/diag.cuh)
#pragma unroll
      for (uint32_t b = 0; b < kNumBoxes; ++b) {
        ptx::tma_store_2d(tmap_d, buf + b * kBoxBytes, d_column(col0 + static_cast<int32_t>(b * kBoxCols)), row0);
      }
      ptx::tma_store_commit();
    }
  }

  // One warp's 16 rows (rows 16 warp .. +15 of the warpgroup's fragment layout, as in store) for
  // kernels whose warps finish their rows independently (a split cluster's reduce-scatter): the
  // warp writes its slice of the staging buffer `buf` (the same offsets as store's, so each column
  // box's 16 rows are 16 x kSwizzleBytes contiguous bytes, swizzle-atom aligned) and lane 0 stores
  // them (D's map box: kBoxCols x 16 rows; row0: the warp's first row) and waits for the stores
  // before the warp leaves (the buffer may not be freed under them: the CTA's only tile).
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void store_warp(const float (&fin)[kNumAcc], uint32_t buf, const void* tmap_d,
                                                    int32_t col0, int32_t row0) {
    static_assert(kNumAcc == BLOCK_N / 2, "fragment size");
    static_assert(kHeadMid == 0, "head splits store whole warpgroups");
    const uint32_t warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    stage_warp_rows(fin, buf, warp, lane, ~0u, ~0u);
    ptx::fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0 && !diag::kNoDTma) {
#pragma unroll
      for (uint32_t b = 0; b < kNumBoxes; ++b) {
        ptx::tma_store_2d(tmap_d, buf + b * kBoxBytes + warp * 16 * kSwizzleBytes,
                          col0 + static_cast<int32_t>(b * kBoxCols), row0);
      }
      ptx::tma_store_commit();
      ptx::tma_store_wait<0>();
    }
  }

  // Before the issuing thread exits: every store has completed (its smem source must stay valid).
  __device__ __forceinline__ static void finish() {
    if (threadIdx.x % 128 == 0) ptx::tma_store_wait<0>();
  }
};

}  // namespace epilogue
}  // namespace finegemm
