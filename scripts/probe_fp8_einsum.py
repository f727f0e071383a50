"""fp8_einsum("bhr,hdr->bhd") on the GPU: the heads-packed kernels against the masked composition.

DeepSeek's MLA sizes (h = 128 heads, r = 512, d = 128) at decode and prefill batch sizes, kernel-only
with the 256 MB L2 flush (finegemm.bench._common.kernel_time_us: every kernel of a call counted, so
the composition pays its copies), each record timing in one process:
  heads_packed  the in-place kernel (A read as [b, h*r], d written as [b, h*d]) reading sfa in
                place too, prepared per seen call (gate fp8_einsum_sfa_in_place opened here)
  heads_packed_map  the same kernel reading an MN-major copy of sfa (made per call) through a TMA
                map, one-shot launches (the shipped path while that gate is closed)
  composed      A copied head-major, the masked kernel into a scratch [h, b, d], the scratch
                copied into d
  torch_bf16    torch.bmm of the same products in bf16 ([h, b, r] x [h, r, d], inputs made
                outside the timed call): what the layer costs without FP8
and the host time per call of the finegemm paths, with the kernels each path's time is made of.
Before timing, the finegemm paths run on the same inputs into NaN-poisoned outputs: each must be
fully written and within calc_diff 1e-5 of the exact dequantized product (a record that is not is
reported and not timed); whether they are bitwise equal is recorded (they take different tiles
where the masked plan is wider than d).
--paths narrows the finegemm paths (the correctness check then compares those with the exact
product only): an A/B of builds runs `--paths heads_packed` once per build, each in its own
process (scripts/device_run.sh ab_einsum); FINEGEMM_DISABLE_PATHS set by the caller applies to every
path (device_run.sh ab_einsum_tma).
Usage: python scripts/probe_fp8_einsum.py [--out FILE] [--num-tests N] [--batches 1 64 ...] [--paths ...]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import finegemm  # noqa: E402
from finegemm.bench._common import host_time_us, kernel_time_us, profiled_kernels, write_probe_json  # noqa: E402
from finegemm.testing.numeric import calc_diff  # noqa: E402

HEADS, R, D = 128, 512, 128
BATCHES = [1, 16, 64, 128, 512, 4096]
EXPR = "bhr,hdr->bhd"


class _path:
    """One finegemm path of fp8_einsum, by the gates and switches that select it."""

    ENV = {"heads_packed": {"FINEGEMM_ENABLE_UNVALIDATED": "1"},
           "heads_packed_map": {"FINEGEMM_ENABLE_UNVALIDATED": "1", "FINEGEMM_DISABLE_PATHS": "fp8_einsum_sfa_in_place"},
           "composed": {"FINEGEMM_DISABLE_PATHS": "fp8_einsum_heads_packed"}}

    def __init__(self, name: str):
        self.env = self.ENV[name]

    def __enter__(self):
        # A seen call keeps the route it was planned with: plan every path's calls anew.
        import importlib

        from finegemm.api import _validate as _v

        importlib.import_module("finegemm.api.fp8_einsum")._validated = _v.ValidatedCalls()
        self.saved = {k: os.environ.get(k) for k in ("FINEGEMM_ENABLE_UNVALIDATED", "FINEGEMM_DISABLE_PATHS")}
        for k in self.saved:
            os.environ.pop(k, None)
        os.environ.update(self.env)
        # The caller's switches (an A/B's variant, e.g. fp8_einsum_tma_store) stay on beside the path's.
        off = [x for x in (self.saved["FINEGEMM_DISABLE_PATHS"], self.env.get("FINEGEMM_DISABLE_PATHS")) if x]
        if off:
            os.environ["FINEGEMM_DISABLE_PATHS"] = ",".join(off)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def kernels_us(fn, reps: int) -> dict:
    """Mean device time per call of each kernel fn launches (short names), the L2 flushed before each."""
    per = {}
    for name, us in profiled_kernels(fn, reps):
        short = name.split("<")[0].split("(")[0][:60]
        per[short] = per.get(short, 0.0) + us / reps
    return per


def one_record(batch: int, num_tests: int, paths: list) -> dict:
    g = torch.Generator(device="cuda").manual_seed(batch)
    A, sfa = finegemm.per_token_cast_to_fp8(torch.randn(batch * HEADS, R, device="cuda", generator=g))
    A, sfa = A.view(batch, HEADS, R), sfa.view(batch, HEADS, -1)
    ws = [finegemm.per_block_cast_to_fp8(torch.randn(D, R, device="cuda", generator=g)) for _ in range(HEADS)]
    B, sfb = torch.stack([w for w, _ in ws]), torch.stack([s for _, s in ws])
    a, b = (A, sfa), (B, sfb)
    rec = {"b": batch, "h": HEADS, "r": R, "d": D, "us": {}, "host_us": {}}

    outs = {}
    for name in paths:
        d = torch.full((batch, HEADS, D), float("nan"), dtype=torch.bfloat16, device="cuda")
        with _path(name):
            finegemm.fp8_einsum(EXPR, a, b, d)
        outs[name] = d
    torch.cuda.synchronize()
    a_deq = A.float() * sfa.repeat_interleave(128, 2)[..., :R]
    b_deq = B.float() * sfb.repeat_interleave(128, 1)[:, :D].repeat_interleave(128, 2)[..., :R]
    exact = torch.einsum(EXPR, a_deq.double(), b_deq.double())
    # The same bits where both plans take the same tile (the heads-packed plan is no wider than d).
    if "composed" in outs:
        rec["bitwise_equal"] = bool(torch.equal(outs["heads_packed"].view(torch.int16),
                                                outs["composed"].view(torch.int16)))
    if "heads_packed_map" in outs:
        rec["bitwise_equal_map"] = bool(torch.equal(outs["heads_packed"], outs["heads_packed_map"]))
    suffix = {"heads_packed": "", "composed": "_composed", "heads_packed_map": "_map"}
    for name, o in outs.items():
        rec["calc_diff" + suffix[name]] = float(calc_diff(o.double(), exact))
    rec["fully_written"] = not any(bool(torch.isnan(o).any()) for o in outs.values())
    del exact
    if not (rec["fully_written"] and max(rec["calc_diff" + suffix[name]] for name in outs) <= 1e-5):
        rec["error"] = "an output is not the exact product within 1e-5 (not timed)"
        return rec

    d = outs["heads_packed"]
    for name in paths:
        with _path(name):
            rec["us"][name] = kernel_time_us(lambda: finegemm.fp8_einsum(EXPR, a, b, d), num_tests)
            rec["host_us"][name] = host_time_us(lambda: finegemm.fp8_einsum(EXPR, a, b, d))
            # Which kernels the kernel-only time is made of (name -> mean us per call).
            rec.setdefault("kernels", {})[name] = kernels_us(lambda: finegemm.fp8_einsum(EXPR, a, b, d), num_tests)
    a_bf = a_deq.to(torch.bfloat16).transpose(0, 1).contiguous()  # [h, b, r]
    w_bf = b_deq.to(torch.bfloat16).transpose(1, 2).contiguous()  # [h, r, d]
    out_bf = torch.empty(HEADS, batch, D, dtype=torch.bfloat16, device="cuda")
    rec["us"]["torch_bf16"] = kernel_time_us(lambda: torch.bmm(a_bf, w_bf, out=out_bf), num_tests)
    flops = 2.0 * batch * HEADS * R * D
    rec["tflops_heads_packed"] = flops / rec["us"]["heads_packed"] / 1e6
    for name, key in (("composed", "speedup_vs_composed"), ("heads_packed_map", "speedup_vs_map")):
        if name in rec["us"]:
            rec[key] = rec["us"][name] / rec["us"]["heads_packed"]
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="fp8_einsum.json")
    p.add_argument("--num-tests", type=int, default=20)
    p.add_argument("--batches", type=int, nargs="+", default=BATCHES)
    p.add_argument("--paths", nargs="+", default=list(_path.ENV), choices=list(_path.ENV),
                   help="the finegemm paths to check and time (heads_packed always)")
    args = p.parse_args()
    paths = ["heads_packed"] + [x for x in args.paths if x != "heads_packed"]
    records = []
    for batch in args.batches:
        rec = one_record(batch, args.num_tests, paths)
        records.append(rec)
        us, host = rec["us"], rec["host_us"]
        print(f"b={batch:5d} h={HEADS} r={R} d={D}: "
              + (rec.get("error") or
                 "  ".join(f"{name} {us[name]:8.1f} us" for name in paths + ["torch_bf16"])
                 + f"  ({rec['tflops_heads_packed']:.0f} TFLOPS; host "
                 + " / ".join(f"{host[name]:.1f}" for name in paths)
                 + f" us; calc_diff {rec['calc_diff']:.1e})"), flush=True)
        for name, per in rec.get("kernels", {}).items():
            print(f"    {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()), flush=True)
    write_probe_json(args.out, records)
    return 0 if all("error" not in r for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
