// stmatrix (sm_90): a warp stores four 8x8 matrices of 16-bit elements to shared memory.
// Lane l supplies the shared address of row (l % 8) of matrix (l / 8) (16 contiguous bytes,
// 16-byte aligned); register i of lane l holds row l / 4, columns 2 (l % 4) + {0, 1} of matrix i
// — exactly the layout of a wgmma accumulator's 8-column chunk, so a fragment goes to shared
// memory without shuffles.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace finegemm {
namespace ptx {

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Two floats -> packed bf16x2 (lo in the low half: the lower address / column).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace ptx
}  // namespace finegemm
