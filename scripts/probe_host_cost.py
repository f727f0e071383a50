"""Host time per cached fp8_gemm_nt call, and its parts (GPU machine).

Every figure is host time only: the GPU is first given a long sleep kernel so the timed calls
queue behind it (finegemm.bench._common.host_time_us). Parts:
  full_call         fp8_gemm_nt on tensors seen before (the fast path a serving loop takes)
  fast_key          building the call signature (validation cache key; the C tensor signature)
  fast_key_python   the same built through the Python accessors (what tensor subclasses take;
                    before the C signature every call built it, inline: ~1 us less than today's loop)
  full_call_python_key
                    full_call with the Python key builder
  prepared_launch   the cached PreparedCall alone (prepared handle: the Python launch shim, or
                    4-argument ctypes where the shim is unavailable, + cuLaunchKernelEx)
  prepared_launch_ctypes
                    the same through ctypes (the shim switched off on the call object)
  oneshot_launch    the same call through the one-shot launcher (~30 ctypes arguments, tensor
                    maps encoded per call: what every call paid before prepared launches)
  moved_call        full_call with the first level of the call cache forgotten before each call:
                    the second level re-points the validated launch (tensors at new addresses)
  moved_lookup / moved_encode
                    its parts: the second-level key and the re-pointed call object; that plus
                    the host library's encoding of the launch (tensor maps, cluster fit)
  moved_call_copied / moved_lookup_copied / copied
                    the same with the host library copying the kept launch (v1.20's
                    fg_rebind_prepared_*, switched on for the measurement while gated), and
                    whether the copy happened
  validated_call    the same with both levels forgotten: validation, plan and encoding (a new
                    shape or layout)
  raw_stream / capture_check / split_pointers
                    the per-call pieces of a prepared launch: the current raw stream, the
                    stream-capture test, and a split-K call's buffer lookup (which runs the test)
  torch_add         torch.add(x, y, out=z) on small tensors: what this CPU charges for one
                    trivial PyTorch launch
  torch_scaled_mm   cuBLAS blockwise through torch._scaled_mm, for comparison
and for dense BF16: bf16_full_call (finegemm.bf16_gemm_nt, cached), bf16_moved_call,
bf16_validated_call and torch_matmul_out.
fp8_einsum at MLA decode sizes and fp8_gemm_nt_skip_head_mid (M = 128): full_call and the second
level's moved_call / moved_call_encoded / validated_call (as the grouped calls' below).
Grouped calls (G = 8, N = 4096, K = 7168, repeated with the same tensors): full_call of the FP8
contiguous (plain and psum layouts), FP8 masked (MN-major sfa), BF16 contiguous and BF16 masked
calls; for the FP8 contiguous call also its parts: check_launch (the kept layout check alone),
gemm_launch (the kept GEMM launch alone) and oneshot_call (the call without its kept launches:
the layout check and the GEMM each launched with every argument, as every call did before).
Usage: python scripts/probe_host_cost.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from finegemm.api import dense_fp8  # noqa: E402
from finegemm.bench._common import host_time_us, run_metadata  # noqa: E402


def python_key_parts(key, full) -> dict:
    """fast_key_python and full_call_python_key: the key builder and a full call with the C tensor
    signature swapped for the Python accessors."""
    from finegemm.api import _validate

    saved = _validate.signature_fn()
    _validate._signature_fn = _validate._no_signature
    try:
        return {"c_signature": saved is not _validate._no_signature, "fast_key_python": host_time_us(key),
                "full_call_python_key": host_time_us(full)}
    finally:
        _validate._signature_fn = saved


def uncached_parts(api, full, found) -> dict:
    """moved_call and validated_call: `full` with its first-level key forgotten before each call
    (the second level re-points the validated launch: what a call whose tensors moved costs),
    and with both levels forgotten (the whole validation and plan: a new layout's cost). The
    moved call's parts: moved_lookup (its second-level key and the re-pointed call object:
    found() is the key) and moved_encode (that plus the host library's encoding of the launch)."""
    first, second = api._validated_calls, api._moved_calls._entries
    lookup = lambda: api._moved_calls.launch_for(found())  # noqa: E731
    parts = {"moved_lookup": host_time_us(lookup), "moved_encode": host_time_us(lambda: lookup()._make_handle())}

    def moved():
        first.clear()
        full()

    def validated():
        first.clear()
        second.clear()
        full()

    rec = {"moved_call": host_time_us(moved), **parts, "validated_call": host_time_us(validated)}
    full()  # leaves both levels filled again
    # The same moved call with the host library's copy of the launch (v1.20; gated until its GPU
    # suite passes, so switched on here for the measurement): moved_call_copied, its lookup (which
    # now includes the copy), and whether the copy happened (the call object came with a handle).
    saved = os.environ.get("FINEGEMM_ENABLE_UNVALIDATED")
    os.environ["FINEGEMM_ENABLE_UNVALIDATED"] = "1"
    try:
        probe = lookup()
        rec["copied"] = probe is not None and bool(probe._handle)
        rec["moved_call_copied"] = host_time_us(moved)
        rec["moved_lookup_copied"] = host_time_us(lookup)
    finally:
        if saved is None:
            os.environ.pop("FINEGEMM_ENABLE_UNVALIDATED", None)
        else:
            os.environ["FINEGEMM_ENABLE_UNVALIDATED"] = saved
    full()
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import finegemm

    results = {}
    for m, n, k in [(64, 2112, 7168), (4096, 7168, 2048), (64, 7168, 16384)]:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        sfa = torch.rand(m, k // 128, device="cuda")
        sfa = finegemm.get_mn_major_tma_aligned_tensor(sfa)
        sfb = torch.rand((n + 127) // 128, k // 128, device="cuda")
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def full():
            finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)

        full()
        key = dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False)
        call = dense_fp8._validated_calls[key]

        def oneshot():
            saved = call._handle
            call._handle = 0
            try:
                call()
            finally:
                call._handle = saved

        def through_ctypes():
            saved = call._fast_call
            call._fast_call = None
            try:
                return host_time_us(call)
            finally:
                call._fast_call = saved

        rec = {
            "fastcall": call._fast_call is not None,
            "full_call": host_time_us(full),
            "fast_key": host_time_us(lambda: dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False)),
            "prepared_launch": host_time_us(call),
            **python_key_parts(lambda: dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False),
                               full),
            "prepared_launch_ctypes": through_ctypes(),
            "oneshot_launch": host_time_us(oneshot),
            **uncached_parts(dense_fp8, full, lambda: dense_fp8._moved_key(
                (a, sfa), (b, sfb), d, None, dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False))),
            "split_k": call.cfg.split_k,
        }
        from finegemm.ops import _runtime
        stream = _runtime.raw_stream(d.device.index)
        rec["raw_stream"] = host_time_us(lambda: _runtime.raw_stream(d.device.index))
        rec["capture_check"] = host_time_us(_runtime.is_capturing)
        if call.cfg.split_k:
            rec["split_pointers"] = host_time_us(lambda: call._split_pointers(stream))
        x = torch.randn(64, 64, device="cuda")
        rec["torch_add"] = host_time_us(lambda: torch.add(x, x, out=x))
        try:  # the bench's own cuBLAS blockwise call (finegemm.bench.dense)
            from finegemm.bench.dense import _cublas_blockwise
            rec["torch_scaled_mm"] = host_time_us(_cublas_blockwise(a, sfa, b, sfb))
        except Exception as exc:  # older torch without blockwise scaling
            rec["torch_scaled_mm"] = f"{type(exc).__name__}: {exc}"[:200]
        results[f"{m}x{n}x{k}"] = rec
        rec["full_call_again"] = host_time_us(full)  # the spread within this process
        print(f"{m}x{n}x{k}: " + ", ".join(f"{k_}={v:.2f}" if isinstance(v, float) else f"{k_}={v}"
                                          for k_, v in rec.items()), flush=True)
    # Dense BF16 (its own fast path and prepared launch) against torch.matmul's host cost.
    for m, n, k in [(64, 2112, 7168), (4096, 7168, 2048)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        from finegemm.api import _validate
        from finegemm.api import bf16 as api_bf16

        rec = {"bf16_full_call": host_time_us(lambda: finegemm.bf16_gemm_nt(a, b, d)),
               **{f"bf16_{k_}": v for k_, v in uncached_parts(
                   api_bf16, lambda: finegemm.bf16_gemm_nt(a, b, d),
                   lambda: _validate.MovedCalls.key((a, b, d), ("nt",) + api_bf16._fast_key("nt", a, b, d, None, "nk")[2:],
                                                    False)).items()},
               "torch_matmul_out": host_time_us(lambda: torch.matmul(a, b.t(), out=d))}
        results[f"bf16 {m}x{n}x{k}"] = rec
        print(f"bf16 {m}x{n}x{k}: " + ", ".join(f"{k_}={v:.2f}" for k_, v in rec.items()), flush=True)
    results.update(_grouped())
    for part in (_einsum(), _skip_head_mid()):
        results.update(part)
        for name, rec in part.items():
            print(f"{name}: " + _fmt(rec), flush=True)
    out = dict(run_metadata(), command=" ".join(["python", "scripts/probe_host_cost.py"] + sys.argv[1:]), unit="us host time per call", records=results)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


def _grouped() -> dict:
    import finegemm
    from finegemm import quant
    from finegemm.api import grouped_fp8
    from finegemm.ops import contiguous_layout

    results = {}
    g, n, k = 8, 4096, 7168
    b = torch.randn(g, n, k, device="cuda").to(torch.float8_e4m3fn)
    sfb = torch.rand(g, n // 128, k // 128, device="cuda")
    bb = torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 64, device="cuda")
    for per in (128, 1024):
        m = g * per
        a, sfa = quant.per_token_cast_to_fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
        ab = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ids = torch.arange(m, device="cuda", dtype=torch.int32) // per
        ends = torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * per

        def fp8(layout=ids, psum=False):
            finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, layout, use_psum_layout=psum)

        fp8()
        kept = [v for v in grouped_fp8._validated_contiguous._keys.values()
                if isinstance(v, contiguous_layout.PreparedContiguous)]
        rec = {"full_call": host_time_us(fp8), "full_call_psum": host_time_us(lambda: fp8(ends, True))}
        if kept:
            entry = kept[-1]._streams[torch.cuda.current_stream().cuda_stream]
            if kept[-1]._plan is not None:  # none where the GEMM checks the layout itself
                rec["check_launch"] = host_time_us(
                    lambda: kept[-1]._plan.launch(torch.cuda.current_stream().cuda_stream, entry[1]))
            rec["gemm_launch"] = host_time_us(entry[2])
        rec["oneshot_call"] = host_time_us(lambda: grouped_fp8._launch_contiguous(
            "m_grouped_fp8_gemm_nt_contiguous", False, a, sfa, b, sfb, d, ids, False))
        rec["bf16_full_call"] = host_time_us(lambda: finegemm.m_grouped_bf16_gemm_nt_contiguous(ab, bb, d, ids))
        rec["torch_add"] = host_time_us(lambda: torch.add(x, x, out=x))
        rec.update(_grouped_moved("_validated_contiguous", fp8,
                                  lambda: finegemm.m_grouped_bf16_gemm_nt_contiguous(ab, bb, d, ids)))
        results[f"contiguous G={g} m={m} {n}x{k}"] = rec
        print(f"contiguous G={g} m={m}: " + _fmt(rec), flush=True)
    m_max = 256
    a, sfa = quant.per_token_cast_to_fp8(torch.randn(g * m_max, k, device="cuda", dtype=torch.bfloat16))
    a = a.view(g, m_max, k)
    sfa = quant.get_mn_major_tma_aligned_tensor(sfa.contiguous().view(g, m_max, -1))
    ab = torch.randn(g, m_max, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(g, m_max, n, device="cuda", dtype=torch.bfloat16)
    masked = torch.full((g,), 200, device="cuda", dtype=torch.int32)
    rec = {"full_call": host_time_us(lambda: finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked,
                                                                                    200)),
           "bf16_full_call": host_time_us(lambda: finegemm.m_grouped_bf16_gemm_nt_masked(ab, bb, d, masked, 200)),
           "torch_add": host_time_us(lambda: torch.add(x, x, out=x))}
    rec.update(_grouped_moved("_validated_masked",
                              lambda: finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked, 200),
                              lambda: finegemm.m_grouped_bf16_gemm_nt_masked(ab, bb, d, masked, 200)))
    results[f"masked G={g} Mmax={m_max} {n}x{k}"] = rec
    print(f"masked G={g} Mmax={m_max}: " + _fmt(rec), flush=True)
    finegemm.check_errors()
    return results


def _fmt(rec: dict) -> str:
    return ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items())


def _grouped_moved(cache: str, fp8_call, bf16_call) -> dict:
    """_moved_costs of the m-grouped calls (v1.21 masked, v1.22 contiguous) for the API caches
    named `cache`: the FP8 call's records unprefixed, the BF16 call's prefixed bf16_."""
    from finegemm.api import bf16 as api_bf16
    from finegemm.api import grouped_fp8 as api_fp8

    return _moved_costs([("", getattr(api_fp8, cache), fp8_call), ("bf16_", getattr(api_bf16, cache), bf16_call)])


def _moved_costs(entries) -> dict:
    """A second level's host costs (gated until its GPU suite passes, so switched on here), for each
    (prefix, its ValidatedCalls, a call): moved_call (the first level forgotten before each call: a
    call whose tensors moved; its launch copied by the host library where the family can),
    moved_call_encoded (the copy switched off: the launch encodes itself anew), validated_call (both
    levels forgotten), learned (the second level kept the call's layout) or moved_error. Assumes
    FINEGEMM_DISABLE_PATHS is unset."""
    rec = {}
    saved = os.environ.get("FINEGEMM_ENABLE_UNVALIDATED")
    os.environ["FINEGEMM_ENABLE_UNVALIDATED"] = "1"
    try:
        for prefix, calls, full in entries:
            def moved(calls=calls, full=full):
                calls._keys.clear()
                full()

            def validated(calls=calls, full=full):
                calls._keys.clear()
                calls._moved._entries.clear()
                full()

            try:
                validated()
                rec[f"{prefix}learned"] = bool(calls._moved._entries)
                rec[f"{prefix}moved_call"] = host_time_us(moved)
                os.environ["FINEGEMM_DISABLE_PATHS"] = "host_rebind"  # the moved launch encodes itself anew
                try:
                    rec[f"{prefix}moved_call_encoded"] = host_time_us(moved)
                finally:
                    os.environ.pop("FINEGEMM_DISABLE_PATHS", None)
                rec[f"{prefix}validated_call"] = host_time_us(validated)
                full()
            except Exception as exc:  # noqa: BLE001 - recorded: the other measurements still run
                rec[f"{prefix}moved_error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if saved is None:
            os.environ.pop("FINEGEMM_ENABLE_UNVALIDATED", None)
        else:
            os.environ["FINEGEMM_ENABLE_UNVALIDATED"] = saved
    return rec


def _einsum() -> dict:
    """fp8_einsum "bhr,hdr->bhd" at MLA decode sizes (h = 128, r = 512, d = 128; b = 64, bf16 d):
    full_call (cached) and its second level's costs (v1.24, _moved_costs)."""
    import importlib

    import finegemm

    mod = importlib.import_module("finegemm.api.fp8_einsum")
    batch, heads, r, n = 64, 128, 512, 128
    A, sfa = finegemm.per_token_cast_to_fp8(torch.randn(batch * heads, r, device="cuda"))
    A, sfa = A.view(batch, heads, r), sfa.view(batch, heads, -1)
    B = torch.randn(heads, n, r, device="cuda").to(torch.float8_e4m3fn)
    sfb = torch.rand(heads, 1, r // 128, device="cuda")
    d = torch.empty(batch, heads, n, device="cuda", dtype=torch.bfloat16)

    def full():
        finegemm.fp8_einsum("bhr,hdr->bhd", (A, sfa), (B, sfb), d)

    full()
    rec = {"full_call": host_time_us(full)}
    rec.update(_moved_costs([("", mod._validated, full)]))
    return {f"fp8_einsum b={batch} h={heads} r={r} d={n}": rec}


def _skip_head_mid() -> dict:
    """fp8_gemm_nt_skip_head_mid at M = 128, N = 8192 (32 heads of 128 + 128 columns, 64 skipped),
    K = 512: full_call (cached) and its second level's costs (v1.26, _moved_costs)."""
    import importlib

    import finegemm

    mod = importlib.import_module("finegemm.api.skip_head_mid")
    m, n, k, splits = 128, 8192, 512, (128, 64, 128)
    a = finegemm.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b = finegemm.per_block_cast_to_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n + n // 256 * 64, device="cuda", dtype=torch.bfloat16)

    def full():
        finegemm.fp8_gemm_nt_skip_head_mid(a, b, d, splits)

    full()
    rec = {"full_call": host_time_us(full)}
    rec.update(_moved_costs([("", mod._validated, full)]))
    return {f"skip_head_mid {m}x{n}x{k} {splits}": rec}


if __name__ == "__main__":
    main()
