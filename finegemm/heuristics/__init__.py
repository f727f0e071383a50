"""Shape -> kernel configuration, one module per kernel family."""
from finegemm.heuristics import sm90_fp8_gemm
from finegemm.heuristics.sm90_fp8_gemm import Fp8GemmConfig, select_config

__all__ = ["sm90_fp8_gemm", "Fp8GemmConfig", "select_config"]
