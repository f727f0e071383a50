// Persistent tile scheduler for dense GEMMs (optionally split along K, optionally with 2-CTA
// clusters that share one operand through TMA multicast).
//
// The grid is a multiple of the cluster size; cluster c (of num_clusters) processes work units
// c, c + num_clusters, ... . A work unit is (super-tile, split): a super-tile is kClusterM x
// kClusterN tiles (1x1 without clusters; 2x1 when the pair shares B, i.e. two m-blocks of one
// n-block; 1x2 when it shares A) and CTA `rank` of the cluster takes tile `rank` of it. Both
// CTAs of a cluster therefore walk the same sequence of k-blocks, which the multicast
// barriers require. A super-tile may stick out of the grid of tiles (odd block count): that
// CTA computes a "phantom" tile fully out of bounds (TMA zero-fills it) and stores nothing.
// The splits of one tile are consecutive units, so they run concurrently on neighbouring
// clusters and the last one finds the other partials fresh in L2. (Split-K and clusters are
// not combined: the host never asks for both.)
//
// Super-tile order (L2 reuse): super-tiles are visited in column groups of kGroupN super-tile
// columns; inside a group the column varies fastest, then the row. A wave of ~132 CTAs thus
// covers a compact rectangle (about 8 m-blocks x 16 n-blocks of 128 x 128 tiles without
// clusters) whose A rows and B columns are read by many CTAs of the wave while they are still
// in L2, instead of one long row of tiles (which would stream all of B once per m-block row).
// kGroupN = 16 keeps a group's B panel (16 x block_n x K bytes, e.g. 16*128*7168 = 14.7 MB)
// well inside the 50-60 MB L2. The last group may be narrower.
#pragma once

#include <cstdint>

#include <finegemm/scheduler/contiguous_layout_check.cuh>

namespace finegemm {
namespace scheduler {

template <uint32_t kClusterM = 1, uint32_t kClusterN = 1, uint32_t kGroupN = 16>
struct PersistentScheduler {
  static_assert(kClusterM >= 1 && kClusterN >= 1 && kClusterM * kClusterN <= 2, "clusters of 1 or 2 CTAs");
  static constexpr uint32_t kClusterSize = kClusterM * kClusterN;

  uint32_t num_m_blocks;
  uint32_t num_n_blocks;
  uint32_t num_super_m;  // super-tile rows / columns
  uint32_t num_super_n;
  uint32_t num_splits;
  uint32_t num_units;

  __device__ __forceinline__ PersistentScheduler(uint32_t m_blocks, uint32_t n_blocks, uint32_t splits)
      : num_m_blocks(m_blocks), num_n_blocks(n_blocks),
        num_super_m((m_blocks + kClusterM - 1) / kClusterM), num_super_n((n_blocks + kClusterN - 1) / kClusterN),
        num_splits(splits), num_units(num_super_m * num_super_n * splits) {}

  // Linear tile index used for per-tile resources (split-K workspace and counters).
  __device__ __forceinline__ uint32_t tile_index(uint32_t m_block, uint32_t n_block) const {
    return m_block * num_n_blocks + n_block;
  }

  // Decode work unit `unit` (< num_units) for the CTA of cluster rank `rank` into
  // (m_block, n_block, split). The tile may be a phantom (m_block >= num_m_blocks or
  // n_block >= num_n_blocks) when a super-tile sticks out of the tile grid.
  __device__ __forceinline__ void get(uint32_t unit, uint32_t rank, uint32_t& m_block, uint32_t& n_block,
                                      uint32_t& split) const {
    uint32_t tile = unit;
    split = 0;
    if (num_splits > 1) {
      tile = unit / num_splits;
      split = unit - tile * num_splits;
    }
    const uint32_t group_tiles = kGroupN * num_super_m;
    const uint32_t group = tile / group_tiles;
    const uint32_t first_n = group * kGroupN;
    const uint32_t rest = num_super_n - first_n;
    const uint32_t width = rest < kGroupN ? rest : kGroupN;
    const uint32_t in_group = tile - group * group_tiles;
    const uint32_t sm = in_group / width;
    const uint32_t sn = first_n + (in_group - sm * width);
    m_block = sm * kClusterM + (kClusterM > 1 ? rank : 0u);
    n_block = sn * kClusterN + (kClusterN > 1 ? rank : 0u);
  }

  // K-block range [begin, end) of split `split` out of num_kb k-blocks (balanced, contiguous;
  // the host guarantees num_splits <= num_kb so no range is empty).
  __device__ __forceinline__ void k_range(uint32_t split, uint32_t num_kb, uint32_t& begin,
                                          uint32_t& end) const {
    begin = (num_splits > 1) ? (split * num_kb) / num_splits : 0;
    end = (num_splits > 1) ? ((split + 1) * num_kb) / num_splits : num_kb;
  }
};


// Kinds of GEMM the SM90 FP8 kernel family runs (template parameter kGemmKind of
// impls/sm90_fp8_gemm_1d2d.cuh; the host mirrors the values).
enum GemmKind : uint32_t {
  kGemmNormal = 0,             // one [M, N] problem
  kGemmGroupedContiguous = 1,  // rows of all groups stacked: A [M, K], B [G*N, K], group id per row
  kGemmGroupedMasked = 2,      // A [G*Mmax, K], B [G*N, K], only the first masked_m[g] rows of group g
  kGemmKGrouped = 3,           // recipe (1, 1, 128) only: G problems [M, N] with their own K (weight gradients)
};

// One tile of work, in the coordinates of the 2-D tensor maps.
struct TileCoords {
  uint32_t m_block, n_block, split;
  uint32_t group;      // group of the tile (0 for kGemmNormal and for skipped tiles)
  uint32_t a_row;      // first row of the tile in A / D ([M, K] or [G*Mmax, K] views)
  uint32_t row_limit;  // rows >= row_limit (same view) are never stored
  uint32_t sfa_m;      // first sfa element of the tile along M (the sfa map's inner dim)
  uint32_t sfa_kb0;    // sfa map row of k-block 0 (g * num_kb for masked; sfa [G*Kb, Mmax_aligned])
  uint32_t b_row;      // first row of the tile in B ([N, K] or [G*N, K] view): group * N + n0
  bool skip;           // contiguous padding block: no main loop, the tile is written as zeros
};

// Work-unit walker over the three GEMM kinds; producer and consumers of every CTA (and both
// CTAs of a cluster) call next() with the same unit sequence and get the same tiles, so they
// agree on the k-blocks of every unit (the barrier phases depend on it).
//   Normal: the PersistentScheduler's units over ceil(M/BM) x ceil(N/BN) tiles.
//   GroupedContiguous: the same units over the stacked rows; a tile's group is the group id of
//     its first row (segments start at multiples of the mk alignment, which BLOCK_M divides, so
//     a tile holds one group's rows then possibly padding rows; a first row of -1 means the whole
//     tile is padding: `skip`).
//     kPsum (the kernel reading a psum layout itself): `grouped` holds the G cumulative row ends;
//     group g owns rows [align(end[g-1]), end[g]). A tile's group is the first whose end is past
//     the tile's first row (psum_layout_group: a search of log2(G) loads, L1 hits after the first
//     tile); a first row in no group (an alignment gap, or past the last end) makes the tile
//     padding. Whatever the ends hold, the group is < G or the tile is skipped.
//   GroupedMasked: group after group, each with ceil(clamp(masked_m[g], 0, Mmax) / BLOCK_M)
//     m-blocks, in the PersistentScheduler's swizzled order inside the group. masked_m is read
//     on the GPU (never by the host), once per group and walker: the walk is monotonic (units of
//     a CTA increase), so its cost is O(G + units) per CTA, and the current group's row count
//     stays in a register (re-reading it per tile put a global-load round trip in front of every
//     tile's main loop and epilogue). Tiles of rows >= masked_m are never visited.
//     kFullGroups (fp8_einsum's heads-packed kernel reading sfa in place, whose groups are all M
//     rows): masked_m is never read and a unit's group is one division. The walk cost one dependent load per group
//     before a CTA's first tile: with 128 heads of one tile each, the last CTA's first tile waited
//     for 127 of them.
//   KGrouped: num_groups slots (the host's group table) of the same [M, N] tile grid, slot after
//     slot, each in the PersistentScheduler's order; `group` is the SLOT (the kernel reads its
//     tensor maps, k-blocks and D group from the table); a_row / sfa_m / b_row are coordinates
//     inside the slot's own maps (A_g [M, k_g], B_g [N, k_g]). A cluster's super-tile never
//     leaves its slot, so both CTAs walk the same k-blocks. Balance: the host orders the slots by
//     k_g, longest first, so with the round-robin unit assignment the last, partial wave holds
//     the shortest tiles (longest-processing-time-first at no cost on the GPU).
template <uint32_t kGemmKind, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kClusterM, uint32_t kClusterN,
          uint32_t kGroupN = 16, bool kPsum = false, bool kFullGroups = false>
struct TileWalker {
  static_assert(kGemmKind <= kGemmKGrouped, "unknown GEMM kind");
  static_assert(!kPsum || kGemmKind == kGemmGroupedContiguous, "psum ends: the contiguous kind");
  static_assert(!kFullGroups || kGemmKind == kGemmGroupedMasked, "full groups: the masked kind");
  static_assert(kGemmKind == kGemmNormal || kGemmKind == kGemmKGrouped || kClusterM == 1,
                "grouped GEMMs: clusters only share A (two n-blocks of one m-block: one group)");
  using Sched = PersistentScheduler<kClusterM, kClusterN, kGroupN>;
  // Normal / contiguous: the whole problem (masked: unused; a group's scheduler is rebuilt per
  // call from masked_m so that only g and base stay live across the consumers' main loop).
  Sched sched;
  const int* grouped;  // contiguous: group id per row; masked: masked_m per group
  uint32_t M, N, num_kb, num_groups;
  uint32_t g, base;  // masked walk: current group, units of the groups before it
  uint32_t rows_g;   // masked walk: group_rows(g)
  uint32_t align_log2;  // kPsum: log2 of the mk alignment

  // m: rows (M, or Mmax per group for masked); num_groups >= 1 for masked. psum_align_log2: kPsum only.
  __device__ __forceinline__ TileWalker(uint32_t m, uint32_t n, uint32_t kb, uint32_t splits, const int* gl,
                                        uint32_t groups, uint32_t psum_align_log2 = 0)
      : sched(kGemmKind == kGemmGroupedMasked ? 0u : (m + BLOCK_M - 1) / BLOCK_M, (n + BLOCK_N - 1) / BLOCK_N,
              splits),
        grouped(gl), M(m), N(n), num_kb(kb), num_groups(groups), g(0), base(0), rows_g(0),
        align_log2(psum_align_log2) {
    if constexpr (kGemmKind == kGemmGroupedMasked) rows_g = kFullGroups ? m : group_rows(0);
  }

  // masked_m[g] clamped to [0, Mmax] (a bad value never reads or writes out of bounds).
  __device__ __forceinline__ uint32_t group_rows(uint32_t grp) const {
    const int v = __ldg(grouped + grp);
    return v <= 0 ? 0u : (static_cast<uint32_t>(v) < M ? static_cast<uint32_t>(v) : M);
  }

  // kPsum: the group of the tile whose first row is m0 (scheduler/contiguous_layout_check.cuh).
  __device__ __forceinline__ uint32_t psum_group(uint32_t m0) const {
    return psum_layout_group(grouped, num_groups, m0, align_log2);
  }

  // Rows >= this (2-D view index) of the tile last returned by next() are never stored.
  __device__ __forceinline__ uint32_t row_limit() const {
    if constexpr (kGemmKind == kGemmGroupedMasked) return g * M + rows_g;
    return M;
  }

  // The tile of `unit` for cluster rank `rank`; false when the unit is past the last one.
  __device__ __forceinline__ bool next(uint32_t unit, uint32_t rank, TileCoords& t) {
    uint32_t local = unit;
    Sched s = sched;
    if constexpr (kGemmKind == kGemmGroupedMasked && kFullGroups) {
      s = Sched((M + BLOCK_M - 1) / BLOCK_M, (N + BLOCK_N - 1) / BLOCK_N, 1u);
      g = unit / s.num_units;
      if (g >= num_groups) return false;
      local = unit - g * s.num_units;
    } else if constexpr (kGemmKind == kGemmGroupedMasked) {
      const uint32_t num_n_blocks = (N + BLOCK_N - 1) / BLOCK_N;
      while (true) {
        s = Sched((rows_g + BLOCK_M - 1) / BLOCK_M, num_n_blocks, 1u);
        if (unit < base + s.num_units) break;
        base += s.num_units;
        if (++g >= num_groups) return false;  // the caller's loop ends: no later call
        rows_g = group_rows(g);
      }
      local = unit - base;
    } else if constexpr (kGemmKind == kGemmKGrouped) {
      const uint32_t slot = unit / s.num_units;
      if (slot >= num_groups) return false;
      g = slot;
      local = unit - slot * s.num_units;
    } else {
      if (unit >= s.num_units) return false;
    }
    s.get(local, rank, t.m_block, t.n_block, t.split);
    const uint32_t m0 = t.m_block * BLOCK_M, n0 = t.n_block * BLOCK_N;
    t.skip = false;
    if constexpr (kGemmKind == kGemmNormal) {
      t.group = 0;
      t.a_row = m0;
      t.row_limit = M;
      t.sfa_m = m0;
      t.sfa_kb0 = 0;
      t.b_row = n0;
    } else if constexpr (kGemmKind == kGemmGroupedContiguous) {
      // An id outside [0, num_groups) is padding: the standalone check kernel's ids never hold one,
      // the caller's layout (the FP8 kernel's in-kernel check) may.
      const int gid = m0 >= M ? -1 : kPsum ? static_cast<int>(psum_group(m0)) : __ldg(grouped + m0);
      t.skip = gid < 0 || static_cast<uint32_t>(gid) >= num_groups;
      t.group = t.skip ? 0u : static_cast<uint32_t>(gid);
      t.a_row = m0;
      t.row_limit = M;
      t.sfa_m = m0;
      t.sfa_kb0 = 0;
      t.b_row = t.group * N + n0;
    } else if constexpr (kGemmKind == kGemmKGrouped) {
      t.group = g;  // the slot
      t.a_row = m0;
      t.row_limit = M;  // inside the group: the kernel adds the group's D row base
      t.sfa_m = m0;
      t.sfa_kb0 = 0;  // the kernel adds the slot's kb_offset
      t.b_row = n0;
    } else {
      t.group = g;
      t.a_row = g * M + m0;
      t.row_limit = g * M + rows_g;
      t.sfa_m = m0;
      t.sfa_kb0 = g * num_kb;
      t.b_row = g * N + n0;
    }
    return true;
  }
};

}  // namespace scheduler
}  // namespace finegemm
