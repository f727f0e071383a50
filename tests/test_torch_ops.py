"""The torch.library registration: eager call, torch.compile tracing (CPU, exact reference path)."""
import pytest
import torch

import finegemm
from finegemm import torch_ops


def _inputs(m=17, n=256, k=384, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, generator=g))
    b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, generator=g))
    return a, sfa, b, sfb


def test_custom_op_matches_the_api():
    a, sfa, b, sfb = _inputs()
    d = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=torch.bfloat16)
    torch.ops.finegemm.fp8_gemm_nt(a, sfa, b, sfb, d)
    ref = torch.empty_like(d)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), ref)
    assert torch.equal(d, ref)


def test_custom_op_keeps_validation_errors():
    a, sfa, b, sfb = _inputs()
    d = torch.empty(a.shape[0], b.shape[0] + 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="d"):
        torch.ops.finegemm.fp8_gemm_nt(a, sfa, b, sfb, d)


def test_fp8_linear_under_torch_compile():
    a, sfa, b, sfb = _inputs(seed=1)

    def layer(a, sfa, b, sfb):
        return torch_ops.fp8_linear(a, sfa, b, sfb, torch.float32) * 2.0

    eager = layer(a, sfa, b, sfb)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)(a, sfa, b, sfb)
    assert torch.equal(compiled, eager)
    exact = finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32) * 2.0
    assert torch.equal(eager, exact)


def test_fp8_linear_rejects_other_out_dtypes():
    a, sfa, b, sfb = _inputs()
    with pytest.raises(TypeError, match="fp8_linear: out_dtype must be"):
        torch_ops.fp8_linear(a, sfa, b, sfb, torch.float16)
