// Direct register -> global store of a consumer warpgroup's accumulator fragment (the epilogue when
// the TMA store does not apply: fp32 D, C, split-K, edge rows of a masked group).
//
// Fragment layout as in add_c_fp32.cuh: acc[4 j + 2 h + {0, 1}] is row r0 + 8 h, columns
// n0 + 8 j + col_in_chunk + {0, 1}. Rows >= row_limit and columns >= N are not written. vec: D
// allows two-element vector stores (even N and ldd, aligned base; the host checks it).
// out_fp32 may be a run-time value (BF16 kernel) or a constant (FP8 kernel: folded when inlined).
// zero_rows: bit h set = row r0 + 8 h is written as zeros whatever acc holds (an m-grouped padding
// row; acc is not rewritten, as in TmaStoreBf16::store).
// kStreaming: fp32 vector stores with the streaming hint (st.global.cs, evict-first at L2), for a D
// written once. Tried on the 1D1D epilogue with C (the developer switch FINEGEMM_DIAG_C_STREAM_HINTS):
// +8% at 4096x32768x512, so no kernel uses it by default (benchmarks/NOTES.md v0.75).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

namespace finegemm {
namespace epilogue {

template <uint32_t kNumChunks, bool kStreaming = false, uint32_t kNumAcc>
__device__ __forceinline__ void store_direct(const float (&acc)[kNumAcc], void* d_ptr, uint32_t m0, uint32_t r0,
                                             uint32_t n0, uint32_t col_in_chunk, uint32_t ldd, uint32_t N,
                                             uint32_t row_limit, bool vec, bool out_fp32, uint32_t zero_rows = 0) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
#pragma unroll
  for (uint32_t h = 0; h < 2; ++h) {
    const uint32_t row = m0 + r0 + 8 * h;
    if (row >= row_limit) continue;
    const size_t row_off = static_cast<size_t>(row) * ldd;
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j) {
      const uint32_t col = n0 + 8 * j + col_in_chunk;
      if (col >= N) continue;
      const bool zero = (zero_rows >> h) & 1u;
      const float v0 = zero ? 0.0f : acc[4 * j + 2 * h + 0];
      const float v1 = zero ? 0.0f : acc[4 * j + 2 * h + 1];
      const size_t off = row_off + col;
      if (vec) {
        // col is even, N is even and ldd is even: both columns are in range and aligned.
        if (out_fp32) {
          float2* p = reinterpret_cast<float2*>(static_cast<float*>(d_ptr) + off);
          if constexpr (kStreaming) {
            __stcs(p, make_float2(v0, v1));
          } else {
            *p = make_float2(v0, v1);
          }
        } else {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(d_ptr) + off) = __floats2bfloat162_rn(v0, v1);
        }
      } else {
        const bool has1 = col + 1 < N;
        if (out_fp32) {
          static_cast<float*>(d_ptr)[off] = v0;
          if (has1) static_cast<float*>(d_ptr)[off + 1] = v1;
        } else {
          static_cast<__nv_bfloat16*>(d_ptr)[off] = __float2bfloat16_rn(v0);
          if (has1) static_cast<__nv_bfloat16*>(d_ptr)[off + 1] = __float2bfloat16_rn(v1);
        }
      }
    }
  }
}

// One lane's pair of fp32 D elements (row; col, col + 1) with the bounds and vector rule of
// store_direct, for a sum that is not a wgmma fragment (the spread split reduction,
// epilogue/split_k.cuh, taken only for fp32 D). row and col are absolute; col is even.
__device__ __forceinline__ void store_direct_pair_fp32(float2 v, float* d_ptr, uint32_t row, uint32_t col,
                                                       uint32_t ldd, uint32_t N, uint32_t row_limit, bool vec) {
  if (row >= row_limit || col >= N) return;
  const size_t off = static_cast<size_t>(row) * ldd + col;
  if (vec) {
    *reinterpret_cast<float2*>(d_ptr + off) = v;
  } else {
    d_ptr[off] = v.x;
    if (col + 1 < N) d_ptr[off + 1] = v.y;
  }
}

}  // namespace epilogue
}  // namespace finegemm
