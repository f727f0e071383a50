"""CUDA plan + launch layer: one module per kernel family (inputs already validated by api/)."""
from finegemm.ops import sm90_fp8_gemm
from finegemm.ops import sm90_bf16_gemm

__all__ = ["sm90_fp8_gemm"]
