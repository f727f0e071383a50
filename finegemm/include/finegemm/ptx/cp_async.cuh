// Non-bulk cp.async (LDGSTS): small global -> shared copies that need no registers, tracked by an
// mbarrier. Used where a TMA box cannot describe the source (a gather at arbitrary strides).
#pragma once

#include <cstdint>

namespace finegemm {
namespace ptx {

// Copies 4 bytes from global `src` to shared address `dst`, cached in L1 (.ca), or writes 4 zero
// bytes when `valid` is false (src-size 0: nothing is read, but `src` must still be a global address).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared::cta.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4u : 0u)
               : "memory");
}

// One arrival on `bar` once every cp.async this thread issued before it has completed. .noinc:
// the arrival counts against the barrier's expected count, so each arriving thread is one of it.
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

}  // namespace ptx
}  // namespace finegemm
