// The bound on the skinny FP8 shapes' B stream: how fast can a grid shaped like the GEMM's stream a
// weight B [N, K] (u8) through TMA into a 128B-swizzled ring, and does a box that covers G
// consecutive k-blocks of each row change it? No MMA: the consumer warpgroup waits each stage and
// releases it (the "data alone" build of NOTES v0.42, without A unless --a-rows).
//
// Box layouts (one stage = one k-block = 128 bytes of each of the tile's bn rows):
//   2d  G separate boxes (128 B x bn rows), back to back (G = 1: today's producer; G > 1: k-batch)
//   3d  one box over (128 B, N rows, K/128 k-blocks): the same bytes and order as 2d, one request
//   4d  one box over (128 B, 8 rows at pitch K, G k-blocks at pitch 128, N/8 row groups at 8 K):
//       k-block i of row group r lands at r * G * 1024 + i * 1024 (128B-swizzled 8-row atoms, the
//       layout a wgmma descriptor reads with start + i * 1024 and stride byte offset G * 1024),
//       so each row's G * 128 bytes are requested within 8 * G * 128 bytes of the stream.
//   lin the ceiling, not a GEMM's order: each CTA copies its share of B (the same bytes per stage)
//       from one contiguous range with 1-D bulk copies (cp.async.bulk, no tensor map, no swizzle).
// --check copies CTA 0's first group out of shared memory and compares it with the layout above.
//
// Build (no GPU needed): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//   -I finegemm/include scripts/probe_b_stream.cu -o probe_b_stream
// Output: one JSON line per case (median of --iters launches, each after a 256 MB L2 flush).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <finegemm/ptx/common.cuh>
#include <finegemm/ptx/mbarrier.cuh>
#include <finegemm/ptx/tma.cuh>

namespace ptx = finegemm::ptx;

#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

enum Layout { k2d = 0, k3d = 1, k4d = 2, kLinear = 3 };

// A 1-D bulk copy global -> shared (bytes a multiple of 16, both addresses 16-byte aligned) whose
// completion adds its bytes to mbarrier `bar`'s transaction count.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}

struct Params {
  int layout, g, bn, slots, tiles, splits, copies, kblocks_per_split, a_rows;
};

__global__ void __launch_bounds__(160, 1)
    b_stream(const __grid_constant__ CUtensorMap tmap_b, const __grid_constant__ CUtensorMap tmap_a, Params p,
             const uint8_t* b_ptr, uint32_t* sink, uint8_t* dump) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t group_b = uint32_t(p.g) * p.bn * 128;
  const uint32_t group_a = uint32_t(p.g) * p.a_rows * 128;
  const uint32_t ring = ptx::smem_addr(smem);
  const uint32_t a_ring = ring + p.slots * group_b;
  __shared__ __align__(8) uint64_t full[32], empty[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.slots; ++s) {
      ptx::mbar_init(ptx::smem_addr(&full[s]), 1);
      ptx::mbar_init(ptx::smem_addr(&empty[s]), 4);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  const int copy = blockIdx.x % p.copies;
  const int split = (blockIdx.x / p.copies) % p.splits;
  const int tile = blockIdx.x / (p.copies * p.splits);
  const int k0 = split * p.kblocks_per_split;
  const int groups = p.kblocks_per_split / p.g;
  if (warp == 4) {
    if (lane == 0) {
      for (int i = 0; i < groups; ++i) {
        const int s = i % p.slots;
        ptx::mbar_wait(ptx::smem_addr(&empty[s]), ((i / p.slots) & 1) ^ 1);
        const uint32_t bar = ptx::smem_addr(&full[s]);
        ptx::mbar_arrive_expect_tx(bar, group_b + group_a);
        const uint32_t dst = ring + s * group_b;
        const int kb = k0 + i * p.g;
        if (p.layout == k2d) {
          for (int j = 0; j < p.g; ++j)
            ptx::tma_load_2d(dst + j * p.bn * 128, &tmap_b, bar, (kb + j) * 128, tile * p.bn);
        } else if (p.layout == k3d) {
          ptx::tma_load_3d(dst, &tmap_b, bar, 0, tile * p.bn, kb);
        } else if (p.layout == kLinear) {
          // This CTA's (tile, split) share of B as one contiguous range, group_b bytes per group.
          const size_t chunk = size_t(tile) * p.splits + split;
          bulk_copy_g2s(dst, b_ptr + (chunk * groups + i) * group_b, group_b, bar);
        } else {
          ptx::tma_load_4d_policy(dst, &tmap_b, bar, 0, 0, kb, tile * p.bn / 8, false, 0);
        }
        for (int j = 0; j < p.g && p.a_rows > 0; ++j)
          ptx::tma_load_2d(a_ring + s * group_a + j * p.a_rows * 128, &tmap_a, bar, (kb + j) * 128, copy * p.a_rows);
      }
    }
    return;
  }
  uint32_t acc = 0;
  for (int i = 0; i < groups; ++i) {
    const int s = i % p.slots;
    ptx::mbar_wait(ptx::smem_addr(&full[s]), (i / p.slots) & 1);
    acc ^= reinterpret_cast<const uint32_t*>(smem + s * group_b)[threadIdx.x];
    if (blockIdx.x == 0 && i == 0 && dump != nullptr) {
      for (uint32_t b = threadIdx.x; b < group_b; b += 128) dump[b] = smem[b];
    }
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(ptx::smem_addr(&empty[s]));
  }
  if (acc == 0x12345678u) sink[blockIdx.x * 128 + threadIdx.x] = acc;
}

static CUresult (*encode_tiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) = nullptr;

static bool encode(CUtensorMap* m, void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box, const char* what) {
  cuuint32_t es[5] = {1, 1, 1, 1, 1};
  CUresult r = encode_tiled(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, base, dims, strides, box, es,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) std::printf("{\"error\": \"encode %s failed: %d\"}\n", what, int(r));
  return r == CUDA_SUCCESS;
}

__global__ void fill_bytes(uint8_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint8_t((i * 2654435761u) >> 13);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: probe_b_stream N,K,bn,layout,G,slots,splits,copies,a_rows ... [--iters n] [--check]\n");
    return 2;
  }
  int iters = 30;
  bool check = false;
  std::vector<std::string> cases;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--check")) check = true;
    else cases.push_back(argv[i]);
  }
  cudaDriverEntryPointQueryResult q;
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode_tiled),
                                              12000, cudaEnableDefault, &q));
  const size_t max_b = size_t(32768) * 16384, flush_bytes = size_t(256) << 20;
  uint8_t *b, *a, *flush, *dump;
  uint32_t* sink;
  CHECK_CUDA(cudaMalloc(&b, max_b));
  CHECK_CUDA(cudaMalloc(&a, size_t(256) * 16384));
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  CHECK_CUDA(cudaMalloc(&dump, 1 << 20));
  CHECK_CUDA(cudaMalloc(&sink, 1 << 20));
  fill_bytes<<<1024, 256>>>(b, max_b);
  fill_bytes<<<256, 256>>>(a, size_t(256) * 16384);
  // The opt-in limit less the kernel's static shared memory (its barriers): 227 KiB alone is refused.
  int smem_optin = 0;
  cudaFuncAttributes attrs{};
  CHECK_CUDA(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK_CUDA(cudaFuncGetAttributes(&attrs, b_stream));
  const int max_dyn_smem = smem_optin - static_cast<int>(attrs.sharedSizeBytes);
  CHECK_CUDA(cudaFuncSetAttribute(b_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, max_dyn_smem));
  std::vector<uint8_t> host_b;
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (const std::string& c : cases) {
    int n, k, bn, layout, g, slots, splits, copies, a_rows;
    if (std::sscanf(c.c_str(), "%d,%d,%d,%d,%d,%d,%d,%d,%d", &n, &k, &bn, &layout, &g, &slots, &splits, &copies,
                    &a_rows) != 9) {
      std::printf("{\"error\": \"bad case %s\"}\n", c.c_str());
      continue;
    }
    Params p{layout, g, bn, slots, n / bn, splits, copies, k / 128 / splits, a_rows};
    const size_t smem = size_t(slots) * g * (bn + a_rows) * 128 + 1024;
    if (layout < 0 || layout > kLinear || n % bn || bn % 8 || (k / 128) % splits || p.kblocks_per_split % g || slots > 32 || smem > size_t(max_dyn_smem) ||
        size_t(n) * k > max_b || k > 16384 || a_rows > 256) {
      std::printf("{\"case\": \"%s\", \"error\": \"unsupported\"}\n", c.c_str());
      continue;
    }
    CUtensorMap mb, ma;
    bool ok;
    if (layout == k2d || layout == kLinear) {  // (the linear copies never use the map)
      cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(n)}, st[1] = {cuuint64_t(k)};
      cuuint32_t box[2] = {128, cuuint32_t(bn)};
      ok = encode(&mb, b, 2, dims, st, box, "2d");
    } else if (layout == k3d) {
      cuuint64_t dims[3] = {128, cuuint64_t(n), cuuint64_t(k / 128)}, st[2] = {cuuint64_t(k), 128};
      cuuint32_t box[3] = {128, cuuint32_t(bn), cuuint32_t(g)};
      ok = encode(&mb, b, 3, dims, st, box, "3d");
    } else {
      cuuint64_t dims[4] = {128, 8, cuuint64_t(k / 128), cuuint64_t(n / 8)},
                 st[3] = {cuuint64_t(k), 128, cuuint64_t(8) * k};
      cuuint32_t box[4] = {128, 8, cuuint32_t(g), cuuint32_t(bn / 8)};
      ok = encode(&mb, b, 4, dims, st, box, "4d");
    }
    {
      cuuint64_t dims[2] = {cuuint64_t(k), 256}, st[1] = {cuuint64_t(k)};
      cuuint32_t box[2] = {128, cuuint32_t(std::max(a_rows, 8))};
      ok = ok && encode(&ma, a, 2, dims, st, box, "a");
    }
    if (!ok) continue;
    const int grid = p.tiles * splits * copies;
    b_stream<<<grid, 160, smem>>>(mb, ma, p, b, sink, check ? dump : nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    long mismatches = -1;
    if (check) {
      // CTA 0 = tile 0, split 0: its first group holds k-blocks 0..G-1 of rows 0..bn-1.
      if (host_b.empty()) {
        host_b.resize(max_b);
      }
      CHECK_CUDA(cudaMemcpy(host_b.data(), b, size_t(n) * k, cudaMemcpyDeviceToHost));
      std::vector<uint8_t> got(size_t(g) * bn * 128);
      CHECK_CUDA(cudaMemcpy(got.data(), dump, got.size(), cudaMemcpyDeviceToHost));
      mismatches = 0;
      for (int r = 0; r < bn; ++r)
        for (int i = 0; i < g; ++i)
          for (int byte = 0; byte < 128; ++byte) {
            size_t logical = layout == k4d ? size_t(r / 8) * g * 1024 + size_t(i) * 1024 + (r % 8) * 128 + byte
                                           : size_t(i) * bn * 128 + size_t(r) * 128 + byte;
            if (layout == kLinear) {  // the first group_b bytes of B, unswizzled
              mismatches += got[logical] != host_b[logical];
              continue;
            }
            size_t phys = logical ^ (((logical >> 7) & 7) << 4);
            mismatches += got[phys] != host_b[size_t(r) * k + size_t(i) * 128 + byte];
          }
    }
    std::vector<float> ms;
    for (int it = 0; it < iters; ++it) {
      CHECK_CUDA(cudaMemsetAsync(flush, it & 0xff, flush_bytes));
      CHECK_CUDA(cudaEventRecord(e0));
      b_stream<<<grid, 160, smem>>>(mb, ma, p, b, sink, nullptr);
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float t;
      CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    CHECK_CUDA(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    const double us = ms[ms.size() / 2] * 1e3;
    std::printf(
        "{\"case\": \"%s\", \"n\": %d, \"k\": %d, \"bn\": %d, \"layout\": \"%s\", \"g\": %d, \"slots\": %d, "
        "\"splits\": %d, \"copies\": %d, \"a_rows\": %d, \"ctas\": %d, \"us\": %.2f, \"min_us\": %.2f, "
        "\"tb_per_s\": %.3f, \"check_mismatches\": %ld}\n",
        c.c_str(), n, k, bn, layout == k2d ? "2d" : layout == k3d ? "3d" : layout == k4d ? "4d" : "lin", g, slots,
        splits, copies, a_rows,
        grid, us, ms[0] * 1e3, double(n) * k / (us * 1e-6) / 1e12, mismatches);
    std::fflush(stdout);
  }
  return 0;
}
