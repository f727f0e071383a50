"""CUDA plan + launch layer: one module per kernel family (inputs already validated by api/)."""
from finegemm.ops import sm90_fp8_gemm
from finegemm.ops import sm90_bf16_gemm
from finegemm.ops import k_major_copy  # the k-grouped tn GEMM's K-major copies (a small transpose kernel)

__all__ = ["sm90_fp8_gemm"]
