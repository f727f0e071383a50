// Tile walkers of the grouped BF16 GEMMs (impls/sm90_bf16_gemm.cuh, template parameter
// kGemmKind): Bf16GroupedWalker (m-grouped kinds) and Bf16KGroupedWalker (k-grouped kind). Self-contained (the FP8 family's scheduler/persistent.cuh is not shared, so the
// two kernel families can change independently); the same rules as its TileWalker:
//
//   GroupedContiguous: A [M, K] rows of all groups stacked, B viewed as [G*N, K] (or, N-major,
//     [G, K, N] through a 3-D map: the tile's `group` is its coordinate), D [M, N];
//     `grouped` = int32 group id per row (-1 = padding row, written as zeros). Units are the
//     ceil(M/BLOCK_M) x ceil(N/BLOCK_N) tiles in the dense column-grouped order. A tile's group
//     is the id of its first row: group segments start at multiples of the mk alignment, which
//     BLOCK_M divides, so a tile holds one group's rows and then possibly padding rows; a first
//     row of -1 means the whole tile is padding (`skip`: no main loop, zeros are stored).
//     kPsum: `grouped` = the G cumulative row ends of a psum layout instead, searched per tile
//     (psum_layout_group, scheduler/contiguous_layout_check.cuh; as the FP8 TileWalker).
//   GroupedMasked: A viewed as [G*Mmax, K], B as [G*N, K], D as [G*Mmax, N]; `grouped` =
//     masked_m [G], read on the GPU (never by the host) and clamped to [0, Mmax]. Units walk
//     group after group, each with ceil(rows_g / BLOCK_M) x ceil(N / BLOCK_N) tiles in the dense
//     order inside the group. A CTA's units increase, so the walk is monotonic: O(G + units)
//     per CTA. Rows >= rows_g of a group are never stored (row_limit()).
//
//   KGrouped (tn layout, fp32 D): A [sum(k_g), M], B [sum(k_g), N] (K outer), one tensor map
//     each over all groups; D, C [G, M, N]. Units are num_slots x ceil(M/BLOCK_M) x
//     ceil(N/BLOCK_N) tiles, slot-major (scheduler/k_grouped_bf16_args.h: a slot is one group of
//     the launch, longest first); inside a slot the dense column-grouped order. A tile's k-loop is
//     its group's k-blocks, rows [kb_begin * 64, (kb_begin + num_kb) * 64) of the tensor maps;
//     num_kb = 0 (empty group): no main loop, C or zeros are stored.
//
// Producer and consumers of a CTA each own a walker and call next() with the same unit
// sequence, so they agree on the tiles (and the k-blocks: all of them, or none for `skip`).
#pragma once

#include <cstdint>

#include <finegemm/scheduler/contiguous_layout_check.cuh>
#include <finegemm/scheduler/k_grouped_bf16_args.h>

namespace finegemm {
namespace scheduler {

// Kinds of the SM90 BF16 GEMM (template parameter kGemmKind; heuristics/sm90_bf16_gemm.py mirrors
// the values).
enum Bf16GemmKind : uint32_t {
  kBf16GemmNormal = 0,
  kBf16GemmGroupedContiguous = 1,
  kBf16GemmGroupedMasked = 2,
  kBf16GemmKGrouped = 3,
};

struct Bf16GroupedTile {
  uint32_t m_block, n_block;  // in the group's tile grid (contiguous: the whole problem's)
  uint32_t a_row;             // first row of the tile in the 2-D A / D view
  uint32_t b_row;             // first row of the tile in the [G*N, K] B view: group * N + n0
  uint32_t group;             // the tile's group (0 for a padding tile); an N-major B's map coordinate
  bool skip;                  // contiguous padding tile: no main loop, zeros are stored
};

template <uint32_t kKind, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kGroupN = 8, bool kPsum = false>
struct Bf16GroupedWalker {
  static_assert(kKind == kBf16GemmGroupedContiguous || kKind == kBf16GemmGroupedMasked, "grouped kinds only");
  static_assert(!kPsum || kKind == kBf16GemmGroupedContiguous, "psum ends: the contiguous kind");
  const int* grouped;  // contiguous: group id per row (kPsum: the G row ends); masked: masked_m per group
  uint32_t M;          // contiguous: total rows; masked: Mmax
  uint32_t N, num_groups, num_n_blocks;
  uint32_t g, base;  // masked walk: current group, units of the groups before it
  uint32_t rows_g;   // masked walk: group_rows(g), read once per group (as the FP8 TileWalker)
  uint32_t align_log2;  // kPsum: log2 of the mk alignment

  __device__ __forceinline__ Bf16GroupedWalker(uint32_t m, uint32_t n, const int* gl, uint32_t groups,
                                               uint32_t psum_align_log2 = 0)
      : grouped(gl), M(m), N(n), num_groups(groups), num_n_blocks((n + BLOCK_N - 1) / BLOCK_N), g(0), base(0),
        rows_g(0), align_log2(psum_align_log2) {
    if constexpr (kKind == kBf16GemmGroupedMasked) rows_g = group_rows(0);
  }

  // Dense column-grouped order (impls::Bf16TileScheduler): tile -> (m_block, n_block).
  __device__ __forceinline__ void order(uint32_t tile, uint32_t num_m_blocks, uint32_t& m_block,
                                        uint32_t& n_block) const {
    const uint32_t group_tiles = kGroupN * num_m_blocks;
    const uint32_t grp = tile / group_tiles;
    const uint32_t first_n = grp * kGroupN;
    const uint32_t rest = num_n_blocks - first_n;
    const uint32_t width = rest < kGroupN ? rest : kGroupN;
    const uint32_t in_group = tile - grp * group_tiles;
    m_block = in_group / width;
    n_block = first_n + (in_group - m_block * width);
  }

  // masked_m[grp] clamped to [0, Mmax] (a bad value never reads or writes out of bounds).
  __device__ __forceinline__ uint32_t group_rows(uint32_t grp) const {
    const int v = __ldg(grouped + grp);
    return v <= 0 ? 0u : (static_cast<uint32_t>(v) < M ? static_cast<uint32_t>(v) : M);
  }

  // Rows >= this (2-D view index) of the tile last returned by next() are never stored.
  __device__ __forceinline__ uint32_t row_limit() const {
    if constexpr (kKind == kBf16GemmGroupedMasked) return g * M + rows_g;
    return M;
  }

  // kPsum: the group of the tile whose first row is m0, num_groups for none.
  __device__ __forceinline__ uint32_t psum_group(uint32_t m0) const {
    return psum_layout_group(grouped, num_groups, m0, align_log2);
  }

  // The tile of `unit`; false when the unit is past the last one (the caller's loop ends).
  __device__ __forceinline__ bool next(uint32_t unit, Bf16GroupedTile& t) {
    if constexpr (kKind == kBf16GemmGroupedMasked) {
      uint32_t m_blocks;
      while (true) {
        m_blocks = (rows_g + BLOCK_M - 1) / BLOCK_M;
        if (unit < base + m_blocks * num_n_blocks) break;
        base += m_blocks * num_n_blocks;
        if (++g >= num_groups) return false;
        rows_g = group_rows(g);
      }
      order(unit - base, m_blocks, t.m_block, t.n_block);
      t.a_row = g * M + t.m_block * BLOCK_M;
      t.b_row = g * N + t.n_block * BLOCK_N;
      t.group = g;
      t.skip = false;
    } else {
      const uint32_t m_blocks = (M + BLOCK_M - 1) / BLOCK_M;
      if (unit >= m_blocks * num_n_blocks) return false;
      order(unit, m_blocks, t.m_block, t.n_block);
      const uint32_t m0 = t.m_block * BLOCK_M;
      // An id outside [0, num_groups) is padding: the check kernel's ids never hold one, the
      // caller's layout (the in-kernel check, kLayoutCheck) may.
      const int gid = kPsum ? static_cast<int>(psum_group(m0)) : __ldg(grouped + m0);  // m0 < M
      t.skip = gid < 0 || static_cast<uint32_t>(gid) >= num_groups;
      t.a_row = m0;
      t.group = t.skip ? 0u : static_cast<uint32_t>(gid);
      t.b_row = t.group * N + t.n_block * BLOCK_N;
    }
    return true;
  }
};

// k-grouped tile walk; the group table lives in kernel parameter space (read with constant-bank
// loads, no global memory traffic).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kGroupN = 8>
struct Bf16KGroupedWalker {
  const Bf16KGroupedArgs* args;
  uint32_t num_m_blocks, num_n_blocks, tiles_per_slot, num_units;

  // num_slots: a->num_slots (a separate argument so that kinds without a table never read one);
  // clamped to the table size (a bad value never indexes past it).
  __device__ __forceinline__ Bf16KGroupedWalker(uint32_t m, uint32_t n, const Bf16KGroupedArgs* a, uint32_t num_slots)
      : args(a),
        num_m_blocks((m + BLOCK_M - 1) / BLOCK_M),
        num_n_blocks((n + BLOCK_N - 1) / BLOCK_N),
        tiles_per_slot(num_m_blocks * num_n_blocks),
        num_units(num_m_blocks * num_n_blocks *
                  (num_slots < kBf16KGroupedMaxSlots ? num_slots : kBf16KGroupedMaxSlots)) {}

  // Tile of `unit` (< num_units): (m_block, n_block) in the group's grid, the group index and
  // the absolute k-block range [kb_begin, kb_end) in a and b.
  __device__ __forceinline__ void get(uint32_t unit, uint32_t& m_block, uint32_t& n_block, uint32_t& group,
                                      uint32_t& kb_begin, uint32_t& kb_end) const {
    const uint32_t slot = unit / tiles_per_slot;
    const uint32_t tile = unit - slot * tiles_per_slot;
    const uint32_t grp = tile / (kGroupN * num_m_blocks);
    const uint32_t first_n = grp * kGroupN;
    const uint32_t rest = num_n_blocks - first_n;
    const uint32_t width = rest < kGroupN ? rest : kGroupN;
    const uint32_t in_group = tile - grp * (kGroupN * num_m_blocks);
    m_block = in_group / width;
    n_block = first_n + (in_group - m_block * width);
    group = args->group[slot];
    kb_begin = args->kb_begin[slot];
    kb_end = kb_begin + args->num_kb[slot];
  }
};

}  // namespace scheduler
}  // namespace finegemm
