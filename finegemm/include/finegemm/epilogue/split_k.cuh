// Split-K partial tiles (FP8 and BF16 kernels): every split of a tile writes its fp32 fragment to
// the workspace; the CTA that finishes last sums all partials in split order 0..S-1, so the
// result does not depend on which split arrived when.
//
// The kThreads consumer threads are threadIdx.x 0 .. kThreads-1 (tid below).
// Partial layout: float2 index ((2 j + h) * kThreads + tid) of a split's slab holds this thread's
// registers 4 j + 2 h + {0, 1} (row r0 + 8 h, columns 8 j + 2 (lane % 4) + {0, 1}); a warp's
// float2 accesses are 256 contiguous bytes. Rows past M are neither written nor read.
#pragma once

#include <cstdint>

#include <finegemm/ptx/common.cuh>
#include <finegemm/ptx/mbarrier.cuh>

namespace finegemm {
namespace epilogue {

template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kNumAcc>
__device__ __forceinline__ void write_split_partial(const float (&acc)[kNumAcc], float2* mine, bool row0_ok,
                                                    bool row1_ok) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  const uint32_t tid = threadIdx.x;  // read here, not passed: ptxas rematerializes it (see below)
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
    if (row0_ok) __stcg(mine + (2 * j + 0) * kThreads + tid, make_float2(acc[4 * j + 0], acc[4 * j + 1]));
    if (row1_ok) __stcg(mine + (2 * j + 1) * kThreads + tid, make_float2(acc[4 * j + 2], acc[4 * j + 3]));
  }
}

// acc += one split's partial, as loaded into v[chunk][row half] (the layout above).
template <uint32_t kNumChunks, uint32_t kNumAcc>
__device__ __forceinline__ void add_partial_fragment(float (&acc)[kNumAcc], const float2 (&v)[kNumChunks][2]) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
    acc[4 * j + 0] += v[j][0].x;
    acc[4 * j + 1] += v[j][0].y;
    acc[4 * j + 2] += v[j][1].x;
    acc[4 * j + 3] += v[j][1].y;
  }
}

// acc = sum over s = 0..num_splits-1 of split s's partial (slab: split 0's; kSplitStride float2
// between splits), added in split order. The loads of kUnroll consecutive splits are issued before
// their adds: a loop that adds each split's loads before loading the next waits one L2 round trip
// per split (~1 us of a ~8 us call at S = 14, benchmarks/NOTES.md v0.28). kUnroll keeps the loads
// in flight to 64 registers. Only for tiles up to 64 columns (kNumChunks <= 8), where the time is:
// the kernels keep their per-chunk load-and-add loop for wider tiles, whose registers the
// accumulators already fill (this helper, even with that same loop inside, made bm128 x bn208
// fp32 + C spill: ptxas at the register limit).
template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kSplitStride, uint32_t kNumAcc>
__device__ __forceinline__ void sum_split_partials(float (&acc)[kNumAcc], const float2* slab, uint32_t num_splits,
                                                   bool row0_ok, bool row1_ok) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  static_assert(kNumChunks <= 8, "wide tiles keep their kernel's own loop (see above)");
  constexpr uint32_t kUnroll = kNumChunks <= 4 ? 4 : 2;
#pragma unroll
  for (uint32_t i = 0; i < kNumAcc; ++i) acc[i] = 0.0f;
  const uint32_t tid = threadIdx.x;
  auto add = [&](const float2 (&v)[kNumChunks][2]) { add_partial_fragment(acc, v); };
  auto load = [&](uint32_t s, float2 (&v)[kNumChunks][2]) {
    const float2* part = slab + static_cast<size_t>(s) * kSplitStride;
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j) {
      // Rows past M: zeros (never stored; the select keeps the loads unconditional in registers).
      v[j][0] = row0_ok ? __ldcg(part + (2 * j + 0) * kThreads + tid) : make_float2(0.0f, 0.0f);
      v[j][1] = row1_ok ? __ldcg(part + (2 * j + 1) * kThreads + tid) : make_float2(0.0f, 0.0f);
    }
  };
  uint32_t s = 0;
  for (; s + kUnroll <= num_splits; s += kUnroll) {
    float2 v[kUnroll][kNumChunks][2];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) load(s + u, v[u]);
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) add(v[u]);
  }
  for (; s < num_splits; ++s) {
    float2 v[kNumChunks][2];
    load(s, v);
    add(v);
  }
}

// Split-K through distributed shared memory (the splits of a tile are one cluster, split s = CTA
// rank s, one tile per CTA): every split leaves its fragment in its own shared memory (`part`: the
// same float2 layout as the workspace slab, every row); after the cluster barrier the rows are
// shared out among the splits (gather_cluster_split_partials). No workspace, counter or L2 round
// trip.
// kVec4 (the reduce-scatter form only, FINEGEMM_DIAG_SPLIT_PARTIAL_F4): float4 index (j * kThreads
// + tid) holds the thread's registers 4 j .. 4 j + 3 (both row halves of chunk j), so a peer's
// fragment is half as many distributed-shared-memory loads, 16 bytes each.
template <uint32_t kNumChunks, uint32_t kThreads, bool kVec4 = false, uint32_t kNumAcc>
__device__ __forceinline__ void write_split_partial_smem(const float (&acc)[kNumAcc], float2* part) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  const uint32_t tid = threadIdx.x;
  if constexpr (kVec4) {
    float4* part4 = reinterpret_cast<float4*>(part);
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j)
      part4[j * kThreads + tid] = make_float4(acc[4 * j + 0], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
    return;
  }
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
    part[(2 * j + 0) * kThreads + tid] = make_float2(acc[4 * j + 0], acc[4 * j + 1]);
    part[(2 * j + 1) * kThreads + tid] = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// The split cluster's barrier after every split has written its partial (write_split_partial_smem),
// before any reads a peer's: the consumers' part (kThreads threads on named barrier 1) and the
// producer warpgroup's (publish_split_partials_producer: it publishes nothing but must arrive too).
// FINEGEMM_DIAG_SPLIT_CLUSTER_ONE_FENCE: the named barrier orders every consumer's stores before
// warp 0's release arrive (cumulative), so the other warps arrive relaxed: one MEMBAR.ALL.GPU per
// CTA instead of one per warp. Default: every thread's release arrive (ptx::cluster_sync).
template <uint32_t kThreads>
__device__ __forceinline__ void publish_split_partials() {
  if constexpr (diag::kSplitClusterOneFence) {
    ptx::named_barrier_sync(1, kThreads);
    if (threadIdx.x / 32 == 0) {
      ptx::cluster_arrive_release();
    } else {
      ptx::cluster_arrive_relaxed();
    }
    ptx::cluster_wait();
  } else {
    ptx::cluster_sync();
  }
}

__device__ __forceinline__ void publish_split_partials_producer() {
  if constexpr (diag::kSplitClusterOneFence) {
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait();
  } else {
    ptx::cluster_sync();
  }
}

// One peer's partial into v: `remote` is this thread's float2 in the peer's `part` (from
// ptx::map_shared_rank; the layout above).
template <uint32_t kNumChunks, uint32_t kThreads, bool kVec4 = false>
__device__ __forceinline__ void load_peer_partial(float2 (&v)[kNumChunks][2], uint32_t remote) {
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
    if constexpr (kVec4) {
      const float4 q = ptx::ld_shared_cluster_f4(remote + j * kThreads * 16u);
      v[j][0] = make_float2(q.x, q.y);
      v[j][1] = make_float2(q.z, q.w);
      continue;
    }
    v[j][0] = ptx::ld_shared_cluster_f2(remote + (2 * j + 0) * kThreads * 8u);
    v[j][1] = ptx::ld_shared_cluster_f2(remote + (2 * j + 1) * kThreads * 8u);
  }
}

// Reduce-scatter form (both kernels): every split writes its fragment to its shared memory and
// the warps of the tile are shared out among the splits, each summing its rows' partials from all
// splits in split order (`self`'s own from its registers) and storing them: the peers' bytes a CTA
// reads drop by the split count, and no CTA reads more than its share (split 0 reading everything
// measured only -3 to -4% at 8 splits, v0.56). The same float adds in the same order as the
// workspace path: bitwise its result.
// kBatch: splits whose loads are in flight together, what the registers leave beside the tile's
// sums and this split's own copy (the FP8 kernel's wide tiles take one at a time: two spilled at
// bm128 bn64 k-batch 4).
template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kBatch = (kNumChunks <= 4 ? 8 : 2), bool kVec4 = false,
          uint32_t kNumAcc>
__device__ __forceinline__ void gather_cluster_split_partials(float (&acc)[kNumAcc], uint32_t part_addr,
                                                              uint32_t num_splits, uint32_t self) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  float own[kNumAcc];
#pragma unroll
  for (uint32_t i = 0; i < kNumAcc; ++i) {
    own[i] = acc[i];
    acc[i] = 0.0f;
  }
  const uint32_t mine = part_addr + threadIdx.x * (kVec4 ? 16u : 8u);
  for (uint32_t r0 = 0; r0 < num_splits; r0 += kBatch) {
    float2 v[kBatch][kNumChunks][2];
#pragma unroll
    for (uint32_t p = 0; p < kBatch; ++p) {
      const uint32_t r = r0 + p;
      if (r >= num_splits) break;
      if (r == self) continue;
      load_peer_partial<kNumChunks, kThreads, kVec4>(v[p], ptx::map_shared_rank(mine, r));
    }
#pragma unroll
    for (uint32_t p = 0; p < kBatch; ++p) {
      const uint32_t r = r0 + p;
      if (r >= num_splits) break;
      if (r == self) {
#pragma unroll
        for (uint32_t i = 0; i < kNumAcc; ++i) acc[i] += own[i];
      } else {
        add_partial_fragment(acc, v[p]);
      }
    }
  }
}

// Push form (the FP8 kernel's default; the BF16 kernel's under FINEGEMM_DIAG_BF16_SPLIT_PUSH): the
// same owners as the reduce-scatter form (consumer warp w's 16 rows: split w % S), but the partials
// travel the other way. An owner whose
// last wgmma is done tells every peer that its ring is free (one remote mbarrier arrive per
// peer, on the peer's ready barrier); a peer, once every owner has said so, pushes each of its
// warp fragments into the owner's ring with st.async, whose bytes complete on the owner's receive
// barrier; the owner waits on that barrier alone and adds the splits in split order from zero, its
// own from registers: the same float adds in the same order as the pull form, bitwise its sum.
// What the pull form pays and this one does not: the release barrier over every thread of the
// cluster (~1100 cycles, NOTES v1.14) and the remote loads' round trip (1345-1690 cycles, v1.12).
// What it adds: one remote arrive each way of a one-way trip.
//
// Landing zone (the owner's ring from its start): slot (i, from) holds the fragment of the
// owner's i-th warp (w = owner + i S) from sender `from` (peers in rank order, the owner left
// out), one consumer warp's fragment each: lane l's chunk j (acc[4 j .. 4 j + 3]) at
// (j * 32 + l) * 16 bytes, so a warp's 16-byte stores and loads of one chunk are 512
// contiguous bytes.
template <uint32_t kNumChunks, uint32_t kNumWarps>
struct SplitPush {
  static constexpr uint32_t kWarpBytes = kNumChunks * 32 * 16;
  static constexpr uint32_t kMaxSplits = 8;  // the portable cluster size (the host's cap)

  // Consumer warps split `owner` owns.
  __host__ __device__ static constexpr uint32_t num_owned(uint32_t owner, uint32_t num_splits) {
    return owner < kNumWarps ? (kNumWarps - 1 - owner) / num_splits + 1 : 0;
  }
  // What split `self` receives: its receive barrier's transaction bytes.
  __host__ __device__ static constexpr uint32_t received_bytes(uint32_t self, uint32_t num_splits) {
    return num_owned(self, num_splits) * (num_splits - 1) * kWarpBytes;
  }
  // The landing zone at any split count up to kMaxSplits (split 0 owns the most), in whole 4 KB
  // (what follows it in the ring, the TMA-store staging, keeps its alignment).
  __host__ __device__ static constexpr uint32_t max_landing_bytes() {
    uint32_t most = 0;
    for (uint32_t s = 2; s <= kMaxSplits; ++s) most = received_bytes(0, s) > most ? received_bytes(0, s) : most;
    return (most + 4095) / 4096 * 4096;
  }
  // Owners whose "ring free" split `self` waits for before it pushes: every owner but itself
  // (the owners are splits 0 .. min(S, W) - 1). At least 1: a split with nothing to push
  // never waits on it.
  __device__ __forceinline__ static uint32_t ready_count(uint32_t self, uint32_t num_splits) {
    const uint32_t owners = num_splits < kNumWarps ? num_splits : kNumWarps;
    const uint32_t n = owners - (self < owners ? 1u : 0u);
    return n > 0 ? n : 1u;
  }
  __device__ __forceinline__ static uint32_t slot(uint32_t warp, uint32_t from, uint32_t owner, uint32_t num_splits) {
    return ((warp / num_splits) * (num_splits - 1) + (from < owner ? from : from - 1)) * kWarpBytes;
  }

  // Lane 0 of the producer warpgroup's last warp (idle in both kernels), after
  // the CTA barrier, off the path to the first k-block: the receive barrier (one arrival: its
  // expect_tx below) and the ready barrier (one arrival per owning peer), their init published
  // (fence.mbarrier_init), then the receive barrier's one phase armed with the bytes the peers
  // push. In thread 0 before the CTA barrier (v1.15) this took ~400 cycles of every split CTA's
  // path to its first tile (NOTES v1.15's trace: two inits, an integer division, the expect_tx).
  // Every thread of the CTA then arrives (relaxed) on the cluster barrier whose phase says "every
  // barrier of the cluster is initialized" (the init thread's after this): init_phase_arrive. Each
  // waits on it where it first needs it (hand_off; the producer warpgroup at its end).
  __device__ __forceinline__ static void init(uint32_t recv_bar, uint32_t ready_bar, uint32_t num_splits) {
    const uint32_t self = ptx::cluster_ctarank();
    ptx::mbar_init(recv_bar, 1);
    ptx::mbar_init(ready_bar, ready_count(self, num_splits));
    ptx::fence_mbarrier_init();
    ptx::fence_proxy_async_shared();
    ptx::mbar_arrive_expect_tx(recv_bar, received_bytes(self, num_splits));
  }
  // Every thread, after the CTA barrier: the init thread's init (kInitHere; false where thread 0 did
  // it before the barrier, FINEGEMM_DIAG_SPLIT_PUSH_INIT_AT_ENTRY), then the init phase's arrive.
  template <bool kInitHere = true>
  __device__ __forceinline__ static void init_phase_arrive(uint32_t recv_bar, uint32_t ready_bar, uint32_t num_splits) {
    if (kInitHere && threadIdx.x == kNumWarps * 32 + 96) init(recv_bar, ready_bar, num_splits);
    ptx::cluster_arrive_relaxed();
  }

  // Every consumer thread, once the CTA's wgmmas are done (after the consumers' named barrier):
  // lane p of warp 0 tells peer p that this split's ring is free, if this split owns any rows
  // (default arrive semantics, release at CTA scope, as a multicast consumer frees a stage its
  // peer then writes). A warp a peer owns then waits for every owner's word and pushes its
  // fragment (returns false: its part is done); an owned warp waits for its peers' bytes (acquire
  // at cluster scope) and returns true: gather next.
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static bool hand_off(const float (&acc)[kNumAcc], uint32_t self, uint32_t num_splits,
                                                  uint32_t landing, uint32_t recv_bar, uint32_t ready_bar) {
    ptx::cluster_wait();  // the init phase: the peers' barriers are initialized
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x / 32 == 0 && self < kNumWarps && lane < num_splits && lane != self)
      ptx::mbar_arrive_cluster(ready_bar, lane);
    if (warp % num_splits != self) {
      ptx::mbar_wait(ready_bar, 0);
      push(acc, self, num_splits, landing, recv_bar);
      return false;
    }
    ptx::mbar_wait_cluster(recv_bar, 0);
    return true;
  }

  // A warp this split does not own: its fragment into its owner's landing zone.
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void push(const float (&acc)[kNumAcc], uint32_t self, uint32_t num_splits,
                                              uint32_t landing, uint32_t recv_bar) {
    static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, owner = warp % num_splits;
    const uint32_t dst = ptx::map_shared_rank(landing + slot(warp, self, owner, num_splits) + lane * 16, owner);
    const uint32_t bar = ptx::map_shared_rank(recv_bar, owner);
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j)
      ptx::st_async_f4(dst + j * 32 * 16, acc[4 * j + 0], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3], bar);
  }

  // An owned warp, after the receive barrier's wait: acc = the splits' sum in split order.
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void gather(float (&acc)[kNumAcc], uint32_t self, uint32_t num_splits,
                                                uint32_t landing) {
    static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float own[kNumAcc];
#pragma unroll
    for (uint32_t i = 0; i < kNumAcc; ++i) {
      own[i] = acc[i];
      acc[i] = 0.0f;
    }
    for (uint32_t s = 0; s < num_splits; ++s) {
      if (s == self) {
#pragma unroll
        for (uint32_t i = 0; i < kNumAcc; ++i) acc[i] += own[i];
        continue;
      }
      const uint32_t src = landing + slot(warp, s, self, num_splits) + lane * 16;
      float4 v[kNumChunks];
#pragma unroll
      for (uint32_t j = 0; j < kNumChunks; ++j) v[j] = ptx::ld_shared_f4(src + j * 32 * 16);
#pragma unroll
      for (uint32_t j = 0; j < kNumChunks; ++j) {
        acc[4 * j + 0] += v[j].x;
        acc[4 * j + 1] += v[j].y;
        acc[4 * j + 2] += v[j].z;
        acc[4 * j + 3] += v[j].w;
      }
    }
  }
};

// Spread form (BF16 kernel: fp32 D without C, where spread_split_fits): every consumer warp of
// every split takes part, where the form above leaves the reduction to one warp per 16 rows (at 8
// splits and bm64: four warps of the cluster's 32, each loading 7 peers x the whole 16-row fragment
// back to back). The tile's partial is cut into units of one consumer warp's fragment: one 8-column
// chunk j and one row half h, i.e. 8 rows x 8 columns, a warp's 32 float2 of the layout above. Unit
// u = (w * kNumChunks + j) * 2 + h goes to cluster warp u mod W (cluster warp = split * warps per
// CTA + warp; W of them), which loads the unit's float2 from every split, its own included, and
// adds them in split order from zero (the workspace path's order: bitwise its sum). `store(row,
// col, sum)` gets the tile-relative row and first column of the lane's pair.
//
// One round only: a warp takes at most kSpreadUnits units, i.e. num_splits >= kNumChunks. With
// fewer splits a warp would chain a round trip per pair of units where the warp form issues a
// whole fragment's loads at once: at 2 splits the FP8 kernel's spread form measured +4% (fp32 D)
// to +39% (D += C) slower, and with C or in the FP8 kernel no gain held across two calls (NOTES
// v1.08), so only the BF16 kernel's fp32 D without C takes it.
constexpr uint32_t kSpreadUnits = 2;  // 4 spilled bm128 bn32 (168 registers) beside the warp form

template <uint32_t kNumChunks>
__device__ __forceinline__ bool spread_split_fits(uint32_t num_splits) {
  return 2 * kNumChunks <= kSpreadUnits * num_splits;
}

template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kMaxSplits = 8, typename Store>
__device__ __forceinline__ void spread_cluster_split_reduce(uint32_t part_addr, uint32_t num_splits, uint32_t split,
                                                            Store&& store) {
  constexpr uint32_t kWarps = kThreads / 32;
  constexpr uint32_t kUnits = kWarps * kNumChunks * 2;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t workers = num_splits * kWarps;
  const uint32_t u0 = split * kWarps + warp;
  float2 v[kSpreadUnits][kMaxSplits];
#pragma unroll
  for (uint32_t b = 0; b < kSpreadUnits; ++b) {
    const uint32_t u = u0 + b * workers;
    if (u >= kUnits) break;
    const uint32_t w = u / (2 * kNumChunks), j = (u / 2) % kNumChunks, h = u % 2;
    const uint32_t addr = part_addr + ((2 * j + h) * kThreads + w * 32 + lane) * 8u;
#pragma unroll
    for (uint32_t s = 0; s < kMaxSplits; ++s) {
      if (s < num_splits) v[b][s] = ptx::ld_shared_cluster_f2(ptx::map_shared_rank(addr, s));
    }
  }
#pragma unroll
  for (uint32_t b = 0; b < kSpreadUnits; ++b) {
    const uint32_t u = u0 + b * workers;
    if (u >= kUnits) break;
    const uint32_t w = u / (2 * kNumChunks), j = (u / 2) % kNumChunks, h = u % 2;
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (uint32_t s = 0; s < kMaxSplits; ++s) {
      if (s < num_splits) {
        sum.x += v[b][s].x;
        sum.y += v[b][s].y;
      }
    }
    store(w * 16 + lane / 4 + 8 * h, 8 * j + 2 * (lane % 4), sum);
  }
}

}  // namespace epilogue
}  // namespace finegemm
