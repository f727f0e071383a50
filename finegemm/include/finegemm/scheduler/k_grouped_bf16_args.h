// Per-launch group table of the k-grouped BF16 GEMM (impls/sm90_bf16_gemm.cuh, kind
// scheduler::kBf16GemmKGrouped), passed BY VALUE as one kernel parameter. Plain C++ (no device
// code): the host launcher (host/sm90_bf16_gemm.cpp) fills the same struct, so the two cannot
// disagree on the layout.
//
// Why a by-value parameter and not a device array: the groups' K sizes are Python ints on the
// host, so the table costs no host -> device copy and no allocation per call, and a CUDA graph
// captures it with the launch (replays are self-contained). Kernel parameters are limited to
// 4096 bytes on every driver (32764 only with CUDA >= 12.1 drivers); the table holds at most
// kBf16KGroupedMaxSlots groups (3 KB) and the launcher splits larger G into several launches.
//
// A slot is one group of this launch; slots are ordered by decreasing k-block count (the
// launcher sorts them) so the longest tiles start first and the last wave holds the shortest.
// The kernel's work units are num_slots x m_blocks x n_blocks tiles, slot-major.
#pragma once

#include <cstdint>

namespace finegemm {
namespace scheduler {

constexpr uint32_t kBf16KGroupedMaxSlots = 256;

struct Bf16KGroupedArgs {
  uint32_t num_slots;  // groups in this launch (<= kBf16KGroupedMaxSlots)
  uint32_t reserved;
  uint32_t group[kBf16KGroupedMaxSlots];     // index g of the slot's group (D / C rows g*M ..)
  uint32_t kb_begin[kBf16KGroupedMaxSlots];  // first 64-row k-block of the group in a and b
  uint32_t num_kb[kBf16KGroupedMaxSlots];    // k-blocks of the group (0: D = C or zeros)
};

// The other parameters of the k-grouped entry take < 320 bytes (two tensor maps, two pointers,
// four ints); keep the whole parameter list inside the classic 4 KB.
static_assert(sizeof(Bf16KGroupedArgs) == 8 + 12 * kBf16KGroupedMaxSlots, "packed table");
static_assert(sizeof(Bf16KGroupedArgs) + 320 <= 4096, "kernel parameters above the 4 KB limit");

}  // namespace scheduler
}  // namespace finegemm
