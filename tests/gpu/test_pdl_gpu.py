"""GPU tests of programmatic dependent launch (finegemm.set_pdl(True)).

With PDL a GEMM kernel may start while the kernel before it in the stream still runs; each of ours
waits (griddepcontrol.wait) before touching global memory. A missing or late wait shows up as a
race between neighbours, so every case runs a chain in which each call reads what the previous
call wrote (C = the previous D) and writes what the previous call read (D = the previous C),
ping-ponging between two fp32 buffers, and requires the result bitwise equal to the same chain
without PDL: eagerly and replayed from a CUDA graph captured with PDL on. The chains cover the
kernel's launch kinds: split-K through the workspace (whose buffers the neighbours share), split
clusters, multicast pairs, persistent multi-wave grids, recipe (1, 1, 128), and the BF16 kernel;
the masked grouped kind reads a masked_m and A that a PyTorch kernel writes just before it.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import quant, reference  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402
from finegemm.testing import calc_diff, capture_graph  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

CHAIN = 10  # calls per chain (even: the last one writes x)


@pytest.fixture(autouse=True)
def pdl_off_after():
    finegemm.set_pdl(False)
    yield
    finegemm.set_pdl(False)


def _chain(step_xy, step_yx, x0, x, y):
    """CHAIN calls alternating y = x + P and x = y + P, from x = x0; returns a copy of x."""
    x.copy_(x0)
    y.fill_(float("nan"))
    for i in range(CHAIN):
        (step_xy if i % 2 == 0 else step_yx)()
    return x.clone()


def _run_three_ways(step_xy, step_yx, x0, x, y):
    """The chain without PDL, with PDL, and with PDL from a captured graph (3 replays): all bitwise
    equal. Returns the result."""
    finegemm.set_pdl(False)
    plain = _chain(step_xy, step_yx, x0, x, y)
    torch.cuda.synchronize()
    finegemm.set_pdl(True)
    for _ in range(3):
        assert torch.equal(_chain(step_xy, step_yx, x0, x, y), plain), "eager chain with PDL differs"
    torch.cuda.synchronize()
    def chain_calls():
        for i in range(CHAIN):
            (step_xy if i % 2 == 0 else step_yx)()

    graph = capture_graph(chain_calls)
    finegemm.set_pdl(False)  # the graph keeps what it was captured with
    for _ in range(3):
        x.copy_(x0)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(x, plain), "graph replay of the PDL chain differs"
    return plain


def _plain_then_pdl(step, sources):
    """step(source) for every source without PDL, then again with PDL on: bitwise the same.
    Returns the results without PDL."""
    plain = [step(src) for src in sources]
    finegemm.set_pdl(True)
    for src, want in zip(sources, plain):
        assert torch.equal(step(src).view(torch.int16), want.view(torch.int16)), "result with PDL differs"
    return plain


def _fp8_operands(m, n, k, seed, per_row_b=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    xa = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    a, sfa = quant.per_token_cast_to_fp8(xa)
    b, sfb = quant.per_token_cast_to_fp8(w) if per_row_b else quant.per_block_cast_to_fp8(w)
    return a, sfa, b, sfb


def _check_chain(result, x0, product):
    want = x0.double() + CHAIN * product
    diff = calc_diff(result, want)
    assert diff <= 1e-5, f"chain vs reference: calc_diff {diff:.3e}"


# (m, n, k): split-K through the workspace (14 / 8 splits), a multicast pair, a multi-wave
# persistent grid; fp32 D with C (the table's choices for these shapes at 132 SMs).
@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (17, 1024, 7168), (64, 2112, 7168), (4097, 2112, 512)])
def test_fp8_chain(m, n, k):
    a, sfa, b, sfb = _fp8_operands(m, n, k, seed=m + n)
    x0 = torch.randn(m, n, device="cuda")
    x, y = torch.empty_like(x0), torch.empty_like(x0)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), y, c=x)  # compile + plan outside the timing / capture
    result = _run_three_ways(lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), y, c=x),
                             lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), x, c=y), x0, x, y)
    _check_chain(result, x0, reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float64))


def test_fp8_split_cluster_chain():
    """A forced split cluster (2 splits per tile, one unit per CTA) in the chain."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages

    m, n, k, bm, bn, splits = 64, 1024, 7168, 64, 64, 2
    units = -(-m // bm) * -(-n // bn) * splits
    a, sfa, b, sfb = _fp8_operands(m, n, k, seed=5)
    x0 = torch.randn(m, n, device="cuda")
    x, y = torch.empty_like(x0), torch.empty_like(x0)
    cfg = make_config(m, n, k, units, True, True, bm, bn, max_stages(bm, bn), splits)
    call_xy = ops.prepare(a, sfa, b, sfb, y, x, config=cfg)
    call_yx = ops.prepare(a, sfa, b, sfb, x, y, config=cfg)
    call_xy()
    assert call_xy.cluster_size() == splits, "the case must launch split clusters"
    result = _run_three_ways(call_xy, call_yx, x0, x, y)
    _check_chain(result, x0, reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float64))


def test_fp8_recipe_1_1_128_chain():
    """Weight-gradient recipe: per-row scales on both operands, fp32 D accumulating C."""
    m, n, k = 256, 1024, 4096
    a, sfa, b, sfb = _fp8_operands(m, n, k, seed=11, per_row_b=True)
    x0 = torch.randn(m, n, device="cuda")
    x, y = torch.empty_like(x0), torch.empty_like(x0)
    kw = dict(recipe=(1, 1, 128))
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), y, c=x, **kw)
    result = _run_three_ways(lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), y, c=x, **kw),
                             lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), x, c=y, **kw), x0, x, y)
    _check_chain(result, x0, reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float64, recipe=(1, 1, 128)))


@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (64, 2112, 7168), (4097, 2112, 512)])
def test_bf16_chain(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    x0 = torch.randn(m, n, device="cuda")
    x, y = torch.empty_like(x0), torch.empty_like(x0)
    finegemm.bf16_gemm_nt(a, b, y, c=x)
    result = _run_three_ways(lambda: finegemm.bf16_gemm_nt(a, b, y, c=x),
                             lambda: finegemm.bf16_gemm_nt(a, b, x, c=y), x0, x, y)
    _check_chain(result, x0, a.double() @ b.double().T)


def test_masked_reads_what_a_torch_kernel_wrote_just_before():
    """masked_m and A rewritten by PyTorch copies right before each PDL launch: the kernel must see
    the new values (eagerly, and from a graph whose copies read from changing sources)."""
    g_, m_max, n, k, expected_m = 4, 192, 2112, 7168, 128
    gen = torch.Generator(device="cuda").manual_seed(3)
    w = torch.randn(g_, n, k, device="cuda", generator=gen).to(torch.bfloat16)
    bs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g_)]
    b, sfb = torch.stack([q for q, _ in bs]), torch.stack([s for _, s in bs])
    sources = []
    for seed in range(3):
        xs = torch.randn(g_ * m_max, k, device="cuda", generator=gen).to(torch.bfloat16)
        a2, sfa2 = quant.per_token_cast_to_fp8(xs)
        masked = torch.tensor([[192, 0, 77, 128], [1, 192, 128, 5], [64, 64, 0, 191]][seed], dtype=torch.int32,
                              device="cuda")
        sources.append((a2.view(g_, m_max, k), sfa2.contiguous().view(g_, m_max, -1), masked))
    a = torch.empty_like(sources[0][0])
    sfa = torch.empty_like(sources[0][1])
    masked_m = torch.empty_like(sources[0][2])
    d = torch.empty((g_, m_max, n), device="cuda", dtype=torch.bfloat16)

    def step(src):
        for dst, t in zip((a, sfa, masked_m), src):
            dst.copy_(t)
        d.fill_(float("nan"))
        finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
        return d.clone()

    plain = _plain_then_pdl(step, sources)
    for s, got in zip(sources, plain):  # the plain results against the reference
        rows = s[2].tolist()
        ref = reference.m_grouped_fp8_gemm_nt_masked(s[0], s[1], b, sfb, s[2].cpu(), out_dtype=torch.float64)
        for i, r in enumerate(rows):
            assert torch.isnan(got[i, r:]).all()
            if r:
                assert calc_diff(got[i, :r], ref[i, :r]) <= 1e-5
    # A graph with PDL: copies from a staging buffer, then the GEMM; the staging buffer changes.
    stage = [torch.empty_like(t) for t in sources[0]]
    graph = capture_graph(lambda: step(stage))
    finegemm.set_pdl(False)
    for s, want in zip(sources, plain):
        for dst, src in zip(stage, s):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(d.view(torch.int16), want.view(torch.int16))


def test_k_grouped_fp8_chain():
    """Weight-gradient k-grouped kind (one launch for all groups, an empty one included)."""
    m, n, ks = 256, 384, [256, 0, 384, 128]
    gen = torch.Generator(device="cuda").manual_seed(21)
    parts = []
    for kg in ks:
        if kg:
            a_g, sfa_g = quant.per_token_cast_to_fp8(torch.randn(m, kg, device="cuda", generator=gen).to(torch.bfloat16))
            b_g, sfb_g = quant.per_token_cast_to_fp8(torch.randn(n, kg, device="cuda", generator=gen).to(torch.bfloat16))
            parts.append((a_g.reshape(-1), sfa_g.t(), b_g.reshape(-1), sfb_g.t()))
    a, sfa, b, sfb = (torch.cat([p[i] for p in parts]).contiguous() for i in range(4))
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    x0 = torch.randn(len(ks), m, n, device="cuda")
    x, y = torch.empty_like(x0), torch.empty_like(x0)

    def step(src, dst):
        return lambda: finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), dst, ks, ks_t, c=src)

    step(x, y)()
    result = _run_three_ways(step(x, y), step(y, x), x0, x, y)
    _check_chain(result, x0, reference.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, ks, m, n).double())


def test_k_grouped_bf16_chain():
    m, n, ks = 256, 384, [128, 0, 384, 256]
    gen = torch.Generator(device="cuda").manual_seed(22)
    a = torch.randn(sum(ks), m, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(sum(ks), n, device="cuda", generator=gen).to(torch.bfloat16)
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    x0 = torch.randn(len(ks), m, n, device="cuda")
    x, y = torch.empty_like(x0), torch.empty_like(x0)

    def step(src, dst):
        return lambda: finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, dst, ks, ks_t, c=src)

    step(x, y)()
    result = _run_three_ways(step(x, y), step(y, x), x0, x, y)
    _check_chain(result, x0, reference.k_grouped_bf16_gemm_tn_contiguous(a, b, ks).double())


@pytest.mark.parametrize("kind", ["fp8", "bf16"])
def test_contiguous_reads_what_a_torch_kernel_wrote_just_before(kind):
    """The m-grouped contiguous kind under PDL: its grouped_layout and A rewritten by PyTorch
    copies right before each call; results bitwise those without PDL."""
    g_, rows, n, k = 3, 3 * 256, 1024, 2048
    gen = torch.Generator(device="cuda").manual_seed(4)
    w = torch.randn(g_, n, k, device="cuda", generator=gen).to(torch.bfloat16)
    if kind == "fp8":
        bs = [quant.per_block_cast_to_fp8(w[i]) for i in range(g_)]
        weights = (torch.stack([q for q, _ in bs]), torch.stack([s for _, s in bs]))
    else:
        weights = w
    sources = []
    for seed in range(3):
        xs = torch.randn(rows, k, device="cuda", generator=gen).to(torch.bfloat16)
        ids = torch.full((rows,), -1, dtype=torch.int32)
        for gi, (start, count) in enumerate([(0, 200 - 60 * seed), (256, 256), (512, 100 + 70 * seed)]):
            ids[start:start + count] = (gi + seed) % g_
        operand = quant.per_token_cast_to_fp8(xs) if kind == "fp8" else (xs,)
        sources.append((*operand, ids.cuda()))
    bufs = [torch.empty_like(t) for t in sources[0]]
    d = torch.empty((rows, n), device="cuda", dtype=torch.bfloat16)

    def step(src):
        for dst, s in zip(bufs, src):
            dst.copy_(s)
        d.fill_(float("nan"))
        if kind == "fp8":
            finegemm.m_grouped_fp8_gemm_nt_contiguous((bufs[0], bufs[1]), weights, d, bufs[2])
        else:
            finegemm.m_grouped_bf16_gemm_nt_contiguous(bufs[0], weights, d, bufs[1])
        return d.clone()

    plain = _plain_then_pdl(step, sources)
    for got in plain:
        assert not torch.isnan(got).any()
    if kind == "fp8":
        s = sources[0]
        ref = reference.m_grouped_fp8_gemm_nt_contiguous(s[0], s[1], *weights, s[2], out_dtype=torch.float64)
        assert calc_diff(plain[0], ref) <= 1e-5
