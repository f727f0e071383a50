"""What an in-place fp32 accumulation D += A B costs at the memory system, against the recipe
(1, 1, 128) GEMM that does it (the K = 512 wgrad record: D is 4096 x 32768 fp32, 537 MB).

Times, kernel-only with the bench's L2 flush (kernel_time_us), on the same D:
  rmw_add   d.add_(1.0)          reads and writes D in place (the floor of any C = D accumulation)
  copy      d2.copy_(d)          reads D, writes another buffer (the anchors' "copy" ceiling)
  write     d.copy_(row)         writes D only (the floor of a GEMM without C): one row broadcast (a
                                 copy kernel; the timer drops fill kernels as the L2 flush's)
  read      torch.sum(d, dim=0)  reads D only
  gemm_c / gemm_no_c / gemm_c_tma / gemm_no_c_tma: the planned 1D1D + C configuration, the same
            without C, and the same tile with the TMA epilogue (reduce-add / store).
  gemm_c_other: the planned tile with the other C path of the direct epilogue (C staged in shared
            memory, c_stage, or read from global memory).

  python3 scripts/probe_rmw_floor.py [--shapes 4096,32768,512 ...] [--json out.json]
  python3 scripts/probe_rmw_floor.py --once   # one call of each, for ncu (no timing harness)
  python3 scripts/probe_rmw_floor.py --precompile   # build the GEMM kernels here (no GPU)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_SHAPES = [(4096, 32768, 512), (4096, 7168, 2048)]


def _configs(m: int, n: int, k: int, sms: int):
    """probe_wgrad's four (planned + C, no C, TMA epilogue + C / no C) and the planned tile with the
    other C path of the direct epilogue (staged in shared memory / read from global memory), where
    the tile allows it."""
    from finegemm.heuristics.sm90_fp8_gemm import make_config, max_stages
    from probe_wgrad import anchor_configs

    cfgs = anchor_configs(m, n, k, sms)
    p = cfgs[0]
    try:
        st = min(p.num_stages, max_stages(p.block_m, p.block_n, False, True, cap=16, c_stage=not p.c_stage))
        other = make_config(m, n, k, sms, True, True, p.block_m, p.block_n, st, 1, p.num_multicast, p.multicast_on_a,
                            False, one_d_one_d=True, k_batch=min(p.k_batch, st), c_stage=not p.c_stage)
    except ValueError:
        other = None
    return (*cfgs, other)


def precompile(shapes, jobs: int) -> int:
    from finegemm import jit
    from finegemm.ops import sm90_fp8_gemm as ops

    cfgs = {ops._kernel_name(c): c for (m, n, k) in shapes for c in _configs(m, n, k, 132) if c is not None}
    print(f"{len(cfgs)} kernel configurations")
    jit.build_many({name: ops._render_cfg(cfg) for name, cfg in cfgs.items()}, jobs)
    return 0


def _calls(m: int, n: int, k: int):
    import torch

    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.quant import per_token_cast_to_fp8

    a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.zeros(m, n, device="cuda", dtype=torch.float32)
    d2 = torch.empty_like(d)
    col = torch.empty(n, device="cuda", dtype=torch.float32)
    one = torch.ones(n, device="cuda", dtype=torch.float32).expand(m, n)  # a real copy kernel, not a fill
    cfg_c, cfg_noc, cfg_tc, cfg_tnoc, cfg_other = _configs(m, n, k,
                                                         torch.cuda.get_device_properties(0).multi_processor_count)
    calls = {
        "rmw_add": lambda: d.add_(1.0),
        "copy": lambda: d2.copy_(d),
        "write": lambda: d.copy_(one),
        "read": lambda: torch.sum(d, dim=0, out=col),
        "gemm_c": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfg_c),
        "gemm_no_c": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, None, cfg_noc),
        "gemm_c_tma": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfg_tc),
        "gemm_no_c_tma": ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, None, cfg_tnoc),
    }
    if cfg_other is not None:
        calls["gemm_c_other"] = ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfg_other)
    desc = (f"bm{cfg_c.block_m} bn{cfg_c.block_n} s{cfg_c.num_stages} mc{cfg_c.num_multicast}"
            f"{'A' if cfg_c.multicast_on_a else 'B'} epilogue={'tma' if cfg_c.tma_store else 'direct'}"
            f"{' c_stage' if cfg_c.c_stage else ''}; "
            f"tma variant s{cfg_tc.num_stages}")
    return calls, desc, d.numel() * 4


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=[f"{m},{n},{k}" for m, n, k in DEFAULT_SHAPES])
    p.add_argument("--precompile", action="store_true")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--once", action="store_true")
    p.add_argument("--num-tests", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes]
    if args.precompile:
        return precompile(shapes, args.jobs)
    import torch

    from finegemm.bench._common import kernel_time_us

    records = []
    for m, n, k in shapes:
        calls, desc, d_bytes = _calls(m, n, k)
        if args.once:
            for fn in calls.values():
                fn()
            torch.cuda.synchronize()
            continue
        us = {name: kernel_time_us(fn, args.num_tests) for name, fn in calls.items()}
        # bytes each call moves at HBM at least (GEMM operands are < 4% of D here)
        moved = {"rmw_add": 2, "copy": 2, "write": 1, "read": 1, "gemm_c": 2, "gemm_no_c": 1, "gemm_c_tma": 2,
                 "gemm_no_c_tma": 1, "gemm_c_other": 2}
        tbs = {name: moved[name] * d_bytes / us[name] / 1e6 for name in us}
        rec = {"m": m, "n": n, "k": k, "config": desc, "d_bytes": d_bytes, "us": us, "tb_per_s": tbs}
        records.append(rec)
        print(f"{m}x{n}x{k} ({desc})")
        for name in us:
            print(f"  {name:14s} {us[name]:9.1f} us  {tbs[name]:5.2f} TB/s of D traffic", flush=True)
    if args.json and records:
        Path(args.json).write_text(json.dumps({"records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
