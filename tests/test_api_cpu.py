"""Every public GEMM on CPU tensors, every layout, against finegemm.reference called on canonical
NT inputs built independently here (transposes materialized with .t().contiguous()).

Inputs are chosen so that every fp64 partial sum is exact (fp8/bf16 values with few significant
bits, power-of-two scales): the result then does not depend on summation order and equality is
exact. The CUDA routing is exercised with a fake ops module (no GPU needed).
"""
from __future__ import annotations

import sys
import types

import pytest
import torch

import finegemm
from finegemm import reference
from finegemm.api import _validate
from finegemm.utils import ceil_div

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
F32 = torch.float32
LAYOUTS = ("nt", "nn", "tn", "tt")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def rand_fp8(*shape):
    return torch.randn(*shape).to(FP8)


def rand_sf(*shape):
    return torch.exp2(torch.randint(-3, 4, shape).float())


def rand_bf16(*shape):
    return ((torch.randn(*shape) * 8).round() / 8).to(BF16)


def u8(t):
    return t.contiguous().view(torch.uint8)


def fp8_problem(layout, M, N, K, recipe):
    """Canonical NT operands plus the stored (layout-specific) ones."""
    kb = ceil_div(K, 128)
    A, sfa = rand_fp8(M, K), rand_sf(M, kb)
    B = rand_fp8(N, K)
    sfb = rand_sf(ceil_div(N, 128), kb) if recipe == (1, 128, 128) else rand_sf(N, kb)
    a = (A, sfa) if layout[0] == "n" else (A.t().contiguous(), sfa.t().contiguous())
    b = (B, sfb) if layout[1] == "t" else (B.t().contiguous(), sfb.t().contiguous())
    return (A, sfa, B, sfb), a, b


# ----------------------------------------------------------------------------- dense FP8
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "recipe, d_dtype, with_c",
    [
        ((1, 128, 128), BF16, False),
        ((1, 128, 128), F32, False),
        ((1, 128, 128), F32, True),
        ((1, 1, 128), F32, False),
        ((1, 1, 128), F32, True),
    ],
)
def test_fp8_dense_all_layouts(layout, recipe, d_dtype, with_c):
    M, N, K = 48, 208, 272  # partial N and K blocks
    (A, sfa, B, sfb), a, b = fp8_problem(layout, M, N, K, recipe)
    c = torch.randn(M, N) if with_c else None
    d = torch.full((M, N), 7.0, dtype=d_dtype)
    getattr(finegemm, f"fp8_gemm_{layout}")(a, b, d, c=c, recipe=None if recipe == (1, 128, 128) else recipe)
    expected = reference.fp8_gemm_nt(A, sfa, B, sfb, c=c, out_dtype=d_dtype, recipe=recipe)
    assert d.dtype == d_dtype
    assert torch.equal(d, expected)


def test_fp8_dense_default_recipe_and_compat_args():
    (A, sfa, B, sfb), a, b = fp8_problem("nt", 32, 128, 256, (1, 128, 128))
    d = torch.empty(32, 128, dtype=BF16)
    finegemm.fp8_gemm_nt(a, b, d, None, [1, 128, 128], "mnk", True)
    assert torch.equal(d, reference.fp8_gemm_nt(A, sfa, B, sfb))


def test_fp8_with_quant_casts():
    x, w = torch.randn(64, 384), torch.randn(256, 384)
    a = finegemm.per_token_cast_to_fp8(x, use_ue8m0=True)
    b = finegemm.per_block_cast_to_fp8(w, use_ue8m0=True)
    d = torch.empty(64, 256, dtype=BF16)
    finegemm.fp8_gemm_nt(a, b, d)
    assert torch.equal(d, reference.fp8_gemm_nt(a[0], a[1], b[0], b[1]))
    # The user's view: close to the unquantized product.
    diff = finegemm.testing.calc_diff(d.double(), (x @ w.t()).double())
    assert diff < 1e-3


def test_fp8_in_place_accumulation():
    (A, sfa, B, sfb), a, b = fp8_problem("nt", 32, 128, 256, (1, 1, 128))
    d = torch.randn(32, 128)
    c0 = d.clone()
    finegemm.fp8_gemm_nt(a, b, d, c=d, recipe=(1, 1, 128))
    assert torch.equal(d, reference.fp8_gemm_nt(A, sfa, B, sfb, c=c0, out_dtype=F32, recipe=(1, 1, 128)))


def test_fp8_strided_views():
    """Padded (non-contiguous but TMA-legal) views of the operands and of d."""
    M, N, K = 40, 200, 256
    (A, sfa, B, sfb), _, _ = fp8_problem("nt", M, N, K, (1, 128, 128))
    A_pad = torch.zeros(M, K + 32, dtype=torch.uint8).view(FP8)
    A_pad[:, :K] = A
    d_pad = torch.full((M, N + 8), 3.0, dtype=BF16)
    finegemm.fp8_gemm_nt((A_pad[:, :K], sfa.t().contiguous().t()), (B, sfb), d_pad[:, :N])
    assert torch.equal(d_pad[:, :N], reference.fp8_gemm_nt(A, sfa, B, sfb))
    assert torch.all(d_pad[:, N:] == 3.0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fp8_empty_m_n_are_noops(layout):
    for M, N in ((0, 128), (32, 0)):
        _, a, b = fp8_problem(layout, M, N, 128, (1, 128, 128))
        d = torch.empty(M, N, dtype=BF16)
        getattr(finegemm, f"fp8_gemm_{layout}")(a, b, d)


def test_fp8_k_zero():
    a = (torch.empty(16, 0, dtype=FP8), torch.empty(16, 0))
    b = (torch.empty(128, 0, dtype=FP8), torch.empty(1, 0))
    d = torch.full((16, 128), 5.0, dtype=BF16)
    finegemm.fp8_gemm_nt(a, b, d)
    assert torch.all(d == 0)
    c = torch.randn(16, 128)
    d = torch.empty(16, 128)
    finegemm.fp8_gemm_nt(a, b, d, c=c)
    assert torch.equal(d, c)


# ----------------------------------------------------------------------------- m-grouped FP8
def _plain_layout(M, segments):
    gl = torch.full((M,), -1, dtype=torch.int32)
    for g, (start, n) in segments.items():
        gl[start : start + n] = g
    return gl


@pytest.mark.parametrize("use_psum", [False, True])
def test_m_grouped_contiguous(use_psum):
    G, N, K = 3, 208, 256
    M = 3 * 128
    A, sfa = rand_fp8(M, K), rand_sf(M, 2)
    B, sfb = rand_fp8(G, N, K), rand_sf(G, 2, 2)
    if use_psum:
        layout = torch.tensor([100, 128 + 60, 256 + 90], dtype=torch.int32)
        ids = _plain_layout(M, {0: (0, 100), 1: (128, 60), 2: (256, 90)})
    else:
        layout = ids = _plain_layout(M, {2: (0, 100), 0: (128, 60), 1: (256, 128)})
    d = torch.full((M, N), 9.0, dtype=BF16)
    finegemm.m_grouped_fp8_gemm_nt_contiguous((A, sfa), (B, sfb), d, layout, use_psum_layout=use_psum)
    expected = reference.m_grouped_fp8_gemm_nt_contiguous(A, sfa, B, sfb, layout, use_psum_layout=use_psum)
    assert torch.equal(d, expected)
    # Independent check: each row against the dense reference of its group; padding rows zero.
    for g in range(G):
        rows = (ids == g).nonzero().flatten()
        dense = reference.fp8_gemm_nt(A[rows], sfa[rows], B[g], sfb[g])
        assert torch.equal(d[rows], dense)
    assert torch.all(d[ids == -1] == 0)


def test_m_grouped_contiguous_empty():
    d = torch.empty(0, 128, dtype=BF16)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(
        (torch.empty(0, 128, dtype=FP8), torch.empty(0, 1)),
        (rand_fp8(2, 128, 128), rand_sf(2, 1, 1)),
        d,
        torch.empty(0, dtype=torch.int32),
    )


@pytest.mark.parametrize("dtype_kind", ["fp8", "bf16"])
def test_m_grouped_masked_leaves_other_rows(dtype_kind):
    G, Mmax, N, K = 3, 64, 144, 256
    masked_m = torch.tensor([0, 17, 64], dtype=torch.int32)
    d = torch.full((G, Mmax, N), 11.0, dtype=BF16)
    if dtype_kind == "fp8":
        A, sfa = rand_fp8(G, Mmax, K), rand_sf(G, Mmax, 2)
        B, sfb = rand_fp8(G, N, K), rand_sf(G, 2, 2)
        finegemm.m_grouped_fp8_gemm_nt_masked((A, sfa), (B, sfb), d, masked_m, expected_m=32)
        expected = reference.m_grouped_fp8_gemm_nt_masked(A, sfa, B, sfb, masked_m)
    else:
        A, B = rand_bf16(G, Mmax, K), rand_bf16(G, N, K)
        finegemm.m_grouped_bf16_gemm_nt_masked(A, B, d, masked_m, expected_m=32)
        expected = reference.m_grouped_bf16_gemm_nt_masked(A, B, masked_m)
    for g in range(G):
        m = int(masked_m[g])
        assert torch.equal(d[g, :m], expected[g, :m])
        assert torch.all(d[g, m:] == 11.0), f"group {g}: rows >= masked_m were written"


def test_m_grouped_masked_empty():
    d = torch.empty(2, 0, 128, dtype=BF16)
    finegemm.m_grouped_fp8_gemm_nt_masked(
        (torch.empty(2, 0, 128, dtype=FP8), torch.empty(2, 0, 1)),
        (rand_fp8(2, 128, 128), rand_sf(2, 1, 1)),
        d,
        torch.zeros(2, dtype=torch.int32),
        0,
    )


# ----------------------------------------------------------------------------- k-grouped FP8
@pytest.mark.parametrize("with_c", [False, True])
def test_k_grouped_fp8(with_c):
    M, N = 48, 160
    ks = [128, 0, 384]
    s = sum(ks)
    A_groups = [rand_fp8(M, k) for k in ks]
    B_groups = [rand_fp8(N, k) for k in ks]
    A = torch.cat([x.reshape(-1) for x in A_groups])
    B = torch.cat([x.reshape(-1) for x in B_groups])
    sfa, sfb = rand_sf(s // 128, M), rand_sf(s // 128, N)
    c = torch.randn(len(ks), M, N) if with_c else None
    d = torch.full((len(ks), M, N), 4.0)
    finegemm.k_grouped_fp8_gemm_nt_contiguous((A, sfa), (B, sfb), d, ks, torch.tensor(ks, dtype=torch.int32), c=c)
    assert torch.equal(d, reference.k_grouped_fp8_gemm_nt_contiguous(A, sfa, B, sfb, ks, M, N, c=c))
    # Independent check per group against the dense 1D1D reference.
    kb_off = 0
    for g, k in enumerate(ks):
        kb = k // 128
        base = c[g] if with_c else torch.zeros(M, N)
        if k:
            dense = reference.fp8_gemm_nt(
                A_groups[g], sfa[kb_off : kb_off + kb].t().contiguous(), B_groups[g],
                sfb[kb_off : kb_off + kb].t().contiguous(), c=base, out_dtype=F32, recipe=(1, 1, 128),
            )
        else:
            dense = base
        assert torch.equal(d[g], dense)
        kb_off += kb


def test_k_grouped_fp8_all_empty():
    d = torch.full((2, 16, 128), 1.0)
    finegemm.k_grouped_fp8_gemm_nt_contiguous(
        (torch.empty(0, dtype=FP8), torch.empty(0, 16)),
        (torch.empty(0, dtype=FP8), torch.empty(0, 128)),
        d, [0, 0], torch.zeros(2, dtype=torch.int32),
    )
    assert torch.all(d == 0)


# ----------------------------------------------------------------------------- BF16
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("d_dtype, with_c", [(BF16, False), (F32, False), (F32, True)])
def test_bf16_dense_all_layouts(layout, d_dtype, with_c):
    M, N, K = 40, 72, 136
    A, B = rand_bf16(M, K), rand_bf16(N, K)
    a = A if layout[0] == "n" else A.t().contiguous()
    b = B if layout[1] == "t" else B.t().contiguous()
    c = torch.randn(M, N) if with_c else None
    d = torch.full((M, N), 7.0, dtype=d_dtype)
    getattr(finegemm, f"bf16_gemm_{layout}")(a, b, d, c=c)
    assert torch.equal(d, reference.bf16_gemm_nt(A, B, c=c, out_dtype=d_dtype))


def test_bf16_empty():
    finegemm.bf16_gemm_nn(torch.empty(0, 64, dtype=BF16), torch.empty(64, 32, dtype=BF16),
                          torch.empty(0, 32, dtype=BF16))


@pytest.mark.parametrize("use_psum", [False, True])
def test_m_grouped_bf16_contiguous(use_psum):
    G, N, K, M = 2, 64, 128, 256
    A, B = rand_bf16(M, K), rand_bf16(G, N, K)
    if use_psum:
        layout = torch.tensor([70, 128 + 33], dtype=torch.int32)
        ids = _plain_layout(M, {0: (0, 70), 1: (128, 33)})
    else:
        layout = ids = _plain_layout(M, {1: (0, 70), 0: (128, 128)})
    d = torch.full((M, N), 2.0, dtype=BF16)
    finegemm.m_grouped_bf16_gemm_nt_contiguous(A, B, d, layout, use_psum_layout=use_psum)
    assert torch.equal(d, reference.m_grouped_bf16_gemm_nt_contiguous(A, B, layout, use_psum_layout=use_psum))
    for g in range(G):
        rows = (ids == g).nonzero().flatten()
        assert torch.equal(d[rows], reference.bf16_gemm_nt(A[rows], B[g]))


@pytest.mark.parametrize("with_c", [False, True])
def test_k_grouped_bf16(with_c):
    M, N = 24, 40
    ks = [256, 0, 128]
    s = sum(ks)
    A, B = rand_bf16(s, M), rand_bf16(s, N)
    c = torch.randn(len(ks), M, N) if with_c else None
    d = torch.empty(len(ks), M, N)
    finegemm.k_grouped_bf16_gemm_tn_contiguous(A, B, d, ks, torch.tensor(ks, dtype=torch.int32), c=c)
    assert torch.equal(d, reference.k_grouped_bf16_gemm_tn_contiguous(A, B, ks, c=c))
    off = 0
    for g, k in enumerate(ks):
        base = c[g] if with_c else torch.zeros(M, N)
        # Canonical NT form of A_g^T @ B_g: a = A_g^T [M, k], b = B_g^T [N, k].
        dense = reference.bf16_gemm_nt(A[off:off + k].t().contiguous(), B[off:off + k].t().contiguous(), c=base,
                                       out_dtype=F32)
        assert torch.equal(d[g], dense)
        off += k


# ----------------------------------------------------------------------------- CUDA routing
class _FakeOps(types.ModuleType):
    def __init__(self, fail_if_called=False):
        super().__init__("finegemm.ops.sm90_fp8_gemm")
        self.calls = []
        self.fail_if_called = fail_if_called

    def prepare(self, *args):
        if self.fail_if_called:
            raise AssertionError("the CUDA op was called for CPU tensors")
        calls = self.calls

        class _Call:
            cacheable = False  # CPU tensors faking CUDA: never enter the fast-path cache

            def __call__(self):
                calls.append(args)

        return _Call()

    def m_grouped_fp8_gemm_nt_contiguous(self, *args, checked_ids=False):
        if self.fail_if_called:
            raise AssertionError("the CUDA op was called for CPU tensors")
        self.calls.append(("contiguous",) + args + (checked_ids,))

    def m_grouped_fp8_gemm_nt_contiguous_layout_checked(self, *args, psum=False):
        if self.fail_if_called:
            raise AssertionError("the CUDA op was called for CPU tensors")
        self.calls.append(("contiguous_psum_checked" if psum else "contiguous_layout_checked",) + args)

    def m_grouped_fp8_gemm_nt_masked(self, *args):
        if self.fail_if_called:
            raise AssertionError("the CUDA op was called for CPU tensors")
        self.calls.append(("masked",) + args)

    # The grouped calls' prepared launches (the API's fast path): none here, so the calls stay
    # one-shot (test_grouped_prepared_* fake them).
    def prepare_m_grouped_contiguous(self, *args):
        return None

    def prepare_m_grouped_contiguous_layout_checked(self, *args, psum=False):
        return None

    def prepare_m_grouped_masked(self, *args):
        return None

    def k_grouped_fp8_gemm_nt_contiguous(self, *args):
        if self.fail_if_called:
            raise AssertionError("the CUDA op was called for CPU tensors")
        self.calls.append(("k_grouped",) + args)


def _install_fake_ops(monkeypatch, fake):
    # The real package first: imported while the fake sits in sys.modules, it would keep the fake
    # as its attribute after the test (later tests would then render kernels with the fake).
    try:
        import finegemm.ops as ops_pkg
    except Exception:  # pragma: no cover - ops package broken/missing: sys.modules entry suffices
        ops_pkg = None
    monkeypatch.setitem(sys.modules, "finegemm.ops.sm90_fp8_gemm", fake)
    if ops_pkg is not None:
        monkeypatch.setattr(ops_pkg, "sm90_fp8_gemm", fake, raising=False)


def test_cpu_tensors_never_take_the_cuda_path(monkeypatch):
    fake = _FakeOps(fail_if_called=True)
    _install_fake_ops(monkeypatch, fake)
    for layout in LAYOUTS:
        (A, sfa, B, sfb), a, b = fp8_problem(layout, 32, 128, 128, (1, 128, 128))
        d = torch.empty(32, 128, dtype=BF16)
        getattr(finegemm, f"fp8_gemm_{layout}")(a, b, d)
        assert torch.equal(d, reference.fp8_gemm_nt(A, sfa, B, sfb))
    assert not fake.calls


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend every tensor is a CUDA tensor and capture calls into the SM90 op. The contiguous
    layouts' GPU check (ops/contiguous_layout.api_group_ids) is replaced too: fake.layout_calls
    records its arguments, and it returns fake.ids_for(layout), a tensor the op must receive."""
    from finegemm.ops import contiguous_layout

    fake = _FakeOps()
    fake.layout_calls = []
    fake.ids = {}

    def api_group_ids(fn, gl, m, g, psum, alignment):
        fake.layout_calls.append((fn, gl, m, g, psum, alignment))
        ids = torch.zeros(m, dtype=torch.int32)
        fake.ids[id(gl)] = ids
        return ids if m else None

    fake.ids_for = lambda gl: fake.ids[id(gl)]
    fake.in_kernel_checks = []

    def in_kernel_check(fn, m, g, alignment):
        fake.in_kernel_checks.append((fn, m, g, alignment))
        return ("scratch", "record", "flags")

    monkeypatch.setattr(contiguous_layout, "api_group_ids", api_group_ids)
    monkeypatch.setattr(contiguous_layout, "in_kernel_check", in_kernel_check)
    monkeypatch.setattr(contiguous_layout, "can_prepare", lambda device_index: False)  # as under graph capture
    _install_fake_ops(monkeypatch, fake)
    monkeypatch.setattr(_validate, "on_cuda", lambda t: True)
    return fake


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("with_c", [False, True])
def test_cuda_routing_dense_fp8(fake_cuda, layout, with_c):
    M, N, K = 32, 256, 384
    (A, sfa, B, sfb), a, b = fp8_problem(layout, M, N, K, (1, 128, 128))
    d = torch.full((M, N), 5.0, dtype=F32 if with_c else BF16)
    c = torch.randn(M, N) if with_c else None
    getattr(finegemm, f"fp8_gemm_{layout}")(a, b, d, c=c)
    assert len(fake_cuda.calls) == 1
    a_, sfa_, b_, sfb_, d_, c_, recipe_ = fake_cuda.calls[0]
    # K-major operands (copies for MN-major inputs), canonical scale shapes, d/c passed through.
    assert a_.shape == (M, K) and a_.stride() == (K, 1) and torch.equal(u8(a_), u8(A))
    assert b_.shape == (N, K) and b_.stride() == (K, 1) and torch.equal(u8(b_), u8(B))
    assert torch.equal(sfa_, sfa) and torch.equal(sfb_, sfb)
    if layout == "nt":
        assert a_ is a[0] and b_ is b[0]
    assert d_ is d and c_ is c and tuple(recipe_) == (1, 128, 128)
    assert torch.all(d == 5.0)  # nothing computed on the host


_NOT_BUILT = r"the SM90 CUDA kernel for .* is not built yet \(tracked in issue {}\); CPU tensors run the exact reference"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("with_c", [False, True, "in_place"])
def test_cuda_routing_dense_fp8_1d1d(fake_cuda, layout, with_c, monkeypatch):
    """Recipe (1, 1, 128) on CUDA reaches the ops layer: K-major operands (copies for MN-major
    inputs), sfb [N, ceil(K/128)] (a transposed view for B stored [K, N]), the recipe passed on."""
    M, N, K = 32, 256, 384
    (A, sfa, B, sfb), a, b = fp8_problem(layout, M, N, K, (1, 1, 128))
    d = torch.full((M, N), 5.0, dtype=F32)
    c = d if with_c == "in_place" else (torch.randn(M, N) if with_c else None)
    getattr(finegemm, f"fp8_gemm_{layout}")(a, b, d, c=c, recipe=(1, 1, 128))
    assert len(fake_cuda.calls) == 1
    a_, sfa_, b_, sfb_, d_, c_, recipe_ = fake_cuda.calls[0]
    assert a_.shape == (M, K) and a_.stride() == (K, 1) and torch.equal(u8(a_), u8(A))
    assert b_.shape == (N, K) and b_.stride() == (K, 1) and torch.equal(u8(b_), u8(B))
    assert sfa_.shape == (M, K // 128) and torch.equal(sfa_, sfa)
    assert sfb_.shape == (N, K // 128) and torch.equal(sfb_, sfb)
    if layout == "nt":
        assert a_ is a[0] and b_ is b[0] and sfb_ is b[1]
    assert d_ is d and c_ is c and tuple(recipe_) == (1, 1, 128)
    assert torch.all(d == 5.0)  # nothing computed on the host


def test_cuda_routing_1d1d_needs_fp32_d(fake_cuda):
    _, a, b = fp8_problem("nt", 32, 128, 256, (1, 1, 128))
    with pytest.raises(TypeError, match="float32"):
        finegemm.fp8_gemm_nt(a, b, torch.empty(32, 128, dtype=BF16), recipe=(1, 1, 128))
    assert not fake_cuda.calls


def test_cuda_routing_grouped(fake_cuda, monkeypatch):
    M, N, K, G = 128, 128, 128, 2
    a = (rand_fp8(M, K), rand_sf(M, 1))
    b = (rand_fp8(G, N, K), rand_sf(G, 1, 1))
    d = torch.full((M, N), 5.0, dtype=BF16)
    layout = torch.zeros(M, dtype=torch.int32)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, layout)
    kind, a_, sfa_, b_, sfb_, d_, gl_, check_ = fake_cuda.calls[-1]
    assert kind == "contiguous_layout_checked" and a_ is a[0] and sfa_ is a[1] and b_ is b[0] and sfb_ is b[1]
    # A plain layout goes to the GEMM as given (no host read), with the stream's check buffers:
    # the kernel checks it.
    assert fake_cuda.in_kernel_checks[-1] == ("m_grouped_fp8_gemm_nt_contiguous", M, G, 128)
    assert d_ is d and gl_ is layout and check_ == ("scratch", "record", "flags") and not fake_cuda.layout_calls
    assert torch.all(d == 5.0)  # nothing computed on the host
    # An invalid layout (id >= G) is not rejected on the host: the GPU check reports it.
    bad = torch.full((M,), 7, dtype=torch.int32)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, bad)
    assert fake_cuda.calls[-1][6] is bad and len(fake_cuda.in_kernel_checks) == 2
    fake_cuda.calls.pop()
    # A psum layout: the GEMM reads the ends itself (one launch, the stream's check buffers).
    ends = torch.tensor([100, 128], dtype=torch.int32)
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)
    kind, *_, gl_, check_ = fake_cuda.calls[-1]
    assert kind == "contiguous_psum_checked" and gl_ is ends and check_ == ("scratch", "record", "flags")
    assert not fake_cuda.layout_calls and fake_cuda.in_kernel_checks[-1] == ("m_grouped_fp8_gemm_nt_contiguous", M, G,
                                                                              128)
    fake_cuda.calls.pop()
    # With that path disabled: the check kernel's ids go to the GEMM.
    monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "fp8_contiguous_psum_in_gemm")
    ends = ends.clone()  # a new fast-path key
    finegemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)
    kind, *_, gl_, checked_ = fake_cuda.calls[-1]
    assert fake_cuda.layout_calls[-1] == ("m_grouped_fp8_gemm_nt_contiguous", ends, M, G, True, 128)
    assert kind == "contiguous" and gl_ is fake_cuda.ids_for(ends) and checked_ is True
    fake_cuda.calls.pop()
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS")
    # masked_m is not read on CUDA (out-of-range values reach the kernel, which clamps).
    am = (rand_fp8(G, 16, K), rand_sf(G, 16, 1))
    dm = torch.full((G, 16, N), 5.0, dtype=BF16)
    mm = torch.tensor([100, -3], dtype=torch.int32)
    finegemm.m_grouped_fp8_gemm_nt_masked(am, b, dm, mm, 8)
    kind, a_, sfa_, b_, sfb_, d_, mm_, em_ = fake_cuda.calls[-1]
    assert kind == "masked" and a_ is am[0] and d_ is dm and mm_ is mm and em_ == 8
    assert torch.all(dm == 5.0)
    assert len(fake_cuda.calls) == 2
    # k-grouped (1D1D): routed to the ops layer with the validated tensors and ks as Python ints.
    ak = (rand_fp8(16 * 384), rand_sf(3, 16))
    bk = (rand_fp8(32 * 384), rand_sf(3, 32))
    dk = torch.full((3, 16, 32), 5.0)
    ks = [128, 0, 256]
    finegemm.k_grouped_fp8_gemm_nt_contiguous(ak, bk, dk, ks, torch.tensor(ks, dtype=torch.int32), c=dk)
    kind, a_, sfa_, b_, sfb_, d_, ks_, c_ = fake_cuda.calls[-1]
    assert kind == "k_grouped" and a_ is ak[0] and sfa_ is ak[1] and b_ is bk[0] and sfb_ is bk[1]
    assert d_ is dk and c_ is dk and ks_ == ks and all(type(x) is int for x in ks_)
    assert torch.all(dk == 5.0)  # nothing computed on the host
    assert len(fake_cuda.calls) == 3


def test_cuda_routing_grouped_bf16(fake_cuda, monkeypatch):
    # The grouped BF16 ops run the SM90 BF16 kernel family on CUDA (tests/gpu/test_bf16_grouped_gpu.py):
    # the API validates, then hands the tensors to finegemm.ops.sm90_bf16_gemm unchanged.
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    calls = []
    for name in ("m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_contiguous_layout_checked",
                 "m_grouped_bf16_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous"):
        monkeypatch.setattr(bf16_ops, name, lambda *args, _n=name, **kw: calls.append((_n,) + args + tuple(kw.items())))
    for name in ("prepare_m_grouped_contiguous", "prepare_m_grouped_contiguous_layout_checked",
                 "prepare_m_grouped_masked"):  # no prepared launches: one-shot
        monkeypatch.setattr(bf16_ops, name, lambda *args: None)
    a, b = rand_bf16(128, 64), rand_bf16(2, 64, 64)
    d = torch.full((128, 64), 5.0, dtype=BF16)
    layout = torch.zeros(128, dtype=torch.int32)
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)  # plain: the GEMM checks it
    name, a_, b_, d_, gl_, b_kn_, check_, psum_ = calls[-1]
    assert name == "m_grouped_bf16_gemm_contiguous_layout_checked" and a_ is a and b_ is b and d_ is d
    assert gl_ is layout and b_kn_ is False and check_ == ("scratch", "record", "flags") and psum_ == ("psum", False)
    assert fake_cuda.in_kernel_checks[-1] == ("m_grouped_bf16_gemm_nt_contiguous", 128, 2, 128)
    assert not fake_cuda.layout_calls
    psum = torch.tensor([100, 128], dtype=torch.int32)
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)  # the GEMM reads the ends
    name, a_, b_, d_, gl_, b_kn_, check_, psum_ = calls[-1]
    assert name == "m_grouped_bf16_gemm_contiguous_layout_checked" and gl_ is psum and psum_ == ("psum", True)
    assert not fake_cuda.layout_calls
    monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "bf16_contiguous_psum_in_gemm")  # its fallback: the check kernel
    psum = psum.clone()
    finegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, psum, use_psum_layout=True)
    assert fake_cuda.layout_calls[-1][1:] == (psum, 128, 2, True, 128)
    assert calls[-1][4] is fake_cuda.ids_for(psum) and calls[-1][5] == ("checked_ids", True)
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS")
    # masked_m is not read on CUDA (out-of-range values reach the kernel, which clamps).
    a, b = rand_bf16(2, 16, 64), rand_bf16(2, 64, 64)
    d = torch.full((2, 16, 64), 5.0, dtype=BF16)
    masked_m = torch.tensor([3, 1000], dtype=torch.int32)
    finegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 4)
    name, a_, b_, d_, mm_, em_ = calls[-1]
    assert name == "m_grouped_bf16_gemm_nt_masked" and a_ is a and b_ is b and d_ is d and mm_ is masked_m
    assert em_ == 4
    a, b = rand_bf16(256, 16), rand_bf16(256, 32)
    d = torch.full((3, 16, 32), 5.0)
    c = torch.randn(3, 16, 32)
    finegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, [128, 0, 128], torch.tensor([128, 0, 128], dtype=torch.int32),
                                               c=c)
    name, a_, b_, d_, ks_, c_ = calls[-1]
    assert name == "k_grouped_bf16_gemm_tn_contiguous" and a_ is a and b_ is b and d_ is d and c_ is c
    assert ks_ == [128, 0, 128]
    assert len(calls) == 5
    assert torch.all(d == 5.0)  # nothing computed on the host
    assert not fake_cuda.calls  # the FP8 op was never involved


# ----------------------------------------------------------------------------- public surface
def test_public_surface():
    names = [
        "fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt",
        "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked", "k_grouped_fp8_gemm_nt_contiguous",
        "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt",
        "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous",
        "set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_pdl", "get_pdl", "check_errors",
        "set_ignore_compile_dims", "get_ignore_compile_dims", "use_deterministic_algorithms",
        "get_deterministic_algorithms",
        "ceil_div", "align",
        "per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8", "get_tma_aligned_size",
        "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
        "transform_sf_into_required_layout", "fp8_einsum",
        "get_mk_alignment_for_contiguous_layout", "set_mk_alignment_for_contiguous_layout",
        "get_k_alignment_for_contiguous_layout", "ceil_to_ue8m0",
        "testing", "reference",
    ]
    for name in names:
        assert hasattr(finegemm, name), name
        assert name in finegemm.__all__, name
    assert finegemm.__version__ == "0.1.0"
    # DeepGEMM's utils paths (deep_gemm.utils, .utils.math, .utils.layout) resolve to the same functions.
    import importlib

    utils_math, utils_layout = (importlib.import_module(f"finegemm.utils.{m}") for m in ("math", "layout"))
    for name in ("per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8", "ceil_to_ue8m0"):
        assert getattr(finegemm.utils, name) is getattr(utils_math, name) is getattr(finegemm, name)
    for name in ("get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mk_alignment_for_contiguous_layout",
                 "get_k_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_packed_ue8m0_tensor"):
        assert getattr(finegemm.utils, name) is getattr(utils_layout, name) is getattr(finegemm, name)
    assert utils_layout.transform_sf_into_required_layout is finegemm.transform_sf_into_required_layout
    with pytest.raises(AttributeError, match="no attribute 'per_tensor_cast'"):
        finegemm.utils.per_tensor_cast
    for name in names[:14]:
        doc = getattr(finegemm, name).__doc__
        assert doc and "[" in doc and ("bfloat16" in doc or "float32" in doc) and "Devices" in doc, name


def test_deepgemm_switches_checked_kept_and_inert(monkeypatch):
    """set_ignore_compile_dims / use_deterministic_algorithms (DeepGEMM names): bools only, kept,
    and without effect on planning (kernels are never shape-specialized and always deterministic)."""
    from finegemm import runtime
    from finegemm.heuristics import sm90_bf16_gemm as bh, sm90_fp8_gemm as fh

    monkeypatch.setattr(runtime, "_ignore_compile_dims", False)
    monkeypatch.setattr(runtime, "_deterministic", False)
    before = (fh.select_config(64, 2112, 7168, 132, False, False), bh.select_config(64, 256, 7168, 132, False, False, True))
    finegemm.set_ignore_compile_dims(True)
    finegemm.use_deterministic_algorithms()
    assert finegemm.get_ignore_compile_dims() is True and finegemm.get_deterministic_algorithms() is True
    assert (fh.select_config(64, 2112, 7168, 132, False, False),
            bh.select_config(64, 256, 7168, 132, False, False, True)) == before
    finegemm.use_deterministic_algorithms(False)
    assert finegemm.get_deterministic_algorithms() is False
    with pytest.raises(TypeError, match="value must be a bool, got int"):
        finegemm.set_ignore_compile_dims(1)
    with pytest.raises(TypeError, match="enabled must be a bool, got str"):
        finegemm.use_deterministic_algorithms("yes")
    assert finegemm.get_ignore_compile_dims() is True and finegemm.get_deterministic_algorithms() is False


@pytest.fixture(params=["c_signature", "python_key"])
def key_builder(request, monkeypatch):
    """Each host fast-path test runs with both key builders: the C tensor signature (checked to be
    in use) and the Python one it stands in for (tensor subclasses, a shim that did not build)."""
    if request.param == "python_key":
        monkeypatch.setattr(_validate, "_signature_fn", _validate._no_signature)
    else:
        from finegemm.jit import tensor_signature

        assert _validate.signature_fn() is not _validate._no_signature, tensor_signature.status()
    return request.param


def test_fast_path_reuses_only_identical_validated_calls(fake_cuda, monkeypatch, key_builder):
    """A repeated call with identical tensors skips validation and planning; any change in a
    tensor's address/shape/stride/dtype goes through validation (and its errors) again."""
    from finegemm.api import dense_fp8

    prepared = []

    def prepare(*args):
        prepared.append(args)

        class _Call:
            cacheable = True

            def __call__(self):
                fake_cuda.calls.append(args)

        return _Call()

    monkeypatch.setattr(fake_cuda, "prepare", prepare, raising=False)
    monkeypatch.setattr(dense_fp8, "_validated_calls", {})
    (A, sfa, B, sfb), a, b = fp8_problem("nt", 32, 256, 128, (1, 128, 128))
    d = torch.empty(32, 256, dtype=torch.bfloat16)
    for _ in range(3):
        finegemm.fp8_gemm_nt(a, b, d)
    assert len(prepared) == 1 and len(fake_cuda.calls) == 3
    assert [type(k[0]) is bytes for k in dense_fp8._validated_calls] == [key_builder == "c_signature"]
    d2 = torch.empty(32, 256, dtype=torch.bfloat16)
    finegemm.fp8_gemm_nt(a, b, d2)
    assert len(prepared) == 2
    with pytest.raises(TypeError, match="d"):
        finegemm.fp8_gemm_nt(a, b, torch.empty(32, 256, dtype=torch.float16))
    with pytest.raises(ValueError, match="sfa"):
        finegemm.fp8_gemm_nt((A, sfa[:, :0]), b, d)
    # The same memory with another dtype (same address, shape and strides) is validated again.
    with pytest.raises(TypeError, match=r"a\[0\]"):
        finegemm.fp8_gemm_nt((A.view(torch.uint8), sfa), b, d)
    # The same address and shape with other strides (a legal scale layout) is planned again.
    sfa_strided = torch.as_strided(sfa, sfa.shape, (1, sfa.shape[0]))
    assert sfa_strided.data_ptr() == sfa.data_ptr() and sfa_strided.shape == sfa.shape
    finegemm.fp8_gemm_nt((A, sfa_strided), b, d)
    assert len(prepared) == 3
    # With and without c are different calls, each cached after its first validation.
    d32 = torch.empty(32, 256, dtype=torch.float32)
    c = torch.zeros(32, 256)
    for _ in range(2):
        finegemm.fp8_gemm_nt(a, b, d32)
        finegemm.fp8_gemm_nt(a, b, d32, c)
    assert len(prepared) == 5
    # An argument the checks reject never matches a validated one by equality (True == 1).
    finegemm.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    with pytest.raises(TypeError, match="disable_ue8m0_cast"):
        finegemm.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=1)
    finegemm.fp8_gemm_nt(a, b, d, recipe=(1, 128, 128))
    with pytest.raises((TypeError, ValueError), match="recipe"):
        finegemm.fp8_gemm_nt(a, b, d, recipe=(True, 128, 128))


def _real_launch_class(launched: list):
    """A PreparedLaunch (ops/_runtime) whose one-shot launcher records (head pointers, tail): the
    real call object, rebound() included, without a GPU."""
    from finegemm.ops._runtime import PreparedLaunch

    def launcher(fn, *rest):
        launched.append(rest)
        return 0

    class _Launch(PreparedLaunch):
        __slots__ = ()
        _ns = {"_launcher": launcher, "_launcher_prepare": None, "_launch_prepared": None, "_free_prepared": None,
               "_get_raw_stream": lambda index: 0, "_is_capturing": lambda: False}
        _names = ("_launcher", "_launcher_prepare", "_launch_prepared", "_free_prepared")

        def _describe(self) -> str:
            return "fake launch"

    return _Launch


def test_moved_tensors_reuse_the_validated_layout(fake_cuda, monkeypatch, key_builder):
    """Second level of the dense FP8 fast path: a call whose tensors have a validated call's
    layout (shapes, strides, dtypes, devices, address mod 16, c is d) at new addresses skips the
    checks and planning and launches at its own addresses; an overlap, another alignment class
    or another layout is validated (and rejected) as before; without the C layout it validates."""
    from finegemm.api import dense_fp8

    launched, prepared, checks = [], [], []
    launch_class = _real_launch_class(launched)

    def prepare(A, sfa, B, sfb, d, c, rec):
        prepared.append(rec)
        head = (1, A.data_ptr(), B.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d.data_ptr(),
                None if c is None else c.data_ptr())
        return launch_class(types.SimpleNamespace(split_k=False), head, ("tail",), d.device, True, [])

    real_checks = dense_fp8.checked_arguments
    monkeypatch.setattr(dense_fp8, "checked_arguments", lambda *args: checks.append(1) or real_checks(*args))
    monkeypatch.setattr(fake_cuda, "prepare", prepare, raising=False)
    monkeypatch.setattr(dense_fp8, "_validated_calls", {})
    monkeypatch.setattr(dense_fp8, "_moved_calls", _validate.MovedCalls((0, 2, 1, 3, 4, 5), 4, (0, 1, 2, 3), 5))
    M, N, K = 32, 256, 128
    (A, sfa, B, sfb), a, b = fp8_problem("nt", M, N, K, (1, 128, 128))
    finegemm.fp8_gemm_nt(a, b, torch.empty(M, N, dtype=BF16))
    assert (len(checks), len(prepared), len(launched)) == (1, 1, 1)
    moved = key_builder == "c_signature"  # the Python key (tensor subclasses) has no second level

    # New d, then new A and B too: launched at the new addresses, validated only without the C layout.
    d2, A2, B2 = torch.empty(M, N, dtype=BF16), A.clone(), B.clone()
    finegemm.fp8_gemm_nt((A2, sfa), (B2, sfb), d2)
    assert len(launched) == 2 and launched[-1][:6] == (A2.data_ptr(), B2.data_ptr(), sfa.data_ptr(),
                                                       sfb.data_ptr(), d2.data_ptr(), None)
    assert (len(checks), len(prepared)) == ((1, 1) if moved else (2, 2))
    finegemm.fp8_gemm_nt((A2, sfa), (B2, sfb), d2)  # now a first-level hit
    assert (len(checks), len(prepared), len(launched)) == ((1, 1, 3) if moved else (2, 2, 3))

    # d over A's bytes, in a layout and alignment class the second level has seen: the overlap
    # rule's error, from the validating path.
    storage = torch.empty(M * K + M * N * 2 + 64, dtype=torch.uint8)
    A3 = storage[: M * K].view(FP8).view(M, K)
    A3.copy_(A)
    d_over = storage[M * K // 2: M * K // 2 + M * N * 2].view(BF16).view(M, N)
    assert d_over.data_ptr() % 16 == A3.data_ptr() % 16 == 0
    with pytest.raises(ValueError, match=r"d must not overlap a\[0\]"):
        finegemm.fp8_gemm_nt((A3, sfa), b, d_over)
    # Another alignment class: validated, and rejected by the TMA rule.
    d_odd = storage[8: 8 + M * N * 2].view(BF16).view(M, N)
    assert d_odd.data_ptr() % 16 == 8
    with pytest.raises(ValueError, match="16-byte aligned"):
        finegemm.fp8_gemm_nt(a, b, d_odd)
    # Another stride of d (a padded row pitch): a layout of its own, validated once, then moved.
    before = len(checks)
    padded = [torch.empty(M, N + 8, dtype=BF16)[:, :N] for _ in range(2)]  # both alive: two addresses
    for d_padded in padded:
        finegemm.fp8_gemm_nt(a, b, d_padded)
    assert len(checks) == before + (1 if moved else 2)

    # c is d and c beside d are two layouts; c over d (not d itself) is rejected at new addresses.
    d32, c = torch.empty(M, N), torch.zeros(M, N)
    finegemm.fp8_gemm_nt(a, b, d32, c)
    finegemm.fp8_gemm_nt(a, b, d32, d32)
    before = len(checks)
    d32b, cb = torch.empty(M, N), torch.zeros(M, N)
    finegemm.fp8_gemm_nt(a, b, d32b, cb)
    finegemm.fp8_gemm_nt(a, b, cb, cb)
    assert len(checks) == before + (0 if moved else 2)
    assert launched[-2][4:6] == (d32b.data_ptr(), cb.data_ptr()) and launched[-1][4:6] == (cb.data_ptr(),) * 2
    over = torch.zeros(M + 1, N)
    with pytest.raises(ValueError, match="c must either be d itself"):
        finegemm.fp8_gemm_nt(a, b, over[1:], over[:M])

    # No C layout (e.g. the shim's tensor_layout disagreed with its signature): validated each time.
    monkeypatch.setattr(_validate, "_layout_fn", _validate._no_layout)
    before = len(checks)
    finegemm.fp8_gemm_nt(a, b, torch.empty(M, N, dtype=BF16))
    assert len(checks) == before + 1


def test_moved_calls_keep_only_launches_at_the_callers_tensors():
    """MovedCalls.learn keeps a launch only when its head points at the call's own tensors (a
    copied scale or a temporary would be re-pointed wrongly), and only a cacheable one; rebound()
    refuses a launch that is not cacheable."""
    from finegemm.jit import tensor_signature

    if tensor_signature.load_layout() is None:
        pytest.skip(f"no C layout here: {tensor_signature.status()}")
    launched = []
    launch_class = _real_launch_class(launched)
    a, b, d = torch.zeros(4, 16), torch.zeros(8, 16), torch.zeros(4, 8)
    moved = _validate.MovedCalls(slots=(0, 1, 2, 3), output=2, inputs=(0, 1), c_index=3)
    cfg = types.SimpleNamespace(split_k=False)
    found = moved.key((a, b, d), ("nt",), False)
    copy = b.clone()
    moved.learn(found, (a, b, d), launch_class(cfg, (1, a.data_ptr(), copy.data_ptr(), d.data_ptr(), None),
                                               (), d.device, True, []))
    assert not moved._entries
    not_cacheable = launch_class(cfg, (1, a.data_ptr(), b.data_ptr(), d.data_ptr(), None), (), d.device, False, [])
    moved.learn(found, (a, b, d), not_cacheable)
    assert not moved._entries
    with pytest.raises(ValueError, match="cacheable"):
        not_cacheable.rebound((1, 2, 3, None))
    moved.learn(found, (a, b, d), launch_class(cfg, (1, a.data_ptr(), b.data_ptr(), d.data_ptr(), None), (),
                                               d.device, True, []))
    assert len(moved._entries) == 1
    d2 = torch.zeros(4, 8)
    call = moved.launch_for(moved.key((a, b, d2), ("nt",), False))
    assert call is not None and call.head_pointers() == (a.data_ptr(), b.data_ptr(), d2.data_ptr(), None)
    call()
    assert launched == [(a.data_ptr(), b.data_ptr(), d2.data_ptr(), None, None, None, 0)]
    # d inside b's bytes (same layout as a validated d): no launch from the second level.
    buf = torch.zeros(8 * 16 + 64)
    b_view = buf[:128].view(8, 16)
    d_view = buf[64:96].view(4, 8)
    assert d_view.data_ptr() % 16 == 0
    assert moved.launch_for(moved.key((a, b_view, d_view), ("nt",), False)) is None
    assert moved.launch_for(moved.key((a, b, d2), ("nn",), False)) is None  # other rest: not seen


def test_moved_calls_copy_only_where_validated_and_can_be_switched_off(monkeypatch):
    """The second level asks the launch for the host library's copy only where "host_rebind" is not
    gated (FINEGEMM_ENABLE_UNVALIDATED=1 until its GPU suite passes) and not switched off
    (FINEGEMM_DISABLE_PATHS=host_rebind); FINEGEMM_DISABLE_PATHS=dense_moved_calls switches the
    second level off (the call is validated again)."""
    from finegemm.jit import tensor_signature

    if tensor_signature.load_layout() is None:
        pytest.skip(f"no C layout here: {tensor_signature.status()}")
    asked = []

    class _Launch:
        cacheable = True
        _rebind_symbol = "fg_rebind_prepared_sm90_fp8_gemm"  # a family that can copy a launch

        def head_pointers(self):
            return (a.data_ptr(), b.data_ptr(), d.data_ptr(), None)

        def rebound(self, pointers, copy=True):
            asked.append(copy)
            return self

    a, b, d = torch.zeros(4, 16), torch.zeros(8, 16), torch.zeros(4, 8)
    moved = _validate.MovedCalls(slots=(0, 1, 2, 3), output=2, inputs=(0, 1), c_index=3)
    moved.learn(moved.key((a, b, d), ("nt",), False), (a, b, d), _Launch())
    d2 = torch.zeros(4, 8)
    found = moved.key((a, b, d2), ("nt",), False)
    monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
    assert moved.launch_for(found) is not None
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")
    assert moved.launch_for(found) is not None
    monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "host_rebind")
    assert moved.launch_for(found) is not None
    expected_first = "host_rebind" not in _validate.UNVALIDATED_ON_GPU  # True once the suite passed
    assert asked == [expected_first, True, False]
    monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "dense_moved_calls")
    assert moved.launch_for(found) is None and len(asked) == 3

def _spy_fast_path(monkeypatch, family: str, kind: str) -> tuple[list, list]:
    """A fresh validated-call cache for the family's `kind` calls ("contiguous" / "masked"), and
    lists that record each validation (its function name) and each BF16 op launch (the FP8 op
    launches go to fake_cuda.calls)."""
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    api = api_fp8 if family == "fp8" else api_bf16
    monkeypatch.setattr(api, f"_validated_{kind}", _validate.ValidatedCalls())
    validations, launched = [], []
    real = getattr(api, f"_validate_{kind}")
    monkeypatch.setattr(api, f"_validate_{kind}", lambda *args: validations.append(args[0]) or real(*args))
    monkeypatch.setattr(bf16_ops, f"m_grouped_bf16_gemm_nt_{kind}", lambda *args, **kw: launched.append(args))
    monkeypatch.setattr(bf16_ops, f"prepare_m_grouped_{kind}", lambda *args: None)  # one-shot (fake_cuda's too)
    if kind == "contiguous":  # the GEMM that checks a plain layout itself
        monkeypatch.setattr(bf16_ops, "m_grouped_bf16_gemm_contiguous_layout_checked",
                            lambda *args, **kw: launched.append(args))
        monkeypatch.setattr(bf16_ops, "prepare_m_grouped_contiguous_layout_checked", lambda *args: None)
    return validations, launched


def _contiguous_nt_problem(family: str, M: int, N: int, K: int, G: int):
    """(a, b, the family's m-grouped nt contiguous function) on random CPU operands."""
    if family == "fp8":
        return ((rand_fp8(M, K), rand_sf(M, 1)), (rand_fp8(G, N, K), rand_sf(G, 1, 1)),
                finegemm.m_grouped_fp8_gemm_nt_contiguous)
    return rand_bf16(M, K), rand_bf16(G, N, K), finegemm.m_grouped_bf16_gemm_nt_contiguous


@pytest.mark.parametrize("family", ["fp8", "bf16"])
def test_contiguous_fast_path_skips_only_the_argument_checks(fake_cuda, monkeypatch, family, key_builder):
    """A repeated m-grouped contiguous call with identical tensors and arguments skips the
    argument checks, never the GPU layout check; another tensor or an argument of another type
    (use_psum_layout=1 after False: equal, but rejected) is checked again."""
    validations, launched = _spy_fast_path(monkeypatch, family, "contiguous")
    M, N, K, G = 256, 128, 128, 2
    layout = torch.zeros(M, dtype=torch.int32)
    a, b, call = _contiguous_nt_problem(family, M, N, K, G)
    d = torch.empty(M, N, dtype=BF16)
    for _ in range(3):
        call(a, b, d, layout)
    # Every call sets up the GEMM's own layout check (a plain layout: no check kernel).
    assert len(validations) == 1 and len(fake_cuda.in_kernel_checks) == 3 and not fake_cuda.layout_calls
    assert len(fake_cuda.calls if family == "fp8" else launched) == 3
    call(a, b, d, layout, use_psum_layout=False)  # the default spelled out: the same call
    assert len(validations) == 1
    with pytest.raises(TypeError, match="use_psum_layout"):
        call(a, b, d, layout, use_psum_layout=0)
    call(a, b, torch.empty(M, N, dtype=BF16), layout)  # another d: checked again
    assert len(validations) == 3 and len(fake_cuda.in_kernel_checks) == 5


@pytest.mark.parametrize("family", ["fp8", "bf16"])
def test_masked_fast_path_skips_only_the_argument_checks(fake_cuda, monkeypatch, family, key_builder):
    """A repeated masked call with identical tensors and arguments skips the argument checks;
    another expected_m, another tensor or an argument of another type is checked again."""
    validations, launched = _spy_fast_path(monkeypatch, family, "masked")
    G, Mmax, N, K = 2, 16, 128, 128
    mm = torch.tensor([3, 16], dtype=torch.int32)
    if family == "fp8":
        a, b = (rand_fp8(G, Mmax, K), rand_sf(G, Mmax, 1)), (rand_fp8(G, N, K), rand_sf(G, 1, 1))
        call = finegemm.m_grouped_fp8_gemm_nt_masked
    else:
        a, b = rand_bf16(G, Mmax, K), rand_bf16(G, N, K)
        call = finegemm.m_grouped_bf16_gemm_nt_masked
    d = torch.full((G, Mmax, N), 5.0, dtype=BF16)
    for _ in range(3):
        call(a, b, d, mm, 8)
    assert len(validations) == 1 and len(fake_cuda.calls if family == "fp8" else launched) == 3
    call(a, b, d, mm, 9)  # another hint: checked again
    assert len(validations) == 2
    with pytest.raises(TypeError, match="expected_m"):
        call(a, b, d, mm, 8.0)  # equal to 8, but not an int
    assert torch.all(d == 5.0)  # nothing computed on the host


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("preparable", [True, False])
def test_grouped_prepared_contiguous_routing(fake_cuda, monkeypatch, preparable, family):
    """Contiguous calls on faked CUDA, outside graph capture: the first call validates and runs
    through a PreparedContiguous given this stream's entry (the GEMM prepared on the layout check's
    ids; no one-shot launch), repeats run it alone, a stream without an entry adds one. Where the
    GEMM cannot be prepared (an input copy per call) the call is kept one-shot and not prepared again;
    FP8 nn calls are never prepared (B's K-major copy per call), BF16 nn calls are (B read in place).
    The two-launch path: the family's in-GEMM layout check gated (test_grouped_prepared_in_gemm_routing
    covers the shipped one-launch path)."""
    from finegemm.ops import contiguous_layout
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
    monkeypatch.setitem(_validate.UNVALIDATED_ON_GPU, contiguous_layout.IN_KERNEL_CAPABILITIES[family], ("", "", ""))
    validations, launched = _spy_fast_path(monkeypatch, family, "contiguous")
    made, events, has_entry = [], [], [False]

    class FakePrepared:
        def __init__(self, fn, gl, m, g, psum, alignment, in_kernel=False):
            assert not in_kernel  # gated above
            made.append((fn, gl, m, g, psum, alignment))

        def add_stream(self, prepare_gemm, prepare_checked=None):
            assert prepare_checked is None
            gemm = prepare_gemm(torch.zeros(M, dtype=torch.int32))
            events.append(("add", gemm))
            has_entry[0] = gemm is not None
            return has_entry[0]

        def __call__(self):
            events.append(("run", has_entry[0]))
            return has_entry[0]

    gemm_args = []

    def prepare_gemm(*args):
        gemm_args.append(args)
        return "gemm" if preparable else None

    monkeypatch.setattr(contiguous_layout, "can_prepare", lambda index: True)
    monkeypatch.setattr(contiguous_layout, "PreparedContiguous", FakePrepared)
    monkeypatch.setattr(fake_cuda if family == "fp8" else bf16_ops, "prepare_m_grouped_contiguous", prepare_gemm)
    M, N, K, G = 256, 128, 128, 2
    layout = torch.zeros(M, dtype=torch.int32)
    d = torch.empty(M, N, dtype=BF16)
    if family == "fp8":
        a, b = (rand_fp8(M, K), rand_sf(M, 1)), (rand_fp8(G, N, K), rand_sf(G, 1, 1))
        b_kn = (rand_fp8(G, K, N), rand_sf(G, 1, 1))
        call, call_nn, one_shot = (finegemm.m_grouped_fp8_gemm_nt_contiguous, finegemm.m_grouped_fp8_gemm_nn_contiguous,
                                   fake_cuda.calls)
    else:
        monkeypatch.setattr(bf16_ops, "m_grouped_bf16_gemm_nn_contiguous", lambda *args, **kw: launched.append(args))
        a, b, b_kn = rand_bf16(M, K), rand_bf16(G, N, K), rand_bf16(G, K, N)
        call, call_nn, one_shot = (finegemm.m_grouped_bf16_gemm_nt_contiguous,
                                   finegemm.m_grouped_bf16_gemm_nn_contiguous, launched)
    for _ in range(3):
        call(a, b, d, layout)
    assert len(validations) == 1 and len(made) == 1 and len(gemm_args) == 1
    assert made[0] == (call.__name__, layout, M, G, False, 128)
    if family == "fp8":
        A_, sfa_, B_, sfb_, d_, ids_ = gemm_args[0]
        assert A_ is a[0] and sfa_ is a[1] and B_ is b[0] and sfb_ is b[1]
    else:
        A_, B_, d_, ids_, b_kn_ = gemm_args[0]
        assert A_ is a and B_ is b and b_kn_ is False
    assert d_ is d and ids_.shape == (M,)
    if preparable:
        assert events == [("add", "gemm"), ("run", True), ("run", True), ("run", True)]
        assert not one_shot and not fake_cuda.layout_calls
        has_entry[0] = False  # another stream: an entry is added to the same call
        call(a, b, d, layout)
        assert events[-3:] == [("run", False), ("add", "gemm"), ("run", True)] and len(made) == 1
    else:
        assert events == [("add", None)]  # tried once, then kept one-shot
        assert len(one_shot) == 3 and len(fake_cuda.layout_calls) == 3
    call_nn(a, b_kn, d, layout)
    call_nn(a, b_kn, d, layout)
    if family == "fp8":
        assert len(made) == 1 and fake_cuda.calls[-1][0] == "contiguous"  # one-shot
    else:
        assert len(made) == 2 and gemm_args[-1][1] is b_kn and gemm_args[-1][4] is True
        assert len(gemm_args) == (3 if preparable else 2) and len(launched) == (0 if preparable else 5)


@pytest.mark.parametrize("family", ["fp8", "bf16"])
def test_grouped_prepared_in_gemm_routing(fake_cuda, monkeypatch, family):
    """The shipped contiguous path on faked CUDA: a plain layout's PreparedContiguous is made with
    in_kernel=True and its stream entry is the GEMM that checks the caller's layout itself (prepared
    on grouped_layout, not on check ids; no check kernel); a psum layout takes the GEMM reading the
    ends (shipped), and the two launches where its path is gated."""
    from finegemm.ops import contiguous_layout
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
    assert contiguous_layout.IN_KERNEL_CAPABILITIES[family] not in _validate.UNVALIDATED_ON_GPU
    _spy_fast_path(monkeypatch, family, "contiguous")
    made, checked_args, psums = [], [], []

    class FakePrepared:
        def __init__(self, fn, gl, m, g, psum, alignment, in_kernel=False):
            made.append((psum, in_kernel))
            self.in_kernel = in_kernel

        def add_stream(self, prepare_gemm, prepare_checked=None):
            assert (prepare_checked is not None) == self.in_kernel
            return (prepare_checked("check") if self.in_kernel else prepare_gemm(torch.zeros(M, dtype=torch.int32))) \
                is not None

        def __call__(self):
            return True

    def prepare_checked(*args, **kw):
        checked_args.append(args)
        psums.append(kw.get("psum", False))
        return "gemm"

    monkeypatch.setattr(contiguous_layout, "can_prepare", lambda index: True)
    monkeypatch.setattr(contiguous_layout, "PreparedContiguous", FakePrepared)
    ops = fake_cuda if family == "fp8" else bf16_ops
    monkeypatch.setattr(ops, "prepare_m_grouped_contiguous_layout_checked", prepare_checked)
    monkeypatch.setattr(ops, "prepare_m_grouped_contiguous", lambda *args: "gemm")
    M, N, K, G = 256, 128, 128, 2
    layout = torch.zeros(M, dtype=torch.int32)
    ends = torch.tensor([100, 256], dtype=torch.int32)
    d = torch.empty(M, N, dtype=BF16)
    a, b, call = _contiguous_nt_problem(family, M, N, K, G)
    for _ in range(2):
        call(a, b, d, layout)
    assert made == [(False, True)] and len(checked_args) == 1
    gl_, check_ = checked_args[0][-2:] if family == "fp8" else (checked_args[0][3], checked_args[0][5])
    assert gl_ is layout and check_ == "check"
    psum_cap = contiguous_layout.IN_KERNEL_PSUM_CAPABILITIES[family]
    assert psum_cap not in _validate.UNVALIDATED_ON_GPU  # shipped
    monkeypatch.setitem(_validate.UNVALIDATED_ON_GPU, psum_cap, ("x", "#4", "tests/gpu/test_contiguous_layout_gpu.py"))
    call(a, b, d, ends, use_psum_layout=True)  # gated: the two launches
    assert made[-1] == (True, False) and len(checked_args) == 1
    assert not fake_cuda.layout_calls
    monkeypatch.delitem(_validate.UNVALIDATED_ON_GPU, psum_cap)  # the shipped state
    ends2 = ends.clone()  # a new fast-path key
    call(a, b, d, ends2, use_psum_layout=True)
    assert made[-1] == (True, True) and len(checked_args) == 2 and psums == [False, True]
    assert (checked_args[-1][-2] if family == "fp8" else checked_args[-1][3]) is ends2


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("preparable", [True, False])
def test_grouped_prepared_masked_routing(fake_cuda, monkeypatch, preparable, family):
    """Masked calls on faked CUDA: the first call validates and prepares its launch (masked_m is read
    on the GPU: one launch serves every call of the key), repeats call it alone; a launch that
    cannot be prepared keeps the call one-shot, tried once."""
    from finegemm.ops import sm90_bf16_gemm as bf16_ops

    validations, launched = _spy_fast_path(monkeypatch, family, "masked")
    prepared, runs = [], []

    def prepare_masked(*args):
        prepared.append(args)
        return (lambda: runs.append(1)) if preparable else None

    monkeypatch.setattr(fake_cuda if family == "fp8" else bf16_ops, "prepare_m_grouped_masked", prepare_masked)
    G, Mmax, N, K = 2, 16, 128, 128
    mm = torch.tensor([3, 16], dtype=torch.int32)
    d = torch.full((G, Mmax, N), 5.0, dtype=BF16)
    if family == "fp8":
        a, b = (rand_fp8(G, Mmax, K), rand_sf(G, Mmax, 1)), (rand_fp8(G, N, K), rand_sf(G, 1, 1))
        call, one_shot, inputs = finegemm.m_grouped_fp8_gemm_nt_masked, fake_cuda.calls, (a[0], a[1], b[0], b[1])
    else:
        a, b = rand_bf16(G, Mmax, K), rand_bf16(G, N, K)
        call, one_shot, inputs = finegemm.m_grouped_bf16_gemm_nt_masked, launched, (a, b)
    for _ in range(3):
        call(a, b, d, mm, 8)
    assert len(validations) == 1 and len(prepared) == 1
    assert all(x is y for x, y in zip(prepared[0], inputs + (d, mm))) and prepared[0][-1] == 8
    assert (len(runs), len(one_shot)) == ((3, 0) if preparable else (0, 3))
    assert torch.all(d == 5.0)


def test_bf16_fast_path_reuses_only_identical_validated_calls(monkeypatch, key_builder):
    """Dense BF16 on "CUDA" (faked): the first call validates and prepares, identical repeats
    reuse the prepared launch, and a different tensor (or a wrong dtype) validates again."""
    from finegemm.api import bf16 as api_bf16

    prepared, launched = [], []

    class _FakeBf16Ops(types.ModuleType):
        def prepare(self, a, b, d, c, layout):
            prepared.append(layout)

            class _Call:
                cacheable = True

                def __call__(self):
                    launched.append(layout)

            return _Call()

    fake = _FakeBf16Ops("finegemm.ops.sm90_bf16_gemm")
    import finegemm.ops as ops_pkg  # before the fake enters sys.modules (see _install_fake_ops)
    monkeypatch.setitem(sys.modules, "finegemm.ops.sm90_bf16_gemm", fake)
    monkeypatch.setattr(ops_pkg, "sm90_bf16_gemm", fake, raising=False)
    monkeypatch.setattr(_validate, "on_cuda", lambda t: True)
    monkeypatch.setattr(api_bf16, "_validated_calls", {})
    a, b = rand_bf16(32, 128), rand_bf16(64, 128)
    d = torch.empty(32, 64, dtype=BF16)
    for _ in range(3):
        finegemm.bf16_gemm_nt(a, b, d)
    assert prepared == ["nt"] and launched == ["nt"] * 3
    finegemm.bf16_gemm_nn(a, b.t().contiguous(), d)  # another layout: its own entry
    assert prepared == ["nt", "nn"]
    finegemm.bf16_gemm_nt(a, b, torch.empty(32, 64, dtype=BF16))  # another d: validated again
    assert prepared == ["nt", "nn", "nt"]
    with pytest.raises(TypeError, match="d"):
        finegemm.bf16_gemm_nt(a, b, torch.empty(32, 64, dtype=torch.float16))
    with pytest.raises(ValueError):
        finegemm.bf16_gemm_nt(a, rand_bf16(64, 96), d)  # K mismatch
    assert len(prepared) == 3


def test_bf16_moved_tensors_reuse_the_validated_layout(monkeypatch, key_builder):
    """Dense BF16's second level (as dense FP8's): moved a / b / d of a validated layout launch at
    their addresses without the checks; d over b is rejected by the validating path; each
    layout (nt, nn) has its own entry."""
    from finegemm.api import bf16 as api_bf16

    launched, prepared = [], []
    launch_class = _real_launch_class(launched)

    class _FakeBf16Ops(types.ModuleType):
        def prepare(self, a, b, d, c, layout):
            prepared.append(layout)
            head = (1, a.data_ptr(), b.data_ptr(), d.data_ptr(), None if c is None else c.data_ptr())
            return launch_class(types.SimpleNamespace(split_k=False), head, (layout,), d.device, True, [])

    fake = _FakeBf16Ops("finegemm.ops.sm90_bf16_gemm")
    import finegemm.ops as ops_pkg  # before the fake enters sys.modules (see _install_fake_ops)
    monkeypatch.setitem(sys.modules, "finegemm.ops.sm90_bf16_gemm", fake)
    monkeypatch.setattr(ops_pkg, "sm90_bf16_gemm", fake, raising=False)
    monkeypatch.setattr(_validate, "on_cuda", lambda t: True)
    monkeypatch.setattr(api_bf16, "_validated_calls", {})
    monkeypatch.setattr(api_bf16, "_moved_calls", _validate.MovedCalls((0, 1, 2, 3), 2, (0, 1), 3))
    moved = key_builder == "c_signature"
    M, N, K = 32, 64, 128
    a, b = rand_bf16(M, K), rand_bf16(N, K)
    finegemm.bf16_gemm_nt(a, b, torch.empty(M, N, dtype=BF16))
    a2, d2 = a.clone(), torch.empty(M, N, dtype=BF16)
    finegemm.bf16_gemm_nt(a2, b, d2)
    assert prepared == ["nt"] * (1 if moved else 2)
    assert launched[-1] == (a2.data_ptr(), b.data_ptr(), d2.data_ptr(), None, None, None, "nt", 0)
    b_nn = b.t().contiguous()
    finegemm.bf16_gemm_nn(a, b_nn, d2)  # another layout: validated and planned
    assert prepared[-1] == "nn" and len(prepared) == (2 if moved else 3)
    # d inside b's bytes, both in seen layouts: the overlap error.
    storage = torch.empty(N * K + M * N, dtype=BF16)
    b_over = storage[: N * K].view(N, K)
    d_over = storage[N * K - M * N // 2: N * K + M * N // 2].view(M, N)
    assert d_over.data_ptr() % 16 == 0
    with pytest.raises(ValueError, match="d must not overlap b"):
        finegemm.bf16_gemm_nt(a, b_over, d_over)


def _check_gate_and_switch(monkeypatch, switch: str, validations: list, moved: bool, fresh, call) -> None:
    """A second level is off while `switch` is gated (FINEGEMM_ENABLE_UNVALIDATED unset) and when
    FINEGEMM_DISABLE_PATHS names it: a call on fresh() tensors of a seen layout is validated again
    (with `moved` False, the Python key, it is validated anyway)."""
    gated = switch in _validate.UNVALIDATED_ON_GPU
    alive = []  # each call's tensors at new addresses (a freed one could come back: a first-level hit)
    for env, switched_off in (("FINEGEMM_ENABLE_UNVALIDATED", gated), ("FINEGEMM_DISABLE_PATHS", True)):
        if env == "FINEGEMM_ENABLE_UNVALIDATED":
            monkeypatch.delenv(env)
        else:
            monkeypatch.setenv(env, switch)
        before = len(validations)
        alive.append(fresh())
        call(*alive[-1])
        assert len(validations) == before + (1 if switched_off or not moved else 0)


def _spy_moved_calls(monkeypatch, family: str, kind: str) -> list:
    """A fresh `kind` ("masked" / "contiguous") call cache of the family's API with the module's own
    second level (its slots, fresh entries), the second level let through its gate, faked CUDA; the
    list records each validation."""
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8

    api = api_fp8 if family == "fp8" else api_bf16
    return _spy_second_level(monkeypatch, api, f"_validated_{kind}", f"_validate_{kind}")


def _spy_second_level(monkeypatch, module, cache: str, check: str) -> list:
    """module.<cache> (a ValidatedCalls with a second level) replaced by a fresh one with the same
    levels (slots, switch, key form), the second level let through its gate, faked CUDA; the list
    records each call of module.<check> (the validation)."""
    shipped = getattr(module, cache)
    moved = shipped._moved
    monkeypatch.setattr(module, cache, _validate.ValidatedCalls(moved=_validate.MovedCalls(
        moved._slots, moved._output, moved._inputs, moved._c_index, switch=moved._switch),
        signature_at=shipped._signature_at))
    validations = []
    real_validate = getattr(module, check)
    monkeypatch.setattr(module, check, lambda *args: validations.append(1) or real_validate(*args))
    monkeypatch.setattr(_validate, "on_cuda", lambda t: True)
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
    return validations


def _real_masked_ops(monkeypatch, family: str, launched: list):
    """The family's real ops module with a launcher that records (head, tail) and a fixed plan: its
    real prepare_m_grouped_masked then builds the real prepared launch (argument order, tensor
    pointers in head and tail) without a GPU; its plan_grouped calls are counted in the list it returns."""
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED
    from finegemm.ops import sm90_bf16_gemm as bf16_ops
    from finegemm.ops import sm90_fp8_gemm as fp8_ops

    ops = fp8_ops if family == "fp8" else bf16_ops
    plans = []
    cfg = types.SimpleNamespace(split_k=False, block_m=64, block_n=128, num_multicast=1, multicast_on_a=False,
                                tma_store=False, grid=1, smem_bytes=0, gemm_kind=GEMM_GROUPED_MASKED,
                                l2_promotion=(0, 0), b_mn_major=False, num_groups=0)

    def plan_grouped(*args, **kw):
        plans.append(args)
        return cfg, 1

    def launcher(fn, *rest):
        launched.append(rest)
        return 0

    monkeypatch.setattr(ops, "plan_grouped", plan_grouped)
    monkeypatch.setattr(ops, "_get_raw_stream", lambda index: 0)
    monkeypatch.setattr(ops, "_is_capturing", lambda: False, raising=False)
    if family == "fp8":
        monkeypatch.setattr(ops, "_get_launcher", lambda: None)
        for name in ("_launcher", "_launcher_layout_checked"):
            monkeypatch.setattr(ops, name, launcher)
        for name in ("_launcher_prepare", "_launcher_prepare_layout_checked"):
            monkeypatch.setattr(ops, name, None)
        monkeypatch.setattr(ops, "_layout_checked", lambda cfg, device, psum=False: (cfg, 1))
    else:
        monkeypatch.setattr(ops, "_get_grouped_launcher", lambda: launcher)
        for name in ("_grouped_launcher", "_grouped_launcher_layout_checked"):
            monkeypatch.setattr(ops, name, launcher)
        for name in ("_grouped_prepare", "_grouped_prepare_layout_checked"):
            monkeypatch.setattr(ops, name, None)
        monkeypatch.setattr(ops, "load_grouped", lambda *args, **kw: 1)
    monkeypatch.setattr(ops, f"m_grouped_{family}_gemm_nt_masked", lambda *args: launched.append("one-shot"))
    return plans


@pytest.mark.parametrize("family", ["fp8", "bf16"])
def test_contiguous_moved_tensors_reuse_the_validated_layout(monkeypatch, family, key_builder):
    """The contiguous calls' second level (v1.22): fresh A, d and grouped_layout in a validated
    call's layout (the GEMM checking the layout itself, the shipped path) skip the checks and the
    plan: the kept PreparedContiguous is re-pointed, each stream's GEMM launch at the new tensors
    (grouped_layout's address in the FP8 launch's tail), its check buffers kept; d over
    grouped_layout is rejected by the validating path; gated until its GPU suite passes; switched
    off by FINEGEMM_DISABLE_PATHS=contiguous_moved_calls; none for the Python key."""
    from finegemm.ops import contiguous_layout

    validations = _spy_moved_calls(monkeypatch, family, "contiguous")
    checks = []
    monkeypatch.setattr(contiguous_layout, "can_prepare", lambda index: True)
    monkeypatch.setattr(contiguous_layout, "check_pending", lambda fn: None)
    monkeypatch.setattr(contiguous_layout, "raw_stream", lambda index: 0)
    monkeypatch.setattr(contiguous_layout, "checks_in_kernel", lambda family, psum: True)
    monkeypatch.setattr(contiguous_layout, "in_kernel_check",
                        lambda *args, **kw: checks.append(args) or (1001, 1002, 1003))
    launched = []
    plans = _real_masked_ops(monkeypatch, family, launched)
    M, N, K, G = 256, 128, 128, 2
    layout = torch.zeros(M, dtype=torch.int32)
    if family == "fp8":
        B, sfb = rand_fp8(G, N, K), rand_sf(G, 1, 1)
        sfa = torch.randn(K // 128, M).abs().t()  # MN-major: read in place

        def call(a_, d_, gl_):
            finegemm.m_grouped_fp8_gemm_nt_contiguous((a_, sfa), (B, sfb), d_, gl_)

        def pointers(entry):  # (A, B, sfa, sfb, d, grouped_layout) and the check buffers
            from finegemm.ops.sm90_fp8_gemm import GROUPED_TAIL_POINTER
            return entry[:5] + (entry[8 + GROUPED_TAIL_POINTER],) + entry[-4:-1]
        A = rand_fp8(M, K)
    else:
        B = rand_bf16(G, N, K)

        def call(a_, d_, gl_):
            finegemm.m_grouped_bf16_gemm_nt_contiguous(a_, B, d_, gl_)

        def pointers(entry):  # (a, b, d, grouped_layout) and the check buffers
            return entry[:4] + entry[-4:-1]
        A = rand_bf16(M, K)
    call(A, torch.empty(M, N, dtype=BF16), layout)
    assert (len(validations), len(plans), len(launched), len(checks)) == (1, 1, 1, 1)
    assert pointers(launched[-1])[-3:] == (1001, 1002, 1003)
    moved = key_builder == "c_signature"

    alive = [(A.clone(), torch.empty(M, N, dtype=BF16), layout.clone())]
    call(*alive[-1])
    assert (len(validations), len(plans)) == ((1, 1) if moved else (2, 2))
    got = pointers(launched[-1])
    assert all(t.data_ptr() in got for t in alive[-1]) and A.data_ptr() not in got and layout.data_ptr() not in got
    assert got[-3:] == (1001, 1002, 1003)  # the stream's check buffers, kept
    call(*alive[-1])  # now a first-level hit
    assert len(validations) == (1 if moved else 2) and len(launched) == 3

    # d over grouped_layout (both in seen layouts and alignment classes): the overlap error.
    storage = torch.empty(M * N + 64, dtype=BF16)
    d_over = storage[: M * N].view(M, N)
    gl_over = storage[64: 64 + M * 2].view(torch.int32)
    assert gl_over.data_ptr() % 16 == 0
    with pytest.raises(ValueError, match="d must not overlap"):
        call(alive[-1][0], d_over, gl_over)

    _check_gate_and_switch(monkeypatch, "contiguous_moved_calls", validations, moved,
                           lambda: (A.clone(), torch.empty(M, N, dtype=BF16), layout.clone()), call)
    assert "one-shot" not in launched


@pytest.mark.parametrize("family", ["fp8", "bf16"])
def test_masked_moved_tensors_reuse_the_validated_layout(monkeypatch, family, key_builder):
    """The masked calls' second level (v1.21): a call whose tensors (masked_m among them) have a
    validated call's layout at new addresses skips the checks and the plan and launches the real
    prepared launch at its own addresses, masked_m's in the launch's tail (FP8) or head (BF16);
    d over an input is rejected by the validating path; gated until its GPU suite passes,
    switched off by FINEGEMM_DISABLE_PATHS=masked_moved_calls; none for the Python key."""
    validations = _spy_moved_calls(monkeypatch, family, "masked")
    launched = []
    plans = _real_masked_ops(monkeypatch, family, launched)
    G, Mmax, N, K = 2, 16, 128, 128
    if family == "fp8":
        A, B = rand_fp8(G, Mmax, K), rand_fp8(G, N, K)
        sfa = torch.randn(G, K // 128, Mmax).abs().transpose(1, 2)  # MN-major: read in place
        sfb = rand_sf(G, 1, 1)

        def call(a_, d_, mm_):
            finegemm.m_grouped_fp8_gemm_nt_masked((a_, sfa), (B, sfb), d_, mm_, 8)

        def pointers(entry):  # (A, B, sfa, sfb, d, masked_m) of a recorded one-shot launch
            from finegemm.ops.sm90_fp8_gemm import GROUPED_TAIL_POINTER
            return entry[:5] + (entry[8 + GROUPED_TAIL_POINTER],)
    else:
        A, B = rand_bf16(G, Mmax, K), rand_bf16(G, N, K)

        def call(a_, d_, mm_):
            finegemm.m_grouped_bf16_gemm_nt_masked(a_, B, d_, mm_, 8)

        def pointers(entry):  # (a, b, d, masked_m)
            return entry[:4]
    mm = torch.tensor([3, 16], dtype=torch.int32)
    call(A, torch.empty(G, Mmax, N, dtype=BF16), mm)
    assert (len(validations), len(plans), len(launched)) == (1, 1, 1)
    moved = key_builder == "c_signature"  # the Python key (tensor subclasses) has no second level

    A2, d2, mm2 = A.clone(), torch.empty(G, Mmax, N, dtype=BF16), mm.clone()
    call(A2, d2, mm2)
    assert (len(validations), len(plans)) == ((1, 1) if moved else (2, 2))
    got = pointers(launched[-1])
    assert d2.data_ptr() in got and mm2.data_ptr() in got and A2.data_ptr() in got
    assert mm.data_ptr() not in got and A.data_ptr() not in got
    call(A2, d2, mm2)  # now a first-level hit
    assert len(validations) == (1 if moved else 2) and len(launched) == 3

    # d over masked_m's bytes (both in seen layouts and alignment classes): the overlap error.
    storage = torch.empty(G * Mmax * N + 64, dtype=BF16)
    d_over = storage[: G * Mmax * N].view(G, Mmax, N)
    mm_over = storage[64:68].view(torch.int32)
    assert mm_over.data_ptr() % 16 == 0
    with pytest.raises(ValueError, match="d must not overlap"):
        call(A2, d_over, mm_over)
    # Another layout: a masked_m of another dtype is rejected; a padded d (another row pitch) is
    # validated and planned.
    with pytest.raises(TypeError, match="masked_m"):
        call(A2, d2, mm2.long())
    before, plans_before = len(validations), len(plans)
    d_padded = torch.empty(G, Mmax, N + 8, dtype=BF16)[..., :N]
    call(A2, d_padded, mm2)
    assert (len(validations), len(plans)) == (before + 1, plans_before + 1)
    assert d_padded.data_ptr() in pointers(launched[-1]) and "one-shot" not in launched

    _check_gate_and_switch(monkeypatch, "masked_moved_calls", validations, moved,
                           lambda: (A.clone(), torch.empty(G, Mmax, N, dtype=BF16), mm.clone()), call)


@pytest.mark.parametrize("with_c", [False, True])
def test_fp8_einsum_moved_tensors_reuse_the_validated_layout(monkeypatch, with_c, key_builder):
    """fp8_einsum's second level (v1.24): fresh A, sfa and d (fp32, c = d) in a validated call's
    layout skip the checks and the plan and launch the real prepared heads-packed launch at their
    own addresses (A, B, sfa, sfb, d, c in its head); d over an input is rejected by the validating
    path; c is d only matches a call where c was d; gated until its GPU suite passes, switched off
    by FINEGEMM_DISABLE_PATHS=einsum_moved_calls; none for the Python key."""
    import importlib

    from finegemm.ops import sm90_fp8_gemm as ops

    mod = importlib.import_module("finegemm.api.fp8_einsum")
    validations = _spy_second_level(monkeypatch, mod, "_validated", "_checked")
    plans, launched = [], []
    cfg = types.SimpleNamespace(split_k=False, num_splits=1, block_m=64, block_n=64, num_multicast=1,
                                multicast_on_a=False, tma_store=False, grid=1, smem_bytes=0, l2_promotion=(0, 0))
    monkeypatch.setattr(ops, "plan_heads_packed", lambda *args, **kw: plans.append(args) or (cfg, 1))
    monkeypatch.setattr(ops, "_get_launcher", lambda: None)
    monkeypatch.setattr(ops, "_launcher_heads_packed_gather", lambda fn, *rest: launched.append(rest) or 0)
    monkeypatch.setattr(ops, "_launcher_prepare_heads_packed_gather", None)
    monkeypatch.setattr(ops, "_get_raw_stream", lambda index: 0)
    monkeypatch.setattr(ops, "fp8_einsum_heads_packed", lambda *args, **kw: launched.append("one-shot"))
    batch, heads, r, n = 4, 2, 128, 64
    B, sfb = rand_fp8(heads, n, r), rand_sf(heads, 1, 1)

    def fresh():
        return rand_fp8(batch, heads, r), rand_sf(batch, heads, 1), torch.zeros(batch, heads, n, dtype=F32)

    def call(a_, sfa_, d_, c_=None):
        finegemm.fp8_einsum("bhr,hdr->bhd", (a_, sfa_), (B, sfb), d_, c=c_)

    def c_of(d_):
        return d_ if with_c else None

    A, sfa, d = fresh()
    call(A, sfa, d, c_of(d))
    assert (len(validations), len(plans), len(launched)) == (1, 1, 1)
    moved = key_builder == "c_signature"  # the Python key (tensor subclasses) has no second level
    A2, sfa2, d2 = fresh()
    call(A2, sfa2, d2, c_of(d2))
    assert (len(validations), len(plans)) == ((1, 1) if moved else (2, 2))
    want = (A2.data_ptr(), B.data_ptr(), sfa2.data_ptr(), sfb.data_ptr(), d2.data_ptr(),
            d2.data_ptr() if with_c else None)
    assert launched[-1][:6] == want
    call(A2, sfa2, d2, c_of(d2))  # now a first-level hit
    assert len(validations) == (1 if moved else 2) and len(launched) == 3 and "one-shot" not in launched

    # c given where the validated call had none (or not where it had c = d): another layout.
    before = len(validations)
    A3, sfa3, d3 = fresh()
    call(A3, sfa3, d3, None if with_c else d3)
    assert len(validations) == before + 1
    if with_c:  # a c of d's layout that is not d: not the validated call's (c is d) layout
        A4, sfa4, d4 = fresh()
        call(A4, sfa4, d4, torch.zeros_like(d4))
        assert len(validations) == before + 2
    # d over an input (A's bytes, same alignment class): the validating path raises.
    storage = torch.zeros(batch * heads * n * 4 + 64, dtype=torch.uint8)
    d_over = storage[: batch * heads * n * 4].view(F32).view(batch, heads, n)
    a_over = storage[64: 64 + batch * heads * r].view(torch.float8_e4m3fn).view(batch, heads, r)
    with pytest.raises(ValueError, match="d must not overlap"):
        call(a_over, sfa2, d_over, c_of(d_over))

    _check_gate_and_switch(monkeypatch, "einsum_moved_calls", validations, moved,
                           lambda: (lambda t: (t[0], t[1], t[2], c_of(t[2])))(fresh()), call)


def test_skip_head_mid_moved_tensors_reuse_the_validated_layout(monkeypatch, key_builder):
    """fp8_gemm_nt_skip_head_mid's second level (v1.26): fresh A, sfa and d in a validated call's
    layout skip the checks and the plan and launch the real prepared fused launch at their own
    addresses (A, B, sfa, sfb, d in its head, D's width and the splits in its tail); d over an input
    is rejected by the validating path; other head splits are another layout; gated until its GPU
    suite passes, switched off by FINEGEMM_DISABLE_PATHS=skip_head_mid_moved_calls; none for the
    Python key."""
    import importlib

    from finegemm.ops import sm90_fp8_gemm as ops

    mod = importlib.import_module("finegemm.api.skip_head_mid")
    validations = _spy_second_level(monkeypatch, mod, "_validated", "_validate")
    plans, launched = [], []
    cfg = types.SimpleNamespace(split_k=False, num_splits=1, block_m=64, block_n=128, num_multicast=1,
                                multicast_on_a=False, tma_store=True, grid=1, smem_bytes=0, l2_promotion=(0, 0),
                                b_group=0)
    monkeypatch.setattr(ops, "_head_split_config", lambda *args: plans.append(args) or cfg)
    monkeypatch.setattr(ops, "plan", lambda *args, **kw: (cfg, 1))
    monkeypatch.setattr(ops, "_get_launcher", lambda: None)
    monkeypatch.setattr(ops, "_launcher_head_splits", lambda fn, *rest: launched.append(rest) or 0)
    monkeypatch.setattr(ops, "_launcher_prepare_head_splits", None)
    monkeypatch.setattr(ops, "_get_raw_stream", lambda index: 0)
    m, heads, splits, k = 8, 2, (128, 64, 128), 256
    n = heads * 256
    B, sfb = rand_fp8(n, k), rand_sf(n // 128, k // 128)

    def fresh():
        sfa = torch.randn(k // 128, m).abs().t()  # MN-major: read in place
        return rand_fp8(m, k), sfa, torch.zeros(m, n + heads * 64, dtype=BF16)

    def call(a_, sfa_, d_, splits_=splits):
        finegemm.fp8_gemm_nt_skip_head_mid((a_, sfa_), (B, sfb), d_, splits_)

    A, sfa, d = fresh()
    call(A, sfa, d)
    assert (len(validations), len(plans), len(launched)) == (1, 1, 1)
    moved = key_builder == "c_signature"  # the Python key (tensor subclasses) has no second level
    A2, sfa2, d2 = fresh()
    call(A2, sfa2, d2)
    assert (len(validations), len(plans)) == ((1, 1) if moved else (2, 2))
    entry = launched[-1]
    assert entry[:6] == (A2.data_ptr(), B.data_ptr(), sfa2.data_ptr(), sfb.data_ptr(), d2.data_ptr(), None)
    assert entry[-5:-1] == (d2.shape[1],) + splits  # D's width and the splits, then the stream
    call(A2, sfa2, d2)  # now a first-level hit
    assert len(validations) == (1 if moved else 2) and len(launched) == 3

    before = len(validations)
    call(A2, sfa2, torch.zeros(m, n + heads * 32, dtype=BF16), (128, 32, 128))  # other splits: another layout
    assert len(validations) == before + 1
    # d over sfa (in the seen layout and alignment classes): the validating path raises.
    storage = torch.zeros(m * (n + heads * 64) * 2 + 64, dtype=torch.uint8)
    d_over = storage[: m * (n + heads * 64) * 2].view(BF16).view(m, n + heads * 64)
    sfa_over = storage[64: 64 + m * (k // 128) * 4].view(F32).view(k // 128, m).t()
    with pytest.raises(ValueError, match=r"d must not overlap a\[1\] \(sfa\)"):
        call(A2, sfa_over, d_over)

    _check_gate_and_switch(monkeypatch, "skip_head_mid_moved_calls", validations, moved, fresh, call)


def test_unvalidated_kernels_are_gated(fake_cuda, monkeypatch):
    """A capability listed in UNVALIDATED_ON_GPU raises on CUDA (naming the suite and the switch)
    and never reaches the ops layer; FINEGEMM_ENABLE_UNVALIDATED=1 lifts the gate."""
    from finegemm.api import _validate
    monkeypatch.delenv("FINEGEMM_ENABLE_UNVALIDATED", raising=False)
    monkeypatch.setitem(_validate.UNVALIDATED_ON_GPU, "fp8_1d1d",
                        ("the (1, 1, 128) recipe", "#4", "tests/gpu/test_fp8_wgrad_gpu.py"))
    monkeypatch.setitem(_validate.UNVALIDATED_ON_GPU, "m_grouped_bf16",
                        ("m-grouped BF16 GEMMs", "#5", "tests/gpu/test_bf16_grouped_gpu.py"))
    M, N, K, G = 128, 128, 128, 2
    a = (rand_fp8(M, K), rand_sf(M, 1))
    b_rows = (rand_fp8(N, K), rand_sf(N, 1))
    with pytest.raises(NotImplementedError, match=r"fp8_gemm_nt: .*\(1, 1, 128\).*FINEGEMM_ENABLE_UNVALIDATED=1"):
        finegemm.fp8_gemm_nt(a, b_rows, torch.empty(M, N), recipe=(1, 1, 128))
    with pytest.raises(NotImplementedError, match=r"m_grouped_bf16_gemm_nt_contiguous: .*test_bf16_grouped_gpu"):
        finegemm.m_grouped_bf16_gemm_nt_contiguous(rand_bf16(M, K), rand_bf16(G, N, K),
                                                   torch.empty(M, N, dtype=BF16), torch.zeros(M, dtype=torch.int32))
    assert not fake_cuda.calls
    # Not listed: reaches the ops layer.
    finegemm.fp8_gemm_nt(a, (rand_fp8(N, K), rand_sf(1, 1)), torch.empty(M, N, dtype=BF16))
    assert fake_cuda.calls
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")
    n_calls = len(fake_cuda.calls)
    finegemm.fp8_gemm_nt(a, b_rows, torch.empty(M, N), recipe=(1, 1, 128))
    assert len(fake_cuda.calls) > n_calls


def test_every_built_kernel_is_validated():
    """Every built CUDA kernel path has passed its GPU suite (the fused skip-head-mid epilogue and the
    FP8 / BF16 contiguous GEMMs checking their layout themselves on the H200, 2026-12-05; the host
    fast paths' second levels and the host library's launch copies on an H100, 2026-12-07). A path
    built later is listed until its suite runs, and has a fallback (so the calls it serves work
    meanwhile): now fp8_gemm_nt_skip_head_mid's second level (its fallback validates and plans the
    call again)."""
    from finegemm.api import _validate
    # fp8_einsum's heads-packed kernel, the GEMMs reading psum ends and that heads-packed kernel
    # gathering sfa in place passed on an H100, 2026-12-05.
    assert set(_validate.UNVALIDATED_ON_GPU) == {"skip_head_mid_moved_calls"}
    assert set(_validate.UNVALIDATED_ON_GPU) <= set(_validate.FALLBACK_CAPABILITIES)


def test_ran_kept_runs_only_a_prepared_launch():
    """The hot path's first step (api/_validate.ran_kept): a kept prepared launch runs at once and
    counts as done unless it answers False; True (validated, nothing kept) and ONE_SHOT are not
    launches and are not called; run_kept then asks a refusing launch once more before preparing
    another, and launches nothing twice."""
    from finegemm.api import _validate as _v

    runs = []
    assert not _v.ran_kept(True) and not _v.ran_kept(_v.ONE_SHOT)
    assert _v.ran_kept(lambda: runs.append("ran")) and runs == ["ran"]
    assert _v.ran_kept(lambda: runs.append("ran") or True) and runs == ["ran"] * 2
    refusing = lambda: runs.append("refused") or False  # noqa: E731
    assert not _v.ran_kept(refusing) and runs[-1] == "refused"
    calls, made = _v.ValidatedCalls(), []
    assert calls.run_kept(("k",), refusing, lambda old: made.append(old) or None) is False
    assert runs[-2:] == ["refused", "refused"] and made == [refusing]
