// Developer instrumentation: per-tile clock64 timestamps of the persistent kernels, compiled in
// only with -DFINEGEMM_TRACE_TILES (FINEGEMM_EXTRA_NVCC_FLAGS; part of the kernel cache key) and
// read back by scripts/trace_tiles.py. Without the macro every call below is empty.
//
// Buffer (uint64, passed as the kernel's `workspace`, which a non-split-K launch does not use):
//   [cta][role][tile < kTraceTiles][kTraceEvents]   role: consumer warpgroup 0, 1, producer (2)
// Events of a consumer tile: 0 tile head, 1 first full stage seen, 2 main loop done,
// 3 epilogue done; producer: 0 tile head, 1 first empty stage seen, 2 last load issued.
// A split cluster's tail (FP8 kernel) adds 4 partial written, 5 cluster barrier passed, 6 owned
// rows summed (its 3 and 6 come from the warpgroup's first warp that owns rows), and 7 the
// consumer's exit (after the last cluster barrier; tile 0's slot); the producer's event 3 of tile 0
// is the kernel's entry (before the barriers' init).
// The kernels use the FG_TRACE* macros, which expand to nothing without the switch (identical SASS).
#pragma once

#include <cstdint>

namespace finegemm {
namespace ptx {

constexpr uint32_t kTraceTiles = 64;
constexpr uint32_t kTraceEvents = 8;
constexpr uint32_t kTraceRoles = 3;

__device__ __forceinline__ void trace_tile(void* buf, uint32_t role, uint32_t tile, uint32_t event) {
#ifdef FINEGEMM_TRACE_TILES
  if (buf != nullptr && tile < kTraceTiles) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t)::"memory");
    uint64_t* p = static_cast<uint64_t*>(buf);
    p[((static_cast<size_t>(blockIdx.x) * kTraceRoles + role) * kTraceTiles + tile) * kTraceEvents + event] = t;
  }
#endif
}

}  // namespace ptx
}  // namespace finegemm

#ifdef FINEGEMM_TRACE_TILES
#define FG_TRACE_ONLY(...) __VA_ARGS__
#define FG_TRACE_TILE(buf, role, tile, event) ::finegemm::ptx::trace_tile(buf, role, tile, event)
#else
#define FG_TRACE_ONLY(...)
#define FG_TRACE_TILE(buf, role, tile, event) ((void)0)
#endif
