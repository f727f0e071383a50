"""Time one shape through the public API (as `bench dense` does) and through a prepared call of the
same configuration (as the tuner and probe_variants do), the API call once more after the
bench's 300 ms settle time, and list the kernels the profiler sees per call. Developer probe:
where do the bench and the tuner disagree, and why?

  python3 scripts/probe_api_vs_prepared.py 16,4096,7168 1,7168,2048 [--out $OUT/api_vs_prepared.json]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import torch

    import finegemm
    from finegemm import runtime
    from finegemm.bench._common import SETTLE_MS, kernel_time_us, settle, write_probe_json
    from finegemm.bench.dense import _inputs
    from finegemm.heuristics.sm90_fp8_gemm import select_config
    from finegemm.ops import sm90_fp8_gemm as ops
    from probe_kernels import kernels_of

    p = argparse.ArgumentParser()
    p.add_argument("shapes", nargs="+")
    p.add_argument("--out")
    args = p.parse_args()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    records = []
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split(","))
        _, _, a, sfa, b, sfb = _inputs(m, n, k, gen)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        cfg = select_config(m, n, k, runtime.get_num_sms(), False, False)

        def api():
            finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
        prepared = ops.prepare(a, sfa, b, sfb, d, config=cfg)
        rec = {"m": m, "n": n, "k": k, "config": ops._kernel_name(cfg), "sfa_stride": list(sfa.stride()),
               "us_api": kernel_time_us(api, 30), "us_prepared": kernel_time_us(prepared, 30)}
        settle(SETTLE_MS)
        rec["us_api_after_settle"] = kernel_time_us(api, 30)
        rec["kernels_api"], rec["kernels_prepared"] = kernels_of(api), kernels_of(prepared)
        records.append(rec)
        print(f"{s}: {rec['config']} sfa strides {rec['sfa_stride']}: api {rec['us_api']:.2f} us, prepared "
              f"{rec['us_prepared']:.2f} us, api after settle {rec['us_api_after_settle']:.2f} us", flush=True)
        for which in ("kernels_api", "kernels_prepared"):
            for name, us in rec[which].items():
                print(f"   {which:17s} {us:7.2f} us per call  {name}")
    if args.out:
        write_probe_json(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
