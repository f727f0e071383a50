"""CPU tests of the m-grouped contiguous layouts' GPU check (finegemm/ops/contiguous_layout.py):
a step-by-step model of the kernel's algorithm against the host validator on random valid and
broken layouts, the error record's path to the host validator's message (check_pending,
check_errors), the API step's limits, and with nvcc: the kernel compiles without spills.
The kernel itself runs in tests/gpu/test_contiguous_layout_gpu.py.
"""
from __future__ import annotations

import ctypes
import random

import pytest
import torch

from finegemm.api import _validate as _v
from finegemm.ops import contiguous_layout as cl
from finegemm.reference._common import psum_layout_to_group_ids

INT_MAX, INT_MIN = 2**31 - 1, -(2**31)


def kernel_model(layout: list[int], m: int, g: int, alignment: int, psum: bool):
    """The kernel's algorithm in Python, step for step (rows in 4-row groups, a run starting where
    a row's id differs from the row above, runs per group, the psum walk and its checks, the same
    order of reports): (ids, violation or None)."""
    sh = list(layout) if psum else [0] * g
    lo, hi, first, second = INT_MAX, INT_MIN, INT_MAX, INT_MAX
    ids = [0] * m
    grp = 0
    for r0 in range(0, m, 4):  # one thread's rows only increase; the order across threads does not matter
        for r in range(r0, min(r0 + 4, m)):
            if psum:
                while grp < g and sh[grp] <= r:
                    grp += 1
                start = 0 if grp == 0 else (sh[grp - 1] + alignment - 1) // alignment * alignment
                ids[r] = grp if grp < g and r >= start else -1
                continue
            x = layout[r]
            up = layout[r - 1] if r > 0 else INT_MIN
            lo, hi = min(lo, x), max(hi, x)
            if 0 <= x < g and (r == 0 or up != x):
                if r % alignment:
                    first = min(first, r)
                sh[x] += 1
            ids[r] = x if -1 <= x < g else -1
    if psum:
        for i in range(g):
            lo = min(lo, sh[i])
            if i > 0:
                prev = sh[i - 1]
                if sh[i] < prev:
                    first = min(first, i)
                start = (prev + alignment - 1) // alignment * alignment
                if sh[i] != prev and sh[i] < start:
                    second = min(second, i)
    else:
        second = min([i for i in range(g) if sh[i] > 1], default=INT_MAX)
    bad = None
    if not psum:
        if lo < -1 or hi >= g:
            bad = (_v.LAYOUT_RANGE, lo, hi, 0)
        elif first != INT_MAX:
            bad = (_v.LAYOUT_MISALIGNED, first, layout[first], 0)
        elif second != INT_MAX:
            bad = (_v.LAYOUT_SPLIT, second, sh[second], 0)
    elif g > 0:
        if lo < 0:
            bad = (_v.LAYOUT_PSUM_NEGATIVE, lo, 0, 0)
        elif first != INT_MAX:
            bad = (_v.LAYOUT_PSUM_DECREASING, first, sh[first - 1], sh[first])
        elif sh[g - 1] > m:
            bad = (_v.LAYOUT_PSUM_PAST_M, sh[g - 1], 0, 0)
        elif second != INT_MAX:
            bad = (_v.LAYOUT_PSUM_GAP, second, sh[second - 1], sh[second])
    return ids, bad


def random_layout(rng: random.Random, alignment: int, psum: bool):
    """A valid layout of a few groups (empty ones and padding blocks included), then, half of the
    time, one of the ways a caller breaks it. Returns (values, m, G)."""
    g = rng.randint(1, 6)
    sizes = [rng.choice([0, 1, alignment - 1, alignment, alignment + 5, 3 * alignment]) for _ in range(g)]
    ends, ids, row = [], [], 0
    for i, s in enumerate(sizes):
        start = -(-row // alignment) * alignment
        ids += [-1] * (start - row) + [i] * s
        row = start + s
        ends.append(row if s else (ends[-1] if ends else 0))
        if rng.random() < 0.2:
            ids += [-1] * alignment  # a padding block
            row += alignment
    m = row + rng.choice([0, 0, 3, alignment])
    ids += [-1] * (m - len(ids))
    values = list(ends) if psum else list(ids)
    if rng.random() < 0.5 and values:
        i = rng.randrange(len(values))
        if psum:
            values[i] = rng.choice([-1, -alignment, values[i] + 1, values[i] - 1, m + 1, values[i] + alignment // 2])
        else:
            values[i] = rng.choice([-2, g, g + 7, 2**31 - 1, -(2**31), (values[i] + 1) % g, -1])
    return values, m, g


@pytest.mark.parametrize("psum", [False, True])
@pytest.mark.parametrize("alignment", [64, 128])
def test_kernel_model_matches_the_host_validator(psum, alignment):
    rng = random.Random(alignment * 2 + psum)
    broken = 0
    for _ in range(400):
        values, m, g = random_layout(rng, alignment, psum)
        ids, bad = kernel_model(values, m, g, alignment, psum)
        want = _v.grouped_layout_violation(torch.tensor(values, dtype=torch.int64), m, g, psum, alignment)
        assert bad == want, (values, m, g)
        broken += want is not None
        assert all(-1 <= x < g for x in ids)  # the GEMM never sees a group it has no weights for
        if want is None:
            expect = psum_layout_to_group_ids(torch.tensor(values), m, alignment).tolist() if psum else values
            assert ids == expect
    assert 50 < broken < 350  # both kinds were drawn


def _fake_record(monkeypatch):
    rec = (ctypes.c_int32 * 8)()
    monkeypatch.setattr(cl, "_record", rec)
    monkeypatch.setattr(cl, "_functions", [])
    monkeypatch.setattr(cl, "_function_ids", {})
    return rec


@pytest.mark.parametrize("values,m,g,psum", [
    ([0, 0, 5, -1], 4, 2, False),             # range
    ([0, 0, 1, 1] + [-1] * 60, 64, 2, False),  # misaligned (alignment 64)
    ([0] * 64 + [1] * 64 + [0] * 64, 192, 2, False),  # split
    ([-3, 10], 64, 2, True),                  # psum negative
    ([70, 64], 128, 2, True),                 # psum decreasing
    ([64, 200], 128, 2, True),                # psum past M
    ([10, 20], 128, 2, True),                 # psum gap
])
def test_record_reads_as_the_host_validators_error(monkeypatch, values, m, g, psum):
    rec = _fake_record(monkeypatch)
    fn = "m_grouped_fp8_gemm_nt_contiguous"
    bad = _v.grouped_layout_violation(torch.tensor(values), m, g, psum, 64)
    assert bad is not None
    with pytest.raises(ValueError) as host:
        _v.check_grouped_layout(fn, torch.tensor(values, dtype=torch.int32), m, g, psum, 64)
    # What the kernel writes: [code, function, a, b, c, G, alignment, M].
    rec[1], rec[2], rec[3], rec[4], rec[5], rec[6], rec[7] = cl._function_id(fn), bad[1], bad[2], bad[3], g, 64, m
    rec[0] = bad[0]
    with pytest.raises(ValueError) as later:
        cl.check_pending("m_grouped_bf16_gemm_nt_contiguous")
    text = str(later.value)
    assert text.startswith("m_grouped_bf16_gemm_nt_contiguous: an earlier m-grouped contiguous call")
    assert text.endswith(str(host.value))  # names the call that was given the layout
    assert rec[0] == 0
    cl.check_pending(fn)  # reported once


def test_check_errors_raises_the_record_once(monkeypatch):
    rec = _fake_record(monkeypatch)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    import finegemm

    finegemm.check_errors()  # nothing recorded
    rec[1], rec[2], rec[3], rec[5], rec[6], rec[7] = cl._function_id("f"), -7, 3, 4, 128, 256
    rec[0] = _v.LAYOUT_RANGE
    with pytest.raises(ValueError, match=r"^f: grouped_layout values must be -1 \(padding row\) or a group id in "
                                         r"\[0, G=4\), got values in \[-7, 3\]$"):
        finegemm.check_errors()
    finegemm.check_errors()


def test_api_step_limits_and_empty_layouts(monkeypatch):
    _fake_record(monkeypatch)
    layout = torch.zeros(0, dtype=torch.int32)
    assert cl.api_group_ids("f", layout, 0, 3, False, 128) is None  # M == 0: nothing to check
    with pytest.raises(ValueError, match=rf"f: on CUDA, with use_psum_layout, G must be <= {cl.MAX_GROUPS}"):
        cl.api_group_ids("f", layout, 0, cl.MAX_GROUPS + 1, True, 128)
    assert cl.api_group_ids("f", layout, 0, cl.MAX_GROUPS + 1, False, 128) is None  # plain: any G
    with pytest.raises(ValueError, match=r"f: on CUDA M must be <= "):
        cl.api_group_ids("f", layout, cl.MAX_ROWS + 1, 3, False, 128)


def test_prepared_contiguous_entries_per_stream(monkeypatch):
    """PreparedContiguous (the API's fast path) on faked CUDA plumbing: an entry per stream, each
    with an ids buffer of its own that the check writes and the GEMM launch reads; a stream without
    an entry, another current device or graph capture answers False with nothing launched; an
    earlier call's recorded error is raised first; a GEMM that cannot be prepared adds no entry;
    calls of other M on a stream share its buffer, grown geometrically."""
    launches, stream, allowed = [], [11], [True]

    class FakePlan:
        def __init__(self, fn, gl, m, g, psum, alignment):
            self.m, self.g = m, g

        def fill(self, p, ids, scratch):
            p.ids, p.scratch = ids, scratch

        def launch(self, s, params):
            launches.append(("check", s, ctypes.c_void_p.from_address(params[1]).value))

    monkeypatch.setattr(cl, "_Plan", FakePlan)
    monkeypatch.setattr(cl, "raw_stream", lambda index: stream[0])
    monkeypatch.setattr(cl, "can_prepare", lambda index: allowed[0])
    monkeypatch.setattr(cl._scratch, "pointers", lambda ws, cnt, device, s, capturing=None: (0, 1000 + s))
    monkeypatch.setattr(cl, "_ids", cl.SplitKWorkspace())
    rec = _fake_record(monkeypatch)
    layout = torch.zeros(256, dtype=torch.int32)
    call = cl.PreparedContiguous("f", layout, 256, 4, False, 128)
    assert not call() and not launches  # no entry for this stream yet

    def gemm_for(ids):
        assert ids.dtype == torch.int32 and ids.dim() == 1 and ids.numel() >= 256
        return lambda: launches.append(("gemm", stream[0], ids.data_ptr()))

    assert call.add_stream(gemm_for)
    assert call() and call()
    (c1, g1, c2, g2) = launches
    assert c1 == c2 == ("check", 11, g1[2]) and g1 == g2 == ("gemm", 11, g1[2])  # one buffer: written, then read
    stream[0] = 12
    assert not call() and len(launches) == 4
    assert call.add_stream(gemm_for) and call()
    assert launches[-2][:2] == ("check", 12) and launches[-2][2] == launches[-1][2] != g1[2]  # a buffer per stream
    allowed[0] = False  # graph capture or another current device: the caller's one-shot path
    assert not call() and len(launches) == 6
    allowed[0] = True
    assert not call.add_stream(lambda ids: None)  # the GEMM cannot be prepared: no entry
    rec[1], rec[2], rec[3], rec[5], rec[6], rec[7] = cl._function_id("g"), -7, 3, 4, 128, 256
    rec[0] = _v.LAYOUT_RANGE
    with pytest.raises(ValueError, match="^f: an earlier m-grouped contiguous call"):
        call()
    assert len(launches) == 6
    for s in range(20, 20 + cl.PreparedContiguous.MAX_STREAMS):  # bounded: the entries are cleared when full
        stream[0] = s
        assert call.add_stream(gemm_for)
    assert len(call._streams) <= cl.PreparedContiguous.MAX_STREAMS
    stream[0] = 11
    small = cl.PreparedContiguous("f", layout, 100, 4, False, 128)  # fits the stream's buffer: shares it
    assert small.add_stream(lambda ids: lambda: None)
    assert small._streams[11][0].ids == g1[2]
    big = cl.PreparedContiguous("f", layout, 1500, 4, False, 128)  # past it: the buffer grows (at least 2x)
    assert big.add_stream(lambda ids: lambda: None) and cl._ids.buffers[(None, 11)][1].numel() == 2 * 1024
    assert small._streams[11][0].ids == g1[2]  # the older entries keep the old buffer, kept alive:
    assert any(held[1].data_ptr() == g1[2] for held in cl._ids.retired)


@pytest.mark.nvcc
def test_layout_kernel_compiles_without_spills():
    from finegemm import jit

    (r,) = jit.compile_check(["contiguous_layout"], raise_on_failure=False)
    assert r["ok"], r
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_frame"] == 0 and r["lmem"] == 0, r
    assert r["registers"] <= 64, r  # 1024 threads per CTA
