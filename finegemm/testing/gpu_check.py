"""`python -m finegemm check`: a quick correctness pass over every op that has a GPU kernel.

Fresh random data per case, output poisoned with NaN, compared with the exact reference
(calc_diff must be <= 1e-5) — a smoke test for a new machine or driver, not the full GPU suite
(tests/gpu/ is that).
"""
from __future__ import annotations

import argparse
import sys

import torch

DENSE_CASES = [(1, 576, 7168), (17, 2112, 512), (64, 7168, 2048), (128, 4096, 7296), (4097, 2112, 7168)]
LAYOUTS = ("nt", "nn", "tn", "tt")
TOLERANCE = 1e-5


def _fp8_case(layout: str, m: int, n: int, k: int, gen: torch.Generator) -> float:
    import finegemm
    from finegemm import reference
    from finegemm.testing import calc_diff

    a, sfa = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", generator=gen))
    b, sfb = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda", generator=gen))
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    # Operands in the stored layout the suffix names (t = stored transposed, K outermost).
    a_in = (a, sfa) if layout[0] == "n" else (a.t().contiguous(), sfa.t().contiguous())
    b_in = (b, sfb) if layout[1] == "t" else (b.t().contiguous(), sfb.t().contiguous())
    getattr(finegemm, f"fp8_gemm_{layout}")(a_in, b_in, d)
    torch.cuda.synchronize()
    if torch.isnan(d).any():
        return float("inf")
    return calc_diff(d.float(), reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m finegemm check")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("check: no CUDA GPU visible; nothing to check (the CPU reference is covered by the tests)")
        return 2
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    failures = 0
    for layout in LAYOUTS:
        for (m, n, k) in DENSE_CASES:
            if layout[0] == "t" and m % 16:
                continue  # a stored [K, M] fp8 operand needs a 16-byte row pitch
            try:
                diff = _fp8_case(layout, m, n, k, gen)
                ok = diff <= TOLERANCE
                msg = f"calc_diff {diff:.2e}"
            except Exception as exc:  # report and continue: the summary is the point
                ok, msg = False, f"{type(exc).__name__}: {exc}"
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} fp8_gemm_{layout} m={m} n={n} k={k}: {msg}")
    print(f"{'all ok' if failures == 0 else f'{failures} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
