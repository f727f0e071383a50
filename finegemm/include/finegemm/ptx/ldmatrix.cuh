// ldmatrix (sm_75+): a warp loads four 8x8 matrices of 16-bit elements from shared memory. Lane l
// supplies the address of row (l % 8) of matrix (l / 8) (16 contiguous bytes, 16-byte aligned);
// register i of lane l receives row l / 4, bytes 4 (l % 4) + {0..3} of matrix i. For 8-bit
// operands that is the wgmma register-A fragment (ptx/wgmma_fp8.cuh, WgmmaFp8RegA).
#pragma once

#include <cstdint>

namespace finegemm {
namespace ptx {

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// This warp's register-A fragments of a K-major FP8 tile in 128-byte-swizzled shared memory (as a
// TMA load with CU_TENSOR_MAP_SWIZZLE_128B writes it; 1024-byte aligned), for the 16 rows at
// `row_addr - (row % 16) * 128` and the k32 steps of one 128-byte row. `row_addr` is the address
// of this lane's row: 16 * warp + 8 * ((lane / 8) % 2) + lane % 8 of the warpgroup's 64.
// Chunk c (16 bytes) of row r sits at chunk c ^ (r % 8); lanes 16-31 take the step's upper chunk.
template <uint32_t kSteps>
__device__ __forceinline__ void load_a_fragments_sw128(uint32_t row_addr, uint32_t lane, uint32_t (&a)[kSteps][4]) {
  const uint32_t row_in_atom = lane % 8;
  const uint32_t upper = lane / 16;
#pragma unroll
  for (uint32_t k = 0; k < kSteps; ++k) ldmatrix_x4(row_addr + (((2 * k + upper) ^ row_in_atom) << 4), a[k]);
}

}  // namespace ptx
}  // namespace finegemm
