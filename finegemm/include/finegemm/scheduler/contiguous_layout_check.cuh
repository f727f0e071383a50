// The plain m-grouped contiguous layout's rules, checked inside the GEMM by one warp of every CTA
// (the FP8 kernel's kLayoutCheck), so that a call is one launch instead of a check kernel and
// then the GEMM (ops/contiguous_layout.py renders that standalone kernel; this is its plain-layout
// branch, with the same rules, codes, details and scratch).
//
// grouped_layout int32 [m]: a group id per row, -1 for padding rows. Rules, in the host
// validator's order (finegemm/api/_validate.py, grouped_layout_violation):
//   kLayoutRange       every value in [-1, g)                     details: (min, max)
//   kLayoutMisaligned  every group's run starts at a multiple of   details: (first such row, its id)
//                      the mk alignment
//   kLayoutSplit       one run per group                          details: (first such group, its runs)
// The GEMM itself never depends on them being kept: it reads the id of a tile's first row and
// takes an id outside [0, g) as padding (scheduler::TileWalker, the epilogue's padding rows), so a
// broken layout gives unspecified rows, never an access out of bounds.
//
// The CTAs meet in `scratch` (uint32 [kLayoutScratchHead + g], this stream's, every word 0
// between launches): [0] max key(x), [1] max ~key(x) (the minimum), [2] max ~row of a misaligned
// run start, [3] the ticket, then the runs per group. The CTA that takes the last ticket reads them,
// writes the first broken rule into `record` (page-locked host memory: [code, fn_id, a, b, c, g,
// alignment, m], written only while record[0] is 0) and zeroes the scratch again.
#pragma once

#include <climits>
#include <cstdint>

namespace finegemm {
namespace scheduler {

// Mirror finegemm/api/_validate.py's LAYOUT_* and ops/contiguous_layout._SCRATCH_HEAD (a CPU test
// compares them).
constexpr int kLayoutRange = 1;
constexpr int kLayoutMisaligned = 2;
constexpr int kLayoutSplit = 3;
constexpr int kLayoutPsumNegative = 4;
constexpr int kLayoutPsumDecreasing = 5;
constexpr int kLayoutPsumPastM = 6;
constexpr int kLayoutPsumGap = 7;
constexpr uint32_t kLayoutScratchHead = 4;

// layout_info as the host packs it: the record's function index << 8 | log2(mk alignment).
__host__ __device__ constexpr uint32_t layout_info(uint32_t fn_id, uint32_t align_log2) {
  return fn_id << 8 | align_log2;
}

__device__ __forceinline__ unsigned layout_key(int x) { return static_cast<unsigned>(x) ^ 0x80000000u; }
__device__ __forceinline__ int layout_key_value(unsigned k) { return static_cast<int>(k ^ 0x80000000u); }

// Called by all 32 lanes of one warp in each CTA of the grid, once per launch, after
// griddepcontrol.wait (it reads the layout and the scratch the previous launch left zeroed).
// CTA c checks the 32-row chunks c, c + gridDim.x, ... (lane l: row l of each).
__device__ __forceinline__ void check_contiguous_layout_warp(const int* __restrict__ layout, uint32_t m,
                                                             uint32_t g, unsigned* scratch, int* record,
                                                             uint32_t info) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t align_log2 = info & 0xffu;
  const uint32_t align_mask = (1u << align_log2) - 1u;
  unsigned* runs = scratch + kLayoutScratchHead;
  unsigned hi = 0, lo = 0, mis = 0;  // keys: 0 is "none"
  for (uint32_t r0 = blockIdx.x * 32; r0 < m; r0 += gridDim.x * 32) {
    const uint32_t r = r0 + lane;
    if (r >= m) continue;
    const int x = __ldg(layout + r);
    const int up = r > 0 ? __ldg(layout + r - 1) : INT_MIN;  // the row above: an L1 hit beside the neighbour's
    hi = max(hi, layout_key(x));
    lo = max(lo, ~layout_key(x));
    if (x >= 0 && static_cast<uint32_t>(x) < g && up != x) {  // a run of group x starts at row r
      if ((r & align_mask) != 0) mis = max(mis, ~r);
      atomicAdd(runs + x, 1u);
    }
  }
  // Every lane's run counts before lane 0's fence and ticket (the warp barrier orders them, and the
  // fence is cumulative: the standalone kernel's __syncthreads + fence, at warp scope).
  __syncwarp();
  hi = __reduce_max_sync(0xffffffffu, hi);
  lo = __reduce_max_sync(0xffffffffu, lo);
  mis = __reduce_max_sync(0xffffffffu, mis);
  unsigned last = 0;
  if (lane == 0) {
    if (hi) atomicMax(scratch + 0, hi);
    if (lo) atomicMax(scratch + 1, lo);
    if (mis) atomicMax(scratch + 2, mis);
    __threadfence();  // this CTA's atomics before its ticket
    last = atomicAdd(scratch + 3, 1u) == gridDim.x - 1 ? 1u : 0u;
  }
  // The last CTA: the first broken rule, in the host validator's order; then the scratch back to 0.
  // Lane 0's flag reaches the warp through a reduction: broadcast by __shfl_sync (with an early
  // return), it cost the bm64 kernels' consumer k-loop its uniform-datapath address arithmetic
  // (+15-20 instructions per k-block, ptxas 13.0; tests/test_contiguous_layout_in_gemm.py).
  if (__reduce_or_sync(0xffffffffu, last)) {
    __threadfence();
    unsigned split = 0;  // max ~group of a group in several runs
    for (uint32_t i = lane; i < g; i += 32) {
      if (atomicAdd(runs + i, 0u) > 1u) split = max(split, ~i);
    }
    split = __reduce_max_sync(0xffffffffu, split);
    if (lane == 0) {
      int code = 0, a = 0, b = 0;
      const int vlo = layout_key_value(~atomicAdd(scratch + 1, 0u)), vhi = layout_key_value(atomicAdd(scratch + 0, 0u));
      const unsigned k_mis = atomicAdd(scratch + 2, 0u);
      if (vlo < -1 || (vhi >= 0 && static_cast<uint32_t>(vhi) >= g)) {
        code = kLayoutRange;
        a = vlo;
        b = vhi;
      } else if (k_mis) {
        code = kLayoutMisaligned;
        a = static_cast<int>(~k_mis);
        b = __ldg(layout + a);
      } else if (split) {
        code = kLayoutSplit;
        a = static_cast<int>(~split);
        b = static_cast<int>(atomicAdd(runs + a, 0u));
      }
      volatile int* rec = record;
      if (code != 0 && rec[0] == 0) {  // the first broken rule since the host last read the record
        rec[1] = static_cast<int>(info >> 8);
        rec[2] = a;
        rec[3] = b;
        rec[4] = 0;
        rec[5] = static_cast<int>(g);
        rec[6] = 1 << align_log2;
        rec[7] = static_cast<int>(m);
        __threadfence_system();
        rec[0] = code;
        __threadfence_system();
      }
      scratch[0] = 0u;
      scratch[1] = 0u;
      scratch[2] = 0u;
      scratch[3] = 0u;
    }
    __syncwarp();  // lane 0 has read runs[a]
    for (uint32_t i = lane; i < g; i += 32) runs[i] = 0u;
  }
}

// The group of the tile whose first row is m0 under a psum layout (int32 [g] cumulative row ends;
// group i owns rows [align(ends[i-1]), ends[i])), or g where m0 lies in no group (an alignment gap,
// past the last end): the FP8 and BF16 tile walkers' search (kPsumLayout). lo = the number of ends
// <= m0 (upper bound): ends[lo] is the first end past m0, and m0 lies in group lo iff it is not
// before lo's start align(ends[lo - 1]). Whatever the ends hold, the result is in [0, g].
// Branch-free, a trip count that depends on g only, 32-bit arithmetic: with the alignment in 64
// bits ptxas moved the bm64 consumers' k-loop address arithmetic off the uniform datapath (+16
// instructions per k-block; tests/test_contiguous_layout_in_gemm.py compares the loops). The ends
// are read through L1 (log2(g) + 1 loads per tile, hits after the first tile).
__device__ __forceinline__ uint32_t psum_layout_group(const int* __restrict__ ends, uint32_t g, uint32_t m0,
                                                      uint32_t align_log2) {
  const int row = static_cast<int>(m0);  // m0 < M <= INT32_MAX (the host's limit)
  uint32_t lo = 0;
  for (uint32_t step = g == 0 ? 0u : 1u << (31 - __clz(g)); step > 0; step >>= 1) {
    const uint32_t probe = lo + step;
    const int end = __ldg(ends + (probe < g ? probe : g) - 1);  // in bounds
    lo = (probe <= g && end <= row) ? probe : lo;
  }
  const int prev = lo == 0 ? 0 : __ldg(ends + (lo == 0 ? 0u : lo - 1));
  // align(prev) in 32 bits (prev < 2^31, the alignment <= 2^30: no wrap); > m0 only for broken ends.
  const uint32_t mask = (1u << align_log2) - 1u;
  const uint32_t start = prev <= 0 ? 0u : (static_cast<uint32_t>(prev) + mask) & ~mask;
  return (lo < g && m0 >= start) ? lo : g;
}

// The psum layout's rules (int32 [g] cumulative row ends; the standalone kernel's psum branch, the
// host validator's order and details):
//   kLayoutPsumNegative    every end >= 0                          details: (minimum)
//   kLayoutPsumDecreasing  ends[i - 1] <= ends[i]                  details: (first such i, ends[i - 1], ends[i])
//   kLayoutPsumPastM       ends[g - 1] <= m                        details: (ends[g - 1])
//   kLayoutPsumGap         a non-empty group ends at or past its   details: (first such i, ends[i - 1], ends[i])
//                          start align(ends[i - 1])
// They concern the g ends only, so CTA 0's warp checks them all (no scratch, no ticket); the other
// CTAs' warps return at once. As with the plain layout the GEMM never depends on them (the walker's
// psum_group keeps every group < g), so broken ends give unspecified rows, never an out-of-bounds
// access. Called after griddepcontrol.wait (it reads the layout).
__device__ __forceinline__ void check_psum_layout_warp(const int* __restrict__ ends, uint32_t m, uint32_t g,
                                                       int* record, uint32_t info) {
  if (blockIdx.x != 0 || g == 0) return;
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t align_log2 = info & 0xffu;
  const long long step = 1ll << align_log2;
  int lo = INT_MAX;
  unsigned dec = 0, gap = 0;  // keys ~index: the first broken index wins a maximum
  for (uint32_t i = lane; i < g; i += 32) {
    const int end = __ldg(ends + i);
    lo = min(lo, end);
    if (i > 0) {
      const int prev = __ldg(ends + i - 1);
      if (end < prev) dec = max(dec, ~i);
      const long long start = (static_cast<long long>(prev) + step - 1) / step * step;  // prev >= 0 when it matters
      if (end != prev && static_cast<long long>(end) < start) gap = max(gap, ~i);
    }
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  dec = __reduce_max_sync(0xffffffffu, dec);
  gap = __reduce_max_sync(0xffffffffu, gap);
  if (lane != 0) return;
  const int last = __ldg(ends + g - 1);
  int code = 0, a = 0, b = 0, c = 0;
  if (lo < 0) {
    code = kLayoutPsumNegative;
    a = lo;
  } else if (dec) {
    const uint32_t i = ~dec;
    code = kLayoutPsumDecreasing;
    a = static_cast<int>(i);
    b = __ldg(ends + i - 1);
    c = __ldg(ends + i);
  } else if (static_cast<long long>(last) > static_cast<long long>(m)) {
    code = kLayoutPsumPastM;
    a = last;
  } else if (gap) {
    const uint32_t i = ~gap;
    code = kLayoutPsumGap;
    a = static_cast<int>(i);
    b = __ldg(ends + i - 1);
    c = __ldg(ends + i);
  }
  volatile int* rec = record;
  if (code != 0 && rec[0] == 0) {  // the first broken rule since the host last read the record
    rec[1] = static_cast<int>(info >> 8);
    rec[2] = a;
    rec[3] = b;
    rec[4] = c;
    rec[5] = static_cast<int>(g);
    rec[6] = 1 << align_log2;
    rec[7] = static_cast<int>(m);
    __threadfence_system();
    rec[0] = code;
    __threadfence_system();
  }
}

}  // namespace scheduler
}  // namespace finegemm
