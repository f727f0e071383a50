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

}  // namespace scheduler
}  // namespace finegemm
