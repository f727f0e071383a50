// Per-launch group table of the k-grouped FP8 GEMM (recipe (1, 1, 128), scheduler::kGemmKGrouped):
// plain C++ shared by the kernel (impls/sm90_fp8_gemm_1d2d.cuh) and its host launcher
// (host/sm90_fp8_k_grouped.cpp), so both see one layout.
//
// Why tensor maps per group, in kernel parameter space: A_g [M, k_g] and B_g [N, k_g] have a row
// pitch of k_g bytes, which differs per group, and a TMA descriptor has one pitch. The maps are
// encoded on the host and passed by value (`const __grid_constant__`): the launch copies them,
// so a CUDA graph captures them with the call (like every other finegemm tensor map), there is no
// device workspace and no in-kernel tensormap.replace + proxy fences. The price is the parameter
// size: SM90 with CUDA >= 12.1 accepts kernel parameters up to 32764 bytes (4 KB before). 64
// groups x 2 maps x 128 B = 16 KB + the slot table (1 KB) keeps the whole entry's parameters
// near 18 KB; problems with more groups are split into launches of at most kMaxGroups groups
// (host/sm90_fp8_k_grouped.cpp), so any G works.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace finegemm {
namespace impls {

struct Sm90Fp8KGroupedSlot {
  uint32_t group;      // index g of the group in d / c ([G, M, N]): D rows g * M ..
  uint32_t kb_offset;  // first row of the group's block in sfa [sum Kb, M] / sfb [sum Kb, N]
  uint32_t num_kb;     // k_g / 128 (0: the group's tiles only write C or zeros)
  uint32_t reserved;
};

// 128-byte aligned like its CUtensorMap members (cuda.h aligns CUtensorMap to 128).
struct Sm90Fp8KGroupedParams {
  static constexpr uint32_t kMaxGroups = 64;
  // Slot s of this launch: A_g / B_g maps of its group (unused, zeroed, when num_kb == 0).
  CUtensorMap tmap_a[kMaxGroups];
  CUtensorMap tmap_b[kMaxGroups];
  Sm90Fp8KGroupedSlot slot[kMaxGroups];
  uint32_t num_slots;  // 1 .. kMaxGroups
};

static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
static_assert(alignof(Sm90Fp8KGroupedParams) == alignof(CUtensorMap), "table aligned as its tensor maps");
static_assert(sizeof(Sm90Fp8KGroupedParams) <= 24 * 1024,
              "the k-grouped parameter table must leave room under the 32764-byte SM90 parameter limit");

}  // namespace impls
}  // namespace finegemm
