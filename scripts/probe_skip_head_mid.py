"""fp8_gemm_nt_skip_head_mid on the GPU: the fused epilogue against the scratch-and-copy path.

At DeepGEMM's test shapes (M in {128, 4096}, (N, K) in {(32768, 512), (8192, 512)}, head splits
(128, 64, 128)), kernel-only with the 256 MB L2 flush (finegemm.bench._common.kernel_time_us), each
record times, in one process:
  fused      the prepared head-split launch (ops.sm90_fp8_gemm.prepare_skip_head_mid)
  scratch    the path the gate keeps today: the GEMM into a scratch [M, N], two strided copies
  gemm_only  fp8_gemm_nt into a plain [M, N] (what the fused path should cost)
Before timing, both paths run on the same inputs into NaN-poisoned outputs: the written columns
must be bitwise equal (the same tile), the gap columns must stay NaN, and the result must match the
exact dequantized reference (calc_diff). A record with a mismatch is reported and not timed.
Usage: python scripts/probe_skip_head_mid.py [--out FILE] [--num-tests N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import finegemm  # noqa: E402
from finegemm.api import _validate as _v  # noqa: E402
from finegemm.api import skip_head_mid  # noqa: E402
from finegemm.bench._common import kernel_time_us, write_probe_json  # noqa: E402
from finegemm.ops import sm90_fp8_gemm  # noqa: E402
from finegemm.reference import fp8 as reference_fp8  # noqa: E402
from finegemm.testing.numeric import calc_diff  # noqa: E402

SHAPES = [(128, 32768, 512), (128, 8192, 512), (4096, 32768, 512), (4096, 8192, 512)]
SPLITS = (128, 64, 128)


def _scratch_run(a, b, d, splits):
    """The scratch-and-copy path, whatever the gate says."""
    with mock.patch.object(_v, "gpu_validated", lambda capability: False):
        skip_head_mid._run(a, b, d, splits, _v.RECIPE_1D2D, "nk", False)


def one_record(m: int, n: int, k: int, num_tests: int) -> dict:
    left, mid, right = SPLITS
    heads = n // (left + right)
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    A = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    B = (torch.randn(n, k, device="cuda", generator=gen) * 2).to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, (k + 127) // 128, device="cuda", generator=gen) + 0.5)
    sfb = torch.rand((n + 127) // 128, (k + 127) // 128, device="cuda", generator=gen) + 0.5
    a, b = (A, sfa), (B, sfb)
    rec = {"m": m, "n": n, "k": k, "head_splits": list(SPLITS), "us": {}}

    d_fused = torch.full((m, n + heads * mid), float("nan"), dtype=torch.bfloat16, device="cuda")
    d_scratch = d_fused.clone()
    call = sm90_fp8_gemm.prepare_skip_head_mid(A, sfa, B, sfb, d_fused, SPLITS)
    if call is None:
        rec["error"] = "the fused path does not apply to this shape's plan"
        return rec
    rec["config"] = str(call.cfg)
    call()
    _scratch_run(a, b, d_scratch, SPLITS)
    torch.cuda.synchronize()
    packed = d_fused.unflatten(1, (heads, left + mid + right))
    gap_untouched = bool(torch.isnan(packed[:, :, left:left + mid].float()).all())
    written = torch.cat([packed[:, :, :left], packed[:, :, left + mid:]], dim=2).flatten(1)
    fully_written = not bool(torch.isnan(written.float()).any())
    bitwise = bool(torch.equal(d_fused.view(torch.int16), d_scratch.view(torch.int16)))
    ref = reference_fp8.fp8_gemm_nt(A, sfa, B, sfb, out_dtype=torch.float32)
    rec.update(gap_untouched=gap_untouched, fully_written=fully_written, bitwise_equal_to_scratch=bitwise,
               calc_diff=float(calc_diff(written.float(), ref)))
    del ref
    if not (gap_untouched and fully_written and bitwise):
        rec["error"] = "fused output differs from the scratch path (not timed)"
        return rec

    plain = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    rec["us"]["fused"] = kernel_time_us(call, num_tests)
    rec["us"]["scratch"] = kernel_time_us(lambda: _scratch_run(a, b, d_scratch, SPLITS), num_tests)
    rec["us"]["gemm_only"] = kernel_time_us(lambda: finegemm.fp8_gemm_nt(a, b, plain), num_tests)
    rec["speedup_fused_vs_scratch"] = rec["us"]["scratch"] / rec["us"]["fused"]
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--num-tests", type=int, default=20)
    args = ap.parse_args()
    records = []
    for m, n, k in SHAPES:
        try:
            rec = one_record(m, n, k, args.num_tests)
        except Exception as exc:  # report and go on: one broken shape must not hide the others
            rec = {"m": m, "n": n, "k": k, "error": f"{type(exc).__name__}: {exc}"[:400]}
        records.append(rec)
        us = rec.get("us", {})
        print(f"{m:5d} x {n:6d} x {k:5d}  fused {us.get('fused', float('nan')):8.1f}  "
              f"scratch {us.get('scratch', float('nan')):8.1f}  gemm {us.get('gemm_only', float('nan')):8.1f}  "
              f"calc_diff {rec.get('calc_diff', float('nan')):.2e}  {rec.get('error', '')}", flush=True)
    if args.out:
        write_probe_json(args.out, records, probe="skip_head_mid")


if __name__ == "__main__":
    main()
