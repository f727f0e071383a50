// Persistent tile scheduler for dense GEMMs (optionally split along K).
//
// The grid is min(#SMs, #work units); CTA b processes work units b, b + gridDim.x, ... . A work
// unit is (tile, split); the splits of one tile are consecutive units, so they run at the same
// time on neighbouring CTAs and the last one to finish finds the others' partials fresh in L2.
//
// Tile order (L2 reuse): tiles are visited in column groups of kGroupN n-blocks; inside a group
// the n-block varies fastest, then the m-block. A wave of ~132 consecutive tiles therefore covers
// about 132/kGroupN m-blocks x kGroupN n-blocks — a compact rectangle whose A rows and B columns
// are read by many CTAs of the wave while they are still in L2 — instead of one long row of
// tiles (which would stream all of B once per m-block row). kGroupN = 16 keeps the B panel of a
// group (16 x block_n x K bytes, e.g. 16*128*7168 = 14.7 MB) well inside the 50/60 MB L2 while
// a wave still spans ~8 m-blocks of A. The last group may be narrower.
#pragma once

#include <cstdint>

namespace finegemm {
namespace scheduler {

template <uint32_t kGroupN = 16>
struct PersistentScheduler {
  uint32_t num_m_blocks;
  uint32_t num_n_blocks;
  uint32_t num_splits;
  uint32_t num_units;

  __device__ __forceinline__ PersistentScheduler(uint32_t m_blocks, uint32_t n_blocks, uint32_t splits)
      : num_m_blocks(m_blocks), num_n_blocks(n_blocks), num_splits(splits),
        num_units(m_blocks * n_blocks * splits) {}

  // Linear tile index used for per-tile resources (split-K workspace and counters).
  __device__ __forceinline__ uint32_t tile_index(uint32_t m_block, uint32_t n_block) const {
    return m_block * num_n_blocks + n_block;
  }

  // Decode work unit `unit` (< num_units) into (m_block, n_block, split).
  __device__ __forceinline__ void get(uint32_t unit, uint32_t& m_block, uint32_t& n_block,
                                      uint32_t& split) const {
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
