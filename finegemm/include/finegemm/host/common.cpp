// Process-wide exports of the host library: module loading, error strings, trivial test launch.
#include "finegemm/host/common.h"

#include <cstdio>

namespace fg {

// cuTensorMapReplaceAddress on an encoded map (the prepared launches' rebind: a kept launch
// re-pointed at tensors of the same layout). Declared where used (host/sm90_*_gemm.cpp); kept out
// of common.h, whose bytes key every compiled kernel. Returns a CUresult or FG_ERROR_NO_DRIVER.
int replace_tmap_address(CUtensorMap* tmap, void* address) {
  const Driver& drv = driver();
  if (!drv.ok) return FG_ERROR_NO_DRIVER;
  using Fn = CUresult (*)(CUtensorMap*, void*);
  static const Fn replace = reinterpret_cast<Fn>(dlsym(drv.handle, "cuTensorMapReplaceAddress"));
  if (replace == nullptr) return FG_ERROR_NO_DRIVER;
  return replace(tmap, address);
}

}  // namespace fg

extern "C" {

// Load `entry` from the cubin at `cubin_path` into the current context (or, when the calling
// thread has none, the primary context of `device`), set its max dynamic shared memory to
// `smem_bytes` when > 0, and store the CUfunction in *out_fn. Returns a CUresult (0 = success),
// or fg::FG_ERROR_NO_DRIVER / fg::FG_ERROR_INVALID_ARGUMENT.
int fg_load_function(const char* cubin_path, const char* entry, int smem_bytes, int device,
                     uint64_t* out_fn) {
  if (cubin_path == nullptr || entry == nullptr || out_fn == nullptr || smem_bytes < 0)
    return fg::FG_ERROR_INVALID_ARGUMENT;
  *out_fn = 0;
  const fg::Driver& d = fg::driver();
  if (!d.ok) return fg::FG_ERROR_NO_DRIVER;
  CUresult r = fg::ensure_context(device);
  if (r != CUDA_SUCCESS) return r;
  CUmodule mod = nullptr;
  r = d.cuModuleLoad(&mod, cubin_path);
  if (r != CUDA_SUCCESS) return r;
  CUfunction fn = nullptr;
  r = d.cuModuleGetFunction(&fn, mod, entry);
  if (r != CUDA_SUCCESS) return r;
  if (smem_bytes > 0) {
    r = d.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes);
    if (r != CUDA_SUCCESS) return r;
  }
  *out_fn = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(fn));
  return CUDA_SUCCESS;
}

// Clusters of cluster_size CTAs (threads, smem_bytes each) of the kernel `fn` that can be resident
// at once, into *out (cuOccupancyMaxActiveClusters). Returns a CUresult or fg::FG_ERROR_*.
int fg_max_active_clusters(uint64_t fn, int cluster_size, int threads, int smem_bytes, int* out) {
  return fg::max_active_clusters(fg::as_function(fn), cluster_size, threads, smem_bytes, out);
}

// finegemm.set_pdl / get_pdl: GEMM launches from now on carry (or not) the programmatic
// stream-serialization attribute (fg::pdl_enabled). The trivial test kernel never does.
void fg_set_pdl(int enable) { fg::pdl_setting().store(enable != 0, std::memory_order_relaxed); }
int fg_get_pdl() { return fg::pdl_enabled() ? 1 : 0; }

// Writes a NUL-terminated description of `code` into buf (at most len bytes, len > 0).
void fg_error_string(int code, char* buf, int len) {
  if (buf == nullptr || len <= 0) return;
  if (code == fg::FG_ERROR_NO_DRIVER) {
    const fg::Driver& d = fg::driver();
    std::snprintf(buf, len, "%s", d.error[0] ? d.error : "finegemm: CUDA driver unavailable");
    return;
  }
  if (code == fg::FG_ERROR_INVALID_ARGUMENT) {
    std::snprintf(buf, len, "finegemm: invalid argument passed to the host launcher");
    return;
  }
  const fg::Driver& d = fg::driver();
  if (d.cuGetErrorString == nullptr) {
    std::snprintf(buf, len, "CUDA error %d (driver unavailable: %s)", code, d.error);
    return;
  }
  const char* name = nullptr;
  const char* str = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(static_cast<CUresult>(code), &name);
  d.cuGetErrorString(static_cast<CUresult>(code), &str);
  std::snprintf(buf, len, "%s (%d): %s", name ? name : "CUDA_ERROR_UNKNOWN", code,
                str ? str : "unrecognized error code");
}

// out[i] = x[i] + y[i] for i < n, launched with the block size the kernel was compiled for
// (its __launch_bounds__, read back from the function) and a grid-stride loop.
int fg_launch_trivial_add(uint64_t fn, void* x, void* y, void* out, int n, uint64_t stream) {
  if (fn == 0 || n < 0) return fg::FG_ERROR_INVALID_ARGUMENT;
  if (n == 0) return CUDA_SUCCESS;
  const fg::Driver& d = fg::driver();
  if (!d.ok) return fg::FG_ERROR_NO_DRIVER;
  CUfunction f = fg::as_function(fn);
  int block = 0;
  CUresult r = d.cuFuncGetAttribute(&block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
  if (r != CUDA_SUCCESS) return r;
  if (block <= 0) block = 256;
  long long blocks = (static_cast<long long>(n) + block - 1) / block;
  unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  void* params[] = {&x, &y, &out, &n};
  return fg::launch(f, grid, 1, 1, static_cast<unsigned>(block), 1, 1, 0, 1, fg::as_stream(stream),
                    params);
}

}  // extern "C"
