// Epilogue of a consumer warpgroup's 64 x BLOCK_N fp32 fragment (wgmma layout) into fp32 D through
// shared memory and TMA, overlapped with the warpgroup's next tile: a plain TMA store, or with
// kReduceAdd a TMA reduce-add (D += tile, at L2), which is "D = C + tile" when C is D. Compared
// with the direct epilogue (impls: add_c_fp32 + store_direct), the consumers never wait for C's
// HBM round trip nor for their stores: the wgrad shapes lost 7-20% there (probe_wgrad.py --anchor).
//
// fp32 doubles the bytes of the bf16 staging (epilogue/tma_store_bf16.cuh), and a whole 64 x 208
// fp32 fragment (53 KB per warpgroup) would cost two pipeline stages, so the fragment goes out in
// column boxes of kBoxCols through a small ring of kNumBufs box buffers (16 KB per warpgroup):
//   box b: [b == 0: wait until the previous tile's boxes were read; b >= kNumBufs: until box
//   b - kNumBufs was read] + named barrier; every thread writes its part of the box (float2
//   stores, swizzled like the tensor map); fence.proxy.async + named barrier; one thread issues
//   the box's TMA and commits it.
// Boxes: 32 columns (128-byte rows, 128B swizzle) when BLOCK_N % 32 == 0, else 16 (64B swizzle).
// The host's D map is 3-D (N, rows per group, groups) with box (kBoxCols, 64, 1) and that swizzle
// (host/sm90_fp8_gemm.cpp, host/sm90_fp8_k_grouped.cpp), so TMA drops rows past a group's end
// and columns past N. At kernel end the issuing thread calls finish().
#pragma once

#include <cstdint>

#include <finegemm/epilogue/swizzle.cuh>
#include <finegemm/ptx/diag.cuh>
#include <finegemm/ptx/common.cuh>
#include <finegemm/ptx/tma.cuh>

namespace finegemm {
namespace epilogue {

template <uint32_t BLOCK_N, bool kReduceAdd>
struct TmaStoreFp32 {
  static_assert(BLOCK_N % 16 == 0, "boxes of 16 or 32 columns");
  static constexpr uint32_t kBoxCols = BLOCK_N % 32 == 0 ? 32 : 16;
  static constexpr uint32_t kRowBytes = kBoxCols * 4;  // = the swizzle span (128 or 64 bytes)
  static constexpr uint32_t kBoxBytes = 64 * kRowBytes;  // 8 or 4 KB: swizzle atoms stay aligned
  static constexpr uint32_t kNumBoxes = BLOCK_N / kBoxCols;
  static constexpr uint32_t kRingBytes = 16384;
  static constexpr uint32_t kNumBufs = kNumBoxes < kRingBytes / kBoxBytes ? kNumBoxes : kRingBytes / kBoxBytes;
  static constexpr uint32_t kBytes = kNumBufs * kBoxBytes;  // one warpgroup's staging (mirrored by the host)

  // Called by all 128 threads of the warpgroup. buf: this warpgroup's staging (shared address,
  // 1024-aligned); fin: the thread's fragment (4j+{0,1}: row 16 warp + lane/4, cols 8j + 2 (lane%4)
  // + {0,1}; 4j+{2,3}: 8 rows below); (col0, row0, group): the fragment's origin in the D map.
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void store(const float (&fin)[kNumAcc], uint32_t buf, const void* tmap_d,
                                               uint32_t barrier_id, int32_t col0, int32_t row0, int32_t group) {
    static_assert(kNumAcc == BLOCK_N / 2, "fragment size");
    constexpr uint32_t kChunksPerBox = kBoxCols / 8;  // 8-column chunks of the fragment per box
    const uint32_t tid = threadIdx.x % 128;
    const uint32_t warp = tid / 32, lane = tid % 32;
    const uint32_t r0 = warp * 16 + lane / 4;
    // The thread's float2 is half a 16-byte chunk.
    const uint32_t half = (lane % 2) * 8;
#pragma unroll
    for (uint32_t b = 0; b < kNumBoxes; ++b) {
      if (b == 0 || b >= kNumBufs) {
        if (tid == 0) {
          if (b == 0) {
            ptx::tma_store_wait_read<0>();  // the previous tile's boxes
          } else {
            ptx::tma_store_wait_read<kNumBufs - 1>();  // box b - kNumBufs
          }
        }
        ptx::named_barrier_sync(barrier_id, 128);
      }
      const uint32_t box = buf + (b % kNumBufs) * kBoxBytes;
#pragma unroll
      for (uint32_t jj = 0; jj < kChunksPerBox; ++jj) {
        const uint32_t j = b * kChunksPerBox + jj;
        const uint32_t q = 2 * jj + (lane % 4) / 2;  // 16-byte chunk of columns 8 jj + 2 (lane % 4)
        ptx::st_shared_v2_f32(box + swizzled_chunk_offset<kRowBytes>(r0, q) + half, fin[4 * j + 0], fin[4 * j + 1]);
        ptx::st_shared_v2_f32(box + swizzled_chunk_offset<kRowBytes>(r0 + 8, q) + half, fin[4 * j + 2], fin[4 * j + 3]);
      }
      ptx::fence_proxy_async_shared();
      ptx::named_barrier_sync(barrier_id, 128);
      if (tid == 0) {
        const int32_t c0 = col0 + static_cast<int32_t>(b * kBoxCols);
        if constexpr (kReduceAdd) {
          ptx::tma_reduce_add_3d(tmap_d, box, c0, row0, group);
        } else {
          ptx::tma_store_3d(tmap_d, box, c0, row0, group);
        }
        ptx::tma_store_commit();
      }
    }
  }

  // L2 prefetch of C's boxes at the places store() writes (kRowHalves 64-row halves at (col0, row0,
  // group)) through an fp32 map of this layout (D's for the reduce-add, where C is D, or one over C),
  // issued by one thread (the producer's) over the tile's k-blocks [first, first + width): the read
  // of C then leaves during the main loop instead of in the burst of HBM reads when every CTA of a
  // wave reaches its epilogue together. Spread one or a few boxes per
  // k-block, because all at once held the producer's next loads behind them in the TMA unit: +1.7%
  // on the long-K tiles (benchmarks/NOTES.md v0.72).
  template <uint32_t kRowHalves>
  struct Prefetch {
    static constexpr uint32_t kTotal = kRowHalves * kNumBoxes;
    uint32_t first = ~0u, width = 1;  // none by default

    // The window ends diag::kCPrefetchLead k-blocks before the tile's last one and holds up to
    // kTotal k-blocks. Tiles of more than diag::kCPrefetchMaxKBlocks k-blocks go without: C is a
    // small part of their traffic, and the prefetch measured neutral to +2.5% there
    // (benchmarks/NOTES.md v0.72).
    __device__ __forceinline__ Prefetch(bool on, uint32_t kb_begin, uint32_t kb_end) {
      constexpr uint32_t kLead = diag::kCPrefetchLead;
      if (!on || kb_end == kb_begin || kb_end - kb_begin > diag::kCPrefetchMaxKBlocks) return;
      const uint32_t last = kb_end - kb_begin > kLead ? kb_end - 1 - kLead : kb_begin;
      first = diag::kCPrefetchBurst ? last : (last - kb_begin + 1 > kTotal ? last + 1 - kTotal : kb_begin);
      width = last + 1 - first;
    }

    // Called with each k-block the producer loads: the boxes that fall to it.
    __device__ __forceinline__ void issue(uint32_t kb, const void* tmap_d, int32_t col0, int32_t row0,
                                          int32_t group) const {
      const uint32_t i = kb - first;
      if (kb < first || i >= width) return;
      const uint32_t b_end = (i + 1) * kTotal / width;
#pragma unroll 1
      for (uint32_t b = i * kTotal / width; b < b_end; ++b) {
        ptx::tma_prefetch_l2_3d(tmap_d, col0 + static_cast<int32_t>(b % kNumBoxes * kBoxCols),
                                row0 + static_cast<int32_t>(b / kNumBoxes * 64), group);
      }
    }
  };

  // Before the issuing thread exits: every box has been written (its smem source must stay valid).
  __device__ __forceinline__ static void finish() {
    if (threadIdx.x % 128 == 0) ptx::tma_store_wait<0>();
  }
};

}  // namespace epilogue
}  // namespace finegemm
