"""Diagnose API-fuzz seeds on CUDA (tests/gpu/test_fuzz_gpu.py): the kernel configuration
(FINEGEMM_PRINT_CONFIGS), the error a case raises, and where cells outside its outputs changed,
decoded to coordinates of the output's storage (row, column past N, ...).

  python3 scripts/probe_fuzz_seeds.py SEED [SEED ...]        # GPU machine
"""
from __future__ import annotations

import math
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("FINEGEMM_PRINT_CONFIGS", "1")

import torch  # noqa: E402

from finegemm.testing import fuzz  # noqa: E402


def decode(idx: int, shape: tuple, place: fuzz.Placement):
    st = fuzz._storage(shape, place)
    rel = idx - place.offset
    if rel < 0 or rel >= math.prod(st):
        return ("guard", rel)
    coords = []
    for s in reversed(st):
        coords.append(rel % s)
        rel //= s
    return tuple(reversed(coords))


def main() -> int:
    for seed in (int(s) for s in sys.argv[1:]):
        case = fuzz.valid_case(seed)
        print("=" * 20, seed, case.describe(), flush=True)
        out = fuzz.run_case(case, "cuda")
        torch.cuda.synchronize()
        if out.error is not None:
            traceback.print_exception(out.error)
            continue
        for name in case.outputs:
            buf, mask, spec = out.mat.bufs[name]
            int_dtype, bits = fuzz._POISON_BITS[spec.dtype]
            now = buf.view(int_dtype).cpu()
            bad = ((now != bits) & ~mask).nonzero().flatten().tolist()
            shape = tuple(spec.values.shape)
            print(f"{name}: {len(bad)} cells changed outside it; storage {fuzz._storage(shape, spec.place)}, {spec.place}")
            for i in bad[:12]:
                print("  ", decode(i, shape, spec.place), buf.cpu()[i].item())
        want = fuzz.run_case(case, "cpu")
        print("vs the CPU path:", fuzz.compare_outputs(fuzz.output_values(out, case), fuzz.output_values(want, case)) or "equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
