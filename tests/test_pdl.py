"""Programmatic dependent launch (finegemm.set_pdl), without a GPU.

- The setting reaches the host library, whichever of set_pdl and the library's loading comes first.
- Every GEMM kernel kind waits for its predecessor grid (griddepcontrol.wait: SASS ACQBULK) before
  its first global-memory instruction, and lets its dependents launch (PREEXIT). A kernel launched
  with the PDL attribute that touched global memory before the wait would race with the kernel
  before it, so this is checked on the SASS of one kernel of every template and epilogue.
The GPU side (results bitwise equal with and without PDL, eager and in graphs) is
tests/gpu/test_pdl_gpu.py.
"""
from __future__ import annotations

import re

import pytest

import finegemm
from finegemm import jit, runtime
from finegemm.jit import runtime as jit_runtime

from sass_tools import instructions, sass


@pytest.fixture
def pdl_off_after():
    yield
    finegemm.set_pdl(False)


@pytest.mark.nvcc
def test_set_pdl_reaches_the_loaded_host_library(pdl_off_after):
    lib = jit.host_library()
    assert lib.fg_get_pdl() == 0
    finegemm.set_pdl(True)
    assert finegemm.get_pdl() is True and lib.fg_get_pdl() == 1
    finegemm.set_pdl(False)
    assert finegemm.get_pdl() is False and lib.fg_get_pdl() == 0


@pytest.mark.nvcc
def test_host_library_takes_the_setting_made_before_it_loaded(monkeypatch, pdl_off_after):
    jit.host_library()
    monkeypatch.setattr(jit_runtime, "_lib", None)  # as if not loaded yet: set_pdl only records it
    finegemm.set_pdl(True)
    lib = jit_runtime.host_library()  # a new handle on the same library: loading pushes the setting
    assert lib.fg_get_pdl() == 1


def test_set_pdl_rejects_non_bool():
    with pytest.raises(TypeError, match="enable must be a bool"):
        finegemm.set_pdl(1)
    assert runtime.get_pdl() is False


# SASS memory instructions that reach global memory (or may: generic LD / ST), and TMA / bulk copies.
_GLOBAL_OP = re.compile(r"^(?:@!?U?P\w+\s+)?(LDG|STG|LD|ST|ATOMG|ATOM|RED|REDG|UTMALDG|UTMASTG|UTMAREDG|UBLKCP|UBLKRED|"
                        r"LDGSTS)\b")


def _kernels() -> list[tuple[str, str]]:
    from finegemm.ops import sm90_bf16_gemm as bf16
    from finegemm.ops import sm90_fp8_gemm as fp8

    return [
        ("fp8_bm128_bn128", fp8.render(128, 128, 4, False, False, False)),
        ("fp8_bm64_bn64_f32_c_splitk", fp8.render(64, 64, 8, True, True, True)),
        ("fp8_bm128_bn112_mcb_tmas", fp8.render(128, 112, 4, False, False, False, 2, False, False, True)),
        ("fp8_bm128_bn256_serial_halves_tmas", fp8.render(128, 256, 3, False, False, False, 1, False, True, True)),
        ("fp8_contiguous", fp8.render(128, 128, 4, False, False, False, 2, True, tma_store=True,
                                      gemm_kind=fp8.GEMM_GROUPED_CONTIGUOUS)),
        ("fp8_masked", fp8.render(64, 128, 6, False, False, False, tma_store=True, gemm_kind=fp8.GEMM_GROUPED_MASKED)),
        ("fp8_1d1d_c_splitk", fp8.render(128, 64, 6, True, True, True, one_d_one_d=True)),
        ("fp8_k_grouped", fp8.render(128, 128, 4, True, True, False, tma_store=True, gemm_kind=fp8.GEMM_K_GROUPED,
                                     one_d_one_d=True)),
        ("bf16_nt", bf16.render(128, 128, 4, False, False, False, False)),
        ("bf16_tt_splitk", bf16.render(64, 64, 6, True, True, True, False)),
        ("bf16_nn_tmas", bf16.render(128, 128, 4, False, True, False, True)),
        ("bf16_masked", bf16.render_grouped(128, 128, 4, bf16.GEMM_GROUPED_MASKED)),
        ("bf16_contiguous", bf16.render_grouped(128, 128, 4, bf16.GEMM_GROUPED_CONTIGUOUS)),
        ("bf16_k_grouped", bf16.render_k_grouped(128, 128, 4)),
    ]


@pytest.mark.nvcc
def test_every_gemm_kernel_waits_for_its_predecessor_before_touching_global_memory():
    reports = jit.compile_check(_kernels(), raise_on_failure=False)
    failed = [(r["label"], r["reasons"], r["error"]) for r in reports if not r["ok"]]
    assert not failed, failed
    checked = 0
    for r in reports:
        text = sass(r["cubin"])
        if text is None:  # no cuobjdump here (CI): the ptxas checks above still ran
            continue
        ops = [op for _, op in instructions(text)]
        assert any(op == "ACQBULK" for op in ops), f"{r['label']}: no griddepcontrol.wait"
        assert any(op == "PREEXIT" for op in ops), f"{r['label']}: no griddepcontrol.launch_dependents"
        wait_at = next(i for i, op in enumerate(ops) if op == "ACQBULK")
        early = [op for op in ops[:wait_at] if _GLOBAL_OP.match(op)]
        assert not early, f"{r['label']}: global memory accessed before griddepcontrol.wait: {early}"
        checked += 1
    if checked == 0:
        pytest.skip("no cuobjdump: only the compile was checked")


def test_global_op_pattern():
    """The detector above on synthetic SASS operations."""
    for op in ("LDG.E.64 R2, desc[UR4][R2.64]", "@P0 STG.E [R2.64], R5", "UTMALDG.2D [UR8], [UR4]",
               "ATOMG.E.ADD.STRONG.GPU PT, R3, desc[UR6][R4.64], R7", "RED.E.ADD.F32 [R2.64], R4",
               "@!UP0 UTMASTG.2D [UR4], [UR6]", "LD.E R4, [R2.64]"):
        assert _GLOBAL_OP.match(op), op
    for op in ("LDS R4, [R2]", "STS [R3], R4", "LDC R1, c[0x0][0x28]", "SYNCS.EXCH.64 URZ, [UR4+0x10], UR6",
               "UTMACCTL.PF [UR6]", "BAR.SYNC.DEFER_BLOCKING 0x0", "ACQBULK"):
        assert not _GLOBAL_OP.match(op), op


@pytest.mark.nvcc
def test_no_pdl_diagnostic_build_leaves_the_instructions_out(monkeypatch):
    """FINEGEMM_DIAG_NO_PDL (ptx/diag.cuh, for A/Bs of what the two instructions cost) removes
    exactly them; the default build's check above is therefore not vacuous."""
    monkeypatch.setenv("FINEGEMM_EXTRA_NVCC_FLAGS", "-DFINEGEMM_DIAG_NO_PDL")
    kernels = [k for k in _kernels() if k[0] in ("fp8_masked", "bf16_nt")]
    reports = jit.compile_check(kernels, raise_on_failure=False)
    assert all(r["ok"] for r in reports), [(r["label"], r["reasons"]) for r in reports]
    for r in reports:
        text = sass(r["cubin"])
        if text is None:
            pytest.skip("no cuobjdump")
        ops = {op for _, op in instructions(text)}
        assert "ACQBULK" not in ops and "PREEXIT" not in ops, r["label"]
