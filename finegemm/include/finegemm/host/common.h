// finegemm host-side helpers shared by every kernel family's launcher (host/<family>.cpp).
//
// Header-only. The CUDA driver is reached through dlopen("libcuda.so.1") + dlsym, resolved once
// per process, so host.so has no link-time dependency on the driver and loads on machines
// without a GPU (every entry point then returns FG_ERROR_NO_DRIVER).
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace fg {

// Returned (as an int CUresult) when libcuda.so.1 or one of its symbols cannot be found.
constexpr int FG_ERROR_NO_DRIVER = 100000;
// Returned when an argument is rejected before the driver is called.
constexpr int FG_ERROR_INVALID_ARGUMENT = 100001;

struct Driver {
  bool ok = false;
  char error[512] = {0};
  void* handle = nullptr;

  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuModuleLoad)(CUmodule*, const char*) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*cuFuncGetAttribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                     const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                     const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill) = nullptr;
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
};

namespace detail {

template <typename Fn>
inline bool resolve(Driver& d, Fn& slot, const char* symbol) {
  // The plain (non _ptsz / non _v2) symbols: cuda.h maps none of the names used here to a
  // versioned symbol in CUDA 13 (checked with grep on cuda.h), and cuLaunchKernelEx's plain
  // symbol is the legacy-default-stream flavour, which is what the runtime uses too.
  void* p = dlsym(d.handle, symbol);
  if (p == nullptr) {
    std::snprintf(d.error, sizeof(d.error), "finegemm: symbol %s not found in libcuda.so.1", symbol);
    return false;
  }
  slot = reinterpret_cast<Fn>(p);
  return true;
}

inline Driver& driver_storage() {
  static Driver d;
  return d;
}

inline void init_driver(Driver& d) {
  d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d.handle == nullptr) {
    const char* e = dlerror();
    std::snprintf(d.error, sizeof(d.error),
                  "finegemm: cannot dlopen libcuda.so.1 (no NVIDIA driver on this machine?): %s",
                  e ? e : "unknown error");
    return;
  }
  bool ok = resolve(d, d.cuInit, "cuInit") && resolve(d, d.cuGetErrorString, "cuGetErrorString") &&
            resolve(d, d.cuGetErrorName, "cuGetErrorName") &&
            resolve(d, d.cuDeviceGet, "cuDeviceGet") &&
            resolve(d, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
            resolve(d, d.cuCtxGetCurrent, "cuCtxGetCurrent") &&
            resolve(d, d.cuCtxSetCurrent, "cuCtxSetCurrent") &&
            resolve(d, d.cuModuleLoad, "cuModuleLoad") &&
            resolve(d, d.cuModuleLoadData, "cuModuleLoadData") &&
            resolve(d, d.cuModuleGetFunction, "cuModuleGetFunction") &&
            resolve(d, d.cuFuncSetAttribute, "cuFuncSetAttribute") &&
            resolve(d, d.cuFuncGetAttribute, "cuFuncGetAttribute") &&
            resolve(d, d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled") &&
            resolve(d, d.cuLaunchKernelEx, "cuLaunchKernelEx") &&
            resolve(d, d.cuPointerGetAttribute, "cuPointerGetAttribute");
  if (!ok) return;
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    d.cuGetErrorString(r, &s);
    std::snprintf(d.error, sizeof(d.error), "finegemm: cuInit failed (%d): %s", int(r),
                  s ? s : "unknown error");
    return;
  }
  d.ok = true;
}

// Primary context retained by fg_load_function; launches use it when the calling thread has
// no current context (e.g. a fresh Python thread that has not touched torch.cuda yet).
inline CUcontext& fallback_context() {
  static CUcontext ctx = nullptr;
  return ctx;
}

}  // namespace detail

// The driver entry points, resolved once per process (thread-safe). Check `.ok` before use.
inline const Driver& driver() {
  static std::once_flag once;
  Driver& d = detail::driver_storage();
  std::call_once(once, [&] { detail::init_driver(d); });
  return d;
}

// Make sure the calling thread has a current context; when it has none, retain and make current
// the primary context of `device` (the one PyTorch's runtime uses).
inline CUresult ensure_context(int device) {
  const Driver& d = driver();
  if (!d.ok) return static_cast<CUresult>(FG_ERROR_NO_DRIVER);
  CUcontext cur = nullptr;
  CUresult r = d.cuCtxGetCurrent(&cur);
  if (r != CUDA_SUCCESS) return r;
  if (cur != nullptr) {
    if (detail::fallback_context() == nullptr) detail::fallback_context() = cur;
    return CUDA_SUCCESS;
  }
  CUdevice dev;
  r = d.cuDeviceGet(&dev, device);
  if (r != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  r = d.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS) return r;
  r = d.cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) return r;
  if (detail::fallback_context() == nullptr) detail::fallback_context() = ctx;
  return CUDA_SUCCESS;
}

// A thread without a current context (a fresh thread: PyTorch makes its context current lazily)
// takes the primary context retained when the first kernel was loaded, so that driver calls on
// loaded functions (launches, occupancy queries) do not fail with CUDA_ERROR_INVALID_CONTEXT.
inline void adopt_fallback_context() {
  const Driver& d = driver();
  CUcontext cur = nullptr;
  if (d.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == nullptr && detail::fallback_context() != nullptr)
    d.cuCtxSetCurrent(detail::fallback_context());
}

// Which operand a tensor map serves (the developer overrides below can set A's and B's apart).
enum class TmapOperand : int { kA = 0, kB = 1, kOther = 2 };

namespace detail {
// -1: unset (no override).
inline int parse_l2_promotion(const char* v) {
  if (v == nullptr) return -1;
  const std::string s(v);
  if (s == "none") return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  if (s == "64") return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  if (s == "128") return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  if (s == "256") return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  return -1;
}
}  // namespace detail

// A tensor map's L2 promotion: `chosen` (the launch's choice; 256B unless a tuned table entry names
// another for the operand maps, benchmarks/NOTES.md v0.40), unless a developer override is set
// (read once per process, for same-call A/Bs): FINEGEMM_DIAG_TMAP_L2_PROMOTION for every map,
// FINEGEMM_DIAG_TMAP_L2_PROMOTION_A / _B for the operand maps; values none, 64, 128, 256.
inline CUtensorMapL2promotion tmap_l2_promotion(TmapOperand op = TmapOperand::kOther,
                                                CUtensorMapL2promotion chosen = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  static const int all = detail::parse_l2_promotion(std::getenv("FINEGEMM_DIAG_TMAP_L2_PROMOTION"));
  static const int a = detail::parse_l2_promotion(std::getenv("FINEGEMM_DIAG_TMAP_L2_PROMOTION_A"));
  static const int b = detail::parse_l2_promotion(std::getenv("FINEGEMM_DIAG_TMAP_L2_PROMOTION_B"));
  const int own = op == TmapOperand::kA ? a : (op == TmapOperand::kB ? b : -1);
  const int v = own >= 0 ? own : (all >= 0 ? all : static_cast<int>(chosen));
  return static_cast<CUtensorMapL2promotion>(v);
}

// The launchers' `l2_promotion` argument: the operand maps' promotion packed as A | B << 4, each a
// CUtensorMapL2promotion value (0 none, 1 64B, 2 128B, 3 256B; 0x33 = 256B for both). False for
// anything else.
inline bool unpack_l2_promotion(int packed, CUtensorMapL2promotion* a, CUtensorMapL2promotion* b) {
  if (packed < 0 || packed > 0xff || (packed & 0xf) > 3 || (packed >> 4) > 3) return false;
  *a = tmap_l2_promotion(TmapOperand::kA, static_cast<CUtensorMapL2promotion>(packed & 0xf));
  *b = tmap_l2_promotion(TmapOperand::kB, static_cast<CUtensorMapL2promotion>(packed >> 4));
  return true;
}

// The dense launchers' packed options: bits 0-7 the A / B maps' L2 promotions
// (unpack_l2_promotion), bits 8-11 the kernel's B group (kBGroup 2 or 4; 0: none). False for
// anything else (the launchers answer FG_ERROR_INVALID_ARGUMENT).
inline bool unpack_dense_options(int packed, CUtensorMapL2promotion* a, CUtensorMapL2promotion* b, int* b_group) {
  if (packed < 0 || (packed >> 12) != 0) return false;
  *b_group = (packed >> 8) & 0xf;
  return (*b_group == 0 || *b_group == 2 || *b_group == 4) && unpack_l2_promotion(packed & 0xff, a, b);
}

// Whether B [n, k] in k-blocks of kb_bytes may be read in boxes of b_group k-blocks (both kernel
// families' kBGroup; make_tmap_k_groups): whole k-blocks (a box row never reaches the next row),
// whole 8-row groups (no row group past the end of b), every split's k-range whole groups.
inline bool b_group_fits(int b_group, int64_t k_bytes, int64_t kb_bytes, int n, int num_splits) {
  const int64_t num_kb = k_bytes / kb_bytes;
  return k_bytes % kb_bytes == 0 && n % 8 == 0 && num_kb % (static_cast<int64_t>(num_splits) * b_group) == 0;
}

// 2-D tiled TMA descriptor for a row-major [outer, inner] tensor (inner contiguous).
// Interleave none, L2 promotion `promotion` (default tmap_l2_promotion()), out-of-bounds elements
// filled with zeros (loads) / dropped (stores). Element strides are 1. Requirements (checked by the driver):
// base 16-byte aligned, outer_stride_bytes a multiple of 16, box dims <= 256, box_inner * elem
// size <= the swizzle span.
inline CUresult make_tmap_2d(CUtensorMap* tmap, CUtensorMapDataType dtype, void* base,
                             uint64_t inner, uint64_t outer, uint64_t outer_stride_bytes,
                             uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swizzle,
                             CUtensorMapL2promotion promotion = tmap_l2_promotion()) {
  const Driver& d = driver();
  if (!d.ok) return static_cast<CUresult>(FG_ERROR_NO_DRIVER);
  if (tmap == nullptr) return static_cast<CUresult>(FG_ERROR_INVALID_ARGUMENT);
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {outer_stride_bytes};  // stride of dim 1 in bytes
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  return d.cuTensorMapEncodeTiled(tmap, dtype, 2, base, dims, strides, box, elem_strides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                  promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// B [rows, k] (elements of elem_bytes, row pitch ld bytes) for the grouped B boxes of both kernel
// families (kBGroup): a 4-D map (128 bytes, 8 rows at pitch ld, k-blocks of 128 bytes at pitch 128,
// 8-row groups at pitch 8 ld) whose box (128 bytes, 8, group, block_n / 8) holds `group` k-blocks of
// block_n rows as 128B-swizzled 8-row atoms, k-block i of row group r at r * group * 1024 + i * 1024.
// Needs whole k-blocks (k * elem_bytes % 128 == 0) and rows % 8 == 0: dims 0 and 1 are never
// clipped, so a partial k-block or row group would read past a row or past b.
inline CUresult make_tmap_k_groups(CUtensorMap* tmap, CUtensorMapDataType dtype, uint32_t elem_bytes, void* base,
                                   uint64_t k, uint64_t rows, uint64_t ld, uint32_t block_n, uint32_t group,
                                   CUtensorMapL2promotion promotion) {
  const Driver& d = driver();
  if (!d.ok) return static_cast<CUresult>(FG_ERROR_NO_DRIVER);
  const uint64_t row_bytes = k * elem_bytes, block_elems = 128u / elem_bytes;
  if (tmap == nullptr || row_bytes % 128 != 0 || rows % 8 != 0 || block_n % 8 != 0) {
    return static_cast<CUresult>(FG_ERROR_INVALID_ARGUMENT);
  }
  const cuuint64_t dims[4] = {block_elems, 8, row_bytes / 128, rows / 8};
  const cuuint64_t strides[3] = {ld, 128, 8 * ld};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(block_elems), 8, group, block_n / 8};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return d.cuTensorMapEncodeTiled(tmap, dtype, 4, base, dims, strides, box, elem_strides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// 3-D tiled map: dims (inner, mid, outer), strides of mid / outer in bytes, box (box_inner,
// box_mid, 1): a box never crosses an outer slice (e.g. one group of a [G, M, N] view).
inline CUresult make_tmap_3d(CUtensorMap* tmap, CUtensorMapDataType dtype, void* base, uint64_t inner,
                             uint64_t mid, uint64_t outer, uint64_t mid_stride_bytes, uint64_t outer_stride_bytes,
                             uint32_t box_inner, uint32_t box_mid, CUtensorMapSwizzle swizzle,
                             CUtensorMapL2promotion promotion = tmap_l2_promotion()) {
  const Driver& d = driver();
  if (!d.ok) return static_cast<CUresult>(FG_ERROR_NO_DRIVER);
  if (tmap == nullptr) return static_cast<CUresult>(FG_ERROR_INVALID_ARGUMENT);
  const cuuint64_t dims[3] = {inner, mid, outer};
  const cuuint64_t strides[2] = {mid_stride_bytes, outer_stride_bytes};
  const cuuint32_t box[3] = {box_inner, box_mid, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return d.cuTensorMapEncodeTiled(tmap, dtype, 3, base, dims, strides, box, elem_strides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                  promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// Whether a TMA store may write a row-major [rows, n] output of elem_bytes elements with a row
// pitch of ld elements: TMA's own rule (16-byte aligned base and pitch) and rows that end on a
// 16-byte boundary (n * elem_bytes % 16 == 0). TMA stores clip the inner dimension at 16-byte
// granularity of the global address, not per element: a box over the end of a row of n = 100
// bf16 also writes columns 100..103 (measured on the H200 by tests/gpu/test_fuzz_gpu.py; with d a
// column slice of a wider tensor, that is another tensor's data). Callers keep direct stores
// otherwise.
inline bool tma_store_fits(const void* base, int64_t n, int64_t ld, int elem_bytes) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * elem_bytes) % 16 == 0 && (n * elem_bytes) % 16 == 0;
}

// The bf16 TMA-store epilogue's tile layout (mirrors epilogue::TmaStoreBf16<block_n>): the largest
// swizzle span (128, 64 or 32 bytes) dividing a tile row; a store box is that span's columns x 64 rows.
inline int bf16_store_swizzle_bytes(int block_n) {
  const int row_bytes = block_n * 2;
  return row_bytes % 128 == 0 ? 128 : (row_bytes % 64 == 0 ? 64 : 32);
}

// The bf16 D map of that epilogue: [rows, cols] with row pitch ldd elements, its box and swizzle.
// (The caller checks tma_store_fits first; the FP8 and BF16 dense / grouped / head-split launchers.)
// box_rows 16: the split clusters' per-warp stores (TmaStoreBf16::store_warp).
inline CUresult make_bf16_store_tmap(CUtensorMap* tmap, void* d, uint64_t cols, uint64_t rows, int ldd, int block_n,
                                     uint32_t box_rows = 64) {
  const int sw = bf16_store_swizzle_bytes(block_n);
  return make_tmap_2d(tmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, d, cols, rows, static_cast<uint64_t>(ldd) * 2u,
                      static_cast<uint32_t>(sw / 2), box_rows,
                      sw == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                : (sw == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B));
}

// Every bf16 TMA-store launcher's step: D's map (make_bf16_store_tmap over cols x rows) and `flag`
// added to *flags where a TMA store may write d's rows (tma_store_fits over cols); otherwise nothing
// is encoded and the kernel stores directly. Returns the encode's error, else CUDA_SUCCESS.
inline CUresult encode_bf16_store_if_fits(CUtensorMap* tmap, uint32_t* flags, uint32_t flag, void* d, uint64_t cols,
                                          uint64_t rows, int ldd, int block_n, uint32_t box_rows = 64) {
  if (!tma_store_fits(d, static_cast<int64_t>(cols), ldd, 2)) return CUDA_SUCCESS;
  const CUresult r = make_bf16_store_tmap(tmap, d, cols, rows, ldd, block_n, box_rows);
  if (r == CUDA_SUCCESS) *flags |= flag;
  return r;
}

// The fp32 D map of the recipe (1,1,128) TMA epilogue (mirrors epilogue::TmaStoreFp32<block_n>):
// [groups, m, n] fp32 with row pitch ldd elements (group g's rows start at g * m), box (32 or 16
// columns, 64 rows, 1). Returns false (nothing encoded) where a TMA store may not write d
// (tma_store_fits: a base or pitch off 16 bytes, or N % 4 != 0); the caller then keeps direct stores.
inline bool make_fp32_epilogue_tmap(CUtensorMap* tmap, void* d, int m, int n, int ldd, int groups, int block_n,
                                    CUresult* err) {
  *err = CUDA_SUCCESS;
  if (!tma_store_fits(d, n, ldd, 4)) return false;
  const bool wide = block_n % 32 == 0;
  const uint64_t pitch = static_cast<uint64_t>(ldd) * 4u;
  *err = make_tmap_3d(tmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, d, static_cast<uint64_t>(n), static_cast<uint64_t>(m),
                      static_cast<uint64_t>(groups), pitch, pitch * static_cast<uint64_t>(m), wide ? 32u : 16u, 64u,
                      wide ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B);
  return *err == CUDA_SUCCESS;
}

// dim3-like triple (implicitly built from 1-3 ints or from anything with .x/.y/.z, e.g. dim3).
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  template <typename T, typename = decltype(T::x), typename = decltype(T::y), typename = decltype(T::z)>
  Dim3(const T& v) : x(v.x), y(v.y), z(v.z) {}
};

// finegemm.set_pdl (fg_set_pdl): whether the GEMM launchers pass pdl=true to fg::launch. Only
// kernels that call ptx::griddep_wait before touching global memory may be launched so.
inline std::atomic<bool>& pdl_setting() {
  static std::atomic<bool> enabled{false};
  return enabled;
}
inline bool pdl_enabled() { return pdl_setting().load(std::memory_order_relaxed); }

// Launch through cuLaunchKernelEx. A cluster of (cluster_dim, 1, 1) is requested only when
// cluster_dim > 1 (grid.x must then be a multiple of cluster_dim). pdl=true allows programmatic
// dependent launch (the kernel may start before the previous one on the stream finishes; it must
// call griddepcontrol.wait before reading the previous kernel's outputs).
inline CUresult launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned smem_bytes, unsigned cluster_dim,
                       CUstream stream, void** params, bool pdl = false) {
  const Driver& d = driver();
  if (!d.ok) return static_cast<CUresult>(FG_ERROR_NO_DRIVER);
  if (fn == nullptr) return static_cast<CUresult>(FG_ERROR_INVALID_ARGUMENT);
  adopt_fallback_context();

  CUlaunchAttribute attrs[2];
  unsigned num_attrs = 0;
  if (cluster_dim > 1) {
    std::memset(&attrs[num_attrs], 0, sizeof(CUlaunchAttribute));
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[num_attrs].value.clusterDim.x = cluster_dim;
    attrs[num_attrs].value.clusterDim.y = 1;
    attrs[num_attrs].value.clusterDim.z = 1;
    ++num_attrs;
  }
  if (pdl) {
    std::memset(&attrs[num_attrs], 0, sizeof(CUlaunchAttribute));
    attrs[num_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[num_attrs].value.programmaticStreamSerializationAllowed = 1;
    ++num_attrs;
  }
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = gx;
  cfg.gridDimY = gy;
  cfg.gridDimZ = gz;
  cfg.blockDimX = bx;
  cfg.blockDimY = by;
  cfg.blockDimZ = bz;
  cfg.sharedMemBytes = smem_bytes;
  cfg.hStream = stream;
  cfg.attrs = num_attrs ? attrs : nullptr;
  cfg.numAttrs = num_attrs;
  return d.cuLaunchKernelEx(&cfg, fn, params, nullptr);
}

inline CUresult launch(CUfunction fn, Dim3 grid, Dim3 block, unsigned smem_bytes,
                       unsigned cluster_dim, CUstream stream, void** params, bool pdl = false) {
  return launch(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes, cluster_dim,
                stream, params, pdl);
}

// Clusters of cluster_size CTAs (threads, smem_bytes each) of `fn` that can be resident at once
// (cuOccupancyMaxActiveClusters) into *out.
inline int max_active_clusters(CUfunction fn, int cluster_size, int threads, int smem_bytes, int* out) {
  if (fn == nullptr || out == nullptr || cluster_size < 1 || threads <= 0 || smem_bytes < 0)
    return FG_ERROR_INVALID_ARGUMENT;
  *out = 0;
  const Driver& drv = driver();
  if (!drv.ok) return FG_ERROR_NO_DRIVER;
  using Fn = CUresult (*)(int*, CUfunction, const CUlaunchConfig*);
  static Fn occ = reinterpret_cast<Fn>(dlsym(drv.handle, "cuOccupancyMaxActiveClusters"));
  if (occ == nullptr) return FG_ERROR_NO_DRIVER;
  // A planning thread that never ran a CUDA runtime call (e.g. a warm-up pool) has no context:
  // the query failed there and the plan silently kept an unfitted grid / no split cluster.
  adopt_fallback_context();
  CUlaunchAttribute attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = static_cast<unsigned>(cluster_size);
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.gridDimX = static_cast<unsigned>(cluster_size);
  cfg.gridDimY = 1;
  cfg.gridDimZ = 1;
  cfg.blockDimX = static_cast<unsigned>(threads);
  cfg.blockDimY = 1;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(smem_bytes);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return occ(out, fn, &cfg);
}

// The widest tile each kernel's split cluster takes (impls: kClusterSplitMaxN / kClusterSplit);
// wider ones spilled with the reduce-scatter (ptxas 13.0).
inline int fp8_cluster_split_max_n(int block_m) { return block_m <= 128 ? 128 : 64; }
constexpr int kBf16ClusterSplitMaxN = 64;

// Split-K through distributed shared memory (epilogue/split_k.cuh; both GEMM kernels, kClusterSplit):
// the CTAs per cluster of a split-K launch: num_splits when the splits of each tile may run as one
// cluster (rank = split), else 1. The kernels' rule, on which they trap otherwise: every CTA runs
// exactly one (tile, split) unit (tiles x splits == grid), 2 to 8 splits, tiles at most max_block_n
// columns wide (the kernel's limit above).
// The host adds: every cluster resident at once (GPCs hold whole clusters only; a second wave of
// clusters would cost more than the reduction saves). FINEGEMM_DIAG_SPLIT_CLUSTER=0 keeps the
// workspace reduction (A/Bs).
inline unsigned split_cluster_size(CUfunction fn, int m, int n, int block_m, int block_n, int max_block_n,
                                   int num_splits, int grid, int threads, int smem_bytes) {
  static const bool on = [] {
    const char* v = std::getenv("FINEGEMM_DIAG_SPLIT_CLUSTER");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!on || num_splits < 2 || num_splits > 8 || block_n > max_block_n) return 1u;
  const int64_t units = static_cast<int64_t>((m + block_m - 1) / block_m) * ((n + block_n - 1) / block_n) * num_splits;
  if (units != grid) return 1u;
  int clusters = 0;
  if (max_active_clusters(fn, num_splits, threads, smem_bytes, &clusters) != CUDA_SUCCESS ||
      static_cast<int64_t>(clusters) * num_splits < grid)
    return 1u;
  return static_cast<unsigned>(num_splits);
}

// Whether a split cluster's bf16 D (no C) is TMA-stored per warp (both kernels' kSplitTmaStore; a
// kernel whose staging does not fit its ring ignores the flag and stores directly). FINEGEMM_DIAG_SPLIT_TMA_STORE=0
// keeps the direct stores (A/Bs; read once per process).
inline bool split_tma_store_on() {
  static const bool on = [] {
    const char* v = std::getenv("FINEGEMM_DIAG_SPLIT_TMA_STORE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Whether a launch sums its split-K partials through the workspace and counters: split-K, and not
// a split cluster (whose partials meet in distributed shared memory). Decided once, when a Launch
// is encoded (its split_in_cluster: split_cluster_size() chose a cluster of the splits); the
// launchers and Python (fg_<family>_prepared_split_buffers) read that one answer.
inline bool needs_split_buffers(uint32_t num_splits, bool split_in_cluster) {
  return num_splits > 1 && !split_in_cluster;
}

// Whether a launch lacks the workspace / counters it needs (both GEMM launchers).
inline bool split_buffers_missing(uint32_t num_splits, bool split_in_cluster, const void* workspace,
                                  const void* counters) {
  return needs_split_buffers(num_splits, split_in_cluster) && (workspace == nullptr || counters == nullptr);
}

// Prepared launches (fg_prepare_* / fg_launch_prepared_* / fg_free_prepared_*): a family's Launch
// struct (tensor maps, parameters) lives on the heap behind a uint64 handle that Python keeps.
// publish_prepared takes ownership of `launch`: on an error it is freed and rc returned, else
// *out receives the handle. (CUtensorMap members are 64-byte aligned: C++17 aligned new.)
template <typename Launch>
inline int publish_prepared(Launch* launch, int rc, uint64_t* out) {
  if (rc != CUDA_SUCCESS) {
    delete launch;
    return rc;
  }
  *out = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(launch));
  return CUDA_SUCCESS;
}

template <typename Launch>
inline const Launch* prepared_from_handle(uint64_t handle) {
  return reinterpret_cast<const Launch*>(static_cast<uintptr_t>(handle));
}

// Helpers for the extern "C" launchers, whose arguments are plain integers.
inline CUfunction as_function(uint64_t fn) { return reinterpret_cast<CUfunction>(static_cast<uintptr_t>(fn)); }
inline CUstream as_stream(uint64_t stream) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)); }

}  // namespace fg
