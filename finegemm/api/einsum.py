"""einsum (DeepGEMM name): the BF16 batched products of DeepSeek's MLA layers, by expression.

DeepGEMM accepts four expressions; so does this (others raise ValueError):

=================  ==================  ==================  ===========================================
expr               a                   b                   d (= c + the product)
=================  ==================  ==================  ===========================================
bhr,hdr->bhd       [b, h, r]           [h, d, r]           [b, h, d]: per head h, a[:, h] @ b[h].T
bhd,hdr->bhr       [b, h, d]           [h, d, r]           [b, h, r]: per head h, a[:, h] @ b[h]
bhd,bhr->hdr       [b, h, d]           [b, h, r]           [h, d, r]: per head h, a[:, h].T @ b[:, h]
bmk,bnk->mn        [b, m, k]           [b, n, k]           [m, n]: the sum over b of a[b] @ b[b].T
=================  ==================  ==================  ===========================================

a and b are bf16; d is bf16 or fp32; c (optional, fp32 d only, may be d itself) is added. Every
tensor has a contiguous last dimension (DeepGEMM's rule). Each expression is one batched GEMM once
its letters are sorted into batch (in a, b and d), rows (a and d), columns (b and d) and the
contracted ones (a and b only): D[g] = C[g] + A[g] @ B[g].T.

CUDA tensors: cuBLAS through PyTorch (as DeepGEMM runs three of the four by default), products
accumulated in fp32 and rounded once into d; a and b are copied only where the letters cannot
be merged in place (bmk,bnk->mn contracts two). CPU tensors: the same batched GEMM in float64.
`use_cublaslt` is accepted for compatibility and changes nothing.
"""
from __future__ import annotations

from typing import Optional

import torch

from finegemm.api import _validate as _v
from finegemm.api.cublaslt import cublas_fp32_product
from finegemm.utils import check_bool

__all__ = ["einsum", "SUPPORTED_EXPRESSIONS"]

_FN = "einsum"
SUPPORTED_EXPRESSIONS = ("bhr,hdr->bhd", "bhd,hdr->bhr", "bhd,bhr->hdr", "bmk,bnk->mn")


def _sizes(a: torch.Tensor, b: torch.Tensor, a_dims: str, b_dims: str) -> dict[str, int]:
    """Each letter's size, read from a and b; a letter of both must agree."""
    sizes: dict[str, int] = {}
    for name, t, dims in (("a", a, a_dims), ("b", b, b_dims)):
        _v.check_rank(_FN, name, t, len(dims), f"[{', '.join(dims)}]")
        for letter, size in zip(dims, t.shape):
            if sizes.setdefault(letter, size) != size:
                raise ValueError(f"{_FN}: dimension '{letter}' of a ({_v.fmt_shape(a.shape)} as [{', '.join(a_dims)}]) "
                                 f"and b ({_v.fmt_shape(b.shape)} as [{', '.join(b_dims)}]) must agree")
    return sizes


def _grouped(t: torch.Tensor, dims: str, *roles: str, copy_ok: bool = True) -> torch.Tensor:
    """t permuted to the letters of each role in turn, each role merged into one dimension: a
    copy where the merge cannot be a view and copy_ok, else always a view (raises otherwise)."""
    order = [dims.index(x) for role in roles for x in role]
    shape = [1] * len(roles)
    for i, role in enumerate(roles):
        for x in role:
            shape[i] *= t.shape[dims.index(x)]
    t = t.permute(order)
    return t.reshape(shape) if copy_ok else t.view(shape)


def einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
           use_cublaslt: bool = False) -> None:
    """d = c + einsum(expr, a, b) for one of SUPPORTED_EXPRESSIONS (see the module docstring)."""
    if not isinstance(expr, str):
        raise TypeError(f"{_FN}: expr must be a str, got {type(expr).__name__}")
    if expr not in SUPPORTED_EXPRESSIONS:
        raise ValueError(f"{_FN}: expr must be one of {', '.join(SUPPORTED_EXPRESSIONS)}, got {expr!r}")
    a = _v.check_tensor(_FN, "a", a)
    b = _v.check_tensor(_FN, "b", b)
    d = _v.check_tensor(_FN, "d", d)
    c = _v.check_optional_tensor(_FN, "c", c)
    check_bool(_FN, "use_cublaslt", use_cublaslt)
    _v.check_dtype(_FN, "a", a, (torch.bfloat16,))
    _v.check_dtype(_FN, "b", b, (torch.bfloat16,))
    _v.check_dtype(_FN, "d", d, (torch.bfloat16, torch.float32))
    _v.check_out_dtype_with_c(_FN, d, c)

    inputs, d_dims = expr.split("->")
    a_dims, b_dims = inputs.split(",")
    sizes = _sizes(a, b, a_dims, b_dims)
    d_what = f"[{', '.join(d_dims)}]"
    _v.check_rank(_FN, "d", d, len(d_dims), d_what)
    _v.check_shape(_FN, "d", d, tuple(sizes[x] for x in d_dims), d_what)
    if c is not None:
        _v.check_rank(_FN, "c", c, len(d_dims), d_what)
        _v.check_shape(_FN, "c", c, d.shape, d_what)
    _v.check_same_device(_FN, {"d": d, "a": a, "b": b, "c": c})
    for name, t in (("a", a), ("b", b), ("d", d), ("c", c)):
        if t is not None and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{_FN}: {name} must have a contiguous last dimension (stride 1), "
                             f"got strides {tuple(t.stride())}")
    _v.check_no_overlap(_FN, "d", d, {"a": a, "b": b})
    _v.check_c_alias(_FN, c, d)

    batch = "".join(x for x in d_dims if x in a_dims and x in b_dims)
    rows = "".join(x for x in d_dims if x in a_dims and x not in b_dims)
    cols = "".join(x for x in d_dims if x in b_dims and x not in a_dims)
    inner = "".join(x for x in a_dims if x in b_dims and x not in d_dims)
    A = _grouped(a, a_dims, batch, rows, inner)  # [G, M, K]
    B = _grouped(b, b_dims, batch, cols, inner)  # [G, N, K]
    D = _grouped(d, d_dims, batch, rows, cols, copy_ok=False)  # [G, M, N]: d itself
    if _v.on_cuda(d):
        out = cublas_fp32_product(A, B.transpose(1, 2))
        if c is not None:
            out.add_(_grouped(c, d_dims, batch, rows, cols))
    else:
        out = torch.matmul(A.double(), B.double().transpose(1, 2))
        if c is not None:
            out += _grouped(c, d_dims, batch, rows, cols)
    D.copy_(out)
