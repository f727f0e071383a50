"""Why is the masked FP8 kind slower than the dense kernel on the same problem? (GPU probe)

For each (G, m, N, K), with the `bench grouped` masked inputs (masked_m = m, Mmax = align(m, 128)):
  * the CUDA kernels one public masked call launches, with their device times (torch profiler);
  * the masked call timed as the bench times it, and through ops with the config forced;
  * for G = 1: the dense kernel on the same A / B with the same config (dense ops.prepare).
Everything kernel-only with L2 flushed, in one process.

  python3 scripts/probe_masked_overhead.py [--out $OUT/masked_overhead.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [(1, 1024, 4096, 7168), (2, 512, 4096, 7168), (4, 256, 4096, 7168), (1, 1024, 7168, 2048)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-tests", type=int, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch

    import finegemm
    from finegemm import runtime
    from finegemm.bench._common import kernel_time_us
    from finegemm.bench.grouped import _quantized_experts
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED, select_grouped_config
    from finegemm.ops import sm90_fp8_gemm as ops

    sms = runtime.get_num_sms()
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = []
    for g, m, n, k in CASES:
        m_max = finegemm.align(m, 128)
        qs = [finegemm.per_token_cast_to_fp8(torch.randn(m_max, k, device="cuda", generator=gen)) for _ in range(g)]
        a = torch.stack([q for q, _ in qs])
        sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.stack([s for _, s in qs]))
        _, b, sfb = _quantized_experts(g, n, k, gen)
        masked_m = torch.full((g,), m, dtype=torch.int32, device="cuda")
        d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
        cfg = select_grouped_config(GEMM_GROUPED_MASKED, m_max, n, k, g, sms, expected_m=m)
        rec = {"groups": g, "m": m, "n": n, "k": k, "config": ops._kernel_name(cfg)}

        def api():
            finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)

        def forced():
            ops.m_grouped_fp8_gemm_nt_masked(a, sfa, b, sfb, d, masked_m, m, config=cfg)

        api()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            api()
            torch.cuda.synchronize()
        rec["kernels_of_one_call"] = [
            (e.name[:80], round(getattr(e, "device_time", 0.0) or e.cuda_time, 2)) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]
        rec["us_api"] = kernel_time_us(api, args.num_tests)
        rec["us_forced"] = kernel_time_us(forced, args.num_tests)
        if g == 1:
            # The dense kernel on group 0 with the masked kind's tile configuration.
            dcfg = ops.plan(m_max, n, k, False, False, torch.cuda.current_device())[0]
            from finegemm.heuristics.sm90_fp8_gemm import make_config
            same = make_config(m_max, n, k, sms, False, False, cfg.block_m, cfg.block_n, cfg.num_stages, 1,
                               cfg.num_multicast, cfg.multicast_on_a, cfg.tma_store, False)
            d0 = torch.empty(m_max, n, device="cuda", dtype=torch.bfloat16)
            for name, c in (("dense_same_config", same), ("dense_own_config", dcfg)):
                call = ops.prepare(a[0], sfa[0], b[0], sfb[0], d0, config=c)
                rec["us_" + name] = kernel_time_us(call, args.num_tests)
                rec[name] = ops._kernel_name(c)
            rec["max_abs_diff_dense_vs_masked"] = float((d0[:m].float() - d[0, :m].float()).abs().max())
        print(json.dumps(rec), flush=True)
        out.append(rec)
    if args.out:
        from finegemm.bench._common import write_probe_json
        write_probe_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
