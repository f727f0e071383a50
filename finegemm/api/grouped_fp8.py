"""Grouped FP8 GEMMs for Mixture-of-Experts (DeepGEMM names).

* ``m_grouped_fp8_gemm_nt_contiguous``: MoE forward/prefill. The tokens of all experts are
  stacked row-wise in one A [M, K]; ``grouped_layout`` says which expert (group) each row uses.
  ``m_grouped_fp8_gemm_nn_contiguous``: the same with B stored [G, K, N] (backward pass).
* ``m_grouped_fp8_gemm_nt_masked``: MoE decode. A [G, Mmax, K] with only the first
  ``masked_m[g]`` rows of group g valid (masked_m stays on the GPU: CUDA-graph friendly).
* ``k_grouped_fp8_gemm_nt_contiguous``: MoE weight gradient. Groups differ in K; each group's
  D_g [M, N] = C_g + A_g @ B_g.T with the 1D1D recipe (per-row scales on both sides).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from finegemm import quant, reference
from finegemm.api import _validate as _v
from finegemm.utils import ceil_div, write_empty_product

__all__ = [
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nn_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_nt_contiguous",
    "k_grouped_fp8_gemm_tn_contiguous",
]




def _check_common_args(fn: str, a: object, b: object, d: object, recipe: object, compiled_dims: object,
                       disable_ue8m0_cast: object):
    A, sfa = _v.check_pair(fn, "a", a, ("A", "sfa"))
    B, sfb = _v.check_pair(fn, "b", b, ("B", "sfb"))
    d = _v.check_tensor(fn, "d", d)
    rec = _v.normalize_recipe(fn, recipe, (_v.RECIPE_1D2D, _v.RECIPE_1D1D), _v.RECIPE_1D2D)
    if rec != _v.RECIPE_1D2D:
        raise ValueError(
            f"{fn}: recipe must be None or (1, 128, 128) for m-grouped GEMMs (sfb per 128x128 block), got {rec}"
        )
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_bool(fn, "disable_ue8m0_cast", disable_ue8m0_cast)
    _v.check_dtype(fn, "a[0] (A)", A, (_v.FP8,))
    _v.check_dtype(fn, "b[0] (B)", B, (_v.FP8,))
    _v.check_dtype(fn, "a[1] (sfa)", sfa, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(fn, "b[1] (sfb)", sfb, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(fn, "d", d, (torch.bfloat16,))
    return A, sfa, B, sfb, d


def _check_b(fn: str, B: torch.Tensor, sfb: torch.Tensor, K_a: int, b_kn: bool = False) -> tuple[int, int]:
    """(G, N) of an m-grouped B and its scales: B [G, N, K] with sfb [G, ceil(N/128), ceil(K/128)]
    (nt), or with b_kn B [G, K, N] with sfb [G, ceil(K/128), ceil(N/128)] (nn)."""
    b_layout = "[G, K, N]" if b_kn else "[G, N, K]"
    sfb_layout = "[G, ceil(K/128), ceil(N/128)]" if b_kn else "[G, ceil(N/128), ceil(K/128)]"
    _v.check_rank(fn, "b[0] (B)", B, 3, b_layout)
    _v.check_rank(fn, "b[1] (sfb)", sfb, 3, sfb_layout)
    G, N, K = (B.shape[0], B.shape[2], B.shape[1]) if b_kn else tuple(B.shape)
    if K != K_a:
        raise ValueError(
            f"{fn}: K of a[0] (A, K={K_a}) and b[0] (B {b_layout} = {_v.fmt_shape(B.shape)}) must agree, got K={K_a} "
            f"and K={K}"
        )
    nb, kb = ceil_div(N, 128), ceil_div(K, 128)
    _v.check_shape(fn, "b[1] (sfb)", sfb, (G, kb, nb) if b_kn else (G, nb, kb), sfb_layout)
    return G, N


# Host fast path (as api/dense_fp8.py): a contiguous call whose tensors all have the address,
# shape, strides and dtype of an earlier validated call, with the same arguments and settings,
# skips the argument checks (grouped_layout's values are checked on the GPU in every call). An nt
# call also keeps a prepared launch per stream (ops/contiguous_layout.PreparedContiguous: the layout
# check and the GEMM, each one launch without argument encoding), where its inputs need no copy.
# Its second level (MovedCalls, as the masked calls'): tensors (A, sfa, B, sfb, d, grouped_layout);
# the GEMM launch points at (A, B, sfa, sfb, d, no c) and, in its tail, grouped_layout.
_validated_contiguous = _v.ValidatedCalls(moved=_v.MovedCalls(
    slots=(0, 2, 1, 3, 4, 6, 5), output=4, inputs=(0, 1, 2, 3, 5), c_index=6, switch="contiguous_moved_calls"))


def _m_grouped_contiguous(fn: str, b_kn: bool, a: object, b: object, d: object, grouped_layout: object,
                          *flags: object) -> None:
    """flags: recipe, compiled_dims, disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
    expected_m_for_psum_layout."""
    def tensors():
        return a[0], a[1], b[0], b[1], d, grouped_layout

    key = _validated_contiguous.key(fn, d, tensors, flags)
    kept = _validated_contiguous.launch(key, _validate_contiguous, fn, b_kn, a, b, d, grouped_layout, *flags,
                                        tensors=tensors)
    if not kept or _v.ran_kept(kept):
        return  # CPU, an empty product, or a seen (or moved) call's prepared launch: done
    A, sfa, B, sfb = a[0], a[1], b[0], b[1]

    def prepare(prepared):
        if b_kn:
            return _v.ONE_SHOT  # B's K-major copy runs per call
        from finegemm.ops import contiguous_layout, sm90_fp8_gemm  # lazy: the CUDA stack

        prepare_checked = None
        if contiguous_layout.checks_in_kernel("fp8", flags[3]):
            def prepare_checked(check):
                return sm90_fp8_gemm.prepare_m_grouped_contiguous_layout_checked(A, sfa, B, sfb, d, grouped_layout,
                                                                                 check, psum=flags[3])
        return contiguous_layout.run_prepared(
            fn, prepared, grouped_layout, A.shape[0], B.shape[0], flags[3],
            lambda ids: sm90_fp8_gemm.prepare_m_grouped_contiguous(A, sfa, B, sfb, d, ids), prepare_checked)

    if not _validated_contiguous.run_kept(key, kept, prepare, tensors):
        _launch_contiguous(fn, b_kn, A, sfa, B, sfb, d, grouped_layout, flags[3])


def _launch_contiguous(fn: str, b_kn: bool, A: torch.Tensor, sfa: torch.Tensor, B: torch.Tensor, sfb: torch.Tensor,
                       d: torch.Tensor, grouped_layout: torch.Tensor, use_psum_layout: bool) -> None:
    """A validated CUDA call, one-shot: the layout checked on the GPU (ops/contiguous_layout.py),
    then the GEMM; or (the shipped path) one launch of a GEMM that checks the layout itself."""
    from finegemm.ops import contiguous_layout, sm90_fp8_gemm  # lazy: the CUDA stack is only needed for CUDA

    M, G = A.shape[0], B.shape[0]
    alignment = quant.get_mk_alignment_for_contiguous_layout()
    in_gemm = contiguous_layout.checks_in_kernel("fp8", use_psum_layout)
    if in_gemm:
        check = contiguous_layout.api_in_kernel_check(fn, M, G, alignment, use_psum_layout)
    else:
        ids = contiguous_layout.api_group_ids(fn, grouped_layout, M, G, use_psum_layout, alignment)
    # The K-major (nt) views of an nn B and its scales.
    B_nk = B.transpose(1, 2) if b_kn else B
    sfb_nk = sfb.transpose(1, 2) if b_kn else sfb
    if b_kn:
        # SM90 FP8 wgmma reads K-major operands only. B's strides are free here, so a view that
        # is K-major already (no copy by .contiguous()) may still start off a 16-byte boundary,
        # which TMA cannot address: copy that one too. The transposing copy is finegemm's
        # (PyTorch's copy of a transposed one-byte view runs at ~0.15-0.4 TB/s; NOTES v0.84 / v0.87).
        if not B_nk.is_contiguous():
            from finegemm.ops.k_major_copy import k_major_batched

            B_nk = k_major_batched(B)
        if B_nk.data_ptr() % 16 != 0:
            B_nk = B_nk.clone()
    if in_gemm:
        sm90_fp8_gemm.m_grouped_fp8_gemm_nt_contiguous_layout_checked(A, sfa, B_nk, sfb_nk, d, grouped_layout, check,
                                                                      psum=use_psum_layout)
    else:
        sm90_fp8_gemm.m_grouped_fp8_gemm_nt_contiguous(A, sfa, B_nk, sfb_nk, d, ids, checked_ids=True)


def _validate_contiguous(fn: str, b_kn: bool, a: object, b: object, d: object, grouped_layout: object,
                         recipe: object, compiled_dims: object, disable_ue8m0_cast: object, use_psum_layout: object,
                         ensure_zero_padding: object, expected_m_for_psum_layout: object) -> bool:
    """Every argument check; runs the CPU and empty-product calls itself (False), True for a CUDA
    call that _launch_contiguous is to run."""
    A, sfa, B, sfb, d = _check_common_args(fn, a, b, d, recipe, compiled_dims, disable_ue8m0_cast)
    _v.check_contiguous_flags(fn, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)
    grouped_layout = _v.check_tensor(fn, "grouped_layout", grouped_layout)
    _v.check_rank(fn, "a[0] (A)", A, 2, "[M, K]")
    _v.check_rank(fn, "a[1] (sfa)", sfa, 2, "[M, ceil(K/128)]")
    M, K = A.shape
    G, N = _check_b(fn, B, sfb, K, b_kn)
    _v.check_shape(fn, "a[1] (sfa)", sfa, (M, ceil_div(K, 128)), "[M, ceil(K/128)]")
    _v.check_rank(fn, "d", d, 2, "[M, N]")
    _v.check_shape(fn, "d", d, (M, N), "[M, N]")
    _v.check_same_device(fn, {"d": d, "a[0] (A)": A, "a[1] (sfa)": sfa, "b[0] (B)": B, "b[1] (sfb)": sfb,
                              "grouped_layout": grouped_layout})
    _v.check_k_alignment(fn, K, 1, "FP8")
    _v.check_tma_layout(fn, "a[0] (A)", A, "[M, K]")
    if not b_kn:  # an nn B is read once by the K-major copy (any strides), never through TMA
        _v.check_tma_layout(fn, "b[0] (B)", B, "[G, N, K]")
    _v.check_tma_layout(fn, "d", d, "[M, N]")
    _v.check_no_overlap(fn, "d", d, {"a[0] (A)": A, "b[0] (B)": B, "a[1] (sfa)": sfa, "b[1] (sfb)": sfb,
                                     "grouped_layout": grouped_layout})
    alignment = quant.get_mk_alignment_for_contiguous_layout()
    _v.check_cuda_mk_alignment(fn, d, alignment)
    if _v.contiguous_layout_values(fn, d, grouped_layout, M, G, use_psum_layout, alignment, empty=M * N * K * G == 0):
        return True
    if M == 0 or N == 0:
        return False
    if K == 0 or G == 0:
        d.zero_()
        return False
    B_nk = B.transpose(1, 2) if b_kn else B
    sfb_nk = sfb.transpose(1, 2) if b_kn else sfb
    d.copy_(reference.m_grouped_fp8_gemm_nt_contiguous(
        A, sfa, B_nk, sfb_nk, grouped_layout, use_psum_layout=use_psum_layout, out_dtype=d.dtype))
    return False


_CONTIGUOUS_DOC = """M-grouped FP8 GEMM, contiguous layout: {formula} for each row r.

    Args:
        a: ``(A, sfa)``: A ``float8_e4m3fn`` [M, K] (the rows of all groups stacked);
            sfa ``float32`` [M, ceil(K/128)].
        b: ``(B, sfb)``: B ``float8_e4m3fn`` {b_shape};
            sfb ``float32`` {sfb_shape}.
        d: ``bfloat16`` [M, N], written in place (rows of no group: zeros, on CPU and GPU).
        grouped_layout: ``int32``, contiguous. Plain layout ([M]): group id of each row in
            [0, G), or -1 for a padding row; the rows of one group form one run that starts at a
            multiple of ``get_mk_alignment_for_contiguous_layout()`` (pad with -1 rows). With
            ``use_psum_layout`` ([G]): cumulative row ends, non-negative, non-decreasing, last
            <= M; group g owns rows [align(end_{{g-1}}, alignment), end_g).
            CPU tensors: the values are checked before the call (ValueError). CUDA tensors: they
            are checked on the GPU, in the stream, so the call never synchronizes and can be
            captured in a CUDA graph; a broken rule raises the same ValueError from
            ``finegemm.check_errors()`` or from the next m-grouped contiguous call. Rows with
            an id outside [-1, G) are then written as zeros; other broken rules leave the
            broken rows' values unspecified (never an out-of-bounds access).
        recipe: None or (1, 128, 128) (the only m-grouped recipe on SM90).
        compiled_dims: kernel specialization hint (distinct letters of "mnk").
        disable_ue8m0_cast: accepted for compatibility (bool); no effect on SM90 (fp32 scales).
        use_psum_layout: bool, selects the grouped_layout encoding above.
        ensure_zero_padding: bool (DeepGEMM's flag; padding rows are always written as zeros here).
        expected_m_for_psum_layout: None or an int >= 0, only with ``use_psum_layout`` (DeepGEMM's
            planning hint; finegemm plans from the rows it is given and does not need it).

    Constraints: K % 16 == 0; A, B, d with a contiguous last dimension, 16-byte multiple
    strides and 16-byte aligned base (TMA); all tensors on one device; d must not overlap the
    inputs nor itself. M == 0 returns at once after validation.

    Devices: CPU runs ``finegemm.reference``; CUDA: the SM90 kernel (finegemm.ops.sm90_fp8_gemm,
    GEMM kind "grouped contiguous"; needs the mk alignment to be a multiple of 64; validated on
    the H200, tests/gpu/test_grouped_fp8_gpu.py), after the layout check kernel (finegemm.ops.contiguous_layout:
    ~4.5 us, which also turns psum ends into per-row group ids).{device_note}
    """


def m_grouped_fp8_gemm_nt_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: Optional[int] = None,
) -> None:
    _m_grouped_contiguous("m_grouped_fp8_gemm_nt_contiguous", False, a, b, d, grouped_layout, recipe, compiled_dims,
                          disable_ue8m0_cast, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)


def m_grouped_fp8_gemm_nn_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    grouped_layout: torch.Tensor,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
) -> None:
    _m_grouped_contiguous("m_grouped_fp8_gemm_nn_contiguous", True, a, b, d, grouped_layout, recipe, compiled_dims,
                          disable_ue8m0_cast, use_psum_layout, ensure_zero_padding, None)


m_grouped_fp8_gemm_nt_contiguous.__doc__ = _CONTIGUOUS_DOC.format(
    formula="D[r] = A[r] @ B[g(r)].T", b_shape="[G, N, K] (one weight per group, K-major)",
    sfb_shape="[G, ceil(N/128), ceil(K/128)]", device_note="")
m_grouped_fp8_gemm_nn_contiguous.__doc__ = _CONTIGUOUS_DOC.format(
    formula="D[r] = A[r] @ B[g(r)] (B stored [G, K, N]: the MoE backward pass's data gradient)",
    b_shape="[G, K, N] (N contiguous)", sfb_shape="[G, ceil(K/128), ceil(N/128)] (any strides)",
    device_note="\n\n    Cost on CUDA: SM90's FP8 wgmma reads K-major operands only, so every call first copies B into a\n"
                "    K-major [G, N, K] buffer (finegemm.ops.k_major_copy: one read and one write of B, ~2 x G*K*N bytes\n"
                "    of memory traffic at ~4 TB/s, and a temporary of B's size); the scales are read through transposed views. Keep a K-major copy of the\n"
                "    weights and call m_grouped_fp8_gemm_nt_contiguous where the same B serves many calls. (DeepGEMM\n"
                "    rejects this layout on SM90.)")


def m_grouped_fp8_gemm_nt_masked(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    recipe: Optional[Sequence[int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None:
    """M-grouped FP8 GEMM, masked layout: D[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g].T.

    Args:
        a: ``(A, sfa)``: A ``float8_e4m3fn`` [G, Mmax, K]; sfa ``float32`` [G, Mmax, ceil(K/128)].
        b: ``(B, sfb)``: B ``float8_e4m3fn`` [G, N, K]; sfb ``float32`` [G, ceil(N/128), ceil(K/128)].
        d: ``bfloat16`` [G, Mmax, N]; only rows m < masked_m[g] are written, the others are left
            untouched.
        masked_m: ``int32`` [G], contiguous, valid rows per group, values in [0, Mmax]. The values
            are checked on CPU tensors only: on CUDA masked_m stays on the GPU (no sync, CUDA
            graphs) and the kernel clamps it to [0, Mmax].
        expected_m: int >= 0, a hint of the typical masked_m (planning only).
        recipe: None or (1, 128, 128).
        compiled_dims, disable_ue8m0_cast: compatibility arguments (validated; no effect on SM90).

    Constraints: K % 16 == 0; TMA layout rules for A, B, d (contiguous last dim, 16-byte
    strides and base); one device; d must not overlap the inputs nor itself. G == 0 or Mmax == 0 returns at
    once after validation.

    Devices: CPU runs ``finegemm.reference``; CUDA runs the SM90 kernel (GEMM kind "grouped
    masked"): masked_m is read on the GPU only, so the call can be captured in a CUDA graph once
    and replayed with other masked_m values.
    """
    fn = "m_grouped_fp8_gemm_nt_masked"
    def tensors():
        return a[0], a[1], b[0], b[1], d, masked_m

    key = _validated_masked.key(fn, d, tensors, (expected_m, recipe, compiled_dims, disable_ue8m0_cast))
    kept = _validated_masked.launch(key, _validate_masked, fn, a, b, d, masked_m, expected_m, recipe, compiled_dims,
                                    disable_ue8m0_cast, tensors=tensors)
    if not kept or _v.ran_kept(kept):
        return  # CPU, an empty product, or a seen (or moved) call's prepared launch: done
    from finegemm.ops import sm90_fp8_gemm  # lazy: the CUDA stack is only needed for CUDA tensors

    A, sfa, B, sfb = a[0], a[1], b[0], b[1]
    if not _validated_masked.run_kept(key, kept, lambda _: _v.run_prepared_launch(
            sm90_fp8_gemm.prepare_m_grouped_masked(A, sfa, B, sfb, d, masked_m, expected_m)), tensors):
        sm90_fp8_gemm.m_grouped_fp8_gemm_nt_masked(A, sfa, B, sfb, d, masked_m, expected_m)


# The masked calls' host fast path (as the contiguous ones'): the prepared GEMM launch is kept
# (masked_m is read on the GPU, so the launch is the same for every call of a key). Its second
# level: tensors (A, sfa, B, sfb, d, masked_m); the launch points at (A, B, sfa, sfb, d, no c) and,
# in its tail, masked_m; d must not meet any input.
_validated_masked = _v.ValidatedCalls(moved=_v.MovedCalls(
    slots=(0, 2, 1, 3, 4, 6, 5), output=4, inputs=(0, 1, 2, 3, 5), c_index=6, switch="masked_moved_calls"))


def _validate_masked(fn: str, a: object, b: object, d: object, masked_m: object, expected_m: object, recipe: object,
                     compiled_dims: object, disable_ue8m0_cast: object) -> bool:
    """Every argument check; runs the CPU and empty-product calls itself (False), True for a CUDA
    call the caller is to launch."""
    A, sfa, B, sfb, d = _check_common_args(fn, a, b, d, recipe, compiled_dims, disable_ue8m0_cast)
    masked_m = _v.check_tensor(fn, "masked_m", masked_m)
    _v.check_int(fn, "expected_m", expected_m, 0)
    _v.check_rank(fn, "a[0] (A)", A, 3, "[G, Mmax, K]")
    _v.check_rank(fn, "a[1] (sfa)", sfa, 3, "[G, Mmax, ceil(K/128)]")
    G, Mmax, K = A.shape
    Gb, N = _check_b(fn, B, sfb, K)
    if Gb != G:
        raise ValueError(f"{fn}: G of a[0] (A [G, Mmax, K]) and b[0] (B [G, N, K]) must agree, got {G} and {Gb}")
    _v.check_shape(fn, "a[1] (sfa)", sfa, (G, Mmax, ceil_div(K, 128)), "[G, Mmax, ceil(K/128)]")
    _v.check_rank(fn, "d", d, 3, "[G, Mmax, N]")
    _v.check_shape(fn, "d", d, (G, Mmax, N), "[G, Mmax, N]")
    _v.check_same_device(fn, {"d": d, "a[0] (A)": A, "a[1] (sfa)": sfa, "b[0] (B)": B, "b[1] (sfb)": sfb,
                              "masked_m": masked_m})
    _v.check_k_alignment(fn, K, 1, "FP8")
    _v.check_tma_layout(fn, "a[0] (A)", A, "[G, Mmax, K]")
    _v.check_tma_layout(fn, "b[0] (B)", B, "[G, N, K]")
    _v.check_tma_layout(fn, "d", d, "[G, Mmax, N]")
    _v.check_no_overlap(fn, "d", d, {"a[0] (A)": A, "b[0] (B)": B, "a[1] (sfa)": sfa, "b[1] (sfb)": sfb,
                                     "masked_m": masked_m})
    _v.check_masked_m(fn, masked_m, G, Mmax, check_values=not _v.on_cuda(d))

    if G == 0 or Mmax == 0 or N == 0:
        return False
    if K != 0 and _v.on_cuda(d):
        return True
    keep = _masked_rows(masked_m, Mmax, d.device)
    if K == 0:
        d.copy_(d.masked_fill(keep, 0))  # no host sync: masked_m may live on the GPU
        return False
    out = reference.m_grouped_fp8_gemm_nt_masked(A, sfa, B, sfb, masked_m, out_dtype=d.dtype)
    d.copy_(torch.where(keep, out, d))
    return False


def _masked_rows(masked_m: torch.Tensor, m_max: int, device: torch.device) -> torch.Tensor:
    """bool [G, Mmax, 1]: row m of group g is valid (m < masked_m[g]); computed on the device."""
    rows = torch.arange(m_max, device=device)
    return (rows[None, :] < masked_m.to(torch.int64)[:, None]).unsqueeze(-1)


def k_grouped_fp8_gemm_nt_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    ks: Sequence[int],
    ks_tensor: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    recipe: Optional[Sequence[int]] = (1, 1, 128),
    compiled_dims: str = "mn",
) -> None:
    """K-grouped FP8 GEMM (MoE weight gradient): D_g = C_g + A_g @ B_g.T for g in [0, G).

    Args:
        a: ``(A, sfa)``: A ``float8_e4m3fn`` 1-D of M * sum(ks) elements: the groups' A_g [M, k_g]
            (row-major) one after another; sfa ``float32`` [sum(ks)/128, M] (group g's
            [k_g/128, M] block after group g-1's; any strides).
        b: ``(B, sfb)``: B ``float8_e4m3fn`` 1-D of N * sum(ks) elements (B_g [N, k_g]);
            sfb ``float32`` [sum(ks)/128, N].
        d: ``float32`` [G, M, N] (M and N are taken from d), written in place.
        ks: list of G Python ints, each >= 0 and a multiple of 128 (k_g = 0: D_g = C_g or 0).
        ks_tensor: ``int32`` [G], contiguous, the same values as ks on the device (compared on CPU
            tensors only; on CUDA that would synchronize).
        c: optional ``float32`` [G, M, N] accumulated (may be d itself).
        recipe: None or (1, 1, 128) (the only k-grouped recipe).
        compiled_dims: kernel specialization hint (distinct letters of "mnk").

    Constraints: A and B contiguous with 16-byte aligned base; d (and c) with contiguous last
    dim, 16-byte strides and base (TMA); one device; d must not overlap the inputs nor itself. M == 0,
    N == 0 or G == 0 returns at once after validation.

    Devices: CPU runs ``finegemm.reference``; CUDA runs the SM90 FP8 kernel with recipe
    (1, 1, 128) in ONE persistent launch over every group's tiles (one launch per 64 groups:
    the per-group tensor maps travel in the kernel's parameters; groups with k_g = 0 are tiles
    that only write C_g or zeros, in the same launch); finegemm.ops.sm90_fp8_k_grouped. Setting
    finegemm.ops.sm90_fp8_gemm.K_GROUPED_SINGLE_LAUNCH = False selects the v1 path (one dense
    launch per non-empty group). Scales whose row length M (resp. N) is not a multiple of 4 (or
    whose rows are not contiguous) are copied once into the TMA-aligned layout.
    """
    _k_grouped_nt("k_grouped_fp8_gemm_nt_contiguous", a, b, d, ks, ks_tensor, c, recipe, compiled_dims)


def _k_grouped_nt(fn: str, a: object, b: object, d: object, ks: object, ks_tensor: object, c: object,
                  recipe: object, compiled_dims: object) -> None:
    A, sfa = _v.check_pair(fn, "a", a, ("A", "sfa"))
    B, sfb = _v.check_pair(fn, "b", b, ("B", "sfb"))
    d = _v.check_tensor(fn, "d", d)
    ks_tensor = _v.check_tensor(fn, "ks_tensor", ks_tensor)
    c = _v.check_optional_tensor(fn, "c", c)
    _v.normalize_recipe(fn, recipe, (_v.RECIPE_1D1D,), _v.RECIPE_1D1D)
    _v.check_compiled_dims(fn, compiled_dims)
    _v.check_dtype(fn, "a[0] (A)", A, (_v.FP8,))
    _v.check_dtype(fn, "b[0] (B)", B, (_v.FP8,))
    _v.check_dtype(fn, "a[1] (sfa)", sfa, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(fn, "b[1] (sfb)", sfb, (torch.float32,), " (SM90 scales are fp32)")
    _v.check_dtype(fn, "d", d, (torch.float32,), " (k-grouped GEMMs accumulate weight gradients in fp32)")
    _v.check_out_dtype_with_c(fn, d, c)
    _v.check_rank(fn, "d", d, 3, "[G, M, N]")
    G, M, N = d.shape
    if c is not None:
        _v.check_rank(fn, "c", c, 3, "[G, M, N]")
        _v.check_shape(fn, "c", c, (G, M, N), "[G, M, N]")
    ks_list = _v.check_ks(fn, ks, ks_tensor, G, check_values=ks_tensor.device.type == "cpu")
    sum_k = sum(ks_list)
    _v.check_rank(fn, "a[0] (A)", A, 1, "(the A_g [M, k_g] flattened one after another)")
    _v.check_rank(fn, "b[0] (B)", B, 1, "(the B_g [N, k_g] flattened one after another)")
    if A.numel() != M * sum_k:
        raise ValueError(f"{fn}: a[0] (A) must have M * sum(ks) = {M} * {sum_k} = {M * sum_k} elements, got {A.numel()}")
    if B.numel() != N * sum_k:
        raise ValueError(f"{fn}: b[0] (B) must have N * sum(ks) = {N} * {sum_k} = {N * sum_k} elements, got {B.numel()}")
    _v.check_rank(fn, "a[1] (sfa)", sfa, 2, "[sum(ks)/128, M]")
    _v.check_rank(fn, "b[1] (sfb)", sfb, 2, "[sum(ks)/128, N]")
    _v.check_shape(fn, "a[1] (sfa)", sfa, (sum_k // 128, M), "[sum(ks)/128, M]")
    _v.check_shape(fn, "b[1] (sfb)", sfb, (sum_k // 128, N), "[sum(ks)/128, N]")
    _v.check_same_device(fn, {"d": d, "a[0] (A)": A, "a[1] (sfa)": sfa, "b[0] (B)": B, "b[1] (sfb)": sfb,
                              "ks_tensor": ks_tensor, "c": c})
    _v.check_contiguous_1d(fn, "a[0] (A)", A, "(1-D)", aligned=True)
    _v.check_contiguous_1d(fn, "b[0] (B)", B, "(1-D)", aligned=True)
    _v.check_tma_layout(fn, "d", d, "[G, M, N]")
    if c is not None:
        _v.check_tma_layout(fn, "c", c, "[G, M, N]")
    _v.check_no_overlap(fn, "d", d, {"a[0] (A)": A, "b[0] (B)": B, "a[1] (sfa)": sfa, "b[1] (sfb)": sfb,
                                     "ks_tensor": ks_tensor})
    _v.check_c_alias(fn, c, d)

    if G == 0 or M == 0 or N == 0:
        return
    if sum_k == 0:
        write_empty_product(d, c)
        return
    if _v.on_cuda(d):
        _v.require_gpu_validated(fn, "k_grouped_fp8")
        from finegemm.ops import sm90_fp8_gemm  # lazy: the CUDA stack is only needed for CUDA tensors

        # One persistent launch for all groups (K_GROUPED_SINGLE_LAUNCH; else one per group).
        sm90_fp8_gemm.k_grouped_fp8_gemm_nt_contiguous(A, sfa, B, sfb, d, ks_list, c)
        return
    d.copy_(reference.k_grouped_fp8_gemm_nt_contiguous(A, sfa, B, sfb, ks_list, M, N, c=c))


def k_grouped_fp8_gemm_tn_contiguous(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    d: torch.Tensor,
    ks: Sequence[int],
    ks_tensor: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    recipe: Optional[Sequence[int]] = (1, 1, 128),
    compiled_dims: str = "mn",
) -> None:
    """K-grouped FP8 GEMM, DeepGEMM's SM90 layout: D_g = C_g + A_g.T @ B_g, A_g / B_g the k_g rows of
    group g (the tokens of expert g, as activations and output gradients are stored).

    Args:
        a: ``(A, sfa)``: A ``float8_e4m3fn`` [sum(ks), M] (any strides); sfa ``float32``
            [sum(ks)/128, M]: one scale per 128 rows per column (``per_channel_cast_to_fp8`` of A).
        b: ``(B, sfb)``: B ``float8_e4m3fn`` [sum(ks), N]; sfb ``float32`` [sum(ks)/128, N].
        d, ks, ks_tensor, c, recipe, compiled_dims: as in ``k_grouped_fp8_gemm_nt_contiguous``.

    FP8 wgmma reads K-major operands only, so each group's A_g and B_g are first copied transposed
    into the nt function's layout (A_g [M, k_g] one after another; finegemm.ops.k_major_copy, a
    tiled transpose kernel, one launch for every group of A and B where M, N and the row pitches
    are multiples of 16): one read and one write of A and B per call, (M + N) * sum(ks) * 2 bytes
    of extra traffic (benchmarks/NOTES.md v0.84, v0.87 for what it costs).
    The copies are stream-ordered: the call stays graph-capturable.
    Then exactly ``k_grouped_fp8_gemm_nt_contiguous`` (its errors name this function).
    """
    fn = "k_grouped_fp8_gemm_tn_contiguous"
    A, sfa = _v.check_pair(fn, "a", a, ("A", "sfa"))
    B, sfb = _v.check_pair(fn, "b", b, ("B", "sfb"))
    d = _v.check_tensor(fn, "d", d)
    _v.check_dtype(fn, "a[0] (A)", A, (_v.FP8,))
    _v.check_dtype(fn, "b[0] (B)", B, (_v.FP8,))
    _v.check_rank(fn, "d", d, 3, "[G, M, N]")
    _v.check_rank(fn, "a[0] (A)", A, 2, "[sum(ks), M]")
    _v.check_rank(fn, "b[0] (B)", B, 2, "[sum(ks), N]")
    G, M, N = d.shape
    ks_list = _v.check_ks(fn, ks, _v.check_tensor(fn, "ks_tensor", ks_tensor), G, check_values=False)
    sum_k = sum(ks_list)
    _v.check_shape(fn, "a[0] (A)", A, (sum_k, M), "[sum(ks), M]")
    _v.check_shape(fn, "b[0] (B)", B, (sum_k, N), "[sum(ks), N]")
    _v.check_same_device(fn, {"d": d, "a[0] (A)": A, "b[0] (B)": B})

    from finegemm.ops.k_major_copy import k_major_copies  # a tiled transpose kernel on CUDA

    a_k_major, b_k_major = k_major_copies([(A, M), (B, N)], ks_list)
    _k_grouped_nt(fn, (a_k_major, sfa), (b_k_major, sfb), d, ks, ks_tensor, c, recipe, compiled_dims)
