// SM90 FP8 GEMM, "1D2D" scaling recipe (1,128,128):
//   D[m, n] = C[m, n] + sum_kb sfa[m, kb] * sfb[n / 128, kb] * (A[m, kb-block] . B[n, kb-block])
// A fp8 e4m3 [M, K] K-major, B fp8 e4m3 [N, K] K-major, sfa fp32 MN-major (element (kb, m) at
// kb * sfa_ld + m; read through TMA), sfb fp32 [ceil(N/128), ceil(K/128)] contiguous (copied into
// each stage by the scale warp, below; the bn224 loop reads it from global), D bf16 or fp32
// [M, N] (row stride ldd), C fp32 (only with fp32 D).
//
// Persistent, warp-specialized kernel:
//   warpgroups 0 .. kNumConsumerWG-1 : consumers (math; BLOCK_M / 64 = 1, 2 or 3). Each owns 64 rows of the BLOCK_M tile
//                                      and issues wgmma m64nBLOCK_Nk32 (4 per 128-wide k-block),
//                                      then promotes the k-block's partial sums into FP32
//                                      registers with sfa * sfb.
//   warpgroup kNumConsumerWG          : producer. One thread issues the TMA loads of A, B and
//                                      sfa into a ring of kNumStages shared-memory stages; with
//                                      1D2D scaling (tiles up to 208 columns: kScaleWarp) its
//                                      second warp (the scale warp) writes each
//                                      stage's B scales (kSpan fp32) into the stage, so the
//                                      consumers never wait on a global load: their first B-scale
//                                      load of a tile sat ~850 cycles in front of its first wgmma
//                                      (benchmarks/NOTES.md v0.14).
// Barriers per stage: full (count 1: the producer's arrive.expect_tx, plus the stage's TMA
// bytes; count 2 with kScaleWarp: also the scale warp's arrive after its stores) and empty (count =
// number of consumer warps: lane 0 of every consumer warp arrives once its warpgroup's wgmmas on
// the stage have completed and its sfa / sfb reads are done).
// Producer and consumers walk the same sequence of (work unit, k-block), so they agree on the
// (stage, phase) of every k-block; the phase flips each time the ring index wraps.
//
// Epilogue: with kTmaStore (bf16 D, no C, no split-K) and the host's kFlagTmaStore, each consumer
// warpgroup writes its 64 x BLOCK_N bf16 fragment into its own swizzled staging buffer (stmatrix)
// and one thread TMA-stores it (epilogue/tma_store_bf16.cuh); the store overlaps the next tile's
// main loop (the buffer is only waited for before its next reuse). Recipe (1,1,128) with kTmaStore:
// fp32 D leaves through a ring of column-box buffers and TMA stores, or TMA reduce-adds when C is D
// (epilogue/tma_store_fp32.cuh; the host sets kFlagTmaStore only then, or without C). Otherwise:
// direct register -> global stores. With C (recipe (1,1,128)) the producer prefetches each tile's C
// boxes into L2 over the k-blocks before the tile's last few (TmaStoreFp32::Prefetch): through D's
// map for the reduce-add, through a map over C (kFlagCPrefetchMap) for the direct epilogue.
// A split cluster's storing warps (split-K below) TMA-store a bf16 D without C per warp
// (kSplitTmaStore, the host's kFlagTmaStore with a 16-row-box map).
//
// GEMM kinds (kGemmKind, scheduler/persistent.cuh): kGemmNormal; kGemmGroupedContiguous (MoE
// prefill: A [M, K] rows of all groups stacked, B [G*N, K], sfb [G, ceil(N/128), Kb], `grouped`
// = int32 group id per row, -1 = padding row, written as zeros; padding tiles skip the main
// loop); kGemmGroupedMasked (MoE decode: A [G*Mmax, K], sfa [G*Kb, Mmax aligned] MN-major,
// D [G*Mmax, N], `grouped` = masked_m [G], read and clamped to [0, Mmax] on the GPU; only rows
// < masked_m[g] are written: the TMA store is used for a warpgroup whose 64 rows are all valid,
// direct predicated stores otherwise). M is Mmax for the masked kind. Tiles of group g read B
// rows g*N + n0 ..: rows past N (the next group's, or zero-filled) only feed columns >= N, which
// are never stored. Grouped kinds: no split-K, clusters only share A (one m-block = one group).
// kHeadsPacked (masked kind; fp8_einsum "bhr,hdr->bhd" with the heads as groups): A is [M, G*K]
// (row m holds every group's K columns side by side: A [b, h, r] as stored) and D [M, G*N]
// (D [b, h, d]); group g's tile reads A columns g*K + k and stores D columns g*N + n. K % 128 == 0
// (the host's rule: a k-box never reaches the next group's columns); bf16 D through D's map over
// [M, G*N] (kTmaStore, N % BLOCK_N == 0) or direct stores; fp32 D with direct stores, and C
// (fp32, the same pitch as D, at the same columns) with an fp32 D.
//
// Recipe (1,1,128) ("1D1D", weight gradients; template flag k1D1D, dense kind, fp32 D, optional C):
//   D[m, n] = C[m, n] + sum_kb sfa[m, kb] * sfb[n, kb] * (A[m, kb-block] . B[n, kb-block])
// with sfb fp32 MN-major [Kb, align(N, 4)] read through its own tensor map (tmap_sfb): the
// producer also loads the tile's BLOCK_N column scales per stage (box BLOCK_N x 1, counted in the
// stage's transaction bytes) and the consumers promote with per-column scales read from shared
// memory, releasing the stage after the promotion (whole tile, column halves with kHalfPromote, or
// kKBatch k-blocks under staggered waits).
//
// K-grouped (kGemmKGrouped, k1D1D only; MoE weight gradients): G problems D_g [M, N] = C_g +
// A_g [M, k_g] . B_g [N, k_g]^T in one launch. `kgroups` (impls/sm90_fp8_k_grouped_params.h, a
// __grid_constant__ kernel parameter) holds per slot the group's A_g / B_g tensor maps (row pitch
// k_g), its k-block count and its row offset in the shared scale maps (tmap_sfa over [sum Kb, M],
// tmap_sfb over [sum Kb, N]: row kb_offset + kb); D and C are one [G*M, N] view (group g's rows
// start at g * M). Work units are slot x tile (TileWalker); a slot with k_g = 0 runs no k-block
// and its tiles write C (or zeros), so every group is served by the same launch.
//
// Split-K (kSplitK): a work unit is (tile, split); each split covers a contiguous k-block range
// and writes its FP32 partial tile to the workspace; the CTA that finishes last (per-tile atomic
// counter) sums all partials in split order 0..S-1 (deterministic), writes D and resets the
// counter to 0 for the next call.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include <finegemm/epilogue/add_c_fp32.cuh>
#include <finegemm/epilogue/split_k.cuh>
#include <finegemm/epilogue/store_direct.cuh>
#include <finegemm/epilogue/tma_store_bf16.cuh>
#include <finegemm/epilogue/tma_store_fp32.cuh>
#include <finegemm/impls/b_group_ring.cuh>
#include <finegemm/impls/fitted_box_rows.h>
#include <finegemm/impls/sm90_fp8_k_grouped_params.h>
#include <finegemm/ptx/common.cuh>
#include <finegemm/ptx/cp_async.cuh>
#include <finegemm/ptx/diag.cuh>
#include <finegemm/ptx/mbarrier.cuh>
#include <finegemm/ptx/tma.cuh>
#include <finegemm/ptx/trace.cuh>
#include <finegemm/ptx/wgmma.cuh>
#include <finegemm/ptx/wgmma_fp8.cuh>
#include <finegemm/scheduler/contiguous_layout_check.cuh>
#include <finegemm/scheduler/persistent.cuh>

namespace finegemm {
namespace impls {

// Compile-time facts of one configuration; the host mirrors kDynamicSmemBytes and kNumThreads
// (finegemm/heuristics/sm90_fp8_gemm.py: smem_bytes(), num_threads()).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kTmaStore = false, bool k1D1D = false,
          bool kCStage = false, uint32_t kCtasPerSm = 1>
struct Sm90Fp8Gemm1d2dTraits {
  static constexpr uint32_t BLOCK_K = 128;  // one scale block; 128 fp8 = 128 bytes = the swizzle span
  static constexpr uint32_t kNumConsumerWG = BLOCK_M / 64;
  static constexpr uint32_t kNumConsumerThreads = kNumConsumerWG * 128;
  static constexpr uint32_t kNumThreads = kNumConsumerThreads + 128;
  // setmaxnreg split (ptx::consumer_regs; BLOCK_M 64 keeps what it was compiled with, unless two
  // CTAs share the SM: kCtasPerSm 2, built with a launch bound of 2 CTAs).
  static constexpr uint32_t kConsumerRegs = ptx::consumer_regs(kNumConsumerWG, kCtasPerSm);
  static constexpr uint32_t kProducerRegs = ptx::producer_regs(kNumConsumerWG);
  // The consumers get more registers than the launch bound's 128 only through that split.
  static constexpr bool kSetMaxNReg = kNumConsumerWG >= 2 || kCtasPerSm == 2;

  // Shared memory layout (offsets from a 1024-byte aligned base):
  //   [D staging (kTmaStore: BLOCK_M x BLOCK_N bf16, one 64-row buffer per consumer WG; with
  //    k1D1D one 16 KB fp32 box ring per consumer WG)]
  //   [C tile (kCStage: BLOCK_M x BLOCK_N fp32 as 64-row x 32-column TMA boxes, 128B swizzle)]
  //   [A stage 0..S-1][B stage 0..S-1][sfa stage 0..S-1][sfb stage 0..S-1]
  //   [full bar x S][empty bar x S][flag][kCStage: C full bar x WG][C empty bar x WG]
  static constexpr uint32_t kSmemA = BLOCK_M * BLOCK_K;    // multiple of 1024 (swizzle atom)
  static constexpr uint32_t kSmemB = BLOCK_N * BLOCK_K;    // multiple of 1024 as BLOCK_N % 8 == 0
  static constexpr uint32_t kSmemSfa = BLOCK_M * 4;        // 256 or 512: keeps 128-byte alignment
  // k1D1D: BLOCK_N fp32 B scales per stage (one per column, a TMA box), padded to 128 bytes.
  // 1D2D: the tile's (at most 3) B scales of the stage's k-block, written by the scale warp.
  static constexpr uint32_t kSfbBoxBytes = k1D1D ? BLOCK_N * 4 : 0;
  static constexpr uint32_t kSmemSfb = k1D1D ? (kSfbBoxBytes + 127) / 128 * 128 : 16;
  static constexpr uint32_t kSmemD =
      !kTmaStore ? 0
                 : (k1D1D ? (BLOCK_M / 64) * epilogue::TmaStoreFp32<BLOCK_N, false>::kBytes  // multiple of 4096
                          : BLOCK_M * BLOCK_N * 2);                                           // multiple of 2048
  static constexpr uint32_t kSmemC = kCStage ? BLOCK_M * BLOCK_N * 4 : 0;  // multiple of 8192 (BLOCK_N % 32 == 0)
  static constexpr uint32_t kOffD = 0;
  static constexpr uint32_t kOffC = kOffD + kSmemD;
  static constexpr uint32_t kOffA = kOffC + kSmemC;
  static constexpr uint32_t kOffB = kOffA + kNumStages * kSmemA;
  static constexpr uint32_t kOffSfa = kOffB + kNumStages * kSmemB;
  static constexpr uint32_t kOffSfb = kOffSfa + kNumStages * kSmemSfa;
  static constexpr uint32_t kOffFull = kOffSfb + kNumStages * kSmemSfb;
  static constexpr uint32_t kOffEmpty = kOffFull + kNumStages * 8;
  static constexpr uint32_t kOffFlag = kOffEmpty + kNumStages * 8;
  static constexpr uint32_t kOffCBar = kOffFlag + 16;
  static constexpr uint32_t kUsedBytes = kOffCBar + (kCStage ? 2 * kNumConsumerWG * 8 : 0);
  static constexpr uint32_t kDynamicSmemBytes = kUsedBytes + 1024;  // + slack to align the base
  // Bytes one stage's TMA loads deliver: always the FULL boxes (out-of-bounds parts are
  // zero-filled and still counted), less what a fitted A box leaves out (fitted_box_rows.h).
  static constexpr uint32_t kTxBytes = kSmemA + kSmemB + kSmemSfa + kSfbBoxBytes;

  // Scale blocks of B: a tile [n0, n0 + BLOCK_N) with n0 a multiple of BLOCK_N starts at an
  // offset n0 % 128 that is a multiple of g = gcd(BLOCK_N, 128), at most 128 - g (0 when
  // BLOCK_N % 128 == 0), so it spans at most ceil((128 - g + BLOCK_N) / 128) blocks. 8-column
  // chunks never straddle a 128 boundary (offsets are multiples of 16).
  static constexpr uint32_t gcd(uint32_t a, uint32_t b) { return b == 0 ? a : gcd(b, a % b); }
  static constexpr uint32_t kG = gcd(BLOCK_N, 128);
  static constexpr uint32_t kMaxOffset = (BLOCK_N % 128 == 0) ? 0 : 128 - kG;
  static constexpr uint32_t kSfbSpan = (kMaxOffset + BLOCK_N + 127) / 128;
  // When the offset is always 0, chunk j's block is (8 j) / 128 at compile time.
  static constexpr bool kStaticChunkBlocks = (kMaxOffset == 0) || (kSfbSpan == 1);

  // BLOCK_M 192: three consumer warpgroups, for loops bound by each warpgroup's wgmma -> wait ->
  // promote chain (recipe (1, 1, 128)): a third chain per SM, at block_n <= 144 (registers).
  static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 192, "BLOCK_M must be 64, 128 or 192");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "BLOCK_N: multiple of 16 in [16, 256]");
  static_assert(kNumStages >= 1 && kNumStages <= 16, "kNumStages out of range");
  static_assert(kSfbSpan >= 1 && kSfbSpan <= 3, "a tile spans at most 3 scale blocks");
  static_assert(kDynamicSmemBytes <= 232448, "shared memory above the SM90 227 KB limit");
  static_assert(!kCStage || (k1D1D && !kTmaStore && BLOCK_N % 32 == 0), "C stage: 1D1D direct epilogue, 32-column boxes");
  // Two CTAs per SM with the register split: one consumer warpgroup, half the SM's shared memory
  // each (228 KB less the driver's 1 KB per CTA).
  static_assert(kCtasPerSm == 1 || (kCtasPerSm == 2 && BLOCK_M == 64 && kDynamicSmemBytes <= 233472 / 2 - 1024),
                "kCtasPerSm 2: block_m 64 and at most 113 KB of shared memory");
};

// Kernel parameter flags (bit set by the host launcher).
constexpr uint32_t kFlagVectorStores = 1u;  // D (and C) pointer/stride allow 2-element vector accesses
constexpr uint32_t kFlagTmaStore = 2u;      // tmap_d is valid: TMA-store epilogue (kernels built with kTmaStore)
constexpr uint32_t kFlagCPrefetchMap = 4u;  // 1D1D, direct epilogue with C: tmap_d maps C (L2 prefetch; kCStage: C loads)
constexpr uint32_t kFlagBGroup = 8u;        // tmap_b is the 4-D grouped map of kBGroup (host's rule met)

// Promotion of one k-block: fin += (sfa * sfb) * acc for kNumChunks 8-column chunks starting
// at chunk kChunkBase of the tile (acc holds just those chunks). For a tile whose first column
// sits kOff columns into its 128-wide scale block, chunk c takes B scale (kOff + 8 c) / 128 — a
// compile-time index, so no per-chunk selects.
template <uint32_t kNumChunks, uint32_t kNumFin, uint32_t kSpan, uint32_t kOff, uint32_t kChunkBase>
__device__ __forceinline__ void promote_fixed(float (&fin)[kNumFin], const float (&acc)[kNumChunks * 4],
                                              const float (&s0)[kSpan], const float (&s1)[kSpan]) {
  static_assert((kChunkBase + kNumChunks) * 4 <= kNumFin, "chunk range out of the tile");
#pragma unroll
  for (uint32_t j = 0; j < kNumChunks; ++j) {
    const uint32_t c = kChunkBase + j;
    const float x0 = s0[(kOff + 8 * c) / 128];
    const float x1 = s1[(kOff + 8 * c) / 128];
    fin[4 * c + 0] = fmaf(x0, acc[4 * j + 0], fin[4 * c + 0]);
    fin[4 * c + 1] = fmaf(x0, acc[4 * j + 1], fin[4 * c + 1]);
    fin[4 * c + 2] = fmaf(x1, acc[4 * j + 2], fin[4 * c + 2]);
    fin[4 * c + 3] = fmaf(x1, acc[4 * j + 3], fin[4 * c + 3]);
  }
}

// Runtime offset `off` (a multiple of kG below 128, or anything when kStatic) -> the matching
// promote_fixed instantiation. The branch is uniform per tile; each case is straight-line FFMAs.
template <bool kStatic, uint32_t kNumChunks, uint32_t kNumFin, uint32_t kSpan, uint32_t kG, uint32_t kChunkBase,
          uint32_t kOff = 0>
__device__ __forceinline__ void promote(uint32_t off, float (&fin)[kNumFin], const float (&acc)[kNumChunks * 4],
                                        const float (&s0)[kSpan], const float (&s1)[kSpan]) {
  if constexpr (kStatic || kOff + kG >= 128) {
    promote_fixed<kNumChunks, kNumFin, kSpan, kOff, kChunkBase>(fin, acc, s0, s1);  // last case: no test
  } else {
    if (off == kOff) {
      promote_fixed<kNumChunks, kNumFin, kSpan, kOff, kChunkBase>(fin, acc, s0, s1);
    } else {
      promote<kStatic, kNumChunks, kNumFin, kSpan, kG, kChunkBase, kOff + kG>(off, fin, acc, s0, s1);
    }
  }
}

// Promotion of chunks [kChunkBase, kChunkBase + kNumChunks): at the compile-time offset kOff when
// the caller's loop was dispatched per offset (kHoisted), else through promote()'s runtime dispatch.
template <bool kHoisted, bool kStatic, uint32_t kNumChunks, uint32_t kNumFin, uint32_t kSpan, uint32_t kG,
          uint32_t kOff, uint32_t kChunkBase>
__device__ __forceinline__ void promote_at(uint32_t off, float (&fin)[kNumFin], const float (&acc)[kNumChunks * 4],
                                           const float (&s0)[kSpan], const float (&s1)[kSpan]) {
  if constexpr (kHoisted) {
    promote_fixed<kNumChunks, kNumFin, kSpan, kOff, kChunkBase>(fin, acc, s0, s1);
  } else {
    promote<kStatic, kNumChunks, kNumFin, kSpan, kG, kChunkBase>(off, fin, acc, s0, s1);
  }
}

// Recipe (1,1,128) promotion of chunks [kBase, kBase + kChunks) of the tile: fin += sfa * sfb * acc
// with the thread's two row scales and each column's scale from the stage's sfb row (`sfb`: this
// thread's first column, 8-column chunks apart); acc holds just those chunks.
// kAccBase: the first of those chunks' index in acc (0 when acc holds just them).
template <uint32_t kBase, uint32_t kChunks, uint32_t kAccBase = 0, uint32_t kNumFin, uint32_t kNumAcc>
__device__ __forceinline__ void promote_columns_1d1d(float (&fin)[kNumFin], const float (&acc)[kNumAcc],
                                                     const float* sfb, float sa0, float sa1) {
  static_assert(4 * (kAccBase + kChunks) <= kNumAcc && 4 * (kBase + kChunks) <= kNumFin, "chunk range out of the tile");
#pragma unroll
  for (uint32_t jj = 0; jj < kChunks; ++jj) {
    const uint32_t j = kBase + jj;
    const uint32_t ja = kAccBase + jj;
    if constexpr (diag::k1d1dRowPromotion) {  // developer diagnostic (ptx/diag.cuh)
      fin[4 * j + 0] = fmaf(sa0, acc[4 * ja + 0], fin[4 * j + 0]);
      fin[4 * j + 1] = fmaf(sa0, acc[4 * ja + 1], fin[4 * j + 1]);
      fin[4 * j + 2] = fmaf(sa1, acc[4 * ja + 2], fin[4 * j + 2]);
      fin[4 * j + 3] = fmaf(sa1, acc[4 * ja + 3], fin[4 * j + 3]);
      continue;
    }
    const float2 sb = diag::k1d1dNoScaleLoads ? make_float2(sa1, sa0)  // developer diagnostic
                                              : *reinterpret_cast<const float2*>(sfb + 8 * j);
    fin[4 * j + 0] = fmaf(sa0 * sb.x, acc[4 * ja + 0], fin[4 * j + 0]);
    fin[4 * j + 1] = fmaf(sa0 * sb.y, acc[4 * ja + 1], fin[4 * j + 1]);
    fin[4 * j + 2] = fmaf(sa1 * sb.x, acc[4 * ja + 2], fin[4 * j + 2]);
    fin[4 * j + 3] = fmaf(sa1 * sb.y, acc[4 * ja + 3], fin[4 * j + 3]);
  }
}

// The same for chunks [0, kChunks) whose column scales were loaded into registers beforehand.
template <uint32_t kChunks, uint32_t kNumFin, uint32_t kNumAcc, uint32_t kNumSb>
__device__ __forceinline__ void promote_columns_1d1d_regs(float (&fin)[kNumFin], const float (&acc)[kNumAcc],
                                                          const float2 (&sb)[kNumSb], float sa0, float sa1) {
  static_assert(kChunks <= kNumSb && 4 * kChunks <= kNumAcc && 4 * kChunks <= kNumFin, "chunk range out of the tile");
#pragma unroll
  for (uint32_t j = 0; j < kChunks; ++j) {
    fin[4 * j + 0] = fmaf(sa0 * sb[j].x, acc[4 * j + 0], fin[4 * j + 0]);
    fin[4 * j + 1] = fmaf(sa0 * sb[j].y, acc[4 * j + 1], fin[4 * j + 1]);
    fin[4 * j + 2] = fmaf(sa1 * sb[j].x, acc[4 * j + 2], fin[4 * j + 2]);
    fin[4 * j + 3] = fmaf(sa1 * sb[j].y, acc[4 * j + 3], fin[4 * j + 3]);
  }
}

// A compile-time offset value for the generic lambdas below.
template <uint32_t V>
struct StaticOffset {
  static constexpr uint32_t value = V;
};

// f(StaticOffset<off>{}) for the runtime `off` (as promote()), dispatched once: the caller puts a
// whole k-loop in f, so the per-k-block promotion has no offset branches (on bm128/bn208 the
// compare-and-branch chain of promote() held ~8% of the consumer warps' stall samples, ncu).
template <bool kStatic, uint32_t kG, uint32_t kOff = 0, typename F>
__device__ __forceinline__ void with_static_offset(uint32_t off, F&& f) {
  if constexpr (kStatic || kOff + kG >= 128) {
    f(StaticOffset<kOff>{});
  } else {
    if (off == kOff) {
      f(StaticOffset<kOff>{});
    } else {
      with_static_offset<kStatic, kG, kOff + kG>(off, f);
    }
  }
}

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kOutFp32, bool kHasC, bool kSplitK,
          uint32_t kNumMulticast = 1, bool kMulticastOnA = false, bool kHalfPromote = false, bool kTmaStore = false,
          uint32_t kGemmKind = scheduler::kGemmNormal, bool k1D1D = false, uint32_t kKBatch = 1, bool kCStage = false,
          uint32_t kCtasPerSm = 1, uint32_t kHeadLeft = 0, uint32_t kHeadMid = 0, uint32_t kHeadRight = 0,
          bool kLayoutCheck = false, bool kHeadsPacked = false, bool kPsumLayout = false, bool kSfaGather = false,
          uint32_t kBGroup = 1>
__device__ __forceinline__ void sm90_fp8_gemm_1d2d(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                                   const CUtensorMap* tmap_sfa, const CUtensorMap* tmap_d,
                                                   const float* sfb, void* d_ptr,
                                                   const float* c_ptr, float* workspace, int* counters,
                                                   uint32_t M, uint32_t N, uint32_t K, uint32_t ldd,
                                                   uint32_t flags, uint32_t num_splits,
                                                   const int* grouped = nullptr, uint32_t num_groups = 1,
                                                   const CUtensorMap* tmap_sfb = nullptr,
                                                   const Sm90Fp8KGroupedParams* kgroups = nullptr,
                                                   const CUtensorMap* tmap_a_last = nullptr,
                                                   unsigned* layout_scratch = nullptr, int* layout_record = nullptr,
                                                   uint32_t layout_info = 0, const float* sfa_gather = nullptr,
                                                   uint32_t sfa_ld_m = 0, uint32_t sfa_ld_g = 0,
                                                   uint32_t sfa_ld_k = 0) {
  using Traits = Sm90Fp8Gemm1d2dTraits<BLOCK_M, BLOCK_N, kNumStages, kTmaStore, k1D1D, kCStage, kCtasPerSm>;
  // kCtasPerSm 2 (recipe (1, 1, 128) only): the entry is built with a launch bound of 2 CTAs per
  // SM (128 registers per thread) and the producer hands its registers to the one consumer
  // warpgroup, so tiles wider than 128 registers of accumulators run two CTAs per SM: one's
  // epilogue (C read, D write) overlaps the other's main loop (benchmarks/NOTES.md v0.76). The
  // 1D2D two-CTA tiles keep their compiled registers (their entries were measured that way).
  static_assert(kCtasPerSm == 1 || k1D1D, "kCtasPerSm 2: recipe (1, 1, 128) kernels only");
  // kCStage (recipe (1, 1, 128), direct epilogue with C, dense kind): the producer TMA-loads each
  // tile's C into shared memory (through the host's map over C, kFlagCPrefetchMap) while the
  // consumers run the tile's main loop, so the epilogue adds C from shared memory instead of
  // waiting for a round trip to L2 / HBM per tile (4096x32768x512 + C: benchmarks/NOTES.md v0.75).
  static_assert(!kCStage || (kHasC && !kSplitK && kGemmKind == scheduler::kGemmNormal),
                "C stage: 1D1D dense kind with C, no split-K");
  // k1D1D (recipe (1, 1, 128), weight gradients): sfb is one fp32 per row of B per k-block,
  // MN-major [Kb, N (aligned to 4)], TMA-loaded per stage (BLOCK_N x 1 box through tmap_sfb);
  // the `sfb` pointer is unused. Dense or k-grouped kind, fp32 D.
  static_assert(!k1D1D || (kOutFp32 && !(kTmaStore && kSplitK) &&
                           (kGemmKind == scheduler::kGemmNormal || kGemmKind == scheduler::kGemmKGrouped)),
                "1D1D: fp32 D, dense or k-grouped kind, no TMA epilogue with split-K");
  // K-grouped: the 1D1D recipe only; no split-K (the units of all groups fill the machine).
  constexpr bool kKGrouped = kGemmKind == scheduler::kGemmKGrouped;
  static_assert(!kKGrouped || (k1D1D && !kSplitK), "k-grouped: recipe (1, 1, 128), no split-K");
  static_assert(!kTmaStore || k1D1D || (!kOutFp32 && !kHasC && !kSplitK),
                "1D2D TMA-store epilogue: bf16 D, no C, no split-K");
  // Head splits (fp8_gemm_nt_skip_head_mid, epilogue/tma_store_bf16.cuh): the dense bf16 TMA-store
  // epilogue only; the host encodes D's map over D's full width and launches such a kernel only
  // with it (kFlagTmaStore), so the direct stores below, which know nothing of the gap, never run.
  static_assert(kHeadMid == 0 || (kTmaStore && !k1D1D && kGemmKind == scheduler::kGemmNormal),
                "head splits: dense bf16 TMA-store epilogue");
  // kLayoutCheck (m-grouped contiguous kind, plain layout): `grouped` is the caller's grouped_layout
  // itself, and a spare producer warp of every CTA checks its rules while the GEMM runs
  // (scheduler/contiguous_layout_check.cuh: layout_scratch, layout_record, layout_info), so a call
  // is one launch. Without it `grouped` holds the standalone check kernel's ids.
  static_assert(!kLayoutCheck || kGemmKind == scheduler::kGemmGroupedContiguous,
                "the in-kernel layout check: m-grouped contiguous kind");
  // kPsumLayout (with kLayoutCheck): `grouped` is the caller's psum layout (int32 [G] cumulative row
  // ends) itself. The walkers find each tile's group by a search over the ends, the epilogue pads
  // the rows past the group's end, and the spare warp of CTA 0 checks the ends' rules: no
  // standalone kernel expanding them into per-row ids first.
  static_assert(!kPsumLayout || kLayoutCheck, "psum ends read by the GEMM: with the in-kernel layout check");
  // With kTmaStore (bf16 D; the host's rule: N % BLOCK_N == 0, so no box reaches the next group's
  // columns) D's map is [M, G*N]: rows past M are dropped by TMA, so every warpgroup may use it.
  static_assert(!kHeadsPacked || (kGemmKind == scheduler::kGemmGroupedMasked && (!kTmaStore || !kOutFp32)),
                "heads packed along K and N: the masked kind, TMA stores for bf16 D only");
  using EpiTma = epilogue::TmaStoreBf16<BLOCK_N, kHeadLeft, kHeadMid, kHeadRight>;
  // Recipe (1,1,128): fp32 boxes, reduce-added into D when the kernel has C (C is D then).
  using EpiTmaF32 = epilogue::TmaStoreFp32<BLOCK_N, kHasC>;
  static_assert(!kTmaStore || Traits::kSmemD == (BLOCK_M / 64) * (k1D1D ? EpiTmaF32::kBytes : EpiTma::kBytes),
                "staging size");
  // kHalfPromote: the wgmmas of a k-block are issued as two commit groups over the left and
  // right halves of the tile's columns, so the left half is promoted while the tensor core works
  // on the right one: half the promotion leaves the critical path, at the price of twice the
  // A-fragment shared-memory reads.
  // Above 208 columns two half accumulator sets do not fit beside the tile's FP32 sums (bn224
  // half-promote spilled), so there the halves go through one set, one after the other
  // (kSerialHalves): wgmma -> wait -> promote is serial inside a warpgroup, and the other consumer
  // warpgroup's wgmmas keep the tensor core busy meanwhile. What it buys is the 128 x 256 tile:
  // the fewest shared-memory bytes per FLOP that fit the registers (benchmarks/NOTES.md v0.47).
  constexpr bool kSerialHalves = kHalfPromote && BLOCK_N > 208;
  static_assert(!kSerialHalves || (!k1D1D && BLOCK_M == 128), "serial halves: recipe (1, 128, 128), BLOCK_M 128");
  constexpr uint32_t kMmaN = kHalfPromote ? BLOCK_N / 2 : BLOCK_N;
  // kKBatch > 1: the wgmmas of kKBatch consecutive k-blocks go into kKBatch accumulator sets
  // under one wait, so a narrow tile pays the wgmma -> wait -> promote latency once per batch
  // instead of once per k-block (skinny shapes are bound by that serial chain, not by the tensor
  // core or HBM). Accumulators are only read after wait_group 0: no wgmma serialization.
  static_assert(kKBatch == 1 || kKBatch == 2 || kKBatch == 4, "k-block batches of 1, 2 or 4");
  static_assert(kKBatch == 1 || !kHalfPromote, "k-block batching is a whole-tile mode");
  static_assert(kKBatch <= kNumStages, "a batch waits for kKBatch full stages before releasing any");
  // diag::kProducerBurst, capped: a burst must not wait for slots that a k-block batch holds (one
  // slot of slack for loops that look one stage ahead).
  static constexpr uint32_t kBurst =
      diag::kProducerBurst + kKBatch <= kNumStages ? diag::kProducerBurst : (kNumStages > kKBatch ? kNumStages - kKBatch : 1u);
  static_assert(!kHalfPromote || (BLOCK_N / 2) % 8 == 0, "half tiles must keep whole 8-row swizzle atoms");
  using Mma = ptx::WgmmaFp8<kMmaN>;
  constexpr uint32_t kNumConsumerWG = Traits::kNumConsumerWG;
  constexpr uint32_t kNumConsumerThreads = Traits::kNumConsumerThreads;
  constexpr uint32_t kNumAcc = BLOCK_N / 2;  // fp32 accumulators per thread (m64 x BLOCK_N / 128)
  constexpr uint32_t kNumChunks = BLOCK_N / 8;
  constexpr uint32_t kSpan = Traits::kSfbSpan;
  static_assert(!kHasC || kOutFp32, "C is only supported with an fp32 output");
  static_assert(kNumMulticast == 1 || kNumMulticast == 2, "clusters of 1 or 2 CTAs");
  // Split-K with multicast (recipe (1, 128, 128)): both CTAs of a pair take the same split of
  // their tiles (scheduler::PersistentScheduler), so the shared boxes cover the same k-blocks; the
  // partials go through the workspace (a split cluster needs the cluster for the splits).
  static_assert(kNumMulticast == 1 || !kSplitK || !k1D1D, "split-K with multicast: recipe (1, 128, 128) only");
  // Multicast on A: the two CTAs of a cluster take n-blocks 2q, 2q+1 of one m-block and each
  // loads half of the shared A box (BLOCK_M/2 rows) into both CTAs. Multicast on B: m-blocks
  // 2q, 2q+1 of one n-block, each loads BLOCK_N/2 rows of B. The boxes of the host's tensor
  // maps are the halves accordingly.
  // The lean main loop (tiles up to 208 columns; both parts spill at 224 with nvcc 13.0, and the
  // heuristic's model mirrors the limit: heuristics/sm90_fp8_gemm.py MAX_BLOCK_N_LEAN_LOOP):
  //  - a warp-uniform warpgroup index (shuffle), so the wgmma descriptors are built in uniform
  //    registers; from threadIdx, every wgmma of the loop waited for an R2UR (-4 to -6% time at
  //    M = 4096, benchmarks/NOTES.md v0.13);
  //  - the k-loop instantiated per scale-block offset of the tile (one dispatch per tile instead of
  //    promote()'s compare-and-branch chain per k-block; -5 to -9.5% more).
  constexpr bool kLeanLoop = BLOCK_N <= 208 || kSerialHalves;
  // 1D2D B scales through the stages (the scale warp) with the lean loop; the wide loop (bn224)
  // keeps loading them from global one k-block ahead: with the scale warp ptxas spills there.
  constexpr bool kScaleWarp = !k1D1D && kLeanLoop;
  // kSfaGather (with kHeadsPacked): sfa is read where the caller keeps it, [M, G, Kb] at any
  // strides (sfa_gather, sfa_ld_m / _g / _k elements; fp8_einsum's [b, h, r/128]): the sfa warp
  // (the producer warpgroup's third) copies each stage's BLOCK_M row scales with cp.async and its
  // 32 lanes arrive on the stage's full barrier when they land (kSfaWarpArrivals; one arrival in
  // the diag::kSfaGatherLdg build); tmap_sfa is neither encoded nor read.
  // Through the map the call needs an MN-major copy of sfa first (a kernel and ~10 us of host time
  // per call). Its groups are all M rows, so the walkers find a unit's group by one division
  // (TileWalker kFullGroups) instead of one load of masked_m per group.
  constexpr uint32_t kSfaWarpArrivals = diag::kSfaGatherLdg ? 1u : 32u;
  static_assert(!kSfaGather || (kHeadsPacked && kScaleWarp && !kLayoutCheck && BLOCK_M <= 128),
                "sfa gather: heads packed, lean tiles of at most 128 rows, the producer warpgroup's third warp free");
  // 1D1D: how many 8-column chunks' column scales (2 registers each) the plain loop loads before
  // issuing the wgmmas: what the consumer's register cap leaves beside the 2 x BLOCK_N / 2
  // accumulators and kSfbRegSlack others. Measured with ptxas 13.0 (tests/test_fp8_kernel_compile.py
  // checks every tile): 24 builds spill-free everywhere; 16 spills at bm128 bn192 and bm192 bn144,
  // 0 at bm192 bn128. bm64 (no setmaxnreg, 255 for the whole kernel) is budgeted as bm128: at 255
  // its bn192 / bn208 variants spilled.
  constexpr uint32_t kConsumerRegs = Traits::kConsumerRegs;
#ifdef FINEGEMM_SFB_REG_SLACK  // developer override of the measured slack, for A/Bs (ptx/diag.cuh, NOTES v0.37)
  constexpr uint32_t kSfbRegSlack = FINEGEMM_SFB_REG_SLACK;
#else
  constexpr uint32_t kSfbRegSlack = 24;
#endif
  constexpr uint32_t kSfbRegsFree =
      kConsumerRegs > kSfbRegSlack + BLOCK_N ? kConsumerRegs - kSfbRegSlack - BLOCK_N : 0u;
  constexpr uint32_t kSfbPrefetch =
      (!k1D1D || kHalfPromote || kKBatch > 1 || diag::kNoSfbPrefetch || diag::k1d1dRowPromotion) ? 0u
                                              : (kSfbRegsFree / 2 < BLOCK_N / 8 ? kSfbRegsFree / 2 : BLOCK_N / 8);
  static_assert(kScaleWarp || k1D1D || (kKBatch == 1 && !kHalfPromote), "k-batch / half-promote: lean tiles only");
  constexpr bool kMcA = kNumMulticast == 2 && kMulticastOnA;
  constexpr bool kMcB = kNumMulticast == 2 && !kMulticastOnA;
  // kGrouped: the work units come from the TileWalker (every kind but the dense one).
  constexpr bool kGrouped = kGemmKind != scheduler::kGemmNormal;
  static_assert(!kGrouped || kKGrouped || (!kSplitK && !kMcB && (!kHalfPromote || kSerialHalves) &&
                                           (!kHasC || kHeadsPacked)),
                "m-grouped GEMMs: no split-K, no C (but with the heads packed), no half-promote; clusters only share A");

  constexpr uint32_t kBoxRowsA = kMcA ? BLOCK_M / 2 : BLOCK_M;
  // kBGroup > 1: B's box covers kBGroup consecutive k-blocks (stages) of the tile's rows, so each
  // row's kBGroup * 128 bytes are requested close together (the skinny shapes are bound by B's
  // DRAM stream: NOTES v0.42, v1.05); the layout and protocol are impls/b_group_ring.cuh's. Every
  // unit's k-block count is a multiple of kBGroup (the host's rule, trapped below) and so is the ring.
  // One group may fill the ring (unlike BF16's): while the consumers wait for a stage they hold
  // none of the ring's previous pass (a k-batch holds only its own earlier stages, whose group is
  // loaded already), so never a stage of the group the producer is waiting to load.
  using BRing = BGroupRing<kBGroup, Traits::kSmemB>;
  static_assert(kBGroup == 1 || ((kBGroup == 2 || kBGroup == 4) && kNumStages % kBGroup == 0 &&
                                 kGemmKind == scheduler::kGemmNormal && !k1D1D && !kMcB && kHeadMid == 0 &&
                                 diag::kKRotate == 0 && !diag::kNoBTma && !diag::kHalfBTma && kBurst == 1),
                "B groups: 2 or 4 k-blocks dividing the ring, dense 1D2D kind, B not multicast");
  constexpr uint32_t kBoxRowsB = kMcB ? BLOCK_N / 2 : BLOCK_N;
  static_assert(kBoxRowsA % 8 == 0 && kBoxRowsB % 8 == 0, "multicast halves must keep 1024-byte swizzle atoms");

  extern __shared__ __align__(1024) uint8_t fg_smem_raw[];
  const uint32_t raw_addr = ptx::smem_addr(fg_smem_raw);
  uint32_t base = (raw_addr + 1023u) & ~1023u;  // masked kind: the consumers take it through a shuffle
  uint8_t* smem = fg_smem_raw + (base - raw_addr);

  auto full_bar = [&](uint32_t s) { return base + Traits::kOffFull + s * 8; };
  auto empty_bar = [&](uint32_t s) { return base + Traits::kOffEmpty + s * 8; };
  // kCStage: consumer warpgroup w's C half is full / has been read.
  [[maybe_unused]] auto c_full_bar = [&](uint32_t w) { return base + Traits::kOffCBar + w * 8; };
  [[maybe_unused]] auto c_empty_bar = [&](uint32_t w) { return base + Traits::kOffCBar + (kNumConsumerWG + w) * 8; };
  // The host encoded the map over C (a C TMA can address): otherwise C is read from global memory.
  [[maybe_unused]] const bool c_stage = kCStage && (flags & kFlagCPrefetchMap) != 0;
  const float* sfa_smem = reinterpret_cast<const float*>(smem + Traits::kOffSfa);
  volatile int* flag_smem = reinterpret_cast<volatile int*>(smem + Traits::kOffFlag);

  const uint32_t num_kb = (K + Traits::BLOCK_K - 1) / Traits::BLOCK_K;
  const uint32_t num_m_blocks = (M + BLOCK_M - 1) / BLOCK_M;
  const uint32_t num_n_blocks = (N + BLOCK_N - 1) / BLOCK_N;
  const scheduler::PersistentScheduler<kMcB ? 2 : 1, kMcA ? 2 : 1, diag::kSchedGroupN> sched(num_m_blocks, num_n_blocks,
                                                                              kSplitK ? num_splits : 1u);
  using Walker =
      scheduler::TileWalker<kGemmKind, BLOCK_M, BLOCK_N, kMcB ? 2 : 1, kMcA ? 2 : 1, diag::kSchedGroupN, kPsumLayout,
                            kSfaGather>;
  const uint32_t rank = kNumMulticast > 1 ? ptx::cluster_ctarank() : 0u;
  const uint32_t cluster_id = blockIdx.x / kNumMulticast;
  // FINEGEMM_TRACE_TILES (ptx/trace.cuh): the trace follows the split-K partial slabs in the
  // workspace (all of it without split-K; scripts/trace_tiles.py sizes the buffer alike).
  FG_TRACE_ONLY(void* const trace_buf = static_cast<void*>(
                    workspace + (kSplitK ? static_cast<size_t>(num_m_blocks) * num_n_blocks * num_splits *
                                               BLOCK_M * BLOCK_N : 0));)
  FG_TRACE_ONLY(if (threadIdx.x == kNumConsumerThreads) FG_TRACE_TILE(trace_buf, 2, 0, 3);)  // kernel entry
  const uint32_t num_clusters = gridDim.x / kNumMulticast;
  // Split-K through distributed shared memory (epilogue/split_k.cuh): the host launches the
  // splits of each tile as one cluster when every CTA runs exactly one unit and the tile is at
  // most kClusterSplitMaxN columns wide (host encode_1d2d); the partials then never go through L2.
  // Its fragment fits the ring, which is idle by then (one unit per CTA). Split kernels never have
  // the warpgroup-wide TMA-store epilogue (static_asserts above), so the reduce-scatter's warps may
  // leave freely (a warp's own TMA store waits for itself: store_warp).
  // Recipe (1, 1, 128) keeps the workspace: its launcher has no split clusters (and bm128 bn128
  // spilled with the cluster code); so do three-warpgroup tiles above 64 columns (bm192 bn96 spilled).
  constexpr uint32_t kClusterSplitMaxN = BLOCK_M <= 128 ? 128 : 64;  // mirrors fg::fp8_cluster_split_max_n
  constexpr bool kClusterSplit =
      kSplitK && !k1D1D && kNumMulticast == 1 && BLOCK_N <= kClusterSplitMaxN && !diag::kSplitNoReduce;
  static_assert(!kClusterSplit || BLOCK_M * BLOCK_N * 4 <= kNumStages * (Traits::kSmemA + Traits::kSmemB),
                "the split partial reuses the ring");
  // A split cluster's bf16 D (no C) may leave through TMA (the host's kFlagTmaStore, D's map with
  // 16-row boxes): each storing warp stages its 16 reduced rows in the ring past the partial,
  // which its peers may still be reading, and stores them itself (epilogue::TmaStoreBf16::
  // store_warp), as the direct stores cost more than the TMA store even at one tile per CTA
  // (benchmarks/NOTES.md v1.03, v1.04). Where the staging does not fit the ring, direct stores.
  // The partials are pushed into the owners' rings (epilogue::SplitPush; -1 to -4% against the
  // pull form, which FINEGEMM_DIAG_SPLIT_PULL keeps: NOTES v1.15). The landing zone takes the
  // ring's start at any split count (up to 1.75 x the tile at 4 consumer warps and 8 splits); the
  // staging follows it.
  using SplitPush = epilogue::SplitPush<kNumChunks, kNumConsumerThreads / 32>;
  constexpr bool kSplitPush =
      kClusterSplit && !diag::kSplitPull &&
      SplitPush::max_landing_bytes() <= kNumStages * (Traits::kSmemA + Traits::kSmemB);
  constexpr uint32_t kSplitPartialBytes = kSplitPush ? SplitPush::max_landing_bytes() : BLOCK_M * BLOCK_N * 4;
  constexpr uint32_t kSplitStagingOff = Traits::kOffA + kSplitPartialBytes;  // multiple of 4096
  // (Split-K kernels are of the dense kind without head splits: the static_asserts above.)
  constexpr bool kSplitTmaStore = kClusterSplit && !kOutFp32 && !kHasC &&
                                  kSplitPartialBytes + BLOCK_M * BLOCK_N * 2 <= kNumStages * (Traits::kSmemA + Traits::kSmemB);
  const bool split_cluster = kClusterSplit && ptx::cluster_nctarank() > 1;
  // The push form's barriers take the workspace path's flag slot (a split cluster never uses it).
  [[maybe_unused]] auto recv_bar = [&] { return base + Traits::kOffFlag; };
  [[maybe_unused]] auto ready_bar = [&] { return base + Traits::kOffFlag + 8; };
  // The tile of `unit` as the producer and the scale warp see it (each role walks with its own
  // walker); false past the last unit of a grouped kind. The dense kind keeps its loop head
  // (unit < num_units) and only decodes here: walking through TileWalker::next() in the loop
  // condition cost the dense split-K bm128/bn224 variant spills. The consumers decode inline.
  auto next_tile = [&](Walker& walker, uint32_t unit, scheduler::TileCoords& t) -> bool {
    if constexpr (kGrouped) {
      return walker.next(unit, rank, t);
    } else {
      sched.get(unit, rank, t.m_block, t.n_block, t.split);
      t.a_row = t.sfa_m = t.m_block * BLOCK_M;
      t.b_row = t.n_block * BLOCK_N;
      t.sfa_kb0 = 0;
      t.skip = false;
      t.group = 0;
      return true;
    }
  };
  // A unit's k-blocks [kb_begin, kb_end) as every role walks them; a padding tile (contiguous
  // kind) runs none: the producer loads nothing and the consumers write zeros.
  auto unit_k_blocks = [&](uint32_t split, bool skip, uint32_t& kb_begin, uint32_t& kb_end) {
    sched.k_range(split, num_kb, kb_begin, kb_end);
    if (skip) kb_end = kb_begin;
  };
  // The k-block that step kb of [kb_begin, kb_end) reads: kb itself, or with the developer
  // diagnostic diag::kKRotate a per-cluster rotation of the range (ptx/diag.cuh). Every role maps
  // alike, and both CTAs of a cluster (one cluster id) read the same k-blocks.
  auto k_block_at = [&](uint32_t kb, uint32_t kb_begin, uint32_t kb_end) -> uint32_t {
    if constexpr (diag::kKRotate == 0) {
      return kb;
    } else {
      const uint32_t n = kb_end - kb_begin;
      if (n == 0) return kb;
      const uint32_t r = kb + (cluster_id * diag::kKRotate) % n;
      return r >= kb_end ? r - n : r;
    }
  };

  if (threadIdx.x == 0) {
    // A launch with less dynamic shared memory than this layout needs would corrupt memory.
    if (ptx::dynamic_smem_size() < Traits::kDynamicSmemBytes) __trap();
    // A split cluster must be exactly one tile's splits, one unit per CTA (the host's rule).
    if (split_cluster && (ptx::cluster_nctarank() != num_splits || sched.num_units != gridDim.x ||
                          (kSplitPush && num_splits > SplitPush::kMaxSplits)))
      __trap();
#pragma unroll
    for (uint32_t s = 0; s < kNumStages; ++s) {
      ptx::mbar_init(full_bar(s), 1 + (kScaleWarp ? 1 : 0) + (kSfaGather ? kSfaWarpArrivals : 0));
      // Every consumer warp of every CTA of the cluster releases the stage (the peer's
      // multicast writes into this CTA's stage too).
      ptx::mbar_init(empty_bar(s), kNumConsumerWG * 4 * kNumMulticast);
    }
    if constexpr (kCStage) {
      for (uint32_t w = 0; w < kNumConsumerWG; ++w) {
        ptx::mbar_init(c_full_bar(w), 1);
        ptx::mbar_init(c_empty_bar(w), 4);  // the warpgroup's 4 warps
      }
    }
    ptx::fence_mbarrier_init();
    ptx::fence_proxy_async_shared();
    if constexpr (kSplitPush && diag::kSplitPushInitAtEntry) {
      if (split_cluster) SplitPush::init(recv_bar(), ready_bar(), num_splits);
    }
  }
  // With a cluster, the peer must see initialized barriers before it multicasts into them.
  // fence.mbarrier_init released the init, so the arrive needs no release of its own: a release
  // arrive here cost ~1250 cycles of every CTA's start (NOTES v1.12; relaxed: -1 to -4% on the
  // multicast picks, v1.13).
  if constexpr (kNumMulticast > 1) {
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait();
  } else {
    __syncthreads();
    // Push form: its barriers' init, then the cluster barrier's init phase (SplitPush::init).
    if constexpr (kSplitPush) {
      if (split_cluster)
        SplitPush::template init_phase_arrive<!diag::kSplitPushInitAtEntry>(recv_bar(), ready_bar(), num_splits);
    }
  }
  // Nothing above touches global memory; everything below may (ptx::griddep_wait).
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();

  if (threadIdx.x >= kNumConsumerThreads) {
    // ------------------------------------------------------------------ producer warpgroup
    if constexpr (Traits::kSetMaxNReg) ptx::setmaxnreg_dec<Traits::kProducerRegs>();
    if (threadIdx.x == kNumConsumerThreads) {
      // The dense 1D2D kind without A multicast loads its last m-block through tmap_a_last, whose
      // box holds only its rows, and the sfa of a lone m-block through a box of as many rows
      // (impls/fitted_box_rows.h, as the host encoded them); each stage expects the bytes it loads.
      constexpr bool kFitA = kGemmKind == scheduler::kGemmNormal && !k1D1D && !kMcA;
      if constexpr (!kKGrouped) {  // k-grouped: the slot's maps are prefetched per unit
        ptx::tma_prefetch_desc(tmap_a);
        if constexpr (kFitA) ptx::tma_prefetch_desc(tmap_a_last);
        ptx::tma_prefetch_desc(tmap_b);
      }
      if constexpr (!kSfaGather) ptx::tma_prefetch_desc(tmap_sfa);
      if constexpr (k1D1D) ptx::tma_prefetch_desc(tmap_sfb);
      // L2 policy of the A / B loads (ptx::use_skinny_l2_hints); multicast loads keep the default.
      const uint64_t a_rows = static_cast<uint64_t>(M) * (kGemmKind == scheduler::kGemmGroupedMasked ? num_groups : 1u);
      const uint64_t b_rows = static_cast<uint64_t>(N) * (kGrouped && !kKGrouped ? num_groups : 1u);
      const bool one_wave = kGemmKind == scheduler::kGemmNormal &&
                            static_cast<uint64_t>(num_m_blocks) * num_n_blocks * (kSplitK ? num_splits : 1u) <= gridDim.x;
      const bool l2_hints = ptx::use_skinny_l2_hints(num_m_blocks, one_wave, a_rows * K, b_rows * K);
      const uint64_t pol_a = ptx::l2_policy_evict_last();
      const uint64_t pol_b = ptx::l2_policy_evict_first();
      const uint32_t first_a_rows = first_a_box_rows(M, BLOCK_M, kFitA, false);  // and the sfa box's
      const uint32_t last_a_rows = last_a_box_rows(M, BLOCK_M, kFitA, false);
      const uint32_t last_a_row = (M - 1u) / BLOCK_M * BLOCK_M;  // first row of the last m-block
      const uint32_t base_tx_bytes = Traits::kTxBytes - (kSfaGather ? BLOCK_M : BLOCK_M - first_a_rows) * 4u;
      // C's boxes go to L2 ahead of each tile's epilogue: through D's map for the reduce-add (C is
      // D), through the host's map over C for the direct epilogue.
      constexpr bool kPrefetchC = kHasC && k1D1D && !kSplitK && !diag::kNoCPrefetch;
      const bool c_prefetch = kPrefetchC && (flags & (kFlagTmaStore | kFlagCPrefetchMap)) != 0;
      uint32_t stage = 0, phase = 0;
      [[maybe_unused]] uint32_t c_phase = 0;  // kCStage: parity of the C buffers' current use
      FG_TRACE_ONLY(uint32_t traced_tile = 0;)
      Walker walker(M, N, num_kb, kSplitK ? num_splits : 1u, grouped, num_groups, layout_info & 0xffu);
      scheduler::TileCoords t;
      for (uint32_t unit = cluster_id; kGrouped || unit < sched.num_units; unit += num_clusters) {
        if (!next_tile(walker, unit, t)) break;
        uint32_t kb_begin, kb_end;
        unit_k_blocks(t.split, t.skip, kb_begin, kb_end);
        const CUtensorMap* map_a = tmap_a;
        const CUtensorMap* map_b = tmap_b;
        if constexpr (kKGrouped) {
          // The slot's own A_g / B_g maps, k-blocks and scale rows (the consumers read the same).
          const Sm90Fp8KGroupedSlot& sl = kgroups->slot[t.group];
          kb_begin = 0;
          kb_end = sl.num_kb;
          t.sfa_kb0 = sl.kb_offset;
          map_a = &kgroups->tmap_a[t.group];
          map_b = &kgroups->tmap_b[t.group];
          if (kb_end > 0) {  // an empty group's maps are not encoded
            ptx::tma_prefetch_desc(map_a);
            ptx::tma_prefetch_desc(map_b);
          }
        }
        const int32_t m0 = static_cast<int32_t>(t.a_row);
        const int32_t n0 = static_cast<int32_t>(t.b_row);
        // A's box: rows of the [G*M, K] view, or with kHeadsPacked rows of [M, G*K] at the group's columns.
        const int32_t a_y = kHeadsPacked ? static_cast<int32_t>(t.sfa_m) : m0;
        const int32_t a_x0 = kHeadsPacked ? static_cast<int32_t>(t.group * K) : 0;
        const bool last_a = kFitA && t.a_row == last_a_row;
        const uint32_t a_box_rows = last_a ? last_a_rows : first_a_rows;
        const uint32_t tx_bytes = base_tx_bytes - (BLOCK_M - a_box_rows) * Traits::BLOCK_K;
        if constexpr (kFitA) map_a = last_a ? tmap_a_last : tmap_a;
        // Which k-blocks carry the prefetch of the tile's C boxes (none without it).
        [[maybe_unused]] const typename EpiTmaF32::template Prefetch<BLOCK_M / 64> c_prefetch_plan(c_prefetch, kb_begin,
                                                                                                 kb_end);
        FG_TRACE_TILE(trace_buf, 2, traced_tile, 0);
        // The B groups' rule (the host's): a map encoded for them, whole groups per unit.
        if constexpr (kBGroup > 1) {
          if ((flags & kFlagBGroup) == 0 || (kb_end - kb_begin) % kBGroup != 0) __trap();
        }
        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
          if constexpr (kBurst > 1) {
            // Developer diagnostic (ptx/diag.cuh): wait for the next kProducerBurst slots, so that
            // their loads leave back to back (the per-slot waits below then return at once).
            if ((kb - kb_begin) % kBurst == 0) {
              uint32_t s = stage, p = phase;
              for (uint32_t j = 1; j < kBurst && kb + j < kb_end; ++j) {
                if (++s == kNumStages) {
                  s = 0;
                  p ^= 1u;
                }
                ptx::mbar_wait(empty_bar(s), p ^ 1u);
              }
            }
          }
          // Fresh barrier: waiting for parity 1 returns at once, so the first pass never blocks.
          ptx::mbar_wait(empty_bar(stage), phase ^ 1u);
          BRing::wait_rest(stage, phase, empty_bar);  // kBGroup: the group's box fills all its stages
          FG_TRACE_ONLY(if (kb == kb_begin) FG_TRACE_TILE(trace_buf, 2, traced_tile, 1);)
          if constexpr (diag::kNoTma) {  // developer diagnostic (ptx/diag.cuh): no loads
            ptx::mbar_arrive(full_bar(stage));
          } else {  // (kept at its original indentation)
          // The full boxes' bytes, whichever CTA of the cluster issues which half.
          ptx::mbar_arrive_expect_tx(full_bar(stage), tx_bytes - (diag::kNoSfaTma && !kSfaGather ? first_a_rows * 4u : 0u) -
                                                          (diag::kNoATma ? a_box_rows * Traits::BLOCK_K : 0u) -
                                                          (diag::kNoBTma ? Traits::kSmemB : 0u) +
                                                          (kBGroup == 1 ? 0u : BRing::tx_bytes(stage) - Traits::kSmemB));
          const uint32_t kb_read = k_block_at(kb, kb_begin, kb_end);
          const int32_t k0 = static_cast<int32_t>(kb_read * Traits::BLOCK_K);
          const uint32_t dst_a = base + Traits::kOffA + stage * Traits::kSmemA;
          const uint32_t dst_b = base + Traits::kOffB + stage * Traits::kSmemB;
          if constexpr (diag::kNoATma) {
          } else if constexpr (kMcA) {
            ptx::tma_load_2d_multicast(dst_a + rank * kBoxRowsA * Traits::BLOCK_K, map_a, full_bar(stage), a_x0 + k0,
                                       a_y + static_cast<int32_t>(rank * kBoxRowsA), 0x3);
          } else {
            ptx::tma_load_2d_policy(dst_a, map_a, full_bar(stage), a_x0 + k0, a_y, l2_hints, pol_a);
          }
          if constexpr (diag::kNoBTma) {
          } else if constexpr (kBGroup > 1) {
            if (BRing::first(stage))
              ptx::tma_load_4d_policy(dst_b, map_b, full_bar(stage), 0, 0, static_cast<int32_t>(kb_read), n0 / 8,
                                      l2_hints, pol_b);
          } else if constexpr (kMcB) {
            ptx::tma_load_2d_multicast(dst_b + rank * kBoxRowsB * Traits::BLOCK_K, map_b, full_bar(stage), k0,
                                       n0 + static_cast<int32_t>(rank * kBoxRowsB), 0x3);
          } else {
            ptx::tma_load_2d_policy(dst_b, map_b, full_bar(stage), k0, n0, l2_hints, pol_b);
          }
          if constexpr (!diag::kNoSfaTma && !kSfaGather) {
            ptx::tma_load_2d(base + Traits::kOffSfa + stage * Traits::kSmemSfa, tmap_sfa, full_bar(stage),
                             static_cast<int32_t>(t.sfa_m), static_cast<int32_t>(t.sfa_kb0 + kb_read));
          }
          if constexpr (k1D1D) {
            // This CTA's own BLOCK_N column scales (never multicast: a pair sharing A has two n-blocks).
            ptx::tma_load_2d(base + Traits::kOffSfb + stage * Traits::kSmemSfb, tmap_sfb, full_bar(stage), n0,
                             static_cast<int32_t>(kKGrouped ? t.sfa_kb0 + kb_read : kb_read));
          }
          }  // diag::kNoTma
          if constexpr (kPrefetchC) {  // the epilogue's box coordinates (the map: N, rows per group, groups)
            c_prefetch_plan.issue(kb, tmap_d, n0, m0,
                                  kKGrouped ? static_cast<int32_t>(kgroups->slot[t.group].group) : 0);
          }
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        FG_TRACE_TILE(trace_buf, 2, traced_tile, 2);
        FG_TRACE_ONLY(++traced_tile;)
        if constexpr (kCStage) {
          // The tile's C, each consumer warpgroup's 64 rows once it has read its previous tile's.
          // Issued after the tile's k-blocks: by then the consumers are in the previous tile's
          // epilogue (every stage holds this tile's k-blocks), so the wait costs the producer
          // nothing and the load has this tile's whole main loop to land.
          if (c_stage) {
            // diag::kCStreamHints (FINEGEMM_DIAG_C_STREAM_HINTS): C loaded evict-first.
            [[maybe_unused]] const uint64_t pol_c = diag::kCStreamHints ? ptx::l2_policy_evict_first() : 0;
            for (uint32_t w = 0; w < kNumConsumerWG; ++w) {
              ptx::mbar_wait(c_empty_bar(w), c_phase ^ 1u);
              ptx::mbar_arrive_expect_tx(c_full_bar(w), 64 * BLOCK_N * 4);
#pragma unroll
              for (uint32_t b = 0; b < BLOCK_N / 32; ++b) {
                const uint32_t dst = base + Traits::kOffC + (w * (BLOCK_N / 32) + b) * 8192;
                const int32_t c0 = n0 + static_cast<int32_t>(b * 32), c1 = m0 + static_cast<int32_t>(w * 64);
                if constexpr (diag::kCStreamHints) {
                  ptx::tma_load_3d_hint(dst, tmap_d, c_full_bar(w), c0, c1, 0, pol_c);
                } else {
                  ptx::tma_load_3d(dst, tmap_d, c_full_bar(w), c0, c1, 0);
                }
              }
            }
            c_phase ^= 1u;
          }
        }
      }
    } else if (kLayoutCheck && threadIdx.x / 32 == kNumConsumerThreads / 32 + 2) {
      // The layout's rules (one warp per CTA; the producer warpgroup's third warp is idle otherwise).
      if constexpr (kPsumLayout) {
        scheduler::check_psum_layout_warp(grouped, M, num_groups, layout_record, layout_info);
      } else {
        scheduler::check_contiguous_layout_warp(grouped, M, num_groups, layout_scratch, layout_record, layout_info);
      }
    } else if (kSfaGather && threadIdx.x / 32 == kNumConsumerThreads / 32 + 2) {
      // The sfa warp (kSfaGather): walks the producer's sequence of (unit, k-block) and writes
      // each stage's BLOCK_M row scales (lane + 32 j) from sfa [M, G, Kb] in place, rows past M as
      // zeros (as a TMA box's fill). Each lane copies its rows with cp.async once the stage is
      // free and arrives when they land, so like the TMA producer this warp runs up to the ring's
      // depth ahead of the consumers; loading into registers first cost a load round trip per
      // k-block on the critical path (diag::kSfaGatherLdg, v1.01). A row's k-blocks share a
      // sector in the head-major layout, so after a tile's first k-block they hit L1 (.ca).
      constexpr uint32_t kRowsPerLane = BLOCK_M / 32;
      const uint32_t lane = threadIdx.x % 32;
      float* sfa_stages = reinterpret_cast<float*>(smem + Traits::kOffSfa);
      uint32_t stage = 0, phase = 0;
      Walker walker(M, N, num_kb, 1u, grouped, num_groups);
      scheduler::TileCoords t;
      for (uint32_t unit = cluster_id;; unit += num_clusters) {
        if (!next_tile(walker, unit, t)) break;
        uint32_t kb_begin, kb_end;
        unit_k_blocks(t.split, t.skip, kb_begin, kb_end);
        const float* rows = sfa_gather + static_cast<size_t>(t.group) * sfa_ld_g;
        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
          const size_t k_off = static_cast<size_t>(k_block_at(kb, kb_begin, kb_end)) * sfa_ld_k;
          if constexpr (diag::kSfaGatherLdg) {
            float v[kRowsPerLane];
#pragma unroll
            for (uint32_t j = 0; j < kRowsPerLane; ++j) {
              const uint32_t row = t.sfa_m + lane + 32 * j;
              v[j] = row < M ? __ldg(rows + static_cast<size_t>(row) * sfa_ld_m + k_off) : 0.0f;
            }
            ptx::mbar_wait(empty_bar(stage), phase ^ 1u);
#pragma unroll
            for (uint32_t j = 0; j < kRowsPerLane; ++j) sfa_stages[stage * BLOCK_M + lane + 32 * j] = v[j];
            __syncwarp();  // every lane's stores before the one (release) arrive
            if (lane == 0) ptx::mbar_arrive(full_bar(stage));
          } else {
            ptx::mbar_wait(empty_bar(stage), phase ^ 1u);
#pragma unroll
            for (uint32_t j = 0; j < kRowsPerLane; ++j) {
              const uint32_t row = t.sfa_m + lane + 32 * j;
              // A row past M reads nothing (src-size 0); its address is kept in bounds anyway.
              const float* src = rows + static_cast<size_t>(row < M ? row : 0u) * sfa_ld_m + k_off;
              ptx::cp_async_4(ptx::smem_addr(sfa_stages + stage * BLOCK_M + lane + 32 * j), src, row < M);
            }
            ptx::cp_async_mbar_arrive(full_bar(stage));
          }
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    } else if (kScaleWarp && threadIdx.x / 32 == kNumConsumerThreads / 32 + 1) {
      // The scale warp (1D2D): walks the producer's sequence of (unit, k-block) and writes each
      // stage's B scales into shared memory, then arrives on the stage's full barrier. Lane i
      // loads k-block kb0 + i of a 32-k-block chunk (one load round trip per 32 k-blocks, issued
      // while the ring is still kNumStages k-blocks ahead of the consumers); lane kb - kb0 stores.
      const uint32_t lane = threadIdx.x % 32;
      const uint32_t num_sfb_blocks = (N + 127) / 128;
      float* sfb_smem = reinterpret_cast<float*>(smem + Traits::kOffSfb);
      uint32_t stage = 0, phase = 0;
      Walker walker(M, N, num_kb, kSplitK ? num_splits : 1u, grouped, num_groups, layout_info & 0xffu);
      scheduler::TileCoords t;
      for (uint32_t unit = cluster_id; kGrouped || unit < sched.num_units; unit += num_clusters) {
        if (!next_tile(walker, unit, t)) break;
        uint32_t kb_begin, kb_end;
        unit_k_blocks(t.split, t.skip, kb_begin, kb_end);
        // The tile's scale blocks, clamped (blocks past the end are never selected; a phantom
        // tile's scales are never stored). Addresses are recomputed per load: this warp runs in
        // the producer's 40 registers.
        const float* sfb_group = sfb + static_cast<size_t>(t.group) * num_sfb_blocks * num_kb;
        const uint32_t nb0 = t.n_block * BLOCK_N / 128;
        for (uint32_t kb0 = kb_begin; kb0 < kb_end; kb0 += 32) {
          float v[kSpan];
          const uint32_t kb_mine = kb0 + lane;
#pragma unroll
          for (uint32_t b = 0; b < kSpan; ++b) {
            const uint32_t nb = nb0 + b < num_sfb_blocks ? nb0 + b : num_sfb_blocks - 1;
            v[b] = kb_mine < kb_end
                       ? __ldg(sfb_group + static_cast<size_t>(nb) * num_kb + k_block_at(kb_mine, kb_begin, kb_end))
                       : 0.0f;
          }
          const uint32_t n_here = kb_end - kb0 < 32 ? kb_end - kb0 : 32;
          for (uint32_t i = 0; i < n_here; ++i) {
            ptx::mbar_wait(empty_bar(stage), phase ^ 1u);
            if (lane == i) {
#pragma unroll
              for (uint32_t b = 0; b < kSpan; ++b) sfb_smem[stage * (Traits::kSmemSfb / 4) + b] = v[b];
              ptx::mbar_arrive(full_bar(stage));  // release: orders the stores before the arrive
            }
            __syncwarp();
            if (++stage == kNumStages) {
              stage = 0;
              phase ^= 1u;
            }
          }
        }
      }
    }
    // Split cluster: the producer warpgroup's wait in the init barrier (push form) or its part in
    // the barrier after which the owners read the peers' partials (pull form): every thread of the
    // cluster takes part in each cluster barrier.
    if (split_cluster) {
      if constexpr (kSplitPush) {
        ptx::cluster_wait();
      } else {
        epilogue::publish_split_partials_producer();
      }
    }
  } else {
    // ------------------------------------------------------------------ consumer warpgroups
    if constexpr (Traits::kSetMaxNReg) ptx::setmaxnreg_inc<Traits::kConsumerRegs>();
    // Masked kind: the shared-memory base again, through a shuffle. ptxas otherwise re-derives it
    // inside the k-loop (S2UR of the CTA's cluster id + dependent uniform ops in front of every
    // k-block's full-barrier wait); a shuffle's result is not rematerialized. -2 to -5% on every
    // masked shape (benchmarks/NOTES.md v0.29). The bm128 lean loops of the other kinds keep the
    // base in a uniform register; the bm64 and bn224 loops re-derive it too, but there the
    // shuffle traded the S2UR for an R2UR per wgmma and measured within noise (64x2112x7168).
    if constexpr (kGemmKind == scheduler::kGemmGroupedMasked) base = __shfl_sync(0xffffffffu, base, 0);
    const uint32_t wg = kLeanLoop ? __shfl_sync(0xffffffffu, threadIdx.x / 128, 0) : threadIdx.x / 128;
    const uint32_t warp = (threadIdx.x % 128) / 32;
    const uint32_t lane = threadIdx.x % 32;
    // This thread's two rows inside the tile (wgmma D fragment: row 16*warp + lane/4, +8).
    const uint32_t r0 = wg * 64 + warp * 16 + lane / 4;
    const uint32_t col_in_chunk = 2 * (lane % 4);

    constexpr uint32_t kHalfAcc = kMmaN / 2;  // accumulators of one wgmma batch
    constexpr uint32_t kHalfChunks = kMmaN / 8;
    float acc_lo[kHalfAcc];  // columns [0, kMmaN) of the tile
    float acc_hi[kHalfPromote && !kSerialHalves ? kHalfAcc : 1];  // columns [kMmaN, BLOCK_N) with kHalfPromote
    float fin[kNumAcc];
#pragma unroll
    for (uint32_t i = 0; i < kHalfAcc; ++i) acc_lo[i] = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < (kHalfPromote && !kSerialHalves ? kHalfAcc : 1); ++i) acc_hi[i] = 0.0f;

    // One batch of 4 wgmmas (K = 4 x 32) over columns [col0, col0 + kMmaN) of stage `s`'s B tile.
    auto issue = [&](float(&acc)[kHalfAcc], uint32_t s, uint32_t col0) {
      const uint64_t desc_a =
          ptx::make_smem_desc_k_sw128(base + Traits::kOffA + s * Traits::kSmemA + wg * 64 * Traits::BLOCK_K);
      // (kBGroup 1 keeps its own expressions here and in the stage's byte count: written through
      // BRing, ptxas allocates and schedules the kernels differently.)
      const uint64_t desc_b =
          kBGroup == 1 ? ptx::make_smem_desc_k_sw128(base + Traits::kOffB + s * Traits::kSmemB + col0 * Traits::BLOCK_K)
                       : ptx::make_smem_desc_k_sw128(BRing::addr(base + Traits::kOffB, s, col0), BRing::kSbo);
      ptx::fence_operands(acc);
      ptx::wgmma_fence();
#pragma unroll
      for (uint32_t k = 0; k < Traits::BLOCK_K / 32; ++k) {
        // +32 bytes along K per step = +2 in the descriptor's (address >> 4) field; the first
        // step overwrites the accumulators (scale-d = 0).
        Mma::mma(desc_a + 2 * k, desc_b + 2 * k, acc, k > 0 ? 1u : 0u);
      }
      ptx::wgmma_commit();
    };
    // Lane 0 of every consumer warp releases stage `s` (to the peer CTA too with multicast).
    auto release = [&](uint32_t s) {
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(empty_bar(s));
      if constexpr (kNumMulticast > 1) {
        if (lane == 1) ptx::mbar_arrive_cluster(empty_bar(s), rank ^ 1u);
      }
    };

    uint32_t stage = 0, phase = 0;
    [[maybe_unused]] uint32_t c_phase = 0;  // kCStage: parity of this warpgroup's C buffer
    // Diagnostic loops (diag::kNoMma): release the current stage and move to the next.
    auto release_and_advance = [&]() {
      release(stage);
      if (++stage == kNumStages) {
        stage = 0;
        phase ^= 1u;
      }
    };
    FG_TRACE_ONLY(uint32_t traced_tile = 0; void* const wg_trace = threadIdx.x % 128 == 0 ? trace_buf : nullptr;)
    Walker walker(M, N, num_kb, kSplitK ? num_splits : 1u, grouped, num_groups, layout_info & 0xffu);
    scheduler::TileCoords t;
    for (uint32_t unit = cluster_id; kGrouped || unit < sched.num_units; unit += num_clusters) {
      FG_TRACE_ONLY(const uint32_t traced = traced_tile++; void* tail_trace = wg_trace;)
      FG_TRACE_TILE(wg_trace, wg, traced, 0);
      uint32_t m_block, n_block, split;
      if constexpr (kGrouped) {
        if (!walker.next(unit, rank, t)) break;
        m_block = t.m_block, n_block = t.n_block, split = t.split;
      } else {  // the dense loop head (see the producer)
        sched.get(unit, rank, m_block, n_block, split);
        t.a_row = m_block * BLOCK_M;
        t.skip = false;
        t.group = 0;
      }
      uint32_t kb_begin, kb_end;
      unit_k_blocks(split, t.skip, kb_begin, kb_end);
      uint32_t m0 = t.a_row;  // first row in the 2-D A / D view
      if constexpr (kKGrouped) {
        // The slot's k-blocks (as the producer); D rows of group g start at g * M ([G*M, N] view).
        const Sm90Fp8KGroupedSlot& sl = kgroups->slot[t.group];
        kb_begin = 0;
        kb_end = sl.num_kb;
        m0 = sl.group * M + t.a_row;
      }
      const uint32_t n0 = n_block * BLOCK_N;

      if constexpr (k1D1D) {
        // 1D1D main loop: per-column B scales from the stage's sfb row in shared memory (columns
        // 8 j + 2 (lane % 4) + {0, 1} of the tile, as the accumulator fragment); the stage is
        // released only after the promotion has read them.
        const float* sfb_smem = reinterpret_cast<const float*>(smem + Traits::kOffSfb);
#pragma unroll
        for (uint32_t i = 0; i < kNumAcc; ++i) fin[i] = 0.0f;
        if constexpr (kKBatch > 1) {
        // k-block batches (as the 1D2D k-batch loop): the wgmmas of kKBatch k-blocks go into their
        // own accumulator sets under staggered waits, so k-block j's promotion overlaps the later
        // ones' tensor work inside this warpgroup; each stage is released after its promotion
        // (its column scales are read there). Whole batches, then the rest one at a time.
        float accb[kKBatch][kHalfAcc];
        const uint32_t kb_batched_end = kb_begin + (kb_end - kb_begin) / kKBatch * kKBatch;
        for (uint32_t kb0 = kb_begin; kb0 < kb_batched_end; kb0 += kKBatch) {
          uint32_t st[kKBatch];
          float sa0b[kKBatch], sa1b[kKBatch];
#pragma unroll
          for (uint32_t j = 0; j < kKBatch; ++j) {
            st[j] = stage;
            ptx::mbar_wait(full_bar(stage), phase);
            sa0b[j] = sfa_smem[stage * BLOCK_M + r0];
            sa1b[j] = sfa_smem[stage * BLOCK_M + r0 + 8];
            issue(accb[j], stage, 0);
            if (++stage == kNumStages) {
              stage = 0;
              phase ^= 1u;
            }
          }
#pragma unroll
          for (uint32_t j = 0; j < kKBatch; ++j) {
            ptx::wgmma_wait_pending(kKBatch - 1 - j);  // a constant after unrolling
            ptx::fence_operands(accb[j]);
            promote_columns_1d1d<0, kNumChunks>(fin, accb[j], sfb_smem + st[j] * (Traits::kSmemSfb / 4) + col_in_chunk,
                                                sa0b[j], sa1b[j]);
            ptx::fence_proxy_async_shared();  // the scale loads before the release (see below)
            release(st[j]);
          }
        }
#pragma unroll
        for (uint32_t j = 0; j + 1 < kKBatch; ++j) {
          if (kb_batched_end + j < kb_end) {
            ptx::mbar_wait(full_bar(stage), phase);
            const float sa0 = sfa_smem[stage * BLOCK_M + r0];
            const float sa1 = sfa_smem[stage * BLOCK_M + r0 + 8];
            issue(accb[0], stage, 0);
            ptx::wgmma_wait<0>();
            ptx::fence_operands(accb[0]);
            promote_columns_1d1d<0, kNumChunks>(fin, accb[0], sfb_smem + stage * (Traits::kSmemSfb / 4) + col_in_chunk,
                                                sa0, sa1);
            ptx::fence_proxy_async_shared();
            release(stage);
            if (++stage == kNumStages) {
              stage = 0;
              phase ^= 1u;
            }
          }
        }
        } else {  // kKBatch == 1 (kept at its original indentation)
        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
          ptx::mbar_wait(full_bar(stage), phase);
          if constexpr (diag::kNoMma) {  // developer diagnostic (ptx/diag.cuh): the data path alone
            release_and_advance();
            continue;
          }
          const float sa0 = sfa_smem[stage * BLOCK_M + r0];
          const float sa1 = sfa_smem[stage * BLOCK_M + r0 + 8];
          const float* sfb_stage = sfb_smem + stage * (Traits::kSmemSfb / 4) + col_in_chunk;
          if constexpr (kHalfPromote) {
            // Two groups over the tile's column halves; the left half is promoted while the
            // right one still runs (the per-column promotion is twice 1D2D's work). Both complete
            // inside the iteration (see the 1D2D half-promote path: C7514).
            issue(acc_lo, stage, 0);
            issue(acc_hi, stage, kMmaN);
            ptx::wgmma_wait<1>();
            ptx::fence_operands(acc_lo);
            promote_columns_1d1d<0, kHalfChunks>(fin, acc_lo, sfb_stage, sa0, sa1);
            ptx::wgmma_wait<0>();
            ptx::fence_operands(acc_hi);
            promote_columns_1d1d<kHalfChunks, kHalfChunks>(fin, acc_hi, sfb_stage, sa0, sa1);
          } else {
            // The first kSfbPrefetch chunks' column scales are loaded before the wgmmas are
            // issued: loaded after the wait (behind the wgmmas' operand reads) they put a
            // shared-memory round trip on every k-block's critical path, which cost 18-22%
            // (-DFINEGEMM_DIAG_1D1D_NO_SCALE_LOADS, benchmarks/NOTES.md v0.35). The rest (wide
            // tiles: registers) are loaded after the wait as before.
            float2 sbp[kSfbPrefetch > 0 ? kSfbPrefetch : 1];
#pragma unroll
            for (uint32_t j = 0; j < kSfbPrefetch; ++j) {
              sbp[j] = diag::k1d1dNoScaleLoads ? make_float2(sa1, sa0)
                                               : *reinterpret_cast<const float2*>(sfb_stage + 8 * j);
            }
            issue(acc_lo, stage, 0);
            ptx::wgmma_wait<0>();
            ptx::fence_operands(acc_lo);
            if constexpr (diag::kEarlyRelease1d1d) release(stage);
            promote_columns_1d1d_regs<kSfbPrefetch>(fin, acc_lo, sbp, sa0, sa1);
            promote_columns_1d1d<kSfbPrefetch, kHalfChunks - kSfbPrefetch, kSfbPrefetch>(fin, acc_lo, sfb_stage,
                                                                                         sa0, sa1);
          }
          // The stage's sfb was read with ordinary shared loads, and the producer's next TMA (async
          // proxy) overwrites it once the stage is released: without this fence ptxas issued the
          // arrive with some of those loads still outstanding (their FMULs scheduled after it),
          // and the result changed from run to run (scripts/probe_determinism.py, fp32 + C).
          if constexpr (!diag::kNo1d1dFence && !diag::kEarlyRelease1d1d) ptx::fence_proxy_async_shared();
          if constexpr (!diag::kEarlyRelease1d1d) release(stage);
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        }  // if constexpr (kKBatch > 1) ... else
      } else {
      // 1D2D main loop (kept at its original indentation). The k-block's B scales of the tile's
      // (up to kSpan) scale blocks are in the stage (written by the scale warp), or, on the wide
      // loop, read from these rows of sfb (clamped: blocks past the end are never selected).
      const float* sfb_smem = reinterpret_cast<const float*>(smem + Traits::kOffSfb);
      auto stage_b_scales = [&](uint32_t s, float(&sb)[kSpan]) {
#pragma unroll
        for (uint32_t b = 0; b < kSpan; ++b) sb[b] = sfb_smem[s * (Traits::kSmemSfb / 4) + b];
      };
      const float* sfb_rows[kScaleWarp ? 1 : kSpan];
      if constexpr (!kScaleWarp) {
        const uint32_t num_sfb_blocks = (N + 127) / 128;
        const float* sfb_group = sfb + static_cast<size_t>(t.group) * num_sfb_blocks * num_kb;
#pragma unroll
        for (uint32_t b = 0; b < kSpan; ++b) {
          uint32_t nb = n0 / 128 + b;
          nb = nb < num_sfb_blocks ? nb : num_sfb_blocks - 1;
          sfb_rows[b] = sfb_group + static_cast<size_t>(nb) * num_kb;
        }
      }
      // Offset of the tile's first column inside its 128-wide scale block (a multiple of kG).
      const uint32_t n_off = n0 % 128u;

#pragma unroll
      for (uint32_t i = 0; i < kNumAcc; ++i) fin[i] = 0.0f;

      if constexpr (kKBatch > 1) {
      float accb[kKBatch][kHalfAcc];
      // Whole batches, then the (< kKBatch) remaining k-blocks one at a time. No wgmma is issued
      // under a per-k-block condition inside a batch: ptxas serialized every wgmma of the bm64
      // kernels when a batch's issue was conditional (C7520).
      const uint32_t kb_batched_end = kb_begin + (kb_end - kb_begin) / kKBatch * kKBatch;
      for (uint32_t kb0 = kb_begin; kb0 < kb_batched_end; kb0 += kKBatch) {
        float s0[kKBatch][kSpan], s1[kKBatch][kSpan];
        uint32_t st[kKBatch];
#pragma unroll
        for (uint32_t j = 0; j < kKBatch; ++j) {
          st[j] = stage;
          ptx::mbar_wait(full_bar(stage), phase);
          const float sa0 = sfa_smem[stage * BLOCK_M + r0];
          const float sa1 = sfa_smem[stage * BLOCK_M + r0 + 8];
          float sb[kSpan];  // loaded before the issue (see the k_batch == 1 path)
          stage_b_scales(stage, sb);
          issue(accb[j], stage, 0);
#pragma unroll
          for (uint32_t b = 0; b < kSpan; ++b) {
            s0[j][b] = sa0 * sb[b];
            s1[j][b] = sa1 * sb[b];
          }
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        // The batch's sfa loads must be complete before its stages are released (see the
        // k_batch == 1 path): fence while the wgmmas run.
        ptx::fence_proxy_async_shared();
        // Staggered waits: k-block j is promoted (and its stage released) as soon as its own
        // group completes, while the batch's later k-blocks still run on the tensor core. Nothing
        // stays in flight across the loop's back edge (ptxas serializes every wgmma of the kernel
        // when accumulators are read while a group it cannot track may be pending: C7514).
#pragma unroll
        for (uint32_t j = 0; j < kKBatch; ++j) {
          ptx::wgmma_wait_pending(kKBatch - 1 - j);  // a constant after unrolling
          ptx::fence_operands(accb[j]);
          release(st[j]);
          promote<Traits::kStaticChunkBlocks, kHalfChunks, kNumAcc, kSpan, Traits::kG, 0>(n_off, fin, accb[j],
                                                                                        s0[j], s1[j]);
        }
      }
      // The remaining k-blocks.
#pragma unroll
      for (uint32_t j = 0; j + 1 < kKBatch; ++j) {
        if (kb_batched_end + j < kb_end) {
          ptx::mbar_wait(full_bar(stage), phase);
          const float sa0 = sfa_smem[stage * BLOCK_M + r0];
          const float sa1 = sfa_smem[stage * BLOCK_M + r0 + 8];
          float sb[kSpan];
          stage_b_scales(stage, sb);
          issue(accb[0], stage, 0);
          float s0[kSpan], s1[kSpan];
#pragma unroll
          for (uint32_t b = 0; b < kSpan; ++b) {
            s0[b] = sa0 * sb[b];
            s1[b] = sa1 * sb[b];
          }
          ptx::fence_proxy_async_shared();
          ptx::wgmma_wait<0>();
          ptx::fence_operands(accb[0]);
          release(stage);
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
          promote<Traits::kStaticChunkBlocks, kHalfChunks, kNumAcc, kSpan, Traits::kG, 0>(n_off, fin, accb[0], s0, s1);
        }
      }
      } else {  // kKBatch == 1 (kept at its original indentation)

      // kLeanLoop: the k-loop below is instantiated per scale-block offset (with_static_offset);
      // otherwise it runs once and promote() dispatches per k-block.
      auto kloop = [&](auto off_c) {
      constexpr uint32_t kOff = decltype(off_c)::value;
      // Wide loop: B scales software-pipelined one k-block ahead (the load for k-block kb + 1 is
      // issued at the start of iteration kb, so its latency hides behind a k-block of MMA).
      float sb_next[kScaleWarp ? 1 : kSpan];
      if constexpr (!kScaleWarp) {
#pragma unroll
        for (uint32_t b = 0; b < kSpan; ++b) sb_next[b] = __ldg(sfb_rows[b] + k_block_at(kb_begin, kb_begin, kb_end));
      }
      float sa0 = 0.0f, sa1 = 0.0f;

      for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
        // The stage's B scales. Lean loop: shared loads next to the sfa ones, before the wgmma
        // issue. Loaded after the issue, ptxas put the loads and their products between the
        // k-block's 3rd and 4th wgmma, whose issue then waited for the load (shared memory is busy
        // with the wgmma operand reads): +6% / +15% time on bm128 bn208 / bn176; loaded after
        // the wait, +1-6% (NOTES v0.17).
        float sb[kSpan];
        if constexpr (!kScaleWarp) {
          const uint32_t kb_pref = kb + 1 < kb_end ? kb + 1 : kb;  // stays in range (re-reads the last)
#pragma unroll
          for (uint32_t b = 0; b < kSpan; ++b) {
            sb[b] = sb_next[b];
            sb_next[b] = __ldg(sfb_rows[b] + k_block_at(kb_pref, kb_begin, kb_end));
          }
        }
        if constexpr (!kHalfPromote) {
          ptx::mbar_wait(full_bar(stage), phase);
          FG_TRACE_ONLY(if (kb == kb_begin) FG_TRACE_TILE(wg_trace, wg, traced, 1);)
          if constexpr (diag::kNoMma) {  // developer diagnostic (ptx/diag.cuh): the data path alone
            release_and_advance();
            continue;
          }
          sa0 = sfa_smem[stage * BLOCK_M + r0];
          sa1 = sfa_smem[stage * BLOCK_M + r0 + 8];
          if constexpr (kScaleWarp) stage_b_scales(stage, sb);
          issue(acc_lo, stage, 0);
          // The sfa loads must be complete before the stage is released (below): ptxas moved
          // their consumers after the arrive on bm128/bn144 with multicast — the 1D1D race
          // pattern. The proxy fence goes here, while the wgmmas run, so that its wait (for
          // these loads and the stage's B-scale loads) overlaps the tensor-core work; in front of the
          // arrive it cost 7% on 4096x4096x7168, and a register dependency through the warp
          // sync's mask more (v0.9).
          if constexpr (!diag::kNo1d2dFence) ptx::fence_proxy_async_shared();
          ptx::wgmma_wait<0>();
          ptx::fence_operands(acc_lo);
          float s0[kSpan], s1[kSpan];
#pragma unroll
          for (uint32_t b = 0; b < kSpan; ++b) {
            s0[b] = sa0 * sb[b];
            s1[b] = sa1 * sb[b];
          }
          release(stage);
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
          // Promotion: fin += (sfa * sfb) * acc, per 8-column chunk with that chunk's B scale.
          promote_at<kLeanLoop, Traits::kStaticChunkBlocks, kHalfChunks, kNumAcc, kSpan, Traits::kG, kOff, 0>(
              n_off, fin, acc_lo, s0, s1);
        } else {
          // Half-promote: both halves of k-block kb are issued as two groups; the left half is
          // promoted while the right one still runs. Both complete inside the iteration: a group
          // left in flight across the loop's back edge made ptxas serialize every wgmma of the
          // kernel (C7514), which it did to the earlier version of this path.
          // kSerialHalves: the right half goes through acc_lo too, issued once the left half is
          // promoted; the stage is released after the right half's wgmmas complete.
          ptx::mbar_wait(full_bar(stage), phase);
          sa0 = sfa_smem[stage * BLOCK_M + r0];
          sa1 = sfa_smem[stage * BLOCK_M + r0 + 8];
          stage_b_scales(stage, sb);
          issue(acc_lo, stage, 0);
          if constexpr (!kSerialHalves) issue(acc_hi, stage, kMmaN);
          ptx::fence_proxy_async_shared();  // the sfa loads (as the plain path)
          float s0[kSpan], s1[kSpan];
#pragma unroll
          for (uint32_t b = 0; b < kSpan; ++b) {
            s0[b] = sa0 * sb[b];
            s1[b] = sa1 * sb[b];
          }
          ptx::wgmma_wait<kSerialHalves ? 0 : 1>();  // left half done
          ptx::fence_operands(acc_lo);
          promote_at<kLeanLoop, Traits::kStaticChunkBlocks, kHalfChunks, kNumAcc, kSpan, Traits::kG, kOff, 0>(
              n_off, fin, acc_lo, s0, s1);
          auto& acc_right = [&]() -> auto& {
            if constexpr (kSerialHalves) {
              return acc_lo;
            } else {
              return acc_hi;
            }
          }();
          if constexpr (kSerialHalves) issue(acc_right, stage, kMmaN);
          ptx::wgmma_wait<0>();
          ptx::fence_operands(acc_right);
          release(stage);
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
          promote_at<kLeanLoop, Traits::kStaticChunkBlocks, kHalfChunks, kNumAcc, kSpan, Traits::kG, kOff,
                     kHalfChunks>(n_off, fin, acc_right, s0, s1);
        }
      }
      };
      if constexpr (kLeanLoop) {
        with_static_offset<Traits::kStaticChunkBlocks, Traits::kG>(n_off, kloop);
      } else {
        kloop(StaticOffset<0>{});
      }
      }  // if constexpr (kKBatch > 1) ... else
      }  // if constexpr (k1D1D) ... else

      FG_TRACE_TILE(wg_trace, wg, traced, 2);
      // ---------------------------------------------------------------- split-K reduction
      if (split_cluster) {  // false at compile time unless kClusterSplit
        // Every local wgmma has finished reading the ring before it holds the partial.
        ptx::named_barrier_sync(1, kNumConsumerThreads);
        // Reduce-scatter: consumer warp w's 16 rows are summed and stored by split w % S (split
        // kernels store directly, without a warpgroup barrier, so the other warps may leave). The
        // CTA's only unit. Push form (default): the peers' fragments come to the owner; pull form
        // (FINEGEMM_DIAG_SPLIT_PULL): the owner loads them, and every CTA stays until its peers
        // have read its partial (kernel end).
        // Trace: the warpgroup's first warp that owns rows stamps the rest of the tail.
        FG_TRACE_ONLY(uint32_t first_owner = 0;
                      while ((wg * 4 + first_owner) % num_splits != split && first_owner < 4) ++first_owner;
                      void* const owner_trace = threadIdx.x % 128 == first_owner * 32 ? trace_buf : nullptr;)
        if constexpr (kSplitPush) {
          // This ring is free: say so, then push the warps a peer owns or wait for the owned ones'
          // peers (trace: 4 the hand-off begins, 5 the owned rows' bytes are here).
          FG_TRACE_TILE(wg_trace, wg, traced, 4);
          if (!SplitPush::hand_off(fin, split, num_splits, base + Traits::kOffA, recv_bar(), ready_bar())) continue;
          FG_TRACE_TILE(wg_trace, wg, traced, 5);
          SplitPush::gather(fin, split, num_splits, base + Traits::kOffA);
        } else {
          float2* part = reinterpret_cast<float2*>(smem + Traits::kOffA);
          epilogue::write_split_partial_smem<kNumChunks, kNumConsumerThreads, diag::kSplitPartialF4>(fin, part);
          FG_TRACE_TILE(wg_trace, wg, traced, 4);
          epilogue::publish_split_partials<kNumConsumerThreads>();  // the partials are there (release / acquire)
          FG_TRACE_TILE(wg_trace, wg, traced, 5);
          if ((threadIdx.x / 32) % num_splits != split) continue;
          epilogue::gather_cluster_split_partials<kNumChunks, kNumConsumerThreads, (kNumChunks <= 4 ? 8 : 1),
                                                  diag::kSplitPartialF4>(fin, base + Traits::kOffA, num_splits, split);
        }
        FG_TRACE_ONLY(tail_trace = owner_trace;)
        FG_TRACE_TILE(tail_trace, wg, traced, 6);
        if constexpr (kSplitTmaStore) {
          if ((flags & kFlagTmaStore) != 0) {
            EpiTma::store_warp(fin, base + kSplitStagingOff + wg * EpiTma::kBytes, tmap_d, static_cast<int32_t>(n0),
                               static_cast<int32_t>(m0 + wg * 64 + warp * 16));
            FG_TRACE_TILE(tail_trace, wg, traced, 3);
            continue;
          }
        }
      } else if constexpr (kSplitK && !diag::kSplitNoReduce) {
        // A multicast pair's phantom tile (past the last m- / n-block: it only fed its peer's loads)
        // has no slab and no counter: nothing to write, nobody waits for it.
        if (kNumMulticast > 1 && (m_block >= num_m_blocks || n_block >= num_n_blocks)) continue;
        // Partials and their in-order sum: epilogue/split_k.cuh.
        const uint32_t tile = sched.tile_index(m_block, n_block);
        float2* slab = reinterpret_cast<float2*>(workspace) +
                       static_cast<size_t>(tile) * sched.num_splits * (BLOCK_M * BLOCK_N / 2);
        float2* mine = slab + static_cast<size_t>(split) * (BLOCK_M * BLOCK_N / 2);
        const bool row0_ok = m0 + r0 < M, row1_ok = m0 + r0 + 8 < M;
        epilogue::write_split_partial<kNumChunks, kNumConsumerThreads>(fin, mine, row0_ok, row1_ok);
        __threadfence();
        ptx::named_barrier_sync(1, kNumConsumerThreads);
        if (threadIdx.x == 0) {
          const int prev = atomicAdd(counters + tile, 1);
          const bool last = prev == static_cast<int>(sched.num_splits) - 1;
          if (last) atomicExch(counters + tile, 0);  // every split has arrived: reset for the next call
          *flag_smem = last ? 1 : 0;
          __threadfence();
        }
        ptx::named_barrier_sync(1, kNumConsumerThreads);
        const bool last = *flag_smem != 0;
        if (!last) {
          FG_TRACE_TILE(wg_trace, wg, traced, 3);  // a non-last split ends here
          continue;
        }
        if constexpr (!diag::kSplitNoSum) {  // developer diagnostic (ptx/diag.cuh)
          __threadfence();
          if constexpr (kNumChunks <= 8) {
            epilogue::sum_split_partials<kNumChunks, kNumConsumerThreads, BLOCK_M * BLOCK_N / 2>(fin, slab, sched.num_splits,
                                                                                                row0_ok, row1_ok);
          } else {
            // Wide tiles: every split's partial in split order, per chunk (the helper spilled here).
#pragma unroll
            for (uint32_t i = 0; i < kNumAcc; ++i) fin[i] = 0.0f;
            for (uint32_t s = 0; s < sched.num_splits; ++s) {
              const float2* part = slab + static_cast<size_t>(s) * (BLOCK_M * BLOCK_N / 2);
#pragma unroll
              for (uint32_t j = 0; j < kNumChunks; ++j) {
                if (row0_ok) {
                  const float2 v = __ldcg(part + (2 * j + 0) * kNumConsumerThreads + threadIdx.x);
                  fin[4 * j + 0] += v.x;
                  fin[4 * j + 1] += v.y;
                }
                if (row1_ok) {
                  const float2 v = __ldcg(part + (2 * j + 1) * kNumConsumerThreads + threadIdx.x);
                  fin[4 * j + 2] += v.x;
                  fin[4 * j + 3] += v.y;
                }
              }
            }
          }
        }
      }

      // ---------------------------------------------------------------- epilogue
      if constexpr (kGemmKind == scheduler::kGemmGroupedContiguous) {
        // Padding rows (group id -1; with kLayoutCheck any id outside [0, G), as the check kernel
        // makes them) of a mixed tile are written as zeros (select, not a multiply: garbage must
        // not leak as NaN).
        // psum: the rows at or past the group's end (a skipped tile's accumulators are zeros anyway).
        [[maybe_unused]] const int psum_end = kPsumLayout && !t.skip ? __ldg(grouped + t.group) : 0;
#pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
          const uint32_t row = m0 + r0 + 8 * h;
          bool pad;
          if constexpr (kPsumLayout) {
            pad = static_cast<int>(row) >= psum_end;  // row < M <= INT32_MAX
          } else {
            const int id = row < M ? __ldg(grouped + row) : 0;
            pad = id < 0 || (kLayoutCheck && static_cast<uint32_t>(id) >= num_groups);
          }
#pragma unroll
          for (uint32_t j = 0; j < kNumChunks; ++j) {
            fin[4 * j + 2 * h + 0] = pad ? 0.0f : fin[4 * j + 2 * h + 0];
            fin[4 * j + 2 * h + 1] = pad ? 0.0f : fin[4 * j + 2 * h + 1];
          }
        }
      }
      // Recomputed (not kept live across the main loop). K-grouped: the end of the tile's group.
      uint32_t row_limit = kKGrouped ? kgroups->slot[t.group].group * M + M : walker.row_limit();
      void* d_tile = d_ptr;
      [[maybe_unused]] const float* c_tile = c_ptr;
      if constexpr (kHeadsPacked) {
        // D (and C) [M, G*N]: the group's rows are 0 .. M-1 at columns g*N .. (g+1)*N - 1 (a moved base).
        m0 -= t.group * M;
        row_limit -= t.group * M;
        const size_t col0 = static_cast<size_t>(t.group) * N;
        if constexpr (kOutFp32) {
          d_tile = static_cast<float*>(d_ptr) + col0;
        } else {
          d_tile = static_cast<__nv_bfloat16*>(d_ptr) + col0;
        }
        if constexpr (kHasC) c_tile = c_ptr + col0;
      }
      if constexpr (kTmaStore && k1D1D) {
        // C (when the kernel has it) is D itself here: the boxes are reduce-added into it. D's map
        // is (N, rows per group, groups): rows past the group's M are dropped by TMA.
        if ((flags & kFlagTmaStore) != 0) {
          const uint32_t group = kKGrouped ? kgroups->slot[t.group].group : 0u;
          EpiTmaF32::store(fin, base + Traits::kOffD + wg * EpiTmaF32::kBytes, tmap_d, 2 + wg,
                           static_cast<int32_t>(n0), static_cast<int32_t>(m0 - group * M + wg * 64),
                           static_cast<int32_t>(group));
          FG_TRACE_TILE(wg_trace, wg, traced, 3);
          continue;
        }
      } else if constexpr (kTmaStore) {
        // Masked: only a warpgroup whose 64 rows are all valid may TMA-store (the box would
        // otherwise overwrite rows >= masked_m, which must stay untouched). Heads packed: every
        // group is M rows, the map's rows (TMA drops the rest), at the group's columns.
        const bool tma_rows_ok =
            kHeadsPacked || kGemmKind != scheduler::kGemmGroupedMasked || m0 + wg * 64 + 64 <= row_limit;
        if ((flags & kFlagTmaStore) != 0 && tma_rows_ok) {
          if constexpr (diag::kNoEpilogue) continue;  // developer bound (ptx/diag.cuh): D never written
          const uint32_t d_col0 = kHeadsPacked ? t.group * N + n0 : n0;
          EpiTma::store(fin, base + Traits::kOffD + wg * EpiTma::kBytes, tmap_d, 2 + wg,
                        static_cast<int32_t>(d_col0), static_cast<int32_t>(m0 + wg * 64));
          FG_TRACE_TILE(wg_trace, wg, traced, 3);
          continue;
        }
      }
      if constexpr (kHeadMid != 0) continue;  // not reached: the host launches it only with D's map (kFlagTmaStore)
      // Direct register -> global stores.
      const bool vec = (flags & kFlagVectorStores) != 0;
      if constexpr (kHasC) {
        bool c_added = false;
        if constexpr (kCStage) {
          if (c_stage) {
            // C from the stage the producer loaded (add_c_fp32_staged); the buffer goes back to
            // the producer once every warp has read its part (the fence as for the ring's stages).
            ptx::mbar_wait(c_full_bar(wg), c_phase);
            epilogue::add_c_fp32_staged<BLOCK_N>(fin, base + Traits::kOffC + wg * (64 * BLOCK_N * 4),
                                                 warp * 16 + lane / 4, lane);
            ptx::fence_proxy_async_shared();
            __syncwarp();
            if (lane == 0) ptx::mbar_arrive(c_empty_bar(wg));
            c_phase ^= 1u;
            c_added = true;
          }
        }
        if (!c_added) {
          epilogue::add_c_fp32<BLOCK_N, kNumChunks>(fin, c_tile, m0, r0, m0 + wg * 64 + 64, n0, col_in_chunk, ldd, N,
                                                   row_limit, vec);
        }
      }
      // Developer switch (ptx/diag.cuh FINEGEMM_DIAG_C_STREAM_HINTS): D stored evict-first in the
      // 1D1D epilogue with C. It measured slower (NOTES v0.75), so it is off.
      constexpr bool kStreamD = k1D1D && kHasC && diag::kCStreamHints;
      epilogue::store_direct<kNumChunks, kStreamD>(fin, d_tile, m0, r0, n0, col_in_chunk, ldd, N, row_limit, vec,
                                                   kOutFp32);
      FG_TRACE_TILE(tail_trace, wg, traced, 3);
    }
    if constexpr (kTmaStore) EpiTma::finish();  // the last tile's stores complete before exit (same for fp32)
  }
  // No CTA of a cluster may exit while its peer can still multicast into it or arrive on its
  // barriers, or (split cluster, pull form) read its partial: every thread (producer warpgroup
  // included, none exited early) meets here.
  // The pull form's barrier orders only execution (its remote loads have returned: their sums
  // were stored), so it arrives relaxed (-3 to -5% on the split-cluster picks, NOTES v1.13).
  // Push form: no barrier. Every byte pushed into a CTA has landed before its owner warps pass
  // their receive barrier, and every "ring free" arrive into it before its pushing warps pass
  // their ready barrier; nothing is read from a peer.
  if (split_cluster) {
    if constexpr (!kSplitPush) {
      ptx::cluster_arrive_relaxed();
      ptx::cluster_wait();
    }
  } else if (kNumMulticast > 1) {
    ptx::cluster_sync();
  }
  FG_TRACE_ONLY(if (threadIdx.x < kNumConsumerThreads && threadIdx.x % 128 == 0)
                    FG_TRACE_TILE(trace_buf, threadIdx.x / 128, 0, 7);)
}

}  // namespace impls
}  // namespace finegemm
