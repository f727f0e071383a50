"""The SASS k-loop finder of the compile tests, on synthetic SASS (runs without nvcc / cuobjdump)."""
from __future__ import annotations

import pytest
from sass_tools import assert_k_loops_keep_smem_base, wgmma_k_loops


def _sass(*ops: str) -> str:
    return "\n".join(f"        /*{16 * i:04x}*/                   {op} ;   /* 0x0 */" for i, op in enumerate(ops))


def _kernel(loop_body: list[str]) -> str:
    """A tile loop around a k-loop (body loop_body), the k-loop's mbarrier retry block out of line at
    the end of the function (a backward branch into the k-loop), and an epilogue S2UR per tile."""
    n = len(loop_body)
    k_start = 3
    retry = k_start + n + 4
    return _sass(
        "S2UR UR4, SR_CgaCtaId",                     # 0: once per kernel
        "MOV R1, RZ",                                # 1: tile loop head
        "S2UR UR5, SR_CgaCtaId",                     # 2: once per tile: allowed
        *loop_body,                                  # k-loop: k_start .. k_start + n - 1
        f"@!P0 BRA 0x{16 * retry:x}",               # the wait's retry, out of line
        f"@!P1 BRA 0x{16 * k_start:x}",             # k-loop back edge
        "S2UR UR6, SR_CgaCtaId",                     # epilogue
        "@!P2 BRA 0x10",                             # tile loop back edge
        "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R2",  # retry block
        f"BRA 0x{16 * (k_start + 1):x}",             # back into the k-loop
        "EXIT",
    )


def test_finds_the_innermost_wgmma_loop_not_the_retry_block_or_tile_loop():
    body = ["SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R2", "HGMMA.64x256x16.F32.BF16 R24, gdesc[UR20], R24",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1"]
    loops = wgmma_k_loops(_kernel(body))
    assert len(loops) == 1
    assert loops[0][:3] == body
    assert_k_loops_keep_smem_base(_kernel(body), "clean")  # the per-tile and per-kernel S2URs are fine


def test_flags_an_s2ur_inside_the_k_loop():
    body = ["S2UR UR12, SR_CgaCtaId", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R2",
            "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR12], R24"]
    with pytest.raises(AssertionError, match="S2UR inside a wgmma k-loop"):
        assert_k_loops_keep_smem_base(_kernel(body), "remat")


def test_no_wgmma_loop_is_an_error():
    with pytest.raises(AssertionError, match="no wgmma k-loop"):
        assert_k_loops_keep_smem_base(_kernel(["NOP", "NOP"]), "none")
