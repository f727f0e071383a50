"""GPU tests of the grouped BF16 GEMMs: m_grouped_bf16_gemm_nt_contiguous / _masked (the SM90 BF16
kernel's m-grouped kinds) and k_grouped_bf16_gemm_tn_contiguous (the k-grouped kind: one launch
for G <= 256; the v1 per-group path behind ops.K_GROUPED_SINGLE_LAUNCH = False).

Every case draws fresh random bf16 data, poisons d with NaN, runs the op and checks against the
fp32 product of the inputs (TF32 off): calc_diff <= 1e-5 over the rows that must be written,
which must hold no NaN; contiguous padding rows (group id -1) exactly zero; masked rows >=
masked_m[g] still NaN (untouched). Plus G = 1/4/8/64, empty groups, masked_m = 0 / Mmax / random /
out of range (clamped), the psum layout, mk alignment 64, every m-grouped kernel forced, bitwise
determinism, a CUDA graph captured once and replayed with new masked_m values. K-grouped: G = 1 /
4 / 16 / 64 / 300 (above the 256 groups of one launch), empty groups first / middle / last / all,
M and N not multiples of the tile (M = 100 through a padded a, N = 136), c None / separate / d
itself, every k-grouped kernel forced, odd strides of a, c and d, bitwise repeats, a CUDA graph,
exactly one kernel launch per call (profiler) and the v1 per-group path for A/B.

The case lists are module-level data: scripts/precompile_bf16.py reads them to build the kernels.
"""
from __future__ import annotations

import dataclasses
import random

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import runtime  # noqa: E402
from finegemm.heuristics import sm90_bf16_gemm as heur  # noqa: E402
from finegemm.ops import sm90_bf16_gemm as ops  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


BF16 = torch.bfloat16
TOL = 1e-5


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _rand_ms(seed: int, g: int, lo: int, hi: int) -> list[int]:
    r = random.Random(seed)
    return [r.randint(lo, hi) for _ in range(g)]


# (id, group sizes, N, K, extra all-padding block inserted after group index, use_psum)
CONTIGUOUS_CASES = [
    ("g1", [300], 576, 7168, None, False),
    ("g4_empty_group", [130, 0, 256, 77], 4096, 512, None, False),
    ("g8_k7168", _rand_ms(8, 8, 1, 300), 576, 7168, None, False),
    ("g64_small_m", _rand_ms(64, 64, 0, 20), 576, 512, None, False),
    ("g4_padding_block", [128, 64, 200, 5], 4096, 512, 1, False),
    ("g4_psum", [200, 0, 128, 50], 4096, 512, None, True),
    ("g2_psum_k7168", [1, 513], 576, 7168, None, True),
]

# (id, G, Mmax, N, K, masked_m, expected_m)
MASKED_CASES = [
    ("g1_full", 1, 256, 4096, 7168, [256], 256),
    ("g4_mixed_k7168", 4, 128, 576, 7168, [0, 128, 37, 1], 64),
    ("g8_mmax192", 8, 192, 4096, 512, _rand_ms(81, 8, 0, 192), 100),
    ("g64_small", 64, 32, 576, 512, _rand_ms(64, 64, 0, 32), 8),
    ("g4_all_zero", 4, 64, 4096, 512, [0, 0, 0, 0], 32),
    ("g2_out_of_range", 2, 96, 576, 512, [1000, -5], 48),
]

# Forced-kernel problems (every kernel of grouped_kernel_keys(), the heuristic overridden).
FORCED_CONTIGUOUS = ([100, 300, 0, 129], 1000, 1152)
FORCED_MASKED = (3, 192, 1000, 1152, [192, 70, 0], 100)

# k-grouped: (id, ks, M, N, c mode)
K_GROUPED_CASES = [
    ("zero_group", [128, 0, 256, 384], 256, 576, "none"),
    ("c", [512, 128, 0], 576, 4096, "c"),
    ("in_place", [0, 256, 7168], 128, 576, "in_place"),
    ("g1", [1024], 4096, 576, "none"),
    ("g1_c", [384], 256, 256, "c"),
    ("g4_zero_first", [0, 512, 128, 256], 256, 576, "c"),
    ("g4_zero_last_in_place", [256, 128, 384, 0], 256, 576, "in_place"),
    ("g4_all_zero", [0, 0, 0, 0], 256, 576, "c"),
    ("g4_all_zero_none", [0, 0, 0, 0], 128, 136, "none"),
    ("g4_m100_n136", [128, 0, 384, 256], 100, 136, "none"),
    ("g4_m100_n136_c", [256, 128, 0, 128], 100, 136, "c"),
    ("g4_m100_n136_in_place", [0, 128, 256, 128], 100, 136, "in_place"),
    ("g16_mixed", [(i * 3 % 7) * 128 for i in range(16)], 384, 1024, "in_place"),
    ("g16_c", [(i % 5) * 256 for i in range(16)], 200, 520, "c"),
    ("g64_small", [(i * 5 % 4) * 128 for i in range(64)], 128, 256, "none"),
    ("g64_in_place", [((i * 7) % 3) * 128 for i in range(64)], 72, 200, "in_place"),
    ("g300_chunks", [((i * 11) % 3) * 128 for i in range(300)], 64, 136, "c"),
    ("g300_in_place", [((i * 13) % 4) * 128 for i in range(300)], 64, 64, "in_place"),
]


def contiguous_rows(ms, alignment=128, pad_after=None):
    """Total rows and per-group start rows of a plain contiguous layout."""
    starts, row = [], 0
    for i, m in enumerate(ms):
        starts.append(row)
        row += -(-m // alignment) * alignment
        if pad_after is not None and i == pad_after:
            row += alignment  # one whole block of -1 rows
    return row, starts


def _contiguous_problem(ms, n, k, pad_after, use_psum, seed, alignment=128):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    g = len(ms)
    m_total, starts = contiguous_rows(ms, alignment, pad_after)
    m_total = max(m_total, alignment)
    ids = torch.full((m_total,), -1, dtype=torch.int32)
    for i, (s, m) in enumerate(zip(starts, ms)):
        ids[s:s + m] = i
    ids = ids.cuda()
    if use_psum:
        layout = torch.tensor([s + m for s, m in zip(starts, ms)], dtype=torch.int32, device="cuda")
    else:
        layout = ids
    a = torch.randn(m_total, k, device="cuda", generator=gen).to(BF16)
    # Padding rows of A hold NaN: their products must never reach d (zeros are stored instead).
    a[ids < 0] = float("nan")
    b = torch.randn(g, n, k, device="cuda", generator=gen).to(BF16)
    return a, b, layout, ids


def _kn_view(b, pad_n=0, pad_group=0):
    """B [G, N, K] stored N-major ([G, K, N], the nn layout), optionally inside a larger buffer
    (row pitch N + pad_n, group pitch K * (N + pad_n) + pad_group elements: a strided view)."""
    g, n, k = b.shape
    ld = n + pad_n
    flat = torch.full((g * (k * ld + pad_group),), float("nan"), device=b.device, dtype=b.dtype)
    view = flat.as_strided((g, k, n), (k * ld + pad_group, ld, 1))
    view.copy_(b.transpose(1, 2))
    return view


def _run_contiguous(a, b, layout, use_psum, b_layout="nt", pad_n=0, pad_group=0):
    """d of the contiguous GEMM, NaN-poisoned first; b is [G, N, K] (its nn form is made here)."""
    d = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=BF16)
    if b_layout == "nn":
        finegemm.m_grouped_bf16_gemm_nn_contiguous(a, _kn_view(b, pad_n, pad_group), d, layout,
                                                   use_psum_layout=use_psum)
    else:
        finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout, use_psum_layout=use_psum)
    return d


def _check_contiguous(d, a, b, ids):
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    real = ids >= 0
    assert (d[~real] == 0).all(), "padding rows must be exactly zero"
    if not real.any():
        return
    ref = torch.zeros(d.shape, device="cuda", dtype=torch.float32)
    for g in range(b.shape[0]):
        rows = ids == g
        if rows.any():
            ref[rows] = a[rows].float() @ b[g].float().t()
    diff = calc_diff(d[real], ref[real])
    assert diff <= TOL, f"vs fp32 product: calc_diff {diff:.3e}"


@pytest.mark.parametrize("case", CONTIGUOUS_CASES, ids=[c[0] for c in CONTIGUOUS_CASES])
def test_contiguous(case):
    _, ms, n, k, pad_after, use_psum = case
    a, b, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=sum(ms) + n + k)
    d = _run_contiguous(a, b, layout, use_psum)
    _check_contiguous(d, a, b, ids)


# nn (B stored [G, K, N]): K not a multiple of the 64-wide k-block (a group's last box must be
# zero-filled, not read from the next group), N not a multiple of 64, strided B views.
NN_CASES = CONTIGUOUS_CASES + [
    ("g3_k200_n200", [100, 300, 129], 200, 200, None, False),
    ("g5_k72_psum", [64, 0, 7, 256, 130], 1000, 72, None, True),
]


@pytest.mark.parametrize("pads", [(0, 0), (8, 64)], ids=["dense", "strided"])
@pytest.mark.parametrize("case", NN_CASES, ids=[c[0] for c in NN_CASES])
def test_contiguous_nn(case, pads):
    """The nn kernel (N-major B read in place) against the fp32 product, and bitwise against the nt
    kernel on the same values (the same wgmmas in the same order, only B's shared-memory layout
    differs)."""
    _, ms, n, k, pad_after, use_psum = case
    a, b, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=sum(ms) + n + k + 1)
    d = _run_contiguous(a, b, layout, use_psum, "nn", *pads)
    _check_contiguous(d, a, b, ids)
    assert torch.equal(d.view(torch.int16), _run_contiguous(a, b, layout, use_psum).view(torch.int16))


def test_contiguous_alignment_64():
    ms, n, k = [64, 10, 100, 0, 64], 576, 512
    old = finegemm.get_mk_alignment_for_contiguous_layout()
    try:
        finegemm.set_mk_alignment_for_contiguous_layout(64)
        a, b, layout, ids = _contiguous_problem(ms, n, k, None, False, seed=64, alignment=64)
        _check_contiguous(_run_contiguous(a, b, layout, False), a, b, ids)
        a, b, layout, ids = _contiguous_problem(ms, n, k, None, True, seed=65, alignment=64)
        _check_contiguous(_run_contiguous(a, b, layout, True), a, b, ids)
    finally:
        finegemm.set_mk_alignment_for_contiguous_layout(old)


def _masked_problem(g, m_max, n, k, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(g, m_max, k, device="cuda", generator=gen).to(BF16)
    b = torch.randn(g, n, k, device="cuda", generator=gen).to(BF16)
    return a, b


def _check_masked(d, a, b, masked):
    m_max = a.shape[1]
    clamped = [min(max(v, 0), m_max) for v in masked]
    got, want = [], []
    for i, m in enumerate(clamped):
        assert not torch.isnan(d[i, :m]).any(), f"group {i}: rows < masked_m not fully written"
        assert torch.isnan(d[i, m:]).all(), f"group {i}: rows >= masked_m = {m} were written"
        got.append(d[i, :m])
        want.append(a[i, :m].float() @ b[i].float().t())
    if sum(clamped) == 0:
        return
    diff = calc_diff(torch.cat(got), torch.cat(want))
    assert diff <= TOL, f"vs fp32 product: calc_diff {diff:.3e}"


def _run_masked(a, b, masked_m, expected_m):
    g, m_max, _ = a.shape
    d = torch.full((g, m_max, b.shape[1]), float("nan"), device="cuda", dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    return d


@pytest.mark.parametrize("case", MASKED_CASES, ids=[c[0] for c in MASKED_CASES])
def test_masked(case):
    _, g, m_max, n, k, masked, expected_m = case
    a, b = _masked_problem(g, m_max, n, k, seed=g * 31 + m_max + n + k)
    d = _run_masked(a, b, torch.tensor(masked, dtype=torch.int32, device="cuda"), expected_m)
    _check_masked(d, a, b, masked)


def _force(monkeypatch, key):
    bm, bn, st, kind, _ = key
    real = heur.select_grouped_config

    def forced(kind_, m, n, k, num_groups, num_sms, expected_m=0, alignment=128, b_mn_major=False):
        cfg = real(kind_, m, n, k, num_groups, num_sms, expected_m, alignment, b_mn_major)
        tiles = -(-m // bm) * -(-n // bn)
        grid = num_sms if kind_ == heur.GEMM_GROUPED_MASKED else min(num_sms, tiles)
        return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st, grid=grid, num_tiles=tiles,
                                   num_units=tiles, smem_bytes=heur.smem_bytes(bm, bn, st, True),
                                   num_threads=heur.num_threads(bm))

    monkeypatch.setattr(ops, "select_grouped_config", forced)
    monkeypatch.setattr(ops, "_plans", {})


_CONT_KEYS = [key for key in heur.grouped_kernel_keys() if key[3] == heur.GEMM_GROUPED_CONTIGUOUS]
_MASK_KEYS = [key for key in heur.grouped_kernel_keys() if key[3] == heur.GEMM_GROUPED_MASKED]


@pytest.mark.parametrize("key", _CONT_KEYS, ids=[ops.grouped_kernel_name(k) for k in _CONT_KEYS])
def test_forced_kernels_contiguous(key, monkeypatch):
    _force(monkeypatch, key)
    ms, n, k = FORCED_CONTIGUOUS
    a, b, layout, ids = _contiguous_problem(ms, n, k, 1, False, seed=key[1])
    _check_contiguous(_run_contiguous(a, b, layout, False, "nn" if key[4] else "nt"), a, b, ids)


@pytest.mark.parametrize("key", _MASK_KEYS, ids=[ops.grouped_kernel_name(k) for k in _MASK_KEYS])
def test_forced_kernels_masked(key, monkeypatch):
    _force(monkeypatch, key)
    g, m_max, n, k, masked, expected_m = FORCED_MASKED
    a, b = _masked_problem(g, m_max, n, k, seed=key[1] + 1)
    d = _run_masked(a, b, torch.tensor(masked, dtype=torch.int32, device="cuda"), expected_m)
    _check_masked(d, a, b, masked)


@pytest.mark.parametrize("block_n", heur.GROUPED_BLOCK_N_THREE_WG)
@pytest.mark.parametrize("m_max, masked", [(192, [192, 191, 129, 0]), (256, [256, 193, 192, 65, 1, 0]),
                                           (448, [448, 300, 0, 385])])
def test_three_warpgroup_masked_edges(m_max, masked, block_n):
    """block_m 192 on Mmax not a multiple of it (the last m-block's A box reaches into the next
    group's rows or past the tensor: those rows only feed rows that are never stored), masked_m
    cutting a warpgroup's 64 rows (TMA store for whole warpgroups, predicated stores for the
    cut one, nothing for the rest), 0 and Mmax; N not a multiple of block_n."""
    g, n, k = len(masked), 1000, 1152
    a, b = _masked_problem(g, m_max, n, k, seed=m_max + block_n)
    cfg = heur.make_grouped_config(heur.GEMM_GROUPED_MASKED, m_max, n, k, g, runtime.get_num_sms(), 192, 0, 192,
                                   block_n)
    d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=BF16)
    ops.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(masked, dtype=torch.int32, device="cuda"), 192,
                                      config=cfg)
    _check_masked(d, a, b, masked)


@pytest.mark.parametrize("b_layout", ["nt", "nn"])
def test_deterministic_contiguous(b_layout):
    _, ms, n, k, pad_after, use_psum = CONTIGUOUS_CASES[2]
    a, b, layout, ids = _contiguous_problem(ms, n, k, pad_after, use_psum, seed=5)
    first = _run_contiguous(a, b, layout, use_psum, b_layout)
    for _ in range(3):
        assert torch.equal(_run_contiguous(a, b, layout, use_psum, b_layout).view(torch.int16), first.view(torch.int16))


def test_deterministic_masked():
    _, g, m_max, n, k, masked, expected_m = MASKED_CASES[2]
    a, b = _masked_problem(g, m_max, n, k, seed=6)
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    first = _run_masked(a, b, masked_m, expected_m)
    for _ in range(3):
        assert torch.equal(_run_masked(a, b, masked_m, expected_m).view(torch.int16), first.view(torch.int16))


def test_masked_cuda_graph_replay_follows_masked_m():
    g, m_max, n, k, expected_m = 6, 320, 4096, 512, 200
    a, b = _masked_problem(g, m_max, n, k, seed=99)
    masked_m = torch.tensor([320, 1, 250, 0, 129, 64], dtype=torch.int32, device="cuda")
    d = torch.full((g, m_max, n), float("nan"), device="cuda", dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
    for values in ([320, 1, 250, 0, 129, 64], [0, 320, 5, 200, 0, 300], [64] * 6, [0] * 6):
        masked_m.copy_(torch.tensor(values, dtype=torch.int32))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_masked(d, a, b, values)


def _shipped_bf16_masked_entries():
    import json

    from finegemm.heuristics import tuned
    return [e for e in json.loads(tuned.SHIPPED_BF16_TABLE.read_text())["entries"]
            if e["kind"].startswith(heur.MASKED_KIND_PREFIX)]


@pytest.mark.parametrize("entry", _shipped_bf16_masked_entries(),
                         ids=lambda e: f"{e['kind']}-{e['m']}x{e['n']}x{e['k']}")
def test_tuned_masked_entries(entry):
    """Every shipped tuned masked BF16 configuration: the planner picks it for its expected m, and
    the same tile on a few groups (masked_m = expected, 0, Mmax, a third) is exact against the fp32
    product with the rows past masked_m untouched."""
    from finegemm import runtime
    if entry["num_sms"] != runtime.get_num_sms():
        pytest.skip("tuned for another SM count")
    g = int(entry["kind"][len(heur.MASKED_KIND_PREFIX):])
    em, n, k, c = entry["m"], entry["n"], entry["k"], entry["config"]
    m_max = finegemm.align(em, 128)
    cfg = heur.select_grouped_config(heur.GEMM_GROUPED_MASKED, m_max, n, k, g, runtime.get_num_sms(), em)
    picked = {f: getattr(cfg, f) for f in ("block_m", "block_n", "num_stages")}
    assert picked == {f: c[f] for f in picked}
    gg = min(g, 4)
    forced = heur.make_grouped_config(heur.GEMM_GROUPED_MASKED, m_max, n, k, gg, runtime.get_num_sms(), em, 128,
                                      c["block_m"], c["block_n"])
    assert forced.num_stages == c["num_stages"]
    a, b = _masked_problem(gg, m_max, n, k, seed=em + n + k)
    masked = [em, 0, m_max, max(em // 3, 1)][:gg]
    d = torch.full((gg, m_max, n), float("nan"), device="cuda", dtype=BF16)
    ops.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor(masked, dtype=torch.int32, device="cuda"), em,
                                      config=forced)
    _check_masked(d, a, b, masked)


def _k_grouped_problem(ks, m, n, mode, seed, a_pad=None):
    """(a, b, d, c, base): fresh random data, d poisoned with NaN (or the accumulator for
    in-place), base = what D_g starts from (c, or zeros). M with a row pitch that is not a
    multiple of 8 elements goes through a padded a / b (the TMA rule), as a caller must."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sum_k, g = sum(ks), len(ks)
    pad_m = a_pad if a_pad is not None else -(-m // 8) * 8
    pad_n = -(-n // 8) * 8
    a = torch.randn(sum_k, pad_m, device="cuda", generator=gen).to(BF16)[:, :m]
    b = torch.randn(sum_k, pad_n, device="cuda", generator=gen).to(BF16)[:, :n]
    c = None
    d = torch.full((g, m, n), float("nan"), device="cuda")
    if mode == "c":
        c = torch.randn(g, m, n, device="cuda", generator=gen) * 10
    elif mode == "in_place":
        d = torch.randn(g, m, n, device="cuda", generator=gen) * 10
        c = d
    base = torch.zeros(g, m, n, device="cuda") if c is None else c.clone()
    return a, b, d, c, base


def _run_k_grouped(a, b, d, ks, c):
    finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, torch.tensor(ks, dtype=torch.int32, device="cuda"), c=c)
    return d


def _check_k_grouped(d, a, b, ks, base):
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    off = 0
    got, want = [], []
    for i, kg in enumerate(ks):
        if kg == 0:
            assert torch.equal(d[i], base[i]), f"group {i} (k = 0): d must equal c (or zeros)"
        else:
            w = base[i] + a[off:off + kg].float().t() @ b[off:off + kg].float()
            diff = calc_diff(d[i], w)
            assert diff <= TOL, f"group {i}: vs fp32 product: calc_diff {diff:.3e}"
            got.append(d[i].flatten())
            want.append(w.flatten())
        off += kg
    if got:
        diff = calc_diff(torch.cat(got), torch.cat(want))
        assert diff <= TOL, f"all groups: vs fp32 product: calc_diff {diff:.3e}"


@pytest.mark.parametrize("case", K_GROUPED_CASES, ids=[c[0] for c in K_GROUPED_CASES])
def test_k_grouped(case):
    _, ks, m, n, mode = case
    a, b, d, c, base = _k_grouped_problem(ks, m, n, mode, seed=sum(ks) + m + n + len(ks))
    _check_k_grouped(_run_k_grouped(a, b, d, ks, c), a, b, ks, base)


@pytest.mark.parametrize("single", [True, False], ids=["one_launch", "v1_per_group"])
def test_k_grouped_launch_paths_agree(single, monkeypatch):
    """Both paths (K_GROUPED_SINGLE_LAUNCH) give the reference result on the same problem."""
    monkeypatch.setattr(ops, "K_GROUPED_SINGLE_LAUNCH", single)
    ks, m, n = [256, 0, 512, 128, 0, 384], 192, 576
    for mode in ("none", "c", "in_place"):
        a, b, d, c, base = _k_grouped_problem(ks, m, n, mode, seed=7)
        _check_k_grouped(_run_k_grouped(a, b, d, ks, c), a, b, ks, base)


_KG_KEYS = heur.k_grouped_kernel_keys()


@pytest.mark.parametrize("key", _KG_KEYS, ids=[ops.k_grouped_kernel_name(k) for k in _KG_KEYS])
def test_forced_kernels_k_grouped(key, monkeypatch):
    """Every k-grouped kernel the heuristic can pick, on edge tiles (M = 100, N = 136 + 64) and
    empty groups, with and without C."""
    bm, bn, st = key
    real = heur.select_k_grouped_config

    def forced(m, n, k_avg, num_groups, num_sms, has_c=False):
        cfg = real(m, n, k_avg, num_groups, num_sms, has_c)
        return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st,
                                   smem_bytes=heur.k_grouped_smem_bytes(bm, bn, st), num_threads=heur.num_threads(bm))

    monkeypatch.setattr(ops, "select_k_grouped_config", forced)
    monkeypatch.setattr(ops, "_plans", {})
    ks = [128, 0, 640, 256, 0]
    for m, n, mode in ((100, 200, "c"), (256, 136, "none"), (130, 320, "in_place")):
        a, b, d, c, base = _k_grouped_problem(ks, m, n, mode, seed=bm + bn + m)
        _check_k_grouped(_run_k_grouped(a, b, d, ks, c), a, b, ks, base)


@pytest.mark.parametrize("mode", ["none", "in_place"])
def test_k_grouped_tma_epilogue_matches_direct(mode, monkeypatch):
    """The fp32 TMA epilogue (a store for c None, a reduce-add for c = d) gives bitwise the direct
    epilogue's result (the launcher's tma_store = 0), on edge tiles and empty groups, two tiles."""
    ks, m, n = [256, 0, 640, 128], 200, 328
    for bn in (128, 256):
        real = heur.select_k_grouped_config

        def forced(m_, n_, k_avg, num_groups, num_sms, has_c=False, bn=bn):
            cfg = real(m_, n_, k_avg, num_groups, num_sms, has_c)
            st = heur.k_grouped_max_stages(128, bn)
            return dataclasses.replace(cfg, block_m=128, block_n=bn, num_stages=st,
                                       smem_bytes=heur.k_grouped_smem_bytes(128, bn, st), num_threads=heur.num_threads(128))

        monkeypatch.setattr(ops, "select_k_grouped_config", forced)
        monkeypatch.setattr(ops, "_plans", {})
        outs = []
        for tma in (1, 0):
            monkeypatch.setattr(ops, "_k_grouped_tma_flag", lambda has_c, t=tma: t)
            a, b, d, c, base = _k_grouped_problem(ks, m, n, mode, seed=11 + bn)
            outs.append(_run_k_grouped(a, b, d, ks, c).clone())
            _check_k_grouped(outs[-1], a, b, ks, base)
        changed = (outs[0].view(torch.int32) != outs[1].view(torch.int32)).sum().item()
        assert changed == 0, f"bn{bn} {mode}: {changed} elements differ between the TMA and the direct epilogue"


def test_k_grouped_odd_strides():
    """a with a row pitch > M, d whose group stride is not M rows (computed in a temporary and
    copied back), c with strides unlike d's (copied into d's layout), c is d with padded groups."""
    ks, m, n, g = [128, 256, 0, 384], 96, 264, 4
    gen = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(sum(ks), m + 40, device="cuda", generator=gen).to(BF16)[:, 8:m + 8]
    b = torch.randn(sum(ks), n + 8, device="cuda", generator=gen).to(BF16)[:, :n]
    d_store = torch.full((g, m + 3, n + 4), float("nan"), device="cuda")
    d = d_store[:, :m, :n]  # group stride (m + 3) * (n + 4), row pitch n + 4
    c = torch.randn(g, m, n + 8, device="cuda", generator=gen)[:, :, :n]  # row pitch n + 8, unlike d's
    base = c.clone()
    _run_k_grouped(a, b, d, ks, c)
    _check_k_grouped(d, a, b, ks, base)
    assert torch.isnan(d_store[:, m:, :]).all() and torch.isnan(d_store[:, :, n:]).all(), "padding written"
    d_store.normal_(generator=gen)
    d = d_store[:, :m, :n]
    base = d.clone()
    _run_k_grouped(a, b, d, ks, d)
    _check_k_grouped(d, a, b, ks, base)


def test_k_grouped_deterministic():
    ks, m, n = [384, 0, 1024, 128, 256], 320, 1032
    a, b, d, c, base = _k_grouped_problem(ks, m, n, "c", seed=3)
    first = _run_k_grouped(a, b, d, ks, c).clone()
    _check_k_grouped(first, a, b, ks, base)
    for _ in range(3):
        d.fill_(float("nan"))
        assert torch.equal(_run_k_grouped(a, b, d, ks, c).view(torch.int32), first.view(torch.int32))


def test_k_grouped_cuda_graph_replay():
    """Captured once (no host sync, no host -> device copy in the call), replayed with new a / b
    / c values: the group table is in the captured kernel parameters."""
    ks, m, n = [256, 0, 512, 128], 256, 576
    a, b, d, c, base = _k_grouped_problem(ks, m, n, "c", seed=21)
    _run_k_grouped(a, b, d, ks, c)  # compile outside the capture
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_t, c=c)
    gen = torch.Generator(device="cuda").manual_seed(22)
    for _ in range(3):
        a.copy_(torch.randn(a.shape, device="cuda", generator=gen).to(BF16))
        b.copy_(torch.randn(b.shape, device="cuda", generator=gen).to(BF16))
        c.copy_(torch.randn(c.shape, device="cuda", generator=gen))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_k_grouped(d, a, b, ks, c.clone())


def _kernel_launches(fn) -> list[str]:
    """Names of the GPU kernels (and memcpy / memset activities) that fn() runs."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("g, mode", [(1, "none"), (4, "c"), (16, "in_place"), (64, "c"), (256, "none"),
                                     (300, "c"), (300, "in_place")])
def test_k_grouped_launch_count(g, mode, monkeypatch):
    """One kernel launch per call for G <= 256 (no copies, no memsets, no per-group launches),
    ceil(G / 256) above; counted by the profiler and by the host launcher's own count."""
    ks = [((i * 7) % 4) * 128 for i in range(g)]
    ks[0] = 128  # sum(ks) > 0: the kernel runs
    a, b, d, c, base = _k_grouped_problem(ks, 128, 192, mode, seed=g)
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    call = lambda: finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, ks_t, c=c)  # noqa: E731
    call()  # compile and plan outside the profiled call
    if mode == "in_place":
        d.copy_(base)
    counted = []
    real = ops._get_k_grouped_launcher()

    def counting(*args):
        rc = real(*args)
        counted.append(args[-2]._obj.value)  # ctypes.byref(launches)
        return rc

    monkeypatch.setattr(ops, "_get_k_grouped_launcher", lambda: counting)
    names = _kernel_launches(call)
    slots = sum(1 for k in ks if k) if mode == "in_place" else g  # in place: empty groups are skipped
    want = -(-slots // 256)
    assert len(names) == want, f"expected {want} kernel launch(es), got {names}"
    assert counted == [want]
    _check_k_grouped(d, a, b, ks, base)
