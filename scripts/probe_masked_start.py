"""What a masked FP8 call pays for reading masked_m before its first load.

The masked kernel's tile walk needs masked_m[g] before its producer can issue a TMA load, and
after the bench's L2 flush that read is a DRAM round trip on every CTA's critical path (the dense
kernel computes its first tile from the grid alone). Timed per shape, in one process, as the
benches time (kernel-only, 256 MB L2 flush before each call):
  dense    fp8_gemm_nt on the G * m stacked rows (the same work at G = 1)
  masked   m_grouped_fp8_gemm_nt_masked, masked_m cold (flushed with everything else)
  hot      the same call with masked_m rewritten after the flush (its line in L2, as when the
           dispatch kernel that produced it ran just before; the fill is not timed)

  python3 scripts/probe_masked_start.py --out $OUT/masked_start.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(1, 1024, 4096, 7168), (2, 512, 4096, 7168), (4, 256, 4096, 7168), (1, 1024, 7168, 2048),
          (4, 256, 7168, 2048)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-tests", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()

    import finegemm
    from finegemm.bench._common import kernel_time_us, write_probe_json
    from finegemm.bench.grouped import masked_inputs

    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for g, m, n, k in SHAPES:
        a_bf16, a, sfa, b, sfb, masked_m, d = masked_inputs(g, m, n, k, gen)  # m % 128 == 0: Mmax = m
        a2, sfa2 = finegemm.per_token_cast_to_fp8(a_bf16.view(g * m, k))
        d2 = torch.empty(g * m, n, device="cuda", dtype=torch.bfloat16)

        def masked():
            finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)

        def hot():
            masked_m.fill_(m)  # a FillFunctor kernel: not counted by kernel_time_us, leaves the line in L2
            masked()

        def dense():
            finegemm.fp8_gemm_nt((a2, sfa2), (b[0], sfb[0]), d2)

        fns = {"dense": dense, "masked": masked, "hot": hot}
        rec = {"groups": g, "m": m, "n": n, "k": k, "us_rounds": {name: [] for name in fns}}
        for r in range(args.rounds):
            names = list(fns) if r % 2 == 0 else list(reversed(fns))
            for name in names:
                rec["us_rounds"][name].append(kernel_time_us(fns[name], args.num_tests))
        rec["us"] = {name: sum(v) / len(v) for name, v in rec["us_rounds"].items()}
        records.append(rec)
        print(f"G={g} m={m} n={n} k={k}: " + "  ".join(
            f"{name} {rec['us'][name]:.2f} ({'/'.join(f'{x:.2f}' for x in rec['us_rounds'][name])})"
            for name in fns), flush=True)
    if args.out:
        write_probe_json(args.out, records, command=" ".join(sys.argv))


if __name__ == "__main__":
    main()
