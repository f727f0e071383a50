// B's stages in groups of kGroup k-blocks (kBGroup of both kernel families; benchmarks/NOTES.md
// v1.05). One TMA box of the host's 4-D map over B (fg::make_tmap_k_groups) fills a group's kGroup
// stages as one block of 128B-swizzled 8-row atoms: k-block i of the group, rows [8 r, 8 r + 8) at
// r * kGroup * 1024 + i * 1024 past the group's first stage. wgmma reads a stage with the usual
// K-major descriptor at that start and a stride byte offset of kGroup * 1024 between 8-row atoms.
// kGroup 1 is the plain ring: stage s at s * kStageBytes, atoms 1024 apart.
//
// The producer issues the box on a group's first stage (kGroup divides the ring and every unit's
// k-block count, so groups never wrap), after every stage of the group is free, and puts all its
// bytes on that stage's full barrier; the consumers wait their stages in order, so the group's
// first barrier (and with it B) has completed before any of its stages is read. A kernel whose
// consumers hold a stage while they wait for the next one (the BF16 kernel releases one k-block
// late) needs two groups in the ring at least: the held stage must not be in the group being loaded.
#pragma once

#include <cstdint>

#include <finegemm/ptx/mbarrier.cuh>

namespace finegemm {
namespace impls {

template <uint32_t kGroup, uint32_t kStageBytes>
struct BGroupRing {
  static_assert(kGroup == 1 || kGroup == 2 || kGroup == 4, "B groups of 1, 2 or 4 k-blocks");
  static_assert(kStageBytes % 1024 == 0, "a stage of B is whole 8-row atoms");
  static constexpr uint32_t kSbo = kGroup * 1024;  // between 8-row atoms of one k-block

  // Whether `stage` carries the group's box (every stage with kGroup 1).
  __device__ __forceinline__ static bool first(uint32_t stage) { return kGroup == 1 || stage % kGroup == 0; }

  // B bytes on `stage`'s full barrier: the whole group's on its first stage, none on the others.
  __device__ __forceinline__ static uint32_t tx_bytes(uint32_t stage) {
    return kGroup == 1 ? kStageBytes : (first(stage) ? kGroup * kStageBytes : 0u);
  }

  // Before a group's box: the group's other stages must be free too (its first one the caller
  // waited for already). `empty_bar(s)`: stage s's empty barrier.
  template <typename EmptyBar>
  __device__ __forceinline__ static void wait_rest(uint32_t stage, uint32_t phase, EmptyBar&& empty_bar) {
    if constexpr (kGroup > 1) {
      if (first(stage)) {
        for (uint32_t j = 1; j < kGroup; ++j) ptx::mbar_wait(empty_bar(stage + j), phase ^ 1u);
      }
    }
  }

  // Shared address of stage s's rows [row0, row0 + 8 ...) (row0 a multiple of 8) in the ring at
  // `ring` (summed in the order the kernels always did: the same SASS with kGroup 1).
  __device__ __forceinline__ static uint32_t addr(uint32_t ring, uint32_t s, uint32_t row0) {
    return kGroup == 1 ? ring + s * kStageBytes + row0 * 128u
                       : ring + (s - s % kGroup) * kStageBytes + (s % kGroup) * 1024u + (row0 / 8) * kSbo;
  }
};

}  // namespace impls
}  // namespace finegemm
