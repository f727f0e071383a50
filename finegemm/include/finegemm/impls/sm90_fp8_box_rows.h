// Rows of the FP8 1D2D kernel's A / sfa TMA boxes: plain C++ shared by the kernel
// (impls/sm90_fp8_gemm_1d2d.cuh, the stage's transaction count) and its host launcher
// (host/sm90_fp8_gemm.cpp, the boxes it encodes), so the two cannot disagree: a box smaller than
// the count would hang the stage's barrier, a larger one complete it early.
//
// Why fit the box at all: rows of a TMA box past the tensor's end are zero-filled, not free. A
// BF16 data path over 128-row boxes with 65-100 valid rows took up to 1.8x the time of 128 valid
// rows, and FP8 M = 1 ran 12-28% slower than M = 64 on long-K weights (benchmarks/NOTES.md v0.68).
// A single m-block of the dense kind without A multicast therefore loads round_up(m, 8) rows (whole
// 8-row swizzle atoms, so the rows it loads land where a full box would put them); the stage rows
// past them stay stale and only feed accumulator rows >= m, which no epilogue stores.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FG_BOX_ROWS_HD __host__ __device__
#else
#define FG_BOX_ROWS_HD
#endif

namespace finegemm {
namespace impls {

// dense_1d2d: the dense kind (not grouped) with recipe (1, 128, 128); mc_a: A multicast (each CTA
// of the pair loads half the box), which keeps the full box.
FG_BOX_ROWS_HD constexpr uint32_t fp8_fitted_a_rows(uint32_t m, uint32_t block_m, bool dense_1d2d, bool mc_a) {
  return (dense_1d2d && !mc_a && m < block_m) ? (m + 7u) / 8u * 8u : block_m;
}

static_assert(fp8_fitted_a_rows(1, 64, true, false) == 8 && fp8_fitted_a_rows(64, 64, true, false) == 64 &&
                  fp8_fitted_a_rows(100, 128, true, false) == 104 && fp8_fitted_a_rows(1, 128, true, true) == 128 &&
                  fp8_fitted_a_rows(1, 128, false, false) == 128,
              "fitted A rows");

}  // namespace impls
}  // namespace finegemm

#undef FG_BOX_ROWS_HD
