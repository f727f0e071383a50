"""Benchmark shape sets (DeepSeek-V3 / R1 GEMMs as in DeepGEMM's benchmarks).

Dense: (M, N, K); grouped contiguous / masked: (G, m per group, N, K); k-grouped: (G, M, N, k per group).
"""

from __future__ import annotations

import itertools

__all__ = [
    "DENSE_NK",
    "DENSE_M",
    "DENSE_M_CURVE",
    "DENSE_SHAPES",
    "GROUPED_NK",
    "CONTIGUOUS_GM",
    "MASKED_GM",
    "CONTIGUOUS_SHAPES",
    "MASKED_SHAPES",
    "K_GROUPED_SHAPES",
]

# (N, K) of the dense projections.
DENSE_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
DENSE_M = [64, 128, 4096]
# Extra M values for an M-sweep (skinny-to-large curve).
DENSE_M_CURVE = [1, 16, 32, 256, 1024, 2048, 8192]
# (M, N, K)
DENSE_SHAPES = [(m, n, k) for m, (n, k) in itertools.product(DENSE_M, DENSE_NK)]

# (N, K) of the MoE expert GEMMs.
GROUPED_NK = [(4096, 7168), (7168, 2048), (6144, 7168), (7168, 3072)]
# (num groups, expected rows per group)
CONTIGUOUS_GM = [(4, 8192), (8, 4096)]
MASKED_GM = [(1, 1024), (2, 512), (4, 256), (6, 1024), (32, 192), (32, 20)]
# (G, m, N, K)
CONTIGUOUS_SHAPES = [(g, m, n, k) for (g, m), (n, k) in itertools.product(CONTIGUOUS_GM, GROUPED_NK)]
MASKED_SHAPES = [(g, m, n, k) for (g, m), (n, k) in itertools.product(MASKED_GM, GROUPED_NK)]

# (G, M, N, expected k per group) of the k-grouped weight-gradient GEMMs.
K_GROUPED_SHAPES = [(4, 4096, 7168, 8192), (8, 4096, 7168, 4096), (16, 7168, 2048, 2048)]
