"""Where the recipe (1, 1, 128) time goes: the same shapes through 1D2D bf16 / fp32 / fp32 + C and
1D1D fp32 / fp32 + C (kernel-only, L2 flushed). Prints one line per (shape, variant).

--anchor: the anchors' dense wgrad shapes (fp32 D, C = D), each through its planned 1D1D + C
configuration and through the same configuration without C, so the difference is what reading C
(and the synchronous epilogue around it) costs. --precompile builds those kernels without a GPU.
--json PATH writes the records.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

SHAPES = [(4096, 32768, 512), (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048)]
ANCHOR_SHAPES = [(2112, 7168, 4096), (24576, 1536, 4096), (32768, 512, 4096), (7168, 16384, 4096),
                 (4096, 7168, 4096), (7168, 2048, 4096), (4096, 32768, 512)]


def anchor_configs(m: int, n: int, k: int, sms: int):
    """(planned 1D1D + C, the same without C, the same tile with the TMA epilogue: + C, without C)."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages, select_config

    with_c = select_config(m, n, k, sms, True, True, one_d_one_d=True)
    bm, bn = with_c.block_m, with_c.block_n
    tma_c = make_config(m, n, k, sms, True, True, bm, bn, min(with_c.num_stages, max_stages(bm, bn, True, True)), 1,
                        with_c.num_multicast, with_c.multicast_on_a, True, one_d_one_d=True)
    return (with_c, dataclasses.replace(with_c, has_c=False, c_stage=False), tma_c, dataclasses.replace(tma_c, has_c=False))


def precompile(jobs: int) -> int:
    from finegemm import jit
    from finegemm.ops import sm90_fp8_gemm as ops

    cfgs = {}
    for m, n, k in ANCHOR_SHAPES:
        for cfg in anchor_configs(m, n, k, 132):
            cfgs[ops._kernel_name(cfg)] = cfg
    print(f"{len(cfgs)} kernel configurations")
    jit.build_many({name: ops._render_cfg(cfg) for name, cfg in cfgs.items()}, jobs)
    return 0


def run_anchor(num_tests: int) -> list[dict]:
    from finegemm.bench._common import kernel_time_us
    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.quant import per_token_cast_to_fp8

    records = []
    for m, n, k in ANCHOR_SHAPES:
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b, sfb = per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d = torch.zeros(m, n, device="cuda", dtype=torch.float32)
        cfg_c, cfg_noc, cfg_tc, cfg_tnoc = anchor_configs(m, n, k,
                                                          torch.cuda.get_device_properties(0).multi_processor_count)
        calls = {"with_c": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfg_c),
                 "no_c": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, None, cfg_noc),
                 "with_c_tma": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfg_tc),
                 "no_c_tma": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, None, cfg_tnoc)}
        us = {name: kernel_time_us(call, num_tests) for name, call in calls.items()}
        rec = {"m": m, "n": n, "k": k, "us": us,
               "config": f"bm{cfg_c.block_m} bn{cfg_c.block_n} s{cfg_c.num_stages} mc{cfg_c.num_multicast}"
                         f"{'A' if cfg_c.multicast_on_a else 'B'}",
               "tma_stages": cfg_tc.num_stages, "c_share": 1 - us["no_c"] / us["with_c"]}
        print(f"{m}x{n}x{k} {rec['config']}: with C {us['with_c']:8.1f} us, without {us['no_c']:8.1f} us "
              f"(C costs {100 * rec['c_share']:.1f}%); TMA epilogue (s{cfg_tc.num_stages}): with C "
              f"{us['with_c_tma']:8.1f}, without {us['no_c_tma']:8.1f}", flush=True)
        records.append(rec)
    return records


def run_default() -> None:
    import finegemm
    from finegemm.bench._common import kernel_time_us
    from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8

    for m, n, k in SHAPES:
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b2, sfb2 = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        b1, sfb1 = per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d16 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        d32 = torch.zeros(m, n, device="cuda", dtype=torch.float32)
        variants = {
            "1d2d bf16": lambda: finegemm.fp8_gemm_nt((a, sfa), (b2, sfb2), d16),
            "1d2d fp32": lambda: finegemm.fp8_gemm_nt((a, sfa), (b2, sfb2), d32),
            "1d2d fp32+C": lambda: finegemm.fp8_gemm_nt((a, sfa), (b2, sfb2), d32, c=d32),
            "1d1d fp32": lambda: finegemm.fp8_gemm_nt((a, sfa), (b1, sfb1), d32, recipe=(1, 1, 128)),
            "1d1d fp32+C": lambda: finegemm.fp8_gemm_nt((a, sfa), (b1, sfb1), d32, c=d32, recipe=(1, 1, 128)),
        }
        for name, fn in variants.items():
            us = kernel_time_us(fn, 10)
            print(f"{m}x{n}x{k} {name:12s} {us:9.1f} us {2 * m * n * k / us / 1e6:7.0f} TFLOPS", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--anchor", action="store_true")
    p.add_argument("--precompile", action="store_true")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--num-tests", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.precompile:
        return precompile(args.jobs)
    if args.anchor:
        records = run_anchor(args.num_tests)
        if args.json:
            Path(args.json).write_text(json.dumps({"records": records}, indent=1))
        return 0
    run_default()
    return 0


if __name__ == "__main__":
    sys.exit(main())
