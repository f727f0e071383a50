// Rows of the A (and FP8 sfa) TMA boxes of the dense FP8 1D2D and BF16 kernels: plain C++ shared
// by the kernels (the stage's transaction count) and their host launchers (the boxes they
// encode), so the two cannot disagree: a box smaller than the count would hang the stage's
// barrier, a larger one complete it early.
//
// Why fit the box at all: rows of a TMA box past the tensor's end are zero-filled, not free. A
// BF16 M = 65 GEMM whose second 64-row m-block holds one valid row ran 2.3x torch.matmul's time,
// and FP8 M = 1 ran 16% slower on 4096x7168 with 64-row boxes than with 8-row ones
// (benchmarks/NOTES.md v0.68, v0.69). So where it applies, the LAST m-block of A (the only partial
// one; the first when M < BLOCK_M) is loaded through a second map, tmap_a_last, whose box holds
// round_up(M mod BLOCK_M, 8) rows: whole 8-row swizzle atoms, so the rows it loads land where a
// full box would put them. The stage rows past them stay stale and only feed accumulator rows
// >= M, which no epilogue stores. The FP8 sfa box (one map for every m-block, 4 bytes a row) has
// tmap_a's rows: first_a_box_rows.
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
// mc_a: A multicast (each CTA of the pair loads half the box), which keeps full boxes.
// FINEGEMM_DIAG_FULL_A_BOX (ptx/diag.cuh; FINEGEMM_EXTRA_NVCC_FLAGS reaches the host library too)
// keeps full boxes everywhere: the A/B baseline of the fit.
FG_BOX_ROWS_HD constexpr bool fitted_boxes_apply(bool applies, bool mc_a) {
#if defined(FINEGEMM_DIAG_FULL_A_BOX)
  return (void)applies, (void)mc_a, false;
#else
  return applies && !mc_a;
#endif
}

// Rows of the last m-block's A box (tmap_a_last); every other m-block loads BLOCK_M rows.
FG_BOX_ROWS_HD constexpr uint32_t last_a_box_rows(uint32_t m, uint32_t block_m, bool applies, bool mc_a) {
  return (fitted_boxes_apply(applies, mc_a) && m % block_m != 0) ? (m % block_m + 7u) / 8u * 8u : block_m;
}

// Rows of tmap_a's box (and the FP8 sfa box's): BLOCK_M, or the fitted rows when the last m-block
// is the only one.
FG_BOX_ROWS_HD constexpr uint32_t first_a_box_rows(uint32_t m, uint32_t block_m, bool applies, bool mc_a) {
  return m < block_m ? last_a_box_rows(m, block_m, applies, mc_a) : block_m;
}

#if !defined(FINEGEMM_DIAG_FULL_A_BOX)
static_assert(last_a_box_rows(1, 64, true, false) == 8 && last_a_box_rows(64, 64, true, false) == 64 &&
                  last_a_box_rows(100, 128, true, false) == 104 && last_a_box_rows(1, 128, true, true) == 128 &&
                  last_a_box_rows(1, 128, false, false) == 128 && last_a_box_rows(65, 64, true, false) == 8 &&
                  last_a_box_rows(4097, 128, true, false) == 8 && last_a_box_rows(4096, 128, true, false) == 128 &&
                  last_a_box_rows(200, 128, true, false) == 72,
              "fitted last A rows");
static_assert(first_a_box_rows(100, 128, true, false) == 104 && first_a_box_rows(200, 128, true, false) == 128 &&
                  first_a_box_rows(65, 64, true, false) == 64 && first_a_box_rows(17, 64, true, false) == 24,
              "fitted first A / sfa rows");
#endif

}  // namespace impls
}  // namespace finegemm

#undef FG_BOX_ROWS_HD
