"""CPU tests of the k-grouped tn GEMM's K-major copies (finegemm/ops/k_major_copy.py): the grouped
kernel's launch plan (which groups it takes, chunks of 64, tile ranges), a byte-level model of its
tile algorithm (swizzled shared-memory pieces, column gathers, the __byte_perm transpose) against a
plain transpose, and with nvcc: both kernels compile without spills or local memory.
The GPU tests (bitwise against torch, guard bytes, the tn GEMM) are in tests/gpu/test_fp8_wgrad_gpu.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from finegemm.ops import k_major_copy as kc


def _g(rows, cols, src=0x1000, dst=0x100000, ld=None):
    return kc.GroupCopy(src, dst, rows, cols, cols if ld is None else ld)


# ----------------------------------------------------------------------------- launch plan
def test_plan_takes_aligned_groups_and_leaves_the_rest():
    groups = [_g(128, 4096), _g(256, 33), _g(0, 4096), _g(128, 0), _g(128, 2112, src=0x1008), _g(384, 7168, ld=7184),
              _g(384, 7168, ld=7176), _g(136, 4096), _g(128, 4096, dst=0x100004)]
    launches, rest = kc.plan_grouped_copies(groups)
    assert len(launches) == 1
    assert [g for g, _, _ in launches[0]] == [groups[0], groups[5]]  # empty groups dropped
    assert rest == [groups[1], groups[4], groups[6], groups[7], groups[8]]  # cols, src, pitch, rows, dst


def test_plan_tile_ranges_cover_each_group_once():
    groups = [_g(128 * (i % 5 + 1), 16 * (i % 11 + 1) + 128 * (i % 3)) for i in range(150)]
    launches, rest = kc.plan_grouped_copies(groups)
    assert not rest
    assert [len(l) for l in launches] == [64, 64, 22]
    flat = [item for launch in launches for item in launch]
    assert [g for g, _, _ in flat] == groups  # order kept
    for launch in launches:
        expect = 0
        for g, start, tiles_c in launch:
            assert start == expect and tiles_c == -(-g.cols // 128)
            expect += tiles_c * -(-g.rows // 128)
        assert kc.launch_tiles(launch) == expect


def test_parameter_block_matches_the_kernel_struct():
    import ctypes

    # struct GroupCopy: two pointers + five long longs; GroupCopies: two ints + MAX_GROUPS of them;
    # the whole block must fit the classic 4 KB kernel-parameter limit.
    assert ctypes.sizeof(kc._GroupCopyParams) == 56
    assert kc._GroupCopiesParams.group.offset == 8
    assert ctypes.sizeof(kc._GroupCopiesParams) == 8 + 56 * kc.MAX_GROUPS_PER_LAUNCH <= 4096
    assert f"GroupCopy group[{kc.MAX_GROUPS_PER_LAUNCH}];" in kc.render_grouped_transpose_u8()


# ----------------------------------------------------------------------------- the tile algorithm
def _byte_perm(x: int, y: int, s: int) -> int:
    b = [(x >> (8 * i)) & 0xFF for i in range(4)] + [(y >> (8 * i)) & 0xFF for i in range(4)]
    return sum(b[(s >> (4 * i)) & 7] << (8 * i) for i in range(4))


def _model_grouped_tile(src: np.ndarray, rows: int, cols: int, r0: int, c0: int, dst: np.ndarray) -> None:
    """The grouped kernel's block, thread by thread, in bytes (src [rows, cols], dst [cols * rows])."""
    smem = np.zeros((128, 8, 16), dtype=np.uint8)  # [row][physical piece][byte]
    for tid in range(256):
        piece, band_row = tid & 7, tid >> 3
        for i in range(4):
            row = band_row + 32 * i
            r, c = r0 + row, c0 + 16 * piece
            v = src[r, c:c + 16] if (r < rows and c < cols) else np.zeros(16, np.uint8)
            smem[row, piece ^ ((row >> 4) & 7)] = v
    words = smem.reshape(-1).view("<u4")
    banks = {}
    for tid in range(256):
        lane, warp = tid & 31, tid >> 5
        q, c4 = lane >> 2, 4 * warp + (lane & 3)
        col = [[0] * 4 for _ in range(4)]
        for m in range(4):
            idx = [(16 * q + 4 * m + e) * 32 + 4 * (warp ^ q) + (lane & 3) for e in range(4)]
            for e in range(4):
                banks.setdefault((warp, m, e), []).append(idx[e] % 32)
            w = [int(words[i]) for i in idx]
            t0, t1 = _byte_perm(w[0], w[1], 0x5140), _byte_perm(w[2], w[3], 0x5140)
            t2, t3 = _byte_perm(w[0], w[1], 0x7362), _byte_perm(w[2], w[3], 0x7362)
            col[0][m], col[1][m] = _byte_perm(t0, t1, 0x5410), _byte_perm(t0, t1, 0x7632)
            col[2][m], col[3][m] = _byte_perm(t2, t3, 0x5410), _byte_perm(t2, t3, 0x7632)
        r = r0 + 16 * q
        if r < rows:
            for j in range(4):
                c = c0 + 4 * c4 + j
                if c < cols:
                    dst[c * rows + r:c * rows + r + 16] = np.array(col[j], dtype="<u4").view(np.uint8)
    # every column read of a warp touches 32 distinct banks (no shared-memory conflicts)
    assert all(len(set(b)) == 32 for b in banks.values())


@pytest.mark.parametrize("rows, cols", [(128, 128), (256, 144), (128, 48), (384, 272)])
def test_grouped_tile_algorithm_transposes(rows, cols):
    rng = np.random.default_rng(rows + cols)
    src = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    dst = np.full(cols * rows + 64, 0xA5, dtype=np.uint8)  # guard bytes past the end
    tiles_c = -(-cols // 128)
    for t in range(tiles_c * -(-rows // 128)):
        _model_grouped_tile(src, rows, cols, 128 * (t // tiles_c), 128 * (t % tiles_c), dst)
    assert np.array_equal(dst[:cols * rows], src.T.reshape(-1))
    assert (dst[cols * rows:] == 0xA5).all()


# ----------------------------------------------------------------------------- nvcc
@pytest.mark.nvcc
def test_copy_kernels_compile_without_spills():
    from finegemm import jit

    reports = jit.compile_check(["k_major_copy_u8", "k_major_copy_u8_grouped"], raise_on_failure=False)
    assert len(reports) == 2
    assert sorted(r["family"] for r in reports) == ["k_major_copy_u8", "k_major_copy_u8_grouped"]
    for r in reports:
        assert r["ok"], r
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0 and r["lmem"] == 0, r
