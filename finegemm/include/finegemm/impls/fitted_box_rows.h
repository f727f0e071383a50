// Rows of the A (and FP8 sfa) TMA boxes of the dense FP8 1D2D and BF16 kernels: plain C++ shared
// by the kernels (the stage's transaction count) and their host launchers (the boxes they
// encode), so the two cannot disagree: a box smaller than
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

// applies: FP8, the dense kind with recipe (1, 128, 128); BF16, the dense kind with K-major A.
// mc_a: A multicast (each CTA of the pair loads half the box), which keeps the full box.
// FINEGEMM_DIAG_FULL_A_BOX (ptx/diag.cuh; FINEGEMM_EXTRA_NVCC_FLAGS reaches the host library too)
// keeps the full box everywhere: the A/B baseline of the fit.
FG_BOX_ROWS_HD constexpr uint32_t fitted_a_box_rows(uint32_t m, uint32_t block_m, bool applies, bool mc_a) {
#if defined(FINEGEMM_DIAG_FULL_A_BOX)
  return (void)m, (void)applies, (void)mc_a, block_m;
#else
  return (applies && !mc_a && m < block_m) ? (m + 7u) / 8u * 8u : block_m;
#endif
}

#if !defined(FINEGEMM_DIAG_FULL_A_BOX)
static_assert(fitted_a_box_rows(1, 64, true, false) == 8 && fitted_a_box_rows(64, 64, true, false) == 64 &&
                  fitted_a_box_rows(100, 128, true, false) == 104 && fitted_a_box_rows(1, 128, true, true) == 128 &&
                  fitted_a_box_rows(1, 128, false, false) == 128,
              "fitted A rows");
#endif

}  // namespace impls
}  // namespace finegemm

#undef FG_BOX_ROWS_HD
