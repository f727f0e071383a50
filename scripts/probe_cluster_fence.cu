// What does a cluster barrier cost, by the way it publishes shared memory to the peer CTA?
// (NOTES v1.13: a release arrive compiles to MEMBAR.ALL.GPU + UCGABAR_ARV and cost ~1250 cycles at
// kernel start; the split cluster's partials barrier still needs a release. Does one thread's
// cumulative fence after a CTA barrier, with every other thread arriving relaxed, cost less than
// every thread's release arrive?)
//
// Each CTA of a 2-CTA cluster has the FP8 kernel's 384 threads. An iteration: every thread writes
// one word of its CTA's shared buffer (the "partial"), the barrier form under test, then every
// thread reads the peer's word of the same index through distributed shared memory and counts
// words that do not hold this iteration's value (a practical check of the form's ordering, not a
// proof). Forms:
//   0 release   every thread: barrier.cluster.arrive.release; wait.acquire (ptx::cluster_sync)
//   1 relaxed   every thread: arrive.relaxed; wait.acquire (publishes nothing: a bound, racy)
//   2 one fence bar.sync over the CTA; thread 0: fence.acq_rel.cluster; every thread:
//               arrive.relaxed; wait.acquire
//   3 warp fence __syncwarp; lane 0 of each warp: fence.acq_rel.cluster; arrive.relaxed; wait
//               (a warp's lanes are ordered by __syncwarp only, so this one is racy by the model)
//   4 warp0 release  bar.sync over the CTA; warp 0: arrive.release (cumulative over what bar.sync
//               ordered), every other warp: arrive.relaxed; wait.acquire (the kernels' switch
//               FINEGEMM_DIAG_SPLIT_CLUSTER_ONE_FENCE)
// --stores: each thread also stores one word to global memory before the barrier (the epilogue's
// outstanding writes a fence must wait for).
//
// Build (no GPU needed): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//   scripts/probe_cluster_fence.cu -o probe_cluster_fence
// Run: probe_cluster_fence [--clusters 66] [--iters 64] [--stores]
// Output: one JSON line per form: median / max over CTAs of the cycles per iteration, mismatches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kThreads = 384;

__device__ __forceinline__ uint32_t cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t ld_peer(const uint32_t* local, uint32_t peer) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local)), remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(peer));
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(remote) : "memory");
  return v;
}

template <int kForm>
__device__ __forceinline__ void publish() {
  if constexpr (kForm == 0) {
    asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  } else if constexpr (kForm == 1) {
    asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
  } else if constexpr (kForm == 2) {
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("fence.acq_rel.cluster;\n" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
  } else if constexpr (kForm == 4) {
    __syncthreads();
    if (threadIdx.x / 32 == 0) {
      asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
    } else {
      asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
    }
  } else {
    __syncwarp();
    if (threadIdx.x % 32 == 0) asm volatile("fence.acq_rel.cluster;\n" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

template <int kForm>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1)
    probe(int iters, bool stores, uint32_t* sink, unsigned long long* cycles, unsigned int* bad) {
  __shared__ uint32_t buf[kThreads];
  __shared__ uint32_t last[kThreads];  // each thread's last word read from the peer (see below)
  const uint32_t peer = cta_rank() ^ 1u;
  unsigned int wrong = 0;
  buf[threadIdx.x] = 0;
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
  const long long t0 = clock64();
  for (int i = 1; i <= iters; ++i) {
    buf[threadIdx.x] = static_cast<uint32_t>(i);
    if (stores) sink[(blockIdx.x * kThreads + threadIdx.x) * 32 + (i & 31)] = static_cast<uint32_t>(i);
    publish<kForm>();
    const uint32_t seen = ld_peer(&buf[threadIdx.x], peer);
    wrong += seen != static_cast<uint32_t>(i);
    // The peer must have read this iteration's word before it is overwritten (and before this
    // CTA exits). A relaxed arrive does not wait for this thread's outstanding remote load: the
    // first run of this probe (H100, 2026-12-07) counted mismatches in every form and faulted once
    // (a load from an exited CTA). Storing the loaded word first makes the thread wait for it, as
    // the kernels' split exit does (its remote loads feed the stored sums before it arrives).
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(&last[threadIdx.x]))),
                 "r"(seen)
                 : "memory");
    asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
  }
  const long long t1 = clock64();
  if (wrong) atomicAdd(bad, wrong);
  if (threadIdx.x == 0) cycles[blockIdx.x] = static_cast<unsigned long long>(t1 - t0);
}

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

template <int kForm>
void run(const char* name, int clusters, int iters, bool stores) {
  const int ctas = 2 * clusters;
  uint32_t* sink;
  unsigned long long* cycles;
  unsigned int* bad;
  CHECK(cudaMalloc(&sink, sizeof(uint32_t) * ctas * kThreads * 32));
  CHECK(cudaMalloc(&cycles, sizeof(unsigned long long) * ctas));
  CHECK(cudaMalloc(&bad, sizeof(unsigned int)));
  CHECK(cudaMemset(bad, 0, sizeof(unsigned int)));
  for (int warm = 0; warm < 2; ++warm) {
    probe<kForm><<<ctas, kThreads>>>(iters, stores, sink, cycles, bad);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> c(ctas);
  unsigned int wrong = 0;
  CHECK(cudaMemcpy(c.data(), cycles, sizeof(unsigned long long) * ctas, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&wrong, bad, sizeof(unsigned int), cudaMemcpyDeviceToHost));
  std::sort(c.begin(), c.end());
  // Each iteration holds two cluster barriers: the form's and the plain relaxed one after the reads.
  std::printf("{\"form\": \"%s\", \"clusters\": %d, \"iters\": %d, \"stores\": %s, \"cycles_per_iter_median\": %.1f, "
              "\"cycles_per_iter_max\": %.1f, \"mismatches\": %u}\n",
              name, clusters, iters, stores ? "true" : "false", double(c[ctas / 2]) / iters,
              double(c.back()) / iters, wrong);
  CHECK(cudaFree(sink));
  CHECK(cudaFree(cycles));
  CHECK(cudaFree(bad));
}

}  // namespace

int main(int argc, char** argv) {
  int clusters = 66, iters = 64;
  bool stores = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--clusters") && i + 1 < argc) {
      clusters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--stores")) {
      stores = true;
    } else {
      std::fprintf(stderr, "usage: %s [--clusters N] [--iters N] [--stores]\n", argv[0]);
      return 2;
    }
  }
  if (clusters < 1 || iters < 1) {
    std::fprintf(stderr, "--clusters and --iters must be >= 1\n");
    return 2;
  }
  run<0>("release", clusters, iters, stores);
  run<1>("relaxed", clusters, iters, stores);
  run<2>("one_fence", clusters, iters, stores);
  run<3>("warp_fence", clusters, iters, stores);
  run<4>("warp0_release", clusters, iters, stores);
  return 0;
}
