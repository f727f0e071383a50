"""A/B of kernel-source variants (experiment macros) on forced dense FP8 configurations.

Each variant is a set of extra nvcc flags (FINEGEMM_EXTRA_NVCC_FLAGS, part of the cache key) and/or
host environment settings written `env:NAME=VALUE` (e.g. "ws=env:FINEGEMM_DIAG_SPLIT_CLUSTER=0": the
split clusters off, the same kernels). On
the GPU every (variant, repeat) runs in its own process, variants interleaved (A B A B ...) so
that drift over a sustained sweep hits all of them alike; each case is checked against the
reference (calc_diff) on fresh data before it is timed (kernel-only, L2 flushed).

  # CPU machine: compile every kernel the GPU run needs into the carried cache
  FINEGEMM_CACHE_DIR=.fgcache python3 scripts/probe_variants.py --precompile
  # GPU machine
  python3 scripts/probe_variants.py --out $OUT/variants.json

A case is "M,N,K:config" with config "auto" (the library's choice) or
  bm,bn,stages,multicast(1|2),multicast_on_a(0|1),tma_store(0|1)[,half_promote(0|1)[,k_batch[,splits[,ctas_per_sm]]]]
e.g. "4096,4096,7168:128,208,4,1,0,1". --max-stages raises the library's stage cap (MAX_STAGES) for
the run, to time rings deeper than the heuristic builds. The defaults are the last experiment run (v0.13 in
benchmarks/NOTES.md: the per-offset k-loop; its macro is gone since, so re-running them now compares
two identical builds).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_VARIANTS = ["nohoist=-DFINEGEMM_NO_HOIST_AB=1", "hoist="]
DEFAULT_CASES = [
    "4096,4096,7168:auto",
    "4096,2112,7168:auto",
    "4096,32768,512:auto",
    "4096,7168,16384:auto",
    "4096,7168,2048:auto",
    "4096,4096,7168:128,176,4,2,0,1",
    "4096,7168,16384:128,208,4,2,0,1",
    "4096,7168,2048:128,208,4,2,0,1",
    "4096,24576,1536:128,208,4,2,0,1",
    "4096,7168,16384:128,144,5,2,1,1",
    "128,2112,7168:auto",
    "64,4096,7168:auto",
]


def _parse_case(text: str):
    shape, _, cfg = text.partition(":")
    m, n, k = (int(v) for v in shape.split(","))
    return m, n, k, (cfg or "auto")


def _config(m, n, k, spec, sms):
    from finegemm.heuristics.sm90_fp8_gemm import make_config, select_config
    if spec == "auto":
        return select_config(m, n, k, sms, False, False)
    v = [int(x) for x in spec.split(",")]
    v += [0] * (10 - len(v))
    bm, bn, st, mc, on_a, tma, hp, kb, splits, cps = v
    return make_config(m, n, k, sms, False, False, bm, bn, st, max(splits, 1), max(mc, 1), bool(on_a), bool(tma),
                       bool(hp), k_batch=max(kb, 1), ctas_per_sm=max(cps, 1))


def set_max_stages(n: int | None) -> None:
    """Experiment: lift the heuristic's ring cap (the kernel itself allows up to 16 stages)."""
    if n:
        from finegemm.heuristics import sm90_fp8_gemm as h
        h.MAX_STAGES = n


def _split_variant(spec: str) -> tuple[str, str, dict]:
    """name=tokens -> (name, nvcc flags, environment): `env:NAME=VALUE` tokens go to the environment."""
    name, _, rest = spec.partition("=")
    flags, env = [], {}
    for tok in rest.split():
        if tok.startswith("env:"):
            key, _, val = tok[4:].partition("=")
            env[key] = val
        else:
            flags.append(tok)
    return name, " ".join(flags), env


def precompile(cases, variants, sms, jobs):
    from finegemm import jit
    from finegemm.ops import sm90_fp8_gemm as ops
    for v in variants:
        name, flags, _ = _split_variant(v)
        os.environ["FINEGEMM_EXTRA_NVCC_FLAGS"] = flags
        srcs = {}
        for c in cases:
            m, n, k, spec = _parse_case(c)
            cfg = _config(m, n, k, spec, sms)
            srcs[ops._kernel_name(cfg)] = ops._render_cfg(cfg)
        print(f"[{name}] {len(srcs)} kernels", flush=True)
        jit.build_many(srcs, jobs)


def run_one(cases, num_tests) -> list:
    """In this process (its FINEGEMM_EXTRA_NVCC_FLAGS): check + time every case."""
    import torch

    from finegemm import runtime
    from finegemm.bench._common import kernel_time_us
    from finegemm.ops import sm90_fp8_gemm as ops
    from finegemm.quant import per_block_cast_to_fp8, per_token_cast_to_fp8
    from finegemm.reference import fp8 as ref
    from finegemm.testing.numeric import calc_diff

    sms = runtime.get_num_sms()
    out = []
    for c in cases:
        m, n, k, spec = _parse_case(c)
        cfg = _config(m, n, k, spec, sms)
        a, sfa = per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
        b, sfb = per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        call = ops.prepare(a, sfa, b, sfb, d, config=cfg)
        call()
        torch.cuda.synchronize()
        diff = calc_diff(d.float(), ref.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32).float())
        first = d.clone()
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        repeat_ok = bool(torch.equal(first, d))
        us = kernel_time_us(call, num_tests=num_tests)
        out.append({"case": c, "m": m, "n": n, "k": k, "config": ops._kernel_name(cfg), "us": us,
                    "tflops": 2 * m * n * k / us / 1e6, "calc_diff": diff, "repeat_bitwise": repeat_ok,
                    "cluster": call.cluster_size()})
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--cases", nargs="+", default=DEFAULT_CASES)
    p.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="name=extra nvcc flags")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--num-tests", type=int, default=30)
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--precompile", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--max-stages", type=int, help="lift the heuristic's stage cap (<= 16)")
    p.add_argument("--child-timeout", type=float, default=120.0,
                   help="seconds per (variant, repeat) process: a hung kernel costs this, not the whole call")
    p.add_argument("--out")
    args = p.parse_args()
    set_max_stages(args.max_stages)
    if args.precompile:
        precompile(args.cases, args.variants, args.sms, args.jobs)
        return 0
    if args.child:
        print(json.dumps(run_one(args.cases, args.num_tests)))
        return 0
    results = []
    for rep in range(args.repeats):
        for v in args.variants:
            name, flags, extra_env = _split_variant(v)
            env = dict(os.environ, FINEGEMM_EXTRA_NVCC_FLAGS=flags, **extra_env)
            cmd = [sys.executable, __file__, "--child", "--num-tests", str(args.num_tests), "--cases", *args.cases]
            if args.max_stages:
                cmd += ["--max-stages", str(args.max_stages)]
            try:
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.child_timeout)
            except subprocess.TimeoutExpired:
                print(f"[{name}] timed out after {args.child_timeout} s (a hung kernel?)", flush=True)
                continue
            if r.returncode != 0:
                print(f"[{name}] failed:\n{r.stderr[-3000:]}", flush=True)
                continue
            for rec in json.loads(r.stdout.strip().splitlines()[-1]):
                rec.update(variant=name, repeat=rep)
                results.append(rec)
    print(f"{'case':34s} " + " ".join(f"{v.partition('=')[0]:>18s}" for v in args.variants))
    for c in args.cases:
        cells = []
        for v in args.variants:
            name = v.partition("=")[0]
            rs = [r for r in results if r["case"] == c and r["variant"] == name]
            if not rs:
                cells.append(f"{'-':>18s}")
                continue
            ok = all(r["calc_diff"] < 1e-5 and r["repeat_bitwise"] for r in rs)
            cells.append(f"{min(r['us'] for r in rs):8.1f}/{max(r['us'] for r in rs):6.1f}{'' if ok else ' BAD':>4s}")
        print(f"{c:34s} " + " ".join(cells))
    if args.out:
        from finegemm.bench._common import run_metadata
        meta = run_metadata()
        meta["command"] = " ".join(sys.argv)
        meta["records"] = results
        Path(args.out).write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
