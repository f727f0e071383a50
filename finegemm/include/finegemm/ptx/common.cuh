// Small PTX helpers shared by the other ptx/ headers: shared-memory addresses, fences,
// named barriers, register reallocation (setmaxnreg), lane/warp helpers.
#pragma once

#include <cstdint>

namespace finegemm {
namespace ptx {

// 32-bit shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy accesses
// (TMA, wgmma operand reads) — needed after ordinary stores to smem that TMA/wgmma read next.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Register dependencies that order ordinary shared loads before a later instruction without a
// memory fence. zero_after(x) is +0 or -0 for every x, NaN and Inf included (x * 0 is +-0 or NaN,
// and max(NaN, 0) = 0), yet no compiler can know it without x: an instruction consuming the
// result waits (scoreboard) for the load that produced x. full_warp_mask_from_zero(z) turns such
// a zero into 0xffffffff (the sign bit is shifted out). Written in PTX with .rn so that no
// floating-point contraction or fast-math rewrite can fold them away.
__device__ __forceinline__ float zero_after(float x) {
  float z;
  asm volatile("{\n .reg .f32 t;\n mul.rn.f32 t, %1, 0f00000000;\n max.f32 %0, t, 0f00000000;\n}\n"
               : "=f"(z) : "f"(x));
  return z;
}
__device__ __forceinline__ uint32_t full_warp_mask_from_zero(float z) {
  uint32_t mask;
  asm volatile("{\n .reg .b32 t;\n mov.b32 t, %1;\n shl.b32 t, t, 1;\n xor.b32 %0, t, 0xffffffff;\n}\n"
               : "=r"(mask) : "f"(z));
  return mask;
}

// Makes mbarrier.init visible to the async proxy / other CTAs of the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Named barrier over `num_threads` threads (a multiple of 32). Id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}

// Arrive on a named barrier without waiting (producer side of an ordered hand-off).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}

// Register reallocation (sm_90a): executed by every thread of a warpgroup. kRegs is a multiple
// of 8 in [24, 256]. Takes effect only when the kernel has a register cap at entry
// (__launch_bounds__(threads, 1)).
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Bytes of dynamic shared memory this launch was given.
__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(r));
  return r;
}

// Warp index broadcast from lane 0 so the compiler knows it is warp-uniform.
__device__ __forceinline__ uint32_t warp_idx_uniform() {
  return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
}

__device__ __forceinline__ uint32_t lane_idx() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(r));
  return r;
}

// ---- clusters
// Rank of this CTA inside its cluster (0 when launched without a cluster).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster arrives (release) and waits (acquire). All threads
// of the cluster must execute it (no thread may have exited).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

}  // namespace ptx
}  // namespace finegemm
