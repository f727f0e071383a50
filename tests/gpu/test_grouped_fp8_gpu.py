"""GPU tests of the SM90 m-grouped FP8 GEMMs (MoE): m_grouped_fp8_gemm_nt_contiguous and
m_grouped_fp8_gemm_nt_masked on CUDA tensors (the dense kernel family, GEMM kinds "grouped
contiguous" / "grouped masked").

Every case draws fresh random data, quantizes it with finegemm.quant, poisons d with NaN, runs
the kernel and checks against the exact dequantized reference (finegemm.reference, fp64):
calc_diff <= 1e-5 over the rows that must be written, which must hold no NaN; padding rows
(contiguous, group id -1) exactly zero; masked rows >= masked_m[g] still NaN (untouched).
Plus bitwise determinism, masked_m values out of [0, Mmax] (clamped by the kernel), the psum
layout, mk alignment 64 (and < 64 refused), forced kernel configurations (TMA-store / direct
epilogue, with and without 2-CTA multicast), and a CUDA graph captured once and replayed with
new masked_m values.

The case lists are module-level data: scripts/precompile.py reads them to build the kernels.
"""
from __future__ import annotations

import dataclasses
import random

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import quant, reference  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


FP8 = torch.float8_e4m3fn


def _rand_ms(seed: int, g: int, lo: int, hi: int) -> list[int]:
    r = random.Random(seed)
    return [r.randint(lo, hi) for _ in range(g)]


# (id, group sizes, N, K, extra all-padding blocks inserted after group index, use_psum)
CONTIGUOUS_CASES = [
    ("g1", [300], 576, 7168, None, False),
    ("g4_empty_group_k7296", [130, 0, 256, 77], 4096, 7296, None, False),
    ("g8_k512", _rand_ms(8, 8, 1, 400), 7168, 512, None, False),
    ("g64_small_m", _rand_ms(64, 64, 0, 20), 576, 512, None, False),
    ("g4_padding_block", [128, 64, 200, 5], 4096, 2048, 1, False),
    ("g4_psum", [200, 0, 128, 50], 4096, 2048, None, True),
    ("g2_psum_k7296", [1, 513], 576, 7296, None, True),
]

# (id, G, Mmax, N, K, masked_m, expected_m)
MASKED_CASES = [
    ("g1_full", 1, 256, 4096, 7168, [256], 256),
    ("g4_mixed_k7296", 4, 128, 576, 7296, [0, 128, 37, 1], 64),
    ("g8_mmax192", 8, 192, 7168, 512, _rand_ms(81, 8, 0, 192), 100),
    ("g64_small", 64, 32, 576, 512, _rand_ms(64, 64, 0, 32), 8),
    ("g4_all_zero", 4, 64, 4096, 2048, [0, 0, 0, 0], 32),
    ("g2_out_of_range", 2, 96, 576, 1024, [1000, -5], 48),
    ("g6_n7168", 6, 320, 7168, 2048, [320, 1, 250, 0, 129, 64], 200),
]

# Forced (block_m, block_n, multicast, tma_store) per grouped kind (the heuristic overridden).
FORCED = [(128, 192, 2, True), (128, 224, 1, False), (64, 112, 2, True), (64, 208, 1, False), (128, 144, 1, True)]
FORCED_CONTIGUOUS = ("forced", [100, 300, 0, 129], 1000, 1152, None, False)
FORCED_MASKED = ("forced", 3, 192, 1000, 1152, [192, 70, 0], 100)


def contiguous_rows(ms, alignment=128, pad_after=None):
    """Total rows and per-group start rows of a plain contiguous layout."""
    starts, row = [], 0
    for i, m in enumerate(ms):
        starts.append(row)
        row += finegemm.align(m, alignment)
        if pad_after is not None and i == pad_after:
            row += alignment  # one whole block of -1 rows
    return row, starts


def _experts(g, n, k, gen):
    w = torch.randn(g, n, k, device="cuda", generator=gen).to(torch.bfloat16)
    qs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g)]
    return torch.stack([q for q, _ in qs]), torch.stack([s for _, s in qs])


def _tokens(m, k, gen):
    x = torch.randn(max(m, 1), k, device="cuda", generator=gen).to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(x)
    return a[:m], sfa[:m]


def _contiguous_problem(ms, n, k, pad_after, use_psum, seed, alignment=128):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    g = len(ms)
    m_total, starts = contiguous_rows(ms, alignment, pad_after)
    ids = torch.full((m_total,), -1, dtype=torch.int32)
    for i, (s, m) in enumerate(zip(starts, ms)):
        ids[s:s + m] = i
    ids = ids.cuda()
    if use_psum:
        layout = torch.tensor([s + m for s, m in zip(starts, ms)], dtype=torch.int32, device="cuda")
    else:
        layout = ids
    a, sfa = _tokens(m_total, k, gen)
    b, sfb = _experts(g, n, k, gen)
    return a, sfa, b, sfb, layout, ids


def _run_contiguous(a, sfa, b, sfb, layout, use_psum):
    d = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=use_psum)
    return d


def _check_contiguous(d, a, sfa, b, sfb, layout, ids, use_psum):
    ref = reference.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, layout, use_psum_layout=use_psum,
                                                     out_dtype=torch.float64)
    real = ids >= 0
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    assert (d[~real] == 0).all(), "padding rows must be exactly zero"
    diff = calc_diff(d[real], ref[real])
    assert diff <= 1e-5, f"vs exact dequantized reference: calc_diff {diff:.3e}"


@pytest.mark.parametrize("case", CONTIGUOUS_CASES, ids=[c[0] for c in CONTIGUOUS_CASES])
def test_contiguous(case):
    _, ms, n, k, pad_after, use_psum = case
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=sum(ms) + n + k)
    d = _run_contiguous(a, sfa, b, sfb, layout, use_psum)
    _check_contiguous(d, a, sfa, b, sfb, layout, ids, use_psum)


@pytest.mark.parametrize("case", CONTIGUOUS_CASES[:3] + CONTIGUOUS_CASES[5:6], ids=lambda c: c[0])
def test_contiguous_nn(case):
    """B stored [G, K, N] (sfb [G, ceil(K/128), ceil(N/128)]): the K-major copy then the nt kernel,
    so d must equal the nt call's bit for bit; B itself must come back unchanged."""
    _, ms, n, k, pad_after, use_psum = case
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=sum(ms) + n + k + 7)
    b_kn, sfb_kn = b.transpose(1, 2).contiguous(), sfb.transpose(1, 2).contiguous()
    b_before = b_kn.clone()
    d = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nn_contiguous((a, sfa), (b_kn, sfb_kn), d, layout, use_psum_layout=use_psum)
    _check_contiguous(d, a, sfa, b, sfb, layout, ids, use_psum)
    assert torch.equal(d.view(torch.int16), _run_contiguous(a, sfa, b, sfb, layout, use_psum).view(torch.int16))
    assert torch.equal(b_kn.view(torch.uint8), b_before.view(torch.uint8))


def test_contiguous_alignment_64_and_below():
    ms, n, k = [64, 10, 100, 0, 64], 2112, 1024
    old = finegemm.get_mk_alignment_for_contiguous_layout()
    try:
        finegemm.set_mk_alignment_for_contiguous_layout(64)
        a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, None, False, seed=64, alignment=64)
        d = _run_contiguous(a, sfa, b, sfb, layout, False)
        _check_contiguous(d, a, sfa, b, sfb, layout, ids, False)
        finegemm.set_mk_alignment_for_contiguous_layout(32)
        a, sfa, b, sfb, layout, ids = _contiguous_problem([32, 5], n, k, None, False, seed=32, alignment=32)
        with pytest.raises(NotImplementedError):
            _run_contiguous(a, sfa, b, sfb, layout, False)
    finally:
        finegemm.set_mk_alignment_for_contiguous_layout(old)


def _masked_problem(g, m_max, n, k, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a2, sfa2 = _tokens(g * m_max, k, gen)
    a = a2.view(g, m_max, k)
    sfa = sfa2.contiguous().view(g, m_max, -1)
    b, sfb = _experts(g, n, k, gen)
    return a, sfa, b, sfb


def _check_masked(d, a, sfa, b, sfb, masked):
    m_max = a.shape[1]
    clamped = [min(max(v, 0), m_max) for v in masked]
    ref = reference.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, torch.tensor(clamped, dtype=torch.int32),
                                                 out_dtype=torch.float64)
    got, want = [], []
    for i, m in enumerate(clamped):
        assert not torch.isnan(d[i, :m]).any(), f"group {i}: rows < masked_m not fully written"
        assert torch.isnan(d[i, m:]).all(), f"group {i}: rows >= masked_m = {m} were written"
        got.append(d[i, :m])
        want.append(ref[i, :m])
    diff = calc_diff(torch.cat(got), torch.cat(want))
    assert diff <= 1e-5, f"vs exact dequantized reference: calc_diff {diff:.3e}"


def _run_masked(a, sfa, b, sfb, masked_m, expected_m):
    g, m_max, _ = a.shape
    d = torch.full((g, m_max, b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    return d


@pytest.mark.parametrize("case", MASKED_CASES, ids=[c[0] for c in MASKED_CASES])
def test_masked(case):
    _, g, m_max, n, k, masked, expected_m = case
    a, sfa, b, sfb = _masked_problem(g, m_max, n, k, seed=g * 31 + m_max + n + k)
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    d = _run_masked(a, sfa, b, sfb, masked_m, expected_m)
    _check_masked(d, a, sfa, b, sfb, masked)


def _force(monkeypatch, bm, bn, mc, tma, hp=False):
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.ops import sm90_fp8_gemm as ops

    real = h.select_grouped_config

    def forced(kind, m, n, k, num_groups, num_sms, expected_m=0, alignment=128):
        cfg = real(kind, m, n, k, num_groups, num_sms, expected_m, alignment)
        st = h.max_stages(bm, bn, tma)
        grid = num_sms if mc == 1 else 2 * (num_sms // 2)
        return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st, num_multicast=mc,
                                   multicast_on_a=mc == 2, tma_store=tma, grid=grid, half_promote=hp,
                                   smem_bytes=h.smem_bytes(bm, bn, st, tma), num_threads=h.num_threads(bm))

    monkeypatch.setattr(ops, "select_grouped_config", forced)
    monkeypatch.setattr(ops, "_plans", {})


@pytest.mark.parametrize("cfg", FORCED, ids=[f"bm{c[0]}_bn{c[1]}_mc{c[2]}_{'tma' if c[3] else 'direct'}" for c in FORCED])
def test_forced_configs_contiguous(cfg, monkeypatch):
    _force(monkeypatch, *cfg)
    _, ms, n, k, pad_after, use_psum = FORCED_CONTIGUOUS
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=cfg[1])
    d = _run_contiguous(a, sfa, b, sfb, layout, use_psum)
    _check_contiguous(d, a, sfa, b, sfb, layout, ids, use_psum)


@pytest.mark.parametrize("cfg", FORCED, ids=[f"bm{c[0]}_bn{c[1]}_mc{c[2]}_{'tma' if c[3] else 'direct'}" for c in FORCED])
def test_forced_configs_masked(cfg, monkeypatch):
    _force(monkeypatch, *cfg)
    _, g, m_max, n, k, masked, expected_m = FORCED_MASKED
    a, sfa, b, sfb = _masked_problem(g, m_max, n, k, seed=cfg[1] + 1)
    d = _run_masked(a, sfa, b, sfb, torch.tensor(masked, dtype=torch.int32, device="cuda"), expected_m)
    _check_masked(d, a, sfa, b, sfb, masked)


# Serial halves (block_m 128, block_n above the two-accumulator limit; only the tuner proposes them).
SERIAL_HALVES = [(256, 1, True), (256, 2, False), (224, 2, True)]


@pytest.mark.parametrize("bn, mc, tma", SERIAL_HALVES, ids=str)
def test_serial_halves_grouped(bn, mc, tma, monkeypatch):
    """Serial halves in both m-grouped kinds: the forced problems above (N = 1000 cuts the tile's
    right half; masked groups of 192 / 70 / 0 rows; contiguous segments of 100 / 300 / 0 / 129 rows),
    exact reference, poisoned outputs, zero padding rows."""
    _force(monkeypatch, 128, bn, mc, tma, hp=True)
    _, ms, n, k, pad_after, use_psum = FORCED_CONTIGUOUS
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=bn + mc)
    d = _run_contiguous(a, sfa, b, sfb, layout, use_psum)
    _check_contiguous(d, a, sfa, b, sfb, layout, ids, use_psum)
    _, g, m_max, n, k, masked, expected_m = FORCED_MASKED
    a, sfa, b, sfb = _masked_problem(g, m_max, n, k, seed=bn + mc + 1)
    d = _run_masked(a, sfa, b, sfb, torch.tensor(masked, dtype=torch.int32, device="cuda"), expected_m)
    _check_masked(d, a, sfa, b, sfb, masked)


@pytest.mark.parametrize("bn, tma", [(96, False), (128, True), (144, True), (144, False)])
@pytest.mark.parametrize("m_max, masked", [(192, [192, 191, 129, 0]), (256, [256, 193, 192, 65, 1, 0]),
                                           (448, [448, 300, 0, 385])])
def test_three_warpgroup_masked_edges(m_max, masked, bn, tma, monkeypatch):
    """block_m 192 (masked kind): Mmax not a multiple of it (the last m-block's A box reaches into
    the next group's rows or past the tensor), masked_m cutting a warpgroup's 64 rows (TMA store
    for whole warpgroups, predicated stores for the cut one), 0 and Mmax; N = 1000 cuts a tile."""
    _force(monkeypatch, 192, bn, 1, tma)
    a, sfa, b, sfb = _masked_problem(len(masked), m_max, 1000, 1152, seed=m_max + bn + tma)
    d = _run_masked(a, sfa, b, sfb, torch.tensor(masked, dtype=torch.int32, device="cuda"), 192)
    _check_masked(d, a, sfa, b, sfb, masked)


def test_legacy_m_grouped_names():
    """DeepGEMM v1's m_grouped_gemm_fp8_fp8_bf16_nt_contiguous / _masked: bitwise what the finegemm
    functions give on the same inputs (same kernels), padding rows zero, masked rows untouched."""
    _, ms, n, k, pad_after, use_psum = CONTIGUOUS_CASES[4]
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=93)
    out = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sfa), (b, sfb), out, layout)
    assert torch.equal(out, _run_contiguous(a, sfa, b, sfb, layout, use_psum))
    _, g, m_max, n, k, masked, expected_m = MASKED_CASES[1]
    a, sfa, b, sfb = _masked_problem(g, m_max, n, k, seed=94)
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    out = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sfa), (b, sfb), out, masked_m, expected_m)
    want = _run_masked(a, sfa, b, sfb, masked_m, expected_m)
    assert torch.equal(out.nan_to_num(7.0), want.nan_to_num(7.0))


def test_deterministic_contiguous():
    _, ms, n, k, pad_after, use_psum = CONTIGUOUS_CASES[2]
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=5)
    first = _run_contiguous(a, sfa, b, sfb, layout, use_psum)
    for _ in range(5):
        assert torch.equal(_run_contiguous(a, sfa, b, sfb, layout, use_psum).view(torch.int16),
                           first.view(torch.int16))


def test_deterministic_masked():
    _, g, m_max, n, k, masked, expected_m = MASKED_CASES[2]
    a, sfa, b, sfb = _masked_problem(g, m_max, n, k, seed=6)
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    first = _run_masked(a, sfa, b, sfb, masked_m, expected_m)
    for _ in range(5):
        assert torch.equal(_run_masked(a, sfa, b, sfb, masked_m, expected_m).view(torch.int16),
                           first.view(torch.int16))


def test_masked_cuda_graph_replay_follows_masked_m():
    g, m_max, n, k, expected_m = 6, 320, 7168, 2048, 200
    a, sfa, b, sfb = _masked_problem(g, m_max, n, k, seed=99)
    masked_m = torch.tensor([320, 1, 250, 0, 129, 64], dtype=torch.int32, device="cuda")
    d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)  # compile outside
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    for values in ([320, 1, 250, 0, 129, 64], [0, 320, 5, 200, 0, 300], [64, 64, 64, 64, 64, 64], [0] * 6):
        masked_m.copy_(torch.tensor(values, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(d, a, sfa, b, sfb, values)


def _shipped_masked_entries():
    import json

    from finegemm.heuristics import tuned
    return [e for e in json.loads(tuned.SHIPPED_TABLE.read_text())["entries"] if e["kind"].startswith("fp8_masked_g")]


@pytest.mark.parametrize("entry", _shipped_masked_entries(), ids=lambda e: f"{e['kind']}-{e['m']}x{e['n']}x{e['k']}")
def test_tuned_masked_entries(entry):
    """Every shipped tuned masked configuration through the public API (which must pick it for its
    expected_m), with masked_m varying per group around it (incl. 0 and Mmax): exact reference,
    untouched rows, fully written valid rows."""
    from finegemm import runtime
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED, select_grouped_config
    if entry["num_sms"] != runtime.get_num_sms():
        pytest.skip("tuned for another SM count")
    g = int(entry["kind"][len("fp8_masked_g"):])
    em, n, k = entry["m"], entry["n"], entry["k"]
    m_max = finegemm.align(em, 128)
    cfg = select_grouped_config(GEMM_GROUPED_MASKED, m_max, n, k, g, runtime.get_num_sms(), em, 0)
    picked = {f: getattr(cfg, f) for f in ("block_m", "block_n", "num_stages", "num_multicast", "tma_store",
                                           "half_promote")}
    assert picked == {f: entry["config"].get(f, False) for f in picked}
    # The same kernel configuration on a few groups (the plan above is the one for G groups).
    from finegemm.heuristics.sm90_fp8_gemm import make_grouped_config
    from finegemm.ops import sm90_fp8_gemm as ops
    gg = min(g, 4)
    c = entry["config"]
    forced = make_grouped_config(GEMM_GROUPED_MASKED, m_max, n, k, gg, runtime.get_num_sms(), em, 0, c["block_m"],
                                 c["block_n"], c["num_stages"], c["num_multicast"], c["tma_store"],
                                 half_promote=c.get("half_promote", False))
    forced = dataclasses.replace(forced, l2_promotion=tuple(c.get("l2_promotion", (256, 256))))
    assert cfg.l2_promotion == forced.l2_promotion  # the public API plans the entry's promotion too
    a, sfa, b, sfb = _masked_problem(gg, m_max, n, k, seed=em + n + k)
    masked = [em, 0, m_max, max(em // 3, 1)][:gg]
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    d = torch.full((gg, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ops.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, d, masked_m, em, config=forced)
    _check_masked(d, a, sfa, b, sfb, masked)


def _shipped_contiguous_entries():
    import json

    from finegemm.heuristics import tuned
    return [e for e in json.loads(tuned.SHIPPED_TABLE.read_text())["entries"]
            if e["kind"].startswith("fp8_contiguous_g")]


@pytest.mark.parametrize("entry", _shipped_contiguous_entries(), ids=lambda e: f"{e['kind']}-{e['m']}x{e['n']}x{e['k']}")
def test_tuned_contiguous_entries(entry):
    """Every shipped tuned contiguous configuration: the planner picks it for its stacked rows, and
    the same kernel configuration on a small problem (segments of odd lengths, an empty group, a
    whole padding block) matches the exact reference with zero padding rows."""
    from finegemm import runtime
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_CONTIGUOUS, make_grouped_config, select_grouped_config
    from finegemm.ops import sm90_fp8_gemm as ops
    if entry["num_sms"] != runtime.get_num_sms():
        pytest.skip("tuned for another SM count")
    g = int(entry["kind"][len("fp8_contiguous_g"):])
    m, n, k, c = entry["m"], entry["n"], entry["k"], entry["config"]
    cfg = select_grouped_config(GEMM_GROUPED_CONTIGUOUS, m, n, k, g, runtime.get_num_sms(), 0, 128)
    picked = {f: getattr(cfg, f) for f in ("block_m", "block_n", "num_stages", "num_multicast", "tma_store",
                                           "half_promote")}
    assert picked == {f: c.get(f, False) for f in picked}
    ms = [300, 0, 129, 517]
    a, sfa, b, sfb, layout, ids = _contiguous_problem(ms, n, k, pad_after=1, use_psum=False, seed=n + k)
    forced = make_grouped_config(GEMM_GROUPED_CONTIGUOUS, a.shape[0], n, k, len(ms), runtime.get_num_sms(), 0, 128,
                                 c["block_m"], c["block_n"], c["num_stages"], c["num_multicast"], c["tma_store"],
                                 half_promote=c.get("half_promote", False))
    d = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ops.m_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, layout, config=forced)
    _check_contiguous(d, a, sfa, b, sfb, layout, ids, False)
