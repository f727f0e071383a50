"""Scheduling-hint edits of a compiled cubin: the FP8 promotion's FFMA runs (developer diagnostic).

Each SM90 instruction is 128 bits; cuobjdump prints its low and high 64-bit words as two hex
comments. The high word carries the control bits: bit 45 (bit 109 of the instruction) is the
yield hint, bits 58-61 (122-125) the operand reuse-cache flags, bit 59 that of the second source.
nvcc 13 sets, in the promotion's runs of FFMAs (d += scale * acc, one scale register read by the
whole run), reuse on the scale operand and the no-yield hint on every other FFMA; the others may
yield. DeepGEMM found that letting more of these FFMAs yield (and so dropping their reuse, which a
warp switch would invalidate) overlaps the promotion better with the other warpgroup's wgmmas.

`yield_ffma_runs` clears both bits on the reused FFMAs of every run of at least MIN_RUN FFMAs (or
of the first `fraction` of each run); `no_yield_ffma_runs` does the opposite, setting the no-yield
hint on every FFMA of a run. Both bits are hints: clearing a reuse flag makes the next
instruction read its operand from the register file; the yield hint only lets the scheduler switch
warps. Stall counts and scoreboard barriers, which order the instructions, are untouched. The edit
is checked byte for byte: every patched word must be the one cuobjdump printed at that address.
"""
from __future__ import annotations

import dataclasses
import re
import struct

MIN_RUN = 8  # FFMAs in a row: the promotion's runs (shorter runs are address or epilogue math)
YIELD_BIT = 1 << 45
REUSE_B_BIT = 1 << 59
# FINEGEMM_DIAG_FFMA_YIELD: "all" / "9/16": the reused FFMAs of each run (or of its first 9/16) may
# yield; "none": no FFMA of a run may yield (the hint set on the ones nvcc let yield).
MODES = {"all": 1.0, "9/16": 9 / 16, "none": 0.0}

_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*/\*\s*(0x[0-9a-f]+)\s*\*/\s*$")
_HIGH = re.compile(r"^\s*/\*\s*(0x[0-9a-f]+)\s*\*/\s*$")


@dataclasses.dataclass(frozen=True)
class Instr:
    function: str
    address: int  # byte offset in the function's .text section
    text: str
    low: int
    high: int

    @property
    def opcode(self) -> str:
        words = self.text.split()
        if words and words[0].startswith("@"):  # a predicate guard
            words = words[1:]
        return words[0].rstrip(";").split(".")[0] if words else ""


def parse_sass(text: str) -> list[Instr]:
    """The instructions of a `cuobjdump -sass` listing, each with its two encoding words."""
    out, func = [], None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FUNC.match(lines[i])
        if m:
            func = m.group(1)
        m = _INSTR.match(lines[i])
        if m and func and i + 1 < len(lines) and _HIGH.match(lines[i + 1]):
            out.append(Instr(func, int(m.group(1), 16), m.group(2), int(m.group(3), 16),
                             int(_HIGH.match(lines[i + 1]).group(1), 16)))
            i += 2
            continue
        i += 1
    return out


def ffma_runs(instrs: list[Instr], min_run: int = MIN_RUN) -> list[list[Instr]]:
    """Runs of at least min_run consecutive FFMAs (consecutive addresses, one function)."""
    runs, cur = [], []
    for ins in instrs + [Instr("", -1, "", 0, 0)]:
        if ins.opcode == "FFMA" and (not cur or (ins.function == cur[-1].function
                                                 and ins.address == cur[-1].address + 16)):
            cur.append(ins)
            continue
        if len(cur) >= min_run:
            runs.append(cur)
        cur = [ins] if ins.opcode == "FFMA" else []
    return runs


def _text_sections(elf: bytes) -> dict[str, int]:
    """File offset of each `.text.<function>` section of an ELF64 little-endian cubin."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not an ELF64 little-endian cubin")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def header(i):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        return name, offset, size

    _, str_off, _ = header(shstrndx)
    out = {}
    for i in range(shnum):
        name_off, offset, _size = header(i)
        end = elf.index(b"\0", str_off + name_off)
        name = elf[str_off + name_off:end].decode()
        if name.startswith(".text."):
            out[name[len(".text."):]] = offset
    return out


def _patched_runs(cubin: bytes, sass: str, fraction: float, edit) -> tuple[bytes, int]:
    """Apply edit(high word) -> new high word or None (unchanged) to the FFMAs in the first
    `fraction` of every run; every edited word is checked against the listing first."""
    out = bytearray(cubin)
    sections = _text_sections(cubin)
    changed = 0
    for run in ffma_runs(parse_sass(sass)):
        base = sections.get(run[0].function)
        if base is None:
            raise ValueError(f"no .text section for {run[0].function}")
        for ins in run[:max(1, int(len(run) * fraction))]:
            high = edit(ins.high)
            if high is None:
                continue
            at = base + ins.address
            if bytes(out[at:at + 16]) != struct.pack("<QQ", ins.low, ins.high):
                raise ValueError(f"{ins.function}+{ins.address:#x}: the cubin's bytes are not the listed {ins.text!r}")
            struct.pack_into("<Q", out, at + 8, high)
            changed += 1
    return bytes(out), changed


def no_yield_ffma_runs(cubin: bytes, sass: str) -> tuple[bytes, int]:
    """(patched cubin, FFMAs changed): every FFMA of every run gets the no-yield hint (reuse flags
    untouched: a warp that does not yield keeps its reuse cache)."""
    return _patched_runs(cubin, sass, 1.0, lambda high: None if high & YIELD_BIT else high | YIELD_BIT)


def edit_ffma_hints(cubin: bytes, sass: str, mode: str) -> tuple[bytes, int]:
    """FINEGEMM_DIAG_FFMA_YIELD's edit by mode name (MODES)."""
    if mode not in MODES:
        raise ValueError(f"unknown FFMA hint mode {mode!r} (one of {', '.join(MODES)})")
    if mode == "none":
        return no_yield_ffma_runs(cubin, sass)
    return yield_ffma_runs(cubin, sass, MODES[mode])


def yield_ffma_runs(cubin: bytes, sass: str, fraction: float = 1.0) -> tuple[bytes, int]:
    """(patched cubin, FFMAs changed): in the first `fraction` of every FFMA run, the FFMAs that
    carry both the second operand's reuse flag and the no-yield hint lose both."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    both = REUSE_B_BIT | YIELD_BIT
    return _patched_runs(cubin, sass, fraction, lambda high: high & ~both if high & both == both else None)
