// TMA (cp.async.bulk.tensor) wrappers for 2-D tiled tensor maps. The tensor map is a
// `const __grid_constant__ CUtensorMap` kernel parameter; pass its address. Coordinates are
// in elements, innermost first: (c0 = inner index, c1 = outer index). Out-of-bounds box
// elements are zero-filled on loads (and still counted in complete_tx bytes: the FULL box) and
// dropped on stores.
#pragma once

#include <cstdint>

#include <finegemm/ptx/diag.cuh>

namespace finegemm {
namespace ptx {

__device__ __forceinline__ void tma_prefetch_desc(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// Load a box into shared memory at `dst` (shared address, 128-byte aligned; 1024 for 128B
// swizzle); completion adds the box bytes to mbarrier `bar`'s transaction count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0,
                                            int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same through a 3-D map (coordinates innermost first).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// The 3-D load with an L2 cache hint (a createpolicy value).
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0, int32_t c1,
                                                 int32_t c2, uint64_t cache_policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "l"(cache_policy)
      : "memory");
}

// Same with an L2 cache hint (a createpolicy value, e.g. evict-first/evict-last).
__device__ __forceinline__ void tma_load_2d_hint(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0,
                                                 int32_t c1, uint64_t cache_policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "l"(cache_policy)
      : "memory");
}

// L2 eviction policies for tma_load_2d_hint: data read once (evict first) or re-read by other CTAs
// soon (evict last).
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// The producers' L2 rule (both kernel families; benchmarks/NOTES.md v0.31, v0.32): B loads
// evict-first and A evict-last when
//   - every B tile is read only by CTAs that run at the same time: at most 2 m-blocks (masked: per
//     group of Mmax rows), or a dense problem whose tiles all run in one wave (`one_wave`), and
//   - A (all groups' rows x K) is at most kL2HintMaxABytes, and
//   - B (all groups) is at most kL2HintMaxBBytes.
// A is then kept for the n-blocks that re-read it, where the streamed B and the dirty lines the
// bench's flush leaves would evict it: -3 to -18% on the M <= 128 shapes, -1.4 to -14% at M = 512.
// Where B is re-read by later waves (M = 512-1024, K = 512: +6 to +14%), A does not fit the L2 as
// evict-last (masked G = 32: +4 to +17%) or B is a long stream (the 1.85 GB output head: +2 to
// +8%), the default policy is faster.
constexpr uint64_t kL2HintMaxABytes = 8ull << 20;    // a sixth of the H200's 50 MB L2
constexpr uint64_t kL2HintMaxBBytes = 512ull << 20;  // measured: 235 MB gains, 1.85 GB loses

__device__ __forceinline__ bool use_skinny_l2_hints(uint32_t num_m_blocks, bool one_wave, uint64_t a_bytes,
                                                    uint64_t b_bytes) {
  return !diag::kNoL2Hints && (num_m_blocks <= 2 || one_wave) && a_bytes <= kL2HintMaxABytes &&
         b_bytes <= kL2HintMaxBBytes;
}

// tma_load_2d with `policy` when `hinted`, else with the default L2 policy.
__device__ __forceinline__ void tma_load_2d_policy(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0,
                                                   int32_t c1, bool hinted, uint64_t policy) {
  if (hinted) {
    tma_load_2d_hint(dst, tmap, bar, c0, c1, policy);
  } else {
    tma_load_2d(dst, tmap, bar, c0, c1);
  }
}

// A 4-D map's box (coordinates innermost first), with `policy` when `hinted`: the FP8 kernel's
// grouped B boxes (kBGroup), several k-blocks of every row of a tile in one request.
__device__ __forceinline__ void tma_load_4d_policy(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0,
                                                   int32_t c1, int32_t c2, int32_t c3, bool hinted, uint64_t policy) {
  if (hinted) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}

// tma_load_3d with `policy` when `hinted`, else with the default L2 policy.
__device__ __forceinline__ void tma_load_3d_policy(uint32_t dst, const void* tmap, uint32_t bar, int32_t c0,
                                                   int32_t c1, int32_t c2, bool hinted, uint64_t policy) {
  if (hinted) {
    tma_load_3d_hint(dst, tmap, bar, c0, c1, c2, policy);
  } else {
    tma_load_3d(dst, tmap, bar, c0, c1, c2);
  }
}

// Multicast load: the box lands at the same smem offset in every CTA of `cta_mask` (cluster),
// and each destination CTA's barrier at offset `bar` receives the box bytes.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const void* tmap, uint32_t bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

// Store a box from shared memory (`src`, shared address) to global. Issue
// fence_proxy_async_shared() (every writing thread) + a barrier before it when the smem tile
// was written with ordinary stores.
__device__ __forceinline__ void tma_store_2d(const void* tmap, uint32_t src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}

// 3-D forms (c2 = the outermost index, e.g. a group): a box never crosses into the next c2 slice,
// so rows past a group's end are dropped like any out-of-bounds element.
__device__ __forceinline__ void tma_store_3d(const void* tmap, uint32_t src, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

// global[box] += shared[box] element-wise (fp32 for an fp32 map), performed atomically per
// element at L2: the async counterpart of "load C, add, store D" when C is D.
__device__ __forceinline__ void tma_reduce_add_3d(const void* tmap, uint32_t src, int32_t c0, int32_t c1,
                                                  int32_t c2) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

// Fetch a box of the tensor map into L2 without waiting (a hint: no completion, no shared memory;
// out-of-bounds parts are ignored).
__device__ __forceinline__ void tma_prefetch_l2_3d(const void* tmap, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Wait until at most kPending committed store groups are still reading their smem source.
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Wait until at most kPending committed store groups are incomplete (writes performed).
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace ptx
}  // namespace finegemm
