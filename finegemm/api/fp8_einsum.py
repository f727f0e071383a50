"""fp8_einsum (DeepGEMM name): the FP8 batched product of DeepSeek's MLA layers.

On SM90 DeepGEMM runs one expression, and so does this:

=================  =========================================  ===========================================
expr               a = (A, sfa), b = (B, sfb)                 d (= c + the product)
=================  =========================================  ===========================================
bhr,hdr->bhd       A [b, h, r] fp8, sfa [b, h, ceil(r/128)]   [b, h, d]: per head h, a[:, h] @ b[h].T
                   B [h, d, r] fp8, sfb [h, ceil(d/128),      (bf16, or fp32 with an optional fp32 c)
                   ceil(r/128)]
=================  =========================================  ===========================================

Scales follow recipe (1, 128, 128) (the only one on SM90): one per row of A and 128-wide r block,
one per 128x128 block of each head's B. The other two expressions of DeepGEMM's fp8_einsum
(bhd,hdr->bhr and bhd,bhr->hdr) are SM100-only there and raise NotImplementedError here.

How it runs:
- CUDA, r % 128 == 0, A and d (and c: d's strides) with the heads side by side in each row (as
  [b, h, r] / [b, h, d] tensors are stored): one launch of the masked FP8 kernel built with
  kHeadsPacked, the heads as groups, reading A as [b, h*r], sfa [b, h, r/128] at its strides
  (kSfaGather) and writing d as [b, h*d] in place (no copies; bf16 d, or fp32 d with or without
  c; a bf16 d through TMA where d is a multiple of the tile's width); a seen call re-launches its
  prepared launch. FINEGEMM_DISABLE_PATHS=fp8_einsum_tma_store stores d directly instead,
  =fp8_einsum_sfa_in_place falls back to the same kernel reading an MN-major copy of sfa made per
  call (one-shot, direct stores), and =fp8_einsum_heads_packed to the composition below (for
  calls planned after it is set: a seen call keeps its launch). On an H100 (MLA h = 128, r = 512,
  d = 128): 7.5 / 8.1 / 163 us at b = 1 / 64 / 4096, 7.5-8.5 us of host time per seen call
  (benchmarks/NOTES.md v1.03 on the GPU).
Otherwise the same composition on CPU and CUDA tensors, through the public functions (so the CPU
tests run the routing the GPU takes):
- bf16 d: one m_grouped_fp8_gemm_nt_masked call with the heads as groups (every group full:
  masked_m = b for all h). The SM90 kernel reads A as [h * b, r] rows, so A is first copied
  head-major (b * h * r bytes; none where A is stored head-major) and the product written
  head-major: into d where d is stored so, else into a scratch [h, b, d] then copied into d
  (b * h * d * 2 bytes): up to two copies around one GEMM launch.
- fp32 d (c optional): the masked kernel writes bf16 only, so each head is one fp8_gemm_nt call on
  strided views (no copies; c may be d): h launches, i.e. host time grows with h (~10 us each).
CPU tensors end in finegemm.reference (exact, fp64 accumulation) through those functions.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm.api import _validate as _v
from finegemm.api.dense_fp8 import fp8_call_key, fp8_gemm_nt
from finegemm.api.grouped_fp8 import m_grouped_fp8_gemm_nt_masked
from finegemm.utils import ceil_div, write_empty_product

__all__ = ["fp8_einsum", "SUPPORTED_FP8_EXPRESSIONS"]

_FN = "fp8_einsum"
SUPPORTED_FP8_EXPRESSIONS = ("bhr,hdr->bhd",)
_SM100_ONLY = ("bhd,hdr->bhr", "bhd,bhr->hdr")  # DeepGEMM's other two: not on SM90 there either
HEADS_PACKED = "fp8_einsum_heads_packed"  # the capability of the in-place kernel (api/_validate.py)
SFA_IN_PLACE = "fp8_einsum_sfa_in_place"  # that kernel gathering sfa in place, prepared per seen call
TMA_STORE = "fp8_einsum_tma_store"  # that kernel storing a bf16 d through TMA (where no box crosses a head)


def fp8_einsum(expr: str, a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
               d: torch.Tensor, c: Optional[torch.Tensor] = None, recipe: Optional[Sequence[int]] = None) -> None:
    """d = c + einsum(expr, A * sfa, B * sfb) for expr "bhr,hdr->bhd" (see the module docstring).

    Args:
        expr: "bhr,hdr->bhd".
        a: ``(A, sfa)``: A ``float8_e4m3fn`` [b, h, r]; sfa ``float32`` [b, h, ceil(r/128)] (any strides).
        b: ``(B, sfb)``: B ``float8_e4m3fn`` [h, d, r]; sfb ``float32`` [h, ceil(d/128), ceil(r/128)]
            (any strides).
        d: ``bfloat16`` or ``float32`` [b, h, d], written in place.
        c: optional ``float32`` [b, h, d] added (fp32 d only); may be d itself.
        recipe: None or (1, 128, 128).

    Constraints (TypeError for types/dtypes, ValueError for shapes/strides/values): r % 16 == 0;
    A, B, d and c with a contiguous last dimension, every other stride a multiple of 16 bytes and
    a 16-byte aligned base (TMA rules, as every FP8 function here); with a bf16 d, d % 8 == 0
    (the scratch [h, b, d] rows are TMA rows of 16 bytes); one device; d must not overlap the
    inputs nor itself. b, h or d == 0 returns at once after validation; r == 0 writes d = c (or 0).
    """
    # Host fast path (as the grouped calls'): a CUDA call whose tensors' addresses, shapes,
    # strides and dtypes and whose other arguments were validated before skips the checks, and a
    # seen call with a prepared launch re-launches it at once: its route was chosen when the call
    # was first planned (FINEGEMM_DISABLE_PATHS is read then, as for every kept call).
    key = fp8_call_key(a, b, d, c, recipe, expr, None)  # flat and inline: ~1 us less than ValidatedCalls.key
    kept = _validated.launch(key, _validate_and_run_cpu, expr, a, b, d, c, recipe,
                             tensors=lambda: _tensors(a, b, d, c))
    if kept and not _v.ran_kept(kept):
        _run(a[0], a[1], b[0], b[1], d, c, key, kept)


# The second level (as fp8_gemm_nt's): a call whose tensors moved but keep a validated call's
# layout re-points that call's prepared heads-packed launch (its route, sfa in place, is decided
# by strides and dtypes alone). Tensors (A, sfa, B, sfb, d[, c]); the launch points at (A, B, sfa,
# sfb, d, c); d must not meet A, sfa, B or sfb (nor c, unless c is d).
_validated = _v.ValidatedCalls(moved=_v.MovedCalls(slots=(0, 2, 1, 3, 4, 5), output=4, inputs=(0, 1, 2, 3), c_index=5,
                                                   switch="einsum_moved_calls"), signature_at=0)


def _tensors(a, b, d, c) -> tuple:
    return (a[0], a[1], b[0], b[1], d) if c is None else (a[0], a[1], b[0], b[1], d, c)


def _validate_and_run_cpu(expr, a, b, d, c, recipe) -> bool:
    """Every argument check; runs the CPU calls and the empty or r = 0 products itself (False),
    True for a CUDA call _run is to launch."""
    A, sfa, B, sfb, d, c = _checked(expr, a, b, d, c, recipe)
    batch, heads, r = A.shape
    n = B.shape[1]
    if batch == 0 or heads == 0 or n == 0:
        return False
    if r == 0:
        write_empty_product(d, c)
        return False
    if _v.on_cuda(d):
        return True
    _run(A, sfa, B, sfb, d, c)
    return False


def _run(A, sfa, B, sfb, d, c, key=None, kept=True) -> None:
    """A validated call with b, h, d, r > 0 (the routes of the module docstring). key, kept: the
    fast path's (a CUDA call's kept prepared launch, when it has one)."""
    batch, heads, r = A.shape
    n = B.shape[1]
    if _v.on_cuda(d) and _v.gpu_validated(HEADS_PACKED):
        from finegemm.ops import sm90_fp8_gemm  # lazy: the CUDA stack is only needed for CUDA tensors

        if sm90_fp8_gemm.heads_packed_layouts(A, d, c):  # in place: A [b, h*r], d (and c) [b, h*d] row by row
            if not _v.gpu_validated(SFA_IN_PLACE):
                sm90_fp8_gemm.fp8_einsum_heads_packed(A, sfa, B, sfb, d, c)  # sfa through an MN-major copy
            # sfa read in place too: a seen call re-launches its prepared launch.
            else:
                tma = _v.gpu_validated(TMA_STORE)
                if not _validated.run_kept(key, kept, lambda _: _v.run_prepared_launch(
                        sm90_fp8_gemm.prepare_fp8_einsum_heads_packed(A, sfa, B, sfb, d, c, tma_store=tma)),
                        lambda: (A, sfa, B, sfb, d) if c is None else (A, sfa, B, sfb, d, c)):
                    sm90_fp8_gemm.fp8_einsum_heads_packed(A, sfa, B, sfb, d, c, sfa_gather=True, tma_store=tma)
            return
    if d.dtype == torch.bfloat16:
        # The heads as the masked kernel's groups, every group full. The kernel writes D as
        # [h * b, d] rows: d itself where it is stored head-major, else a head-major scratch.
        out = d.permute(1, 0, 2)
        if not _rows_view_exists(out):
            out = torch.empty((heads, batch, n), dtype=torch.bfloat16, device=d.device)
        m_grouped_fp8_gemm_nt_masked((A.permute(1, 0, 2), sfa.permute(1, 0, 2)), (B, sfb), out,
                                     _full_groups(heads, batch, d.device), batch)
        if out.data_ptr() != d.data_ptr():
            d.copy_(out.permute(1, 0, 2))
        return
    for head in range(heads):
        fp8_gemm_nt((A[:, head], sfa[:, head]), (B[head], sfb[head]), d[:, head],
                    c=None if c is None else c[:, head])


def _checked(expr, a, b, d, c, recipe) -> tuple:
    """Every rule of a call (raises what is broken); returns (A, sfa, B, sfb, d, c)."""
    if not isinstance(expr, str):
        raise TypeError(f"{_FN}: expr must be a str, got {type(expr).__name__}")
    if expr in _SM100_ONLY:
        raise NotImplementedError(
            f"{_FN}: expr {expr!r} is not provided: DeepGEMM runs it on SM100 only; on SM90 (finegemm) "
            f"fp8_einsum takes {', '.join(SUPPORTED_FP8_EXPRESSIONS)} (finegemm.einsum has all four in BF16)")
    if expr not in SUPPORTED_FP8_EXPRESSIONS:
        raise ValueError(f"{_FN}: expr must be one of {', '.join(SUPPORTED_FP8_EXPRESSIONS)}, got {expr!r}")
    A, sfa = _v.check_pair(_FN, "a", a, ("A", "sfa"))
    B, sfb = _v.check_pair(_FN, "b", b, ("B", "sfb"))
    d = _v.check_tensor(_FN, "d", d)
    c = _v.check_optional_tensor(_FN, "c", c)
    rec = _v.normalize_recipe(_FN, recipe, (_v.RECIPE_1D2D,), _v.RECIPE_1D2D)
    del rec  # one recipe on SM90

    _v.check_dtype(_FN, "a[0] (A)", A, (_v.FP8,))
    _v.check_dtype(_FN, "b[0] (B)", B, (_v.FP8,))
    _v.check_dtype(_FN, "a[1] (sfa)", sfa, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(_FN, "b[1] (sfb)", sfb, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(_FN, "d", d, (torch.bfloat16, torch.float32))
    _v.check_out_dtype_with_c(_FN, d, c)

    _v.check_rank(_FN, "a[0] (A)", A, 3, "[b, h, r]")
    _v.check_rank(_FN, "b[0] (B)", B, 3, "[h, d, r]")
    batch, heads, r = A.shape
    heads_b, n, r_b = B.shape
    if heads_b != heads or r_b != r:
        raise ValueError(f"{_FN}: dimensions 'h' and 'r' of a[0] (A [b, h, r] = {_v.fmt_shape(A.shape)}) and "
                         f"b[0] (B [h, d, r] = {_v.fmt_shape(B.shape)}) must agree")
    kb = ceil_div(r, 128)
    _v.check_rank(_FN, "a[1] (sfa)", sfa, 3, "[b, h, ceil(r/128)]")
    _v.check_shape(_FN, "a[1] (sfa)", sfa, (batch, heads, kb), "[b, h, ceil(r/128)]")
    _v.check_rank(_FN, "b[1] (sfb)", sfb, 3, "[h, ceil(d/128), ceil(r/128)]")
    _v.check_shape(_FN, "b[1] (sfb)", sfb, (heads, ceil_div(n, 128), kb), "[h, ceil(d/128), ceil(r/128)]")
    _v.check_rank(_FN, "d", d, 3, "[b, h, d]")
    _v.check_shape(_FN, "d", d, (batch, heads, n), "[b, h, d]")
    if c is not None:
        _v.check_rank(_FN, "c", c, 3, "[b, h, d]")
        _v.check_shape(_FN, "c", c, (batch, heads, n), "[b, h, d]")

    _v.check_same_device(_FN, {"d": d, "a[0] (A)": A, "a[1] (sfa)": sfa, "b[0] (B)": B, "b[1] (sfb)": sfb,
                               "c": c})
    _v.check_k_alignment(_FN, r, 1, "FP8")
    _v.check_tma_layout(_FN, "a[0] (A)", A, "[b, h, r]")
    _v.check_tma_layout(_FN, "b[0] (B)", B, "[h, d, r]")
    _v.check_tma_layout(_FN, "d", d, "[b, h, d]")
    if c is not None:
        _v.check_tma_layout(_FN, "c", c, "[b, h, d]")
    if d.dtype == torch.bfloat16 and n % 8 != 0:
        raise ValueError(f"{_FN}: the head dimension d must be a multiple of 8 with a bf16 d (the product is "
                         f"written through a scratch [h, b, d] of 16-byte TMA rows), got d = {n}")
    _v.check_no_overlap(_FN, "d", d, {"a[0] (A)": A, "b[0] (B)": B, "a[1] (sfa)": sfa, "b[1] (sfb)": sfb})
    _v.check_c_alias(_FN, c, d)
    return A, sfa, B, sfb, d, c


def _rows_view_exists(t: torch.Tensor) -> bool:
    """Whether [G, R, N] t has the [G * R, N] view the masked kernel writes through."""
    try:
        t.view(-1, t.shape[-1])
    except RuntimeError:
        return False
    return True


def _full_groups(heads: int, batch: int, device: torch.device) -> torch.Tensor:
    """masked_m of the bf16 composition: every head's group full. On CUDA the heads-packed
    launch's kept buffer (values the kernel clamps to b: no fill per call); on CPU, where the
    values are checked, b itself."""
    if device.type == "cuda":
        from finegemm.ops import sm90_fp8_gemm

        return sm90_fp8_gemm.all_rows(heads, device)[:heads]
    return torch.full((heads,), batch, dtype=torch.int32, device=device)
