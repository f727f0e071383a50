// Trivial test kernel (exercises rendering, the cache, loading and the host launcher).
#pragma once

namespace finegemm {
namespace impls {

// out[i] = x[i] + y[i]; grid-stride loop so any grid works. kBlockSize must equal blockDim.x
// (the rendered entry point declares __launch_bounds__(kBlockSize)).
template <int kBlockSize>
__device__ __forceinline__ void trivial_add(const float* __restrict__ x, const float* __restrict__ y,
                                            float* __restrict__ out, int n) {
  static_assert(kBlockSize > 0 && kBlockSize <= 1024 && kBlockSize % 32 == 0,
                "kBlockSize must be a multiple of 32 in (0, 1024]");
  const long long stride = static_cast<long long>(gridDim.x) * kBlockSize;
  for (long long i = static_cast<long long>(blockIdx.x) * kBlockSize + threadIdx.x; i < n; i += stride)
    out[i] = x[i] + y[i];
}

}  // namespace impls
}  // namespace finegemm
