// Split-K partial tiles through the workspace (FP8 and BF16 kernels): every split of a tile writes
// its fp32 fragment to the workspace; one split of the tile, the reducer, sums all partials in
// split order 0..S-1, so the result does not depend on which split arrived when.
//
// Self-announcing partials (as in NCCL's low-latency protocol, with the flag folded into the
// value): a word of the workspace holds either kPartialEmpty, a NaN bit pattern no partial is
// ever written as (writers store every NaN as the canonical 0x7fffffff), or a value that has
// landed. No split fences its writes before it takes its ticket; the reducer reloads the words
// it reads until none is empty. 32-bit accesses are single-copy atomic, so a word is either
// empty or the whole value. The workspace is empty between calls: it is allocated filled with
// kPartialEmpty, and the reducer empties every word it consumed (kernel boundaries order that
// against the next call's writes).
//
// The kThreads consumer threads are threadIdx.x 0 .. kThreads-1 (tid below).
// Partial layout: slot ((2 j + h) * kThreads + tid) of a split's slab (a float2) holds this
// thread's registers 4 j + 2 h + {0, 1} (row r0 + 8 h, columns 8 j + 2 (lane % 4) + {0, 1}); a
// warp's slots are 256 contiguous bytes. Rows past M are neither written nor read.
#pragma once

#include <cstdint>
#include <utility>

#include <finegemm/ptx/common.cuh>

namespace finegemm {
namespace epilogue {

using PartialSlot = float2;
constexpr uint32_t kPartialEmpty = 0x7ff0deadu;  // a NaN payload no partial is stored with
constexpr uint32_t kCanonicalNan = 0x7fffffffu;
// Slots per split of a BLOCK_M x BLOCK_N tile.
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
constexpr uint32_t kPartialSlots = BLOCK_M * BLOCK_N / 2;

// A partial's bits as stored: never kPartialEmpty (a NaN becomes the canonical one).
__device__ __forceinline__ uint32_t partial_bits(float v) { return v != v ? kCanonicalNan : __float_as_uint(v); }

template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kNumAcc>
__device__ __forceinline__ void write_split_partial(const float (&acc)[kNumAcc], PartialSlot* mine, bool row0_ok,
                                                    bool row1_ok) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  const uint32_t tid = threadIdx.x;  // read here, not passed: ptxas rematerializes it (see below)
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
#pragma unroll
    for (uint32_t h = 0; h < 2; ++h) {
      if (h == 0 ? row0_ok : row1_ok)
        ptx::st_relaxed_gpu_v2_b32(mine + (2 * j + h) * kThreads + tid, partial_bits(acc[4 * j + 2 * h + 0]),
                                   partial_bits(acc[4 * j + 2 * h + 1]));
    }
  }
}

// A slot as loaded (raw bits: kPartialEmpty until the writer's value lands).
struct PartialWords {
  uint32_t w0, w1;
};

__device__ __forceinline__ void load_partial_slot(const PartialSlot* p, PartialWords& w) {
  ptx::ld_relaxed_gpu_v2_b32(p, w.w0, w.w1);
}

__device__ __forceinline__ float partial_word_value(uint32_t w) { return __uint_as_float(w); }

// Pause between polls of words not yet written (their writers are still in their k-loop): fewer
// loads hammering the L2 lines those writers are about to store.
__device__ __forceinline__ void partial_poll_backoff() { __nanosleep(64); }

// Waits until none of slots p[i * kStride] (even i: row0_ok, odd: row1_ok) is empty, keeping no
// value: for the wide tiles, whose accumulators leave no registers for a split's words. A slot seen
// non-empty stays so (only its reader empties it), so the values can be loaded afterwards.
template <uint32_t kNumSlots, uint32_t kStride>
__device__ __forceinline__ void wait_partial_slots(const PartialSlot* p, bool row0_ok, bool row1_ok) {
  bool arrived = true;
  do {
    if (!arrived) partial_poll_backoff();
    arrived = true;
#pragma unroll
    for (uint32_t i = 0; i < kNumSlots; ++i) {
      if (i % 2 == 0 ? row0_ok : row1_ok) {
        PartialWords w;
        load_partial_slot(p + i * kStride, w);
        arrived &= w.w0 != kPartialEmpty && w.w1 != kPartialEmpty;
      }
    }
  } while (!__all_sync(0xffffffffu, arrived));
}

// Empties a slot this thread has read, for the next call. A weak store: nothing in this call reads
// the slot again, and the kernel boundary orders it before the next call's writes (a strong store
// here kept ptxas from issuing the next strong loads before it: a round trip per slot or batch).
template <int32_t kOffset = 0>
__device__ __forceinline__ void empty_partial_slot(PartialSlot* p) {
  asm volatile("st.global.v2.b32 [%0+%1], {%2, %2};\n" ::"l"(p), "n"(kOffset), "r"(kPartialEmpty));
}

// A slot known not to be empty (wait_partial_slots): its words, and the slot emptied (each reader
// empties exactly the slots it read: no barrier between readers).
__device__ __forceinline__ void take_partial_slot(PartialSlot* p, PartialWords& w) {
  load_partial_slot(p, w);
  empty_partial_slot(p);
}

// acc += the partials of kBatch consecutive splits (slot i of split u at p[u * kSplitStride +
// i * kThreads]), in split order, once none of their slots is empty (one retry loop for the batch),
// and those slots emptied.
// The loads take immediate offsets from p (index_sequence below): with computed addresses ptxas
// kept one per slot live across the retry loop, and bm128 bn32 spilled.
template <uint32_t kBatch, uint32_t kNumChunks, uint32_t kThreads, uint32_t kSplitStride, uint32_t kNumAcc,
          uint32_t... kIdx>
__device__ __forceinline__ void take_and_add_partials(float (&acc)[kNumAcc], const PartialSlot* p, bool row0_ok,
                                                      bool row1_ok, std::integer_sequence<uint32_t, kIdx...>) {
  constexpr uint32_t kSlots = 2 * kNumChunks;  // slot 2 j + h: chunk j, row half h; index kIdx = u * kSlots + i
  static_assert(sizeof...(kIdx) == kBatch * kSlots, "one index per slot");
  PartialWords w[kBatch * kSlots];
  auto ok = [&](uint32_t idx) { return (idx % kSlots) % 2 == 0 ? row0_ok : row1_ok; };
  auto load_all = [&]() {
    ((ok(kIdx) ? ptx::ld_relaxed_gpu_v2_b32<static_cast<int32_t>(
                     sizeof(PartialSlot) * ((kIdx / kSlots) * kSplitStride + (kIdx % kSlots) * kThreads))>(
                     p, w[kIdx].w0, w[kIdx].w1)
               : void()),
     ...);
  };
  auto arrived = [&]() {
    bool all = true;
#pragma unroll
    for (uint32_t idx = 0; idx < kBatch * kSlots; ++idx)
      all &= !ok(idx) || (w[idx].w0 != kPartialEmpty && w[idx].w1 != kPartialEmpty);
    return all;
  };
  load_all();
  while (!__all_sync(0xffffffffu, arrived())) {
    partial_poll_backoff();
    load_all();
  }
  // Read: empty them for the next call (immediate offsets from p, as the loads).
  ((ok(kIdx) ? empty_partial_slot<static_cast<int32_t>(
                   sizeof(PartialSlot) * ((kIdx / kSlots) * kSplitStride + (kIdx % kSlots) * kThreads))>(
                   const_cast<PartialSlot*>(p))
             : void()),
   ...);
#pragma unroll
  for (uint32_t u = 0; u < kBatch; ++u) {
#pragma unroll
    for (uint32_t j = 0; j < kNumChunks; ++j) {
      const PartialWords& lo = w[u * kSlots + 2 * j];
      const PartialWords& hi = w[u * kSlots + 2 * j + 1];
      if (row0_ok) {
        acc[4 * j + 0] += partial_word_value(lo.w0);
        acc[4 * j + 1] += partial_word_value(lo.w1);
      }
      if (row1_ok) {
        acc[4 * j + 2] += partial_word_value(hi.w0);
        acc[4 * j + 3] += partial_word_value(hi.w1);
      }
    }
  }
}

// acc = sum over s = 0..num_splits-1 of split s's partial (slab: split 0's; kSplitStride slots
// between splits), added in split order, and every slot read emptied for the next call. The loads of
// kUnroll consecutive splits are issued before their adds: a loop that adds each split's loads
// before loading the next waits one L2 round trip per split (~1 us of a ~8 us call at S = 14,
// benchmarks/NOTES.md v0.28); kUnroll: what the kernel's registers leave for them. Only for tiles
// up to 64 columns (kNumChunks <= 8), where the time is: wider tiles, whose accumulators already
// fill the registers, wait for a split (wait_partial_slots) and then load it chunk by chunk.
template <uint32_t kNumChunks, uint32_t kThreads, uint32_t kSplitStride, uint32_t kUnroll = (kNumChunks <= 4 ? 4 : 2),
          uint32_t kNumAcc>
__device__ __forceinline__ void sum_split_partials(float (&acc)[kNumAcc], PartialSlot* slab, uint32_t num_splits,
                                                   bool row0_ok, bool row1_ok) {
  static_assert(kNumAcc == 4 * kNumChunks, "wgmma D fragment");
  static_assert(kNumChunks <= 8, "wide tiles keep their kernel's own loop (see above)");
  constexpr uint32_t kSlots = 2 * kNumChunks;  // this thread's slots per split: (chunk j, row half h) at 2 j + h
#pragma unroll
  for (uint32_t i = 0; i < kNumAcc; ++i) acc[i] = 0.0f;
  PartialSlot* mine = slab + threadIdx.x;
  uint32_t s = 0;
#pragma unroll 1  // one batch's registers at a time
  for (; s + kUnroll <= num_splits; s += kUnroll)
    take_and_add_partials<kUnroll, kNumChunks, kThreads, kSplitStride>(
        acc, mine + s * kSplitStride, row0_ok, row1_ok, std::make_integer_sequence<uint32_t, kUnroll * kSlots>{});
#pragma unroll 1
  for (; s < num_splits; ++s)
    take_and_add_partials<1, kNumChunks, kThreads, kSplitStride>(acc, mine + s * kSplitStride, row0_ok, row1_ok,
                                                                 std::make_integer_sequence<uint32_t, kSlots>{});
}

// acc += one split's partial, as loaded into v[chunk][row half] (the slot layout above).
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

}  // namespace epilogue
}  // namespace finegemm
