"""Prepared launches through the Python launch shim (jit.fastcall): cached dense FP8 and BF16 calls
(a split cluster, a split-K workspace call and a plain tile) take the shim, and give bitwise what
the same prepared launch gives through ctypes, eagerly and replayed in a CUDA graph."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.api import bf16 as bf16_api  # noqa: E402
from finegemm.api import dense_fp8  # noqa: E402
from finegemm.testing import calc_diff, capture_graph  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _fp8_call(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda", generator=g) + 0.5)
    sfb = torch.rand((n + 127) // 128, k // 128, device="cuda", generator=g) + 0.5
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn = lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)  # noqa: E731
    fn()
    call = dense_fp8._validated_calls[dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False)]
    ref = finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)  # fp64 on the GPU
    return fn, call, d, ref


@pytest.mark.parametrize("mnk", [(64, 2112, 7168), (128, 4096, 7168), (256, 7168, 2048), (4096, 7168, 2048)])
def test_fp8_prepared_launch_through_the_shim(mnk):
    fn, call, d, ref = _fp8_call(*mnk)
    assert call._fast_call is not None and call._launch_address, "the cached call does not take the shim"
    torch.cuda.synchronize()
    assert calc_diff(d, ref) < 1e-5
    first = d.clone()
    saved = call._fast_call
    try:
        call._fast_call = None  # the same prepared launch through ctypes
        d.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        assert torch.equal(d, first)
    finally:
        call._fast_call = saved
    d.fill_(float("nan"))
    graph = capture_graph(fn)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d, first)


def test_bf16_prepared_launch_through_the_shim():
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(128, 7168, device="cuda", generator=g, dtype=torch.bfloat16)
    b = torch.randn(256, 7168, device="cuda", generator=g, dtype=torch.bfloat16)
    d = torch.full((128, 256), float("nan"), device="cuda")
    finegemm.bf16_gemm_nt(a, b, d)
    calls = [c for c in bf16_api._validated_calls.values() if getattr(c, "_fast_call", None) is not None]
    assert calls, "no cached BF16 call takes the shim"
    torch.cuda.synchronize()
    assert calc_diff(d, a.double() @ b.double().t()) < 1e-5


def test_c_call_keys_on_cuda_tensors():
    """The host fast path's C key on CUDA tensors: on, it reads the device (CUDA, the tensor's
    index) and the address as PyTorch does; a seen call reuses its launch and reads the operands'
    current contents; a d at another address, or a scale tensor whose strides changed in place,
    is validated and planned again, and each answer matches the reference."""
    from finegemm.api import _validate
    from finegemm.jit import tensor_signature

    sig = _validate.signature_fn()
    assert sig is not _validate._no_signature, tensor_signature.status()
    m, n, k = 96, 640, 1024
    fn, call, d, ref = _fp8_call(m, n, k)
    (ptr, _, dev_type, dev_index, sizes, strides), = tensor_signature._decode(sig(d))
    assert (ptr, dev_type, dev_index, sizes, strides) == (d.data_ptr(), 1, d.device.index, (m, n), d.stride())
    torch.cuda.synchronize()
    assert calc_diff(d, ref) < 1e-5
    g = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda", generator=g) + 0.5)
    sfb = torch.rand((n + 127) // 128, k // 128, device="cuda", generator=g) + 0.5
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    key = dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False)
    assert type(key[0]) is bytes and key in dense_fp8._validated_calls
    a.copy_(torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn))  # same tensor, new values
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()
    assert calc_diff(d, finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)) < 1e-5
    # sfa's strides changed in place (the same object and address, MN-major -> K-major strides over
    # the same memory: another legal layout, other values per element).
    sfa_row = sfa.contiguous()
    sfa.as_strided_(sfa_row.shape, sfa_row.stride())
    assert dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False) != key
    d2 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d2)
    torch.cuda.synchronize()
    assert calc_diff(d2, finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)) < 1e-5


def _spy_encodes(monkeypatch) -> list:
    """Records each prepared launch that encodes itself (PreparedLaunch._make_handle): a moved
    call's launch is copied by the host library instead (fg_rebind_prepared_<family>)."""
    from finegemm.ops import _runtime

    encodes = []
    real = _runtime.PreparedLaunch._make_handle
    monkeypatch.setattr(_runtime.PreparedLaunch, "_make_handle",
                        lambda self: encodes.append(type(self).__name__) or real(self))
    return encodes


def _fresh_second_level(monkeypatch, module) -> None:
    """module._validated replaced by an empty cache with the same levels (slots, switch, key form)."""
    from finegemm.api import _validate

    shipped = module._validated
    moved = shipped._moved
    monkeypatch.setattr(module, "_validated", _validate.ValidatedCalls(moved=_validate.MovedCalls(
        moved._slots, moved._output, moved._inputs, moved._c_index, switch=moved._switch),
        signature_at=shipped._signature_at))


def _fp8_inputs(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda", generator=g) + 0.5)
    sfb = torch.rand((n + 127) // 128, k // 128, device="cuda", generator=g) + 0.5
    c = torch.randn(m, n, device="cuda", generator=g)
    return (a, sfa), (b, sfb), c


@pytest.mark.parametrize("mnk, out", [((64, 2112, 7168), "bf16"), ((128, 4096, 7168), "bf16"),
                                      ((4096, 7168, 2048), "bf16"), ((17, 576, 512), "bf16"),
                                      ((128, 4096, 7168), "c"), ((96, 640, 1024), "c_is_d")])
def test_fp8_moved_tensors_take_the_second_level(mnk, out, monkeypatch):
    """Calls whose tensors all moved (fresh A, B, scales, d and c in a validated call's layout)
    launch the validated plan at their own addresses without the argument checks, as a copy of the
    validated launch made by the host library (no new encoding) (split cluster, split-K workspace
    and plain tiles; with c beside d and c = d). Each NaN-poisoned d is fully written, matches the
    reference, and equals bitwise the fully validated call on the same inputs."""
    from finegemm.api import _validate

    assert _validate.layout_fn() is not _validate._no_layout
    m, n, k = mnk
    dtype = torch.bfloat16 if out == "bf16" else torch.float32

    def run(a, b, c, keyed=True):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        if out == "c_is_d":
            d.copy_(c)
            c = d
        elif out != "c":
            c = None
        c_ref = None if c is None else c.clone()
        if keyed:
            finegemm.fp8_gemm_nt(a, b, d, c)
        else:  # the validating path, no cache
            dense_fp8._fp8_gemm("fp8_gemm_nt", "nt", a, b, d, c, None, "nk", False)
        return d, c_ref

    run(*_fp8_inputs(m, n, k, 1))  # validated: both levels learn it
    checks, encodes = [], _spy_encodes(monkeypatch)
    real = dense_fp8.checked_arguments
    monkeypatch.setattr(dense_fp8, "checked_arguments", lambda *args: checks.append(args[0]) or real(*args))
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")  # the host-library copy (gated until this suite passes)
    for seed, copied in ((2, True), (3, False), (4, True)):
        if not copied:  # the fallback: the moved call encodes its launch anew
            monkeypatch.setenv("FINEGEMM_DISABLE_PATHS", "host_rebind")
        a, b, c = _fp8_inputs(m, n, k, seed)
        checks.clear()
        encodes.clear()
        d, c_ref = run(a, b, c)
        monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
        assert not checks, "a moved call was validated again"
        assert encodes == ([] if copied else ["PreparedCall"]), "the host-library copy was (not) used"
        torch.cuda.synchronize()
        assert not d.isnan().any()
        ref = finegemm.reference.fp8_gemm_nt(a[0], a[1], b[0], b[1], c=c_ref, out_dtype=torch.float32)
        assert calc_diff(d, ref) < 1e-5
        d_validated, _ = run(a, b, c, keyed=False)
        torch.cuda.synchronize()
        assert torch.equal(d, d_validated)


def test_bf16_moved_tensors_take_the_second_level(monkeypatch):
    """Dense BF16's second level on the GPU: moved a, b, d (nt and nn) launch without the checks,
    and match the reference and the validated call bitwise; d over b is still rejected."""
    from finegemm.api import _validate

    assert _validate.layout_fn() is not _validate._no_layout
    m, n, k = 64, 2112, 7168
    checks = []
    real = _validate.check_gemm_shapes
    for layout, fn in (("nt", finegemm.bf16_gemm_nt), ("nn", finegemm.bf16_gemm_nn)):
        def inputs(seed):
            g = torch.Generator(device="cuda").manual_seed(seed)
            a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16)
            return a, (b if layout == "nt" else b.t().contiguous()), b

        a, b, _ = inputs(1)
        monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")  # the host-library copy (gated until this suite passes)
        fn(a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        monkeypatch.setattr(_validate, "check_gemm_shapes", lambda *args: checks.append(args[0]) or real(*args))
        encodes = _spy_encodes(monkeypatch)
        checks.clear()
        a, b, b_nk = inputs(2)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        key = bf16_api._fast_key(layout, a, b, d, None, "nk")
        found = _validate.MovedCalls.key((a, b, d), (layout,) + key[2:], False)
        why = (f"{len(bf16_api._moved_calls._entries)} entries, seen: {found[0] in bf16_api._moved_calls._entries}, "
               f"addresses {found[1]}, rest {found[0][1:]}, entries' rest {[k[1:] for k in bf16_api._moved_calls._entries]}")
        fn(a, b, d)
        assert not checks, f"a moved call was validated again ({why})"
        assert not encodes, "a moved call was encoded anew instead of copied by the host library"
        d_validated = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        bf16_api._bf16_gemm(f"bf16_gemm_{layout}", layout, a, b, d_validated, None, "nk")
        torch.cuda.synchronize()
        assert calc_diff(d, a.double() @ b_nk.double().t()) < 1e-5 and torch.equal(d, d_validated)
        monkeypatch.undo()
    storage = torch.empty(n * k + m * n, device="cuda", dtype=torch.bfloat16)
    b_over = storage[: n * k].view(n, k)
    d_over = storage[n * k - m * n // 2: n * k + m * n // 2].view(m, n)
    with pytest.raises(ValueError, match="d must not overlap b"):
        finegemm.bf16_gemm_nt(a, b_over, d_over)


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("g, m_max, n, k", [(4, 256, 4096, 7168), (3, 17, 576, 512)])
def test_masked_moved_tensors_take_the_second_level(family, g, m_max, n, k, monkeypatch):
    """The masked calls' second level (v1.21) on the GPU: fresh A (and sfa), d and masked_m in a
    validated call's layout launch without the argument checks, a new plan or a new encoding (the
    host library's copy, fg_rebind_prepared_sm90_*_masked), and the kernel reads
    the new masked_m (other values than the validated call's): rows < masked_m match the reference
    and the uncached op bitwise, rows >= masked_m keep their NaN poison."""
    from finegemm.api import _validate
    from finegemm.api import grouped_fp8 as fp8_api
    from finegemm.ops import sm90_bf16_gemm, sm90_fp8_gemm

    assert _validate.layout_fn() is not _validate._no_layout
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")  # the second level (gated until this suite passes)
    api = fp8_api if family == "fp8" else bf16_api

    def inputs(seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        if family == "fp8":
            a = torch.randn(g, m_max, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
            sfa = finegemm.get_mn_major_tma_aligned_tensor(
                torch.rand(g, m_max, k // 128, device="cuda", generator=gen) + 0.5)  # read in place: preparable
            return (a, sfa)
        return torch.randn(g, m_max, k, device="cuda", generator=gen, dtype=torch.bfloat16)

    gen = torch.Generator(device="cuda").manual_seed(99)
    if family == "fp8":
        b = (torch.randn(g, n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn),
             torch.rand(g, (n + 127) // 128, k // 128, device="cuda", generator=gen) + 0.5)
        call, op = finegemm.m_grouped_fp8_gemm_nt_masked, sm90_fp8_gemm.m_grouped_fp8_gemm_nt_masked
    else:
        b = torch.randn(g, n, k, device="cuda", generator=gen, dtype=torch.bfloat16)
        call, op = finegemm.m_grouped_bf16_gemm_nt_masked, sm90_bf16_gemm.m_grouped_bf16_gemm_nt_masked

    def fresh_d():
        return torch.full((g, m_max, n), float("nan"), device="cuda", dtype=torch.bfloat16)

    first = [m_max, 0, min(5, m_max)][:g] + [m_max // 2] * max(g - 3, 0)
    # Every call's tensors stay alive: a freed address handed out again would make a later call a
    # first-level hit instead of a moved one.
    alive = [(inputs(1), fresh_d(), torch.tensor(first, dtype=torch.int32, device="cuda"))]
    call(alive[0][0], b, alive[0][1], alive[0][2], m_max // 2)
    validations, plans, encodes = [], [], _spy_encodes(monkeypatch)
    real_validate = api._validate_masked
    monkeypatch.setattr(api, "_validate_masked", lambda *args: validations.append(1) or real_validate(*args))
    ops = sm90_fp8_gemm if family == "fp8" else sm90_bf16_gemm
    real_plan = ops.plan_grouped
    monkeypatch.setattr(ops, "plan_grouped", lambda *args, **kw: plans.append(1) or real_plan(*args, **kw))
    for seed in (2, 3):
        masked = [(seed * 7 + 3 * i) % (m_max + 1) for i in range(g)]
        masked[seed % g] = m_max
        masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
        a, d = inputs(seed), fresh_d()
        alive.append((a, d, masked_m))
        validations.clear()
        plans.clear()  # the uncached op below plans
        encodes.clear()
        call(a, b, d, masked_m, m_max // 2)
        assert not validations and not plans, "a moved masked call was validated or planned again"
        assert not encodes, "a moved masked call's launch was encoded anew instead of copied by the host library"
        torch.cuda.synchronize()
        if family == "fp8":
            ref = finegemm.reference.m_grouped_fp8_gemm_nt_masked(a[0], a[1], b[0], b[1], masked_m,
                                                                  out_dtype=torch.float64)
            d_op = fresh_d()
            op(a[0], a[1], b[0], b[1], d_op, masked_m, m_max // 2)
        else:
            ref = finegemm.reference.m_grouped_bf16_gemm_nt_masked(a, b, masked_m, out_dtype=torch.float64)
            d_op = fresh_d()
            op(a, b, d_op, masked_m, m_max // 2)
        torch.cuda.synchronize()
        for i, m in enumerate(masked):
            assert torch.isnan(d[i, m:]).all(), f"group {i}: rows >= masked_m = {m} were written"
            assert not torch.isnan(d[i, :m]).any(), f"group {i}: rows < masked_m = {m} not fully written"
            assert torch.equal(d[i, :m], d_op[i, :m]), f"group {i}: differs from the uncached op"
        rows = torch.cat([d[i, :m] for i, m in enumerate(masked)])
        want = torch.cat([ref[i, :m] for i, m in enumerate(masked)])
        assert calc_diff(rows, want) < 1e-5


def _contiguous_layout(g, m, seed):
    """int32 [m]: groups in runs of 128-row multiples (in a seeded order), the rest -1 padding."""
    gen = torch.Generator().manual_seed(seed)
    layout = torch.full((m,), -1, dtype=torch.int32)
    row = 0
    for i, group in enumerate(torch.randperm(g, generator=gen).tolist()):  # the first one never empty
        rows = 128 * int(torch.randint(1 if i == 0 else 0, max(m // (128 * g), 1) + 1, (1,), generator=gen))
        layout[row:row + rows] = group
        row += rows
    return layout.cuda()


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("g, m, n, k", [(4, 4096, 4096, 7168), (3, 640, 576, 512)])
def test_contiguous_moved_tensors_take_the_second_level(family, g, m, n, k, monkeypatch):
    """The contiguous calls' second level (v1.22) on the GPU: fresh A (and sfa), d and grouped_layout
    (another assignment of rows to groups) in a validated call's layout launch without the argument
    checks, a new plan or a new encoding (v1.23: the host library copies the launch); the GEMM checks
    and reads the new layout: every row matches the reference (padding rows zero) and, bitwise, a
    call validated afresh on the same inputs; a broken layout at new addresses is still reported."""
    from finegemm.api import _validate
    from finegemm.api import grouped_fp8 as fp8_api
    from finegemm.ops import sm90_bf16_gemm, sm90_fp8_gemm

    assert _validate.layout_fn() is not _validate._no_layout
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")  # the second level (gated until this suite passes)
    api = fp8_api if family == "fp8" else bf16_api
    ops = sm90_fp8_gemm if family == "fp8" else sm90_bf16_gemm

    def inputs(seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        if family == "fp8":
            a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
            return (a, finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda", generator=gen)
                                                                + 0.5))
        return torch.randn(m, k, device="cuda", generator=gen, dtype=torch.bfloat16)

    gen = torch.Generator(device="cuda").manual_seed(77)
    if family == "fp8":
        b = (torch.randn(g, n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn),
             torch.rand(g, (n + 127) // 128, k // 128, device="cuda", generator=gen) + 0.5)
        call = finegemm.m_grouped_fp8_gemm_nt_contiguous

        def reference(a, layout):
            return finegemm.reference.m_grouped_fp8_gemm_nt_contiguous(a[0], a[1], b[0], b[1], layout,
                                                                       out_dtype=torch.float64)
    else:
        b = torch.randn(g, n, k, device="cuda", generator=gen, dtype=torch.bfloat16)
        call = finegemm.m_grouped_bf16_gemm_nt_contiguous

        def reference(a, layout):
            return finegemm.reference.m_grouped_bf16_gemm_nt_contiguous(a, b, layout, out_dtype=torch.float64)

    def fresh_d():
        return torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)

    alive = [(inputs(1), fresh_d(), _contiguous_layout(g, m, 1))]  # kept alive: no address handed out again
    call(alive[0][0], b, alive[0][1], alive[0][2])
    validations, plans, encodes = [], [], _spy_encodes(monkeypatch)
    real_validate = api._validate_contiguous
    monkeypatch.setattr(api, "_validate_contiguous", lambda *args: validations.append(1) or real_validate(*args))
    real_plan = ops.plan_grouped
    monkeypatch.setattr(ops, "plan_grouped", lambda *args, **kw: plans.append(1) or real_plan(*args, **kw))

    def moved_call(seed, layout):
        """One call at fresh tensors (kept alive) in the validated layout: its (a, d)."""
        a, d = inputs(seed), fresh_d()
        alive.append((a, d, layout))
        validations.clear()
        plans.clear()
        encodes.clear()
        call(a, b, d, layout)
        assert not validations and not plans, "a moved contiguous call was validated or planned again"
        assert not encodes, "a moved contiguous call's launch was encoded anew instead of copied by the host library"
        return a, d

    for seed in (2, 3):
        layout = _contiguous_layout(g, m, seed)
        a, d = moved_call(seed, layout)
        finegemm.check_errors()
        torch.cuda.synchronize()
        assert not d.isnan().any()
        assert torch.all(d[layout < 0] == 0), "padding rows not zeroed"
        assert calc_diff(d, reference(a, layout)) < 1e-5
        with monkeypatch.context() as fresh:  # the same inputs validated afresh (no cache at all)
            fresh.setattr(api, "_validated_contiguous", _validate.ValidatedCalls())
            d_validated = fresh_d()
            call(a, b, d_validated, layout)
        torch.cuda.synchronize()
        assert torch.equal(d, d_validated)
    # The copied launch checks the layout it now points at (the stream's scratch and record kept).
    bad = _contiguous_layout(g, m, 4)
    bad[0] = g + 3
    finegemm.check_errors()
    moved_call(4, bad)
    with pytest.raises(ValueError, match=r"grouped_layout values must be -1 \(padding row\) or a group id"):
        finegemm.check_errors()
    finegemm.check_errors()  # reported once


@pytest.mark.parametrize("batch, heads, r, n, dtype, c_is_d", [(64, 128, 512, 128, torch.bfloat16, False),
                                                               (17, 3, 256, 136, torch.float32, True),
                                                               (1, 16, 512, 128, torch.float32, False)])
def test_fp8_einsum_moved_tensors_take_the_second_level(batch, heads, r, n, dtype, c_is_d, monkeypatch):
    """fp8_einsum's second level (v1.24) on the GPU: fresh A, sfa and d (fp32: c = d holding other
    values) in a validated call's layout launch without the argument checks, a new plan or a new
    encoding (the host library copies the heads-packed launch, sfa's pointer re-pointed): the
    result is within 1e-5 of the float64 product and bitwise a call validated afresh."""
    import importlib

    from finegemm.api import _validate
    from finegemm.ops import sm90_fp8_gemm

    mod = importlib.import_module("finegemm.api.fp8_einsum")
    assert _validate.layout_fn() is not _validate._no_layout
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")  # the second level (gated until this suite passes)
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
    _fresh_second_level(monkeypatch, mod)
    gen = torch.Generator(device="cuda").manual_seed(11)
    per_head = [finegemm.per_block_cast_to_fp8(torch.randn(n, r, device="cuda", generator=gen)) for _ in range(heads)]
    B, sfb = torch.stack([p[0] for p in per_head]), torch.stack([p[1] for p in per_head])
    b_deq = B.double() * sfb.double().repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)[..., :r]

    def inputs(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        A, sfa = finegemm.per_token_cast_to_fp8(torch.randn(batch * heads, r, device="cuda", generator=g))
        d = torch.randn(batch, heads, n, device="cuda", generator=g).to(dtype)  # c's values where c = d
        return A.view(batch, heads, r), sfa.view(batch, heads, -1), d

    def call(A, sfa, d):
        finegemm.fp8_einsum("bhr,hdr->bhd", (A, sfa), (B, sfb), d, c=d if c_is_d else None)

    def exact(A, sfa, c_values):
        a_deq = A.double() * sfa.double().repeat_interleave(128, 2)[..., :r]
        product = torch.einsum("bhr,hdr->bhd", a_deq, b_deq)
        return product + c_values.double() if c_is_d else product

    alive = [inputs(1)]  # every call's tensors kept alive: no address handed out again
    call(*alive[0])
    validations, plans, encodes = [], [], _spy_encodes(monkeypatch)
    real_checked = mod._checked
    monkeypatch.setattr(mod, "_checked", lambda *args: validations.append(1) or real_checked(*args))
    real_plan = sm90_fp8_gemm.plan_heads_packed
    monkeypatch.setattr(sm90_fp8_gemm, "plan_heads_packed",
                        lambda *args, **kw: plans.append(1) or real_plan(*args, **kw))
    for seed in (2, 3):
        A, sfa, d = inputs(seed)
        alive.append((A, sfa, d))
        c_values = d.clone()
        d_validated = d.clone()
        validations.clear()
        plans.clear()
        encodes.clear()
        call(A, sfa, d)
        assert not validations and not plans, "a moved fp8_einsum call was validated or planned again"
        assert not encodes, "a moved fp8_einsum call's launch was encoded anew instead of copied by the host library"
        torch.cuda.synchronize()
        assert calc_diff(d, exact(A, sfa, c_values)) < 1e-5
        with monkeypatch.context() as fresh:  # the same inputs validated afresh (no cache at all)
            fresh.setattr(mod, "_validated", _validate.ValidatedCalls())
            call(A, sfa, d_validated)
        torch.cuda.synchronize()
        assert torch.equal(d, d_validated)


@pytest.mark.parametrize("m, splits, heads, k", [(128, (128, 64, 128), 32, 512), (17, (128, 64, 128), 32, 512)])
def test_skip_head_mid_moved_tensors_take_the_second_level(m, splits, heads, k, monkeypatch):
    """fp8_gemm_nt_skip_head_mid's second level (v1.26) on the GPU: fresh A, sfa and d in a validated
    call's layout launch the fused kernel without the argument checks, a new plan or a new encoding
    (the host library copies the launch, D's map re-pointed): each head's columns bitwise those of
    fp8_gemm_nt on the same inputs, the mid columns untouched, and bitwise a call validated afresh."""
    import importlib

    from finegemm.api import _validate
    from finegemm.ops import sm90_fp8_gemm

    mod = importlib.import_module("finegemm.api.skip_head_mid")
    assert _validate.layout_fn() is not _validate._no_layout
    monkeypatch.setenv("FINEGEMM_ENABLE_UNVALIDATED", "1")  # the second level (gated until this suite passes)
    monkeypatch.delenv("FINEGEMM_DISABLE_PATHS", raising=False)
    _fresh_second_level(monkeypatch, mod)
    left, mid, right = splits
    n = heads * (left + right)
    gen = torch.Generator(device="cuda").manual_seed(5)
    b = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=gen))

    def inputs(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=g))
        return a, torch.full((m, n + heads * mid), float("nan"), dtype=torch.bfloat16, device="cuda")

    alive = [inputs(1)]  # every call's tensors kept alive: no address handed out again
    finegemm.fp8_gemm_nt_skip_head_mid(alive[0][0], b, alive[0][1], splits)
    validations, plans, encodes = [], [], _spy_encodes(monkeypatch)
    real_validate = mod._validate
    monkeypatch.setattr(mod, "_validate", lambda *args: validations.append(1) or real_validate(*args))
    real_plan = sm90_fp8_gemm._head_split_config
    monkeypatch.setattr(sm90_fp8_gemm, "_head_split_config", lambda *args: plans.append(1) or real_plan(*args))
    for seed in (2, 3):
        a, d = inputs(seed)
        alive.append((a, d))
        validations.clear()
        plans.clear()
        encodes.clear()
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, splits)
        assert not validations and not plans, "a moved skip-head-mid call was validated or planned again"
        assert not encodes, "a moved skip-head-mid call's launch was encoded anew instead of copied"
        plain = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        finegemm.fp8_gemm_nt(a, b, plain)
        torch.cuda.synchronize()
        got, want = d.view(m, heads, left + mid + right), plain.view(m, heads, left + right)
        assert torch.equal(got[:, :, :left], want[:, :, :left])
        assert torch.equal(got[:, :, left + mid:], want[:, :, left:])
        assert torch.isnan(got[:, :, left:left + mid]).all(), "the mid columns were written"
        with monkeypatch.context() as fresh:  # the same inputs validated afresh (no cache at all)
            fresh.setattr(mod, "_validated", _validate.ValidatedCalls())
            d_validated = torch.full_like(d, float("nan"))
            finegemm.fp8_gemm_nt_skip_head_mid(a, b, d_validated, splits)
        torch.cuda.synchronize()
        assert torch.equal(d.nan_to_num(7.0), d_validated.nan_to_num(7.0))
