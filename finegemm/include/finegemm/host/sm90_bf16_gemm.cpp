// Host launcher of the SM90 BF16 GEMM (impls/sm90_bf16_gemm.cuh), every layout, and of its m-grouped
// and k-grouped kinds.
// Encodes the TMA descriptors (A and B in their stored major order, D for the TMA-store
// epilogue) and launches the persistent kernel; every size comes from the caller
// (finegemm/ops/sm90_bf16_gemm.py). Dense and m-grouped launches can also be prepared once (fg_prepare_*:
// a heap Launch behind a handle) and launched with 4 arguments (as host/sm90_fp8_gemm.cpp).
#include "finegemm/host/common.h"
#include "finegemm/impls/fitted_box_rows.h"
#include "finegemm/scheduler/k_grouped_bf16_args.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fg {
int replace_tmap_address(CUtensorMap* tmap, void* address);  // host/common.cpp
}

namespace {

constexpr int kBf16BlockK = 64;              // mirrors Sm90Bf16GemmTraits::BLOCK_K
constexpr uint32_t kBf16FlagVectorStores = 1u;  // mirrors impls::kBf16Flag*
constexpr uint32_t kBf16FlagTmaStore = 2u;
constexpr uint32_t kBf16FlagOutFp32 = 4u;
constexpr uint32_t kBf16FlagHasC = 8u;
constexpr uint32_t kBf16FlagBGroup = 16u;

// TMA descriptor of one bf16 operand. K-major ([rows, K] storage): box (64 k, box_rows rows).
// MN-major ([K, rows] storage): box (64 rows, 64 k) with the 128-byte swizzle, the kernel issuing
// one box per 64 rows; a tile of 16 / 32 rows is one box of that width with the 32- / 64-byte
// swizzle (mirrors kBBoxCols in impls/sm90_bf16_gemm.cuh).
CUresult bf16_operand_tmap(CUtensorMap* tmap, void* ptr, bool mn_major, int rows, int k, int ld, int box_rows,
                           CUtensorMapL2promotion promotion) {
  if (mn_major) {
    const uint32_t box = box_rows < 64 ? static_cast<uint32_t>(box_rows) : 64u;
    const CUtensorMapSwizzle sw =
        box == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : (box == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B);
    return fg::make_tmap_2d(tmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, ptr, static_cast<uint64_t>(rows),
                            static_cast<uint64_t>(k), static_cast<uint64_t>(ld) * 2u, box, kBf16BlockK, sw,
                            promotion);
  }
  return fg::make_tmap_2d(tmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, ptr, static_cast<uint64_t>(k),
                          static_cast<uint64_t>(rows), static_cast<uint64_t>(ld) * 2u, kBf16BlockK,
                          static_cast<uint32_t>(box_rows), CU_TENSOR_MAP_SWIZZLE_128B, promotion);
}

// Everything one dense launch needs except the stream and the split-K buffers (tensor maps are
// passed by value, so a Launch may be freed once cuLaunchKernelEx returns).
struct Sm90Bf16Launch {
  CUtensorMap tmap_a, tmap_b, tmap_d;
  CUtensorMap tmap_a_last;  // the last m-block's A (impls/fitted_box_rows.h); the entry's last parameter
  void* d = nullptr;
  const float* c_p = nullptr;
  uint32_t m = 0, n = 0, k = 0, ldd = 0, flags = 0, num_splits = 1;
  CUfunction fn = nullptr;
  unsigned grid = 0, threads = 0, smem_bytes = 0;
  unsigned cluster = 1;  // CTAs per cluster: num_splits for a split cluster (fg::split_cluster_size), else 1
  bool split_in_cluster = false;  // the splits are the cluster: no workspace, no counters
  // Prepared by fg_prepare_sm90_bf16_gemm: every map starts at a, b or d, so
  // fg_rebind_prepared_sm90_bf16_gemm may re-point it.
  bool rebindable = false;
};

int launch_dense(const Sm90Bf16Launch& L, void* workspace, void* counters, uint64_t stream) {
  if (fg::split_buffers_missing(L.num_splits, L.split_in_cluster, workspace, counters))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  float* ws_p = static_cast<float*>(workspace);
  int* cnt_p = static_cast<int*>(counters);
  // cuLaunchKernelEx copies the values behind these pointers: L is only read.
  void* params[] = {const_cast<CUtensorMap*>(&L.tmap_a), const_cast<CUtensorMap*>(&L.tmap_b),
                    const_cast<CUtensorMap*>(&L.tmap_d), const_cast<void**>(&L.d),
                    const_cast<const float**>(&L.c_p), &ws_p, &cnt_p, const_cast<uint32_t*>(&L.m),
                    const_cast<uint32_t*>(&L.n), const_cast<uint32_t*>(&L.k), const_cast<uint32_t*>(&L.ldd),
                    const_cast<uint32_t*>(&L.flags), const_cast<uint32_t*>(&L.num_splits),
                    const_cast<CUtensorMap*>(&L.tmap_a_last)};
  return fg::launch(L.fn, L.grid, 1, 1, L.threads, 1, 1, L.smem_bytes, L.cluster, fg::as_stream(stream), params,
                    fg::pdl_enabled());
}

// Validates the arguments of fg_launch_sm90_bf16_gemm (documented there) and encodes L.
int encode_dense(Sm90Bf16Launch* L, uint64_t fn, void* a, void* b, void* d, void* c, int m, int n, int k, int lda,
                 int ldb, int ldd, int a_mn_major, int b_mn_major, int block_m, int block_n, int num_splits,
                 int out_fp32, int tma_store, int grid, int smem_bytes, int l2_promotion) {
  if (fn == 0 || a == nullptr || b == nullptr || d == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  // Bits 12-13 of the packed options: a 2-CTA multicast pair (kNumMulticast 2), and whether A is
  // its shared operand (kMulticastOnA; else B). The rest: fg::unpack_dense_options.
  const bool mc_pair = l2_promotion >= 0 && (l2_promotion & (1 << 12)) != 0;
  const bool mc_on_a = l2_promotion >= 0 && (l2_promotion & (1 << 13)) != 0;
  if (mc_on_a && !mc_pair) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (l2_promotion >= 0) l2_promotion &= ~(3 << 12);
  CUtensorMapL2promotion promo_a, promo_b;
  int b_group = 0;  // l2_promotion's bits 8-11 (fg::unpack_dense_options)
  if (!fg::unpack_dense_options(l2_promotion, &promo_a, &promo_b, &b_group)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (m <= 0 || n <= 0 || k <= 0 || k % 8 != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (lda % 8 != 0 || ldb % 8 != 0 || ldd < n) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (lda < (a_mn_major ? m : k) || ldb < (b_mn_major ? n : k)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if ((block_m != 64 && block_m != 128 && block_m != 256) || block_n < 16 || block_n > 256 || block_n % 16 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  // block_m 256 (four consumer warpgroups): no split-K, block_n <= 128 (the kernel's rule).
  if (block_m == 256 && (num_splits != 1 || block_n > 128)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (b_mn_major && block_n % 64 != 0 && block_n != 16 && block_n != 32) return fg::FG_ERROR_INVALID_ARGUMENT;
  const int num_kb = (k + kBf16BlockK - 1) / kBf16BlockK;
  if (num_splits < 1 || num_splits > num_kb) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_splits > 1 && tma_store != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (c != nullptr && out_fp32 == 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (grid <= 0 || smem_bytes <= 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  // B in boxes of b_group k-blocks (a kernel built with kBGroup): a K-major B.
  const bool b_grouped = b_group != 0;
  if (b_grouped && (b_mn_major != 0 || !fg::b_group_fits(b_group, static_cast<int64_t>(k) * 2, kBf16BlockK * 2, n,
                                                         num_splits)))
    return fg::FG_ERROR_INVALID_ARGUMENT;

  // Multicast pairs (the kernel's rule, heuristics.check_multicast): no split-K, an even grid, no
  // B groups on a shared B; each CTA loads half the shared operand: half of an MN-major operand's
  // 64-wide boxes (block % 128 == 0), or a K-major box of half the rows (whole 8-row atoms for
  // every block the checks above allow).
  if (mc_pair) {
    const bool shared_mn = mc_on_a ? a_mn_major != 0 : b_mn_major != 0;
    if (num_splits != 1 || grid % 2 != 0 || (!mc_on_a && b_grouped)) return fg::FG_ERROR_INVALID_ARGUMENT;
    if (shared_mn && (mc_on_a ? block_m : block_n) % 128 != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  }

  const fg::Driver& drv = fg::driver();
  if (!drv.ok) return fg::FG_ERROR_NO_DRIVER;

  // K-major A: the last m-block's box holds only its rows (impls/fitted_box_rows.h, as the kernel
  // counts); a second encode only where it differs from tmap_a's. A shared A keeps full boxes, each
  // CTA of the pair loading half of them (a K-major A: boxes of half the rows).
  const uint32_t um = static_cast<uint32_t>(m), ubm = static_cast<uint32_t>(block_m);
  const bool a_shared = mc_pair && mc_on_a;
  const int first_rows = static_cast<int>(finegemm::impls::first_a_box_rows(um, ubm, a_mn_major == 0, a_shared));
  const int last_rows = static_cast<int>(finegemm::impls::last_a_box_rows(um, ubm, a_mn_major == 0, a_shared));
  const int a_box_rows = a_shared && a_mn_major == 0 ? block_m / 2 : first_rows;
  CUresult r = bf16_operand_tmap(&L->tmap_a, a, a_mn_major != 0, m, k, lda, a_box_rows, promo_a);
  if (r != CUDA_SUCCESS) return r;
  if (last_rows == first_rows) {
    L->tmap_a_last = L->tmap_a;
  } else {
    r = bf16_operand_tmap(&L->tmap_a_last, a, false, m, k, lda, last_rows, promo_a);
    if (r != CUDA_SUCCESS) return r;
  }
  if (b_grouped) {
    r = fg::make_tmap_k_groups(&L->tmap_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, b, static_cast<uint64_t>(k),
                               static_cast<uint64_t>(n), static_cast<uint64_t>(ldb) * 2u,
                               static_cast<uint32_t>(block_n), static_cast<uint32_t>(b_group), promo_b);
  } else {
    const bool b_shared = mc_pair && !mc_on_a;
    r = bf16_operand_tmap(&L->tmap_b, b, b_mn_major != 0, n, k, ldb,
                          b_shared && b_mn_major == 0 ? block_n / 2 : block_n, promo_b);
  }
  if (r != CUDA_SUCCESS) return r;

  // Two-element vector stores (bf16x2 / float2) need an even N, an even row pitch and base
  // pointers aligned to the vector size.
  const uintptr_t vec_bytes = out_fp32 ? 8u : 4u;
  bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % vec_bytes == 0);
  if (c != nullptr) vec = vec && (reinterpret_cast<uintptr_t>(c) % 8u == 0);
  uint32_t flags = vec ? kBf16FlagVectorStores : 0u;
  if (out_fp32) flags |= kBf16FlagOutFp32;
  if (c != nullptr) flags |= kBf16FlagHasC;
  if (b_grouped) flags |= kBf16FlagBGroup;

  std::memset(&L->tmap_d, 0, sizeof(L->tmap_d));
  if (tma_store != 0 && out_fp32 == 0 && c == nullptr) {  // else (or where d's rows do not fit) direct stores
    r = fg::encode_bf16_store_if_fits(&L->tmap_d, &flags, kBf16FlagTmaStore, d, static_cast<uint64_t>(n),
                                      static_cast<uint64_t>(m), ldd, block_n);
    if (r != CUDA_SUCCESS) return r;
  }

  L->d = d;
  L->c_p = static_cast<const float*>(c);
  L->m = static_cast<uint32_t>(m), L->n = static_cast<uint32_t>(n), L->k = static_cast<uint32_t>(k);
  L->ldd = static_cast<uint32_t>(ldd), L->flags = flags, L->num_splits = static_cast<uint32_t>(num_splits);
  L->fn = fg::as_function(fn);
  L->grid = static_cast<unsigned>(grid);
  L->threads = static_cast<unsigned>((block_m / 64 + 1) * 128);
  L->smem_bytes = static_cast<unsigned>(smem_bytes);
  L->cluster = mc_pair ? 2u
                       : fg::split_cluster_size(L->fn, m, n, block_m, block_n, fg::kBf16ClusterSplitMaxN, num_splits,
                                                grid, static_cast<int>(L->threads), smem_bytes);
  L->split_in_cluster = !mc_pair && L->cluster > 1;
  // A split cluster stores a bf16 D (no C) per warp through TMA (16-row boxes; the kernel's
  // kSplitTmaStore, which ignores the flag where its staging does not fit).
  if (L->split_in_cluster && out_fp32 == 0 && c == nullptr && fg::split_tma_store_on()) {
    r = fg::encode_bf16_store_if_fits(&L->tmap_d, &L->flags, kBf16FlagTmaStore, d, static_cast<uint64_t>(n),
                                      static_cast<uint64_t>(m), ldd, block_n, 16);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

using finegemm::scheduler::Bf16KGroupedArgs;
using finegemm::scheduler::kBf16KGroupedMaxSlots;

// Group tables of a k-grouped call (see fg_sm90_bf16_k_grouped_tables). Returns the number of
// tables (launches), or -1 for bad ks.
int k_grouped_tables(const int32_t* ks, int num_groups, bool skip_empty, std::vector<Bf16KGroupedArgs>* tables,
                     int64_t* sum_k) {
  std::vector<uint32_t> kb_begin(static_cast<size_t>(num_groups));
  int64_t off = 0;
  for (int g = 0; g < num_groups; ++g) {
    if (ks[g] < 0 || ks[g] % kBf16BlockK != 0) return -1;
    kb_begin[g] = static_cast<uint32_t>(off / kBf16BlockK);
    off += ks[g];
    if (off > 0x7fffffff) return -1;  // TMA coordinates are int32
  }
  *sum_k = off;
  // Longest groups first (stable: equal sizes keep the group order): with the static
  // round-robin unit walk the last wave then holds the shortest tiles.
  std::vector<int> order;
  order.reserve(static_cast<size_t>(num_groups));
  for (int g = 0; g < num_groups; ++g)
    if (!(skip_empty && ks[g] == 0)) order.push_back(g);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return ks[x] > ks[y]; });
  tables->clear();
  for (size_t first = 0; first < order.size(); first += kBf16KGroupedMaxSlots) {
    Bf16KGroupedArgs t;
    std::memset(&t, 0, sizeof(t));
    const size_t count = std::min<size_t>(kBf16KGroupedMaxSlots, order.size() - first);
    t.num_slots = static_cast<uint32_t>(count);
    for (size_t s = 0; s < count; ++s) {
      const int g = order[first + s];
      t.group[s] = static_cast<uint32_t>(g);
      t.kb_begin[s] = kb_begin[g];
      t.num_kb[s] = static_cast<uint32_t>(ks[g] / kBf16BlockK);
    }
    tables->push_back(t);
  }
  return static_cast<int>(tables->size());
}

// Which host rebind may copy a prepared grouped launch (Sm90Bf16GroupedLaunch::rebindable).
constexpr int kBf16RebindNone = 0, kBf16RebindMasked = 1, kBf16RebindContiguous = 2;

// Everything one m-grouped launch needs except the stream (as Sm90Bf16Launch).
struct Sm90Bf16GroupedLaunch {
  CUtensorMap tmap_a, tmap_b, tmap_d;
  void* d = nullptr;
  const int* grouped = nullptr;
  uint32_t m = 0, n = 0, k = 0, ldd = 0, flags = 0, num_groups = 0;
  CUfunction fn = nullptr;
  unsigned grid = 0, threads = 0, smem_bytes = 0;
  // A contiguous kernel with the in-kernel layout check (kLayoutCheck): its three extra parameters
  // (scheduler/contiguous_layout_check.cuh).
  unsigned* layout_scratch = nullptr;
  int* layout_record = nullptr;
  uint32_t layout_info = 0;
  // A masked call prepared by fg_prepare_sm90_bf16_grouped, or a contiguous one by
  // fg_prepare_sm90_bf16_grouped_layout_checked: every map starts at a, b or d (each covers all
  // groups), so fg_rebind_prepared_sm90_bf16_masked / _contiguous may re-point it.
  int rebindable = kBf16RebindNone;
};

// Validates the arguments of fg_launch_sm90_bf16_grouped (documented there) and encodes L.
int encode_grouped(Sm90Bf16GroupedLaunch* L, uint64_t fn, void* a, void* b, void* d, void* grouped, int m, int n,
                   int k, int lda, int ldb, int ldd, int block_m, int block_n, int grid, int smem_bytes, int gemm_kind,
                   int num_groups, int l2_promotion, int b_mn_major, int64_t ldb_group) {
  if (fn == 0 || a == nullptr || b == nullptr || d == nullptr || grouped == nullptr)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (gemm_kind != 1 && gemm_kind != 2) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_groups < 1 || m <= 0 || n <= 0 || k <= 0 || k % 8 != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (b_mn_major != 0 && b_mn_major != 1) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (b_mn_major && (gemm_kind != 1 || block_n % 64 != 0 || ldb < n || ldb_group % 8 != 0 ||
                     ldb_group < static_cast<int64_t>(k) * ldb))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (lda % 8 != 0 || ldb % 8 != 0 || lda < k || (!b_mn_major && ldb < k) || ldd < n)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  // block_m 192 (three consumer warpgroups) is built for the masked kind only.
  if ((block_m != 64 && block_m != 128 && !(block_m == 192 && gemm_kind == 2)) || block_n < 16 || block_n > 256 ||
      block_n % 16 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (grid <= 0 || smem_bytes <= 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  CUtensorMapL2promotion promo_a, promo_b;
  if (!fg::unpack_l2_promotion(l2_promotion, &promo_a, &promo_b)) return fg::FG_ERROR_INVALID_ARGUMENT;

  const fg::Driver& drv = fg::driver();
  if (!drv.ok) return fg::FG_ERROR_NO_DRIVER;

  // Rows of the 2-D views the tensor maps cover.
  const int64_t rows_a = static_cast<int64_t>(m) * (gemm_kind == 2 ? num_groups : 1);
  const int64_t rows_b = static_cast<int64_t>(n) * num_groups;
  if (rows_a > 0x7fffffff || rows_b > 0x7fffffff) return fg::FG_ERROR_INVALID_ARGUMENT;
  CUresult r = bf16_operand_tmap(&L->tmap_a, a, false, static_cast<int>(rows_a), k, lda, block_m, promo_a);
  if (r != CUDA_SUCCESS) return r;
  if (b_mn_major) {
    // Box (64 n, 64 k, 1 group) with the 128-byte swizzle: the dense N-major B box (kBBoxCols).
    r = fg::make_tmap_3d(&L->tmap_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, b, static_cast<uint64_t>(n),
                         static_cast<uint64_t>(k), static_cast<uint64_t>(num_groups), static_cast<uint64_t>(ldb) * 2u,
                         static_cast<uint64_t>(ldb_group) * 2u, 64u, kBf16BlockK, CU_TENSOR_MAP_SWIZZLE_128B, promo_b);
  } else {
    r = bf16_operand_tmap(&L->tmap_b, b, false, static_cast<int>(rows_b), k, ldb, block_n, promo_b);
  }
  if (r != CUDA_SUCCESS) return r;

  const bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % 4u == 0);
  uint32_t flags = vec ? kBf16FlagVectorStores : 0u;

  std::memset(&L->tmap_d, 0, sizeof(L->tmap_d));
  r = fg::encode_bf16_store_if_fits(&L->tmap_d, &flags, kBf16FlagTmaStore, d, static_cast<uint64_t>(n),
                                    static_cast<uint64_t>(rows_a), ldd, block_n);  // else direct stores
  if (r != CUDA_SUCCESS) return r;

  L->d = d;
  L->grouped = static_cast<const int*>(grouped);
  L->m = static_cast<uint32_t>(m);
  L->n = static_cast<uint32_t>(n);
  L->k = static_cast<uint32_t>(k);
  L->ldd = static_cast<uint32_t>(ldd);
  L->flags = flags;
  L->num_groups = static_cast<uint32_t>(num_groups);
  L->fn = fg::as_function(fn);
  L->grid = static_cast<unsigned>(grid);
  L->threads = static_cast<unsigned>((block_m / 64 + 1) * 128);
  L->smem_bytes = static_cast<unsigned>(smem_bytes);
  return CUDA_SUCCESS;
}

int launch_grouped(const Sm90Bf16GroupedLaunch& L, uint64_t stream) {
  const float* c_p = nullptr;
  float* ws_p = nullptr;
  int* cnt_p = nullptr;
  uint32_t splits = 1u;
  // cuLaunchKernelEx copies the values behind these pointers: L is only read.
  void* params[] = {const_cast<CUtensorMap*>(&L.tmap_a), const_cast<CUtensorMap*>(&L.tmap_b),
                    const_cast<CUtensorMap*>(&L.tmap_d), const_cast<void**>(&L.d), &c_p, &ws_p, &cnt_p,
                    const_cast<uint32_t*>(&L.m), const_cast<uint32_t*>(&L.n), const_cast<uint32_t*>(&L.k),
                    const_cast<uint32_t*>(&L.ldd), const_cast<uint32_t*>(&L.flags), &splits,
                    const_cast<const int**>(&L.grouped), const_cast<uint32_t*>(&L.num_groups),
                    // kLayoutCheck entries only (the others have 15 parameters and never read these)
                    const_cast<unsigned**>(&L.layout_scratch), const_cast<int**>(&L.layout_record),
                    const_cast<uint32_t*>(&L.layout_info)};
  return fg::launch(L.fn, L.grid, 1, 1, L.threads, 1, 1, L.smem_bytes, 1, fg::as_stream(stream), params,
                    fg::pdl_enabled());
}

// The contiguous launch of a kernel built with the in-kernel layout check: encode_grouped (kind 1,
// `grouped` = the caller's plain grouped_layout), then the check's buffers.
int encode_grouped_layout_checked(Sm90Bf16GroupedLaunch* L, uint64_t fn, void* a, void* b, void* d, void* grouped,
                                  int m, int n, int k, int lda, int ldb, int ldd, int block_m, int block_n, int grid,
                                  int smem_bytes, int gemm_kind, int num_groups, int l2_promotion, int b_mn_major,
                                  int64_t ldb_group, void* layout_scratch, void* layout_record, int layout_info) {
  if (gemm_kind != 1 || layout_scratch == nullptr || layout_record == nullptr || layout_info < 0 ||
      (layout_info & 0xff) > 30)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  const int rc = encode_grouped(L, fn, a, b, d, grouped, m, n, k, lda, ldb, ldd, block_m, block_n, grid, smem_bytes,
                                gemm_kind, num_groups, l2_promotion, b_mn_major, ldb_group);
  if (rc != CUDA_SUCCESS) return rc;
  L->layout_scratch = static_cast<unsigned*>(layout_scratch);
  L->layout_record = static_cast<int*>(layout_record);
  L->layout_info = static_cast<uint32_t>(layout_info);
  return CUDA_SUCCESS;
}

// fg_rebind_prepared_sm90_bf16_masked / _contiguous: a prepared grouped launch of `kind` at pointers
// = (a, b, d, grouped), count 4, none null (grouped: masked_m, or the caller's grouped_layout; read
// on the GPU at every launch). A layout-checked launch keeps the check's scratch and record (the
// stream's, not the caller's).
int rebind_grouped(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out, int kind) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  if (handle == 0 || pointers == nullptr || count != 4) return fg::FG_ERROR_INVALID_ARGUMENT;
  const Sm90Bf16GroupedLaunch& P = *fg::prepared_from_handle<Sm90Bf16GroupedLaunch>(handle);
  void* a = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[0]));
  void* b = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[1]));
  void* d = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[2]));
  void* grouped = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[3]));
  if (P.rebindable != kind || a == nullptr || b == nullptr || d == nullptr || grouped == nullptr)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  Sm90Bf16GroupedLaunch* L = new Sm90Bf16GroupedLaunch(P);
  int rc = fg::replace_tmap_address(&L->tmap_a, a);
  if (rc == CUDA_SUCCESS) rc = fg::replace_tmap_address(&L->tmap_b, b);
  if (rc == CUDA_SUCCESS && (L->flags & kBf16FlagTmaStore) != 0) rc = fg::replace_tmap_address(&L->tmap_d, d);
  L->d = d;
  L->grouped = static_cast<const int*>(grouped);
  return fg::publish_prepared(L, rc, out);
}

}  // namespace

extern "C" {

// fn:         CUfunction of the kernel compiled for (block_m, block_n, stages, a_mn_major, b_mn_major, split_k, tma_store).
// a:          bf16, [m, k] row pitch lda elements (a_mn_major 0) or [k, m] row pitch lda (a_mn_major 1).
// b:          bf16, [n, k] row pitch ldb (b_mn_major 0) or [k, n] row pitch ldb (b_mn_major 1).
// d:          bf16 or fp32 (out_fp32) [m, n], row pitch ldd elements; c: fp32 like d, or null
//             (only with out_fp32; may equal d).
// workspace:  fp32, >= num_tiles * num_splits * block_m * block_n floats (split-K only, else null).
// counters:   int32, >= num_tiles, zero before the first call (the kernel leaves them zero).
// tma_store:  1 when the kernel was built with the TMA-store epilogue; the D tensor map is then
//             encoded when d allows it (bf16, no c, 16-byte aligned base, ldd % 8 == 0), else
//             the kernel stores directly.
// l2_promotion: bits 8-11 the kernel's B group (kBGroup 2 or 4, a K-major B; 0: none); bits 0-7
//            the L2 promotion of the A and B tensor maps, packed (fg::unpack_l2_promotion; 0x33:
//             256B for both).
// Pitches are in elements; lda * 2 and ldb * 2 must be multiples of 16 (TMA).
// Returns a CUresult (0 = success) or fg::FG_ERROR_*.
int fg_launch_sm90_bf16_gemm(uint64_t fn, void* a, void* b, void* d, void* c, void* workspace, void* counters,
                             int m, int n, int k, int lda, int ldb, int ldd, int a_mn_major, int b_mn_major,
                             int block_m, int block_n, int num_splits, int out_fp32, int tma_store, int grid,
                             int smem_bytes, int l2_promotion, uint64_t stream) {
  if (num_splits > 1 && (workspace == nullptr || counters == nullptr)) return fg::FG_ERROR_INVALID_ARGUMENT;
  Sm90Bf16Launch L;
  const int rc = encode_dense(&L, fn, a, b, d, c, m, n, k, lda, ldb, ldd, a_mn_major, b_mn_major, block_m, block_n,
                              num_splits, out_fp32, tma_store, grid, smem_bytes, l2_promotion);
  return rc != CUDA_SUCCESS ? rc : launch_dense(L, workspace, counters, stream);
}

// As fg_launch_sm90_bf16_gemm without (workspace, counters, stream): validates and encodes once;
// *out receives a handle for fg_launch_prepared_sm90_bf16_gemm (free it with
// fg_free_prepared_sm90_bf16_gemm). Nothing is allocated when an error is returned.
int fg_prepare_sm90_bf16_gemm(uint64_t* out, uint64_t fn, void* a, void* b, void* d, void* c, int m, int n, int k,
                              int lda, int ldb, int ldd, int a_mn_major, int b_mn_major, int block_m, int block_n,
                              int num_splits, int out_fp32, int tma_store, int grid, int smem_bytes,
                              int l2_promotion) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Bf16Launch* L = new Sm90Bf16Launch();
  const int rc = encode_dense(L, fn, a, b, d, c, m, n, k, lda, ldb, ldd, a_mn_major, b_mn_major, block_m, block_n,
                              num_splits, out_fp32, tma_store, grid, smem_bytes, l2_promotion);
  L->rebindable = true;
  return fg::publish_prepared(L, rc, out);
}

// A copy of a prepared dense call at other tensors' addresses (as fg_rebind_prepared_sm90_fp8_gemm):
// pointers = (a, b, d, c), count 4, c null exactly where the prepared call's is; the new tensors
// have the prepared ones' shapes, strides, dtypes and 16-byte alignment (the caller's guarantee).
int fg_rebind_prepared_sm90_bf16_gemm(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  if (handle == 0 || pointers == nullptr || count != 4) return fg::FG_ERROR_INVALID_ARGUMENT;
  const Sm90Bf16Launch& P = *fg::prepared_from_handle<Sm90Bf16Launch>(handle);
  void* a = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[0]));
  void* b = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[1]));
  void* d = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[2]));
  void* c = reinterpret_cast<void*>(static_cast<uintptr_t>(pointers[3]));
  if (!P.rebindable || a == nullptr || b == nullptr || d == nullptr || (c == nullptr) != (P.c_p == nullptr))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  Sm90Bf16Launch* L = new Sm90Bf16Launch(P);
  int rc = fg::replace_tmap_address(&L->tmap_a, a);
  if (rc == CUDA_SUCCESS) rc = fg::replace_tmap_address(&L->tmap_a_last, a);
  if (rc == CUDA_SUCCESS) rc = fg::replace_tmap_address(&L->tmap_b, b);
  if (rc == CUDA_SUCCESS && (L->flags & kBf16FlagTmaStore) != 0) rc = fg::replace_tmap_address(&L->tmap_d, d);
  L->d = d;
  L->c_p = static_cast<const float*>(c);
  return fg::publish_prepared(L, rc, out);
}

int fg_launch_prepared_sm90_bf16_gemm(uint64_t handle, void* workspace, void* counters, uint64_t stream) {
  if (handle == 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  return launch_dense(*fg::prepared_from_handle<Sm90Bf16Launch>(handle), workspace, counters, stream);
}

// CTAs per cluster of a prepared call: num_splits for a split cluster, else 1.
int fg_sm90_bf16_gemm_prepared_cluster(uint64_t handle) {
  if (handle == 0) return -1;
  return static_cast<int>(fg::prepared_from_handle<Sm90Bf16Launch>(handle)->cluster);
}

// Whether a prepared call needs the split-K workspace and counters (1) or not (0: no split-K, or
// a split cluster); -1 for a null handle.
int fg_sm90_bf16_gemm_prepared_split_buffers(uint64_t handle) {
  if (handle == 0) return -1;
  const Sm90Bf16Launch& L = *fg::prepared_from_handle<Sm90Bf16Launch>(handle);
  return fg::needs_split_buffers(L.num_splits, L.split_in_cluster) ? 1 : 0;
}

void fg_free_prepared_sm90_bf16_gemm(uint64_t handle) {
  delete fg::prepared_from_handle<Sm90Bf16Launch>(handle);
}

// M-grouped (MoE) launches of the same kernel family, K-major a, bf16 d, no c, no split-K
// (the kernel built with kGemmKind = gemm_kind, kBMnMajor = b_mn_major and the TMA-store epilogue).
// gemm_kind: 1 contiguous (a [m, k] all groups' rows stacked, b [num_groups * n, k], d [m, n],
//            grouped = int32 group id per row, -1 = padding row);
//            2 masked (m = Mmax: a [num_groups * m, k], b [num_groups * n, k], d [num_groups * m, n],
//            grouped = int32 masked_m [num_groups], read on the GPU). Mirrors scheduler::Bf16GemmKind.
// b_mn_major (contiguous only): b is [num_groups, k, n] instead, row pitch ldb (>= n) and group
// pitch ldb_group (>= k * ldb) in elements, both multiples of 8: a 3-D map (n, k, groups) whose
// box never crosses into the next group. ldb_group is ignored for a K-major b.
// Pitches in elements (lda, ldb multiples of 8). l2_promotion: the A and B maps' L2 promotion,
// packed as for fg_launch_sm90_bf16_gemm. Returns a CUresult (0 = success) or fg::FG_ERROR_*.
int fg_launch_sm90_bf16_grouped(uint64_t fn, void* a, void* b, void* d, void* grouped, int m, int n, int k,
                                int lda, int ldb, int ldd, int block_m, int block_n, int grid, int smem_bytes,
                                int gemm_kind, int num_groups, int l2_promotion, int b_mn_major,
                                int64_t ldb_group, uint64_t stream) {
  Sm90Bf16GroupedLaunch L;
  const int rc = encode_grouped(&L, fn, a, b, d, grouped, m, n, k, lda, ldb, ldd, block_m, block_n, grid, smem_bytes,
                                gemm_kind, num_groups, l2_promotion, b_mn_major, ldb_group);
  return rc != CUDA_SUCCESS ? rc : launch_grouped(L, stream);
}

// As fg_launch_sm90_bf16_grouped without the stream: validates and encodes once; *out receives a
// handle for fg_launch_prepared_sm90_bf16_grouped (free it with fg_free_prepared_sm90_bf16_grouped).
// Nothing is allocated when an error is returned. The grouped pointer is kept: a masked call's
// masked_m (or a contiguous call's ids) are read on the GPU at every launch.
int fg_prepare_sm90_bf16_grouped(uint64_t* out, uint64_t fn, void* a, void* b, void* d, void* grouped, int m, int n,
                                 int k, int lda, int ldb, int ldd, int block_m, int block_n, int grid, int smem_bytes,
                                 int gemm_kind, int num_groups, int l2_promotion, int b_mn_major, int64_t ldb_group) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Bf16GroupedLaunch* L = new Sm90Bf16GroupedLaunch();
  const int rc = encode_grouped(L, fn, a, b, d, grouped, m, n, k, lda, ldb, ldd, block_m, block_n, grid, smem_bytes,
                                gemm_kind, num_groups, l2_promotion, b_mn_major, ldb_group);
  L->rebindable = gemm_kind == 2 ? kBf16RebindMasked : kBf16RebindNone;
  return fg::publish_prepared(L, rc, out);
}

// A copy of a prepared masked call (fg_prepare_sm90_bf16_grouped, gemm_kind 2) at other tensors'
// addresses (as fg_rebind_prepared_sm90_bf16_gemm): pointers = (a, b, d, masked_m), count 4, none
// null; the new tensors have the prepared ones' shapes, strides, dtypes and 16-byte alignment (the
// caller's guarantee). *out receives a handle of its own (fg_free_prepared_sm90_bf16_grouped).
int fg_rebind_prepared_sm90_bf16_masked(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_grouped(handle, pointers, count, out, kBf16RebindMasked);
}

// The contiguous launch of a kernel built with the in-kernel layout check (kLayoutCheck):
// fg_launch_sm90_bf16_grouped's arguments with gemm_kind 1 and grouped = the caller's plain
// grouped_layout (any values: ids outside [0, num_groups) are padding), then layout_scratch (uint32
// [4 + num_groups], zero before the launch; left zero), layout_record (int32 [8], device-mapped host
// memory) and layout_info (the record's function index << 8 | log2 of the mk alignment).
int fg_launch_sm90_bf16_grouped_layout_checked(uint64_t fn, void* a, void* b, void* d, void* grouped, int m, int n,
                                               int k, int lda, int ldb, int ldd, int block_m, int block_n, int grid,
                                               int smem_bytes, int gemm_kind, int num_groups, int l2_promotion,
                                               int b_mn_major, int64_t ldb_group, void* layout_scratch,
                                               void* layout_record, int layout_info, uint64_t stream) {
  Sm90Bf16GroupedLaunch L;
  const int rc = encode_grouped_layout_checked(&L, fn, a, b, d, grouped, m, n, k, lda, ldb, ldd, block_m, block_n,
                                               grid, smem_bytes, gemm_kind, num_groups, l2_promotion, b_mn_major,
                                               ldb_group, layout_scratch, layout_record, layout_info);
  return rc != CUDA_SUCCESS ? rc : launch_grouped(L, stream);
}

// fg_prepare_sm90_bf16_grouped for fg_launch_sm90_bf16_grouped_layout_checked (the same handle
// functions; the scratch is the stream's: a prepared launch is kept per stream).
int fg_prepare_sm90_bf16_grouped_layout_checked(uint64_t* out, uint64_t fn, void* a, void* b, void* d, void* grouped,
                                                int m, int n, int k, int lda, int ldb, int ldd, int block_m,
                                                int block_n, int grid, int smem_bytes, int gemm_kind, int num_groups,
                                                int l2_promotion, int b_mn_major, int64_t ldb_group,
                                                void* layout_scratch, void* layout_record, int layout_info) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Bf16GroupedLaunch* L = new Sm90Bf16GroupedLaunch();
  L->rebindable = kBf16RebindContiguous;  // encode_grouped_layout_checked accepts gemm_kind 1 only
  return fg::publish_prepared(L, encode_grouped_layout_checked(L, fn, a, b, d, grouped, m, n, k, lda, ldb, ldd,
                                                               block_m, block_n, grid, smem_bytes, gemm_kind,
                                                               num_groups, l2_promotion, b_mn_major, ldb_group,
                                                               layout_scratch, layout_record, layout_info),
                              out);
}

// fg_rebind_prepared_sm90_bf16_masked for a launch prepared by
// fg_prepare_sm90_bf16_grouped_layout_checked: pointers = (a, b, d, grouped_layout), count 4, none null.
int fg_rebind_prepared_sm90_bf16_contiguous(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_grouped(handle, pointers, count, out, kBf16RebindContiguous);
}

// The prepared launch: (workspace, counters) are accepted for the families' common signature and
// must be null (no split-K in the grouped kinds).
int fg_launch_prepared_sm90_bf16_grouped(uint64_t handle, void* workspace, void* counters, uint64_t stream) {
  if (handle == 0 || workspace != nullptr || counters != nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  return launch_grouped(*fg::prepared_from_handle<Sm90Bf16GroupedLaunch>(handle), stream);
}

void fg_free_prepared_sm90_bf16_grouped(uint64_t handle) {
  delete fg::prepared_from_handle<Sm90Bf16GroupedLaunch>(handle);
}

// K-grouped launch (kind 3, MoE weight gradient) of the kernel built with kGemmKind = 3: tn layout,
// fp32 d, optional c, no split-K. D_g = C_g + A_g^T B_g for g < num_groups, A_g the ks[g] rows of
// group g in a (groups one after the other), B_g likewise.
// a:       bf16 [sum_k, m], row pitch lda elements (lda % 8 == 0, lda >= m);
// b:       bf16 [sum_k, n], row pitch ldb (ldb % 8 == 0, ldb >= n);
// d:       fp32 [num_groups * m, n], row pitch ldd >= n (group g's block = rows g*m ..);
// c:       null or fp32 like d (same pitch; may equal d: in-place accumulation, then empty groups
//          are skipped, d[g] = c[g] already);
// ks:      host int32 [num_groups], each >= 0 and a multiple of 64 (the kernel's BLOCK_K), sum = sum_k
//          (> 0); read during this call only (the table is copied into the kernel parameters).
// grid:    the most CTAs per launch (each launch uses min(grid, its tiles)).
// tma_store: 1 lets the kernel's fp32 TMA epilogue run (a TMA store, or with c == d a TMA
//          reduce-add into d) where it can: c null or c == d, d 16-byte aligned, ldd % 4 == 0;
//          otherwise (and with 0) the direct stores (+ c).
// Groups are sorted by decreasing k and split into launches of <= kBf16KGroupedMaxSlots groups (one
// launch for num_groups <= 256). *launches (may be null) receives the number of launches issued.
// Returns a CUresult (0 = success) or fg::FG_ERROR_*; nothing is launched when an argument is bad.
int fg_launch_sm90_bf16_k_grouped(uint64_t fn, void* a, void* b, void* d, void* c, const int32_t* ks, int num_groups,
                                  int m, int n, int sum_k, int lda, int ldb, int ldd, int block_m, int block_n,
                                  int grid, int smem_bytes, int tma_store, int* launches, uint64_t stream) {
  if (launches != nullptr) *launches = 0;
  if (fn == 0 || a == nullptr || b == nullptr || d == nullptr || ks == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_groups < 1 || m <= 0 || n <= 0 || sum_k <= 0 || sum_k % kBf16BlockK != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (lda % 8 != 0 || ldb % 8 != 0 || lda < m || ldb < n || ldd < n) return fg::FG_ERROR_INVALID_ARGUMENT;
  if ((block_m != 64 && block_m != 128) || block_n < 64 || block_n > 256 || block_n % 64 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (grid <= 0 || smem_bytes <= 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  // fp32 pointers; rows of the [num_groups * m, n] view are uint32 in the kernel.
  if (reinterpret_cast<uintptr_t>(d) % 4 != 0 || reinterpret_cast<uintptr_t>(c) % 4 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (static_cast<int64_t>(num_groups) * m > 0x7fffffff) return fg::FG_ERROR_INVALID_ARGUMENT;
  const int64_t tiles = static_cast<int64_t>((m + block_m - 1) / block_m) * ((n + block_n - 1) / block_n);
  if (tiles * kBf16KGroupedMaxSlots > 0x7fffffff) return fg::FG_ERROR_INVALID_ARGUMENT;  // uint32 unit index

  std::vector<Bf16KGroupedArgs> tables;
  int64_t total_k = 0;
  const bool in_place = c != nullptr && c == d;
  if (k_grouped_tables(ks, num_groups, in_place, &tables, &total_k) < 0 || total_k != sum_k)
    return fg::FG_ERROR_INVALID_ARGUMENT;

  const fg::Driver& drv = fg::driver();
  if (!drv.ok) return fg::FG_ERROR_NO_DRIVER;

  // One tensor map per operand over all groups: K is the outer dimension, so group g's k-blocks
  // are rows of the same map.
  CUtensorMap tmap_a, tmap_b;
  CUresult r = bf16_operand_tmap(&tmap_a, a, true, m, sum_k, lda, block_m,
                                 fg::tmap_l2_promotion(fg::TmapOperand::kA));
  if (r != CUDA_SUCCESS) return r;
  r = bf16_operand_tmap(&tmap_b, b, true, n, sum_k, ldb, block_n, fg::tmap_l2_promotion(fg::TmapOperand::kB));
  if (r != CUDA_SUCCESS) return r;

  bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % 8u == 0);
  if (c != nullptr) vec = vec && (reinterpret_cast<uintptr_t>(c) % 8u == 0);
  uint32_t flags = kBf16FlagOutFp32 | (vec ? kBf16FlagVectorStores : 0u) | (c != nullptr ? kBf16FlagHasC : 0u);
  // D as (N, M rows per group, groups): a box never writes into the next group's rows.
  CUtensorMap tmap_d;
  std::memset(&tmap_d, 0, sizeof(tmap_d));
  if (tma_store != 0 && (c == nullptr || c == d)) {
    if (fg::make_fp32_epilogue_tmap(&tmap_d, d, m, n, ldd, num_groups, block_n, &r)) flags |= kBf16FlagTmaStore;
    if (r != CUDA_SUCCESS) return r;
  }

  float* d_p = static_cast<float*>(d);
  const float* c_p = static_cast<const float*>(c);
  uint32_t um = static_cast<uint32_t>(m), un = static_cast<uint32_t>(n), uldd = static_cast<uint32_t>(ldd);
  const unsigned threads = static_cast<unsigned>((block_m / 64 + 1) * 128);
  for (Bf16KGroupedArgs& table : tables) {
    void* params[] = {&tmap_a, &tmap_b, &tmap_d, &d_p, &c_p, &um, &un, &uldd, &flags, &table};
    const int64_t units = tiles * table.num_slots;
    const unsigned ctas = static_cast<unsigned>(std::min<int64_t>(grid, units));
    r = fg::launch(fg::as_function(fn), ctas, 1, 1, threads, 1, 1, static_cast<unsigned>(smem_bytes), 1,
                   fg::as_stream(stream), params, fg::pdl_enabled());
    if (r != CUDA_SUCCESS) return r;
    if (launches != nullptr) ++*launches;
  }
  return CUDA_SUCCESS;
}

// The group tables fg_launch_sm90_bf16_k_grouped would pass (no driver needed; the CPU tests read
// them): writes up to max_tables Bf16KGroupedArgs structs to out (may be null with max_tables 0)
// and the number needed to *num_tables. skip_empty: drop empty groups (the in-place case).
// Returns 0, or fg::FG_ERROR_INVALID_ARGUMENT for bad ks or too small an output.
int fg_sm90_bf16_k_grouped_tables(const int32_t* ks, int num_groups, int skip_empty, void* out, int max_tables,
                                  int* num_tables) {
  if (ks == nullptr || num_tables == nullptr || num_groups < 1 || max_tables < 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  std::vector<Bf16KGroupedArgs> tables;
  int64_t total_k = 0;
  const int count = k_grouped_tables(ks, num_groups, skip_empty != 0, &tables, &total_k);
  if (count < 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  *num_tables = count;
  if (count > max_tables || (count > 0 && out == nullptr)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (count > 0) std::memcpy(out, tables.data(), tables.size() * sizeof(Bf16KGroupedArgs));
  return CUDA_SUCCESS;
}

// Layout of Bf16KGroupedArgs for the Python side: {sizeof, max slots, offsetof(group),
// offsetof(kb_begin), offsetof(num_kb)}.
void fg_sm90_bf16_k_grouped_layout(int* out5) {
  out5[0] = static_cast<int>(sizeof(Bf16KGroupedArgs));
  out5[1] = static_cast<int>(kBf16KGroupedMaxSlots);
  out5[2] = static_cast<int>(offsetof(Bf16KGroupedArgs, group));
  out5[3] = static_cast<int>(offsetof(Bf16KGroupedArgs, kb_begin));
  out5[4] = static_cast<int>(offsetof(Bf16KGroupedArgs, num_kb));
}

}  // extern "C"
