"""FINEGEMM_DIAG_FFMA_YIELD: the cubin edit of the FP8 promotion's FFMA hints (jit/sass_patch.py).
The listing parser and run finder on a synthetic listing; the edit itself on a compiled FP8 kernel
(nvcc; cuobjdump from the toolkit or Triton's wheel, else skipped)."""
from __future__ import annotations

import struct
import subprocess

import pytest

from finegemm import jit
from finegemm.jit import compiler
from finegemm.jit import sass_patch as sp


def _listing(instrs, function="k"):
    lines = ["\tcode for sm_90a", f"\t\tFunction : {function}"]
    for addr, text, low, high in instrs:
        lines.append(f"        /*{addr:04x}*/                   {text} /* {low:#018x} */")
        lines.append(f"                                                  /* {high:#018x} */")
    return "\n".join(lines) + "\n"


def _ffma(i, reuse):
    return f"FFMA R{10 + i}, R{40 + i}, R2{'.reuse' if reuse else ''}, R{10 + i} ;"


def test_parse_and_runs_on_a_synthetic_listing():
    instrs = [(0x0, "MOV R1, c[0x0][0x28] ;", 1, 2)]
    instrs += [(0x10 + 16 * i, _ffma(i, i % 2 == 1), 100 + i, sp.YIELD_BIT | sp.REUSE_B_BIT if i % 2 else 0)
               for i in range(9)]
    instrs += [(0xA0, "IADD3 R1, R1, 0x1, RZ ;", 3, 4)]
    instrs += [(0xB0 + 16 * i, _ffma(i, False), 7, 0) for i in range(5)]  # a short run
    instrs += [(0x200 + 16 * i, "@P0 " + _ffma(i, False), 7, 0) for i in range(4)]  # an address gap ...
    instrs += [(0x300 + 16 * i, _ffma(i, False), 7, 0) for i in range(4)]  # ... splits 8 into 4 + 4
    parsed = sp.parse_sass(_listing(instrs))
    assert len(parsed) == len(instrs)
    assert parsed[1].opcode == "FFMA" and parsed[0].opcode == "MOV" and parsed[-5].opcode == "FFMA"
    assert (parsed[1].low, parsed[2].high) == (100, sp.YIELD_BIT | sp.REUSE_B_BIT)
    runs = sp.ffma_runs(parsed)
    assert [len(r) for r in runs] == [9]
    assert [len(r) for r in sp.ffma_runs(parsed, min_run=4)] == [9, 5, 4, 4]


def _fp8_kernel(fg_cache_dir):
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    cfg = h.make_config(4096, 7168, 7168, 132, False, False, 128, 128, 5)
    return jit.build_cubin(ops._kernel_name(cfg), ops._render_cfg(cfg)), cfg, ops


@pytest.mark.nvcc
def test_yield_edit_changes_only_the_hints_of_reused_promotion_ffmas(fg_cache_dir):
    tool = compiler.find_cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (CUDA toolkit or Triton's wheel)")
    cubin, _cfg, _ops = _fp8_kernel(fg_cache_dir)
    raw = cubin.read_bytes()
    listing = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    before = sp.parse_sass(listing)
    runs = sp.ffma_runs(before)
    assert runs, "the FP8 kernel's promotion has FFMA runs"
    targets = {(i.function, i.address) for r in runs for i in r
               if i.high & (sp.REUSE_B_BIT | sp.YIELD_BIT) == sp.REUSE_B_BIT | sp.YIELD_BIT}
    assert targets, "nvcc marks part of each run reused / no-yield (what the edit clears)"

    edited, changed = sp.yield_ffma_runs(raw, listing)
    assert changed == len(targets)
    assert len(edited) == len(raw)
    patched = cubin.parent / "edited.cubin"
    patched.write_bytes(edited)
    after = sp.parse_sass(subprocess.run([tool, "-sass", str(patched)], capture_output=True, text=True,
                                         check=True).stdout)
    assert len(after) == len(before)
    for b, a in zip(before, after):
        if (b.function, b.address) in targets:
            assert a.low == b.low and a.high == b.high & ~(sp.REUSE_B_BIT | sp.YIELD_BIT)
            assert a.text == b.text.replace(".reuse", "")
        else:
            assert a == b
    # Bytes differ in the targets' high words only (two bytes each: bits 45 and 59).
    assert sum(x != y for x, y in zip(raw, edited)) == 2 * changed

    # "none": every FFMA of a run gets the no-yield hint; the reuse flags stay.
    held, held_n = sp.no_yield_ffma_runs(raw, listing)
    free = [i for r in runs for i in r if not i.high & sp.YIELD_BIT]
    assert held_n == len(free) > 0
    held_file = cubin.parent / "held.cubin"
    held_file.write_bytes(held)
    held_after = sp.parse_sass(subprocess.run([tool, "-sass", str(held_file)], capture_output=True, text=True,
                                              check=True).stdout)
    freed = {(i.function, i.address) for i in free}
    for b, a in zip(before, held_after):
        assert a.high == (b.high | sp.YIELD_BIT if (b.function, b.address) in freed else b.high)
        assert a.low == b.low and a.text == b.text
    assert sp.edit_ffma_hints(raw, listing, "none") == (held, held_n)
    assert sp.edit_ffma_hints(raw, listing, "all") == (edited, changed)
    with pytest.raises(ValueError, match="unknown FFMA hint mode"):
        sp.edit_ffma_hints(raw, listing, "some")

    _, fewer = sp.yield_ffma_runs(raw, listing, 9 / 16)
    assert 0 < fewer < changed
    with pytest.raises(ValueError, match="fraction"):
        sp.yield_ffma_runs(raw, listing, 0.0)
    # A listing that is not this cubin's: refused, nothing written.
    tampered = listing.replace(f"{runs[0][1].low:#018x}", f"{runs[0][1].low ^ 1:#018x}", 1)
    with pytest.raises(ValueError, match="not the listed"):
        sp.yield_ffma_runs(raw, tampered)
    with pytest.raises(ValueError, match="ELF64"):
        sp.yield_ffma_runs(b"\0" * 64, listing)


@pytest.mark.nvcc
def test_switch_builds_an_edited_kernel_under_its_own_key(fg_cache_dir, monkeypatch):
    if compiler.find_cuobjdump() is None:
        pytest.skip("no cuobjdump (CUDA toolkit or Triton's wheel)")
    plain, cfg, ops = _fp8_kernel(fg_cache_dir)
    monkeypatch.setenv("FINEGEMM_DIAG_FFMA_YIELD", "9/16")
    assert "-DFINEGEMM_DIAG_FFMA_YIELD_9_16" in jit.kernel_flags()
    edited = jit.build_cubin(ops._kernel_name(cfg), ops._render_cfg(cfg))
    assert edited != plain and edited.parent.name != plain.parent.name
    log = (edited.parent / "build.log").read_text()
    assert "FINEGEMM_DIAG_FFMA_YIELD=9/16 edited the hints of" in log
    raw, new = plain.read_bytes(), edited.read_bytes()
    assert len(raw) == len(new) and raw != new
    listing = subprocess.run([compiler.find_cuobjdump(), "-sass", str(plain)], capture_output=True, text=True,
                             check=True).stdout
    assert sp.yield_ffma_runs(raw, listing, 9 / 16)[0] == new  # the nvcc define changes no code


def test_switch_values(monkeypatch):
    monkeypatch.delenv("FINEGEMM_DIAG_FFMA_YIELD", raising=False)
    assert compiler.ffma_yield_mode() is None
    assert not any("FFMA_YIELD" in f for f in jit.kernel_flags())
    tags = set()
    for mode in sp.MODES:
        monkeypatch.setenv("FINEGEMM_DIAG_FFMA_YIELD", mode)
        assert compiler.ffma_yield_mode() == mode
        tags |= {f for f in jit.kernel_flags() if "FFMA_YIELD" in f}
    assert len(tags) == len(sp.MODES) == 3  # a cache key per mode
    monkeypatch.setenv("FINEGEMM_DIAG_FFMA_YIELD", "half")
    with pytest.raises(ValueError, match="FINEGEMM_DIAG_FFMA_YIELD"):
        jit.kernel_flags()


def test_elf_sections_of_a_minimal_elf():
    # One section-name table and one .text.k section, laid out by hand.
    names = b"\0.shstrtab\0.text.k\0"
    text = struct.pack("<QQ", 1, 2)
    shoff = 64 + len(names) + len(text)
    elf = bytearray(64)
    elf[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", elf, 0x28, shoff)
    struct.pack_into("<HHH", elf, 0x3A, 64, 3, 1)
    elf += names + text
    elf += bytes(64)  # the null section
    elf += struct.pack("<IIQQQQ", 1, 3, 0, 0, 64, len(names)) + bytes(64 - 40)
    elf += struct.pack("<IIQQQQ", 11, 1, 0, 0, 64 + len(names), len(text)) + bytes(64 - 40)
    assert sp._text_sections(bytes(elf)) == {"k": 64 + len(names)}
