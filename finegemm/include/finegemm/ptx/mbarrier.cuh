// mbarrier wrappers (shared::cta, 64-bit barriers). Addresses are 32-bit shared addresses
// (ptx::smem_addr). Phase protocol: a barrier starts in phase 0; a phase completes when the
// pending arrival count reaches zero AND the pending transaction bytes reach zero; then the
// phase parity flips. wait(parity) returns once the phase with that parity has completed —
// on a fresh barrier, wait(1) returns at once (the "previous" phase counts as complete).
#pragma once

#include <cstdint>

namespace finegemm {
namespace ptx {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrive once (release, cta scope).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(bar)
      : "memory");
}

// Arrive once and add `tx_bytes` to the phase's expected transaction count.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(bar), "r"(tx_bytes)
      : "memory");
}

// Only add expected transaction bytes (no arrival).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t tx_bytes) {
  asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(tx_bytes) : "memory");
}

// One probe: true when the phase with parity `parity` has completed (acquire, cta scope).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Block until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// Block until the phase with parity `parity` has completed, acquiring at cluster scope: for a
// barrier whose transaction bytes other CTAs of the cluster complete (st.async), so that their
// bytes are visible to this thread's later loads.
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// Arrive on the barrier at the same smem offset in CTA `cta_id` of the cluster. Default
// semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive(cta_id): an explicit
// .release.cluster makes every arrival a cluster-scope fence, which measured ~0.7 us per
// k-block on H200 (it halved the multicast kernel's throughput). The consumer's shared-memory
// reads of the stage have completed (wgmma wait_group / in-order use) before it arrives.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta_id) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar), "r"(cta_id)
      : "memory");
}

}  // namespace ptx
}  // namespace finegemm
