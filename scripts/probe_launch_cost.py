"""Host time of one launch of the contiguous layout check, by route (GPU machine).

  python3 scripts/probe_launch_cost.py --out $OUT/launch_cost.json

Every figure is host time per call (finegemm.bench._common.host_time_us: the calls queue behind a
sleep kernel). Routes, on the same argument block:
  shim             jit.fast_kernel_launch -> cuLaunchKernel (what a prepared contiguous call does)
  ctypes           cuLaunchKernel through ctypes (11 converted arguments)
  shim_plain_func  the shim, on a second load of the same kernel without the 192 KB dynamic
                   shared-memory attribute (does the attribute cost per launch?)
  plan_launch      _Plan.launch as a prepared call runs it (the shim plus its Python lookups)
  torch_sleep      torch.cuda._sleep(1): one bare launch through the CUDA runtime
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch

    from finegemm import jit
    from finegemm.bench._common import host_time_us, run_metadata
    from finegemm.ops import contiguous_layout as cl
    from finegemm.ops._runtime import launch_driver, loaded_function, raw_stream

    m, g = 8192, 8
    layout = torch.arange(m, device="cuda", dtype=torch.int32) // (m // g)
    ids = torch.empty(m, device="cuda", dtype=torch.int32)
    plan = cl._Plan("probe", layout, m, g, False, 128)
    stream = raw_stream(0)
    _, scratch = cl._scratch.pointers(0, cl._SCRATCH_HEAD + g, layout.device, stream)
    p, params = cl._argument_block()
    plan.fill(p, ids.data_ptr(), scratch)
    fast, driver = jit.fast_kernel_launch(), launch_driver()
    address = ctypes.cast(driver, ctypes.c_void_p).value
    plain = loaded_function("contiguous_layout_probe_plain", cl.render_contiguous_layout, 0)
    rec = {
        "shim": host_time_us(lambda: fast(address, plan.func, plan.grid, cl.THREADS, 0, stream,
                                          ctypes.addressof(params))),
        "ctypes": host_time_us(lambda: driver(plan.func, plan.grid, 1, 1, cl.THREADS, 1, 1, 0, stream, params, None)),
        "shim_plain_func": host_time_us(lambda: fast(address, plain, plan.grid, cl.THREADS, 0, stream,
                                                     ctypes.addressof(params))),
        "plan_launch": host_time_us(lambda: plan.launch(stream, params)),
        "torch_sleep": host_time_us(lambda: torch.cuda._sleep(1)),
    }
    torch.cuda.synchronize()
    print(", ".join(f"{k}={v:.2f}" for k, v in rec.items()))
    if args.out:
        out = dict(run_metadata(), command="python3 scripts/probe_launch_cost.py", unit="us host time per call",
                   records=rec)
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
