// Host launcher of the SM90 FP8 "1D2D" GEMM (impls/sm90_fp8_gemm_1d2d.cuh).
// Encodes the TMA descriptors (A, B, sfa, and D for the TMA-store epilogue) and launches the persistent kernel.
// Every size comes from the caller (finegemm/ops/sm90_fp8_gemm.py).
//
// Two ways in: fg_launch_sm90_fp8_gemm[_1d1d] encodes and launches in one call; fg_prepare_* encodes
// once into a heap-allocated Sm90Fp8Launch (the handle a cached Python call keeps), and
// fg_launch_prepared_sm90_fp8_gemm then only launches: the per-call cost is one 4-argument ctypes
// call and cuLaunchKernelEx, not ~30 converted arguments and 3-4 descriptor encodes.
#include "finegemm/host/common.h"
#include "finegemm/impls/fitted_box_rows.h"

#include <cstdint>
#include <cstring>

namespace fg {
int replace_tmap_address(CUtensorMap* tmap, void* address);  // host/common.cpp
}

namespace {

constexpr int kBlockK = 128;
// Widest tile of the lean main loop, which has the scale warp (impls kLeanLoop; heuristics
// MAX_BLOCK_N_LEAN_LOOP): the heads-packed kernel's sfa gather runs there.
constexpr int kMaxBlockNLeanLoop = 208;
constexpr uint32_t kFlagVectorStores = 1u;  // mirrors impls::kFlagVectorStores
constexpr uint32_t kFlagTmaStore = 2u;      // mirrors impls::kFlagTmaStore
constexpr uint32_t kFlagCPrefetchMap = 4u;  // mirrors impls::kFlagCPrefetchMap
constexpr uint32_t kFlagBGroup = 8u;        // mirrors impls::kFlagBGroup
// Which host rebind may copy a prepared launch (Sm90Fp8Launch::rebindable).
constexpr int kRebindNone = 0, kRebindDense = 1, kRebindMasked = 2, kRebindContiguous = 3, kRebindHeadsPacked = 4,
              kRebindHeadSplits = 5;


// Everything one launch needs except the stream and the split-K buffers. The tensor maps are
// passed by value (__grid_constant__), so a Launch may be freed as soon as cuLaunchKernelEx returns.
struct Sm90Fp8Launch {
  CUtensorMap tmap_a, tmap_b, tmap_sfa, tmap_d;
  union {  // the entry points' 18th parameter
    CUtensorMap tmap_sfb;     // recipe (1, 1, 128): the column scales
    CUtensorMap tmap_a_last;  // recipe (1, 128, 128): the last m-block's A (impls/fitted_box_rows.h)
  };
  const float* sfb_p = nullptr;
  void* d = nullptr;
  const float* c_p = nullptr;
  uint32_t m = 0, n = 0, k = 0, ldd = 0, flags = 0, num_splits = 1;
  const int* grouped_p = nullptr;
  uint32_t num_groups = 1;
  CUfunction fn = nullptr;
  // cluster: CTAs per cluster (2 for a multicast pair, num_splits for a split cluster, else 1);
  // split_in_cluster: the splits are the cluster and sum in its shared memory (a multicast pair
  // with split-K sums through the workspace: its cluster of 2 is not a split cluster).
  unsigned grid = 0, threads = 0, smem_bytes = 0, cluster = 1;
  bool split_in_cluster = false;
  // A kernel with the in-kernel layout check (m-grouped contiguous kind, kLayoutCheck): its three
  // extra parameters (scheduler/contiguous_layout_check.cuh).
  bool layout_check = false;
  unsigned* layout_scratch = nullptr;
  int* layout_record = nullptr;
  uint32_t layout_info = 0;
  // A kernel built with kHeadsPacked: sfa read in place ([m, G, Kb] at these element strides; its
  // four extra parameters) instead of through tmap_sfa.
  bool sfa_gather = false;
  const float* sfa_p = nullptr;
  uint32_t sfa_ld_m = 0, sfa_ld_g = 0, sfa_ld_k = 0;
  // A dense or m-grouped masked call prepared by fg_prepare_sm90_fp8_gemm, a contiguous one by
  // fg_prepare_sm90_fp8_gemm_layout_checked, fp8_einsum's by _heads_packed_gather, or
  // fp8_gemm_nt_skip_head_mid's by _head_splits: every map starts at a, b, sfa or d (a grouped
  // call's maps cover all groups from those bases, the head splits' D map all of d's columns; a
  // gathered sfa has no map, only its pointer), so fg_rebind_prepared_sm90_fp8_gemm / _masked /
  // _contiguous / _heads_packed / _head_splits may re-point it.
  int rebindable = kRebindNone;
};

int launch(const Sm90Fp8Launch& L, void* workspace, void* counters, uint64_t stream) {
  if (fg::split_buffers_missing(L.num_splits, L.split_in_cluster, workspace, counters))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  float* ws_p = static_cast<float*>(workspace);
  int* cnt_p = static_cast<int*>(counters);
  // cuLaunchKernelEx copies the values behind these pointers: L is only read.
  // The entry points have 18 parameters (the 18th: tmap_a_last for 1D2D, tmap_sfb for 1D1D), 21
  // with the in-kernel layout check (its scratch, record and info), 22 with the heads packed
  // (sfa's pointer and three strides); cuLaunchKernelEx reads as many as the kernel has.
  const bool g = L.sfa_gather;
  void* params[22] = {const_cast<CUtensorMap*>(&L.tmap_a), const_cast<CUtensorMap*>(&L.tmap_b),
                      const_cast<CUtensorMap*>(&L.tmap_sfa), const_cast<CUtensorMap*>(&L.tmap_d),
                      const_cast<const float**>(&L.sfb_p), const_cast<void**>(&L.d),
                      const_cast<const float**>(&L.c_p), &ws_p, &cnt_p,
                      const_cast<uint32_t*>(&L.m), const_cast<uint32_t*>(&L.n), const_cast<uint32_t*>(&L.k),
                      const_cast<uint32_t*>(&L.ldd), const_cast<uint32_t*>(&L.flags),
                      const_cast<uint32_t*>(&L.num_splits), const_cast<const int**>(&L.grouped_p),
                      const_cast<uint32_t*>(&L.num_groups), const_cast<CUtensorMap*>(&L.tmap_sfb),
                      g ? static_cast<void*>(const_cast<const float**>(&L.sfa_p))
                        : static_cast<void*>(const_cast<unsigned**>(&L.layout_scratch)),
                      g ? static_cast<void*>(const_cast<uint32_t*>(&L.sfa_ld_m))
                        : static_cast<void*>(const_cast<int**>(&L.layout_record)),
                      g ? const_cast<uint32_t*>(&L.sfa_ld_g) : const_cast<uint32_t*>(&L.layout_info),
                      const_cast<uint32_t*>(&L.sfa_ld_k)};
  return fg::launch(L.fn, L.grid, 1, 1, L.threads, 1, 1, L.smem_bytes, L.cluster, fg::as_stream(stream), params,
                    fg::pdl_enabled());
}

// Validates the arguments of fg_launch_sm90_fp8_gemm (documented there) and encodes L. sfa_gather
// (encode_heads_packed's masked call on a kernel built with kSfaGather): sfa is read in place
// (sfa_ld is not checked here, tmap_sfa is zeros) and `grouped` may be null (every group is full:
// that kernel never reads masked_m).
int encode_1d2d(Sm90Fp8Launch* L, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c, int m,
                int n, int k, int lda, int ldb, int ldd, int sfa_ld, int block_m, int block_n, int num_splits,
                int num_multicast, int multicast_on_a, int out_fp32, int tma_store, int grid, int smem_bytes,
                int gemm_kind, void* grouped, int num_groups, int l2_promotion, bool sfa_gather = false) {
  if (fn == 0 || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  CUtensorMapL2promotion promo_a, promo_b;
  int b_group = 0;  // l2_promotion's bits 8-11 (fg::unpack_dense_options)
  if (!fg::unpack_dense_options(l2_promotion, &promo_a, &promo_b, &b_group)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (gemm_kind < 0 || gemm_kind > 2) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (gemm_kind != 0 && ((grouped == nullptr && !sfa_gather) || num_groups < 1 || num_splits != 1 || c != nullptr ||
                         out_fp32 != 0 || (num_multicast == 2 && multicast_on_a == 0)))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (gemm_kind == 0) num_groups = 1;
  // Rows of the 2-D views the tensor maps cover.
  const uint64_t rows_a = static_cast<uint64_t>(m) * (gemm_kind == 2 ? num_groups : 1);
  const uint64_t rows_b = static_cast<uint64_t>(n) * (gemm_kind != 0 ? num_groups : 1);
  if (m <= 0 || n <= 0 || k <= 0 || k % 16 != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (lda % 16 != 0 || ldb % 16 != 0 || lda < k || ldb < k || ldd < n) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (!sfa_gather && (sfa_ld % 4 != 0 || sfa_ld < m)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if ((block_m != 64 && block_m != 128 && block_m != 192) || block_n < 16 || block_n > 256 || block_n % 16 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  const int num_kb = (k + kBlockK - 1) / kBlockK;
  if (num_splits < 1 || num_splits > num_kb) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (grid <= 0 || smem_bytes <= 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_multicast != 1 && num_multicast != 2) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_multicast == 2 && grid % 2 != 0) return fg::FG_ERROR_INVALID_ARGUMENT;  // split-K: workspace path
  const bool mc_a = num_multicast == 2 && multicast_on_a != 0;
  const bool mc_b = num_multicast == 2 && multicast_on_a == 0;
  // B in boxes of b_group k-blocks (a kernel built with kBGroup): the dense kind, B not multicast.
  const bool b_grouped = b_group != 0;
  if (b_grouped && (gemm_kind != 0 || mc_b || sfa_gather || !fg::b_group_fits(b_group, k, kBlockK, n, num_splits)))
    return fg::FG_ERROR_INVALID_ARGUMENT;

  // The TMA-store epilogue exists only for bf16 d without c and without split-K.
  if (tma_store != 0 && (out_fp32 != 0 || c != nullptr || num_splits != 1)) return fg::FG_ERROR_INVALID_ARGUMENT;

  const fg::Driver& drv = fg::driver();
  if (!drv.ok) return fg::FG_ERROR_NO_DRIVER;

  // The last m-block's A box holds only its rows, and the sfa box has tmap_a's rows (fitted where
  // there is one m-block; impls/fitted_box_rows.h, as the kernel counts); a second A encode only
  // where the boxes differ (never with A multicast, which keeps full boxes).
  const uint32_t um = static_cast<uint32_t>(m), ubm = static_cast<uint32_t>(block_m);
  const uint32_t first_rows = finegemm::impls::first_a_box_rows(um, ubm, gemm_kind == 0, mc_a);
  const uint32_t last_rows = finegemm::impls::last_a_box_rows(um, ubm, gemm_kind == 0, mc_a);
  CUresult r = fg::make_tmap_2d(&L->tmap_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, static_cast<uint64_t>(k),
                                rows_a, static_cast<uint64_t>(lda), kBlockK,
                                static_cast<uint32_t>(mc_a ? block_m / 2 : first_rows), CU_TENSOR_MAP_SWIZZLE_128B,
                                promo_a);
  if (r != CUDA_SUCCESS) return r;
  if (last_rows == first_rows) {
    L->tmap_a_last = L->tmap_a;
  } else {
    r = fg::make_tmap_2d(&L->tmap_a_last, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, static_cast<uint64_t>(k), rows_a,
                         static_cast<uint64_t>(lda), kBlockK, last_rows, CU_TENSOR_MAP_SWIZZLE_128B, promo_a);
    if (r != CUDA_SUCCESS) return r;
  }
  if (b_grouped) {
    r = fg::make_tmap_k_groups(&L->tmap_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, b, static_cast<uint64_t>(k), rows_b,
                               static_cast<uint64_t>(ldb), static_cast<uint32_t>(block_n),
                               static_cast<uint32_t>(b_group), promo_b);
  } else {
    r = fg::make_tmap_2d(&L->tmap_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, b, static_cast<uint64_t>(k),
                         rows_b, static_cast<uint64_t>(ldb), kBlockK,
                         static_cast<uint32_t>(mc_b ? block_n / 2 : block_n), CU_TENSOR_MAP_SWIZZLE_128B,
                         promo_b);
  }
  if (r != CUDA_SUCCESS) return r;
  if (!sfa_gather) {
    r = fg::make_tmap_2d(&L->tmap_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sfa, static_cast<uint64_t>(m),
                         static_cast<uint64_t>(num_kb) * (gemm_kind == 2 ? num_groups : 1),
                         static_cast<uint64_t>(sfa_ld) * 4u, first_rows, 1, CU_TENSOR_MAP_SWIZZLE_NONE);
    if (r != CUDA_SUCCESS) return r;
  } else {
    std::memset(&L->tmap_sfa, 0, sizeof(L->tmap_sfa));
  }

  // Two-element vector stores (bf16x2 / float2) need an even N, an even row stride and base
  // pointers aligned to the vector size.
  const uintptr_t vec_bytes = out_fp32 ? 8u : 4u;
  bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % vec_bytes == 0);
  if (c != nullptr) vec = vec && (reinterpret_cast<uintptr_t>(c) % 8u == 0);
  uint32_t flags = (vec ? kFlagVectorStores : 0u) | (b_grouped ? kFlagBGroup : 0u);

  std::memset(&L->tmap_d, 0, sizeof(L->tmap_d));
  if (tma_store != 0) {  // else (or where d's rows do not fit a TMA store) direct stores
    r = fg::encode_bf16_store_if_fits(&L->tmap_d, &flags, kFlagTmaStore, d, static_cast<uint64_t>(n), rows_a, ldd,
                                      block_n);
    if (r != CUDA_SUCCESS) return r;
  }

  L->sfb_p = static_cast<const float*>(sfb);
  L->d = d;
  L->c_p = static_cast<const float*>(c);
  L->m = static_cast<uint32_t>(m), L->n = static_cast<uint32_t>(n), L->k = static_cast<uint32_t>(k);
  L->ldd = static_cast<uint32_t>(ldd), L->flags = flags, L->num_splits = static_cast<uint32_t>(num_splits);
  L->grouped_p = static_cast<const int*>(grouped);
  L->num_groups = static_cast<uint32_t>(num_groups);
  L->fn = fg::as_function(fn);
  L->grid = static_cast<unsigned>(grid);
  L->threads = static_cast<unsigned>((block_m / 64 + 1) * 128);
  L->smem_bytes = static_cast<unsigned>(smem_bytes);
  L->cluster = static_cast<unsigned>(num_multicast);
  L->split_in_cluster = false;
  if (gemm_kind == 0 && num_multicast == 1) {
    L->cluster = fg::split_cluster_size(L->fn, m, n, block_m, block_n, fg::fp8_cluster_split_max_n(block_m),
                                        num_splits, grid, static_cast<int>(L->threads), smem_bytes);
    L->split_in_cluster = L->cluster > 1;
    if (L->split_in_cluster && out_fp32 == 0 && c == nullptr && fg::split_tma_store_on()) {
      r = fg::encode_bf16_store_if_fits(&L->tmap_d, &L->flags, kFlagTmaStore, d, static_cast<uint64_t>(n), rows_a,
                                        ldd, block_n, 16);
      if (r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

// Validates the arguments of fg_launch_sm90_fp8_gemm_1d1d (documented there) and encodes L.
int encode_1d1d(Sm90Fp8Launch* L, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c, int m,
                int n, int k, int lda, int ldb, int ldd, int sfa_ld, int sfb_ld, int block_m, int block_n,
                int num_splits, int num_multicast, int multicast_on_a, int tma_store, int grid, int smem_bytes) {
  if (fn == 0 || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (m <= 0 || n <= 0 || k <= 0 || k % 16 != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (lda % 16 != 0 || ldb % 16 != 0 || lda < k || ldb < k || ldd < n) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (sfa_ld % 4 != 0 || sfa_ld < m || sfb_ld % 4 != 0 || sfb_ld < n) return fg::FG_ERROR_INVALID_ARGUMENT;
  if ((block_m != 64 && block_m != 128 && block_m != 192) || block_n < 16 || block_n > 256 || block_n % 16 != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  const int num_kb = (k + kBlockK - 1) / kBlockK;
  if (num_splits < 1 || num_splits > num_kb) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (grid <= 0 || smem_bytes <= 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_multicast != 1 && num_multicast != 2) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (num_multicast == 2 && (grid % 2 != 0 || num_splits != 1)) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (tma_store != 0 && num_splits != 1) return fg::FG_ERROR_INVALID_ARGUMENT;
  const bool mc_a = num_multicast == 2 && multicast_on_a != 0;
  const bool mc_b = num_multicast == 2 && multicast_on_a == 0;

  const fg::Driver& drv = fg::driver();
  if (!drv.ok) return fg::FG_ERROR_NO_DRIVER;

  CUresult r = fg::make_tmap_2d(&L->tmap_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, static_cast<uint64_t>(k),
                                static_cast<uint64_t>(m), static_cast<uint64_t>(lda), kBlockK,
                                static_cast<uint32_t>(mc_a ? block_m / 2 : block_m), CU_TENSOR_MAP_SWIZZLE_128B,
                                fg::tmap_l2_promotion(fg::TmapOperand::kA));
  if (r != CUDA_SUCCESS) return r;
  r = fg::make_tmap_2d(&L->tmap_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, b, static_cast<uint64_t>(k),
                       static_cast<uint64_t>(n), static_cast<uint64_t>(ldb), kBlockK,
                       static_cast<uint32_t>(mc_b ? block_n / 2 : block_n), CU_TENSOR_MAP_SWIZZLE_128B,
                       fg::tmap_l2_promotion(fg::TmapOperand::kB));
  if (r != CUDA_SUCCESS) return r;
  r = fg::make_tmap_2d(&L->tmap_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sfa, static_cast<uint64_t>(m),
                       static_cast<uint64_t>(num_kb), static_cast<uint64_t>(sfa_ld) * 4u,
                       static_cast<uint32_t>(block_m), 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (r != CUDA_SUCCESS) return r;
  r = fg::make_tmap_2d(&L->tmap_sfb, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sfb, static_cast<uint64_t>(n),
                       static_cast<uint64_t>(num_kb), static_cast<uint64_t>(sfb_ld) * 4u,
                       static_cast<uint32_t>(block_n), 1, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (r != CUDA_SUCCESS) return r;

  // float2 stores (and C loads) need an even N, an even row stride and 8-byte aligned bases.
  bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % 8u == 0);
  if (c != nullptr) vec = vec && (reinterpret_cast<uintptr_t>(c) % 8u == 0);
  uint32_t flags = vec ? kFlagVectorStores : 0u;
  // TMA epilogue: a reduce-add into d stands for "d = c + ..." only when c is d; with another c
  // (or a d TMA cannot address) the kernel keeps its direct epilogue.
  std::memset(&L->tmap_d, 0, sizeof(L->tmap_d));
  if (tma_store != 0 && (c == nullptr || c == d)) {
    if (fg::make_fp32_epilogue_tmap(&L->tmap_d, d, m, n, ldd, 1, block_n, &r)) flags |= kFlagTmaStore;
    if (r != CUDA_SUCCESS) return r;
  }
  // Direct stores with C: the same map over C (row pitch ldd) serves only the producer's L2
  // prefetch of each tile's C boxes. A hint: a C the map cannot describe just goes without it.
  if ((flags & kFlagTmaStore) == 0 && c != nullptr) {
    CUresult map_r = CUDA_SUCCESS;
    if (fg::make_fp32_epilogue_tmap(&L->tmap_d, const_cast<void*>(c), m, n, ldd, 1, block_n, &map_r)) {
      flags |= kFlagCPrefetchMap;
    } else {
      std::memset(&L->tmap_d, 0, sizeof(L->tmap_d));
    }
  }

  L->sfb_p = nullptr;  // the kernel reads sfb through tmap_sfb
  L->d = d;
  L->c_p = static_cast<const float*>(c);
  L->m = static_cast<uint32_t>(m), L->n = static_cast<uint32_t>(n), L->k = static_cast<uint32_t>(k);
  L->ldd = static_cast<uint32_t>(ldd), L->flags = flags;
  L->num_splits = static_cast<uint32_t>(num_splits);
  L->grouped_p = nullptr;
  L->num_groups = 1;
  L->fn = fg::as_function(fn);
  L->grid = static_cast<unsigned>(grid);
  L->threads = static_cast<unsigned>((block_m / 64 + 1) * 128);
  L->smem_bytes = static_cast<unsigned>(smem_bytes);
  L->cluster = static_cast<unsigned>(num_multicast);
  L->split_in_cluster = false;  // recipe (1, 1, 128) sums its splits through the workspace
  return CUDA_SUCCESS;
}

// fp8_gemm_nt_skip_head_mid's fused epilogue (a kernel built with head splits (left, mid, right),
// epilogue::TmaStoreBf16): encode_1d2d for a dense bf16 call on the TMA-store tile, then D's map
// re-encoded over D's full width d_cols = n + (n / (left + right)) * mid. That kernel stores only
// through the map (its direct stores would not know the gap), so a d the map cannot take (base or
// pitch off 16 bytes) is refused here, never launched.
int encode_head_splits(Sm90Fp8Launch* L, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                       int m, int n, int k, int lda, int ldb, int ldd, int sfa_ld, int block_m, int block_n,
                       int num_splits, int num_multicast, int multicast_on_a, int out_fp32, int tma_store, int grid,
                       int smem_bytes, int gemm_kind, void* grouped, int num_groups, int l2_promotion, int d_cols,
                       int left, int mid, int right) {
  if (mid <= 0 || left < 0 || right < 0 || left + right <= 0 || n <= 0 || n % (left + right) != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (static_cast<int64_t>(d_cols) != static_cast<int64_t>(n) + static_cast<int64_t>(n / (left + right)) * mid ||
      ldd < d_cols)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (c != nullptr || out_fp32 != 0 || tma_store == 0 || num_splits != 1 || gemm_kind != 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  const int box_cols = fg::bf16_store_swizzle_bytes(block_n) / 2;
  if (left % box_cols != 0 || right % box_cols != 0) return fg::FG_ERROR_INVALID_ARGUMENT;  // a box per side
  const int rc = encode_1d2d(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                             num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                             gemm_kind, grouped, num_groups, l2_promotion);
  if (rc != CUDA_SUCCESS) return rc;
  if ((L->flags & kFlagTmaStore) == 0 || !fg::tma_store_fits(d, d_cols, ldd, 2)) return fg::FG_ERROR_INVALID_ARGUMENT;
  return fg::make_bf16_store_tmap(&L->tmap_d, d, static_cast<uint64_t>(d_cols), static_cast<uint64_t>(m), ldd,
                                  block_n);
}

// fp8_einsum's masked launch with the heads packed along K and N (a kernel built with
// kHeadsPacked): encode_1d2d for a masked bf16 call (gemm_kind 2, m = rows per group, direct
// stores), then A's map re-encoded over [m, num_groups * k] (pitch lda): group g reads A columns
// g*k .. and the kernel stores D [m, num_groups * n] (pitch ldd) at columns g*n ... k % 128 == 0,
// so no k-box reaches the next group's columns. out_fp32: fp32 D, and then optionally C (fp32,
// D's pitch ldd, the same columns; c may be d). sfa_gather (a kernel built with kSfaGather): no sfa
// map; sfa is read in place, fp32 element (row, g, kb) at row * sfa_ld + g * sfa_ld_g + kb *
// sfa_ld_k (4-byte aligned, strides >= 0), block_m <= 128 and block_n <= 208 (the tiles with the
// sfa warp), `grouped` unused (may be null); with tma_store (bf16 D, n % block_n == 0, so no store
// box reaches the next group's columns) D is stored through a map over [m, num_groups * n], or
// directly where the map cannot take d (base or pitch off 16 bytes). Otherwise sfa through its map
// as encode_1d2d's, direct stores only.
int encode_heads_packed(Sm90Fp8Launch* L, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                        int m, int n, int k, int lda, int ldb, int ldd, int sfa_ld, int block_m, int block_n,
                        int num_splits, int num_multicast, int multicast_on_a, int out_fp32, int tma_store, int grid,
                        int smem_bytes, int gemm_kind, void* grouped, int num_groups, int l2_promotion,
                        bool sfa_gather, int sfa_ld_g, int sfa_ld_k) {
  if (gemm_kind != 2 || num_groups < 1 || k <= 0 || k % kBlockK != 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (tma_store != 0 && (!sfa_gather || out_fp32 != 0 || block_n <= 0 || n % block_n != 0))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (sfa_gather && (block_m > 128 || block_n > kMaxBlockNLeanLoop || sfa == nullptr ||
                     reinterpret_cast<uintptr_t>(sfa) % 4u != 0 || sfa_ld < 0 || sfa_ld_g < 0 || sfa_ld_k < 0))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  if (c != nullptr && out_fp32 == 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  const int64_t a_cols = static_cast<int64_t>(k) * num_groups, d_cols = static_cast<int64_t>(n) * num_groups;
  if (static_cast<int64_t>(lda) < a_cols || static_cast<int64_t>(ldd) < d_cols) return fg::FG_ERROR_INVALID_ARGUMENT;
  // encode_1d2d knows the masked kind as bf16 without C and direct stores: validate and encode that,
  // then set D's map (over [m, G*n], not the masked kind's [G*m, n]), D's type and C.
  const int rc = encode_1d2d(L, fn, a, b, sfa, sfb, d, nullptr, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                             num_splits, num_multicast, multicast_on_a, 0, 0, grid, smem_bytes,
                             gemm_kind, grouped, num_groups, l2_promotion, sfa_gather);
  if (rc != CUDA_SUCCESS) return rc;
  if (tma_store != 0) {  // else (or where d's rows do not fit a TMA store) direct stores
    const CUresult r = fg::encode_bf16_store_if_fits(&L->tmap_d, &L->flags, kFlagTmaStore, d,
                                                     static_cast<uint64_t>(d_cols), static_cast<uint64_t>(m), ldd,
                                                     block_n);
    if (r != CUDA_SUCCESS) return r;
  }
  if (sfa_gather) {
    L->sfa_gather = true;
    L->sfa_p = static_cast<const float*>(sfa);
    L->sfa_ld_m = static_cast<uint32_t>(sfa_ld);
    L->sfa_ld_g = static_cast<uint32_t>(sfa_ld_g);
    L->sfa_ld_k = static_cast<uint32_t>(sfa_ld_k);
  }
  if (out_fp32 != 0) {  // float2 stores (and C loads): even n and ldd, 8-byte aligned bases
    bool vec = (n % 2 == 0) && (ldd % 2 == 0) && (reinterpret_cast<uintptr_t>(d) % 8u == 0);
    if (c != nullptr) vec = vec && (reinterpret_cast<uintptr_t>(c) % 8u == 0);
    L->flags = vec ? kFlagVectorStores : 0u;
    L->c_p = static_cast<const float*>(c);
  }
  CUtensorMapL2promotion promo_a, promo_b;
  (void)fg::unpack_l2_promotion(l2_promotion, &promo_a, &promo_b);  // valid: encode_1d2d checked it
  const bool mc_a = num_multicast == 2 && multicast_on_a != 0;
  const CUresult r = fg::make_tmap_2d(&L->tmap_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, a, static_cast<uint64_t>(a_cols),
                                      static_cast<uint64_t>(m), static_cast<uint64_t>(lda), kBlockK,
                                      static_cast<uint32_t>(mc_a ? block_m / 2 : block_m), CU_TENSOR_MAP_SWIZZLE_128B,
                                      promo_a);
  if (r != CUDA_SUCCESS) return r;
  L->tmap_a_last = L->tmap_a;
  return CUDA_SUCCESS;
}

// The m-grouped contiguous launch of a kernel built with the in-kernel layout check: encode_1d2d
// (gemm_kind 1, `grouped` = the caller's plain grouped_layout), then the check's buffers.
int encode_layout_checked(Sm90Fp8Launch* L, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                          int m, int n, int k, int lda, int ldb, int ldd, int sfa_ld, int block_m, int block_n,
                          int num_splits, int num_multicast, int multicast_on_a, int out_fp32, int tma_store, int grid,
                          int smem_bytes, int gemm_kind, void* grouped, int num_groups, int l2_promotion,
                          void* layout_scratch, void* layout_record, int layout_info) {
  if (gemm_kind != 1 || layout_scratch == nullptr || layout_record == nullptr || layout_info < 0 ||
      (layout_info & 0xff) > 30)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  const int rc = encode_1d2d(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                             num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                             gemm_kind, grouped, num_groups, l2_promotion);
  if (rc != CUDA_SUCCESS) return rc;
  L->layout_check = true;
  L->layout_scratch = static_cast<unsigned*>(layout_scratch);
  L->layout_record = static_cast<int*>(layout_record);
  L->layout_info = static_cast<uint32_t>(layout_info);
  return CUDA_SUCCESS;
}

// A copy of a prepared launch at other tensors' addresses, for rebind_with_c / rebind_grouped
// (which check the pointers): each map (all start at a tensor's base) re-pointed with
// cuTensorMapReplaceAddress, the rest copied.
int rebind_copy(const Sm90Fp8Launch& P, void* a, void* b, void* sfa, void* sfb, void* d, void* c, void* grouped,
                uint64_t* out) {
  Sm90Fp8Launch* L = new Sm90Fp8Launch(P);
  int rc = fg::replace_tmap_address(&L->tmap_a, a);
  if (rc == CUDA_SUCCESS) rc = fg::replace_tmap_address(&L->tmap_a_last, a);
  if (rc == CUDA_SUCCESS) rc = fg::replace_tmap_address(&L->tmap_b, b);
  if (rc == CUDA_SUCCESS && !L->sfa_gather) rc = fg::replace_tmap_address(&L->tmap_sfa, sfa);
  if (L->sfa_gather) L->sfa_p = static_cast<const float*>(sfa);  // read in place: no map (zeroed)
  if (rc == CUDA_SUCCESS && (L->flags & kFlagTmaStore) != 0) rc = fg::replace_tmap_address(&L->tmap_d, d);
  L->sfb_p = static_cast<const float*>(sfb);
  L->d = d;
  L->c_p = static_cast<const float*>(c);
  L->grouped_p = static_cast<const int*>(grouped);
  return fg::publish_prepared(L, rc, out);
}

void* as_pointer(uint64_t address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }

// fg_rebind_prepared_sm90_fp8_gemm / _heads_packed / _head_splits: a prepared launch of `kind` at
// pointers = (a, b, sfa, sfb, d, c), count 6, c null exactly where the prepared call's is.
int rebind_with_c(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out, int kind) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  if (handle == 0 || pointers == nullptr || count != 6) return fg::FG_ERROR_INVALID_ARGUMENT;
  const Sm90Fp8Launch& P = *fg::prepared_from_handle<Sm90Fp8Launch>(handle);
  void *a = as_pointer(pointers[0]), *b = as_pointer(pointers[1]), *sfa = as_pointer(pointers[2]);
  void *sfb = as_pointer(pointers[3]), *d = as_pointer(pointers[4]), *c = as_pointer(pointers[5]);
  if (P.rebindable != kind || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr ||
      (c == nullptr) != (P.c_p == nullptr))
    return fg::FG_ERROR_INVALID_ARGUMENT;
  // grouped: a heads-packed launch's (null: every group full), a dense one's null.
  return rebind_copy(P, a, b, sfa, sfb, d, c, const_cast<int*>(P.grouped_p), out);
}

// fg_rebind_prepared_sm90_fp8_masked / _contiguous: a prepared m-grouped launch of `kind` at
// pointers = (a, b, sfa, sfb, d, c, grouped), count 7, c null, grouped not null (masked_m, or the
// caller's grouped_layout: read on the GPU at every launch).
int rebind_grouped(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out, int kind) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  if (handle == 0 || pointers == nullptr || count != 7) return fg::FG_ERROR_INVALID_ARGUMENT;
  const Sm90Fp8Launch& P = *fg::prepared_from_handle<Sm90Fp8Launch>(handle);
  void *a = as_pointer(pointers[0]), *b = as_pointer(pointers[1]), *sfa = as_pointer(pointers[2]);
  void *sfb = as_pointer(pointers[3]), *d = as_pointer(pointers[4]), *grouped = as_pointer(pointers[6]);
  if (P.rebindable != kind || a == nullptr || b == nullptr || sfa == nullptr || sfb == nullptr || d == nullptr ||
      pointers[5] != 0 || grouped == nullptr)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  return rebind_copy(P, a, b, sfa, sfb, d, nullptr, grouped, out);
}

}  // namespace

extern "C" {

// fn:        CUfunction (from fg_load_function) of the kernel compiled for (block_m, block_n, ...).
// a, b:      fp8 e4m3 [m, k] / [n, k], K-major, row strides lda / ldb bytes (multiples of 16).
// sfa:       fp32, element (kb, row) at kb * sfa_ld + row (MN-major, sfa_ld % 4 == 0).
// sfb:       fp32 [ceil(n/128), ceil(k/128)] contiguous.
// d:         bf16 or fp32 [m, n], row stride ldd elements; c: fp32 like d, or null.
// workspace: fp32, >= num_tiles * num_splits * block_m * block_n floats (split-K only, else null).
// counters:  int32, >= num_tiles, zero before the first call (the kernel leaves them zero).
// num_multicast: 1, or 2 for 2-CTA clusters sharing one operand through TMA multicast
//            (multicast_on_a: 1 = the pair shares A, 0 = it shares B); grid must then be even.
// out_fp32:  1 when d is fp32 (selects the vector-store alignment check).
// tma_store: 1 when the kernel was built with the TMA-store epilogue (bf16 d, no c, no split-K);
//            the D tensor map is encoded when d allows it (16-byte aligned base, ldd % 8 == 0),
//            else the kernel falls back to direct stores.
// gemm_kind: 0 normal; 1 m-grouped contiguous (a [m, k] all groups' rows, b [num_groups * n, k],
//            sfb [num_groups, ceil(n/128), ceil(k/128)], grouped = int32 group id per row, -1 =
//            padding); 2 m-grouped masked (m = Mmax: a [num_groups * m, k], d [num_groups * m, n],
//            sfa element (g, kb, row) at (g * ceil(k/128) + kb) * sfa_ld + row, grouped = int32
//            masked_m [num_groups], read on the GPU). Mirrors scheduler::GemmKind.
// l2_promotion: the L2 promotion of the A and B tensor maps, packed (fg::unpack_l2_promotion; 0x33:
//            256B for both); bits 8-11: the kernel's B group (kBGroup 2 or 4; 0: a kernel without).
// Returns a CUresult (0 = success) or fg::FG_ERROR_*.
int fg_launch_sm90_fp8_gemm(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                            void* workspace, void* counters, int m, int n, int k, int lda, int ldb,
                            int ldd, int sfa_ld, int block_m, int block_n, int num_splits, int num_multicast,
                            int multicast_on_a, int out_fp32, int tma_store, int grid, int smem_bytes,
                            int gemm_kind, void* grouped, int num_groups, int l2_promotion, uint64_t stream) {
  if (num_splits > 1 && (workspace == nullptr || counters == nullptr)) return fg::FG_ERROR_INVALID_ARGUMENT;
  Sm90Fp8Launch L;
  const int rc = encode_1d2d(&L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                             num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                             gemm_kind, grouped, num_groups, l2_promotion);
  return rc != CUDA_SUCCESS ? rc : launch(L, workspace, counters, stream);
}

// As fg_launch_sm90_fp8_gemm without the split-K buffers and the stream: validates and encodes
// once; *out receives a handle for fg_launch_prepared_sm90_fp8_gemm (free it with
// fg_free_prepared_sm90_fp8_gemm). Nothing is allocated when an error is returned.
int fg_prepare_sm90_fp8_gemm(uint64_t* out, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                             int m, int n, int k, int lda, int ldb, int ldd, int sfa_ld, int block_m, int block_n,
                             int num_splits, int num_multicast, int multicast_on_a, int out_fp32, int tma_store,
                             int grid, int smem_bytes, int gemm_kind, void* grouped, int num_groups,
                             int l2_promotion) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Fp8Launch* L = new Sm90Fp8Launch();
  const int rc = encode_1d2d(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                             num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                             gemm_kind, grouped, num_groups, l2_promotion);
  L->rebindable = gemm_kind == 0 ? kRebindDense : (gemm_kind == 2 ? kRebindMasked : kRebindNone);
  return fg::publish_prepared(L, rc, out);
}

// A copy of a prepared dense call (fg_prepare_sm90_fp8_gemm, gemm_kind 0) at other tensors'
// addresses: pointers = (a, b, sfa, sfb, d, c), count 6, c null exactly where the prepared call's
// is. The caller guarantees that the new tensors have the prepared ones' shapes, strides, dtypes
// and 16-byte alignment (api/_validate.MovedCalls): then every decision of the encoding (plan,
// boxes, cluster, vector / TMA stores) holds for them. *out receives a handle of its own
// (fg_free_prepared_sm90_fp8_gemm). Returns a CUresult or fg::FG_ERROR_*.
int fg_rebind_prepared_sm90_fp8_gemm(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_with_c(handle, pointers, count, out, kRebindDense);
}

// fg_rebind_prepared_sm90_fp8_gemm for a prepared m-grouped masked call (gemm_kind 2: its maps
// cover every group from a, b, sfa and d): pointers = (a, b, sfa, sfb, d, c, masked_m), count 7,
// c null, masked_m not null (read on the GPU at every launch).
int fg_rebind_prepared_sm90_fp8_masked(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_grouped(handle, pointers, count, out, kRebindMasked);
}

// fp8_gemm_nt_skip_head_mid's fused launch: fg_launch_sm90_fp8_gemm's arguments (a dense bf16 call
// without c and split-K, on a kernel built with these head splits and the TMA-store epilogue), then
// d_cols (d's width: n + (n / (left + right)) * mid, ldd >= d_cols) and the head splits (left, mid,
// right: mid > 0, left + right dividing n, left and right multiples of the store box's columns).
// d must take a TMA store (16-byte aligned base, ldd % 8 == 0, d_cols % 8 == 0).
int fg_launch_sm90_fp8_gemm_head_splits(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                                        void* workspace, void* counters, int m, int n, int k, int lda, int ldb,
                                        int ldd, int sfa_ld, int block_m, int block_n, int num_splits,
                                        int num_multicast, int multicast_on_a, int out_fp32, int tma_store, int grid,
                                        int smem_bytes, int gemm_kind, void* grouped, int num_groups,
                                        int l2_promotion, int d_cols, int left, int mid, int right, uint64_t stream) {
  Sm90Fp8Launch L;
  const int rc = encode_head_splits(&L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                                    num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                                    gemm_kind, grouped, num_groups, l2_promotion, d_cols, left, mid, right);
  return rc != CUDA_SUCCESS ? rc : launch(L, workspace, counters, stream);
}

// fg_prepare_sm90_fp8_gemm for fg_launch_sm90_fp8_gemm_head_splits (the same handle functions).
int fg_prepare_sm90_fp8_gemm_head_splits(uint64_t* out, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d,
                                         void* c, int m, int n, int k, int lda, int ldb, int ldd, int sfa_ld,
                                         int block_m, int block_n, int num_splits, int num_multicast,
                                         int multicast_on_a, int out_fp32, int tma_store, int grid, int smem_bytes,
                                         int gemm_kind, void* grouped, int num_groups, int l2_promotion, int d_cols,
                                         int left, int mid, int right) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Fp8Launch* L = new Sm90Fp8Launch();
  L->rebindable = kRebindHeadSplits;
  return fg::publish_prepared(L, encode_head_splits(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld,
                                                    block_m, block_n, num_splits, num_multicast, multicast_on_a,
                                                    out_fp32, tma_store, grid, smem_bytes, gemm_kind, grouped,
                                                    num_groups, l2_promotion, d_cols, left, mid, right),
                              out);
}

// fg_rebind_prepared_sm90_fp8_gemm for a launch prepared by fg_prepare_sm90_fp8_gemm_head_splits
// (fp8_gemm_nt_skip_head_mid): pointers = (a, b, sfa, sfb, d, c), count 6, c null; D's map re-pointed
// over the same d_cols columns.
int fg_rebind_prepared_sm90_fp8_head_splits(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_with_c(handle, pointers, count, out, kRebindHeadSplits);
}

// The m-grouped contiguous launch of a kernel built with the in-kernel layout check (kLayoutCheck):
// fg_launch_sm90_fp8_gemm's arguments with gemm_kind 1 and grouped = the caller's plain
// grouped_layout (int32 [m]; any values: the kernel takes ids outside [0, num_groups) as padding),
// then layout_scratch (uint32 [4 + num_groups], zero before the launch; the kernel leaves it zero),
// layout_record (int32 [8], device-mapped host memory: the first broken rule) and layout_info
// (the record's function index << 8 | log2 of the mk alignment).
int fg_launch_sm90_fp8_gemm_layout_checked(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                                           void* workspace, void* counters, int m, int n, int k, int lda, int ldb,
                                           int ldd, int sfa_ld, int block_m, int block_n, int num_splits,
                                           int num_multicast, int multicast_on_a, int out_fp32, int tma_store,
                                           int grid, int smem_bytes, int gemm_kind, void* grouped, int num_groups,
                                           int l2_promotion, void* layout_scratch, void* layout_record,
                                           int layout_info, uint64_t stream) {
  Sm90Fp8Launch L;
  const int rc = encode_layout_checked(&L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m,
                                       block_n, num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid,
                                       smem_bytes, gemm_kind, grouped, num_groups, l2_promotion, layout_scratch,
                                       layout_record, layout_info);
  return rc != CUDA_SUCCESS ? rc : launch(L, workspace, counters, stream);
}

// fg_prepare_sm90_fp8_gemm for fg_launch_sm90_fp8_gemm_layout_checked (the same handle functions;
// the scratch is the stream's: a prepared launch is kept per stream).
int fg_prepare_sm90_fp8_gemm_layout_checked(uint64_t* out, uint64_t fn, void* a, void* b, void* sfa, void* sfb,
                                            void* d, void* c, int m, int n, int k, int lda, int ldb, int ldd,
                                            int sfa_ld, int block_m, int block_n, int num_splits, int num_multicast,
                                            int multicast_on_a, int out_fp32, int tma_store, int grid, int smem_bytes,
                                            int gemm_kind, void* grouped, int num_groups, int l2_promotion,
                                            void* layout_scratch, void* layout_record, int layout_info) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Fp8Launch* L = new Sm90Fp8Launch();
  L->rebindable = kRebindContiguous;  // encode_layout_checked accepts gemm_kind 1 only
  return fg::publish_prepared(L, encode_layout_checked(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld,
                                                       block_m, block_n, num_splits, num_multicast, multicast_on_a,
                                                       out_fp32, tma_store, grid, smem_bytes, gemm_kind, grouped,
                                                       num_groups, l2_promotion, layout_scratch, layout_record,
                                                       layout_info),
                              out);
}

// fg_rebind_prepared_sm90_fp8_masked for a launch prepared by fg_prepare_sm90_fp8_gemm_layout_checked:
// pointers = (a, b, sfa, sfb, d, c, grouped_layout), count 7, c null, grouped_layout not null. The
// check's scratch and record are kept (the stream's, not the caller's).
int fg_rebind_prepared_sm90_fp8_contiguous(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_grouped(handle, pointers, count, out, kRebindContiguous);
}

// fp8_einsum "bhr,hdr->bhd" on a kernel built with kHeadsPacked: fg_launch_sm90_fp8_gemm's
// arguments for a masked call (gemm_kind 2, m = b, n = d, k = r per head, num_groups = h,
// tma_store 0) with a [m, num_groups * k] (pitch lda >= num_groups * k) and d [m, num_groups * n]
// (pitch ldd >= num_groups * n); k % 128 == 0; out_fp32 as the kernel, c (fp32 d only) with d's
// pitch (encode_heads_packed).
int fg_launch_sm90_fp8_gemm_heads_packed(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                                         void* workspace, void* counters, int m, int n, int k, int lda, int ldb,
                                         int ldd, int sfa_ld, int block_m, int block_n, int num_splits,
                                         int num_multicast, int multicast_on_a, int out_fp32, int tma_store, int grid,
                                         int smem_bytes, int gemm_kind, void* grouped, int num_groups,
                                         int l2_promotion, uint64_t stream) {
  Sm90Fp8Launch L;
  const int rc = encode_heads_packed(&L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                                     num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                                     gemm_kind, grouped, num_groups, l2_promotion, false, 0, 0);
  return rc != CUDA_SUCCESS ? rc : launch(L, workspace, counters, stream);
}

// The same on a kernel built with kSfaGather too: sfa fp32 [m, num_groups, ceil(k/128)] read in
// place, sfa_ld its row stride, then sfa_ld_g and sfa_ld_k (before the stream) its head and k-block
// strides, all in elements; block_m <= 128, block_n <= 208; grouped unused (may be null: every
// group has m rows); tma_store: bf16 d stored through its map (a kernel built with kTmaStore),
// n % block_n == 0.
int fg_launch_sm90_fp8_gemm_heads_packed_gather(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                                                void* workspace, void* counters, int m, int n, int k, int lda,
                                                int ldb, int ldd, int sfa_ld, int block_m, int block_n,
                                                int num_splits, int num_multicast, int multicast_on_a, int out_fp32,
                                                int tma_store, int grid, int smem_bytes, int gemm_kind, void* grouped,
                                                int num_groups, int l2_promotion, int sfa_ld_g, int sfa_ld_k,
                                                uint64_t stream) {
  Sm90Fp8Launch L;
  const int rc = encode_heads_packed(&L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, block_m, block_n,
                                     num_splits, num_multicast, multicast_on_a, out_fp32, tma_store, grid, smem_bytes,
                                     gemm_kind, grouped, num_groups, l2_promotion, true, sfa_ld_g, sfa_ld_k);
  return rc != CUDA_SUCCESS ? rc : launch(L, workspace, counters, stream);
}

// fg_prepare_sm90_fp8_gemm for fg_launch_sm90_fp8_gemm_heads_packed_gather (the same handle
// functions): every input is read in place, so a kept call re-launches the handle as it is.
int fg_prepare_sm90_fp8_gemm_heads_packed_gather(uint64_t* out, uint64_t fn, void* a, void* b, void* sfa, void* sfb,
                                                 void* d, void* c, int m, int n, int k, int lda, int ldb, int ldd,
                                                 int sfa_ld, int block_m, int block_n, int num_splits,
                                                 int num_multicast, int multicast_on_a, int out_fp32, int tma_store,
                                                 int grid, int smem_bytes, int gemm_kind, void* grouped,
                                                 int num_groups, int l2_promotion, int sfa_ld_g, int sfa_ld_k) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Fp8Launch* L = new Sm90Fp8Launch();
  L->rebindable = kRebindHeadsPacked;
  return fg::publish_prepared(L, encode_heads_packed(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld,
                                                     block_m, block_n, num_splits, num_multicast, multicast_on_a,
                                                     out_fp32, tma_store, grid, smem_bytes, gemm_kind, grouped,
                                                     num_groups, l2_promotion, true, sfa_ld_g, sfa_ld_k),
                              out);
}

// fg_rebind_prepared_sm90_fp8_gemm for a launch prepared by
// fg_prepare_sm90_fp8_gemm_heads_packed_gather (fp8_einsum): pointers = (a, b, sfa, sfb, d, c),
// count 6, c null exactly where the prepared call's is; sfa's pointer replaced (read in place).
int fg_rebind_prepared_sm90_fp8_heads_packed(uint64_t handle, const uint64_t* pointers, int count, uint64_t* out) {
  return rebind_with_c(handle, pointers, count, out, kRebindHeadsPacked);
}

// Recipe (1,1,128) ("1D1D", weight gradients) of the same kernel family (template flag k1D1D):
// dense kind, fp32 d, optional c (may be d), split-K or 2-CTA multicast as for the 1D2D launcher.
// Arguments as fg_launch_sm90_fp8_gemm, except:
// sfb:       fp32, element (kb, col) at kb * sfb_ld + col (MN-major [ceil(k/128), n], sfb_ld % 4 == 0),
//            read through a TMA descriptor (box block_n x 1) passed as the kernel's last parameter.
// tma_store: 1 when the kernel was built with the fp32 TMA epilogue (no split-K): used when c is
//            null (store) or c == d (reduce-add) and d allows it (16-byte aligned, ldd % 4 == 0).
int fg_launch_sm90_fp8_gemm_1d1d(uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d, void* c,
                                 void* workspace, void* counters, int m, int n, int k, int lda, int ldb,
                                 int ldd, int sfa_ld, int sfb_ld, int block_m, int block_n, int num_splits,
                                 int num_multicast, int multicast_on_a, int tma_store, int grid, int smem_bytes,
                                 uint64_t stream) {
  if (num_splits > 1 && (workspace == nullptr || counters == nullptr)) return fg::FG_ERROR_INVALID_ARGUMENT;
  Sm90Fp8Launch L;
  const int rc = encode_1d1d(&L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, sfb_ld, block_m,
                             block_n, num_splits, num_multicast, multicast_on_a, tma_store, grid, smem_bytes);
  return rc != CUDA_SUCCESS ? rc : launch(L, workspace, counters, stream);
}

// fg_prepare_sm90_fp8_gemm for recipe (1,1,128).
int fg_prepare_sm90_fp8_gemm_1d1d(uint64_t* out, uint64_t fn, void* a, void* b, void* sfa, void* sfb, void* d,
                                  void* c, int m, int n, int k, int lda, int ldb, int ldd, int sfa_ld, int sfb_ld,
                                  int block_m, int block_n, int num_splits, int num_multicast, int multicast_on_a,
                                  int tma_store, int grid, int smem_bytes) {
  if (out == nullptr) return fg::FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  Sm90Fp8Launch* L = new Sm90Fp8Launch();
  return fg::publish_prepared(L, encode_1d1d(L, fn, a, b, sfa, sfb, d, c, m, n, k, lda, ldb, ldd, sfa_ld, sfb_ld, block_m,
                                block_n, num_splits, num_multicast, multicast_on_a, tma_store, grid, smem_bytes),
                 out);
}

// The kernel flags a prepared call was encoded with (tests: whether the TMA epilogue is in use).
int fg_sm90_fp8_gemm_prepared_flags(uint64_t handle) {
  if (handle == 0) return -1;
  return static_cast<int>(fg::prepared_from_handle<Sm90Fp8Launch>(handle)->flags);
}

// CTAs per cluster of a prepared call: 2 with multicast, num_splits for a split cluster, else 1.
int fg_sm90_fp8_gemm_prepared_cluster(uint64_t handle) {
  if (handle == 0) return -1;
  return static_cast<int>(fg::prepared_from_handle<Sm90Fp8Launch>(handle)->cluster);
}

// Whether a prepared call needs the split-K workspace and counters (1) or not (0: no split-K, or
// a split cluster); -1 for a null handle.
int fg_sm90_fp8_gemm_prepared_split_buffers(uint64_t handle) {
  if (handle == 0) return -1;
  const Sm90Fp8Launch& L = *fg::prepared_from_handle<Sm90Fp8Launch>(handle);
  return fg::needs_split_buffers(L.num_splits, L.split_in_cluster) ? 1 : 0;
}

// Launch a prepared call on `stream` (workspace / counters: as fg_launch_sm90_fp8_gemm).
int fg_launch_prepared_sm90_fp8_gemm(uint64_t handle, void* workspace, void* counters, uint64_t stream) {
  if (handle == 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  return launch(*fg::prepared_from_handle<Sm90Fp8Launch>(handle), workspace, counters, stream);
}

void fg_free_prepared_sm90_fp8_gemm(uint64_t handle) {
  delete fg::prepared_from_handle<Sm90Fp8Launch>(handle);
}

}  // extern "C"
