"""Dense FP8 GEMMs with fine-grained scaling: fp8_gemm_nt / _nn / _tn / _tt (DeepGEMM names).

Layout suffix: the first letter describes A, the second B, as in BLAS ("n" = as stored,
"t" = transposed); the product is always D [M, N] = C + op(A) @ op(B) with

======  ===========  ===========  ========================
name    A stored     B stored     D
======  ===========  ===========  ========================
nt      [M, K]       [N, K]       C + A @ B.T
nn      [M, K]       [K, N]       C + A @ B
tn      [K, M]       [K, N]       C + A.T @ B
tt      [K, M]       [N, K]       C + A.T @ B.T
======  ===========  ===========  ========================

Scales follow their operand (one fp32 per 128 K values of each row/column of the stored tensor):

* sfa: [M, ceil(K/128)] for A [M, K]; [ceil(K/128), M] for A [K, M].
* sfb, recipe (1, 128, 128) (the default, weights): one per 128x128 block:
  [ceil(N/128), ceil(K/128)] for B [N, K]; [ceil(K/128), ceil(N/128)] for B [K, N].
* sfb, recipe (1, 1, 128) (weight gradients): per row of B, like sfa:
  [N, ceil(K/128)] for B [N, K]; [ceil(K/128), N] for B [K, N]. D must be fp32.

D[m, n] = C[m, n] + sum_kb sfa[m, kb] * sfb[., kb] * sum_{k in kb} A[m, k] * B[n, k].
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm import reference, runtime
from finegemm.api import _validate as _v
from finegemm.utils import ceil_div, write_empty_product

__all__ = ["fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt"]

_FP8_OUT_DTYPES = (torch.bfloat16, torch.float32)


def _not_built(fn: str, capability: str, issue: str) -> NotImplementedError:
    return NotImplementedError(
        f"{fn}: the SM90 CUDA kernel for {capability} is not built yet (tracked in issue {issue}); "
        f"CPU tensors run the exact reference"
    )


# ---- host fast path -------------------------------------------------------------------------
# Validation in Python costs ~10 us per call, more than the kernel of a decode-sized GEMM. A call
# whose every tensor has the same address, shape, strides and dtype as an earlier call that
# passed validation passes it again (the rules read nothing else), so its prepared launch is
# reused: key building + one dict lookup + one short ctypes call. Devices need no entry per
# tensor: with CUDA's unified virtual addressing an address belongs to one device (or to host
# memory) for the whole process, so equal addresses mean equal devices (and only calls whose d is
# on a GPU get a key at all).
_validated_calls: dict = {}
_MAX_VALIDATED_CALLS = 4096


def fp8_call_key(a, b, d, c, recipe, x, y) -> Optional[tuple]:
    """Signature of a CUDA call for the fast path, or None (CPU tensors, odd argument types): each
    tensor's address, shape, strides and dtype (what the validation rules read: _validate.tensor_key,
    the C signature's bytes, or for tensor subclasses one flat tuple).
    a = (A, sfa), b = (B, sfb), d, optional c, the recipe and two more arguments x, y with their
    types: fp8_gemm_nt's compiled_dims and disable_ue8m0_cast, fp8_einsum's expr (and
    None). Each function keeps its own dict of keys."""
    try:
        if type(a) is not tuple or type(b) is not tuple or len(a) != 2 or len(b) != 2:
            return None
        if not _v.on_cuda(d):
            return None
        A, sfa = a
        B, sfb = b
        # typed: an argument the checks reject must not match a validated one by equality (True == 1)
        rest = (None if recipe is None else (type(recipe),) + tuple([(type(v), v) for v in recipe]),
                type(x), x, type(y), y, runtime.get_num_sms_setting())
        # _validate.tensor_key, inline on the hot path (a call costs ~0.1 us): the C signature, else
        # the Python key. c last when given: with and without it the keys differ in length.
        signature = _v._signature_fn or _v.signature_fn()
        sig = signature(A, sfa, B, sfb, d) if c is None else signature(A, sfa, B, sfb, d, c)
        if sig is not None:
            return (sig,) + rest
        return _v.python_tensor_key((A, sfa, B, sfb, d) if c is None else (A, sfa, B, sfb, d, c)) + rest
    except Exception:  # anything unusual takes the validating path, which raises the right error
        return None


def _remember(key: tuple, call) -> None:
    _v.keep_bounded(_validated_calls, key, call, _MAX_VALIDATED_CALLS)


# The second level (fp8_gemm_nt): validated calls by their tensors' layout, for a call whose
# tensors moved (_validate.MovedCalls). Tensors (A, sfa, B, sfb, d[, c]); the prepared launch's
# head points at (A, B, sfa, sfb, d, c); d must not meet A, sfa, B or sfb (nor c, unless c is d).
_moved_calls = _v.MovedCalls(slots=(0, 2, 1, 3, 4, 5), output=4, inputs=(0, 1, 2, 3), c_index=5)


def _moved_key(a, b, d, c, key: tuple) -> Optional[tuple]:
    """The second level's key of a call whose first-level key is `key` (None where that key is
    not the C signature's, e.g. a tensor subclass)."""
    if type(key[0]) is not bytes:
        return None
    tensors = (a[0], a[1], b[0], b[1], d) if c is None else (a[0], a[1], b[0], b[1], d, c)
    return _v.MovedCalls.key(tensors, key[1:], c is d)


def _fp8_gemm(
    fn: str,
    layout: str,
    a: object,
    b: object,
    d: object,
    c: object,
    recipe: object,
    compiled_dims: object,
    disable_ue8m0_cast: object,
    fast_key: Optional[tuple] = None,
    moved_key: Optional[tuple] = None,
) -> None:
    a_mk = layout[0] == "n"  # A stored [M, K] (K-major) else [K, M]
    b_nk = layout[1] == "t"  # B stored [N, K] (K-major) else [K, N]
    A, sfa, B, sfb, d, c, rec, M, N, K = checked_arguments(fn, layout, a, b, d, c, recipe, compiled_dims,
                                                           disable_ue8m0_cast)

    # ---- trivial problems (no kernel needed)
    if M == 0 or N == 0:
        return
    if K == 0:
        write_empty_product(d, c)
        return
    _run(fn, A, sfa, B, sfb, d, c, rec, a_mk, b_nk, fast_key, moved_key)


def checked_arguments(fn: str, layout: str, a: object, b: object, d: object, c: object, recipe: object,
                      compiled_dims: object, disable_ue8m0_cast: object) -> tuple:
    """Every rule of a dense FP8 call (raises what is broken); returns (A, sfa, B, sfb, d, c,
    recipe, M, N, K)."""
    a_mk = layout[0] == "n"
    b_nk = layout[1] == "t"
    # ---- Python-level types
    A, sfa = _v.check_pair(fn, "a", a, ("A", "sfa"))
    B, sfb = _v.check_pair(fn, "b", b, ("B", "sfb"))
    d = _v.check_tensor(fn, "d", d)
    c = _v.check_optional_tensor(fn, "c", c)
    rec = _v.normalize_recipe(fn, recipe, (_v.RECIPE_1D2D, _v.RECIPE_1D1D), _v.RECIPE_1D2D)
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_bool(fn, "disable_ue8m0_cast", disable_ue8m0_cast)

    # ---- dtypes
    _v.check_dtype(fn, "a[0] (A)", A, (_v.FP8,))
    _v.check_dtype(fn, "b[0] (B)", B, (_v.FP8,))
    _v.check_dtype(fn, "a[1] (sfa)", sfa, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(fn, "b[1] (sfb)", sfb, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(fn, "d", d, _FP8_OUT_DTYPES)
    if rec == _v.RECIPE_1D1D and d.dtype != torch.float32:
        raise TypeError(f"{fn}: d must be torch.float32 with recipe (1, 1, 128) (weight-gradient GEMM), got {d.dtype}")
    _v.check_out_dtype_with_c(fn, d, c)

    # ---- ranks and shapes
    _v.check_rank(fn, "a[1] (sfa)", sfa, 2, "(scales of A)")
    _v.check_rank(fn, "b[1] (sfb)", sfb, 2, "(scales of B)")
    M, N, K = _v.check_gemm_shapes(fn, "a[0] (A)", A, "b[0] (B)", B, d, c, a_mk, b_nk)
    kb = ceil_div(K, 128)
    if a_mk:
        _v.check_shape(fn, "a[1] (sfa)", sfa, (M, kb), "[M, ceil(K/128)] for A [M, K]")
    else:
        _v.check_shape(fn, "a[1] (sfa)", sfa, (kb, M), "[ceil(K/128), M] for A [K, M]")
    if rec == _v.RECIPE_1D2D:
        nb, nb_sym = ceil_div(N, 128), "ceil(N/128)"
    else:
        nb, nb_sym = N, "N"
    if b_nk:
        _v.check_shape(fn, "b[1] (sfb)", sfb, (nb, kb), lambda: f"[{nb_sym}, ceil(K/128)] for B [N, K] with recipe {rec}")
    else:
        _v.check_shape(fn, "b[1] (sfb)", sfb, (kb, nb), lambda: f"[ceil(K/128), {nb_sym}] for B [K, N] with recipe {rec}")

    # ---- device, alignment and memory layout
    _v.check_same_device(fn, {"d": d, "a[0] (A)": A, "a[1] (sfa)": sfa, "b[0] (B)": B, "b[1] (sfb)": sfb, "c": c})
    _v.check_k_alignment(fn, K, 1, "FP8")
    _v.check_tma_layout(fn, "a[0] (A)", A, "(stored [M, K])" if a_mk else "(stored [K, M])")
    _v.check_tma_layout(fn, "b[0] (B)", B, "(stored [N, K])" if b_nk else "(stored [K, N])")
    _v.check_tma_layout(fn, "d", d, "[M, N]")
    if c is not None:
        _v.check_tma_layout(fn, "c", c, "[M, N]")
    _v.check_no_overlap(fn, "d", d, {"a[0] (A)": A, "b[0] (B)": B, "a[1] (sfa)": sfa, "b[1] (sfb)": sfb})
    _v.check_c_alias(fn, c, d)
    return A, sfa, B, sfb, d, c, rec, M, N, K


def _run(fn: str, A, sfa, B, sfb, d, c, rec, a_mk: bool, b_nk: bool, fast_key: Optional[tuple],
         moved_key: Optional[tuple] = None) -> None:
    """A validated call with M, N, K > 0: the SM90 kernel (CUDA) or the exact reference (CPU)."""
    # ---- canonical NT views (transposed views, never copies)
    A_nt = A if a_mk else A.t()
    sfa_nt = sfa if a_mk else sfa.t()
    B_nt = B if b_nk else B.t()
    sfb_nt = sfb if b_nk else sfb.t()

    if _v.on_cuda(d):
        # Both recipes run the SM90 kernel family; (1, 1, 128) takes sfb [N, ceil(K/128)] (sfb_nt).
        if rec != _v.RECIPE_1D2D:
            _v.require_gpu_validated(fn, "fp8_1d1d")
        from finegemm.ops import sm90_fp8_gemm  # lazy: the CUDA stack is only needed for CUDA tensors

        # The SM90 kernel takes K-major operands: materialize K-major copies of MN-major inputs,
        # with finegemm's transpose kernel (PyTorch's copy of a transposed one-byte view runs at
        # ~0.15-0.4 TB/s, this ~4; NOTES v0.84 / v0.87).
        a_copy, b_copy = not a_mk and not A_nt.is_contiguous(), not b_nk and not B_nt.is_contiguous()
        if a_copy or b_copy:  # A stored [K, M] -> [M, K], B stored [K, N] -> [N, K]: one launch
            from finegemm.ops.k_major_copy import k_major_transposes

            copied = iter(k_major_transposes([t.unsqueeze(0) for t, copy in ((A, a_copy), (B, b_copy)) if copy]))
            A_nt = next(copied)[0] if a_copy else A_nt
            B_nt = next(copied)[0] if b_copy else B_nt
        call = sm90_fp8_gemm.prepare(A_nt, sfa_nt, B_nt, sfb_nt, d, c, rec)
        if call is None:
            return
        if fast_key is not None and a_mk and b_nk and call.cacheable:
            _remember(fast_key, call)
            _moved_calls.learn(moved_key, (A, sfa, B, sfb, d) if c is None else (A, sfa, B, sfb, d, c), call)
        call()
        return

    out = reference.fp8_gemm_nt(A_nt, sfa_nt, B_nt, sfb_nt, c=c, out_dtype=d.dtype, recipe=rec)
    d.copy_(out)


_COMMON_DOC = """
    Args:
        a: ``(A, sfa)``: A ``torch.float8_e4m3fn`` {a_shape}; sfa ``torch.float32`` {sfa_shape}
            (one scale per row of the product and 128-wide K block; any strides).
        b: ``(B, sfb)``: B ``torch.float8_e4m3fn`` {b_shape}; sfb ``torch.float32``
            {sfb_128} with recipe (1, 128, 128) (default), or {sfb_1} with recipe (1, 1, 128).
        d: output ``torch.bfloat16`` or ``torch.float32`` [M, N], written in place.
        c: optional ``torch.float32`` [M, N] accumulated into d (D = C + ...). Rule: c is only
            allowed with an fp32 d. c may be d itself (in-place accumulation) but must not
            otherwise overlap d.
        recipe: None (= (1, 128, 128)), (1, 128, 128) or (1, 1, 128); the latter needs fp32 d.
        compiled_dims: which of "m", "n", "k" the kernel may specialize on (compatibility hint;
            validated: distinct letters of "mnk").
        disable_ue8m0_cast: accepted for compatibility (bool); SM90 scales are fp32, no effect.

    Constraints (TypeError for types/dtypes, ValueError for shapes/strides/values):
        * K % 16 == 0 (16 bytes of FP8; TMA rule). M, N are free (edge tiles are masked).
        * A, B and d (and c) have a contiguous last dimension, every other stride a multiple of
          16 bytes (TMA needs a 16-byte row pitch: e.g. a contiguous bf16 d needs N % 8 == 0; pad
          and pass a view otherwise) and a 16-byte aligned base address. For a stored [K, M] or
          [K, N] operand this means M (resp. N) rows padded to 16 bytes.
        * All tensors on the same device; d must not overlap A, B or the scales, nor itself
          (no two elements at one address, e.g. an expanded view).
        * M == 0 or N == 0 returns at once (after validation); K == 0 writes d = c (or zeros).

    Devices: CPU tensors run ``finegemm.reference.fp8_gemm_nt`` (exact, fp64 accumulation) on
    transposed views. CUDA tensors run the SM90 kernel, both recipes (non-NT layouts are first
    copied to K-major; with recipe (1, 1, 128) sfb is converted to the MN-major TMA-aligned layout
    like sfa, a no-op when it already has it, e.g. [ceil(K/128), N] with N % 4 == 0 for B [K, N]).

    Returns:
        None (d is written).
"""


def fp8_gemm_nt(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None:
    key = fp8_call_key(a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast)
    moved = None
    if key is not None:
        try:
            call = _validated_calls.get(key)
        except TypeError:  # an unhashable argument (e.g. a list recipe): validate
            call = key = None
        if call is not None:
            call()
            return
        if key is not None:  # a seen layout at new addresses: its launch re-pointed
            moved = _moved_key(a, b, d, c, key)
            call = _moved_calls.launch_for(moved)
            if call is not None:
                _remember(key, call)
                call()
                return
    _fp8_gemm("fp8_gemm_nt", "nt", a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast, key, moved)


def fp8_gemm_nn(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None:
    _fp8_gemm("fp8_gemm_nn", "nn", a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast)


def fp8_gemm_tn(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "mn",
    disable_ue8m0_cast: bool = False,
) -> None:
    _fp8_gemm("fp8_gemm_tn", "tn", a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast)


def fp8_gemm_tt(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "mn",
    disable_ue8m0_cast: bool = False,
) -> None:
    _fp8_gemm("fp8_gemm_tt", "tt", a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast)


fp8_gemm_nt.__doc__ = "FP8 GEMM D = C + A @ B.T (A [M, K], B [N, K]; both K-major).\n" + _COMMON_DOC.format(
    a_shape="[M, K]", sfa_shape="[M, ceil(K/128)]", b_shape="[N, K]",
    sfb_128="[ceil(N/128), ceil(K/128)]", sfb_1="[N, ceil(K/128)]",
)
fp8_gemm_nn.__doc__ = "FP8 GEMM D = C + A @ B (A [M, K], B [K, N]).\n" + _COMMON_DOC.format(
    a_shape="[M, K]", sfa_shape="[M, ceil(K/128)]", b_shape="[K, N]",
    sfb_128="[ceil(K/128), ceil(N/128)]", sfb_1="[ceil(K/128), N]",
)
fp8_gemm_tn.__doc__ = "FP8 GEMM D = C + A.T @ B (A [K, M], B [K, N]; weight-gradient layout).\n" + _COMMON_DOC.format(
    a_shape="[K, M]", sfa_shape="[ceil(K/128), M]", b_shape="[K, N]",
    sfb_128="[ceil(K/128), ceil(N/128)]", sfb_1="[ceil(K/128), N]",
)
fp8_gemm_tt.__doc__ = "FP8 GEMM D = C + A.T @ B.T (A [K, M], B [N, K]).\n" + _COMMON_DOC.format(
    a_shape="[K, M]", sfa_shape="[ceil(K/128), M]", b_shape="[N, K]",
    sfb_128="[ceil(N/128), ceil(K/128)]", sfb_1="[N, ceil(K/128)]",
)
