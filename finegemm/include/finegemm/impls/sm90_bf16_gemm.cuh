// SM90 BF16 GEMM in every layout:  D[m, n] = C[m, n] + sum_k A(m, k) * B(k, n)
// A bf16, stored K-major ([M, K], row pitch lda) or M-major ([K, M], row pitch lda);
// B bf16, stored K-major ([N, K], row pitch ldb) or N-major ([K, N], row pitch ldb);
// D bf16 or fp32 [M, N] (row pitch ldd), C fp32 [M, N] like D (only with fp32 D; may be D).
// Layout suffixes of the API: nt = (A K-major, B K-major), nn = (K, N-major), tn = (M-major,
// N-major), tt = (M-major, K-major). Every layout runs natively: TMA loads the stored layout
// with the 128-byte swizzle and the wgmma instruction reads it through its transpose bits
// (imm-trans-a / imm-trans-b = 1 for MN-major operands, allowed for 16-bit types).
//
// Shared-memory tiles of one stage (BLOCK_K = 64 = 128 bytes of bf16 = the swizzle span):
//   K-major operand:  one TMA box (64 K inner, ROWS outer): ROWS rows of 128 bytes; descriptor
//                     ptx::make_smem_desc_k_sw128; a k16 step adds 32 bytes.
//   MN-major operand: ROWS / 64 TMA boxes (64 M/N inner, 64 K outer), 8 KB each, one after
//                     the other: inside a box every K row holds 64 consecutive M/N elements;
//                     descriptor ptx::make_smem_desc_mn<128> with LBO = 8 KB (next 64-wide
//                     chunk), SBO = 1 KB (next 8 K rows); a k16 step adds 2048 bytes.
//                     An N-major B tile narrower than a box (BLOCK_N 16 / 32, for skinny N) is
//                     one box of BLOCK_N columns with the 32- / 64-byte swizzle: K rows of
//                     2 * BLOCK_N bytes, SBO = 8 rows, a k16 step adds 16 rows. Its stage is the
//                     same BLOCK_N x 128 bytes as a K-major B's.
//   The 64 rows of consumer warpgroup wg sit at +wg * 8 KB in both layouts.
//
// Persistent, warp-specialized kernel (the FP8 family's structure, impls/sm90_fp8_gemm_1d2d.cuh):
//   warpgroups 0 .. kNumConsumerWG-1 : consumers; each owns 64 rows of the BLOCK_M tile and
//                                      issues 4 wgmma m64nBLOCK_Nk16 per stage into its FP32
//                                      register accumulators (no promotion: bf16 products are
//                                      exact in the tensor core's fp32 accumulation).
//   warpgroup kNumConsumerWG          : producer; one thread issues the TMA loads.
// Barriers per stage: full (count 1 + the stage's TMA bytes) and empty (count = consumer warps).
// The consumers keep one wgmma group in flight: after committing k-block kb they wait until
// only that group is pending (wait_group 1), so k-block kb-1 has finished reading its stage,
// which they then release.
//
// Epilogue: with kTmaStore (the non-split kernels) and the host's kFlagTmaStore (bf16 D, no C,
// d 16-byte aligned with ldd % 8 == 0), the 64 x BLOCK_N fragment of each warpgroup goes through
// the FP8 family's swizzled staging buffer + TMA store (epilogue/tma_store_bf16.cuh), overlapped
// with the next tile. Otherwise direct register -> global stores, with the output dtype and C
// chosen at run time (flags), predicated on M and N.
//
// Split-K (kSplitK): a work unit is (tile, split); each split covers a contiguous k-block range
// and writes its FP32 partial tile to the workspace; the CTA that finishes last (per-tile atomic
// counter) sums all partials in split order 0..S-1 (deterministic), writes D and resets the
// counter to 0 for the next call. Launched as one cluster per tile (kClusterSplit), the splits sum
// the partials from each other's shared memory instead, each for its share of the tile's warps,
// in the same order (bitwise the same D).
//
// M-grouped kinds (kGemmKind, scheduler/grouped_bf16.cuh; K-major A, no split-K, bf16 D
// without C): kBf16GemmGroupedContiguous (MoE prefill: A [M, K] rows of all groups stacked,
// B [G*N, K], `grouped` = int32 group id per row, -1 = padding row, written as zeros; a tile
// whose first row is padding skips the main loop and stores zeros) and kBf16GemmGroupedMasked
// (MoE decode: A [G*Mmax, K], B [G*N, K], D [G*Mmax, N], M = Mmax, `grouped` = masked_m [G] read
// and clamped to [0, Mmax] on the GPU; only rows < masked_m[g] are written: the TMA store for a
// warpgroup whose 64 rows are all valid, predicated direct stores otherwise). Tiles of group g
// read B rows g*N + n0 ..: rows past N (the next group's, or zero-filled) only feed columns >= N,
// which are never stored. The contiguous kind also takes an N-major B (kBMnMajor: [G, K, N], the
// nn layout of the MoE backward pass) through a 3-D map (N, K, G), so a group's k-blocks past K
// are zero-filled by TMA rather than read from the next group. The dense kind (kBf16GemmNormal)
// keeps its own loop head.
//
// K-grouped kind kBf16GemmKGrouped (MoE weight gradient; tn layout, fp32 D [G, M, N], optional fp32
// C like D, no split-K): A [sum(k_g), M] and B [sum(k_g), N] have K as the OUTER
// dimension, so the dense tn tensor maps over the whole arrays serve every group: group g's
// k-blocks are rows [kb_begin * 64, (kb_begin + num_kb) * 64) of the same maps. One launch walks
// every group's tiles (scheduler::Bf16KGroupedWalker over the by-value group table `kgroups`); a
// tile runs the dense producer / consumer loops on its group's k-block range and stores rows
// g * M + m of D viewed as [G * M, N] (C likewise, same strides); an empty group's tiles run no
// k-block and store C or zeros.
// Its epilogue is the FP8 recipe (1,1,128) one (epilogue/tma_store_fp32.cuh, always built in:
// kTmaStore): when the host sets kBf16FlagTmaStore (C null or C = D, a D map TMA can address), each
// warpgroup's fragment goes out in 32-column fp32 boxes through a 16 KB ring, a TMA store, or with
// C = D a TMA reduce-add (whose D boxes the producer prefetches into L2 over the tile's last
// k-blocks), overlapped with the next tile; otherwise the direct stores (+ C).
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
#include <finegemm/ptx/common.cuh>
#include <finegemm/ptx/diag.cuh>
#include <finegemm/ptx/mbarrier.cuh>
#include <finegemm/ptx/tma.cuh>
#include <finegemm/ptx/wgmma.cuh>
#include <finegemm/ptx/wgmma_bf16.cuh>
#include <finegemm/scheduler/contiguous_layout_check.cuh>
#include <finegemm/scheduler/grouped_bf16.cuh>
#include <finegemm/scheduler/persistent.cuh>

namespace finegemm {
namespace impls {

// Compile-time facts of one configuration; the host mirrors kDynamicSmemBytes and kNumThreads
// (finegemm/heuristics/sm90_bf16_gemm.py: smem_bytes(), num_threads()).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kTmaStore, bool kFp32Staging = false>
struct Sm90Bf16GemmTraits {
  static constexpr uint32_t BLOCK_K = 64;         // 64 bf16 = 128 bytes = the swizzle span
  static constexpr uint32_t kRowBytes = BLOCK_K * 2;
  static constexpr uint32_t kChunkBytes = 64 * kRowBytes;  // one 64-row (K-major) / 64-col (MN-major) slice
  static constexpr uint32_t kNumConsumerWG = BLOCK_M / 64;
  static constexpr uint32_t kNumConsumerThreads = kNumConsumerWG * 128;
  static constexpr uint32_t kNumThreads = kNumConsumerThreads + 128;
  // setmaxnreg split (ptx::consumer_regs; BLOCK_M 64 keeps what it was compiled with; BLOCK_M 256,
  // four warpgroups of 112 registers for the dense kind's tall tiles (BLOCK_N <= 128); BLOCK_M 192,
  // three warpgroups, for masked groups of ~192 rows: no padding m-block).
  static constexpr uint32_t kConsumerRegs = ptx::consumer_regs(kNumConsumerWG);
  static constexpr uint32_t kProducerRegs = ptx::producer_regs(kNumConsumerWG);

  // Shared memory layout (offsets from a 1024-byte aligned base):
  //   [D staging (kTmaStore: BLOCK_M x BLOCK_N bf16, or with kFp32Staging (k-grouped) one fp32
  //   box ring per consumer warpgroup)][A stage 0..S-1][B stage 0..S-1]
  //   [full bar x S][empty bar x S][flag]
  static constexpr uint32_t kSmemA = BLOCK_M * kRowBytes;  // multiple of 8 KB
  static constexpr uint32_t kSmemB = BLOCK_N * kRowBytes;  // multiple of 1 KB (BLOCK_N % 8 == 0)
  static constexpr uint32_t kSmemD =
      !kTmaStore ? 0
                 : (kFp32Staging ? (BLOCK_M / 64) * epilogue::TmaStoreFp32<BLOCK_N, false>::kBytes  // 16 KB each
                                 : BLOCK_M * BLOCK_N * 2);                                          // multiple of 2 KB
  static constexpr uint32_t kOffD = 0;
  static constexpr uint32_t kOffA = kOffD + kSmemD;
  static constexpr uint32_t kOffB = kOffA + kNumStages * kSmemA;
  static constexpr uint32_t kOffFull = kOffB + kNumStages * kSmemB;
  static constexpr uint32_t kOffEmpty = kOffFull + kNumStages * 8;
  static constexpr uint32_t kOffFlag = kOffEmpty + kNumStages * 8;
  static constexpr uint32_t kUsedBytes = kOffFlag + 16;
  static constexpr uint32_t kDynamicSmemBytes = kUsedBytes + 1024;  // + slack to align the base
  // Bytes one stage's TMA loads deliver: the FULL boxes (out-of-bounds parts are zero-filled
  // and still counted).
  static constexpr uint32_t kTxBytes = kSmemA + kSmemB;

  static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 192 || BLOCK_M == 256,
                "BLOCK_M must be 64, 128, 192 or 256");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "BLOCK_N: multiple of 16 in [16, 256]");
  static_assert(kNumStages >= 2 && kNumStages <= 16, "kNumStages out of range");
  static_assert(kDynamicSmemBytes <= 232448, "shared memory above the SM90 227 KB limit");
};

// Kernel parameter flags (bits set by the host launcher, host/sm90_bf16_gemm.cpp).
constexpr uint32_t kBf16FlagVectorStores = 1u;  // D (and C) pointer/stride allow 2-element vector accesses
constexpr uint32_t kBf16FlagTmaStore = 2u;      // tmap_d is valid: TMA-store epilogue (kTmaStore kernels)
constexpr uint32_t kBf16FlagOutFp32 = 4u;       // D is fp32 (else bf16)
constexpr uint32_t kBf16FlagHasC = 8u;          // C (fp32, like D) is added
constexpr uint32_t kBf16FlagBGroup = 16u;       // tmap_b is the 4-D grouped map of kBGroup (host's rule met)

// Persistent tile order of the BF16 GEMM: work unit u -> (m_block, n_block, split). Tiles are
// visited in column groups of kGroupN n-blocks (inside a group the n-block varies fastest, then
// the m-block), so a wave of CTAs covers a compact rectangle of tiles whose A rows and B
// columns are still in L2 when its neighbours read them. The splits of one tile are
// consecutive units (they run concurrently; the last finds the other partials fresh in L2).
template <uint32_t kGroupN>
struct Bf16TileScheduler {
  uint32_t num_m_blocks, num_n_blocks, num_splits, num_units;

  __device__ __forceinline__ Bf16TileScheduler(uint32_t m_blocks, uint32_t n_blocks, uint32_t splits)
      : num_m_blocks(m_blocks), num_n_blocks(n_blocks), num_splits(splits),
        num_units(m_blocks * n_blocks * splits) {}

  __device__ __forceinline__ uint32_t tile_index(uint32_t m_block, uint32_t n_block) const {
    return m_block * num_n_blocks + n_block;
  }

  __device__ __forceinline__ void get(uint32_t unit, uint32_t& m_block, uint32_t& n_block, uint32_t& split) const {
    uint32_t tile = unit;
    split = 0;
    if (num_splits > 1) {
      tile = unit / num_splits;
      split = unit - tile * num_splits;
    }
    const uint32_t group_tiles = kGroupN * num_m_blocks;
    const uint32_t group = tile / group_tiles;
    const uint32_t first_n = group * kGroupN;
    const uint32_t rest = num_n_blocks - first_n;
    const uint32_t width = rest < kGroupN ? rest : kGroupN;
    const uint32_t in_group = tile - group * group_tiles;
    m_block = in_group / width;
    n_block = first_n + (in_group - m_block * width);
  }

  // K-block range [begin, end) of split `split` (balanced, contiguous; the host guarantees
  // num_splits <= num_kb, so no range is empty).
  __device__ __forceinline__ void k_range(uint32_t split, uint32_t num_kb, uint32_t& begin, uint32_t& end) const {
    begin = (num_splits > 1) ? (split * num_kb) / num_splits : 0;
    end = (num_splits > 1) ? ((split + 1) * num_kb) / num_splits : num_kb;
  }
};

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kAMnMajor, bool kBMnMajor, bool kSplitK,
          bool kTmaStore, uint32_t kGemmKind = scheduler::kBf16GemmNormal, bool kLayoutCheck = false,
          bool kPsumLayout = false, uint32_t kBGroup = 1, uint32_t kNumMulticast = 1, bool kMulticastOnA = false>
__device__ __forceinline__ void sm90_bf16_gemm(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                               const CUtensorMap* tmap_d, void* d_ptr, const float* c_ptr,
                                               float* workspace, int* counters, uint32_t M, uint32_t N, uint32_t K,
                                               uint32_t ldd, uint32_t flags, uint32_t num_splits,
                                               const int* grouped = nullptr, uint32_t num_groups = 1,
                                               const scheduler::Bf16KGroupedArgs* kgroups = nullptr,
                                               const CUtensorMap* tmap_a_last = nullptr,
                                               unsigned* layout_scratch = nullptr, int* layout_record = nullptr,
                                               uint32_t layout_info = 0) {
  constexpr bool kKGrouped = kGemmKind == scheduler::kBf16GemmKGrouped;
  using Traits = Sm90Bf16GemmTraits<BLOCK_M, BLOCK_N, kNumStages, kTmaStore, kKGrouped>;
  using EpiTma = epilogue::TmaStoreBf16<BLOCK_N>;
  using EpiTmaF32 = epilogue::TmaStoreFp32<BLOCK_N, false>;
  using EpiTmaF32Add = epilogue::TmaStoreFp32<BLOCK_N, true>;
  using Mma = ptx::WgmmaBf16<BLOCK_N>;
  static_assert(!kTmaStore || !kSplitK, "TMA-store epilogue: no split-K");
  static_assert(BLOCK_M != 192 || kGemmKind == scheduler::kBf16GemmGroupedMasked,
                "BLOCK_M 192 (three consumer warpgroups) is built for the masked kind only");
  // BLOCK_M 256 (four consumer warpgroups, 112 registers each: BLOCK_N / 2 accumulators): the tall
  // tile of the mid-M dense shapes, where two 128-row m-blocks would each stream the same B.
  static_assert(BLOCK_M != 256 || (kGemmKind == scheduler::kBf16GemmNormal && !kSplitK && BLOCK_N <= 128),
                "BLOCK_M 256 (four consumer warpgroups) is built for the dense kind, no split-K, BLOCK_N <= 128");
  static_assert(!kTmaStore || Traits::kSmemD == (BLOCK_M / 64) * (kKGrouped ? EpiTmaF32::kBytes : EpiTma::kBytes),
                "staging size");
  static_assert(!kBMnMajor || BLOCK_N % 64 == 0 || BLOCK_N == 16 || BLOCK_N == 32,
                "an N-major B tile is whole 64-column TMA boxes, or one 16- / 32-column box");
  static_assert(kGemmKind <= scheduler::kBf16GemmKGrouped, "unknown GEMM kind");
  constexpr bool kContiguous = kGemmKind == scheduler::kBf16GemmGroupedContiguous;
  constexpr bool kMasked = kGemmKind == scheduler::kBf16GemmGroupedMasked;
  constexpr bool kGrouped = kContiguous || kMasked;  // the m-grouped kinds
  static_assert(!kGrouped || (!kAMnMajor && !kSplitK && (!kBMnMajor || kContiguous)),
                "m-grouped kinds: K-major A, no split-K; an N-major B in the contiguous kind only");
  static_assert(!kKGrouped || (kAMnMajor && kBMnMajor && !kSplitK && kTmaStore),
                "k-grouped kind: tn layout, no split-K, the fp32 TMA epilogue built in");
  // kLayoutCheck (contiguous kind, plain layout): `grouped` is the caller's grouped_layout, and
  // the producer warpgroup's idle second warp checks its rules while the GEMM runs
  // (scheduler/contiguous_layout_check.cuh, as the FP8 kernel's): one launch per call.
  static_assert(!kLayoutCheck || kContiguous, "the in-kernel layout check: m-grouped contiguous kind");
  // kPsumLayout (with kLayoutCheck): `grouped` is the caller's psum layout (int32 [G] row ends); the
  // walkers search it, the epilogue zeroes the rows past the tile's group's end, CTA 0's spare warp
  // checks the ends' rules (as the FP8 kernel's kPsumLayout).
  static_assert(!kPsumLayout || kLayoutCheck, "psum ends read by the GEMM: with the in-kernel layout check");
  // kBGroup > 1: B's box covers kBGroup consecutive k-blocks of the tile's rows (a K-major B;
  // impls/b_group_ring.cuh, as the FP8 kernel's). At least two groups in the ring: the consumers
  // release a stage one k-block late (below), so while they wait for a group's first stage they
  // still hold the previous group's last one; with a ring of one group that is the same group,
  // whose box waits for it: a deadlock (it hung on the GPU, benchmarks/NOTES.md v1.05).
  static_assert(kBGroup == 1 || ((kBGroup == 2 || kBGroup == 4) && kNumStages % kBGroup == 0 &&
                                 kNumStages >= 2 * kBGroup && !kBMnMajor &&
                                 kGemmKind == scheduler::kBf16GemmNormal && !diag::kNoTma && !diag::kHalfBTma),
                "B groups: 2 or 4 k-blocks dividing the ring, two groups at least, dense kind, K-major B");
  using BRing = BGroupRing<kBGroup, Traits::kSmemB>;
  // 2-CTA multicast (kNumMulticast 2; the FP8 kernel's machinery): a cluster of two CTAs shares
  // one operand. kMulticastOnA: the pair holds two n-blocks of one m-block and each CTA loads half
  // of A's stage into both; else two m-blocks of one n-block sharing B. A K-major operand's half is
  // a box of half the rows (the host encodes it); an MN-major one's is half of its 64-wide boxes.
  // Dense kind only, no split-K (a split cluster is the cluster), no B groups on a shared B.
  constexpr bool kMcA = kNumMulticast == 2 && kMulticastOnA;
  constexpr bool kMcB = kNumMulticast == 2 && !kMulticastOnA;
  static_assert(kNumMulticast == 1 || (kNumMulticast == 2 && kGemmKind == scheduler::kBf16GemmNormal && !kSplitK &&
                                       (kBGroup == 1 || kMcA) && !diag::kHalfATma && !diag::kHalfBTma),
                "multicast: pairs, dense kind, no split-K, no B groups on a shared B");
  static_assert(!kMcA || (kAMnMajor ? BLOCK_M % 128 == 0 : (BLOCK_M / 2) % 8 == 0),
                "A multicast halves: whole 64-row boxes each (M-major A) or 8-row swizzle atoms (K-major A)");
  static_assert(!kMcB || (kBMnMajor ? BLOCK_N % 128 == 0 : (BLOCK_N / 2) % 8 == 0),
                "B multicast halves: whole 64-column boxes each (N-major B) or 8-row swizzle atoms (K-major B)");
  using Walker = scheduler::Bf16GroupedWalker<kGrouped ? kGemmKind : scheduler::kBf16GemmGroupedContiguous, BLOCK_M,
                                              BLOCK_N, 8, kPsumLayout>;
  using KWalker = scheduler::Bf16KGroupedWalker<BLOCK_M, BLOCK_N, 8>;
  constexpr uint32_t BLOCK_K = Traits::BLOCK_K;
  constexpr uint32_t kNumConsumerWG = Traits::kNumConsumerWG;
  constexpr uint32_t kNumConsumerThreads = Traits::kNumConsumerThreads;
  constexpr uint32_t kNumAcc = BLOCK_N / 2;  // fp32 accumulators per thread (m64 x BLOCK_N / 128)
  constexpr uint32_t kNumChunks = BLOCK_N / 8;
  constexpr uint32_t kChunk = Traits::kChunkBytes;
  // An N-major B tile's TMA box: 64 columns (128-byte rows, 128-byte swizzle), or the whole tile
  // when it is narrower (16 / 32 columns: 32- / 64-byte rows and swizzle).
  constexpr uint32_t kBBoxCols = (kBMnMajor && BLOCK_N < 64) ? BLOCK_N : 64;
  constexpr uint32_t kBMnRowBytes = kBBoxCols * 2;
  // Descriptor address-field step (bytes >> 4) per k16 step: 32 bytes along a K-major row,
  // 16 rows of an MN-major box.
  constexpr uint32_t kStepA = kAMnMajor ? (16 * Traits::kRowBytes) >> 4 : 32 >> 4;
  constexpr uint32_t kStepB = kBMnMajor ? (16 * kBMnRowBytes) >> 4 : 32 >> 4;

  extern __shared__ __align__(1024) uint8_t fg_smem_raw[];
  const uint32_t raw_addr = ptx::smem_addr(fg_smem_raw);
  uint32_t base = (raw_addr + 1023u) & ~1023u;  // the consumers take it through a shuffle (below)
  uint8_t* smem = fg_smem_raw + (base - raw_addr);

  auto full_bar = [&](uint32_t s) { return base + Traits::kOffFull + s * 8; };
  auto empty_bar = [&](uint32_t s) { return base + Traits::kOffEmpty + s * 8; };
  volatile int* flag_smem = reinterpret_cast<volatile int*>(smem + Traits::kOffFlag);

  const uint32_t num_kb = (K + BLOCK_K - 1) / BLOCK_K;
  const uint32_t num_m_blocks = (M + BLOCK_M - 1) / BLOCK_M;
  const uint32_t num_n_blocks = (N + BLOCK_N - 1) / BLOCK_N;
  const Bf16TileScheduler<8> sched(num_m_blocks, num_n_blocks, kSplitK ? num_splits : 1u);
  // Multicast pairs walk super-tiles (scheduler/persistent.cuh: the same column-group order);
  // cluster c takes units c, c + clusters, ... and CTA `rank` the rank-th tile of each. A pair's
  // second tile may lie past the grid (odd block count): a phantom that loads (zero-filled) for its
  // peer and stores nothing.
  const scheduler::PersistentScheduler<kMcB ? 2 : 1, kMcA ? 2 : 1, 8> pair_sched(num_m_blocks, num_n_blocks, 1u);
  [[maybe_unused]] const uint32_t rank = kNumMulticast > 1 ? ptx::cluster_ctarank() : 0u;
  // The loops' unit walk, evaluated where the loops use it (values computed up here changed the
  // non-multicast kernels' SASS): cluster c of a multicast launch walks units c, c + clusters, ...
  auto first_unit = [&]() { return kNumMulticast > 1 ? blockIdx.x / kNumMulticast : blockIdx.x; };
  auto unit_stride = [&]() { return kNumMulticast > 1 ? gridDim.x / kNumMulticast : gridDim.x; };
  auto dense_units = [&]() { return kNumMulticast > 1 ? pair_sched.num_units : sched.num_units; };
  // The dense kind's tile of `unit` (kb range included).
  auto dense_tile = [&](uint32_t unit, uint32_t& m_block, uint32_t& n_block, uint32_t& split) {
    if constexpr (kNumMulticast > 1) {
      pair_sched.get(unit, rank, m_block, n_block, split);
    } else {
      sched.get(unit, m_block, n_block, split);
    }
  };
  // Split-K through distributed shared memory (epilogue/split_k.cuh, as the FP8 kernel): the host
  // launches the splits of each tile as one cluster (rank = split) when every CTA runs exactly one
  // unit and the tile is at most 64 columns wide (fg::split_cluster_size); the partials then never
  // go through L2. The fragment fits the ring, which is idle by then (one unit per CTA).
  constexpr bool kClusterSplit = kSplitK && BLOCK_N <= 64 && !diag::kSplitNoReduce;  // 64: fg::kBf16ClusterSplitMaxN
  static_assert(!kClusterSplit || BLOCK_M * BLOCK_N * 4 <= kNumStages * (Traits::kSmemA + Traits::kSmemB),
                "the split partial reuses the ring");
  const bool split_cluster = kClusterSplit && ptx::cluster_nctarank() > 1;
  // A split cluster's bf16 D (no C) may leave through TMA per warp, staged in the ring past the
  // partial (the host's kBf16FlagTmaStore with a 16-row-box map; as the FP8 kernel's kSplitTmaStore).
  // FINEGEMM_DIAG_BF16_SPLIT_PUSH: the partials pushed into the owners' rings (epilogue::SplitPush,
  // the FP8 kernel's default), the staging after the landing zone; not with a multicast pair. The
  // spread form (fp32 D without C at enough splits) stays a pull (the push's owner-only sums
  // measured +7 to +18% there), chosen at run time. Off by default: on the H200 the push was level
  // on the 2-split records and the mixed kernel cost the spread records 0-2.5% (NOTES v1.15).
  using SplitPush = epilogue::SplitPush<kNumChunks, kNumConsumerThreads / 32>;
  constexpr bool kSplitPush = kClusterSplit && kNumMulticast == 1 && diag::kBf16SplitPush && !diag::kSplitPull &&
                              SplitPush::max_landing_bytes() <= kNumStages * (Traits::kSmemA + Traits::kSmemB);
  // The spread form's rule (a lambda: the default build evaluates it where it did before v1.15).
  auto spread_form = [&] {
    return !diag::kSplitClusterWarpReduce && !diag::kSplitClusterNoPeers && (flags & kBf16FlagOutFp32) != 0 &&
           (flags & kBf16FlagHasC) == 0 && epilogue::spread_split_fits<kNumChunks>(num_splits);
  };
  constexpr uint32_t kSplitPartialBytes = kSplitPush ? SplitPush::max_landing_bytes() : BLOCK_M * BLOCK_N * 4;
  constexpr uint32_t kSplitStagingOff = Traits::kOffA + kSplitPartialBytes;  // multiple of 4096
  constexpr bool kSplitTmaStore =
      kClusterSplit && kSplitPartialBytes + BLOCK_M * BLOCK_N * 2 <= kNumStages * (Traits::kSmemA + Traits::kSmemB);
  // The push form's barriers take the workspace path's flag slot (a split cluster never uses it).
  [[maybe_unused]] auto recv_bar = [&] { return base + Traits::kOffFlag; };
  [[maybe_unused]] auto ready_bar = [&] { return base + Traits::kOffFlag + 8; };

  if (threadIdx.x == 0) {
    // A launch with less dynamic shared memory than this layout needs would corrupt memory.
    if (ptx::dynamic_smem_size() < Traits::kDynamicSmemBytes) __trap();
    // A split cluster must be exactly one tile's splits, one unit per CTA (the host's rule).
    if (split_cluster && (ptx::cluster_nctarank() != num_splits || num_splits > 8 || sched.num_units != gridDim.x))
      __trap();
    // A multicast pair must be launched as 2-CTA clusters (the host's packed option).
    if constexpr (kNumMulticast > 1) {
      if (ptx::cluster_nctarank() != kNumMulticast) __trap();
    }
#pragma unroll
    for (uint32_t s = 0; s < kNumStages; ++s) {
      ptx::mbar_init(full_bar(s), 1);
      // Lane 0 of every consumer warp (of both CTAs of a multicast pair: the peer's loads write
      // into this CTA's stage too).
      ptx::mbar_init(empty_bar(s), kNumConsumerWG * 4 * kNumMulticast);
    }
    ptx::fence_mbarrier_init();
    ptx::fence_proxy_async_shared();
  }
  // (Evaluated here, not beside the rule: held across thread 0's init it spilled bm128 bn32.)
  const bool split_push = kSplitPush && split_cluster && !spread_form();
  // A multicast peer must see initialized barriers before it loads into them (fence.mbarrier_init
  // released the init: a relaxed arrive, as in the FP8 kernel).
  if constexpr (kNumMulticast > 1) {
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait();
  } else {
    __syncthreads();
    // Push form: its barriers' init, then the cluster barrier's init phase (SplitPush::init).
    if constexpr (kSplitPush) {
      if (split_push) SplitPush::init_phase_arrive(recv_bar(), ready_bar(), num_splits);
    }
  }
  // Nothing above touches global memory; everything below may (ptx::griddep_wait).
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();

  if (threadIdx.x >= kNumConsumerThreads) {
    // ------------------------------------------------------------------ producer warpgroup
    if constexpr (kNumConsumerWG >= 2) ptx::setmaxnreg_dec<Traits::kProducerRegs>();
    // L2 policy of the A / B loads (ptx::use_skinny_l2_hints).
    const uint64_t a_rows = static_cast<uint64_t>(M) * (kMasked ? num_groups : 1u);
    const uint64_t b_rows = static_cast<uint64_t>(N) * (kGrouped ? num_groups : 1u);
    const bool one_wave = !kGrouped && !kKGrouped &&
                          static_cast<uint64_t>(num_m_blocks) * num_n_blocks * (kSplitK ? num_splits : 1u) <= gridDim.x;
    const bool l2_hints = ptx::use_skinny_l2_hints(num_m_blocks, one_wave, a_rows * K * 2, b_rows * K * 2);
    const uint64_t pol_a = ptx::l2_policy_evict_last();
    const uint64_t pol_b = ptx::l2_policy_evict_first();
    auto load_a = [&](uint32_t dst, uint32_t bar, int32_t c0, int32_t c1) {
      ptx::tma_load_2d_policy(dst, tmap_a, bar, c0, c1, l2_hints, pol_a);
    };
    auto load_b = [&](uint32_t dst, uint32_t bar, int32_t c0, int32_t c1) {
      ptx::tma_load_2d_policy(dst, tmap_b, bar, c0, c1, l2_hints, pol_b);
    };
    if (kGrouped && threadIdx.x == kNumConsumerThreads) {
      // m-grouped kinds (nt layout): every k-block of a tile, none for a padding tile.
      ptx::tma_prefetch_desc(tmap_a);
      ptx::tma_prefetch_desc(tmap_b);
      uint32_t stage = 0, phase = 0;
      Walker walker(M, N, grouped, num_groups, layout_info & 0xffu);
      scheduler::Bf16GroupedTile t;
      for (uint32_t unit = blockIdx.x;; unit += gridDim.x) {
        if (!walker.next(unit, t)) break;
        if (t.skip) continue;
        const int32_t m0 = static_cast<int32_t>(t.a_row);
        [[maybe_unused]] const int32_t n0 = static_cast<int32_t>(t.b_row);
        for (uint32_t kb = 0; kb < num_kb; ++kb) {
          ptx::mbar_wait(empty_bar(stage), phase ^ 1u);
          ptx::mbar_arrive_expect_tx(full_bar(stage), Traits::kTxBytes);
          const int32_t k0 = static_cast<int32_t>(kb * BLOCK_K);
          load_a(base + Traits::kOffA + stage * Traits::kSmemA, full_bar(stage), k0, m0);
          const uint32_t dst_b = base + Traits::kOffB + stage * Traits::kSmemB;
          if constexpr (kBMnMajor) {
            // [G, K, N] storage, map (N, K, G): boxes of (64 n, 64 k) of the tile's group.
            const int32_t nb0 = static_cast<int32_t>(t.n_block * BLOCK_N);
#pragma unroll
            for (uint32_t c = 0; c < BLOCK_N / kBBoxCols; ++c)
              ptx::tma_load_3d_policy(dst_b + c * kChunk, tmap_b, full_bar(stage),
                                      nb0 + static_cast<int32_t>(c * kBBoxCols), k0,
                                      static_cast<int32_t>(t.group), l2_hints, pol_b);
          } else {
            load_b(dst_b, full_bar(stage), k0, n0);
          }
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    } else if (kLayoutCheck && threadIdx.x / 32 == kNumConsumerThreads / 32 + 1) {
      // The layout's rules (one warp per CTA; psum: CTA 0's).
      if constexpr (kPsumLayout) {
        scheduler::check_psum_layout_warp(grouped, M, num_groups, layout_record, layout_info);
      } else {
        scheduler::check_contiguous_layout_warp(grouped, M, num_groups, layout_scratch, layout_record, layout_info);
      }
    } else if (!kGrouped && threadIdx.x == kNumConsumerThreads) {
      // Dense kind, and the k-grouped kind (its tiles' absolute k-block ranges in the same maps).
      // Dense kind with K-major A: the last m-block loads through tmap_a_last, whose box holds only
      // its rows (impls/fitted_box_rows.h; the host encodes the same boxes); the stage expects only
      // the bytes it loads.
      constexpr bool kFitA = !kKGrouped && !kAMnMajor && !kMcA;  // an A multicast pair keeps full boxes
      const uint32_t first_tx_a = first_a_box_rows(M, BLOCK_M, kFitA, false) * Traits::kRowBytes;
      const uint32_t last_tx_a = last_a_box_rows(M, BLOCK_M, kFitA, false) * Traits::kRowBytes;
      [[maybe_unused]] const uint32_t last_m_block = (M - 1u) / BLOCK_M;
      ptx::tma_prefetch_desc(tmap_a);
      if constexpr (kFitA) ptx::tma_prefetch_desc(tmap_a_last);
      ptx::tma_prefetch_desc(tmap_b);
      // K-grouped with C = D: each tile's D boxes go to L2 ahead of its reduce-add epilogue
      // (TmaStoreFp32::Prefetch).
      constexpr bool kPrefetchC = kKGrouped && !diag::kNoCPrefetch;
      constexpr uint32_t kReduceAddFlags = kBf16FlagTmaStore | kBf16FlagHasC;
      [[maybe_unused]] const bool c_prefetch = kPrefetchC && (flags & kReduceAddFlags) == kReduceAddFlags;
      uint32_t stage = 0, phase = 0;
      [[maybe_unused]] const KWalker kwalk(M, N, kgroups, kKGrouped ? kgroups->num_slots : 0u);
      for (uint32_t unit = first_unit(); unit < (kKGrouped ? kwalk.num_units : dense_units());
           unit += unit_stride()) {
        uint32_t m_block, n_block, split, kb_begin, kb_end;
        [[maybe_unused]] uint32_t group = 0;
        if constexpr (kKGrouped) {
          kwalk.get(unit, m_block, n_block, group, kb_begin, kb_end);
        } else {
          dense_tile(unit, m_block, n_block, split);
          sched.k_range(split, num_kb, kb_begin, kb_end);
        }
        const int32_t m0 = static_cast<int32_t>(m_block * BLOCK_M);
        const int32_t n0 = static_cast<int32_t>(n_block * BLOCK_N);
        const bool last_a = kFitA && m_block == last_m_block;
        const uint32_t a_tx_bytes = last_a ? last_tx_a : first_tx_a;
        const CUtensorMap* map_a = last_a ? tmap_a_last : tmap_a;
        [[maybe_unused]] const typename EpiTmaF32Add::template Prefetch<BLOCK_M / 64> c_prefetch_plan(c_prefetch,
                                                                                                    kb_begin, kb_end);
        // The B groups' rule (the host's): a map encoded for them, whole groups per unit.
        if constexpr (kBGroup > 1) {
          if ((flags & kBf16FlagBGroup) == 0 || (kb_end - kb_begin) % kBGroup != 0) __trap();
        }
        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
          // Fresh barrier: waiting for parity 1 returns at once, so the first pass never blocks.
          ptx::mbar_wait(empty_bar(stage), phase ^ 1u);
          BRing::wait_rest(stage, phase, empty_bar);  // kBGroup: the group's box fills all its stages
          // Diagnostic builds (ptx/diag.cuh) skip some boxes; the stage's byte count follows (0
          // with both skipped: the arrive alone completes the phase).
          const bool skip_a = diag::kNoTma || (diag::kHalfATma && (kb & 1u));
          const bool skip_b = diag::kNoTma || (diag::kHalfBTma && (kb & 1u));
          const uint32_t b_tx_bytes = kBGroup == 1 ? Traits::kSmemB : BRing::tx_bytes(stage);
          ptx::mbar_arrive_expect_tx(full_bar(stage), a_tx_bytes + b_tx_bytes - (skip_a ? a_tx_bytes : 0u) -
                                                          (skip_b ? b_tx_bytes : 0u));
          const int32_t k0 = static_cast<int32_t>(kb * BLOCK_K);
          const uint32_t dst_a = base + Traits::kOffA + stage * Traits::kSmemA;
          const uint32_t dst_b = base + Traits::kOffB + stage * Traits::kSmemB;
          if (!skip_a) {
            if constexpr (kMcA && kAMnMajor) {
              // This CTA's half of the (64 m, 64 k) boxes, into both CTAs of the pair.
#pragma unroll
              for (uint32_t c = rank * (BLOCK_M / 128); c < (rank + 1) * (BLOCK_M / 128); ++c)
                ptx::tma_load_2d_multicast(dst_a + c * kChunk, tmap_a, full_bar(stage),
                                           m0 + static_cast<int32_t>(c * 64), k0, 0x3);
            } else if constexpr (kMcA) {
              // This CTA's half of the rows (the host's box: BLOCK_M / 2 rows), into both CTAs.
              ptx::tma_load_2d_multicast(dst_a + rank * (BLOCK_M / 2) * Traits::kRowBytes, tmap_a, full_bar(stage), k0,
                                         m0 + static_cast<int32_t>(rank * (BLOCK_M / 2)), 0x3);
            } else if constexpr (kAMnMajor) {
              // [K, M] storage: boxes of (64 m, 64 k), coordinates (m, k).
#pragma unroll
              for (uint32_t c = 0; c < BLOCK_M / 64; ++c)
                load_a(dst_a + c * kChunk, full_bar(stage), m0 + static_cast<int32_t>(c * 64), k0);
            } else {
              // [M, K] storage: one box of (64 k, BLOCK_M or the last m-block's rows), coordinates (k, m).
              ptx::tma_load_2d_policy(dst_a, map_a, full_bar(stage), k0, m0, l2_hints, pol_a);
            }
          }
          if (!skip_b) {
            if constexpr (kMcB && kBMnMajor) {
#pragma unroll
              for (uint32_t c = rank * (BLOCK_N / 128); c < (rank + 1) * (BLOCK_N / 128); ++c)
                ptx::tma_load_2d_multicast(dst_b + c * kChunk, tmap_b, full_bar(stage),
                                           n0 + static_cast<int32_t>(c * 64), k0, 0x3);
            } else if constexpr (kMcB) {
              ptx::tma_load_2d_multicast(dst_b + rank * (BLOCK_N / 2) * Traits::kRowBytes, tmap_b, full_bar(stage), k0,
                                         n0 + static_cast<int32_t>(rank * (BLOCK_N / 2)), 0x3);
            } else if constexpr (kBGroup > 1) {
              if (BRing::first(stage))
                ptx::tma_load_4d_policy(dst_b, tmap_b, full_bar(stage), 0, 0, static_cast<int32_t>(kb), n0 / 8,
                                        l2_hints, pol_b);
            } else if constexpr (kBMnMajor) {
#pragma unroll
              for (uint32_t c = 0; c < BLOCK_N / kBBoxCols; ++c)
                load_b(dst_b + c * kChunk, full_bar(stage), n0 + static_cast<int32_t>(c * kBBoxCols), k0);
            } else {
              load_b(dst_b, full_bar(stage), k0, n0);
            }
          }
          if constexpr (kPrefetchC) {  // the epilogue's box coordinates (D's map: N, rows per group, groups)
            c_prefetch_plan.issue(kb, tmap_d, n0, m0, static_cast<int32_t>(group));
          }
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
    // Split cluster: the producer warpgroup's part in the barrier after which split 0 reads the
    // peers' partials (every thread of the cluster takes part in a cluster barrier).
    if (split_cluster && !diag::kSplitClusterNoSync) {
      if (split_push) {
        ptx::cluster_wait();
      } else {
        epilogue::publish_split_partials_producer();
      }
    }
  } else {
    // ------------------------------------------------------------------ consumer warpgroups
    if constexpr (kNumConsumerWG >= 2) ptx::setmaxnreg_inc<Traits::kConsumerRegs>();
    // The shared-memory base again, through a shuffle: ptxas otherwise re-derives it inside the
    // k-loop (S2UR of the CTA's cluster id + 4 dependent uniform ops between the full-barrier wait
    // and the first wgmma of every k-block); a shuffle's result is not rematerialized. 56 -> 46
    // instructions per k-block, -2.8% on nt 128x4096x7168 (benchmarks/NOTES.md v0.29).
    base = __shfl_sync(0xffffffffu, base, 0);
    // Warp-uniform through a shuffle: the wgmma descriptors depend on wg and are then built in
    // uniform registers (no per-wgmma R2UR; as in the FP8 kernel).
    const uint32_t wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
    const uint32_t warp = (threadIdx.x % 128) / 32;
    const uint32_t lane = threadIdx.x % 32;
    // This thread's two rows inside the tile (wgmma D fragment: row 16*warp + lane/4, +8).
    const uint32_t r0 = wg * 64 + warp * 16 + lane / 4;
    const uint32_t col_in_chunk = 2 * (lane % 4);

    float acc[kNumAcc];
#pragma unroll
    for (uint32_t i = 0; i < kNumAcc; ++i) acc[i] = 0.0f;

    // Lane 0 of every consumer warp releases stage `s` once its warpgroup's wgmmas reading it
    // have completed.
    auto release = [&](uint32_t s) {
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(empty_bar(s));
      if constexpr (kNumMulticast > 1) {
        if (lane == 1) ptx::mbar_arrive_cluster(empty_bar(s), rank ^ 1u);  // the peer's stage too
      }
    };

    uint32_t stage = 0, phase = 0;
    [[maybe_unused]] Walker walker(M, N, grouped, num_groups, layout_info & 0xffu);
    [[maybe_unused]] const KWalker kwalk(M, N, kgroups, kKGrouped ? kgroups->num_slots : 0u);
    for (uint32_t unit = first_unit(); kGrouped || unit < (kKGrouped ? kwalk.num_units : dense_units());
         unit += unit_stride()) {
      uint32_t m_block, n_block, split, kb_begin, kb_end, m0, n0;
      [[maybe_unused]] bool skip = false;
      uint32_t row_limit = M;  // rows >= row_limit (2-D D / C view) are never stored
      if constexpr (kKGrouped) {
        uint32_t group;
        kwalk.get(unit, m_block, n_block, group, kb_begin, kb_end);
        split = 0;
        skip = kb_begin == kb_end;  // empty group (the producer loads nothing either)
        // D and C viewed as [G * M, N]: the group's rows start at group * M. Folding the group
        // into the row keeps the epilogue's pointers the kernel parameters (no extra 64-bit
        // registers next to the accumulators: the bn256 variants stay spill-free).
        m0 = group * M + m_block * BLOCK_M;
        row_limit = group * M + M;
        n0 = n_block * BLOCK_N;
      } else if constexpr (kGrouped) {
        scheduler::Bf16GroupedTile t;
        if (!walker.next(unit, t)) break;
        m_block = t.m_block;
        n_block = t.n_block;
        split = 0;
        skip = t.skip;
        kb_begin = 0;
        kb_end = skip ? 0u : num_kb;  // padding tile (as the producer): zeros are stored
        m0 = t.a_row;  // first row in the 2-D A / D view
        n0 = n_block * BLOCK_N;
      } else {  // the dense loop head
        dense_tile(unit, m_block, n_block, split);
        sched.k_range(split, num_kb, kb_begin, kb_end);
        m0 = m_block * BLOCK_M;
        n0 = n_block * BLOCK_N;
      }

      uint32_t prev_stage = 0;
      for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
        ptx::mbar_wait(full_bar(stage), phase);
        if constexpr (diag::kNoMma) {  // the data path alone (ptx/diag.cuh)
          release(stage);
          if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1u;
          }
          continue;
        }
        const uint32_t a_addr = base + Traits::kOffA + stage * Traits::kSmemA + wg * kChunk;
        // (kBGroup 1 keeps its own expression: written through BRing, ptxas schedules differently.)
        const uint32_t b_addr = kBGroup == 1 ? base + Traits::kOffB + stage * Traits::kSmemB
                                             : BRing::addr(base + Traits::kOffB, stage, 0);
        uint64_t desc_a, desc_b;
        if constexpr (kAMnMajor) {
          desc_a = ptx::make_smem_desc_mn<128>(a_addr, kChunk, 8 * Traits::kRowBytes);
        } else {
          desc_a = ptx::make_smem_desc_k_sw128(a_addr);
        }
        if constexpr (kBMnMajor) {
          desc_b = ptx::make_smem_desc_mn<kBMnRowBytes>(b_addr, kChunk, 8 * kBMnRowBytes);
        } else {
          desc_b = ptx::make_smem_desc_k_sw128(b_addr, BRing::kSbo);
        }
        ptx::fence_operands(acc);
        ptx::wgmma_fence();
#pragma unroll
        for (uint32_t k = 0; k < BLOCK_K / 16; ++k) {
          // The tile's first wgmma overwrites the accumulators (scale-d = 0).
          Mma::template mma<kAMnMajor ? 1 : 0, kBMnMajor ? 1 : 0>(desc_a + kStepA * k, desc_b + kStepB * k, acc,
                                                                 (kb > kb_begin || k > 0) ? 1u : 0u);
        }
        ptx::wgmma_commit();
        ptx::fence_operands(acc);
        // Keep this k-block's group in flight; the previous one has finished reading its stage.
        ptx::wgmma_wait<1>();
        if (kb > kb_begin) release(prev_stage);
        prev_stage = stage;
        if (++stage == kNumStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
      ptx::wgmma_wait<0>();
      ptx::fence_operands(acc);
      if constexpr (kKGrouped) {
        if (skip) {
          // Empty group: D = C (or zeros), stored without touching the accumulators (selecting
          // zeros into them, as the m-grouped kinds do, spills the bn256 variants).
          const bool vec = (flags & kBf16FlagVectorStores) != 0;
          const bool has_c = (flags & kBf16FlagHasC) != 0;
          float* d_out = static_cast<float*>(d_ptr);
#pragma unroll
          for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t row = m0 + r0 + 8 * h;
            if (row >= row_limit) continue;
            const size_t row_off = static_cast<size_t>(row) * ldd;
#pragma unroll 4
            for (uint32_t j = 0; j < kNumChunks; ++j) {
              const uint32_t col = n0 + 8 * j + col_in_chunk;
              if (col >= N) continue;
              const size_t off = row_off + col;
              if (vec) {
                *reinterpret_cast<float2*>(d_out + off) =
                    has_c ? __ldcs(reinterpret_cast<const float2*>(c_ptr + off)) : make_float2(0.0f, 0.0f);
              } else {
                d_out[off] = has_c ? __ldcs(c_ptr + off) : 0.0f;
                if (col + 1 < N) d_out[off + 1] = has_c ? __ldcs(c_ptr + off + 1) : 0.0f;
              }
            }
          }
          continue;
        }
        if constexpr (!diag::kNoMma) release(prev_stage);
      } else if constexpr (kGrouped) {
        // A padding tile ran no k-block: its accumulators are stale and the epilogue stores zeros
        // (zero_rows below).
        if constexpr (!diag::kNoMma) {
          if (!skip) release(prev_stage);
        }
      } else if constexpr (!diag::kNoMma) {
        release(prev_stage);  // every unit has at least one k-block (no-MMA builds released it)
      }
      // A multicast pair's phantom tile (past the last m- / n-block) only fed its peer's loads.
      if constexpr (kNumMulticast > 1) {
        if (m_block >= num_m_blocks || n_block >= num_n_blocks) continue;
      }

      // ---------------------------------------------------------------- split-K reduction
      if (kClusterSplit && split_cluster) {
        // Every local wgmma has finished reading the ring before it holds the partial.
        ptx::named_barrier_sync(1, kNumConsumerThreads);
        if (split_push) {
          // Push form (the FP8 kernel's): say the ring is free, then push the warps a peer owns or
          // wait for the owned ones' peers and sum them in split order.
          if (!SplitPush::hand_off(acc, split, num_splits, base + Traits::kOffA, recv_bar(), ready_bar())) continue;
          SplitPush::gather(acc, split, num_splits, base + Traits::kOffA);
        } else {
          float2* part = reinterpret_cast<float2*>(smem + Traits::kOffA);
          epilogue::write_split_partial_smem<kNumChunks, kNumConsumerThreads>(acc, part);
          // The partials are there (release / acquire at cluster scope).
          if constexpr (!diag::kSplitClusterNoSync) epilogue::publish_split_partials<kNumConsumerThreads>();
          // Spread reduce-scatter (v1.08) for fp32 D without C where it takes one round (enough
          // splits): every consumer warp of the cluster sums and stores its share of 8 x 8 units with
          // direct stores (epilogue/split_k.cuh). The CTA's only unit; it stays until its peers have
          // read its partial (kernel end). bf16 D keeps the warp form's TMA store (faster, v1.08).
          if (spread_form()) {
            const bool vec = (flags & kBf16FlagVectorStores) != 0;
            epilogue::spread_cluster_split_reduce<kNumChunks, kNumConsumerThreads>(
                base + Traits::kOffA, num_splits, split, [&](uint32_t row, uint32_t col, float2 sum) {
                  epilogue::store_direct_pair_fp32(sum, static_cast<float*>(d_ptr), m0 + row, n0 + col, ldd, N,
                                                   row_limit, vec);
                });
            continue;
          }
          // Warp form: consumer warp w's 16 rows are summed and stored by split w % S (the
          // direct-store epilogue has no barrier, so the other warps may leave). The CTA's only
          // unit; it stays until its peers have read its partial (kernel end).
          if ((threadIdx.x / 32) % num_splits != split) continue;
          if constexpr (!diag::kSplitClusterNoPeers)
            epilogue::gather_cluster_split_partials<kNumChunks, kNumConsumerThreads>(acc, base + Traits::kOffA,
                                                                                    num_splits, split);
        }
        if constexpr (kSplitTmaStore) {
          if ((flags & kBf16FlagTmaStore) != 0) {  // the host's rule: bf16 D, no C
            EpiTma::store_warp(acc, base + kSplitStagingOff + wg * EpiTma::kBytes, tmap_d, static_cast<int32_t>(n0),
                               static_cast<int32_t>(m0 + wg * 64 + warp * 16));
            continue;
          }
        }
      } else if constexpr (kSplitK && !diag::kSplitNoReduce) {
        // Partials and their in-order sum: epilogue/split_k.cuh.
        const uint32_t tile = sched.tile_index(m_block, n_block);
        float2* slab = reinterpret_cast<float2*>(workspace) +
                       static_cast<size_t>(tile) * sched.num_splits * (BLOCK_M * BLOCK_N / 2);
        float2* mine = slab + static_cast<size_t>(split) * (BLOCK_M * BLOCK_N / 2);
        const bool row0_ok = m0 + r0 < M, row1_ok = m0 + r0 + 8 < M;
        epilogue::write_split_partial<kNumChunks, kNumConsumerThreads>(acc, mine, row0_ok, row1_ok);
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
        if (!last) continue;
        if constexpr (!diag::kSplitNoSum) {  // developer diagnostic (ptx/diag.cuh)
          __threadfence();
          if constexpr (kNumChunks <= 8) {
            epilogue::sum_split_partials<kNumChunks, kNumConsumerThreads, BLOCK_M * BLOCK_N / 2>(acc, slab, sched.num_splits,
                                                                                                row0_ok, row1_ok);
          } else {
            // Wide tiles: every split's partial in split order, per chunk (the helper spilled here).
#pragma unroll
            for (uint32_t i = 0; i < kNumAcc; ++i) acc[i] = 0.0f;
            for (uint32_t s = 0; s < sched.num_splits; ++s) {
              const float2* part = slab + static_cast<size_t>(s) * (BLOCK_M * BLOCK_N / 2);
#pragma unroll
              for (uint32_t j = 0; j < kNumChunks; ++j) {
                if (row0_ok) {
                  const float2 v = __ldcg(part + (2 * j + 0) * kNumConsumerThreads + threadIdx.x);
                  acc[4 * j + 0] += v.x;
                  acc[4 * j + 1] += v.y;
                }
                if (row1_ok) {
                  const float2 v = __ldcg(part + (2 * j + 1) * kNumConsumerThreads + threadIdx.x);
                  acc[4 * j + 2] += v.x;
                  acc[4 * j + 3] += v.y;
                }
              }
            }
          }
        }
      }

      // ---------------------------------------------------------------- epilogue
      // Rows stored as zeros (bit h: this thread's row r0 + 8 h): every row of a padding tile, and
      // the padding rows (group id -1; with kLayoutCheck any id outside [0, G)) of a mixed one. The
      // stores mask them (garbage must not leak, not even as NaN); the accumulators are left as they
      // are (rewriting them spilled bn256).
      uint32_t zero_rows = 0;
      if constexpr (kContiguous) {
        if (skip) {
          zero_rows = 3u;
        } else if constexpr (kPsumLayout) {
          // The rows at or past the group's end (the group searched again: not kept live across the
          // main loop, where bn256 has no register to spare).
          const uint32_t grp = walker.psum_group(m0);  // < G: the tile was not skipped
          const int end = grp < num_groups ? __ldg(grouped + grp) : 0;
#pragma unroll
          for (uint32_t h = 0; h < 2; ++h) {
            if (static_cast<int>(m0 + r0 + 8 * h) >= end) zero_rows |= 1u << h;
          }
        } else {
#pragma unroll
          for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t row = m0 + r0 + 8 * h;
            const int id = row < M ? __ldg(grouped + row) : 0;
            if (id < 0 || (kLayoutCheck && static_cast<uint32_t>(id) >= num_groups)) zero_rows |= 1u << h;
          }
        }
      }
      if constexpr (kMasked) row_limit = walker.row_limit();
      if constexpr (kKGrouped) {
        // The host sets the flag only for C null or C = D: store, or reduce-add into D (= C + tile).
        // D's map is (N, rows per group, groups), so TMA drops rows past the group's M.
        if ((flags & kBf16FlagTmaStore) != 0) {
          const uint32_t group = row_limit / M - 1;  // row_limit = (group + 1) * M
          const uint32_t buf = base + Traits::kOffD + wg * EpiTmaF32::kBytes;
          const int32_t row = static_cast<int32_t>(m0 - group * M + wg * 64);
          if ((flags & kBf16FlagHasC) != 0) {
            EpiTmaF32Add::store(acc, buf, tmap_d, 2 + wg, static_cast<int32_t>(n0), row, static_cast<int32_t>(group));
          } else {
            EpiTmaF32::store(acc, buf, tmap_d, 2 + wg, static_cast<int32_t>(n0), row, static_cast<int32_t>(group));
          }
          continue;
        }
      } else if constexpr (kTmaStore) {
        // Masked: only a warpgroup whose 64 rows are all valid may TMA-store (the box would
        // otherwise overwrite rows >= masked_m, which must stay untouched).
        bool tma_rows_ok = true;
        if constexpr (kMasked) tma_rows_ok = m0 + wg * 64 + 64 <= row_limit;
        if ((flags & kBf16FlagTmaStore) != 0 && tma_rows_ok) {
          if constexpr (diag::kNoEpilogue) continue;  // developer bound (ptx/diag.cuh): D never written
          EpiTma::store(acc, base + Traits::kOffD + wg * EpiTma::kBytes, tmap_d, 2 + wg, static_cast<int32_t>(n0),
                        static_cast<int32_t>(m0 + wg * 64), zero_rows);
          continue;
        }
      }
      // Direct register -> global stores.
      const bool vec = (flags & kBf16FlagVectorStores) != 0;
      const bool out_fp32 = (flags & kBf16FlagOutFp32) != 0;
      const bool has_c = (flags & kBf16FlagHasC) != 0;
      if (has_c) {
        epilogue::add_c_fp32<BLOCK_N, kNumChunks>(acc, c_ptr, m0, r0, m0 + wg * 64 + 64, n0, col_in_chunk, ldd, N,
                                                 row_limit, vec);
      }
      epilogue::store_direct<kNumChunks>(acc, d_ptr, m0, r0, n0, col_in_chunk, ldd, N, row_limit, vec, out_fp32,
                                         zero_rows);
    }
    if constexpr (kTmaStore) EpiTma::finish();  // the last tile's stores complete before exit (fp32 ring too)
  }
  // Split cluster: no CTA may exit while split 0 can still read its partial; multicast pair: while
  // its peer can still load into it or arrive on its barriers (every thread, the producer
  // warpgroup included, meets here).
  // The split cluster's barrier orders only execution (every remote load has returned), so it
  // arrives relaxed (-3 to -9% on the split-cluster records, NOTES v1.13).
  // Push form: no barrier (as the FP8 kernel: every byte and arrive into a CTA is waited on there).
  if (split_cluster && kNumMulticast == 1) {
    if (!split_push) {
      ptx::cluster_arrive_relaxed();
      ptx::cluster_wait();
    }
  } else if (kNumMulticast > 1 || split_cluster) {
    ptx::cluster_sync();
  }
}

}  // namespace impls
}  // namespace finegemm
