"""GPU tests of the SM90 BF16 GEMM (finegemm.bf16_gemm_{nt,nn,tn,tt} on CUDA tensors).

Every case draws fresh random bf16 inputs in the layout's stored form (A [M, K] or [K, M],
B [N, K] or [K, N]; operands whose contiguous dimension is not a multiple of 8 get a padded row
pitch, as the TMA rule requires), poisons d with NaN, runs the kernel and checks
  * against the fp32 product of the inputs (TF32 off): calc_diff <= 1e-5;
  * d fully written (no NaN left).
Plus every kernel the heuristic can pick forced through odd shapes, bitwise determinism over
repeated calls (split-K too), in-place accumulation (c is d), CUDA graph capture and replay,
and the split-K counters left at zero.
"""
from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.heuristics import sm90_bf16_gemm as heur  # noqa: E402
from finegemm.ops import sm90_bf16_gemm as ops  # noqa: E402
from finegemm.testing import calc_diff, capture_graph  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

BF16 = torch.bfloat16
LAYOUTS = ("nt", "nn", "tn", "tt")
TOL = 1e-5


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _stored(rows, cols, gen, scale=1.0):
    """A bf16 [rows, cols] operand with unit column stride and a 16-byte row pitch (padded when
    cols % 8 != 0: a view into a wider allocation)."""
    pitch = -(-cols // 8) * 8
    full = torch.randn(rows, pitch, device="cuda", generator=gen) * scale
    return full.to(BF16)[:, :cols]


def _operands(layout, m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = _stored(m, k, g) if layout[0] == "n" else _stored(k, m, g)
    b = _stored(n, k, g) if layout[1] == "t" else _stored(k, n, g)
    return a, b


def _logical(layout, a, b):
    """(A [M, K], B [N, K]) views of the stored operands."""
    return (a if layout[0] == "n" else a.t()), (b if layout[1] == "t" else b.t())


def _reference(layout, a, b, c=None):
    A, B = _logical(layout, a, b)
    ref = A.float() @ B.float().t()
    return ref if c is None else ref + c


def _gemm(layout, a, b, d, c=None):
    getattr(finegemm, f"bf16_gemm_{layout}")(a, b, d, c=c)


def _check(d, ref, tol=TOL):
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    diff = calc_diff(d, ref)
    assert diff <= tol, f"vs fp32 product: calc_diff {diff:.3e}"


SHAPES = [(m, n, k) for m in (1, 17, 128, 4097) for n in (576, 2112, 7168) for k in (512, 7168, 4104)]


@pytest.mark.parametrize("out", ["bf16", "fp32", "fp32+c"])
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(layout, m, n, k, out):
    a, b = _operands(layout, m, n, k, seed=m * 7 + n * 3 + k + len(out))
    dtype = BF16 if out == "bf16" else torch.float32
    c = None
    if out == "fp32+c":
        g = torch.Generator(device="cuda").manual_seed(k)
        c = torch.randn(m, n, device="cuda", generator=g) * 10
    d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    _gemm(layout, a, b, d, c)
    _check(d, _reference(layout, a, b, c))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_accumulate(layout):
    m, n, k = 300, 2112, 7168
    a, b = _operands(layout, m, n, k, seed=5)
    c = torch.randn(m, n, device="cuda")
    d = c.clone()
    _gemm(layout, a, b, d, d)  # D = D + op(A) op(B)
    _check(d, _reference(layout, a, b, c))
    # Split-K plan (skinny, long K) in place too.
    m = 1
    a, b = _operands(layout, m, n, k, seed=6)
    c = torch.randn(m, n, device="cuda")
    d = c.clone()
    _gemm(layout, a, b, d, d)
    _check(d, _reference(layout, a, b, c))


def _forced_config(key, sms):
    bm, bn, st, a_mn, b_mn, split, tma = key

    def forced(m, n, k, num_sms, a_mn_major=False, b_mn_major=False, out_fp32=False, has_c=False,
               allow_split_k=True):
        cfg = heur.select_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, allow_split_k)
        splits = min(3, -(-k // heur.BLOCK_K)) if split else 1
        tiles = -(-m // bm) * -(-n // bn)
        return dataclasses.replace(cfg, block_m=bm, block_n=bn, num_stages=st, num_splits=splits, num_tiles=tiles,
                                   num_units=tiles * splits, grid=min(num_sms, tiles * splits),
                                   smem_bytes=heur.smem_bytes(bm, bn, st, tma), num_threads=heur.num_threads(bm))

    return forced


# The one-k-block kernels here; the B-group kernels the shipped table picks (8-field keys) run in
# test_shipped_b_group_entries at their entries' shapes (their K and ring are what make a group fit).
_KEYS = [key for key in heur.all_kernel_keys() if len(key) == 7]


@pytest.mark.parametrize("key", _KEYS, ids=[ops.kernel_name(k) for k in _KEYS])
def test_every_kernel(key, monkeypatch):
    """Each kernel the heuristic can pick, through edge tiles in M, N and K (heuristic overridden),
    with bf16 (TMA store where the kernel has it) and fp32 + C outputs."""
    bm, bn, st, a_mn, b_mn, split, tma = key
    layout = {v: k_ for k_, v in heur.LAYOUTS.items()}[(a_mn, b_mn)]
    monkeypatch.setattr(ops, "select_config", _forced_config(key, finegemm.get_num_sms()))
    monkeypatch.setattr(ops, "_plans", {})
    for m, n, k in [(200, 328, 1000), (1, 64, 2056), (130, 520, 136)]:
        a, b = _operands(layout, m, n, k, seed=bn + m + k)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
        _gemm(layout, a, b, d)
        _check(d, _reference(layout, a, b))
        c = torch.randn(m, n, device="cuda")
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        _gemm(layout, a, b, d, c)
        _check(d, _reference(layout, a, b, c))
        cfg, _ = ops.plan(m, n, k, layout, True, True, d.device.index)
        assert cfg.kernel_key() == key


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n,k,out", [(4097, 7168, 7168, "bf16"), (1, 2112, 7168, "bf16"),
                                       (17, 2112, 4104, "fp32"), (128, 7168, 7168, "fp32+c")])
def test_deterministic(layout, m, n, k, out):
    a, b = _operands(layout, m, n, k, seed=3)
    dtype = BF16 if out == "bf16" else torch.float32
    c = torch.randn(m, n, device="cuda") if out == "fp32+c" else None
    first = None
    for _ in range(10):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        _gemm(layout, a, b, d, c)
        if first is None:
            first = d.clone()
        else:
            bits = torch.int16 if dtype == BF16 else torch.int32
            assert torch.equal(d.view(bits), first.view(bits)), "results differ between identical calls"
    _check(first, _reference(layout, a, b, c))


def test_split_k_used_and_counters_reset():
    m, n, k = 1, 2112, 7168
    for layout in LAYOUTS:
        a_mn, b_mn = heur.LAYOUTS[layout]
        cfg = heur.select_config(m, n, k, finegemm.get_num_sms(), a_mn, b_mn)
        assert cfg.num_splits > 1, "expected a split-K plan for a skinny long-K shape"
        a, b = _operands(layout, m, n, k, seed=9)
        for _ in range(3):
            d = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
            _gemm(layout, a, b, d)
            _check(d, _reference(layout, a, b))
    _counters_reset()  # synchronizes


def _counters_reset():
    """Every split-K counter back to zero (the kernels' invariant between calls)."""
    torch.cuda.synchronize()
    for (dev, stream), (ws, cnt) in ops._buffers.items():
        assert int(cnt.abs().sum()) == 0, "split-K counters not reset to zero"


# The workspace reduction with one unit per CTA against the same config one CTA short (several
# units per CTA: the counters and slabs reused within the call): (layout, m, n, k, block_m, block_n,
# splits, out). No split cluster: tiles wider than 64 columns (the per-chunk sum), or more than 8
# splits. Every layout, partial tiles in M, N and K.
SPLIT_WORKSPACE_CASES = [("nt", 128, 256, 7168, 128, 32, 16, "fp32"), ("tn", 64, 1000, 7168, 64, 128, 6, "bf16"),
                         ("nn", 17, 700, 4104, 64, 128, 5, "fp32+c"), ("tt", 130, 512, 7168, 128, 128, 4, "fp32"),
                         ("nt", 1, 320, 7168, 64, 32, 12, "bf16")]


@pytest.mark.parametrize("case", SPLIT_WORKSPACE_CASES, ids=str)
def test_split_workspace_one_unit_matches_several(case):
    """One unit per CTA and several per CTA give the in-order sum bit for bit; fp32 product,
    poisoned d, bitwise repeat; afterwards the counters are zero."""
    layout, m, n, k, bm, bn, splits, out = case
    a_mn, b_mn = heur.LAYOUTS[layout]
    a, b = _operands(layout, m, n, k, seed=m + n + 5 * splits)
    c = torch.randn(m, n, device="cuda") if out == "fp32+c" else None
    dtype = BF16 if out == "bf16" else torch.float32
    cfg = heur.make_config(m, n, k, finegemm.get_num_sms(), a_mn, b_mn, dtype == torch.float32, c is not None, bm,
                           bn, splits)
    units = cfg.num_units
    assert cfg.grid == units, "the case must give every unit its own CTA"
    results = _run_at_grids(case, layout, a, b, c, cfg, dtype)
    assert all(call.cluster_size() == 1 for _, call in results.values()), "this case must take the workspace path"
    assert torch.equal(results[units][0], results[units - 1][0]), "one unit per CTA differs from several"
    _counters_reset()


def test_split_k_nan_partials():
    """A NaN in A makes NaN partials: through the workspace (one unit per CTA, several) and the
    split cluster, exactly the NaN entries of the product come out NaN."""
    m, n, k = 17, 256, 7168
    a, b = _operands("nt", m, n, k, seed=8)
    a = a.clone()
    a[4, 3000] = float("nan")
    ref = _reference("nt", a, b)
    # (CTAs short of one per unit, block_n, splits): the workspace with one unit per CTA (bn128: no
    # cluster), with several, and the split cluster.
    for grid_short, bn, splits in ((0, 128, 4), (5, 128, 4), (0, 32, 8)):
        cfg = heur.make_config(m, n, k, finegemm.get_num_sms(), False, False, True, False, 64, bn, splits)
        d = torch.zeros((m, n), device="cuda", dtype=torch.float32)
        ops.prepare(a, b, d, None, "nt", config=dataclasses.replace(cfg, grid=cfg.grid - grid_short))()
        assert torch.equal(torch.isnan(d), torch.isnan(ref)), f"{cfg}: NaN entries differ from the product"
        fin = ~torch.isnan(ref)
        assert calc_diff(d[fin], ref[fin]) <= TOL
    _counters_reset()


def _run_at_grids(case, layout, a, b, c, cfg, dtype):
    """A split-K config with one CTA per unit and with one CTA fewer (several units per CTA):
    poisoned d, two calls bitwise equal, the fp32 product. {grid: (d, prepared call)}."""
    m, n = cfg.m, cfg.n
    out = {}
    for grid in (cfg.num_units, cfg.num_units - 1):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        call = ops.prepare(a, b, d, c, layout, config=dataclasses.replace(cfg, grid=grid))
        call()
        first = d.clone()
        call()
        assert torch.equal(first, d), f"{case} grid {grid}: not bitwise repeatable"
        _check(d, _reference(layout, a, b, c))
        out[grid] = (d, call)
    return out


# Split-K through distributed shared memory (one cluster per tile, one unit per CTA, block_n <= 64):
# (layout, m, n, k, block_m, block_n, stages, splits, out). Every layout, partial tiles in M, N and
# K, 2 to 8 splits, the router shapes' tile (bm64 bn32 split 8, fp32 d) among them. Where the
# clusters do not all fit at once (the 128x256 case's sixteen 8-CTA clusters on the H200), the host
# must keep the workspace path.
SPLIT_CLUSTER_CASES = [("nt", 64, 256, 7168, 64, 32, 16, 8, "fp32"), ("tn", 128, 256, 7168, 64, 32, 10, 8, "fp32"),
                       ("nn", 128, 256, 7168, 64, 64, 14, 8, "fp32+c"),
                       ("nn", 128, 2112, 7168, 128, 32, 10, 2, "bf16"), ("tt", 17, 1000, 4104, 64, 64, 14, 3, "bf16"),
                       ("nt", 130, 200, 7000, 128, 64, 9, 4, "fp32+c"), ("tn", 1, 576, 7168, 64, 32, 16, 5, "bf16"),
                       ("nn", 33, 100, 520, 64, 32, 10, 2, "fp32+c"), ("tt", 200, 130, 2056, 128, 32, 11, 6, "fp32"),
                       ("nt", 64, 300, 7168, 64, 32, 16, 7, "fp32"), ("tt", 128, 4096, 7168, 128, 64, 9, 2, "bf16"),
                       ("nt", 100, 330, 3000, 128, 32, 10, 7, "fp32+c")]


@pytest.mark.parametrize("case", SPLIT_CLUSTER_CASES, ids=str)
def test_split_cluster_matches_workspace_path(case):
    """The split cluster's sum is the workspace path's bit for bit (same partials, same order): the
    same config with a grid one CTA short of one unit each takes the workspace path. Both against
    the fp32 product with a poisoned d and a bitwise repeat; the host picks the cluster exactly when
    every cluster fits on the GPU at once."""
    from finegemm.ops._runtime import max_active_clusters

    layout, m, n, k, bm, bn, st, splits, out = case
    a_mn, b_mn = heur.LAYOUTS[layout]
    a, b = _operands(layout, m, n, k, seed=m + n + splits)
    c = torch.randn(m, n, device="cuda") if out == "fp32+c" else None
    dtype = BF16 if out == "bf16" else torch.float32
    cfg = heur.make_config(m, n, k, finegemm.get_num_sms(), a_mn, b_mn, dtype == torch.float32, c is not None, bm,
                           bn, splits, num_stages=st)
    units = cfg.num_units
    assert cfg.grid == units, "the case must give every unit its own CTA"
    fits = max_active_clusters(ops._load(cfg, torch.cuda.current_device()), splits, cfg.num_threads, cfg.smem_bytes) * splits >= units
    results = _run_at_grids(case, layout, a, b, c, cfg, dtype)
    for grid, (d, call) in results.items():
        cluster = call.cluster_size()
        assert cluster == (splits if grid == units and fits else 1), f"grid {grid} (fits {fits}): cluster {cluster}"
        # A split cluster's call looks up no workspace (the launcher takes null buffers then).
        assert call._split_k == (cluster == 1), "split buffers wanted exactly without the cluster"
    assert torch.equal(results[units][0], results[units - 1][0]), "split cluster differs from the workspace path"


# A split cluster's bf16 d (no C) leaves through per-warp TMA stores (16-row boxes) where d's rows
# allow a TMA store: (layout, m, n, k, block_m, block_n, stages, splits). d is a window of a taller,
# wider NaN tensor, so a box reaching past row m or column n would show.
SPLIT_TMA_STORE_CASES = [("nt", 17, 1000, 7168, 64, 64, 14, 4), ("tn", 100, 1024, 4104, 128, 32, 10, 2),
                         ("nn", 1, 1024, 7168, 64, 32, 16, 2), ("tt", 130, 584, 2056, 128, 64, 9, 3)]


@pytest.mark.parametrize("case", SPLIT_TMA_STORE_CASES, ids=str)
def test_split_cluster_tma_store_stays_in_d(case):
    """The TMA-stored split cluster writes exactly d's window (the cells around it stay NaN) and
    the workspace path's result bit for bit, poisoned output, fp32 product, bitwise repeat."""
    layout, m, n, k, bm, bn, st, splits = case
    a_mn, b_mn = heur.LAYOUTS[layout]
    a, b = _operands(layout, m, n, k, seed=5 * m + n)
    out = {}
    cfg = heur.make_config(m, n, k, finegemm.get_num_sms(), a_mn, b_mn, False, False, bm, bn, splits, num_stages=st)
    for grid in (cfg.num_units, cfg.num_units - 1):
        wide = torch.full((m + 3, n + 8), float("nan"), device="cuda", dtype=BF16)
        d = wide[1:m + 1, :n]
        call = ops.prepare(a, b, d, None, layout, config=dataclasses.replace(cfg, grid=grid))
        call()
        first = d.clone()
        call()
        assert torch.equal(first, d), f"{case} grid {grid}: not bitwise repeatable"
        _check(d, _reference(layout, a, b))
        assert call.cluster_size() == (splits if grid == cfg.num_units else 1)
        outside = wide.clone()
        outside[1:m + 1, :n] = float("nan")
        assert bool(torch.isnan(outside.float()).all()), (
            f"{case}: {int((~torch.isnan(outside.float())).sum())} cells outside d written")
        out[grid] = d.clone()
    assert torch.equal(out[cfg.num_units], out[cfg.num_units - 1]), "TMA-stored split cluster differs"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n,k,out", [(128, 2112, 7168, "bf16"), (1, 2112, 7168, "bf16"), (17, 576, 4104, "fp32+c"),
                                       (4097, 2112, 512, "fp32")])
def test_cuda_graph(layout, m, n, k, out):
    a, b = _operands(layout, m, n, k, seed=21)
    dtype = BF16 if out == "bf16" else torch.float32
    c = torch.randn(m, n, device="cuda") if out == "fp32+c" else None
    d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    _gemm(layout, a, b, d, c)  # compile + plan outside the capture
    torch.cuda.synchronize()
    graph = capture_graph(lambda: _gemm(layout, a, b, d, c))
    for seed in (1, 2, 3):
        a2, b2 = _operands(layout, m, n, k, seed=100 + seed)
        a.copy_(a2)
        b.copy_(b2)
        if c is not None:
            c.copy_(torch.randn(m, n, device="cuda"))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(d, _reference(layout, a, b, c))


def _shipped_dense_entries():
    import json

    from finegemm.heuristics import tuned
    return [e for e in json.loads(tuned.SHIPPED_BF16_TABLE.read_text())["entries"]
            if e["kind"] in tuple(f"bf16_{lay}" for lay in LAYOUTS)]


@pytest.mark.parametrize("entry", _shipped_dense_entries(),
                         ids=lambda e: f"{e['kind'][5:]}-{e['m']}x{e['n']}x{e['k']}{'-fp32' if e['out_fp32'] else ''}")
def test_tuned_dense_entries(entry):
    """Every shipped dense BF16 table entry through the public API, at its own M (where the planner
    must pick it) and at an M between tuned ones (served by the nearest entry), d poisoned, against
    the fp32 product."""
    from finegemm import runtime
    if entry["num_sms"] != runtime.get_num_sms():
        pytest.skip("tuned for another SM count")
    layout, n, k = entry["kind"][5:], entry["n"], entry["k"]
    out_fp32, has_c = entry["out_fp32"], entry["has_c"]
    for m in (entry["m"], entry["m"] + 17):
        if m == entry["m"]:
            cfg = heur.select_config(m, n, k, runtime.get_num_sms(), layout[0] == "t", layout[1] == "n",
                                     out_fp32, has_c)
            for f, v in entry["config"].items():
                if hasattr(cfg, f):
                    assert getattr(cfg, f) == (tuple(v) if isinstance(v, list) else v), f
        a, b = _operands(layout, m, n, k, seed=m + n + k)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if out_fp32 else BF16)
        c = torch.randn(m, n, device="cuda") if has_c else None
        _gemm(layout, a, b, d, c=c)
        _check(d, _reference(layout, a, b, c))


# Fitted A boxes (NOTES v0.68, v0.69): the last m-block of K-major A loads round_up(M mod BLOCK_M, 8)
# rows (stale rows after them: another m-block's, or never written); MN-major A keeps full boxes.
@pytest.mark.parametrize("m", [1, 8, 9, 63, 65, 100, 127, 136, 200, 257, 384])
@pytest.mark.parametrize("layout", ["nt", "nn", "tt"])
@pytest.mark.parametrize("bm,bn,splits", [(64, 64, 1), (64, 128, 2), (128, 32, 1), (128, 64, 3)])
def test_fitted_a_boxes(m, layout, bm, bn, splits):
    n, k = 2112, 4104
    a, b = _operands(layout, m, n, k, seed=m * 13 + bm + bn)
    try:
        cfg = heur.make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", False, False, bm, bn, splits)
    except ValueError:
        pytest.skip("tile outside this layout's space")
    d = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
    call = ops.prepare(a, b, d, layout=layout, config=cfg)
    call()
    first = d.clone()
    call()
    _check(d, _reference(layout, a, b))
    assert torch.equal(first, d)
    if layout[0] == "n":
        # The same A with NaN rows past M (a view into a taller buffer): never read.
        tall = torch.full((m + 64, k), float("nan"), device="cuda", dtype=BF16)
        tall[:m].copy_(a)
        d2 = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
        ops.prepare(tall[:m], b, d2, layout=layout, config=cfg)()
        assert torch.equal(d2, d)


# The tall tile (block_m 256: four consumer warpgroups; forced configs until the planner takes it):
# one m-block for M <= 256, the last m-block's fitted A box (K-major A), N past the last tile, the
# TMA store and the direct stores (fp32 D, with C, and the staging-free "direct" build).
TALL_SHAPES = [(1, 2112, 4104, 128), (17, 200, 512, 64), (255, 584, 1024, 128), (257, 2112, 7168, 128),
               (600, 576, 4104, 64), (4097, 1000, 1024, 128)]


TALL_OUTS = ("bf16", "fp32", "fp32+c", "fp32 direct")


def tall_config(m, n, k, bn, layout, out):
    """The forced tall-tile config of a case (scripts/precompile_bf16.py compiles the same)."""
    return heur.make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", out != "bf16", out == "fp32+c",
                            heur.TALL_BLOCK_M, bn, 1, num_stages=4 if out == "fp32 direct" else None,
                            direct_epilogue=out == "fp32 direct")


@pytest.mark.parametrize("out", TALL_OUTS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n,k,bn", TALL_SHAPES, ids=str)
def test_tall_tile(m, n, k, bn, layout, out):
    a, b = _operands(layout, m, n, k, seed=m + n + bn)
    f32 = out != "bf16"
    c = torch.randn(m, n, device="cuda") if out == "fp32+c" else None
    cfg = tall_config(m, n, k, bn, layout, out)
    assert cfg.num_threads == 640
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if f32 else BF16)
    call = ops.prepare(a, b, d, c=c, layout=layout, config=cfg)
    call()
    first = d.clone()
    call()
    _check(d, _reference(layout, a, b, c))
    assert torch.equal(first, d), "the tall tile is not deterministic"


# 2-CTA multicast pairs (impls/sm90_bf16_gemm.cuh kNumMulticast; forced configs): (m, n, k, block_m,
# block_n, A shared). Odd block counts give a pair a phantom partner (M = 1, 300, 4097 sharing B;
# 5 n-blocks sharing A), partial last tiles on both edges, K past the last whole k-block, the
# tall tile sharing A. A layout whose shared operand is MN-major needs its block % 128 == 0.
MC_CASES = [(1, 2112, 4104, 128, 128, False), (17, 584, 512, 64, 128, True), (300, 1000, 1024, 128, 128, False),
            (300, 1000, 1024, 128, 256, True), (257, 2112, 7168, 128, 176, False), (4097, 584, 1024, 128, 128, True),
            (4097, 640, 2048, 128, 256, False), (600, 576, 4104, 256, 128, True)]


def multicast_config(m, n, k, bm, bn, on_a, layout, out):
    """The forced multicast config of a case (scripts/precompile_bf16.py compiles the same)."""
    return heur.make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", out != "bf16", out == "fp32+c", bm, bn, 1,
                            num_multicast=2, multicast_on_a=on_a)


def multicast_case_fits(bm, bn, on_a, layout) -> bool:
    """Whether the layout's shared operand can be split between the pair (heuristics.check_multicast)
    and the layout takes the tile (an N-major B: block_n % 64 == 0)."""
    mn_major = layout[0] == "t" if on_a else layout[1] == "n"
    return (not mn_major or (bm if on_a else bn) % 128 == 0) and (layout[1] == "t" or bn % 64 == 0)


@pytest.mark.parametrize("out", ["bf16", "fp32", "fp32+c"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", MC_CASES, ids=str)
def test_multicast_pairs(case, layout, out):
    """A pair sharing A or B through TMA multicast: launched as 2-CTA clusters, poisoned outputs
    fully written, the fp32 reference, bitwise repeatable, and nothing written past d: d is a view
    inside a NaN-poisoned buffer 128 rows and 64 columns larger, whose margin must stay NaN (a
    phantom partner's tile lies there)."""
    m, n, k, bm, bn, on_a = case
    if not multicast_case_fits(bm, bn, on_a, layout):
        # The pair's rule, or the layout's (an N-major B takes whole 64-column boxes: no bn176).
        with pytest.raises(ValueError, match="multiple of 128|outside the BF16 kernel space"):
            multicast_config(m, n, k, bm, bn, on_a, layout, out)
        return
    a, b = _operands(layout, m, n, k, seed=m + 3 * n + bn)
    f32 = out != "bf16"
    c = torch.randn(m, n, device="cuda") if out == "fp32+c" else None
    cfg = multicast_config(m, n, k, bm, bn, on_a, layout, out)
    big = torch.full((m + 128, n + 64), float("nan"), device="cuda", dtype=torch.float32 if f32 else BF16)
    d = big[:m, :n]
    call = ops.prepare(a, b, d, c=c, layout=layout, config=cfg)
    assert call.cluster_size() == 2
    call()
    first = d.clone()
    call()
    _check(d, _reference(layout, a, b, c))
    assert torch.equal(first, d), "the multicast pair is not deterministic"
    assert torch.isnan(big[m:]).all() and torch.isnan(big[:, n:]).all(), "written past d"


def test_multicast_pair_matches_single_ctas():
    """A pair computes each tile with the same wgmmas in the same order as a lone CTA: bit-equal."""
    m, n, k = 300, 1000, 2048
    for layout in LAYOUTS:
        a, b = _operands(layout, m, n, k, seed=7)
        for on_a in (False, True):
            outs = []
            for mc in (1, 2):
                cfg = heur.make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", False, False, 128, 128, 1,
                                       num_multicast=mc, multicast_on_a=on_a and mc == 2)
                d = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
                ops.prepare(a, b, d, layout=layout, config=cfg)()
                outs.append(d)
            assert torch.equal(outs[0], outs[1]), (layout, on_a)


# B boxes over 2 or 4 k-blocks (b_group, impls/sm90_bf16_gemm.cuh kBGroup; a K-major B: nt, tt):
# (layout, m, n, k, block_m, block_n, stages, splits, out_fp32 + C, group). Split clusters and the
# workspace path, TMA and direct stores, fp32 + C, N past the last tile, M = 1 / 17 / 4097.
B_GROUP_CASES = [("nt", 1, 4096, 7168, 128, 32, 10, 1, False, 2),
                 ("nt", 128, 4096, 7168, 128, 64, 8, 2, False, 4),
                 ("tt", 17, 2112, 7168, 64, 64, 8, 2, False, 2),
                 ("nt", 4097, 200, 1024, 128, 64, 8, 1, False, 4),
                 ("tt", 130, 584, 4096, 128, 128, 4, 1, True, 2),
                 ("nt", 255, 776, 2048, 64, 64, 6, 4, True, 2)]


@pytest.mark.parametrize("case", B_GROUP_CASES, ids=str)
def test_b_group_matches_one_k_block_boxes(case):
    """The grouped B boxes give the one-k-block boxes' result bit for bit (the same wgmmas in the
    same order): poisoned outputs, the fp32 reference, bitwise repeat."""
    layout, m, n, k, bm, bn, stages, splits, f32_c, group = case
    a, b = _operands(layout, m, n, k, seed=3 * m + n + group)
    c = torch.randn(m, n, device="cuda") if f32_c else None
    base = heur.make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", f32_c, f32_c, bm, bn, splits,
                            num_stages=stages)
    assert heur.b_group_fits(base, group), f"{case} should allow b_group {group}"
    out = []
    for cfg in (base, dataclasses.replace(base, b_group=group)):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if f32_c else BF16)
        call = ops.prepare(a, b, d, c, layout, config=cfg)
        call()
        first = d.clone()
        call()
        assert torch.equal(first, d), f"{cfg}: not bitwise repeatable"
        _check(d, _reference(layout, a, b, c))
        out.append(d)
    assert torch.equal(out[0], out[1]), f"{case}: b_group {group} differs from one-k-block boxes"


def _shipped_b_group_entries():
    import json

    from finegemm.heuristics import tuned

    entries = json.loads(tuned.SHIPPED_BF16_TABLE.read_text())["entries"]
    return [(e["kind"][len("bf16_"):], e["m"], e["n"], e["k"]) for e in entries
            if e["config"].get("b_group", 1) > 1 and e["kind"][len("bf16_"):] in heur.LAYOUTS]


@pytest.mark.parametrize("entry", _shipped_b_group_entries(), ids=str)
def test_shipped_b_group_entries(entry):
    """Every shipped entry that names a B group, called through the public API 8 rows short of
    its tuned M (a partial last tile; an M-major A needs M % 8 == 0): the plan carries the group,
    the result matches the reference (poisoned output) and, bit for bit, the same tile with one
    k-block per box."""
    layout, m, n, k = entry
    m -= 8
    a, b = _operands(layout, m, n, k, seed=m + n)
    cfg, _ = ops.plan(m, n, k, layout, False, False, torch.cuda.current_device())
    assert cfg.b_group > 1, f"{entry}: the table's group was not picked at M = {m}"
    assert cfg.kernel_key() in heur.all_kernel_keys()
    d = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
    _gemm(layout, a, b, d)
    _check(d, _reference(layout, a, b))
    one = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
    ops.prepare(a, b, one, None, layout, config=dataclasses.replace(cfg, b_group=1))()
    assert torch.equal(d, one), f"{entry}: the B groups differ from one-k-block boxes"


@pytest.mark.parametrize("shape,layout,group", [((64, 1004, 4096), "nt", 2), ((64, 1024, 4000), "nt", 2),
                                                ((64, 1024, 4096), "nn", 2), ((64, 1024, 4096), "nt", 4)], ids=str)
def test_b_group_refused_where_it_does_not_fit(shape, layout, group):
    """N % 8, K % 64, an N-major B, or a ring of one group (4 stages, group 4: it deadlocked): the
    forced b_group is refused with a ValueError naming the rule, before any launch."""
    m, n, k = shape
    a, b = _operands(layout, m, n, k, seed=11)
    base = heur.make_config(m, n, k, 132, layout[0] == "t", layout[1] == "n", False, False, 64, 64, 1, num_stages=4)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=BF16)
    with pytest.raises(ValueError, match="b_group"):
        ops.prepare(a, b, d, None, layout, config=dataclasses.replace(base, b_group=group))
    assert bool(torch.isnan(d.float()).all()), "a refused call wrote d"
