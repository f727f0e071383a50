"""finegemm ops registered with torch.library, so that torch.compile graphs can hold them.

`torch.ops.finegemm.fp8_gemm_nt(a, sfa, b, sfb, d)` is `finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)`
as a custom op that mutates `d`: Dynamo traces it as one opaque node instead of breaking the graph
on the ctypes launch inside. Registered on import of this module (torch >= 2.4 has
torch.library.custom_op); `finegemm.fp8_linear` is the functional form that allocates d.
"""
from __future__ import annotations

import torch

from finegemm.api.dense_fp8 import fp8_gemm_nt as _fp8_gemm_nt

__all__ = ["fp8_linear"]


@torch.library.custom_op("finegemm::fp8_gemm_nt", mutates_args=("d",))
def _fp8_gemm_nt_op(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                    d: torch.Tensor) -> None:
    _fp8_gemm_nt((a, sfa), (b, sfb), d)


@_fp8_gemm_nt_op.register_fake
def _(a, sfa, b, sfb, d) -> None:
    # Shapes are checked by the real op; a traced graph only needs to know d is written.
    return None


def fp8_linear(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
               out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Returns A @ B.T (A fp8 [M, K] with 1x128 scales sfa, B fp8 [N, K] with 128x128 scales sfb)
    as a new [M, N] tensor of out_dtype (bf16 or fp32), through the registered custom op."""
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"fp8_linear: out_dtype must be torch.bfloat16 or torch.float32, got {out_dtype}")
    d = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    torch.ops.finegemm.fp8_gemm_nt(a, sfa, b, sfb, d)
    return d
