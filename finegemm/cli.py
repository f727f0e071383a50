"""Command line: `python -m finegemm info|compile-check|warmup|check|bench|tune|targets`."""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import platform
import sys
import time
from pathlib import Path

from .bench import TUNE_FAMILIES


def _dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("finegemm")
    except Exception:
        try:
            import finegemm

            return getattr(finegemm, "__version__", "unknown")
        except Exception:
            return "unknown"


def cmd_info(args) -> int:
    import torch

    from finegemm import jit

    print(f"finegemm       {_version()}  ({Path(__file__).resolve().parent})")
    print(f"python         {platform.python_version()}  ({sys.executable})")
    print(f"torch          {torch.__version__}  (CUDA {torch.version.cuda})")
    avail = torch.cuda.is_available()
    print(f"cuda available {avail}")
    if avail:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            print(f"  gpu {i}        {p.name}, {p.multi_processor_count} SMs, sm_{p.major}{p.minor}, "
                  f"{_human(p.total_memory)}")
    try:
        ver = ".".join(map(str, jit.nvcc_version()))
        print(f"nvcc           {jit.nvcc_path()}  (version {ver}, CUDA_HOME {jit.cuda_home()})")
    except RuntimeError as exc:
        print(f"nvcc           not found: {exc}")
    if jit.have_nvcc():  # the prepared launches' call path (jit/fastcall.cpp, else ctypes)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shim = jit.fastcall()
        print(f"launch shim    {'built' if shim else 'unavailable: prepared launches through ctypes'}")
        from finegemm.jit import tensor_signature

        tensor_signature.load()
        print(f"C call keys    {tensor_signature.status()}")
    cache = jit.cache_dir()
    size = _dir_size(cache) if cache.exists() else 0
    nk = len(list((cache / "kernels").iterdir())) if (cache / "kernels").is_dir() else 0
    print(f"cache dir      {cache}  ({_human(size)}, {nk} kernels)")
    from finegemm.api import _validate

    gated = sorted(_validate.UNVALIDATED_ON_GPU)
    print(f"gated paths    {', '.join(gated) if gated else 'none (every built kernel path passed its GPU suite)'}")
    try:
        off = sorted(_validate.disabled_paths())
        print(f"paths off      {', '.join(off) if off else 'none'}  ({_validate.DISABLE_PATHS_ENV})")
    except ValueError as exc:
        print(f"paths off      {exc}")
        return 1
    return 0


def cmd_compile_check(args) -> int:
    from finegemm import jit

    try:
        reports = jit.compile_check(args.only or None, raise_on_failure=False)
    except (RuntimeError, KeyError) as exc:
        print(f"compile-check: {exc}", file=sys.stderr)
        return 1
    header = f"{'kernel':<48} {'regs':>5} {'spill st':>9} {'spill ld':>9} {'stack':>6} {'smem':>7}  status"
    print(header)
    print("-" * len(header))
    for r in reports:
        label = f"{r['family']}/{r['label']}"
        status = "ok" if r["ok"] else "FAIL: " + "; ".join(r["reasons"])
        print(f"{label:<48} {r['registers']:>5} {r['spill_stores']:>9} {r['spill_loads']:>9} "
              f"{r['stack_frame']:>6} {r['smem']:>7}  {status}")
    bad = [r for r in reports if not r["ok"]]
    for r in bad:
        if r["error"]:
            print(f"\n{r['family']}/{r['label']}:\n{r['error']}", file=sys.stderr)
    print(f"{len(reports) - len(bad)}/{len(reports)} kernels ok")
    return 1 if bad else 0


def _parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be M,N,K (three integers), got {text!r}")
    if min(m, n, k) <= 0:
        raise argparse.ArgumentTypeError(f"shape dims must be positive, got {text!r}")
    return m, n, k


# `warmup --kinds`: which kernel of a shape to build. FP8: D bf16 / fp32 / fp32 + C (recipe
# (1, 128, 128)), wgrad = recipe (1, 1, 128) with fp32 D accumulated into C (_no_c: without C).
# BF16: bf16_<layout> with bf16 D, bf16_<layout>_fp32 with fp32 D.
WARMUP_KINDS = ("fp8", "fp8_fp32", "fp8_fp32_c", "wgrad", "wgrad_no_c") + tuple(
    f"bf16_{layout}{out}" for layout in ("nt", "nn", "tn", "tt") for out in ("", "_fp32"))


def warmup_sources(shapes, kinds, num_sms: int) -> dict:
    """name -> rendered source of the kernel each (shape, kind) plans on num_sms SMs: what the
    calls would compile on first use (the heuristics and tuned tables are the ones the ops' plan
    functions consult; the cache key holds no GPU property, so this runs without a GPU)."""
    from finegemm.heuristics import sm90_bf16_gemm as bf16_heur
    from finegemm.heuristics import sm90_fp8_gemm as fp8_heur
    from finegemm.ops import sm90_bf16_gemm as bf16_ops
    from finegemm.ops import sm90_fp8_gemm as fp8_ops

    sources = {}
    for (m, n, k) in shapes:
        for kind in kinds:
            if kind.startswith("bf16_"):
                if k % 8:
                    raise ValueError(f"warmup: BF16 needs K % 8 == 0, got M,N,K={m},{n},{k}")
                layout = kind[5:7]
                a_mn, b_mn = bf16_heur.LAYOUTS[layout]
                cfg = bf16_ops.with_diag_b_group(bf16_heur.select_config(m, n, k, num_sms, a_mn, b_mn,
                                                                         kind.endswith("_fp32"), False))
                key = cfg.kernel_key()
                sources[bf16_ops.kernel_name(key)] = bf16_ops.render(*key)
                continue
            if k % 16:
                raise ValueError(f"warmup: FP8 needs K % 16 == 0, got M,N,K={m},{n},{k}")
            wgrad = kind.startswith("wgrad")
            out_fp32 = kind != "fp8"
            has_c = kind in ("fp8_fp32_c", "wgrad")
            if wgrad and has_c and not fp8_ops.ACCUMULATE_C_IN_KERNEL_1D1D:
                has_c = False  # the ops' A/B switch: C added after a kernel without it
            cfg = fp8_ops.with_diag_b_group(fp8_heur.select_config(m, n, k, num_sms, out_fp32, has_c,
                                                                   one_d_one_d=wgrad))
            sources[fp8_ops._kernel_name(cfg)] = fp8_ops._render_cfg(cfg)
    return sources


# `warmup --grouped G,M,N,K[,E]`: the MoE GEMMs. Contiguous kinds: M = all groups' rows (the
# contiguous layout's length); masked kinds: M = Mmax per group and E the expected rows per group
# (default M). bf16_nn_contiguous: B stored [G, K, N].
WARMUP_GROUPED_KINDS = ("fp8_contiguous", "fp8_masked", "bf16_contiguous", "bf16_nn_contiguous", "bf16_masked")


def _parse_grouped_shape(text: str) -> tuple[int, int, int, int, int]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) not in (4, 5):
        raise argparse.ArgumentTypeError(f"grouped shape must be G,M,N,K or G,M,N,K,E (integers), got {text!r}")
    if min(dims[:4]) <= 0 or (len(dims) == 5 and dims[4] < 0):
        raise argparse.ArgumentTypeError(f"grouped shape dims must be positive (E >= 0), got {text!r}")
    return dims if len(dims) == 5 else dims + (dims[1],)


def warmup_grouped_sources(shapes, kinds, num_sms: int, alignment: int) -> dict:
    """name -> rendered source of every kernel the m-grouped calls of each (G, M, N, K, E) and kind
    would compile on first use, as the shipped routing stands (ops/contiguous_layout.checks_in_kernel):
    a contiguous call with a plain layout runs the GEMM that checks it, or the check kernel and the
    plain GEMM; with psum ends the GEMM reading them, or the check kernel and the plain GEMM. Both
    layouts' kernels are built (a call may pass either)."""
    from finegemm.heuristics import sm90_bf16_gemm as bf16_heur
    from finegemm.heuristics import sm90_fp8_gemm as fp8_heur
    from finegemm.ops import contiguous_layout
    from finegemm.ops import sm90_bf16_gemm as bf16_ops
    from finegemm.ops import sm90_fp8_gemm as fp8_ops

    if alignment not in (64, 128):
        raise ValueError(f"warmup: the contiguous kernels take an mk alignment of 64 or 128, got {alignment}")
    sources = {}
    for (g, m, n, k, e) in shapes:
        for kind in kinds:
            family = kind.split("_")[0]
            if k % (16 if family == "fp8" else 8):
                raise ValueError(f"warmup: {'FP8 needs K % 16' if family == 'fp8' else 'BF16 needs K % 8'} == 0, "
                                 f"got G,M,N,K={g},{m},{n},{k}")
            if kind.endswith("masked"):
                if family == "fp8":
                    cfg = fp8_heur.select_grouped_config(fp8_heur.GEMM_GROUPED_MASKED, m, n, k, g, num_sms, e, 0)
                    sources[fp8_ops._kernel_name(cfg)] = fp8_ops._render_cfg(cfg)
                else:
                    cfg = bf16_heur.select_grouped_config(bf16_heur.GEMM_GROUPED_MASKED, m, n, k, g, num_sms, e, 0)
                    key = cfg.grouped_kernel_key()
                    sources[bf16_ops.grouped_kernel_name(key)] = bf16_ops.render_grouped(*key)
                continue
            # Contiguous: per layout form, the GEMM checking it itself or the check kernel + the plain GEMM.
            twins = [(psum, contiguous_layout.checks_in_kernel(family, psum)) for psum in (False, True)]
            if family == "fp8":
                base = fp8_heur.select_grouped_config(fp8_heur.GEMM_GROUPED_CONTIGUOUS, m, n, k, g, num_sms, 0, alignment)
                variants = [dataclasses.replace(base, layout_check=True, psum_layout=psum) if in_gemm else base
                            for psum, in_gemm in twins]
                sources.update({fp8_ops._kernel_name(c): fp8_ops._render_cfg(c) for c in variants})
            else:
                base = bf16_heur.select_grouped_config(bf16_heur.GEMM_GROUPED_CONTIGUOUS, m, n, k, g, num_sms, 0,
                                                       alignment, kind == "bf16_nn_contiguous")
                key = base.grouped_kernel_key()
                for psum, in_gemm in twins:
                    full = key + ((True,) + ((True,) if psum else ()) if in_gemm else ())
                    sources[bf16_ops.grouped_kernel_name(full)] = bf16_ops.render_grouped(*full)
            if not all(in_gemm for _, in_gemm in twins):
                sources["contiguous_layout"] = contiguous_layout.render_contiguous_layout()
    return sources


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sms must be an integer, got {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"--sms must be >= 1, got {v}")
    return v


def cmd_warmup(args) -> int:
    num_sms = args.sms
    if num_sms is None:
        import torch

        from finegemm import runtime

        num_sms = runtime._device_sm_count()  # this GPU's, else 132 (H100 / H200 SXM)
        if not torch.cuda.is_available():
            print(f"warmup: no GPU here; planning for {num_sms} SMs (H100 / H200 SXM; --sms to change)")
    kinds = args.kinds or (["fp8"] if args.shapes else []) + (["fp8_contiguous", "fp8_masked"] if args.grouped else [])
    dense = [k for k in kinds if k in WARMUP_KINDS]
    grouped = [k for k in kinds if k in WARMUP_GROUPED_KINDS]
    if not args.shapes and not args.grouped:
        print("warmup: give --shapes M,N,K and/or --grouped G,M,N,K[,E]", file=sys.stderr)
        return 2
    if (dense and not args.shapes) or (grouped and not args.grouped):
        print(f"warmup: kinds {dense if dense and not args.shapes else grouped} need "
              f"{'--shapes M,N,K' if dense and not args.shapes else '--grouped G,M,N,K[,E]'}", file=sys.stderr)
        return 2
    try:
        sources = warmup_sources(args.shapes or [], dense, num_sms)
        if grouped:
            from finegemm import quant

            alignment = args.alignment or quant.get_mk_alignment_for_contiguous_layout()
            sources.update(warmup_grouped_sources(args.grouped, grouped, num_sms, alignment))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    from finegemm import jit

    jobs = args.jobs or min(8, os.cpu_count() or 1)
    t0 = time.time()
    try:
        jit.build_many(sources, jobs)
        jit.build_host_library()  # the launchers (a first call would build them too)
    except Exception as exc:  # a compile error: its nvcc output is in the message
        print(f"warmup failed: {exc}", file=sys.stderr)
        return 1
    print(f"warmup: {len(sources)} kernels for {len(args.shapes or [])} shapes x {len(dense)} kinds, "
          f"{len(args.grouped or [])} grouped shapes x {len(grouped)} kinds ({num_sms} SMs) in the cache "
          f"({time.time() - t0:.1f} s)")
    return 0


def _dispatch(module: str, what: str, argv: list[str]) -> int:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            print(f"finegemm {what}: {module} is not available in this installation", file=sys.stderr)
            return 2
        raise
    main = getattr(mod, "main", None)
    if main is None:
        print(f"finegemm {what}: {module} has no main(argv)", file=sys.stderr)
        return 2
    rc = main(argv)
    return int(rc or 0)


def cmd_check(args) -> int:
    return _dispatch("finegemm.testing.gpu_check", "check", args.rest)


def cmd_bench(args) -> int:
    # Suites ship inside the package (finegemm/bench/<suite>.py) so an installed finegemm has them.
    return _dispatch(f"finegemm.bench.{args.suite}", "bench", args.rest)


def cmd_tune(args) -> int:
    return _dispatch("finegemm.bench.tune", "tune", [args.family] + args.rest)


def cmd_targets(args) -> int:
    return _dispatch("finegemm.bench.targets", "targets", args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m finegemm", description="finegemm utilities")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("info", help="versions, GPU, nvcc, cache")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("compile-check", help="compile representative kernels; fail on spills/stack")
    s.add_argument("--only", action="append", metavar="FAMILY",
                   help="restrict to a registered kernel family (repeatable)")
    s.set_defaults(func=cmd_compile_check)

    s = sub.add_parser("warmup", help="compile ahead of time the kernels GEMM shapes use (no GPU needed)")
    s.add_argument("--shapes", nargs="+", type=_parse_shape, default=None, metavar="M,N,K")
    s.add_argument("--grouped", nargs="+", type=_parse_grouped_shape, default=None, metavar="G,M,N,K[,E]",
                   help="m-grouped (MoE) problems: G groups; M = all rows (contiguous) or Mmax per group "
                        "(masked, E = the expected rows per group, default M)")
    s.add_argument("--kinds", nargs="+", choices=WARMUP_KINDS + WARMUP_GROUPED_KINDS, default=None, metavar="KIND",
                   help="which GEMMs: for --shapes fp8 (bf16 D, the default), fp8_fp32, fp8_fp32_c, wgrad (recipe "
                        "(1, 1, 128), fp32 D + C), wgrad_no_c, bf16_<nt|nn|tn|tt> (bf16 D), bf16_<layout>_fp32; for "
                        "--grouped fp8_contiguous, fp8_masked (the default two), bf16_contiguous, bf16_nn_contiguous, "
                        "bf16_masked")
    s.add_argument("--alignment", type=int, choices=(64, 128), default=None,
                   help="the contiguous layout's mk alignment the calls use (default: "
                        "get_mk_alignment_for_contiguous_layout(), 128)")
    s.add_argument("--sms", type=_positive_int, default=None,
                   help="plan for this many SMs (default: this GPU's count, else 132)")
    s.add_argument("--jobs", type=int, default=0, help="parallel compiles (default min(8, cpus))")
    s.set_defaults(func=cmd_warmup)

    s = sub.add_parser("check", help="GPU correctness check (finegemm.testing.gpu_check)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("bench", help="run a benchmark suite (benchmarks/bench_<suite>.py)")
    s.add_argument("suite")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("tune", help="time candidate configs per shape on the GPU; write a tuned table")
    s.add_argument("family", choices=TUNE_FAMILIES)
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_tune)

    s = sub.add_parser("targets", help="bench results (JSON) against the issues' speed targets (no GPU needed)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_targets)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # A command that hands its arguments to a module (check, bench, tune, targets) gets the
        # options REMAINDER cannot take right after the command's own positionals; its module's
        # parser judges them. Any other command: an error here.
        if not hasattr(args, "rest"):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.rest = unknown + args.rest
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
