"""fp8_gemm_nt_skip_head_mid (DeepGEMM name): the dense FP8 GEMM written into a head-packed output
that leaves a gap in every head.

B's N rows are heads of (left + right) rows each; d holds each head as (left + mid + right)
columns, and the GEMM's columns of a head go to its first `left` and last `right` columns. The
`mid` columns in between are never written: the caller fills them (e.g. DeepSeek's MLA writes the
rotary part of each head there). Column n = h * (left + right) + j of A @ B.T lands in
d[:, h * (left + mid + right) + j + (mid if j >= left else 0)].

How it runs:
- mid == 0: d is the plain product, one fp8_gemm_nt call into it.
- CUDA, fused (kernel capability "fp8_skip_head_mid_fused"): the dense SM90 kernel built with the
  head splits writes d directly; its TMA-store epilogue places each store box around the gap
  (epilogue/tma_store_bf16.cuh). It applies where the shape's plan is a bf16 TMA-store tile without
  split-K whose store box (16-64 columns) divides left and right, and d takes TMA stores (16-byte
  base and row pitch). Validated on the H200 (tests/gpu/test_deepgemm_extras_gpu.py); the gate
  (api/_validate.UNVALIDATED_ON_GPU) is still asked, so that re-listing it restores the path below.
- Otherwise (CPU, fp32 d, other plans): the GEMM writes a scratch [M, N] (the dense fp8_gemm_nt
  path) and one strided copy per side moves it into d: a write and a read of M x N outputs and two
  copy launches beyond the GEMM. The scratch comes from PyTorch's caching allocator, so a call can
  be captured in a CUDA graph.
A call whose tensors keep their addresses, shapes and strides skips the argument checks and
reuses its fused launch (the host fast path of the other functions).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm.api import _validate as _v
from finegemm.api.dense_fp8 import checked_arguments, fp8_gemm_nt
from finegemm.utils import align

__all__ = ["fp8_gemm_nt_skip_head_mid"]

_FN = "fp8_gemm_nt_skip_head_mid"


def _check_head_splits(head_splits: object) -> tuple[int, int, int]:
    if not isinstance(head_splits, (tuple, list)) or len(head_splits) != 3:
        raise TypeError(f"{_FN}: head_splits must be a 3-tuple of ints (left, mid, right), got {head_splits!r}")
    left, mid, right = (_v.check_int(_FN, f"head_splits[{i}]", v, 0) for i, v in enumerate(head_splits))
    if left + right == 0:
        raise ValueError(f"{_FN}: head_splits must have left + right > 0 (the GEMM's columns of a head), "
                         f"got {tuple(head_splits)}")
    return left, mid, right


def fp8_gemm_nt_skip_head_mid(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    head_splits: Sequence[int],
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None:
    """D = A @ B.T (recipe (1, 128, 128)) written around a gap of `mid` columns in every head.

    Args:
        a: ``(A, sfa)`` as for ``fp8_gemm_nt``: A ``float8_e4m3fn`` [M, K], sfa fp32 [M, ceil(K/128)].
        b: ``(B, sfb)``: B ``float8_e4m3fn`` [N, K], sfb fp32 [ceil(N/128), ceil(K/128)].
        d: ``bfloat16`` or ``float32`` [M, N + (N / (left + right)) * mid]; its `mid` columns of
            each head are left as they are.
        head_splits: ``(left, mid, right)``, non-negative ints, left + right > 0 dividing N.
        recipe, compiled_dims, disable_ue8m0_cast: as for ``fp8_gemm_nt`` (recipe (1, 128, 128) only).

    Constraints: those of ``fp8_gemm_nt`` for A, B and the scales; d with the TMA layout rules
    (contiguous last dimension, 16-byte strides and base), on A's device, not overlapping the
    inputs nor itself.
    """
    key = _validated.key(_FN, d, lambda: (a[0], a[1], b[0], b[1], d),
                         (head_splits, recipe, compiled_dims, disable_ue8m0_cast))
    kept = _validated.launch(key, _validate, a, b, d, head_splits, recipe, compiled_dims, disable_ue8m0_cast,
                             tensors=lambda: (a[0], a[1], b[0], b[1], d))
    if not kept or _v.ran_kept(kept):
        return  # CPU, nothing to write, or a seen call's prepared launch: done
    A, sfa, B, sfb = a[0], a[1], b[0], b[1]
    splits = tuple(head_splits)
    if not _validated.run_kept(key, kept, lambda _: _kept_launch(A, sfa, B, sfb, d, splits),
                               lambda: (A, sfa, B, sfb, d)):
        _run(a, b, d, splits, recipe, compiled_dims, disable_ue8m0_cast)


# The host fast path (as the m-grouped calls'): a validated call's key keeps its fused launch, or
# ONE_SHOT where the call takes the scratch path (or a plain GEMM) every time. Its second level
# (as fp8_gemm_nt's): a call whose tensors moved but keep a validated call's layout re-points that
# call's fused launch (whether a call is fused is decided by shapes, strides, dtypes and d's
# alignment). Tensors (A, sfa, B, sfb, d); the launch points at (A, B, sfa, sfb, d, no c); d must
# not meet any input.
_validated = _v.ValidatedCalls(moved=_v.MovedCalls(slots=(0, 2, 1, 3, 4, 5), output=4, inputs=(0, 1, 2, 3), c_index=5,
                                                   switch="skip_head_mid_moved_calls"))


def _validate(a: object, b: object, d: object, head_splits: object, recipe: object, compiled_dims: object,
              disable_ue8m0_cast: object) -> bool:
    """Every argument check; runs CPU calls and calls with nothing to write itself (False), True for
    a CUDA call the caller is to run."""
    A, _ = _v.check_pair(_FN, "a", a, ("A", "sfa"))
    B, _ = _v.check_pair(_FN, "b", b, ("B", "sfb"))
    d = _v.check_tensor(_FN, "d", d)
    left, mid, right = _check_head_splits(head_splits)
    rec = _v.normalize_recipe(_FN, recipe, (_v.RECIPE_1D2D,), _v.RECIPE_1D2D)
    _v.check_rank(_FN, "a[0] (A)", A, 2, "[M, K]")
    _v.check_rank(_FN, "b[0] (B)", B, 2, "[N, K]")
    _v.check_rank(_FN, "d", d, 2, "[M, N + heads * mid]")
    _v.check_dtype(_FN, "d", d, (torch.bfloat16, torch.float32))
    M, N = A.shape[0], B.shape[0]
    if N % (left + right):
        raise ValueError(f"{_FN}: N (rows of b[0] (B)) must be a multiple of left + right = {left + right} "
                         f"(head_splits {(left, mid, right)}), got N = {N}")
    heads = N // (left + right)
    _v.check_shape(_FN, "d", d, (M, N + heads * mid), lambda: f"[M, N + (N / (left + right)) * mid] = "
                   f"[{M}, {N} + {heads} * {mid}]")
    _v.check_same_device(_FN, {"d": d, "a[0] (A)": A, "b[0] (B)": B})
    _v.check_tma_layout(_FN, "d", d, "[M, N + heads * mid]")
    _v.check_no_overlap(_FN, "d", d, {"a[0] (A)": A, "a[1] (sfa)": a[1], "b[0] (B)": B, "b[1] (sfb)": b[1]})
    # The rest of the rules (dtypes, scales, K) are fp8_gemm_nt's, under this name; d's first N
    # columns stand in for its [M, N] output (same dtype, memory and row pitch).
    checked_arguments(_FN, "nt", a, b, d[:, :N], None, rec, compiled_dims, disable_ue8m0_cast)
    if M == 0 or heads == 0:
        return False
    if _v.on_cuda(d):
        return True
    _run(a, b, d, (left, mid, right), rec, compiled_dims, disable_ue8m0_cast)  # CPU: the scratch steps
    return False


def _kept_launch(A, sfa, B, sfb, d, splits: tuple) -> object:
    """run_kept's `prepare` step: the fused launch, run and kept; ONE_SHOT where the call takes
    _run's other paths (kept too: not tried again for this key)."""
    if splits[1] == 0 or A.shape[1] == 0 or not _v.gpu_validated("fp8_skip_head_mid_fused"):
        return _v.ONE_SHOT
    from finegemm.ops import sm90_fp8_gemm

    call = sm90_fp8_gemm.prepare_skip_head_mid(A, sfa, B, sfb, d, splits)
    if call is None or not call.cacheable:  # not cacheable: a scale copy that would go stale
        return _v.ONE_SHOT
    return _v.run_prepared_launch(call)


def _run(a, b, d, splits: tuple, recipe, compiled_dims, disable_ue8m0_cast) -> None:
    """A validated call with something to write, without a kept launch: one plain GEMM into d (mid
    == 0), the fused launch (its capability validated, the plan allows it), else the GEMM into a scratch and a
    strided copy per side (CPU calls take this path too)."""
    left, mid, right = splits
    A, sfa, B, sfb = a[0], a[1], b[0], b[1]
    M, N, K = A.shape[0], B.shape[0], A.shape[1]
    # The dense GEMMs below go through fp8_gemm_nt's own fast path (the arguments were checked
    # under this function's name; a repeated call skips their checks there).
    if mid == 0:  # d is the plain product
        fp8_gemm_nt(a, b, d, recipe=recipe, compiled_dims=compiled_dims, disable_ue8m0_cast=disable_ue8m0_cast)
        return
    if K and _v.on_cuda(d) and _v.gpu_validated("fp8_skip_head_mid_fused"):
        from finegemm.ops import sm90_fp8_gemm

        call = sm90_fp8_gemm.prepare_skip_head_mid(A, sfa, B, sfb, d, splits)
        if call is not None:
            call()
            return
    # The scratch's rows padded to 16 bytes (TMA's row pitch), whatever N is.
    scratch = torch.empty((M, align(N, 16 // d.element_size())), dtype=d.dtype, device=d.device)[:, :N]
    fp8_gemm_nt(a, b, scratch, recipe=recipe, compiled_dims=compiled_dims, disable_ue8m0_cast=disable_ue8m0_cast)
    heads = N // (left + right)
    packed = d.unflatten(1, (heads, left + mid + right))
    product = scratch.unflatten(1, (heads, left + right))
    if left:
        packed[:, :, :left].copy_(product[:, :, :left])
    if right:
        packed[:, :, left + mid:].copy_(product[:, :, left:])
