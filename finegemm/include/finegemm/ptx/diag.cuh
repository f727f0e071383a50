// Developer diagnostics of the FP8 kernel's main loop: switches that remove one side of it, to see
// which side sets a shape's time (scripts/diag_mainloop.sh, scripts/ab_nvcc_flags.sh). Results
// are wrong (or racy) with any of them on but FINEGEMM_DIAG_NO_L2_HINTS, which only changes the
// speed. They are compiled in only through
// FINEGEMM_EXTRA_NVCC_FLAGS (part of the kernel cache key); without them all are false and the
// kernel's SASS is unchanged.
//   FINEGEMM_DIAG_NO_MMA  the consumers wait for each full stage and release it at once (no wgmma,
//                         no promotion; the plain k-block loop and the 1D1D loop, not k-batch /
//                         half-promote)
//   FINEGEMM_DIAG_NO_TMA  the producer arrives on each full stage without loading it (the
//                         consumers compute on whatever the stage holds)
//   FINEGEMM_DIAG_NO_SFA_TMA  the producer skips the per-stage sfa box (2 TMA boxes per k-block
//                         instead of 3; the consumers read whatever the sfa slot holds)
//   FINEGEMM_DIAG_NO_A_TMA / FINEGEMM_DIAG_NO_B_TMA  the producer skips the A (or B) box of every
//                         stage (the consumers compute on whatever the slot holds): which operand's
//                         stream sets a skinny tile's per-k-block time (benchmarks/NOTES.md v0.41)?
//   FINEGEMM_DIAG_HALF_A_TMA / FINEGEMM_DIAG_HALF_B_TMA  (BF16 kernel, dense kind) the producer
//                         loads the A (or B) box of even k-blocks only: the L2 -> SM bytes a 2-CTA
//                         multicast of that operand would save (an upper bound on its data-path gain)
//   FINEGEMM_DIAG_NO_MMA / FINEGEMM_DIAG_NO_TMA  also act in the BF16 kernel's dense loop
//   FINEGEMM_DIAG_NO_1D1D_FENCE  the 1D1D consumers release a stage without the proxy fence after
//                         their shared-memory scale loads (racy by design: what does the fence cost?)
//   FINEGEMM_DIAG_NO_L2_HINTS  the producers of both kernel families load with the default L2
//                         policy on skinny problems too (what do the evict-first / evict-last hints
//                         give, and what does their code cost where they are off?)
//   FINEGEMM_DIAG_EARLY_RELEASE_1D1D  the 1D1D consumers release a stage right after its wgmmas
//                         complete, before the promotion reads the stage's column scales, and
//                         without the fence (racy by design: what would a race-free early release
//                         through a deeper scale ring gain?)
//   FINEGEMM_DIAG_1D1D_NO_SCALE_LOADS  the 1D1D promotion takes its column scales from registers
//                         (the row scales) instead of the stage's shared-memory row: what do the
//                         column-scale loads cost?
//   FINEGEMM_DIAG_1D1D_ROW_PROMOTION  the 1D1D promotion is 1D2D's (one FFMA per element with the
//                         row scale; no column scales, no products): what does the per-column
//                         promotion cost in all?
//   FINEGEMM_DIAG_NO_SFB_PREFETCH  the plain 1D1D loop loads every column scale after the wgmma
//                         wait again (as before v0.35): what does the prefetch give?
//   FINEGEMM_DIAG_NO_1D2D_FENCE  the plain 1D2D loop releases a stage without the proxy fence
//                         after its sfa loads (racy by design: what does the fence cost?)
//   FINEGEMM_DIAG_SPLIT_NO_REDUCE  (both kernels, wrong results) every split-K unit stores its own
//                         partial into D: no workspace, fence, counter or sum. What does the
//                         split-K reduction cost end to end (an upper bound on any cheaper one)?
//   FINEGEMM_DIAG_SPLIT_NO_SUM  (both kernels, wrong results) the partials are written and counted
//                         as usual, but the last split stores its own partial instead of the sum:
//                         the sum's share of that cost.
//   FINEGEMM_DIAG_SPLIT_CLUSTER_NO_PEERS  (BF16 kernel, wrong results) a split cluster's reducing
//                         warps sum only their own partial (the cluster barrier stays): the share
//                         of the peers' distributed-shared-memory loads in the reduction.
//   FINEGEMM_DIAG_SPLIT_CLUSTER_NO_SYNC  (BF16 kernel, racy by design) a split cluster skips the
//                         barrier between writing the partials and reading the peers': its share.
//   FINEGEMM_DIAG_SPLIT_CLUSTER_WARP_REDUCE  (BF16 kernel, correct results) a split cluster reduces
//                         as before v1.08: one warp per 16 rows sums every split's partial
//                         (epilogue::gather_cluster_split_partials) instead of the spread form.
//   FINEGEMM_DIAG_SPLIT_CLUSTER_ONE_FENCE  (both kernels, correct results) a split cluster
//                         publishes its partials with the consumers' named barrier, then one
//                         warp's release arrive (cumulative over what that barrier ordered) and
//                         every other warp's relaxed arrive: one MEMBAR.ALL.GPU per CTA instead of
//                         one per warp (12). scripts/probe_cluster_fence.cu times the forms alone.
//                         Measured level on the FP8 split picks (one MEMBAR costs ~75% of twelve:
//                         latency; benchmarks/NOTES.md v1.14): off by default.
//   FINEGEMM_DIAG_SPLIT_PARTIAL_F4  (FP8 kernel, correct results, bitwise the default's) a split
//                         cluster's partials in shared memory as one float4 per thread and chunk
//                         (both row halves) instead of two float2: the peers' fragments are half
//                         as many 16-byte distributed-shared-memory loads (epilogue/split_k.cuh).
//                         Measured level (benchmarks/NOTES.md v1.14): off by default.
//   FINEGEMM_DIAG_SPLIT_PULL  (FP8 kernel, correct results, bitwise the default's) a split cluster
//                         pulls the partials as before v1.15: every split writes its fragment to its
//                         ring, a releasing cluster barrier, the owners load their rows from the
//                         peers, a relaxed exit barrier. The default pushes them (epilogue::SplitPush:
//                         -1 to -4% on the H100, 0 to -1.5% on the H200, NOTES v1.15). The two
//                         switches above (ONE_FENCE, PARTIAL_F4) change only the pull form.
//   FINEGEMM_DIAG_SPLIT_PUSH_INIT_AT_ENTRY  (FP8 kernel, correct results, bitwise the default's)
//                         the push form's two barriers initialized and armed by thread 0 before the
//                         CTA barrier, as in v1.15, instead of by the producer warpgroup's idle warp
//                         after it (SplitPush::init): the A/B baseline of v1.16.
//   FINEGEMM_DIAG_BF16_SPLIT_PUSH  (BF16 kernel, correct results, bitwise the default's) the FP8
//                         kernel's push form in the BF16 kernel, except where the spread form runs
//                         (chosen at run time). Off: level on the H200, and the mixed kernel cost the
//                         spread records 0-2.5% (NOTES v1.15).
//   FINEGEMM_DIAG_NO_PDL  (both kernels; racy under finegemm.set_pdl(True)) the kernels leave out
//                         griddepcontrol.wait / launch_dependents (ptx::griddep_wait): what do the
//                         two instructions cost a kernel launched without PDL?
//   FINEGEMM_DIAG_PRODUCER_BURST=<n>  (FP8 kernel, correct results) the producer waits until n
//                         ring slots are free and then loads their n k-blocks back to back, so
//                         each row of B is read n x 128 contiguous bytes at a time (a Triton
//                         reader was 1.3-1.7x faster at 512 B per row per step than at 128 B):
//                         does the skinny B stream gain from DRAM locality? (capped at stages - k_batch;
//                         measured slower everywhere, benchmarks/NOTES.md v0.65)
//   FINEGEMM_DIAG_K_ROTATE=<n>  (FP8 kernel, correct results, not bitwise equal to the default: the
//                         k-blocks are summed in another order) every role walks a unit's k-blocks
//                         starting at k-block (cluster id * n) mod (the unit's k-blocks) and wraps
//                         around, so that the CTAs of a one-wave skinny grid do not all read the
//                         same 128-byte column of every B row at once: is the skinny B stream
//                         limited by many requests to the same DRAM banks at the same time?
//   FINEGEMM_DIAG_FULL_A_BOX  (FP8 1D2D and BF16 dense kernels and their host launchers, correct
//                         results) A boxes of BLOCK_M rows for the last m-block too, as before
//                         v0.68 (impls/fitted_box_rows.h): the baseline of an interleaved A/B.
//   FINEGEMM_DIAG_NO_C_PREFETCH  (FP8 1D1D and BF16 k-grouped kernels, correct results) the
//                         producer does not prefetch a tile's D (= C) boxes into L2 before its
//                         reduce-add epilogue (TmaStoreFp32::Prefetch): the A/B baseline.
//   FINEGEMM_DIAG_C_STREAM_HINTS  (FP8 1D1D direct epilogue with C, correct results) D's stores
//                         and the C stage's loads with evict-first hints (st.global.cs, TMA
//                         L2::cache_hint). Measured +8% at 4096x32768x512 (benchmarks/NOTES.md
//                         v0.75): off by default, kept for the next such question.
//   FINEGEMM_SCHED_GROUP_N=<n>  (FP8 kernel, correct results) the tile order's column-group width
//                         in super-tile columns (default 16, scheduler/persistent.cuh): a wider
//                         group puts a wave's tiles side by side along N, so D's rows are written
//                         (and C's read) in longer contiguous runs. Does an epilogue-bound shape
//                         (K = 512 wgrad) gain from that DRAM locality?
//   FINEGEMM_C_PREFETCH_LEAD=<n>  (correct results) that prefetch's last boxes leave with the tile's
//                         k-block kb_end - 1 - n (or its first) instead of kb_end - 3.
//   FINEGEMM_C_PREFETCH_MAX_KB=<n>  (correct results) tiles of up to n k-blocks get that prefetch
//                         (default 64).
//   FINEGEMM_DIAG_C_PREFETCH_BURST  (correct results) all of them leave with that k-block (as first
//                         built) instead of one or a few per k-block before it.
//   FINEGEMM_DIAG_NO_EPILOGUE  (bf16 TMA-store epilogue of the FP8 1D2D kernel and of the dense and
//                         m-grouped BF16 kernels; wrong results: D is never written) the consumers
//                         go from a tile's last promotion (BF16: last k-block) straight to the next
//                         tile: what hiding that epilogue under the main loop (a ping-pong of the
//                         consumer warpgroups) could win at most.
//   FINEGEMM_DIAG_NO_D_TMA  (bf16 TMA-store epilogue of both kernel families; wrong results: D is
//                         never written) the epilogue does all its shared-memory work (stmatrix,
//                         proxy fence, barriers) but issues no TMA store: with NO_EPILOGUE, it
//                         splits the epilogue's cost into the consumers' part and the stores' own.
//   FINEGEMM_SFB_REG_SLACK=<n>  (correct results) the 1D1D prefetch's register slack instead of the
//                         measured 24 (impls/sm90_fp8_gemm_1d2d.cuh; 20 / 28 / 32: benchmarks/NOTES.md
//                         v0.37): more or fewer chunks' column scales loaded before the wgmmas.
//   FINEGEMM_DIAG_SFA_GATHER_LDG  (FP8 heads-packed kernel with the sfa gather, correct results)
//                         the sfa warp loads each stage's row scales into registers before the
//                         stage's wait and stores them after it, one load round trip per k-block
//                         (v1.00),
//                         instead of cp.async copies tracked by the stage's barrier: the A/B
//                         baseline of v1.01.
#pragma once

namespace finegemm {
namespace diag {

#ifdef FINEGEMM_DIAG_NO_MMA
constexpr bool kNoMma = true;
#else
constexpr bool kNoMma = false;
#endif

#ifdef FINEGEMM_DIAG_NO_TMA
constexpr bool kNoTma = true;
#else
constexpr bool kNoTma = false;
#endif

#ifdef FINEGEMM_DIAG_NO_SFA_TMA
constexpr bool kNoSfaTma = true;
#else
constexpr bool kNoSfaTma = false;
#endif

#ifdef FINEGEMM_DIAG_NO_A_TMA
constexpr bool kNoATma = true;
#else
constexpr bool kNoATma = false;
#endif

#ifdef FINEGEMM_DIAG_NO_B_TMA
constexpr bool kNoBTma = true;
#else
constexpr bool kNoBTma = false;
#endif

#ifdef FINEGEMM_DIAG_HALF_A_TMA
constexpr bool kHalfATma = true;
#else
constexpr bool kHalfATma = false;
#endif

#ifdef FINEGEMM_DIAG_HALF_B_TMA
constexpr bool kHalfBTma = true;
#else
constexpr bool kHalfBTma = false;
#endif

#ifdef FINEGEMM_DIAG_NO_1D1D_FENCE
constexpr bool kNo1d1dFence = true;
#else
constexpr bool kNo1d1dFence = false;
#endif

#ifdef FINEGEMM_DIAG_EARLY_RELEASE_1D1D
constexpr bool kEarlyRelease1d1d = true;
#else
constexpr bool kEarlyRelease1d1d = false;
#endif

#ifdef FINEGEMM_DIAG_NO_L2_HINTS
constexpr bool kNoL2Hints = true;
#else
constexpr bool kNoL2Hints = false;
#endif

#ifdef FINEGEMM_DIAG_1D1D_NO_SCALE_LOADS
constexpr bool k1d1dNoScaleLoads = true;
#else
constexpr bool k1d1dNoScaleLoads = false;
#endif

#ifdef FINEGEMM_DIAG_1D1D_ROW_PROMOTION
constexpr bool k1d1dRowPromotion = true;
#else
constexpr bool k1d1dRowPromotion = false;
#endif

#ifdef FINEGEMM_DIAG_NO_1D2D_FENCE
constexpr bool kNo1d2dFence = true;
#else
constexpr bool kNo1d2dFence = false;
#endif

#ifdef FINEGEMM_DIAG_NO_SFB_PREFETCH
constexpr bool kNoSfbPrefetch = true;
#else
constexpr bool kNoSfbPrefetch = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_NO_REDUCE
constexpr bool kSplitNoReduce = true;
#else
constexpr bool kSplitNoReduce = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_NO_SUM
constexpr bool kSplitNoSum = true;
#else
constexpr bool kSplitNoSum = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_CLUSTER_NO_PEERS
constexpr bool kSplitClusterNoPeers = true;
#else
constexpr bool kSplitClusterNoPeers = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_CLUSTER_NO_SYNC
constexpr bool kSplitClusterNoSync = true;
#else
constexpr bool kSplitClusterNoSync = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_PARTIAL_F4
constexpr bool kSplitPartialF4 = true;
#else
constexpr bool kSplitPartialF4 = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_PULL
constexpr bool kSplitPull = true;
#else
constexpr bool kSplitPull = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_PUSH_INIT_AT_ENTRY
constexpr bool kSplitPushInitAtEntry = true;
#else
constexpr bool kSplitPushInitAtEntry = false;
#endif

#ifdef FINEGEMM_DIAG_BF16_SPLIT_PUSH
constexpr bool kBf16SplitPush = true;
#else
constexpr bool kBf16SplitPush = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_CLUSTER_ONE_FENCE
constexpr bool kSplitClusterOneFence = true;
#else
constexpr bool kSplitClusterOneFence = false;
#endif

#ifdef FINEGEMM_DIAG_SPLIT_CLUSTER_WARP_REDUCE
constexpr bool kSplitClusterWarpReduce = true;
#else
constexpr bool kSplitClusterWarpReduce = false;
#endif

#ifdef FINEGEMM_DIAG_NO_PDL
constexpr bool kNoPdl = true;
#else
constexpr bool kNoPdl = false;
#endif

#ifdef FINEGEMM_DIAG_PRODUCER_BURST
constexpr unsigned kProducerBurst = FINEGEMM_DIAG_PRODUCER_BURST;
#else
constexpr unsigned kProducerBurst = 1;
#endif
static_assert(kProducerBurst >= 1 && kProducerBurst <= 8, "FINEGEMM_DIAG_PRODUCER_BURST: 1 to 8");

#ifdef FINEGEMM_DIAG_K_ROTATE
constexpr unsigned kKRotate = FINEGEMM_DIAG_K_ROTATE;
#else
constexpr unsigned kKRotate = 0;
#endif

#ifdef FINEGEMM_DIAG_NO_C_PREFETCH
constexpr bool kNoCPrefetch = true;
#else
constexpr bool kNoCPrefetch = false;
#endif

#ifdef FINEGEMM_C_PREFETCH_LEAD
constexpr unsigned kCPrefetchLead = FINEGEMM_C_PREFETCH_LEAD;
#else
constexpr unsigned kCPrefetchLead = 2;
#endif

#ifdef FINEGEMM_DIAG_NO_EPILOGUE
constexpr bool kNoEpilogue = true;
#else
constexpr bool kNoEpilogue = false;
#endif

#ifdef FINEGEMM_DIAG_NO_D_TMA
constexpr bool kNoDTma = true;
#else
constexpr bool kNoDTma = false;
#endif

#ifdef FINEGEMM_DIAG_C_PREFETCH_BURST
constexpr bool kCPrefetchBurst = true;
#else
constexpr bool kCPrefetchBurst = false;
#endif

#ifdef FINEGEMM_C_PREFETCH_MAX_KB
constexpr unsigned kCPrefetchMaxKBlocks = FINEGEMM_C_PREFETCH_MAX_KB;
#else
constexpr unsigned kCPrefetchMaxKBlocks = 64;
#endif

#ifdef FINEGEMM_DIAG_C_STREAM_HINTS
constexpr bool kCStreamHints = true;
#else
constexpr bool kCStreamHints = false;
#endif

#ifdef FINEGEMM_DIAG_SFA_GATHER_LDG
constexpr bool kSfaGatherLdg = true;
#else
constexpr bool kSfaGatherLdg = false;
#endif

#ifdef FINEGEMM_SCHED_GROUP_N
constexpr unsigned kSchedGroupN = FINEGEMM_SCHED_GROUP_N;
#else
constexpr unsigned kSchedGroupN = 16;
#endif
static_assert(kSchedGroupN >= 1, "FINEGEMM_SCHED_GROUP_N: at least 1");

}  // namespace diag
}  // namespace finegemm
