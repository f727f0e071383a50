"""GPU tests of the SM90 FP8 "1D2D" GEMM (finegemm.fp8_gemm_nt on CUDA tensors).

Every case draws fresh random data, quantizes it with finegemm.quant, poisons d with NaN, runs
the kernel and checks:
  * against the exact dequantized reference (finegemm.reference, fp64): calc_diff <= 1e-5
    (kernel bugs: a wrong scale, index or phase shows up as >> 1e-5);
  * against the fp32 product of the unquantized inputs: calc_diff <= 1e-3 (the user's view);
  * d fully written (no NaN left).
Plus bitwise determinism over repeated calls (split-K too), extreme values (+-448, zero
scales), NaN propagation like the reference, strided d / C, CUDA graph capture and replay, and
the split-K counters left at zero.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import quant, reference  # noqa: E402
from finegemm.heuristics.sm90_fp8_gemm import select_config  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402
from finegemm.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

FP8 = torch.float8_e4m3fn


def _gemm(a, sfa, b, sfb, d, c=None):
    """The public API when it exists, else the ops layer directly."""
    fn = getattr(finegemm, "fp8_gemm_nt", None)
    if fn is not None:
        fn((a, sfa), (b, sfb), d, c=c)
    else:
        ops.fp8_gemm_nt(a, sfa, b, sfb, d, c)


def _inputs(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(x)
    b, sfb = quant.per_block_cast_to_fp8(w)
    return x, w, a, sfa, b, sfb


def _exact(a, sfa, b, sfb, c=None):
    return reference.fp8_gemm_nt(a, sfa, b, sfb, c=c, out_dtype=torch.float64)


def _check(d, a, sfa, b, sfb, x=None, w=None, c=None, tol_exact=1e-5, tol_user=1e-3):
    assert not torch.isnan(d).any(), "d not fully written (NaN poison left)"
    ref = _exact(a, sfa, b, sfb, c)
    diff = calc_diff(d, ref)
    assert diff <= tol_exact, f"vs exact dequantized reference: calc_diff {diff:.3e}"
    if x is not None:
        user = x.float() @ w.float().T
        if c is not None:
            user = user + c
        diff_u = calc_diff(d, user)
        assert diff_u <= tol_user, f"vs unquantized fp32 product: calc_diff {diff_u:.3e}"


SHAPES = [(m, n, k) for m in (1, 17, 64, 128, 4097) for n in (576, 2112, 7168) for k in (512, 7168, 7296, 144)]
SHAPES += [(1, 129280, 7168), (17, 129280, 512), (1, 129280, 144)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_bf16_out(m, n, k):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m * 7 + n * 3 + k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    _gemm(a, sfa, b, sfb, d)
    _check(d, a, sfa, b, sfb, x, w)


def test_legacy_name_gemm_fp8_fp8_bf16_nt():
    """DeepGEMM v1's name: checked against the reference, and bitwise fp8_gemm_nt's result."""
    m, n, k = 17, 2112, 7296
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=95)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.gemm_fp8_fp8_bf16_nt((a, sfa), (b, sfb), out)
    _check(out, a, sfa, b, sfb, x, w)
    want = torch.full_like(out, float("nan"))
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), want)
    assert torch.equal(out, want)


@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (17, 2112, 7296), (128, 7168, 512), (4097, 2112, 144),
                                   (64, 576, 7168), (4097, 7168, 7168)])
@pytest.mark.parametrize("with_c", [False, True])
def test_fp32_out(m, n, k, with_c):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=11 + m + n + k)
    c = torch.randn(m, n, device="cuda") * 10 if with_c else None
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    _gemm(a, sfa, b, sfb, d, c)
    _check(d, a, sfa, b, sfb, x, w, c)


def test_fp32_in_place_accumulate():
    m, n, k = 300, 2112, 7168
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=5)
    c = torch.randn(m, n, device="cuda")
    d = c.clone()
    _gemm(a, sfa, b, sfb, d, d)  # D = D + A.B
    _check(d, a, sfa, b, sfb, x, w, c)


def test_odd_sizes_every_block_n():
    # Shapes picked so that the heuristic lands on many different block_n (straddling scale
    # blocks in 1, 2 and 3 places) and edge tiles in M and N.
    seen = set()
    for m, n in [(1, 16), (3, 48), (65, 200), (129, 1000), (200, 1504), (333, 2000), (1000, 3000),
                 (2049, 4000), (63, 8), (130, 24), (4096, 4096)]:
        k = 7296
        x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        _gemm(a, sfa, b, sfb, d)
        _check(d, a, sfa, b, sfb, x, w)
        cfg = select_config(m, n, k, finegemm.get_num_sms(), False, False)
        seen.add((cfg.block_m, cfg.block_n, cfg.num_splits > 1))
    assert len(seen) >= 4, seen


@pytest.mark.parametrize("block_n", [16, 48, 112, 144, 176, 192])
def test_forced_block_n(block_n, monkeypatch):
    """Each block_n through the real kernel (heuristic overridden), incl. runtime scale selection."""
    from finegemm.heuristics import sm90_fp8_gemm as h

    real = h.select_config

    def forced(m, n, k, num_sms, out_fp32=False, has_c=False, allow_split_k=True, allow_multicast=True, **kwargs):
        cfg = real(m, n, k, num_sms, out_fp32, has_c, allow_split_k, allow_multicast, **kwargs)
        import dataclasses

        bm = 128 if m > 64 else 64
        tma = not out_fp32 and not has_c  # num_splits 1: the TMA-store epilogue applies
        st = h.max_stages(bm, block_n, tma)
        tiles = -(-m // bm) * -(-n // block_n)
        return dataclasses.replace(cfg, block_m=bm, block_n=block_n, num_stages=st, num_splits=1, num_multicast=1,
                                   num_tiles=tiles, num_units=tiles, grid=min(num_sms, tiles),
                                   smem_bytes=h.smem_bytes(bm, block_n, st, tma), num_threads=h.num_threads(bm),
                                   tma_store=tma)

    monkeypatch.setattr(ops, "select_config", forced)
    monkeypatch.setattr(ops, "_plans", {})
    for m, n, k in [(257, 1000, 1152), (64, 2112, 7296), (1, 576, 144)]:
        x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=block_n + m)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ops.fp8_gemm_nt(a, sfa, b, sfb, d)
        _check(d, a, sfa, b, sfb, x, w)


@pytest.mark.parametrize("m,n,k,out", [(4097, 7168, 7168, torch.bfloat16), (1, 576, 7168, torch.bfloat16),
                                       (17, 2112, 7296, torch.float32), (64, 7168, 7168, torch.float32)])
def test_deterministic(m, n, k, out):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=3)
    c = torch.randn(m, n, device="cuda") if out == torch.float32 else None
    first = None
    for _ in range(10):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=out)
        _gemm(a, sfa, b, sfb, d, c)
        if first is None:
            first = d.clone()
        else:
            bits = torch.int16 if out == torch.bfloat16 else torch.int32
            assert torch.equal(d.view(bits), first.view(bits)), "results differ between identical calls"
    _check(first, a, sfa, b, sfb, x, w, c)


def test_split_k_used_and_counters_reset():
    m, n, k = 1, 576, 7168
    cfg = select_config(m, n, k, finegemm.get_num_sms(), False, False)
    assert cfg.num_splits > 1, "expected a split-K plan for a skinny long-K shape"
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=9)
    for _ in range(3):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        _gemm(a, sfa, b, sfb, d)
        _check(d, a, sfa, b, sfb, x, w)
    _counters_reset()  # synchronizes


def test_extreme_values_and_zero_scales():
    m, n, k = 200, 640, 1024
    g = torch.Generator(device="cuda").manual_seed(1)
    sign_a = torch.randint(0, 2, (m, k), device="cuda", generator=g) * 2 - 1
    sign_b = torch.randint(0, 2, (n, k), device="cuda", generator=g) * 2 - 1
    a = (sign_a * 448.0).to(FP8)
    b = (sign_b * 448.0).to(FP8)
    sfa = torch.rand(m, k // 128, device="cuda", generator=g)
    sfb = torch.rand(n // 128 + (n % 128 > 0), k // 128, device="cuda", generator=g)
    sfa[::7, 3] = 0.0
    sfa[5, :] = 0.0
    sfb[1, :] = 0.0
    sfb[:, 2] = 0.0
    for out in (torch.bfloat16, torch.float32):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=out)
        _gemm(a, sfa, b, sfb, d)
        _check(d, a, sfa, b, sfb)
        assert (d[5] == 0).all() and (d[:, 128:256] == 0).all()
    # All-max positive: every product is exactly 448*448*k (sums exact in fp32).
    a = torch.full((64, 256), 448.0, device="cuda").to(FP8)
    b = torch.full((128, 256), 448.0, device="cuda").to(FP8)
    sfa = torch.ones(64, 2, device="cuda")
    sfb = torch.ones(1, 2, device="cuda")
    d = torch.full((64, 128), float("nan"), device="cuda", dtype=torch.float32)
    _gemm(a, sfa, b, sfb, d)
    assert (d == 448.0 * 448.0 * 256).all()


def test_nan_propagation():
    m, n, k = 130, 704, 640
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=21)
    a = a.clone()
    b = b.clone()
    nan8 = torch.tensor(float("nan")).to(FP8)
    a[3, 5] = nan8
    a[100, 600] = nan8
    b[650, 10] = nan8
    sfa = sfa.clone()
    sfa[100, 4] = 0.0  # NaN * 0 stays NaN
    for out in (torch.bfloat16, torch.float32):
        d = torch.zeros((m, n), device="cuda", dtype=out)
        _gemm(a, sfa, b, sfb, d)
        ref = _exact(a, sfa, b, sfb)
        assert torch.equal(torch.isnan(d), torch.isnan(ref))
        fin = ~torch.isnan(ref)
        assert calc_diff(d[fin], ref[fin]) <= 1e-5


def test_strided_d_c_and_sfa_layouts():
    m, n, k = 129, 1000, 2048
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=33)
    # d and c are views of wider buffers (row pitch > N); sfa given MN-major already.
    big = torch.full((m, 1024 + 64), float("nan"), device="cuda", dtype=torch.float32)
    d = big[:, 32:32 + n]
    cbig = torch.randn(m, 1100, device="cuda")
    c = cbig[:, :n]
    sfa_mn = quant.get_mn_major_tma_aligned_tensor(sfa)
    _gemm(a, sfa_mn, b, sfb, d, c)
    _check(d, a, sfa, b, sfb, x, w, c)
    assert torch.isnan(big[:, :32]).all() and torch.isnan(big[:, 32 + n:]).all(), "wrote outside d"
    # bf16 view with padded pitch
    bigb = torch.full((m, 1024), float("nan"), device="cuda", dtype=torch.bfloat16)
    db = bigb[:, :n]
    _gemm(a, sfa, b, sfb, db)
    _check(db, a, sfa, b, sfb, x, w)
    assert torch.isnan(bigb[:, n:]).all()


@pytest.mark.parametrize("m,n,k,offset", [(129, 1001, 512, 0), (300, 1000, 1024, 1), (4097, 2112, 512, 3)])
def test_bf16_d_unaligned_falls_back(m, n, k, offset):
    """bf16 d that the TMA-store epilogue cannot take (row pitch not a multiple of 16 bytes, or a base
    not 16-byte aligned): the kernel falls back to direct stores at run time. The public API rejects
    such a d (TMA rule), so the ops layer is called directly."""
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=n + offset)
    big = torch.full((m * n + offset + 8,), float("nan"), device="cuda", dtype=torch.bfloat16)
    d = big[offset:offset + m * n].view(m, n)
    ops.fp8_gemm_nt(a, sfa, b, sfb, d)
    _check(d, a, sfa, b, sfb, x, w)
    assert torch.isnan(big[:offset]).all() and torch.isnan(big[offset + m * n:]).all(), "wrote outside d"


def test_ops_layer_directly_and_m0():
    x, w, a, sfa, b, sfb = _inputs(65, 576, 512, seed=1)
    d = torch.full((65, 576), float("nan"), device="cuda", dtype=torch.bfloat16)
    ops.fp8_gemm_nt(a, sfa, b, sfb, d)
    _check(d, a, sfa, b, sfb, x, w)
    d0 = torch.empty((0, 576), device="cuda", dtype=torch.bfloat16)
    ops.fp8_gemm_nt(a[:0], sfa[:0], b, sfb, d0)  # returns at once


# 64 / 128 x 2112 x 7168: the tables' split clusters (captured without split buffers).
@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (4097, 2112, 7168), (64, 7168, 512), (64, 2112, 7168),
                                   (128, 2112, 7168)])
def test_cuda_graph(m, n, k):
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=77)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    _gemm(a, sfa, b, sfb, d)  # compile + load outside the capture
    torch.cuda.synchronize()
    eager = d.clone()
    g = torch.cuda.CUDAGraph()
    d.fill_(float("nan"))
    with torch.cuda.graph(g):
        _gemm(a, sfa, b, sfb, d)
    for _ in range(3):
        d.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(d, eager)
    # New data in the same buffers: the replay computes with it.
    x2, w2, a2, sfa2, b2, sfb2 = _inputs(m, n, k, seed=78)
    a.copy_(a2)
    sfa.copy_(sfa2)
    b.copy_(b2)
    sfb.copy_(sfb2)
    d.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    _check(d, a, sfa, b, sfb, x2, w2)


def test_warmup_shape():
    cfg = ops.warmup_shape(4096, 7168, 7168)
    assert cfg.block_m in (64, 128)


def _shipped_tuned_entries():
    import json

    from finegemm.heuristics import tuned
    return [e for e in json.loads(tuned.SHIPPED_TABLE.read_text())["entries"] if e["kind"] in ("fp8_1d2d", "fp8_1d1d")]


def _entry_id(e):
    """m x n x k, "_noc" for a recipe (1, 1, 128) entry tuned without C."""
    return f"{e['m']}x{e['n']}x{e['k']}{'_noc' if e['kind'] == 'fp8_1d1d' and not e['has_c'] else ''}"


@pytest.mark.parametrize("entry", _shipped_tuned_entries(), ids=_entry_id)
def test_tuned_table_entries(entry):
    """Every shipped tuned configuration through the public API, at its own M (where it must be
    picked) and at an M between tuned ones (served by the nearest entry), against the exact
    reference. Recipe (1, 1, 128) entries run as tuned: with C (c = d) or without (has_c false)."""
    from finegemm import runtime
    if entry["num_sms"] != runtime.get_num_sms():
        pytest.skip("tuned for another SM count")
    n, k = entry["n"], entry["k"]
    wgrad = entry["kind"] == "fp8_1d1d"
    has_c = wgrad and entry["has_c"]
    for m in (entry["m"], entry["m"] + 17):
        cfg = select_config(m, n, k, runtime.get_num_sms(), wgrad, has_c, one_d_one_d=wgrad)
        if m == entry["m"]:
            got = {f: getattr(cfg, f) for f in entry["config"]}
            assert {f: list(v) if isinstance(v, tuple) else v for f, v in got.items()} == entry["config"]
        if wgrad:  # weight gradient: fp32 d accumulated in place, or written (poisoned first) without C
            g = torch.Generator(device="cuda").manual_seed(m + n + k)
            a, sfa = quant.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=g))
            b, sfb = quant.per_token_cast_to_fp8(torch.randn(n, k, device="cuda", generator=g))
            d = torch.randn(m, n, device="cuda", generator=g) if has_c else \
                torch.full((m, n), float("nan"), device="cuda")
            ref = reference.fp8_gemm_nt(a, sfa, b, sfb, c=d.clone() if has_c else None, out_dtype=torch.float64,
                                        recipe=(1, 1, 128))
            finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=d if has_c else None, recipe=(1, 1, 128))
            assert not torch.isnan(d).any() and calc_diff(d, ref) <= 1e-5
            continue
        x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        _gemm(a, sfa, b, sfb, d)
        _check(d, a, sfa, b, sfb, x, w)


def _run_checked(cfg, x, w, a, sfa, b, sfb, d, c=None):
    """Two calls of a forced configuration into d (poisoned by the caller): bitwise repeat and the
    exact reference; the prepared call for the caller's own checks."""
    call = ops.prepare(a, sfa, b, sfb, d, c, config=cfg)
    call()
    first = d.clone()
    call()
    assert torch.equal(first, d), f"{cfg}: not bitwise repeatable"
    _check(d, a, sfa, b, sfb, x, w, c=c)
    return call


def _check_forced(cfg, m, n, k, seed):
    """A forced configuration on fresh data: poisoned bf16 output, exact reference, bitwise repeat."""
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=seed)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    call = ops.prepare(a, sfa, b, sfb, d, config=cfg)
    call()
    first = d.clone()
    call()
    _check(d, a, sfa, b, sfb, x, w)
    assert torch.equal(first, d), f"{cfg}: not bitwise repeatable"


# Split-K through distributed shared memory (one cluster per tile, one unit per CTA, block_n <= 128,
# a reduce-scatter over the consumer warps): (m, n, k, block_m, block_n, splits, k_batch, out_fp32 +
# C). Partial tiles in M and N, 2 to 8 splits (more splits than a bm64 tile has warps: idle
# splits); grids small enough for every cluster to be resident (the host's rule).
SPLIT_CLUSTER_CASES = [(1, 1024, 7168, 64, 64, 4, 1, False), (128, 1050, 7168, 128, 48, 3, 1, False),
                       (64, 1500, 7168, 64, 32, 2, 2, False), (17, 576, 7296, 64, 64, 8, 1, False),
                       (130, 640, 4096, 128, 32, 2, 1, False), (33, 200, 7168, 64, 16, 8, 1, True),
                       (64, 1024, 7168, 64, 64, 2, 2, False), (192, 640, 2048, 128, 64, 5, 1, True),
                       (130, 1000, 7168, 128, 128, 4, 1, True), (100, 600, 7296, 128, 96, 3, 2, False),
                       (64, 500, 2048, 64, 112, 5, 1, True), (128, 1500, 7168, 128, 128, 8, 1, False),
                       (255, 384, 4096, 128, 80, 6, 1, False)]


@pytest.mark.parametrize("case", SPLIT_CLUSTER_CASES, ids=str)
def test_split_cluster_matches_workspace_path(case):
    """The split cluster's sum is the workspace path's bit for bit (same partials, same order):
    the same config launched one CTA short of one unit each takes the workspace path. Both against
    the exact reference, poisoned outputs, bitwise repeat; the host picks the cluster exactly when
    every cluster fits on the GPU at once."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages
    from finegemm.ops._runtime import max_active_clusters

    m, n, k, bm, bn, splits, kbat, f32_c = case
    units = -(-m // bm) * -(-n // bn) * splits
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + splits)
    c = torch.randn(m, n, device="cuda") if f32_c else None
    out = {}
    for sms in (units, units - 1):
        cfg = make_config(m, n, k, sms, f32_c, f32_c, bm, bn, max_stages(bm, bn), splits, k_batch=kbat)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if f32_c else torch.bfloat16)
        call = _run_checked(cfg, x, w, a, sfa, b, sfb, d, c)
        cluster = call.cluster_size()
        # A split cluster's call looks up no workspace (the launcher takes null buffers then).
        assert call._split_k == (cluster == 1), "split buffers wanted exactly without the cluster"
        if cluster > 1:  # the one-shot launcher (taken where preparing fails) is given buffers
            expected = d.clone()
            d.fill_(float("nan"))
            saved, call._handle = call._handle, 0
            try:
                call()
            finally:
                call._handle = saved
            assert torch.equal(d, expected), "the one-shot launch differs from the prepared one"
        if sms == units:
            _, fn = ops.plan(m, n, k, f32_c, f32_c, torch.cuda.current_device(), config=cfg)
            fits = max_active_clusters(fn, splits, cfg.num_threads, cfg.smem_bytes) * splits >= units
            assert fits, f"this case should fit {units // splits} clusters of {splits}"
            assert cluster == splits
        else:
            assert cluster == 1, "a grid short of the units must keep the workspace path"
        out[cluster] = d
    assert torch.equal(out[splits], out[1])


# A split cluster's bf16 d (no C) leaves through per-warp TMA stores (16-row boxes) where d's
# rows allow a TMA store (16-byte base, pitch and row bytes): (m, n, k, block_m, block_n, splits).
# d is a window of a taller, wider NaN tensor, so a box reaching past row m or column n would show.
SPLIT_TMA_STORE_CASES = [(17, 1000, 7168, 64, 64, 4), (100, 1024, 7296, 128, 64, 2), (130, 584, 4096, 128, 64, 3),
                         (1, 1024, 7168, 64, 32, 2), (255, 768, 2048, 128, 128, 5), (64, 1040, 7168, 64, 48, 2)]


@pytest.mark.parametrize("case", SPLIT_TMA_STORE_CASES, ids=str)
def test_split_cluster_tma_store_stays_in_d(case):
    """The TMA-stored split cluster writes exactly d's window (the cells around it stay NaN) and
    the workspace path's result bit for bit (that path stores directly), poisoned output, exact
    reference, bitwise repeat."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    m, n, k, bm, bn, splits = case
    units = -(-m // bm) * -(-n // bn) * splits
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=3 * m + n)
    out = {}
    for sms in (units, units - 1):
        cfg = make_config(m, n, k, sms, False, False, bm, bn, max_stages(bm, bn), splits)
        wide = torch.full((m + 3, n + 8), float("nan"), device="cuda", dtype=torch.bfloat16)
        d = wide[1:m + 1, :n]
        call = _run_checked(cfg, x, w, a, sfa, b, sfb, d)
        assert call.cluster_size() == (splits if sms == units else 1)
        outside = wide.clone()
        outside[1:m + 1, :n] = float("nan")
        assert bool(torch.isnan(outside.float()).all()), (
            f"{case}: {int((~torch.isnan(outside.float())).sum())} cells outside d written")
        out[sms] = d.clone()
    assert torch.equal(out[units], out[units - 1]), "the TMA-stored split cluster differs from the workspace path"


def _counters_reset():
    """Every split-K counter back to zero (the kernels' invariant between calls)."""
    torch.cuda.synchronize()
    for (dev, stream), (ws, cnt) in ops._buffers.items():
        assert int(cnt.abs().sum()) == 0, "split-K counters not reset to zero"


# The workspace reduction with one unit per CTA against the same config one CTA short (several
# units per CTA: counters and slabs reused within the call): (m, n, k, block_m, block_n, splits,
# k_batch, out_fp32 + C). No split cluster: tiles wider than the cluster limit, more than 8 splits,
# or clusters that do not all fit (bm128 bn128 4 splits at 128 x 4096). Partial tiles in M, N, K.
SPLIT_WORKSPACE_CASES = [(128, 4096, 7168, 128, 128, 4, 1, False), (1, 640, 7168, 64, 64, 12, 1, False),
                         (17, 1000, 7296, 64, 144, 9, 1, True), (130, 700, 4096, 128, 192, 5, 1, True),
                         (64, 256, 7168, 64, 32, 16, 2, False), (100, 330, 3008, 64, 160, 3, 1, False)]


@pytest.mark.parametrize("case", SPLIT_WORKSPACE_CASES, ids=str)
def test_split_workspace_one_unit_matches_several(case):
    """One unit per CTA and several per CTA give the in-order sum bit for bit; exact reference,
    poisoned output, bitwise repeat; afterwards the counters are zero."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    m, n, k, bm, bn, splits, kbat, f32_c = case
    units = -(-m // bm) * -(-n // bn) * splits
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + 3 * splits)
    c = torch.randn(m, n, device="cuda") if f32_c else None
    out = {}
    for sms in (units, units - 1):
        cfg = make_config(m, n, k, sms, f32_c, f32_c, bm, bn, max_stages(bm, bn), splits, k_batch=kbat)
        assert cfg.num_splits == splits and cfg.grid == min(sms, units)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if f32_c else torch.bfloat16)
        call = _run_checked(cfg, x, w, a, sfa, b, sfb, d, c)
        assert call.cluster_size() == 1, "this case must take the workspace path"
        out[sms] = d
    assert torch.equal(out[units], out[units - 1]), "one unit per CTA differs from several"
    _counters_reset()


@pytest.mark.parametrize("out", [torch.bfloat16, torch.float32])
def test_split_k_nan_partials(out):
    """NaN partials (a NaN input, or a NaN scale) pass through the split-K reduction as NaN: the
    workspace (one unit per CTA, several) and the split cluster; exactly the reference's NaNs."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    m, n, k = 17, 1000, 7168
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=5)
    a, sfa = a.clone(), sfa.clone()
    a[3, 4000] = torch.tensor(float("nan")).to(FP8)
    sfa[9, 50] = float("nan")
    ref = _exact(a, sfa, b, sfb)
    # (SMs, block_n, splits): the workspace with one unit per CTA (bn144: no cluster), with
    # several, and the split cluster.
    for sms, bn, splits in ((132, 144, 4), (20, 144, 4), (132, 64, 2)):
        cfg = make_config(m, n, k, sms, out == torch.float32, False, 64, bn, max_stages(64, bn), splits)
        d = torch.zeros((m, n), device="cuda", dtype=out)
        ops.prepare(a, sfa, b, sfb, d, config=cfg)()
        assert torch.equal(torch.isnan(d), torch.isnan(ref)), f"{cfg}: NaN rows differ from the reference"
        fin = ~torch.isnan(ref)
        assert calc_diff(d[fin], ref[fin]) <= 1e-5
    _counters_reset()


# Split-K with multicast (recipe (1, 128, 128); the partials through the workspace): (m, n, k,
# block_m, block_n, splits, multicast_on_a, out_fp32 + C, SMs). Pairs sticking out of the tile grid
# (odd n-blocks with multicast on A, odd m-blocks on B: phantom tiles with no slab), partial tiles
# in M, N and K, and grids far below the units (every cluster runs several, the counters reused).
SPLIT_MULTICAST_CASES = [(128, 4096, 7168, 128, 64, 2, True, False, 132), (17, 1000, 7296, 64, 48, 3, True, False, 132),
                         (1, 2112, 7168, 64, 64, 4, True, False, 24), (4097, 576, 2048, 128, 64, 2, False, True, 32),
                         (130, 7168, 2048, 64, 128, 2, False, False, 20),
                         (255, 640, 4096, 128, 96, 3, False, True, 132), (64, 200, 7168, 64, 16, 5, True, True, 8)]


@pytest.mark.parametrize("case", SPLIT_MULTICAST_CASES, ids=str)
def test_split_k_with_multicast(case):
    """Split-K with a 2-CTA multicast cluster: exact reference, poisoned output, bitwise repeat, and
    bit for bit the same configuration without multicast (the same partials summed in the same
    order); the call takes the workspace and launches clusters of 2."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    m, n, k, bm, bn, splits, mc_a, f32_c, sms = case
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k + splits)
    c = torch.randn(m, n, device="cuda") if f32_c else None
    out = {}
    for mc in (2, 1):
        cfg = make_config(m, n, k, sms, f32_c, f32_c, bm, bn, max_stages(bm, bn), splits, num_multicast=mc,
                          multicast_on_a=mc_a)
        assert cfg.split_k and cfg.num_multicast == mc
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if f32_c else torch.bfloat16)
        call = _run_checked(cfg, x, w, a, sfa, b, sfb, d, c)
        if mc == 2:
            assert call.cluster_size() == 2 and call._split_k, "multicast split-K: pairs, workspace reduction"
        out[mc] = d
    assert torch.equal(out[2], out[1]), "multicast changed the split-K result"


# The bf16 TMA-store epilogue against the direct one over many tiles per CTA: (m, n, k, block_m,
# block_n, multicast, multicast_on_a, half_promote, SMs). Grids far below the tiles (every CTA
# reuses its staging buffer many times, its last stores complete at exit), partial tiles in M and
# N, one k-block (K = 128), serial halves (bn256), two half sets (bn208), multicast pairs with a
# phantom tile (odd m-blocks on B, odd n-blocks on A), bm64.
TMA_EPILOGUE_CASES = [(4097, 1000, 2048, 128, 256, 1, False, True, 7), (300, 2112, 512, 128, 208, 1, False, True, 5),
                      (1000, 4000, 128, 128, 256, 1, False, True, 16), (300, 640, 7168, 128, 128, 2, False, False, 3),
                      (777, 1200, 1152, 128, 176, 2, True, False, 4), (65, 200, 4096, 64, 96, 1, False, False, 132),
                      (4096, 4096, 7168, 128, 256, 1, False, True, 132)]


@pytest.mark.parametrize("case", TMA_EPILOGUE_CASES, ids=str)
def test_tma_epilogue_matches_direct_epilogue(case):
    """The TMA-store epilogue writes what the direct epilogue of the same tile writes, bit for bit,
    with many tiles per CTA: exact reference, poisoned outputs, bitwise repeat."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    m, n, k, bm, bn, mc, on_a, hp, sms = case
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k)
    out = {}
    for tma in (True, False):
        cfg = make_config(m, n, k, sms, False, False, bm, bn, max_stages(bm, bn, tma), 1, mc, on_a, tma, hp)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        call = _run_checked(cfg, x, w, a, sfa, b, sfb, d, None)
        flags = call._query("fg_sm90_fp8_gemm_prepared_flags", call._handle)
        assert (flags & 2 != 0) == tma, "the TMA epilogue must be in use exactly when asked"
        out[tma] = d
    assert torch.equal(out[True].view(torch.int16), out[False].view(torch.int16)), "TMA and direct epilogues differ"


FORCED_TUNER_VARIANTS = [
    # (block_n, splits, multicast, tma_store, half_promote, ctas_per_sm, k_batch): the tuner's extra
    # families. K of the shapes below leaves k-block counts that k_batch does not divide.
    (32, 4, 1, False, False, 2, 1), (64, 6, 1, False, True, 2, 1), (48, 1, 1, True, True, 2, 1),
    (32, 1, 2, True, False, 2, 1), (96, 1, 1, True, True, 1, 1), (64, 3, 1, False, True, 1, 1),
    (208, 1, 2, True, True, 1, 1), (32, 1, 1, True, False, 1, 4), (64, 3, 1, False, False, 1, 2),
    (48, 2, 1, False, False, 2, 4), (96, 1, 2, True, False, 1, 2), (16, 1, 1, False, False, 1, 4),
]


DEEP_RING_VARIANTS = [
    # (block_m, block_n, splits, multicast, multicast_on_a, tma_store): rings deeper than the model's
    # (up to 16 stages), which only tuned entries use.
    (64, 32, 1, 1, False, False), (64, 32, 3, 1, False, False), (64, 64, 1, 2, True, True),
    (64, 48, 1, 2, False, True), (128, 32, 1, 1, False, True), (64, 64, 2, 1, False, False),
]


@pytest.mark.parametrize("m,n,k", [(17, 2112, 7296), (1, 576, 7168), (65, 2104, 1664), (130, 7168, 2048),
                                   (64, 576, 384)])
@pytest.mark.parametrize("variant", DEEP_RING_VARIANTS, ids=str)
def test_deep_ring_configs(m, n, k, variant):
    """Deep rings (the ring wraps many times at K = 7296; never at K = 384) on partial tiles in M, N
    and K: exact reference, poisoned output, bitwise repeat."""
    from finegemm import runtime
    from finegemm.heuristics.sm90_fp8_gemm import MAX_STAGES, MODEL_MAX_STAGES, make_config, max_stages

    bm, bn, splits, mc, mc_on_a, tma = variant
    st = max_stages(bm, bn, tma, cap=MAX_STAGES)
    assert st > MODEL_MAX_STAGES
    cfg = make_config(m, n, k, runtime.get_num_sms(), False, False, bm, bn, st, min(splits, -(-k // 128)), mc,
                      mc_on_a, tma)
    _check_forced(cfg, m, n, k, seed=bn + m + k + st)


@pytest.mark.parametrize("m,n,k", [(17, 2112, 7296), (1, 576, 7168), (65, 2104, 1664), (130, 7168, 2048)])
@pytest.mark.parametrize("variant", FORCED_TUNER_VARIANTS, ids=str)
def test_forced_tuner_families(m, n, k, variant):
    """Two CTAs per SM, half-promote and k-block batches (block_m 64 and 128), which only the tuner
    picks, on partial tiles in M, N and K: exact reference, poisoned output, bitwise repeat."""
    from finegemm import runtime
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    bn, splits, mc, tma, hp, cps, kbat = variant
    sms = runtime.get_num_sms()
    splits = min(splits, -(-k // 128))
    for bm in ((64,) if cps == 2 else (64, 128)):
        cfg = make_config(m, n, k, sms, False, False, bm, bn, max_stages(bm, bn, tma, ctas_per_sm=cps), splits, mc,
                          mc == 2, tma, hp, ctas_per_sm=cps, k_batch=kbat)
        _check_forced(cfg, m, n, k, seed=bn + m + k)


# Serial halves (half-promote above MAX_BLOCK_N_HALF_PROMOTE at block_m 128; only the tuner proposes
# them): (block_n, splits, multicast, multicast_on_a, tma_store, out_fp32 + C).
SERIAL_HALVES_VARIANTS = [(256, 1, 1, False, False, False), (256, 1, 2, False, True, False),
                          (256, 1, 2, True, False, False), (224, 1, 2, True, True, False),
                          (240, 1, 1, False, True, False), (256, 1, 2, True, False, True)]


@pytest.mark.parametrize("m,n,k", [(17, 2112, 7296), (385, 2104, 1664), (130, 7168, 2048), (4097, 576, 7168)])
@pytest.mark.parametrize("variant", SERIAL_HALVES_VARIANTS, ids=str)
def test_serial_halves(m, n, k, variant):
    """The serially half-promoted wide tiles on partial tiles in M, N and K (N = 2104 leaves a tile
    whose right half is past N): exact reference, poisoned output, bitwise repeat; and bitwise
    equal to the plain tile of half the width (bf16 out): each half is the same m64 x (block_n / 2)
    wgmmas and the same promotion, only issued one after the other."""
    from finegemm import runtime
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    bn, splits, mc, on_a, tma, f32_c = variant
    sms = runtime.get_num_sms()
    splits = min(splits, -(-k // 128))
    cfg = make_config(m, n, k, sms, f32_c, f32_c, 128, bn, max_stages(128, bn, tma), splits, mc, on_a, tma,
                      half_promote=True)
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=bn + m + k)
    if f32_c:
        c = torch.randn(m, n, device="cuda")
        _run_checked(cfg, x, w, a, sfa, b, sfb, torch.full((m, n), float("nan"), device="cuda"), c)
        return
    _check_forced(cfg, m, n, k, seed=bn + m + k)
    if (bn // 2) % 16:
        return  # no plain tile of that width (block_n 240: halves of 120)
    out = {}
    for w_bn, hp in ((bn, True), (bn // 2, False)):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ops.prepare(a, sfa, b, sfb, d, config=make_config(m, n, k, sms, False, False, 128, w_bn,
                                                          max_stages(128, w_bn), half_promote=hp))()
        out[w_bn] = d
    assert torch.equal(out[bn], out[bn // 2]), f"serial halves bn{bn} differ from the plain bn{bn // 2} tile"


# block_m 192 (three consumer warpgroups; only the tuner proposes it): (block_n, stages) of the
# direct epilogue. The shapes put partial tiles at every edge: M = 1 / 17 (one m-block, mostly
# empty), 385 (two full m-blocks + 1 row), 4097; N off every block_n; K with a ring that wraps.
THREE_WG_1D2D = [(96, 6), (128, 5), (144, 5)]
THREE_WG_SHAPES = [(1, 576, 7168), (17, 2112, 7296), (385, 2104, 1664), (4097, 7168, 2048)]


@pytest.mark.parametrize("m,n,k", THREE_WG_SHAPES)
@pytest.mark.parametrize("bn,stages", THREE_WG_1D2D)
def test_three_warpgroup_tiles(m, n, k, bn, stages):
    """block_m 192 against the exact reference (poisoned output, bitwise repeat), and bitwise equal
    to block_m 128 at the same block_n: each output's wgmma dot products and promotion order do not
    depend on how many 64-row warpgroups share the tile."""
    from finegemm import runtime
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    sms = runtime.get_num_sms()
    cfg = make_config(m, n, k, sms, False, False, 192, bn, stages)
    assert cfg.num_threads == 512
    _check_forced(cfg, m, n, k, seed=bn + m + k)
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=bn + m + k)
    out = {}
    for bm, st in ((192, stages), (128, max_stages(128, bn))):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ops.prepare(a, sfa, b, sfb, d, config=make_config(m, n, k, sms, False, False, bm, bn, st))()
        out[bm] = d
    assert torch.equal(out[192], out[128]), "block_m 192 and 128 differ"


# Fitted A boxes (NOTES v0.68, v0.69): the last m-block of the dense kind without A multicast loads
# round_up(M mod BLOCK_M, 8) rows of A (and of sfa when it is the only m-block); the stage rows past
# them stay stale (after a full m-block: another block's rows) and must never reach D.
# Every M class: 1 row, a multiple of 8, one past it, just under BLOCK_M, then several m-blocks with
# a 1-row, 8-row, 72-row or full last one; each tile family whose epilogue differs (TMA store,
# direct, split workspace, split cluster, B multicast, A multicast).
FITTED_A_VARIANTS = [  # (block_m, block_n, num_splits, num_multicast, multicast_on_a, tma_store)
    (64, 64, 1, 1, False, True), (64, 128, 1, 1, False, False), (128, 128, 1, 1, False, True),
    (128, 64, 2, 1, False, False), (64, 96, 3, 1, False, False), (128, 128, 1, 2, False, True),
    (128, 128, 1, 2, True, True)]


@pytest.mark.parametrize("m", [1, 8, 9, 63, 65, 100, 127, 136, 200, 257, 384])
@pytest.mark.parametrize("variant", FITTED_A_VARIANTS, ids=str)
def test_fitted_a_boxes(m, variant):
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages
    bm, bn, splits, mc, mc_a, tma = variant
    n, k = 2112, 7296  # a partial last n-block and a partial last k-block too
    cfg = make_config(m, n, k, 132, False, False, bm, bn, max_stages(bm, bn, tma), splits, mc, mc_a, tma)
    _check_forced(cfg, m, n, k, seed=m * 31 + bm + bn + splits)
    # The same A with garbage in the rows past M (a view into a taller buffer): never read.
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + 7)
    tall = torch.full((m + 64, k), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    tall[:m].copy_(a)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ops.prepare(tall[:m], sfa, b, sfb, d, config=cfg)()
    _check(d, a, sfa, b, sfb, x, w)


@pytest.mark.parametrize("layout", ["nn", "tn", "tt"])
@pytest.mark.parametrize("m, n, k, pad", [(256, 576, 1024, 0), (130, 200, 512, 16), (1, 4096, 7168, 0), (17, 72, 256, 32)])
def test_mn_major_layouts_match_nt(layout, m, n, k, pad):
    """fp8_gemm_nn / tn / tt: MN-major A ([K, M]) / B ([K, N]) are copied K-major by finegemm's
    transpose kernel (the grouped kernel where M / N are multiples of 16, the word kernel elsewhere;
    row pitches padded to 16 bytes plus `pad`), then the nt kernel runs: d bitwise the nt call's,
    the inputs unchanged."""
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=m + n + k + pad)
    want = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), want)

    def mn_major(t, rows):  # t [rows, K] -> a [K, rows] view, row pitch: rows rounded up to 16 + pad
        buf = torch.zeros(k, -(-rows // 16) * 16 + pad, device="cuda", dtype=torch.uint8)
        buf[:, :rows] = t.view(torch.uint8).t()
        return buf[:, :rows].view(FP8)

    a_arg = (a, sfa) if layout[0] == "n" else (mn_major(a, m), sfa.t())
    b_arg = (b, sfb) if layout[1] == "t" else (mn_major(b, n), sfb.t())
    before = [t.view(torch.uint8).clone() for t in (a_arg[0], b_arg[0])]
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    getattr(finegemm, f"fp8_gemm_{layout}")(a_arg, b_arg, d)
    _check(d, a, sfa, b, sfb, x, w)
    assert torch.equal(d.view(torch.int16), want.view(torch.int16))
    assert all(torch.equal(t.view(torch.uint8), t0) for t, t0 in zip((a_arg[0], b_arg[0]), before))


# B boxes over 2 or 4 k-blocks (b_group, impls/sm90_fp8_gemm_1d2d.cuh kBGroup): (m, n, k, block_m,
# block_n, stages, splits, multicast on A, k_batch, tma_store, out_fp32 + C, half_promote, group).
# Split clusters and the workspace path, k-batch, TMA and direct stores, fp32 + C, N past the last
# tile, M = 1 / 17 / 4097.
B_GROUP_CASES = [(1, 4096, 7168, 128, 64, 8, 2, False, 1, False, False, False, 2),
                 (128, 4096, 7168, 128, 64, 8, 2, False, 1, False, False, False, 4),
                 (17, 2112, 7168, 64, 32, 12, 1, False, 2, False, False, False, 4),
                 (4097, 200, 1024, 128, 64, 4, 1, False, 1, True, False, False, 2),
                 (130, 584, 4096, 128, 128, 4, 1, True, 1, True, False, False, 2),
                 (255, 776, 2048, 64, 96, 6, 2, False, 1, False, False, False, 2),
                 (64, 1024, 4096, 64, 128, 4, 1, False, 1, False, True, False, 4),
                 (192, 520, 3072, 128, 128, 4, 3, False, 1, False, True, False, 2),
                 (256, 1024, 4096, 128, 256, 2, 1, False, 1, True, False, True, 2)]


@pytest.mark.parametrize("case", B_GROUP_CASES, ids=str)
def test_b_group_matches_one_k_block_boxes(case):
    """The grouped B boxes give the one-k-block boxes' result bit for bit (same wgmmas, same
    order): poisoned outputs, exact reference, bitwise repeat."""
    import dataclasses

    from finegemm.heuristics.sm90_fp8_gemm import b_group_fits, make_config

    m, n, k, bm, bn, stages, splits, mc_a, kbat, tmas, f32_c, hp, group = case
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=5 * m + n + group)
    c = torch.randn(m, n, device="cuda") if f32_c else None
    base = make_config(m, n, k, 132, f32_c, f32_c, bm, bn, stages, splits, num_multicast=2 if mc_a else 1,
                       multicast_on_a=mc_a, tma_store=tmas, half_promote=hp, k_batch=kbat)
    grouped = dataclasses.replace(base, b_group=group)
    assert b_group_fits(base, group), f"{case} should allow b_group {group}"
    out = []
    for cfg in (base, grouped):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32 if f32_c else torch.bfloat16)
        _run_checked(cfg, x, w, a, sfa, b, sfb, d, c)
        out.append(d)
    assert torch.equal(out[0], out[1]), f"{case}: b_group {group} differs from one-k-block boxes"


@pytest.mark.parametrize("shape", [(64, 1004, 4096), (64, 1024, 4000), (64, 1024, 3 * 128)], ids=str)
def test_b_group_refused_where_it_does_not_fit(shape):
    """N % 8, K % 128, or a split's k-range not whole groups: the forced b_group is refused with a
    ValueError naming the rule, before any launch."""
    import dataclasses

    from finegemm.heuristics.sm90_fp8_gemm import make_config

    m, n, k = shape
    x, w, a, sfa, b, sfb = _inputs(m, n, k, seed=7)
    cfg = dataclasses.replace(make_config(m, n, k, 132, False, False, 64, 64, 4, 1), b_group=2)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="b_group"):
        ops.prepare(a, sfa, b, sfb, d, config=cfg)
    assert bool(torch.isnan(d.float()).all()), "a refused call wrote d"
