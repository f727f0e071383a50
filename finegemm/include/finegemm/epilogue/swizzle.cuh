// Shared-memory layout of a TMA box stored with the tensor map's swizzle (CU_TENSOR_MAP_SWIZZLE_
// 32B / 64B / 128B): rows of kSpanBytes, 16-byte chunk c of row r at position c ^ ((r * kSpanBytes /
// 128) % (kSpanBytes / 16)). Both TMA-store epilogues (bf16 and fp32) write their staging boxes
// this way, so the TMA engine reads them back in row order.
#pragma once

#include <cstdint>

namespace finegemm {
namespace epilogue {

// Byte offset of 16-byte chunk `chunk` (< kSpanBytes / 16) of row `row` inside one box.
template <uint32_t kSpanBytes>
__device__ __forceinline__ uint32_t swizzled_chunk_offset(uint32_t row, uint32_t chunk) {
  static_assert(kSpanBytes == 32 || kSpanBytes == 64 || kSpanBytes == 128, "TMA swizzle spans");
  constexpr uint32_t kChunksPerRow = kSpanBytes / 16;
  return row * kSpanBytes + ((chunk ^ ((row * kSpanBytes / 128) % kChunksPerRow)) * 16);
}

}  // namespace epilogue
}  // namespace finegemm
