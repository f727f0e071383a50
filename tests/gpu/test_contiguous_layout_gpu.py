"""GPU tests of the m-grouped contiguous layouts' check (finegemm/ops/contiguous_layout.py):

- the kernel against the host validator and the reference psum expansion, on random valid and
  broken layouts (both encodings, alignments 64 / 128, odd M, aligned and unaligned starts): the
  ids it writes (every one in [-1, G)) and the broken rule it records;
- the public calls (FP8 and BF16, nt and nn) never synchronize (torch's sync debug mode), and a
  broken layout is raised by finegemm.check_errors() / the next call with the CPU call's message,
  its out-of-range rows written as zeros, the process healthy afterwards;
- a captured call replays over changing layouts (values of the same tensor) like eager calls;
- all of the above for the FP8 and BF16 GEMMs that check a plain layout themselves (kind / mode
  "in_gemm": the capabilities cl.IN_KERNEL_CAPABILITIES opened for the test), which are one
  launch per call and leave the stream's check scratch zeroed; and for the FP8 GEMM that reads and
  checks a psum layout's ends itself (cl.IN_KERNEL_PSUM_CAPABILITIES, gated: opened the same way),
  on random valid and broken ends at alignments 64 and 128.
"""
from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import quant, reference  # noqa: E402
from finegemm.api import _validate as _v  # noqa: E402
from finegemm.ops import contiguous_layout as cl  # noqa: E402
from finegemm.reference._common import psum_layout_to_group_ids  # noqa: E402
from finegemm.testing import calc_diff, capture_graph  # noqa: E402

from test_contiguous_layout import random_layout  # noqa: E402  (tests/ is on sys.path: its conftest)

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _kernel(values, m, g, alignment, psum, offset=0):
    """The kernel's ids and record for one layout (`offset` ints into a larger tensor: unaligned)."""
    store = torch.full((len(values) + offset,), 12345, dtype=torch.int32)
    store[offset:] = torch.tensor(values, dtype=torch.int32)
    layout = store.cuda()[offset:]
    ids = cl.checked_group_ids("layout_test", layout, m, g, psum, alignment)
    torch.cuda.synchronize()
    rec = list(cl._record)
    cl._record[0] = 0
    return ids.cpu(), rec


@pytest.mark.parametrize("psum", [False, True])
@pytest.mark.parametrize("alignment", [64, 128])
def test_kernel_matches_the_host_validator(psum, alignment):
    rng = random.Random(1000 + alignment + psum)
    finegemm.check_errors()
    broken = 0
    for i in range(300):
        values, m, g = random_layout(rng, alignment, psum)
        if m == 0:
            continue
        ids, rec = _kernel(values, m, g, alignment, psum, offset=i % 3)
        want = _v.grouped_layout_violation(torch.tensor(values, dtype=torch.int64), m, g, psum, alignment)
        assert bool(((ids >= -1) & (ids < g)).all()), (values, m, g)
        if want is None:
            assert rec[0] == 0, (values, m, g, rec)
            expect = psum_layout_to_group_ids(torch.tensor(values), m, alignment) if psum else torch.tensor(values)
            assert torch.equal(ids, expect.to(torch.int32)), (values, m, g)
        else:
            broken += 1
            assert tuple(rec[0:1] + rec[2:5]) == want and rec[5:] == [g, alignment, m], (values, m, g, rec)
            if not psum:  # ids outside [-1, G) become -1, the others stay
                v = torch.tensor(values)
                assert torch.equal(ids, torch.where((v >= -1) & (v < g), v, -1).to(torch.int32))
    assert broken > 30


@pytest.mark.parametrize("m", [1, 17, 4097, 70001, 300000])
def test_kernel_on_long_layouts(m):
    """Rows across many 16K-row steps of the kernel's loop, a misaligned run near the end."""
    g, alignment = 64, 128
    ids = torch.full((m,), -1, dtype=torch.int32)
    bounds = sorted(random.Random(m).sample(range(0, m // alignment + 1), min(g, m // alignment + 1)))
    for grp, blk in enumerate(bounds):
        ids[blk * alignment:min(blk * alignment + 100, m)] = grp
    got, rec = _kernel(ids.tolist(), m, g, alignment, False)
    assert rec[0] == 0 and torch.equal(got, ids)
    if m > 2 * alignment:
        bad = ids.clone()
        bad[m - 3:] = g - 1  # the last group's run starts off the alignment (or it is split)
        _, rec = _kernel(bad.tolist(), m, g, alignment, False)
        assert tuple(rec[0:1] + rec[2:5]) == _v.grouped_layout_violation(bad.long(), m, g, False, alignment)


def _route(monkeypatch, in_gemm: bool) -> None:
    """Route the plain-layout calls to the GEMMs that check the layout themselves (the shipped path)
    or to the check kernel and the GEMM on its ids (the capabilities gated again), with fresh
    fast-path caches so that no kept launch of the other kind is reused."""
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8
    from finegemm.ops import contiguous_layout as cl

    monkeypatch.delenv(_v.ENABLE_UNVALIDATED_ENV, raising=False)
    for cap in list(cl.IN_KERNEL_CAPABILITIES.values()) + list(cl.IN_KERNEL_PSUM_CAPABILITIES.values()):
        if not in_gemm:
            monkeypatch.setitem(_v.UNVALIDATED_ON_GPU, cap, ("", "", ""))
        elif cap in _v.UNVALIDATED_ON_GPU:
            monkeypatch.delitem(_v.UNVALIDATED_ON_GPU, cap)
    for api in (api_fp8, api_bf16):
        monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())


def _fp8_problem(ms, n, k, seed, alignment=128):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    starts, row = [], 0
    for m in ms:
        starts.append(row)
        row += finegemm.align(m, alignment)
    ids = torch.full((row,), -1, dtype=torch.int32)
    for i, (s, m) in enumerate(zip(starts, ms)):
        ids[s:s + m] = i
    x = torch.randn(row, k, device="cuda", generator=gen).to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(x)
    w = torch.randn(len(ms), n, k, device="cuda", generator=gen).to(torch.bfloat16)
    qs = [quant.per_block_cast_to_fp8(w[i]) for i in range(len(ms))]
    b, sfb = torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])
    ends = torch.tensor([s + m for s, m in zip(starts, ms)], dtype=torch.int32)
    return a, sfa, b, sfb, ids.cuda(), ends.cuda()


def _fp8_call(a, sfa, b, sfb, layout, psum=False):
    d = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=psum)
    return d


def _bf16_call(a, b, layout, nn=False):
    d = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    if nn:
        finegemm.m_grouped_bf16_gemm_nn_contiguous(a, b.transpose(1, 2).contiguous(), d, layout)
    else:
        finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
    return d


@pytest.mark.parametrize("mode", ["check_kernel", "in_gemm"])
def test_calls_never_synchronize(mode, monkeypatch):
    _route(monkeypatch, in_gemm=mode == "in_gemm")
    a, sfa, b, sfb, ids, ends = _fp8_problem([100, 0, 300, 129], 576, 512, seed=1)
    ab, bb = a.to(torch.bfloat16), torch.randn(4, 576, 512, device="cuda").to(torch.bfloat16)
    calls = [lambda: _fp8_call(a, sfa, b, sfb, ids), lambda: _fp8_call(a, sfa, b, sfb, ends, psum=True),
             lambda: _bf16_call(ab, bb, ids), lambda: _bf16_call(ab, bb, ids, nn=True)]
    for call in calls:
        call()  # compiles, plans, allocates the record outside the check
    torch.cuda.synchronize()
    finegemm.check_errors()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):  # the detector sees a host read of the layout
            _v.check_grouped_layout("f", ids, ids.shape[0], 4, False, 128)
        for call in calls:
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    finegemm.check_errors()


@pytest.mark.parametrize("mode", ["check_kernel", "in_gemm"])
@pytest.mark.parametrize("what", ["id_too_big", "id_negative", "misaligned", "split", "psum_decreasing", "psum_gap"])
def test_broken_layout_is_reported_and_safe(what, mode, monkeypatch):
    _route(monkeypatch, in_gemm=mode == "in_gemm")
    ms = [100, 0, 300, 129]
    a, sfa, b, sfb, ids, ends = _fp8_problem(ms, 576, 512, seed=2)
    psum = what.startswith("psum")
    layout = (ends if psum else ids).clone()
    if what == "id_too_big":
        layout[5] = 4
        layout[300] = 2**31 - 1
    elif what == "id_negative":
        layout[7] = -5
    elif what == "misaligned":
        layout[128:130] = 1  # group 2's run now starts at row 130
    elif what == "split":
        layout[512:641] = 0  # group 3's rows: a second, aligned run of group 0
    elif what == "psum_decreasing":
        layout[1] = 50
    else:
        layout[3] = int(layout[2]) + 10  # group 3 ends inside the gap after group 2
    host = layout.cpu()
    with pytest.raises(ValueError) as cpu_err:
        _v.check_grouped_layout("m_grouped_fp8_gemm_nt_contiguous", host, a.shape[0], len(ms), psum, 128)
    finegemm.check_errors()
    d = _fp8_call(a, sfa, b, sfb, layout, psum)  # no exception here: the check runs on the GPU
    with pytest.raises(ValueError) as gpu_err:
        finegemm.check_errors()
    assert str(gpu_err.value) == str(cpu_err.value)
    assert not torch.isnan(d).any(), "d must still be written in full"
    if not psum:
        bad = (host < -1) | (host >= len(ms))
        assert (d[bad.cuda()] == 0).all(), "rows with an id outside [-1, G) are zeros"
    # Reported once; the next call (valid) runs and is right.
    finegemm.check_errors()
    d = _fp8_call(a, sfa, b, sfb, ids)
    ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ids, out_dtype=torch.float64)
    real = ids >= 0
    assert calc_diff(d[real], ref[real]) <= 1e-5 and (d[~real] == 0).all()


@pytest.mark.parametrize("mode", ["check_kernel", "in_gemm"])
def test_next_call_raises_the_earlier_error(mode, monkeypatch):
    _route(monkeypatch, in_gemm=mode == "in_gemm")
    a, sfa, b, sfb, ids, _ = _fp8_problem([64, 64], 256, 256, seed=3)
    bad = ids.clone()
    bad[0] = 9
    finegemm.check_errors()
    _fp8_call(a, sfa, b, sfb, bad)
    torch.cuda.synchronize()  # the record has landed (the next call itself does not wait)
    with pytest.raises(ValueError, match=r"^m_grouped_bf16_gemm_nt_contiguous: an earlier m-grouped contiguous "
                                         r"call .*: m_grouped_fp8_gemm_nt_contiguous: grouped_layout values must be"):
        _bf16_call(a.to(torch.bfloat16), b.to(torch.bfloat16), ids)
    finegemm.check_errors()  # reported once


_PLANS = [[100, 0, 300, 129], [0, 0, 640, 1], [128, 128, 128, 128], [1, 1, 1, 1], [0, 0, 0, 0]]
_FUNCTIONS = {"fp8": "m_grouped_fp8_gemm_nt_contiguous", "fp8_psum": "m_grouped_fp8_gemm_nt_contiguous",
              "fp8_psum_in_gemm": "m_grouped_fp8_gemm_nt_contiguous",
              "bf16_psum": "m_grouped_bf16_gemm_nt_contiguous", "bf16_psum_in_gemm": "m_grouped_bf16_gemm_nt_contiguous",
              "fp8_in_gemm": "m_grouped_fp8_gemm_nt_contiguous", "bf16_in_gemm": "m_grouped_bf16_gemm_nt_contiguous",
              "bf16_nn_in_gemm": "m_grouped_bf16_gemm_nn_contiguous",
              "bf16": "m_grouped_bf16_gemm_nt_contiguous", "bf16_nn": "m_grouped_bf16_gemm_nn_contiguous"}


class _LayoutCase:
    """One public contiguous call (kind: fp8, fp8_psum, bf16, bf16_nn) on fixed tensors whose
    layout is refilled in place with a plan of group sizes (fill), and its check against the
    reference (every row written, rows of no group zeros, calc_diff <= 1e-5)."""

    def __init__(self, kind: str, seed: int, n: int = 384, k: int = 512) -> None:
        self.kind, self.psum = kind, "psum" in kind
        self.fn = _FUNCTIONS[kind]
        self.rows = rows = max(sum(finegemm.align(m, 128) for m in ms) for ms in _PLANS)
        _, _, self.b, self.sfb, _, _ = _fp8_problem(_PLANS[0], n, k, seed=seed)  # the experts
        gen = torch.Generator(device="cuda").manual_seed(seed + 1)
        self.x = torch.randn(rows, k, device="cuda", generator=gen).to(torch.bfloat16)  # tokens of every plan
        self.a, self.sfa = quant.per_token_cast_to_fp8(self.x)
        self.bb = self.b.to(torch.bfloat16)
        self.bkn = self.bb.transpose(1, 2).contiguous()
        self.layout = torch.full((4,) if self.psum else (rows,), -1, dtype=torch.int32, device="cuda")
        self.d = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)

    def call(self) -> None:
        if self.kind.startswith("fp8"):
            finegemm.m_grouped_fp8_gemm_nt_contiguous((self.a, self.sfa), (self.b, self.sfb), self.d, self.layout,
                                                      use_psum_layout=self.psum)
        elif not self.kind.startswith("bf16_nn"):
            finegemm.m_grouped_bf16_gemm_nt_contiguous(self.x, self.bb, self.d, self.layout, use_psum_layout=self.psum)
        else:
            finegemm.m_grouped_bf16_gemm_nn_contiguous(self.x, self.bkn, self.d, self.layout)

    def fill(self, ms) -> torch.Tensor:
        """The layout of group sizes ms (each group's run aligned to 128 rows), d poisoned; returns
        the per-row ids."""
        out = torch.full((self.rows,), -1, dtype=torch.int32)
        row, ends = 0, []
        for i, m in enumerate(ms):
            out[row:row + m] = i
            ends.append(row + m)
            row += finegemm.align(m, 128)
        self.layout.copy_(torch.tensor(ends, dtype=torch.int32) if self.psum else out)
        self.d.fill_(float("nan"))
        return out.cuda()

    def check(self, row_ids: torch.Tensor, what) -> None:
        torch.cuda.synchronize()
        if self.kind.startswith("fp8"):
            ref = reference.m_grouped_fp8_gemm_nt_contiguous(self.a, self.sfa, self.b, self.sfb, row_ids,
                                                             out_dtype=torch.float64)
        else:
            ref = reference.m_grouped_bf16_gemm_nt_contiguous(self.x, self.bb, row_ids, out_dtype=torch.float64)
        real = row_ids >= 0
        assert not torch.isnan(self.d).any() and (self.d[~real] == 0).all(), what
        if real.any():
            assert calc_diff(self.d[real], ref[real]) <= 1e-5, what


_KINDS = ["fp8", "fp8_psum", "fp8_in_gemm", "fp8_psum_in_gemm", "bf16", "bf16_psum", "bf16_nn", "bf16_in_gemm",
          "bf16_psum_in_gemm", "bf16_nn_in_gemm"]


@pytest.mark.parametrize("kind", _KINDS)
def test_graph_replays_follow_the_layout(kind, monkeypatch):
    _route(monkeypatch, in_gemm=kind.endswith("in_gemm"))
    case = _LayoutCase(kind, seed=4)
    case.fill(_PLANS[0])
    case.call()
    torch.cuda.synchronize()
    graph = capture_graph(case.call)
    for ms in _PLANS:
        row_ids = case.fill(ms)
        graph.replay()
        case.check(row_ids, ms)
    finegemm.check_errors()


@pytest.mark.parametrize("kind", _KINDS)
def test_prepared_calls_follow_the_layout_on_every_stream(kind, monkeypatch):
    """The host fast path's prepared launches (ops/contiguous_layout.PreparedContiguous): repeated
    calls with the same tensors, the layout's values changed in place between calls, on the current
    stream and on a side stream (an entry each), a broken layout reported with the CPU call's
    message, a graph captured in between (one-shot inside the capture) and replayed: every output
    as the reference's."""
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8

    api = api_fp8 if kind.startswith("fp8") else api_bf16
    _route(monkeypatch, in_gemm=kind.endswith("in_gemm"))
    monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())
    case = _LayoutCase(kind, seed=6)
    side = torch.cuda.Stream()
    finegemm.check_errors()
    for rnd in range(2):
        for ms in _PLANS:
            row_ids = case.fill(ms)
            case.call()
            case.check(row_ids, (rnd, ms, "current stream"))
            row_ids = case.fill(ms[::-1])
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                case.call()
            torch.cuda.current_stream().wait_stream(side)
            case.check(row_ids, (rnd, ms, "side stream"))
        (kept,) = api._validated_contiguous._keys.values()
        assert isinstance(kept, cl.PreparedContiguous) and len(kept._streams) == 2  # the fast path ran
        assert kept.in_kernel == kind.endswith("in_gemm")
        if rnd == 0:
            case.fill(_PLANS[0])
            graph = capture_graph(case.call)
            for ms in _PLANS[::-1]:
                row_ids = case.fill(ms)
                graph.replay()
                case.check(row_ids, (ms, "graph"))
    # A broken layout in a prepared call: the CPU call's message, its bad rows zeros.
    case.fill(_PLANS[0])
    if case.psum:
        case.layout[1] = 50  # decreasing ends
    else:
        case.layout[5] = 4  # id out of range
    host = case.layout.cpu()
    with pytest.raises(ValueError) as cpu_err:
        _v.check_grouped_layout(case.fn, host, case.rows, 4, case.psum, 128)
    case.call()
    with pytest.raises(ValueError) as gpu_err:
        finegemm.check_errors()
    assert str(gpu_err.value) == str(cpu_err.value)
    if not case.psum:
        assert (case.d[5] == 0).all()
    row_ids = case.fill(_PLANS[2])
    case.call()
    case.check(row_ids, "after the error")
    finegemm.check_errors()


@pytest.mark.parametrize("family", ["fp8", "bf16"])
def test_prepared_masked_calls_follow_masked_m(family):
    """The masked calls' kept prepared launch (FP8 with an MN-major TMA-aligned sfa: no copy per
    call): eager repeats with masked_m changed in place, each as the reference's, the rows past
    masked_m untouched; the kept value is a prepared launch."""
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8
    from finegemm.ops import sm90_bf16_gemm, sm90_fp8_gemm

    g, m_max, n, k = 4, 200, 576, 512
    gen = torch.Generator(device="cuda").manual_seed(8)
    x = torch.randn(g * m_max, k, device="cuda", generator=gen).to(torch.bfloat16)
    a2, sfa2 = quant.per_token_cast_to_fp8(x)
    a = a2.view(g, m_max, k)
    sfa = quant.get_mn_major_tma_aligned_tensor(sfa2.contiguous().view(g, m_max, -1))
    _, _, b, sfb, _, _ = _fp8_problem([1] * g, n, k, seed=9)
    xb, bb = x.view(g, m_max, k), b.to(torch.bfloat16)
    masked = torch.zeros(g, dtype=torch.int32, device="cuda")
    d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    for values in ([200, 0, 17, 129], [1, 200, 0, 64], [0, 0, 0, 0], [199, 150, 200, 3], [200, 200, 200, 200]):
        masked.copy_(torch.tensor(values, dtype=torch.int32))
        d.fill_(float("nan"))
        if family == "fp8":
            finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked, 128)
            ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, masked, out_dtype=torch.float64)
        else:
            finegemm.m_grouped_bf16_gemm_nt_masked(xb, bb, d, masked, 128)
            ref = reference.m_grouped_bf16_gemm_nt_masked(xb, bb, masked, out_dtype=torch.float64)
        torch.cuda.synchronize()
        for i, m in enumerate(values):
            assert not torch.isnan(d[i, :m]).any() and torch.isnan(d[i, m:]).all(), (values, i)
            if m:
                assert calc_diff(d[i, :m], ref[i, :m]) <= 1e-5, (values, i)
    api, cls = ((api_fp8, sm90_fp8_gemm.PreparedGroupedCall) if family == "fp8"
                else (api_bf16, sm90_bf16_gemm.PreparedBf16GroupedCall))
    kept = [v for v in api._validated_masked._keys.values() if isinstance(v, cls)]
    assert kept and kept[-1]._handle, "the masked call was not prepared"


def _reference(family, a, sfa, b, sfb, x, w, ids):
    """The exact product of the family's contiguous call on per-row ids (x, w: the BF16 operands)."""
    if family == "fp8":
        return reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ids, out_dtype=torch.float64)
    return reference.m_grouped_bf16_gemm_nt_contiguous(x, w, ids, out_dtype=torch.float64)


def _kernels_per_call(fn) -> list[str]:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("ms", [[1], [17, 0, 5], [4097, 0, 1, 300], [1000] * 64 + [0] * 3, [70001, 3]])
def test_in_gemm_check_is_one_launch_and_leaves_the_scratch_zero(ms, family, monkeypatch):
    """The GEMM that checks the layout itself: one kernel per call (the first call and the kept
    launch), the reference's result on the groups' rows and zeros elsewhere, the stream's check
    scratch back to zeros after every call (valid or broken: the next launch relies on it), and
    a broken layout reported with the CPU call's message, also from a grid of many CTAs."""
    _route(monkeypatch, in_gemm=True)
    a, sfa, b, sfb, ids, _ = _fp8_problem(ms, 256, 512, seed=len(ms))
    G = len(ms)
    finegemm.check_errors()
    d = torch.full((a.shape[0], 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    x, w = a.to(torch.bfloat16), b.to(torch.bfloat16)  # the BF16 call's operands
    fn = f"m_grouped_{family}_gemm_nt_contiguous"

    def call(layout):
        if family == "fp8":
            finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout)
        else:
            finegemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, layout)

    if family == "fp8":
        from finegemm.api import grouped_fp8 as api
    else:
        from finegemm.api import bf16 as api

    names = _kernels_per_call(lambda: call(ids))  # the second call: the kept launch
    assert len(names) == 1 and "finegemm_entry" in names[0], names  # no check kernel
    (kept,) = api._validated_contiguous._keys.values()
    assert kept.in_kernel and all("LayoutChecked" in type(e[2]).__name__ for e in kept._streams.values())
    monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())  # the one-shot launch: one kernel too
    monkeypatch.setattr(cl, "can_prepare", lambda index: False)
    names = _kernels_per_call(lambda: call(ids))
    assert len(names) == 1 and "finegemm_entry" in names[0], names
    ref = _reference(family, a, sfa, b, sfb, x, w, ids)
    real = ids >= 0
    assert calc_diff(d[real], ref[real]) <= 1e-5 and (d[~real] == 0).all()
    scratch = cl._scratch.buffers[(torch.cuda.current_device(), cl.raw_stream(torch.cuda.current_device()))][1]
    assert (scratch == 0).all()
    bad = ids.clone()
    bad[-1] = G  # out of range, in the last CTA's rows
    bad[0] = -3
    host = bad.cpu()
    with pytest.raises(ValueError) as cpu_err:
        _v.check_grouped_layout(fn, host, a.shape[0], G, False, 128)
    d.fill_(float("nan"))
    call(bad)
    with pytest.raises(ValueError) as gpu_err:
        finegemm.check_errors()
    assert str(gpu_err.value) == str(cpu_err.value)
    assert not torch.isnan(d).any() and (d[0] == 0).all() and (d[-1] == 0).all()
    assert (scratch == 0).all()
    call(ids)  # the next valid call: right, nothing reported
    torch.cuda.synchronize()
    finegemm.check_errors()
    assert calc_diff(d[real], ref[real]) <= 1e-5


PSUM_IN_GEMM_MS = [[1], [17, 0, 5], [4097, 0, 1, 300], [100] * 33 + [0] * 3, [0, 0, 0]]
PSUM_IN_GEMM_N, PSUM_IN_GEMM_K = 384, 512


def psum_rows(ms, alignment) -> tuple[list[int], int]:
    """The psum ends of groups of ms rows, each starting at a multiple of `alignment`, and the rows
    of A (the last group's end aligned, plus one block of rows past it)."""
    rows, ends = 0, []
    for m in ms:
        start = finegemm.align(rows, alignment) if rows else 0
        rows = start + m
        ends.append(rows)
    return ends, finegemm.align(max(rows, 1), alignment) + alignment


def _psum_problem(ms, n, k, seed, alignment):
    """An FP8 contiguous problem whose groups of ms rows start at multiples of `alignment`, as psum
    ends; returns (a, sfa, b, sfb, ends, per-row ids by the reference expansion)."""
    ends, total = psum_rows(ms, alignment)  # rows past the last end: padding too
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(total, k, device="cuda", generator=gen).to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(x)
    _, _, b, sfb, _, _ = _fp8_problem([1] * len(ms), n, k, seed=seed + 1)
    ends_t = torch.tensor(ends, dtype=torch.int32)
    return a, sfa, b, sfb, ends_t.cuda(), psum_layout_to_group_ids(ends_t, total, alignment).cuda()


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("alignment", [64, 128])
@pytest.mark.parametrize("ms", PSUM_IN_GEMM_MS)
def test_psum_in_gemm_is_one_launch_and_matches_the_reference(ms, alignment, family, monkeypatch):
    """The GEMM reading psum ends itself (FP8 and BF16, gates opened): one kernel per call (kept and
    one-shot), the reference's result on the groups' rows and zeros on every other row (alignment
    gaps, rows past the last end), bitwise the check-kernel path's result, and broken ends (each
    rule) reported with the CPU call's message, d fully written, the next valid call right."""
    if family == "fp8":
        from finegemm.api import grouped_fp8 as api
    else:
        from finegemm.api import bf16 as api

    quant.set_mk_alignment_for_contiguous_layout(alignment)
    try:
        a, sfa, b, sfb, ends, ids = _psum_problem(ms, PSUM_IN_GEMM_N, PSUM_IN_GEMM_K, seed=len(ms) + alignment,
                                                  alignment=alignment)
        G, M, fn = len(ms), a.shape[0], f"m_grouped_{family}_gemm_nt_contiguous"
        d = torch.full((M, PSUM_IN_GEMM_N), float("nan"), device="cuda", dtype=torch.bfloat16)
        x, w = a.to(torch.bfloat16), b.to(torch.bfloat16)

        def call(layout):
            if family == "fp8":
                finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=True)
            else:
                finegemm.m_grouped_bf16_gemm_nt_contiguous(x, w, d, layout, use_psum_layout=True)

        _route(monkeypatch, in_gemm=False)
        call(ends)
        torch.cuda.synchronize()
        via_check_kernel = d.clone()
        _route(monkeypatch, in_gemm=True)
        finegemm.check_errors()
        d.fill_(float("nan"))
        names = _kernels_per_call(lambda: call(ends))  # the second call: the kept launch
        assert len(names) == 1 and "finegemm_entry" in names[0], names
        (kept,) = api._validated_contiguous._keys.values()
        assert kept.in_kernel
        monkeypatch.setattr(api, "_validated_contiguous", _v.ValidatedCalls())
        monkeypatch.setattr(cl, "can_prepare", lambda index: False)
        d.fill_(float("nan"))
        names = _kernels_per_call(lambda: call(ends))
        assert len(names) == 1 and "finegemm_entry" in names[0], names
        ref = _reference(family, a, sfa, b, sfb, x, w, ids)
        real = ids >= 0
        assert not torch.isnan(d).any() and (d[~real] == 0).all()
        if real.any():
            assert calc_diff(d[real], ref[real]) <= 1e-5
        assert torch.equal(d, via_check_kernel)  # the same tiles, the same sums
        finegemm.check_errors()
        host = ends.cpu()
        breaks = [(0, -1)]
        if G > 1:
            breaks += [(1, int(host[0]) - 1 if int(host[0]) > 0 else -5),  # decreasing (or negative)
                       (G - 1, M + 1)]  # past M
            prev = int(host[G - 2])
            if prev % alignment:
                breaks.append((G - 1, prev + 1))  # ends inside the gap after group G - 2
        for i, value in breaks:
            bad = host.clone()
            bad[i] = value
            with pytest.raises(ValueError) as cpu_err:
                _v.check_grouped_layout(fn, bad, M, G, True, alignment)
            d.fill_(float("nan"))
            call(bad.cuda())
            with pytest.raises(ValueError) as gpu_err:
                finegemm.check_errors()
            assert str(gpu_err.value) == str(cpu_err.value)
            assert not torch.isnan(d).any(), "d must still be written in full"
        d.fill_(float("nan"))
        call(ends)  # the next valid call: right, nothing reported
        torch.cuda.synchronize()
        finegemm.check_errors()
        assert torch.equal(d, via_check_kernel)
    finally:
        quant.set_mk_alignment_for_contiguous_layout(128)
