"""cublaslt_gemm_nt / nn / tn / tt (DeepGEMM names): BF16 GEMMs run by cuBLAS, the baseline that
DeepGEMM's own tests compare against, kept so that code calling them keeps working.

D = C + op(A) @ op(B) with the layout suffixes of the BF16 GEMMs (nt: A [M, K], B [N, K]; nn:
B [K, N]; tn: A [K, M]; tt: A [K, M], B [N, K]); bf16 A and B, bf16 or fp32 d, optional fp32 c
(with an fp32 d; c may be d). CUDA tensors: cuBLAS through PyTorch, accumulating in fp32 and
rounding once into d. CPU tensors: the exact reference (finegemm.reference.bf16_gemm_nt). For
speed call finegemm.bf16_gemm_*: the same product on finegemm's SM90 kernels.
"""
from __future__ import annotations

from typing import Optional

import torch

from finegemm import reference
from finegemm.api import _validate as _v

__all__ = ["cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt", "cublas_fp32_product"]

_BF16 = torch.bfloat16


def cublas_fp32_product(a: torch.Tensor, b_t: torch.Tensor) -> torch.Tensor:
    """a @ b_t (2-D or batched 3-D bf16 CUDA tensors) in fp32, by cuBLAS: products accumulated in
    fp32, never rounded to bf16 on the way (PyTorch >= 2.8 has mm / bmm with an fp32 out_dtype;
    before it the bf16 values are widened first, which gives the same exact products)."""
    mm = torch.bmm if a.dim() == 3 else torch.mm
    try:
        return mm(a, b_t, out_dtype=torch.float32)
    except (TypeError, RuntimeError):  # no out_dtype in this PyTorch (or not for these strides)
        return mm(a.float(), b_t.float())


def _cublaslt_gemm(fn: str, layout: str, a: object, b: object, d: object, c: object) -> None:
    a_mk, b_nk = layout[0] == "n", layout[1] == "t"
    a = _v.check_tensor(fn, "a", a)
    b = _v.check_tensor(fn, "b", b)
    d = _v.check_tensor(fn, "d", d)
    c = _v.check_optional_tensor(fn, "c", c)
    _v.check_dtype(fn, "a", a, (_BF16,))
    _v.check_dtype(fn, "b", b, (_BF16,))
    _v.check_dtype(fn, "d", d, (_BF16, torch.float32))
    _v.check_out_dtype_with_c(fn, d, c)
    _v.check_gemm_shapes(fn, "a", a, "b", b, d, c, a_mk, b_nk)
    _v.check_same_device(fn, {"d": d, "a": a, "b": b, "c": c})
    _v.check_no_overlap(fn, "d", d, {"a": a, "b": b})
    _v.check_c_alias(fn, c, d)

    a_nt = a if a_mk else a.t()
    b_nt = b if b_nk else b.t()
    if not _v.on_cuda(d):
        d.copy_(reference.bf16_gemm_nt(a_nt, b_nt, c=c, out_dtype=d.dtype))
        return
    out = cublas_fp32_product(a_nt, b_nt.t())
    d.copy_(out if c is None else out.add_(c))


def cublaslt_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None) -> None:
    """D = C + A @ B.T; A [M, K], B [N, K] (see the module docstring)."""
    _cublaslt_gemm("cublaslt_gemm_nt", "nt", a, b, d, c)


def cublaslt_gemm_nn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None) -> None:
    """D = C + A @ B; A [M, K], B [K, N] (see the module docstring)."""
    _cublaslt_gemm("cublaslt_gemm_nn", "nn", a, b, d, c)


def cublaslt_gemm_tn(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None) -> None:
    """D = C + A.T @ B; A [K, M], B [K, N] (see the module docstring)."""
    _cublaslt_gemm("cublaslt_gemm_tn", "tn", a, b, d, c)


def cublaslt_gemm_tt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None) -> None:
    """D = C + A.T @ B.T; A [K, M], B [N, K] (see the module docstring)."""
    _cublaslt_gemm("cublaslt_gemm_tt", "tt", a, b, d, c)
