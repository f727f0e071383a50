// wgmma (sm_90a) helpers: shared-memory matrix descriptors, fence / commit / wait, and the
// operand fence that keeps the compiler from moving accumulator accesses across the async MMA.
// The m64nNk32 FP8 instructions themselves are in wgmma_fp8.cuh.
#pragma once

#include <cstdint>

namespace finegemm {
namespace ptx {

// Matrix descriptor of a K-major operand tile stored with the 128-byte swizzle (as written by a
// TMA load with CU_TENSOR_MAP_SWIZZLE_128B and a 128-byte inner box): rows of 128 bytes, 8-row
// core-matrix groups 1024 bytes apart. Bit layout (PTX ISA, "Matrix Descriptor Format"):
//   [0,14)  start address >> 4          [16,30) leading byte offset >> 4 (unused for swizzled
//   [32,46) stride byte offset >> 4             K-major layouts; 1 by convention)
//   [49,52) base offset (0: tiles are 1024-byte aligned)     [62,64) swizzle: 1 = 128B
// The tile must start at a 1024-byte aligned address. Advancing along K inside the 128-byte row
// (k*32 bytes for FP8 k32 steps) is done by adding (bytes >> 4) to the descriptor: the hardware
// applies the swizzle XOR on absolute address bits, so the base offset stays 0.
// sbo_bytes: from one 8-row atom to the next along M / N (1024: atoms back to back; the FP8
// kernel's grouped B boxes interleave several k-blocks' atoms, kBGroup * 1024).
__device__ __forceinline__ uint64_t make_smem_desc_k_sw128(uint32_t smem_address, uint32_t sbo_bytes = 1024) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_address & 0x3FFFFu) >> 4);
  desc |= static_cast<uint64_t>(1) << 16;            // LBO (ignored)
  desc |= static_cast<uint64_t>(sbo_bytes >> 4) << 32;  // SBO: 8 rows x 128 B apart
  desc |= static_cast<uint64_t>(1) << 62;            // 128-byte swizzle
  return desc;
}

// Before the first wgmma of a batch (orders prior register/smem writes with the async MMA).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Wait until at most kPending wgmma groups of this warpgroup are outstanding.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group: 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// wgmma_wait<pending> for a `pending` that is a constant once the caller's loop is unrolled.
__device__ __forceinline__ void wgmma_wait_pending(uint32_t pending) {
  if (pending == 0) {
    wgmma_wait<0>();
  } else if (pending == 1) {
    wgmma_wait<1>();
  } else if (pending == 2) {
    wgmma_wait<2>();
  } else {
    wgmma_wait<3>();
  }
}

// Compiler-only fence on an accumulator register: the asm statements of wgmma/wait do not name
// the accumulators they read or write asynchronously, so pin them around the MMA batch.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int kN>
__device__ __forceinline__ void fence_operands(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) fence_operand(r[i]);
}

}  // namespace ptx
}  // namespace finegemm
