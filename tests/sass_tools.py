"""SASS helpers of the compile tests: find cuobjdump, disassemble a cubin, find the wgmma k-loops.

cuobjdump is not part of every CUDA toolkit install (CI's has none); the SASS assertions are then
skipped and only the ptxas report is checked. Triton's pip package carries one.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\s+(?:`\()?[^,;]*?(0x[0-9a-f]+)")


def cuobjdump() -> str | None:
    tool = shutil.which("cuobjdump")
    if tool:
        return tool
    try:
        from finegemm import jit

        home = jit.cuda_home()
        if home and (Path(home) / "bin" / "cuobjdump").is_file():
            return str(Path(home) / "bin" / "cuobjdump")
    except Exception:
        pass
    try:
        import triton

        cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if cand.is_file():
            return str(cand)
    except Exception:
        pass
    return None


def sass(cubin: str) -> str | None:
    """The cubin's SASS text, or None without cuobjdump."""
    tool = cuobjdump()
    if tool is None:
        return None
    proc = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def instructions(text: str) -> list[tuple[int, str]]:
    """(address, instruction) of every SASS line."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def mbarrier_inits_after_cta_barrier(text: str) -> int:
    """How many mbarrier inits (SYNCS.EXCH.64) come after the first CTA barrier (BAR.SYNC 0x0)."""
    ins = [op for _, op in instructions(text)]
    first = next(i for i, op in enumerate(ins) if op.startswith("BAR.SYNC") and op.endswith(" 0x0"))
    return sum("SYNCS.EXCH.64" in op for op in ins[first + 1:])


def wgmma_k_loops(text: str) -> list[list[str]]:
    """Bodies of the innermost loops that issue wgmmas (HGMMA / QGMMA): for each backward branch
    whose range holds a wgmma and no other such backward branch, the instructions from its target
    to the branch. These are the consumers' k-block loops."""
    ins = instructions(text)
    addr = [a for a, _ in ins]
    is_mma = [("GMMA" in s and "WARPGROUP" not in s) for _, s in ins]
    loops = []
    for i, (a, s) in enumerate(ins):
        m = _BRANCH.search(s)
        if not m:
            continue
        tgt = int(m.group(1), 16)
        if tgt >= a or tgt not in addr:
            continue
        j = addr.index(tgt)
        if any(is_mma[j:i + 1]):
            loops.append((j, i))
    # An out-of-line retry block of an mbarrier wait (cold code at the end of the function) jumps
    # back into the loop it came from: its long "range" only partly overlaps that loop. Of two
    # partly overlapping ranges the longer one is such a block, not a loop.
    def partial(x, y):
        return x[0] < y[0] <= x[1] < y[1] or y[0] < x[0] <= y[1] < x[1]

    loops = [x for x in loops if not any(partial(x, y) and x[1] - x[0] > y[1] - y[0] for y in loops)]
    inner = [(j, i) for j, i in loops if not any(j <= j2 and i2 <= i and (j2, i2) != (j, i) for j2, i2 in loops)]
    return [[s for _, s in ins[j:i + 1]] for j, i in inner]


def assert_k_loops_keep_smem_base(text: str, label: str) -> None:
    """The consumers' k-loops do not re-derive the shared-memory base: no S2UR (the CTA's cluster
    id, from which ptxas rebuilds the base) in front of every k-block. ptxas did that in every BF16
    kernel and the masked FP8 kernels until their consumers took the base through a shuffle (10
    instructions per k-block, -2 to -5% on masked shapes; benchmarks/NOTES.md v0.29)."""
    loops = wgmma_k_loops(text)
    assert loops, f"{label}: no wgmma k-loop found in SASS"
    for body in loops:
        assert not any(re.search(r"\bS2UR\b", op) for op in body), (
            f"{label}: S2UR inside a wgmma k-loop ({len(body)} instructions)")


def cluster_arrives(text: str) -> list[bool]:
    """One entry per cluster-barrier arrive (UCGABAR_ARV) in program order: True when it releases
    (a MEMBAR.*.GPU among the four instructions before it: what `barrier.cluster.arrive.release`
    compiles to), False for a relaxed arrive."""
    ins = [i for _, i in instructions(text)]
    return [any(re.match(r"MEMBAR\.\w+\.GPU\b", ins[j]) for j in range(max(0, k - 4), k))
            for k, op in enumerate(ins) if op.startswith("UCGABAR_ARV")]


_LOAD = re.compile(r"^(?:@!?U?P\w+\s+)?LD\.E(\.64|\.128)?\S*\s+R(\d+)\b")


def loads_unread_before_last_arrive(text: str) -> list[str]:
    """Generic loads (LD.E: distributed-shared-memory loads among them) before the last cluster
    arrive whose destination registers no later instruction before that arrive reads. A relaxed
    arrive does not wait for a thread's outstanding loads; in-order issue makes a load complete
    before the arrive only if an instruction in between reads its result (the cluster_fence probe
    faulted without that: a remote load landed after its target CTA had exited, NOTES v1.14)."""
    ins = [i for _, i in instructions(text)]
    arrives = [k for k, op in enumerate(ins) if op.startswith("UCGABAR_ARV")]
    if not arrives:
        return []
    last = arrives[-1]
    unread = []
    for k in range(last):
        m = _LOAD.match(ins[k])
        if not m:
            continue
        first, width = int(m.group(2)), {".64": 2, ".128": 4}.get(m.group(1) or "", 1)
        regs = {f"R{first + j}" for j in range(width)}
        for later in ins[k + 1:last]:
            sources = later.split(",", 1)[1] if "," in later else ""
            regs = {r for r in regs if not re.search(rf"\b{r}\b", sources)}
            if not regs:
                break
        if regs:
            unread.append(ins[k])
    return unread
