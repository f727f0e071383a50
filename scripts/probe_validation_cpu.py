"""Host time of the m-grouped calls' argument validation alone (what a call that takes the second
level of the host fast path skips), on this machine's CPU with CUDA faked: no GPU needed.

Usage: python3 scripts/probe_validation_cpu.py
Prints microseconds per call of api/grouped_fp8's _validate_masked and _validate_contiguous on
DeepSeek-V3-like shapes (G=8, Mmax=256, N=4096, K=7168; MN-major sfa).
"""
from __future__ import annotations

import time

import torch

from finegemm.api import _validate
from finegemm.api import grouped_fp8

_validate.on_cuda = lambda t: True  # the CUDA path's checks, without a GPU (nothing is launched)


def per_call_us(fn, n: int = 2000) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    g, m_max, n, k = 8, 256, 4096, 7168
    fp8 = torch.float8_e4m3fn
    b, sfb = torch.empty(g, n, k, dtype=fp8), torch.empty(g, n // 128, k // 128)
    a = torch.empty(g, m_max, k, dtype=fp8)
    sfa = torch.empty(g, k // 128, m_max).transpose(1, 2)
    d = torch.empty(g, m_max, n, dtype=torch.bfloat16)
    masked_m = torch.zeros(g, dtype=torch.int32)
    masked = per_call_us(lambda: grouped_fp8._validate_masked(
        "m_grouped_fp8_gemm_nt_masked", (a, sfa), (b, sfb), d, masked_m, 100, None, "nk", False))
    m = g * m_max
    a2, sfa2 = torch.empty(m, k, dtype=fp8), torch.empty(k // 128, m).t()
    d2, layout = torch.empty(m, n, dtype=torch.bfloat16), torch.zeros(m, dtype=torch.int32)
    contiguous = per_call_us(lambda: grouped_fp8._validate_contiguous(
        "m_grouped_fp8_gemm_nt_contiguous", False, (a2, sfa2), (b, sfb), d2, layout, None, "nk", False, False,
        False, None))
    print(f"_validate_masked: {masked:.1f} us, _validate_contiguous: {contiguous:.1f} us (G={g}, Mmax={m_max}, "
          f"N={n}, K={k}; this CPU, CUDA faked)")


if __name__ == "__main__":
    main()
