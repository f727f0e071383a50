// Small PTX helpers shared by the other ptx/ headers: shared-memory addresses, fences,
// named barriers, register reallocation (setmaxnreg), lane/warp helpers.
#pragma once

#include <cstdint>

#include <finegemm/ptx/diag.cuh>

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

// One 8-byte shared-memory store of two floats (`addr`: shared address, 8-byte aligned).
__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// One 8-byte shared-memory load of two floats (`addr`: shared address, 8-byte aligned).
__device__ __forceinline__ float2 ld_shared_v2_f32(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
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

// The setmaxnreg split of the 64K register file for a producer warpgroup and kNumConsumerWG
// consumer warpgroups (both kernel families; one consumer warpgroup keeps what it was compiled
// with): 2 x 128 x 232 + 128 x 40 <= 65536, and 3 x 128 x 160 + 128 x 32 = 65536. Four (the BF16
// kernel's block_m 256) start at 96 registers each (640 threads: 65536 / 640 rounded down to 8), so
// the split is of 640 x 96: 4 x 128 x 112 + 128 x 32 = 61440. Two co-resident
// CTAs of one consumer warpgroup (launch bound 2 CTAs: 128 registers per thread at entry) split
// their half with the same 40-register producer: 128 x 216 + 128 x 40 = 32768.
constexpr uint32_t consumer_regs(uint32_t num_consumer_wg, uint32_t ctas_per_sm = 1) {
  return ctas_per_sm == 2 ? 216 : num_consumer_wg == 4 ? 112 : num_consumer_wg == 3 ? 160 : 232;
}
constexpr uint32_t producer_regs(uint32_t num_consumer_wg) { return num_consumer_wg >= 3 ? 32 : 40; }

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

// CTAs in this CTA's cluster (1 when launched without a cluster).
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}

// The shared::cluster address of `smem_addr` (this CTA's shared::cta address) in CTA `cta_id`.
__device__ __forceinline__ uint32_t map_shared_rank(uint32_t smem_addr, uint32_t cta_id) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(cta_id));
  return r;
}

// A float2 from another CTA's shared memory (an address from map_shared_rank).
__device__ __forceinline__ float2 ld_shared_cluster_f2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// A float4 from another CTA's shared memory (16-byte aligned; an address from map_shared_rank).
__device__ __forceinline__ float4 ld_shared_cluster_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// A float4 of this CTA's shared memory (16-byte aligned shared::cta address).
__device__ __forceinline__ float4 ld_shared_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// 16 bytes into another CTA's shared memory (`addr` and its mbarrier `bar` both from
// map_shared_rank): the bytes complete 16 transaction bytes on that barrier when they have
// landed, so the receiver learns of them by waiting on its own barrier (no round trip, no fence).
__device__ __forceinline__ void st_async_f4(uint32_t addr, float a, float b, float c, float d, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(addr),
               "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
               : "memory");
}

// Every thread of every CTA of the cluster arrives (release) and waits (acquire). All threads
// of the cluster must execute it (no thread may have exited).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

// cluster_sync in two halves, the arrive without the release (no fence): for a barrier that
// orders nothing but execution, e.g. after fence.mbarrier_init (which released the init) or once
// every remote load has returned. A release arrive at kernel start measured ~1250 cycles on the
// H100 (benchmarks/NOTES.md v1.12). Every thread pairs each arrive with one wait before its next.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }

// The releasing half of cluster_sync alone. After a CTA barrier, one warp's release arrive is
// cumulative over every store that barrier ordered before it: the other warps may then arrive
// relaxed (FINEGEMM_DIAG_SPLIT_CLUSTER_ONE_FENCE; a MEMBAR.ALL.GPU is per warp, not per thread).
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}

// Programmatic dependent launch (finegemm.set_pdl): a kernel launched with the programmatic
// stream-serialization attribute may start while the kernel before it in the stream still runs.
// griddep_wait blocks until that grid has completed and its memory operations are visible, so
// every global read and write of a GEMM kernel comes after it (a write too: the previous kernel
// may still be reading the buffer). Launched without the attribute, it returns at once.
__device__ __forceinline__ void griddep_wait() {
  if constexpr (!diag::kNoPdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// Lets the next kernel in the stream, when launched with the attribute, be scheduled before this
// grid ends (its CTAs take SMs as this grid's leave and run their prologue); it still waits for
// this grid's completion in its own griddep_wait, so issuing this early is always safe.
__device__ __forceinline__ void griddep_launch_dependents() {
  if constexpr (!diag::kNoPdl) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace ptx
}  // namespace finegemm
