// Host launcher of the k-grouped FP8 GEMM (recipe (1, 1, 128), MoE weight gradients): every group in
// one persistent launch of impls/sm90_fp8_gemm_1d2d.cuh with scheduler::kGemmKGrouped.
//
// The caller (finegemm/ops/sm90_fp8_k_grouped.py) passes the group sizes ks as one int32 array;
// everything per group (offsets, order, tensor maps) is computed here, in C++, so the per-call
// Python cost does not grow with G. Groups are ordered longest k_g first (stable): the kernel hands
// out work units round-robin, so the last, partial wave is made of the shortest tiles. More than
// Sm90Fp8KGroupedParams::kMaxGroups groups are split into consecutive launches on the stream (the
// kernel-parameter limit, impls/sm90_fp8_k_grouped_params.h).
#include "finegemm/host/common.h"
#include "finegemm/impls/sm90_fp8_k_grouped_params.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace {

using finegemm::impls::Sm90Fp8KGroupedParams;
using finegemm::impls::Sm90Fp8KGroupedSlot;

constexpr int kBlockK = 128;
constexpr uint32_t kFlagVectorStores = 1u;  // mirrors impls::kFlagVectorStores
constexpr uint32_t kFlagTmaStore = 2u;      // mirrors impls::kFlagTmaStore
constexpr int kMaxTotalGroups = 1 << 20;     // sanity bound on G (the slot table is per call)
constexpr uint32_t kMaxSlots = Sm90Fp8KGroupedParams::kMaxGroups;

// Slot order (longest k_g first, stable) with each group's k offset; false on a bad ks.
bool order_groups(const int32_t* ks, int num_groups, std::vector<int>& order, std::vector<int64_t>& k_offset,
                  int64_t& sum_k) {
  order.resize(num_groups);
  k_offset.resize(num_groups);
  sum_k = 0;
  for (int g = 0; g < num_groups; ++g) {
    if (ks[g] < 0 || ks[g] % kBlockK != 0) return false;
    k_offset[g] = sum_k;
    sum_k += ks[g];
  }
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return ks[x] > ks[y]; });
  return true;
}

Sm90Fp8KGroupedSlot make_slot(const int32_t* ks, const std::vector<int64_t>& k_offset, int g) {
  Sm90Fp8KGroupedSlot s;
  s.group = static_cast<uint32_t>(g);
  s.kb_offset = static_cast<uint32_t>(k_offset[g] / kBlockK);
  s.num_kb = static_cast<uint32_t>(ks[g] / kBlockK);
  s.reserved = 0;
  return s;
}

}  // namespace

extern "C" {

// Groups per launch (the parameter table's capacity).
int fg_sm90_fp8_k_grouped_max_groups() { return static_cast<int>(kMaxSlots); }

// The slot table the launcher builds, without a GPU (tests): for slot s (launch order),
// out[4 s + 0..3] = group, kb_offset, num_kb, launch index; *num_launches = launches needed.
// Returns 0 or fg::FG_ERROR_INVALID_ARGUMENT (a k_g < 0 or not a multiple of 128, bad G).
int fg_sm90_fp8_k_grouped_slots(const int32_t* ks, int num_groups, uint32_t* out, int* num_launches) {
  if (ks == nullptr || out == nullptr || num_launches == nullptr || num_groups < 1 || num_groups > kMaxTotalGroups)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  std::vector<int> order;
  std::vector<int64_t> k_offset;
  int64_t sum_k = 0;
  if (!order_groups(ks, num_groups, order, k_offset, sum_k)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (sum_k / kBlockK > INT32_MAX) return fg::FG_ERROR_INVALID_ARGUMENT;
  for (int s = 0; s < num_groups; ++s) {
    const Sm90Fp8KGroupedSlot sl = make_slot(ks, k_offset, order[s]);
    out[4 * s + 0] = sl.group;
    out[4 * s + 1] = sl.kb_offset;
    out[4 * s + 2] = sl.num_kb;
    out[4 * s + 3] = static_cast<uint32_t>(s) / kMaxSlots;
  }
  *num_launches = static_cast<int>((static_cast<uint32_t>(num_groups) + kMaxSlots - 1) / kMaxSlots);
  return 0;
}

// fn:       CUfunction of the k-grouped kernel built for (block_m, block_n, stages, has_c, multicast).
// a, b:     fp8 e4m3, 1-D: the groups' A_g [m, k_g] (resp. B_g [n, k_g]) row-major one after another,
//           a_elems = m * sum(ks), b_elems = n * sum(ks) elements, 16-byte aligned bases.
// sfa, sfb: fp32, element (row, i) at row * sfa_ld + i: [sum(ks)/128 = sf_rows, m] (resp. [.., n]),
//           group g's rows after group g-1's; sfa_ld % 4 == 0 and >= m (sfb_ld likewise with n).
// d, c:     fp32 [num_groups * m, n], row pitch ldd elements; c null, or the same layout (may be d).
// ks:       int32 [num_groups], every k_g >= 0 and a multiple of 128, sum > 0 (all-empty problems
//           are the caller's: no scale map can be encoded over zero rows).
// num_multicast 1 or 2 (multicast_on_a: the pair shares A, else B); grid: CTAs (a multiple of the
//           cluster size), shrunk per launch to the launch's work units.
// tma_store 1 when the kernel was built with the fp32 TMA epilogue: used when c is null or c == d
//           and d allows it (16-byte aligned, ldd % 4 == 0), else the kernel stores directly.
// Returns a CUresult (0 = success) or fg::FG_ERROR_*; nothing is launched when an argument is bad
// or a descriptor fails to encode (checked for every launch before the first one).
int fg_launch_sm90_fp8_k_grouped(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                                 const int32_t* ks, int num_groups, int64_t a_elems, int64_t b_elems, int sf_rows,
                                 int m, int n, int ldd, int sfa_ld, int sfb_ld, int block_m, int block_n,
                                 int num_multicast, int multicast_on_a, int tma_store, int grid, int smem_bytes,
                                 uint64_t stream) {
  if (fn == 0 || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr || ks == nullptr)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_groups < 1 || num_groups > kMaxTotalGroups || m <= 0 || n <= 0 || ldd < n)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  // D rows are uint32 in the kernel (g * m + row): the [G*m, n] view must stay below 2^31 rows.
  if (static_cast<int64_t>(num_groups) * m > INT32_MAX) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (sfa_ld % 4 != 0 || sfa_ld < m || sfb_ld % 4 != 0 || sfb_ld < n) return fg::FG_ERROR_INVALID_ARGUMENT;
  if ((block_m != 64 && block_m != 128 && block_m != 192) || block_n < 16 || block_n > 256 || block_n % 16 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_multicast != 1 && num_multicast != 2) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (grid <= 0 || grid % num_multicast != 0 || smem_bytes <= 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (reinterpret_cast<uintptr_t>(a) % 16 != 0 || reinterpret_cast<uintptr_t>(b) % 16 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;

  std::vector<int> order;
  std::vector<int64_t> k_offset;
  int64_t sum_k = 0;
  if (!order_groups(ks, num_groups, order, k_offset, sum_k)) return fg::FG_ERROR_INVALID_ARGUMENT;
  // The operands must hold exactly what ks describes: every descriptor below stays inside them.
  if (sum_k <= 0 || sum_k / kBlockK != sf_rows || a_elems != static_cast<int64_t>(m) * sum_k ||
      b_elems != static_cast<int64_t>(n) * sum_k)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  const bool mc_a = num_multicast == 2 && multicast_on_a != 0;
  const bool mc_b = num_multicast == 2 && multicast_on_a == 0;

  const fg::Driver& drv = fg::driver();
  if (!drv.ok) return fg::FG_ERROR_NO_DRIVER;

  CUtensorMap tmap_sfa, tmap_sfb;
  CUresult r = fg::make_tmap_2d(&tmap_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sfa, static_cast<uint64_t>(m),
                                static_cast<uint64_t>(sf_rows), static_cast<uint64_t>(sfa_ld) * 4u,
                                static_cast<uint32_t>(block_m), 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (r != CUDA_SUCCESS) return r;
  r = fg::make_tmap_2d(&tmap_sfb, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sfb, static_cast<uint64_t>(n),
                       static_cast<uint64_t>(sf_rows), static_cast<uint64_t>(sfb_ld) * 4u,
                       static_cast<uint32_t>(block_n), 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (r != CUDA_SUCCESS) return r;

  // Every launch's table is built (and every descriptor encoded) before the first launch, so a
  // failure leaves d untouched rather than half written.
  const int num_launches = static_cast<int>((static_cast<uint32_t>(num_groups) + kMaxSlots - 1) / kMaxSlots);
  std::vector<Sm90Fp8KGroupedParams> tables(static_cast<size_t>(num_launches));
  uint8_t* a8 = static_cast<uint8_t*>(a);
  uint8_t* b8 = static_cast<uint8_t*>(b);
  for (int l = 0; l < num_launches; ++l) {
    Sm90Fp8KGroupedParams& t = tables[l];
    std::memset(&t, 0, sizeof(t));
    const int first = l * static_cast<int>(kMaxSlots);
    const int count = std::min(static_cast<int>(kMaxSlots), num_groups - first);
    t.num_slots = static_cast<uint32_t>(count);
    for (int s = 0; s < count; ++s) {
      const int g = order[first + s];
      t.slot[s] = make_slot(ks, k_offset, g);
      if (ks[g] == 0) continue;  // no k-block: its maps are never used (left zero)
      const uint64_t kg = static_cast<uint64_t>(ks[g]);
      r = fg::make_tmap_2d(&t.tmap_a[s], CU_TENSOR_MAP_DATA_TYPE_UINT8, a8 + static_cast<uint64_t>(m) * k_offset[g],
                           kg, static_cast<uint64_t>(m), kg, kBlockK,
                           static_cast<uint32_t>(mc_a ? block_m / 2 : block_m), CU_TENSOR_MAP_SWIZZLE_128B);
      if (r != CUDA_SUCCESS) return r;
      r = fg::make_tmap_2d(&t.tmap_b[s], CU_TENSOR_MAP_DATA_TYPE_UINT8, b8 + static_cast<uint64_t>(n) * k_offset[g],
                           kg, static_cast<uint64_t>(n), kg, kBlockK,
                           static_cast<uint32_t>(mc_b ? block_n / 2 : block_n), CU_TENSOR_MAP_SWIZZLE_128B);
      if (r != CUDA_SUCCESS) return r;
    }
  }

  // float2 stores (and C loads) need an even N, an even row pitch and 8-byte aligned bases.
  bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % 8u == 0);
  if (c != nullptr) vec = vec && (reinterpret_cast<uintptr_t>(c) % 8u == 0);
  uint32_t flags = vec ? kFlagVectorStores : 0u;
  // TMA epilogue (kernels built with it): d as (n, m, groups), so a box never spills into the next
  // group's rows; a reduce-add when c is d, a store without c; otherwise direct stores.
  CUtensorMap tmap_d;
  std::memset(&tmap_d, 0, sizeof(tmap_d));
  if (tma_store != 0 && (c == nullptr || c == d)) {
    if (fg::make_fp32_epilogue_tmap(&tmap_d, d, m, n, ldd, num_groups, block_n, &r)) flags |= kFlagTmaStore;
    if (r != CUDA_SUCCESS) return r;
  }

  // CTAs one slot's tiles occupy (a cluster's super-tile may stick out of the tile grid: phantom).
  const int64_t mb = (m + block_m - 1) / block_m, nb = (n + block_n - 1) / block_n;
  const int64_t per_slot = mc_a ? mb * ((nb + 1) / 2) * 2 : (mc_b ? ((mb + 1) / 2) * 2 * nb : mb * nb);

  float* d_p = static_cast<float*>(d);
  const float* c_p = static_cast<const float*>(c);
  uint32_t um = static_cast<uint32_t>(m), un = static_cast<uint32_t>(n), uldd = static_cast<uint32_t>(ldd);
  const unsigned threads = static_cast<unsigned>((block_m / 64 + 1) * 128);
  for (int l = 0; l < num_launches; ++l) {
    // More CTAs than units would only start and exit (per_slot is a multiple of the cluster size).
    const int64_t units = per_slot * tables[l].num_slots;
    const unsigned g = static_cast<unsigned>(std::min<int64_t>(grid, units));
    void* params[] = {&tmap_sfa, &tmap_sfb, &d_p, &c_p, &um, &un, &uldd, &flags, &tables[l], &tmap_d};
    r = fg::launch(fg::as_function(fn), g, 1, 1, threads, 1, 1, static_cast<unsigned>(smem_bytes),
                   static_cast<unsigned>(num_multicast), fg::as_stream(stream), params, fg::pdl_enabled());
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
