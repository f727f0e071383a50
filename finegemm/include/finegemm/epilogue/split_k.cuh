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
template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kNumAcc>
__device__ __forceinline__ void write_split_partial_smem(const float (&acc)[kNumAcc], float2* part) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  const uint32_t tid = threadIdx.x;
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
    part[(2 * j + 0) * kThreads + tid] = make_float2(acc[4 * j + 0], acc[4 * j + 1]);
    part[(2 * j + 1) * kThreads + tid] = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// One peer's partial into v: `remote` is this thread's float2 in the peer's `part` (from
// ptx::map_shared_rank; the layout above).
template <uint32_t kNumChunks, uint32_t kThreads>
__device__ __forceinline__ void load_peer_partial(float2 (&v)[kNumChunks][2], uint32_t remote) {
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
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
template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kBatch = (kNumChunks <= 4 ? 8 : 2), uint32_t kNumAcc>
__device__ __forceinline__ void gather_cluster_split_partials(float (&acc)[kNumAcc], uint32_t part_addr,
                                                              uint32_t num_splits, uint32_t self) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  float own[kNumAcc];
#pragma unroll
  for (uint32_t i = 0; i < kNumAcc; ++i) {
    own[i] = acc[i];
    acc[i] = 0.0f;
  }
  const uint32_t mine = part_addr + threadIdx.x * 8u;
  for (uint32_t r0 = 0; r0 < num_splits; r0 += kBatch) {
    float2 v[kBatch][kNumChunks][2];
#pragma unroll
    for (uint32_t p = 0; p < kBatch; ++p) {
      const uint32_t r = r0 + p;
      if (r >= num_splits) break;
      if (r == self) continue;
      load_peer_partial<kNumChunks, kThreads>(v[p], ptx::map_shared_rank(mine, r));
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

// Split-K through distributed shared memory, push form (the BF16 kernel's split clusters: the
// splits of a tile are one cluster, split s = CTA rank s, one unit per CTA). The tile's rows are
// dealt out in slices of 8: slice q = 2 w + h is row r0 + 8 h of every lane of consumer warp w
// (the fragment half acc[4 j + 2 h + {0, 1}]), and split q % S owns it: sums and stores it. As
// soon as its last wgmma is done, a split copies every slice it does not own into its own idle
// ring and sends it whole to the owner's receive buffer (one bulk copy per slice, its bytes
// completing on the owner's receive barrier); an owner waits on its own barrier for its slices
// from every other split and adds the partials in split order 0 .. S-1, its own from registers:
// the workspace path's float adds in its order, bitwise its sum. No cluster barrier and no
// remote load on the way (benchmarks/NOTES.md v0.77; 16-byte st.async messages instead, each
// completing on the owner's barrier, measured 18-28% slower than the pull form above).
//
// Receive buffer: every split reserves recv_bytes(S) (what split 0, which owns the most, needs;
// the host mirrors it: heuristics/sm90_bf16_gemm.py split_recv_bytes); slot (i, from) holds
// sender `from`'s copy of the owner's i-th slice (slice q = owner + i S), 32 lanes x kLaneBytes.
template <uint32_t kNumChunks, uint32_t kNumWarps>
struct ClusterSplitPush {
  static_assert(kNumChunks % 2 == 0, "two 8-column chunks per 16-byte store");
  static constexpr uint32_t kNumSlices = 2 * kNumWarps;
  static constexpr uint32_t kLaneBytes = kNumChunks * 2 * 4;  // one row's two columns per chunk
  static constexpr uint32_t kSliceBytes = 32 * kLaneBytes;
  static constexpr uint32_t kStagingBytes = kNumSlices * kSliceBytes;  // the sender's copies, in its ring

  __host__ __device__ static constexpr uint32_t num_owned(uint32_t owner, uint32_t num_splits) {
    return owner < kNumSlices ? (kNumSlices - 1 - owner) / num_splits + 1 : 0;
  }
  __host__ __device__ static constexpr uint32_t recv_bytes(uint32_t num_splits) {
    return num_owned(0, num_splits) * (num_splits - 1) * kSliceBytes;
  }
  // Transaction bytes split `self` receives (its receive barrier's count).
  __device__ __forceinline__ static uint32_t expected_bytes(uint32_t self, uint32_t num_splits) {
    return num_owned(self, num_splits) * (num_splits - 1) * kSliceBytes;
  }
  __device__ __forceinline__ static uint32_t slot(uint32_t q, uint32_t from, uint32_t owner, uint32_t num_splits) {
    return ((q / num_splits) * (num_splits - 1) + (from < owner ? from : from - 1)) * kSliceBytes;
  }

  // Sends the halves of warp `warp`'s fragment that split `self` does not own (called by every
  // lane of the warp, after a barrier that makes `staging` idle: kStagingBytes there); returns the
  // halves it owns (bit h). recv_buf / recv_bar: this CTA's shared addresses of the buffer and
  // barrier (every split has them at the same offsets).
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static uint32_t push(const float (&acc)[kNumAcc], uint32_t warp, uint32_t lane,
                                                  uint32_t self, uint32_t num_splits, uint32_t recv_buf,
                                                  uint32_t recv_bar, uint32_t staging) {
    static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
    uint32_t owned = 0;
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      const uint32_t q = 2 * warp + h;
      if (q % num_splits == self) {
        owned |= 1u << h;
        continue;
      }
      const uint32_t src = staging + q * kSliceBytes + lane * kLaneBytes;
#pragma unroll
      for (uint32_t j = 0; j < kNumChunks; j += 2) {
        ptx::st_shared_v4(src + j * 8, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], acc[4 * j + 4 + 2 * h],
                          acc[4 * j + 4 + 2 * h + 1]);
      }
    }
    if (owned == 3u) return owned;
    ptx::fence_proxy_async_shared();  // the copies are read by the bulk-copy engine (async proxy)
    __syncwarp();
    if (lane == 0) {
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h) {
        if ((owned >> h & 1u) != 0) continue;
        const uint32_t q = 2 * warp + h;
        const uint32_t owner = q % num_splits;
        ptx::bulk_copy_to_peer(ptx::map_shared_rank(recv_buf + slot(q, self, owner, num_splits), owner),
                               staging + q * kSliceBytes, kSliceBytes, ptx::map_shared_rank(recv_bar, owner));
      }
    }
    return owned;
  }

  // The owned halves of warp `warp`'s fragment become the tile's sums (after the receive
  // barrier's wait); the other half is left as it is (not stored). Two chunks at a time, every
  // split's 16 bytes in split order: few registers beside the accumulators.
  template <uint32_t kNumAcc>
  __device__ __forceinline__ static void gather(float (&acc)[kNumAcc], uint32_t owned, uint32_t warp, uint32_t lane,
                                                uint32_t self, uint32_t num_splits, uint32_t recv_buf) {
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      if ((owned >> h & 1u) == 0) continue;
      const uint32_t q = 2 * warp + h;
      const uint32_t lane_addr = recv_buf + lane * kLaneBytes;
#pragma unroll
      for (uint32_t j = 0; j < kNumChunks; j += 2) {
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (uint32_t s = 0; s < num_splits; ++s) {
          float4 v;
          if (s == self) {
            v = make_float4(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], acc[4 * j + 4 + 2 * h], acc[4 * j + 4 + 2 * h + 1]);
          } else {
            v = ptx::ld_shared_v4(lane_addr + slot(q, s, self, num_splits) + j * 8);
          }
          sum.x += v.x;
          sum.y += v.y;
          sum.z += v.z;
          sum.w += v.w;
        }
        acc[4 * j + 2 * h] = sum.x;
        acc[4 * j + 2 * h + 1] = sum.y;
        acc[4 * j + 4 + 2 * h] = sum.z;
        acc[4 * j + 4 + 2 * h + 1] = sum.w;
      }
    }
  }
};

}  // namespace epilogue
}  // namespace finegemm
