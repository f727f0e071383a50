"""BF16 GEMMs (DeepGEMM names): dense in every layout, m-grouped (contiguous, masked), k-grouped.

Layout suffix as for the FP8 GEMMs (first letter A, second B; "n" as stored, "t" transposed):
nt: A [M, K], B [N, K], D = C + A @ B.T;  nn: A [M, K], B [K, N], D = C + A @ B;
tn: A [K, M], B [K, N], D = C + A.T @ B;  tt: A [K, M], B [N, K], D = C + A.T @ B.T.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm import quant, reference, runtime
from finegemm.api import _validate as _v
from finegemm.utils import write_empty_product

__all__ = [
    "bf16_gemm_nt",
    "bf16_gemm_nn",
    "bf16_gemm_tn",
    "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nn_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous",
]

_BF16 = torch.bfloat16


# Host fast path (as api/dense_fp8.py): a call whose tensors all have the address, shape, strides
# and dtype of an earlier validated call reuses its prepared launch.
_validated_calls: dict = {}
_MAX_VALIDATED_CALLS = 4096


def _fast_key(layout: str, a, b, d, c, compiled_dims) -> Optional[tuple]:
    """Signature of a CUDA call for the fast path, or None (CPU tensors, odd argument types)."""
    try:
        if not _v.on_cuda(d):
            return None
        # As api/dense_fp8.py's key: the tensors (c last when given; _validate.tensor_key inline),
        # then the typed arguments.
        signature = _v._signature_fn or _v.signature_fn()
        sig = signature(a, b, d) if c is None else signature(a, b, d, c)
        rest = (type(compiled_dims), compiled_dims, runtime.get_num_sms_setting())
        if sig is not None:
            return (layout, sig) + rest
        return (layout,) + _v.python_tensor_key((a, b, d) if c is None else (a, b, d, c)) + rest
    except Exception:  # anything unusual takes the validating path, which raises the right error
        return None


# The second level (as api/dense_fp8.py's): tensors (a, b, d[, c]), the launch's head points at
# (a, b, d, c); d must not meet a or b (nor c, unless c is d).
_moved_calls = _v.MovedCalls(slots=(0, 1, 2, 3), output=2, inputs=(0, 1), c_index=3)


def _remember(key: tuple, call) -> None:
    _v.keep_bounded(_validated_calls, key, call, _MAX_VALIDATED_CALLS)


def _dense(fn: str, layout: str, a, b, d, c, compiled_dims) -> None:
    key = _fast_key(layout, a, b, d, c, compiled_dims)
    moved = None
    if key is not None:
        try:
            call = _validated_calls.get(key)
        except TypeError:  # an unhashable argument: validate
            call = key = None
        if call is not None:
            call()
            return
        if key is not None and type(key[1]) is bytes:  # a seen layout at new addresses: re-pointed
            moved = _v.MovedCalls.key((a, b, d) if c is None else (a, b, d, c), (layout,) + key[2:], c is d)
            call = _moved_calls.launch_for(moved)
            if call is not None:
                _remember(key, call)
                call()
                return
    _bf16_gemm(fn, layout, a, b, d, c, compiled_dims, key, moved)


def _bf16_gemm(fn: str, layout: str, a: object, b: object, d: object, c: object, compiled_dims: object,
               fast_key: Optional[tuple] = None, moved_key: Optional[tuple] = None) -> None:
    a_mk = layout[0] == "n"
    b_nk = layout[1] == "t"
    a = _v.check_tensor(fn, "a", a)
    b = _v.check_tensor(fn, "b", b)
    d = _v.check_tensor(fn, "d", d)
    c = _v.check_optional_tensor(fn, "c", c)
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_dtype(fn, "a", a, (_BF16,))
    _v.check_dtype(fn, "b", b, (_BF16,))
    _v.check_dtype(fn, "d", d, (_BF16, torch.float32))
    _v.check_out_dtype_with_c(fn, d, c)
    M, N, K = _v.check_gemm_shapes(fn, "a", a, "b", b, d, c, a_mk, b_nk)
    _v.check_same_device(fn, {"d": d, "a": a, "b": b, "c": c})
    _v.check_k_alignment(fn, K, 2, "BF16")
    _v.check_tma_layout(fn, "a", a, "(stored [M, K])" if a_mk else "(stored [K, M])")
    _v.check_tma_layout(fn, "b", b, "(stored [N, K])" if b_nk else "(stored [K, N])")
    _v.check_tma_layout(fn, "d", d, "[M, N]")
    if c is not None:
        _v.check_tma_layout(fn, "c", c, "[M, N]")
    _v.check_no_overlap(fn, "d", d, {"a": a, "b": b})
    _v.check_c_alias(fn, c, d)

    if M == 0 or N == 0:
        return
    if K == 0:
        write_empty_product(d, c)
        return
    if _v.on_cuda(d):
        from finegemm.ops import sm90_bf16_gemm

        call = sm90_bf16_gemm.prepare(a, b, d, c, layout)
        if call is None:
            return
        if fast_key is not None and call.cacheable:
            _remember(fast_key, call)
            _moved_calls.learn(moved_key, (a, b, d) if c is None else (a, b, d, c), call)
        call()
        return
    a_nt = a if a_mk else a.t()
    b_nt = b if b_nk else b.t()
    d.copy_(reference.bf16_gemm_nt(a_nt, b_nt, c=c, out_dtype=d.dtype))


_DENSE_DOC = """
    Args:
        a: ``torch.bfloat16`` {a_shape}.
        b: ``torch.bfloat16`` {b_shape}.
        d: ``torch.bfloat16`` or ``torch.float32`` [M, N], written in place.
        c: optional ``torch.float32`` [M, N] accumulated into d. Rule: c only with an fp32 d; c may
            be d itself (in-place accumulation) but must not otherwise overlap d.
        compiled_dims: kernel specialization hint (distinct letters of "mnk").

    Constraints (TypeError for types/dtypes, ValueError for shapes/strides/values):
        * K % 8 == 0 (16 bytes of BF16; TMA rule).
        * a, b, d (and c): contiguous last dimension, other strides multiples of 16 bytes (TMA
          needs a 16-byte row pitch, e.g. N % 8 == 0 for a contiguous bf16 d) and a 16-byte
          aligned base address.
        * All tensors on one device; d must not overlap a or b, nor itself (no two elements at one
          address, e.g. an expanded view).
        * M == 0 or N == 0 returns at once after validation; K == 0 writes d = c (or zeros).

    Devices: CPU runs ``finegemm.reference.bf16_gemm_nt`` (exact, fp64 accumulation) on
    transposed views; CUDA runs the SM90 BF16 kernel (finegemm.ops.sm90_bf16_gemm), which reads
    every layout natively (no transposing copies).
"""


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    _dense("bf16_gemm_nt", "nt", a, b, d, c, compiled_dims)


def bf16_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "nk") -> None:
    _dense("bf16_gemm_nn", "nn", a, b, d, c, compiled_dims)


def bf16_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    _dense("bf16_gemm_tn", "tn", a, b, d, c, compiled_dims)


def bf16_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
                 compiled_dims: str = "mn") -> None:
    _dense("bf16_gemm_tt", "tt", a, b, d, c, compiled_dims)


bf16_gemm_nt.__doc__ = "BF16 GEMM D = C + A @ B.T (A [M, K], B [N, K]).\n" + _DENSE_DOC.format(
    a_shape="[M, K]", b_shape="[N, K]")
bf16_gemm_nn.__doc__ = "BF16 GEMM D = C + A @ B (A [M, K], B [K, N]).\n" + _DENSE_DOC.format(
    a_shape="[M, K]", b_shape="[K, N]")
bf16_gemm_tn.__doc__ = "BF16 GEMM D = C + A.T @ B (A [K, M], B [K, N]).\n" + _DENSE_DOC.format(
    a_shape="[K, M]", b_shape="[K, N]")
bf16_gemm_tt.__doc__ = "BF16 GEMM D = C + A.T @ B.T (A [K, M], B [N, K]).\n" + _DENSE_DOC.format(
    a_shape="[K, M]", b_shape="[N, K]")


def _check_grouped_b(fn: str, b: torch.Tensor, k_a: int, b_kn: bool = False) -> tuple[int, int]:
    """(G, N) of an m-grouped B: [G, N, K] (nt), or [G, K, N] with b_kn (nn)."""
    layout = "[G, K, N]" if b_kn else "[G, N, K]"
    _v.check_dtype(fn, "b", b, (_BF16,))
    _v.check_rank(fn, "b", b, 3, layout)
    G, N, K = (b.shape[0], b.shape[2], b.shape[1]) if b_kn else tuple(b.shape)
    if K != k_a:
        raise ValueError(f"{fn}: K of a (K={k_a}) and b ({layout} = {_v.fmt_shape(b.shape)}) must agree, got K={k_a} "
                         f"and K={K}")
    return G, N


# Host fast path of the contiguous calls (as api/grouped_fp8.py's, nn included: B is read in place),
# with a second level: tensors (a, b, d, grouped_layout), which the GEMM launch points at in that
# order; d must not meet a, b or grouped_layout.
_validated_contiguous = _v.ValidatedCalls(moved=_v.MovedCalls(
    slots=(0, 1, 2, 3), output=2, inputs=(0, 1, 3), c_index=4, switch="contiguous_moved_calls"))


def _m_grouped_contiguous(fn: str, b_kn: bool, a: object, b: object, d: object, grouped_layout: object,
                          *flags: object) -> None:
    """flags: compiled_dims, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout."""
    def tensors():
        return a, b, d, grouped_layout

    key = _validated_contiguous.key(fn, d, tensors, flags)
    kept = _validated_contiguous.launch(key, _validate_contiguous, fn, b_kn, a, b, d, grouped_layout, *flags,
                                        tensors=tensors)
    if not kept or _v.ran_kept(kept):
        return  # CPU, an empty product, or a seen call's prepared launch: done
    from finegemm.ops import contiguous_layout, sm90_bf16_gemm

    # The layout (plain ids or psum ends) checked by the GEMM itself, one launch per call, unless
    # FINEGEMM_DISABLE_PATHS (or a gate) turns that capability off: then the check kernel, then the
    # GEMM on its ids. Asked only when a launch is prepared or taken one-shot, not on a kept call.
    def prepare(prepared):
        prepare_checked = None
        if contiguous_layout.checks_in_kernel("bf16", flags[1]):
            def prepare_checked(check):
                return sm90_bf16_gemm.prepare_m_grouped_contiguous_layout_checked(a, b, d, grouped_layout, b_kn,
                                                                                  check, psum=flags[1])
        return contiguous_layout.run_prepared(
            fn, prepared, grouped_layout, a.shape[0], b.shape[0], flags[1],
            lambda ids: sm90_bf16_gemm.prepare_m_grouped_contiguous(a, b, d, ids, b_kn), prepare_checked)

    if _validated_contiguous.run_kept(key, kept, prepare, tensors):
        return
    alignment = quant.get_mk_alignment_for_contiguous_layout()
    if contiguous_layout.checks_in_kernel("bf16", flags[1]):
        check = contiguous_layout.api_in_kernel_check(fn, a.shape[0], b.shape[0], alignment, flags[1])
        sm90_bf16_gemm.m_grouped_bf16_gemm_contiguous_layout_checked(a, b, d, grouped_layout, b_kn, check,
                                                                     psum=flags[1])
        return
    ids = contiguous_layout.api_group_ids(fn, grouped_layout, a.shape[0], b.shape[0], flags[1], alignment)
    run = sm90_bf16_gemm.m_grouped_bf16_gemm_nn_contiguous if b_kn else sm90_bf16_gemm.m_grouped_bf16_gemm_nt_contiguous
    run(a, b, d, ids, checked_ids=True)


def _validate_contiguous(fn: str, b_kn: bool, a: object, b: object, d: object, grouped_layout: object,
                         compiled_dims: object, use_psum_layout: object, ensure_zero_padding: object,
                         expected_m_for_psum_layout: object) -> bool:
    """Every argument check; runs the CPU and empty-product calls itself (False), True for a CUDA
    call that _m_grouped_contiguous is to launch."""
    b_layout = "[G, K, N]" if b_kn else "[G, N, K]"
    a = _v.check_tensor(fn, "a", a)
    b = _v.check_tensor(fn, "b", b)
    d = _v.check_tensor(fn, "d", d)
    grouped_layout = _v.check_tensor(fn, "grouped_layout", grouped_layout)
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_contiguous_flags(fn, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)
    _v.check_dtype(fn, "a", a, (_BF16,))
    _v.check_dtype(fn, "d", d, (_BF16,))
    _v.check_rank(fn, "a", a, 2, "[M, K]")
    M, K = a.shape
    G, N = _check_grouped_b(fn, b, K, b_kn)
    _v.check_rank(fn, "d", d, 2, "[M, N]")
    _v.check_shape(fn, "d", d, (M, N), "[M, N]")
    _v.check_same_device(fn, {"d": d, "a": a, "b": b, "grouped_layout": grouped_layout})
    _v.check_k_alignment(fn, K, 2, "BF16")
    _v.check_tma_layout(fn, "a", a, "[M, K]")
    _v.check_tma_layout(fn, "b", b, b_layout)
    _v.check_tma_layout(fn, "d", d, "[M, N]")
    _v.check_no_overlap(fn, "d", d, {"a": a, "b": b, "grouped_layout": grouped_layout})
    alignment = quant.get_mk_alignment_for_contiguous_layout()
    _v.check_cuda_mk_alignment(fn, d, alignment)
    if _v.contiguous_layout_values(fn, d, grouped_layout, M, G, use_psum_layout, alignment, empty=M * N * K * G == 0):
        _v.require_gpu_validated(fn, "m_grouped_bf16_nn" if b_kn else "m_grouped_bf16")
        return True
    if M == 0 or N == 0:
        return False
    if K == 0 or G == 0:
        d.zero_()
        return False
    d.copy_(reference.m_grouped_bf16_gemm_nt_contiguous(a, b.transpose(1, 2) if b_kn else b, grouped_layout,
                                                        use_psum_layout=use_psum_layout, out_dtype=d.dtype))
    return False


_CONTIGUOUS_DOC = """M-grouped BF16 GEMM, contiguous layout: {formula}.

    Args:
        a: ``bfloat16`` [M, K]; b: ``bfloat16`` {b_shape}; d: ``bfloat16`` [M, N] (written in full;
            rows of no group are zeros).
        grouped_layout: ``int32`` [M] group per row (-1 = padding; each group one run starting at
            a multiple of ``get_mk_alignment_for_contiguous_layout()``), or with
            ``use_psum_layout`` ``int32`` [G] cumulative row ends (non-negative, non-decreasing,
            last <= M). CPU tensors: checked before the call. CUDA tensors: checked on the GPU (no
            sync, capturable); a broken rule raises from ``finegemm.check_errors()`` or the next
            m-grouped contiguous call, rows with an id outside [-1, G) are written as zeros.
        compiled_dims: kernel specialization hint; use_psum_layout: bool.
        ensure_zero_padding: bool (DeepGEMM's flag; padding rows are always written as zeros here).
        expected_m_for_psum_layout: None or an int >= 0, only with ``use_psum_layout`` (DeepGEMM's
            planning hint; finegemm plans from the rows it is given and does not need it).

    Constraints: K % 8 == 0; TMA layout rules for a, b, d; one device; d must not overlap the
    inputs nor itself; M == 0 returns at once after validation. On CUDA the mk alignment must be 64 or 128
    (a kernel tile never spans two groups; smaller alignments raise NotImplementedError).
    Devices: CPU runs ``finegemm.reference``; CUDA runs the SM90 BF16 kernel's m-grouped contiguous
    kind (finegemm.ops.sm90_bf16_gemm) after the layout check kernel (finegemm.ops.contiguous_layout, which also
    turns psum ends into per-row group ids){device_note}.
    """


def m_grouped_bf16_gemm_nt_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    compiled_dims: str = "nk",
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: Optional[int] = None,
) -> None:
    _m_grouped_contiguous("m_grouped_bf16_gemm_nt_contiguous", False, a, b, d, grouped_layout, compiled_dims,
                          use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)


def m_grouped_bf16_gemm_nn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    compiled_dims: str = "nk",
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
) -> None:
    _m_grouped_contiguous("m_grouped_bf16_gemm_nn_contiguous", True, a, b, d, grouped_layout, compiled_dims,
                          use_psum_layout, ensure_zero_padding, None)


m_grouped_bf16_gemm_nt_contiguous.__doc__ = _CONTIGUOUS_DOC.format(
    formula="D[r] = A[r] @ B[g(r)].T", b_shape="[G, N, K]", device_note="")
m_grouped_bf16_gemm_nn_contiguous.__doc__ = _CONTIGUOUS_DOC.format(
    formula="D[r] = A[r] @ B[g(r)] (B stored [G, K, N]: the MoE backward pass's data gradient)",
    b_shape="[G, K, N] (N contiguous; any row / group pitch TMA accepts)",
    device_note=" with B read N-major in place (no transposing copy; a 3-D tensor map per call)")


def m_grouped_bf16_gemm_nt_masked(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    compiled_dims: str = "nk",
) -> None:
    """M-grouped BF16 GEMM, masked layout: D[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g].T.

    Args:
        a: ``bfloat16`` [G, Mmax, K]; b: ``bfloat16`` [G, N, K]; d: ``bfloat16`` [G, Mmax, N]
            (only rows m < masked_m[g] are written; the others are left untouched).
        masked_m: ``int32`` [G] in [0, Mmax]: checked on CPU tensors only (on CUDA it stays on
            the GPU for CUDA graphs and the kernel clamps it).
        expected_m: int >= 0, typical masked_m (planning hint).
        compiled_dims: kernel specialization hint.

    Constraints: K % 8 == 0; TMA layout rules for a, b, d; one device; d must not overlap the
    inputs nor itself. Devices: CPU runs ``finegemm.reference``; CUDA runs the SM90 BF16 kernel's m-grouped
    masked kind (finegemm.ops.sm90_bf16_gemm): masked_m is read and clamped to [0, Mmax] on the
    GPU, never by the host (no sync; a captured CUDA graph replays with new masked_m values).
    """
    fn = "m_grouped_bf16_gemm_nt_masked"
    def tensors():
        return a, b, d, masked_m

    key = _validated_masked.key(fn, d, tensors, (expected_m, compiled_dims))
    kept = _validated_masked.launch(key, _validate_masked, fn, a, b, d, masked_m, expected_m, compiled_dims,
                                    tensors=tensors)
    if not kept or _v.ran_kept(kept):
        return  # CPU, an empty product, or a seen call's prepared launch: done
    from finegemm.ops import sm90_bf16_gemm

    if not _validated_masked.run_kept(key, kept, lambda _: _v.run_prepared_launch(
            sm90_bf16_gemm.prepare_m_grouped_masked(a, b, d, masked_m, expected_m)), tensors):
        sm90_bf16_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)


# The masked calls' host fast path (as the contiguous ones'), with a second level: tensors
# (a, b, d, masked_m), which the launch points at in that order; d must not meet a, b or masked_m.
_validated_masked = _v.ValidatedCalls(moved=_v.MovedCalls(
    slots=(0, 1, 2, 3), output=2, inputs=(0, 1, 3), c_index=4, switch="masked_moved_calls"))


def _validate_masked(fn: str, a: object, b: object, d: object, masked_m: object, expected_m: object,
                     compiled_dims: object) -> bool:
    """Every argument check; runs the CPU and empty-product calls itself (False), True for a CUDA
    call the caller is to launch."""
    a = _v.check_tensor(fn, "a", a)
    b = _v.check_tensor(fn, "b", b)
    d = _v.check_tensor(fn, "d", d)
    masked_m = _v.check_tensor(fn, "masked_m", masked_m)
    _v.check_int(fn, "expected_m", expected_m, 0)
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_dtype(fn, "a", a, (_BF16,))
    _v.check_dtype(fn, "d", d, (_BF16,))
    _v.check_rank(fn, "a", a, 3, "[G, Mmax, K]")
    G, Mmax, K = a.shape
    Gb, N = _check_grouped_b(fn, b, K)
    if Gb != G:
        raise ValueError(f"{fn}: G of a ([G, Mmax, K]) and b ([G, N, K]) must agree, got {G} and {Gb}")
    _v.check_rank(fn, "d", d, 3, "[G, Mmax, N]")
    _v.check_shape(fn, "d", d, (G, Mmax, N), "[G, Mmax, N]")
    _v.check_same_device(fn, {"d": d, "a": a, "b": b, "masked_m": masked_m})
    _v.check_k_alignment(fn, K, 2, "BF16")
    _v.check_tma_layout(fn, "a", a, "[G, Mmax, K]")
    _v.check_tma_layout(fn, "b", b, "[G, N, K]")
    _v.check_tma_layout(fn, "d", d, "[G, Mmax, N]")
    _v.check_no_overlap(fn, "d", d, {"a": a, "b": b, "masked_m": masked_m})
    _v.check_masked_m(fn, masked_m, G, Mmax, check_values=not _v.on_cuda(d))

    if G == 0 or Mmax == 0 or N == 0:
        return False
    if K != 0 and _v.on_cuda(d):
        _v.require_gpu_validated(fn, "m_grouped_bf16")
        return True
    keep = (torch.arange(Mmax, device=d.device)[None, :] < masked_m.to(torch.int64)[:, None]).unsqueeze(-1)
    if K == 0:
        d.copy_(d.masked_fill(keep, 0))
        return False
    out = reference.m_grouped_bf16_gemm_nt_masked(a, b, masked_m, out_dtype=d.dtype)
    d.copy_(torch.where(keep, out, d))
    return False


def k_grouped_bf16_gemm_tn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    ks: Sequence[int],
    ks_tensor: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    compiled_dims: str = "mn",
) -> None:
    """K-grouped BF16 GEMM (MoE weight gradient): D_g = C_g + A_g.T @ B_g, A_g/B_g the k_g rows of group g.

    Args:
        a: ``bfloat16`` [sum(ks), M] (M contiguous); b: ``bfloat16`` [sum(ks), N].
        d: ``float32`` [G, M, N], written in place.
        ks: list of G Python ints, each >= 0 and a multiple of 128.
        ks_tensor: ``int32`` [G] equal to ks (compared on CPU tensors only).
        c: optional ``float32`` [G, M, N] accumulated (may be d itself).
        compiled_dims: kernel specialization hint.

    Constraints: TMA layout rules for a, b (so M % 8 == 0 and N % 8 == 0 for contiguous
    operands), d and c; one device; d must not overlap the inputs nor itself. M == 0, N == 0 or G == 0
    returns at once after validation.
    Devices: CPU runs ``finegemm.reference``; CUDA runs the SM90 BF16 kernel's k-grouped kind in ONE
    persistent launch for G <= 256 (ceil(G / 256) launches above): all groups' tiles, empty groups
    included (d[g] = c[g] or zeros). The per-group K sizes come from ``ks`` (Python ints), packed
    by the host launcher into the kernel's parameters: no device copy, no host sync, CUDA-graph
    capturable (a replay uses the ks of the capture); ``ks_tensor`` is not read on CUDA.
    """
    fn = "k_grouped_bf16_gemm_tn_contiguous"
    a = _v.check_tensor(fn, "a", a)
    b = _v.check_tensor(fn, "b", b)
    d = _v.check_tensor(fn, "d", d)
    ks_tensor = _v.check_tensor(fn, "ks_tensor", ks_tensor)
    c = _v.check_optional_tensor(fn, "c", c)
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_dtype(fn, "a", a, (_BF16,))
    _v.check_dtype(fn, "b", b, (_BF16,))
    _v.check_dtype(fn, "d", d, (torch.float32,), " (k-grouped GEMMs accumulate weight gradients in fp32)")
    _v.check_out_dtype_with_c(fn, d, c)
    _v.check_rank(fn, "d", d, 3, "[G, M, N]")
    G, M, N = d.shape
    if c is not None:
        _v.check_rank(fn, "c", c, 3, "[G, M, N]")
        _v.check_shape(fn, "c", c, (G, M, N), "[G, M, N]")
    ks_list = _v.check_ks(fn, ks, ks_tensor, G, check_values=ks_tensor.device.type == "cpu")
    sum_k = sum(ks_list)
    _v.check_rank(fn, "a", a, 2, "[sum(ks), M]")
    _v.check_rank(fn, "b", b, 2, "[sum(ks), N]")
    _v.check_shape(fn, "a", a, (sum_k, M), "[sum(ks), M]")
    _v.check_shape(fn, "b", b, (sum_k, N), "[sum(ks), N]")
    _v.check_same_device(fn, {"d": d, "a": a, "b": b, "ks_tensor": ks_tensor, "c": c})
    _v.check_tma_layout(fn, "a", a, "[sum(ks), M]")
    _v.check_tma_layout(fn, "b", b, "[sum(ks), N]")
    _v.check_tma_layout(fn, "d", d, "[G, M, N]")
    if c is not None:
        _v.check_tma_layout(fn, "c", c, "[G, M, N]")
    _v.check_no_overlap(fn, "d", d, {"a": a, "b": b, "ks_tensor": ks_tensor})
    _v.check_c_alias(fn, c, d)

    if G == 0 or M == 0 or N == 0:
        return
    if sum_k == 0:
        write_empty_product(d, c)
        return
    if _v.on_cuda(d):
        _v.require_gpu_validated(fn, "k_grouped_bf16")
        from finegemm.ops import sm90_bf16_gemm

        sm90_bf16_gemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks_list, c)
        return
    d.copy_(reference.k_grouped_bf16_gemm_tn_contiguous(a, b, ks_list, c=c))
