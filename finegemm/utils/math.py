"""DeepGEMM's `deep_gemm.utils.math` names: integer helpers and the FP8 casts (finegemm.quant)."""

from finegemm.quant.casts import (ceil_to_ue8m0, per_block_cast_to_fp8, per_channel_cast_to_fp8,
                                  per_token_cast_to_fp8)
from finegemm.utils import align, ceil_div

__all__ = ["ceil_div", "align", "ceil_to_ue8m0", "per_token_cast_to_fp8", "per_block_cast_to_fp8",
           "per_channel_cast_to_fp8"]
