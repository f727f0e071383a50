"""K-grouped SM90 FP8 GEMM (recipe (1, 1, 128), MoE weight gradients): every group in ONE persistent launch.

k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c) writes D_g = C_g + A_g @ B_g^T for all
groups with the 1D1D kernel of impls/sm90_fp8_gemm_1d2d.cuh built with scheduler::kGemmKGrouped:
work units are (group, tile) over all groups, so the groups' tiles share the machine instead of
each group paying a launch, a pipeline fill and a partial last wave. Groups with k_g = 0 are
units with no k-block (their tiles write C or zeros), still in the same launch.

Per call: the plan (config + loaded kernel, cached by (M, N, G, non-empty groups, K bucket, C)),
the scale layouts (no copy when already [sum Kb, M] / [sum Kb, N] with a 16-byte row pitch), and
one ctypes call with ks as one int32 array: the host launcher (host/sm90_fp8_k_grouped.cpp)
orders the groups, encodes their A_g / B_g tensor maps and launches (one launch per
Sm90Fp8KGroupedParams::kMaxGroups = 64 groups). No host sync and no host-to-device copy: the
group table travels in the kernel's parameters, which a CUDA graph captures by value (valid as
long as the tensors keep their addresses, as for every finegemm kernel).
"""
from __future__ import annotations

import array
import ctypes
import threading
from typing import Optional

import torch

from finegemm import jit, runtime
from finegemm.heuristics.sm90_fp8_gemm import (GEMM_K_GROUPED, Fp8GemmConfig, k_grouped_plan_k,
                                               select_k_grouped_config)
from finegemm.ops import sm90_fp8_gemm as _dense
from finegemm.ops._runtime import c_function, raw_stream
from finegemm.utils import align, write_empty_product

__all__ = ["k_grouped_fp8_gemm_nt_contiguous", "plan", "max_groups_per_launch"]

# ----------------------------------------------------------------------------- host launcher
_get_raw_stream = raw_stream  # module-level name: tests substitute it
_launcher = None
_launcher_lock = threading.Lock()


def _get_launcher():
    global _launcher
    if _launcher is None:
        with _launcher_lock:
            if _launcher is None:
                u64, i64, vp, i = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
                f = c_function(jit.host_library(), "fg_launch_sm90_fp8_k_grouped",
                               [u64, vp, vp, vp, vp, vp, vp,  # fn, a, b, sfa, sfb, d, c
                                vp, i, i64, i64, i,  # ks (int32 [G]), G, a_elems, b_elems, sf_rows
                                i, i, i, i, i,  # m, n, ldd, sfa_ld, sfb_ld
                                i, i, i, i,  # block_m, block_n, num_multicast, multicast_on_a
                                i, i, i,  # tma_store, grid, smem
                                u64])  # stream
                _launcher = f
    return _launcher


def max_groups_per_launch() -> int:
    """Groups one launch serves (the kernel-parameter table's capacity); more are chunked."""
    return int(jit.host_library().fg_sm90_fp8_k_grouped_max_groups())


# ----------------------------------------------------------------------------- plans
_plans: dict[tuple, tuple[Fp8GemmConfig, int]] = {}
_plans_lock = threading.Lock()


def plan(m: int, n: int, ks, has_c: bool, device: int,
         config: Optional[Fp8GemmConfig] = None) -> tuple[Fp8GemmConfig, int]:
    """(config, CUfunction) of a k-grouped problem (cached per (M, N, G, non-empty groups, K bucket,
    C); compiles on first use). `config`: a forced configuration (make_k_grouped_config)."""
    if config is not None:
        # A kernel built without C would ignore c; one built with C would read a null c.
        if (config.gemm_kind, config.m, config.n, config.has_c) != (GEMM_K_GROUPED, m, n, bool(has_c)):
            raise ValueError(f"sm90_fp8_gemm k-grouped: forced config is for (kind {config.gemm_kind}, m={config.m}, "
                             f"n={config.n}, C={config.has_c}), the problem is (m={m}, n={n}, C={bool(has_c)})")
        fn = _dense._load(config, device)
        return _dense._fit_clusters(config, fn), fn
    num_sms = runtime.get_num_sms()
    active, k_plan = k_grouped_plan_k(ks)
    key = (m, n, len(ks), active, k_plan, bool(has_c), num_sms, device)
    p = _plans.get(key)
    if p is None:
        cfg = select_k_grouped_config(m, n, ks, num_sms, has_c)
        fn = _dense._load(cfg, device)
        p = (_dense._fit_clusters(cfg, fn), fn)
        with _plans_lock:
            _plans[key] = p
    return p


# ----------------------------------------------------------------------------- entry point
def _rows_for_tma(sf: torch.Tensor, inner: int) -> tuple[torch.Tensor, int]:
    """Scales [rows, inner] -> (fp32 tensor whose element (r, i) is at r * ld + i, ld): the tensor
    itself when its rows are contiguous with a 16-byte pitch and base, else one aligned copy.
    That is the dense path's MN-major TMA-aligned sfa of the transposed [inner, rows] view."""
    t, ld = _dense._sfa_for_tma(sf.t(), inner)
    return t.t(), ld


def _as_rows(t: torch.Tensor, rows: int, n: int) -> Optional[torch.Tensor]:
    """[G, M, N] -> the [G*M, N] view the kernel indexes (rows g * M ..), or None when the group
    stride is not M rows."""
    try:
        return t.view(rows, n)
    except RuntimeError:
        return None


def _pitch(t2: torch.Tensor) -> int:
    return t2.stride(0) if t2.shape[0] > 1 else align(t2.shape[1], 4)


def k_grouped_fp8_gemm_nt_contiguous(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                     d: torch.Tensor, ks, c: Optional[torch.Tensor] = None,
                                     config: Optional[Fp8GemmConfig] = None) -> None:
    """D_g = C_g + A_g @ B_g^T (recipe (1, 1, 128)) for every group g in one launch (one per 64
    groups), on the current stream.

    a fp8 1-D (A_g [M, k_g] row-major one after another, 16-byte aligned), sfa fp32
    [sum(ks)/128, M] (group g's [k_g/128, M] block after the previous ones), b / sfb likewise with
    N, d fp32 [G, M, N], c fp32 [G, M, N] or None (may be d), ks: G Python ints, multiples of 128
    (0: D_g = C_g or zeros). `config`: a forced configuration (tests, tuning).
    """
    num_groups, m, n = d.shape
    if num_groups == 0 or m == 0 or n == 0:
        return
    ks = ks if isinstance(ks, list) else [int(k) for k in ks]
    sum_k = sum(ks)
    if sum_k == 0:  # no scale row exists to build a map over: D = C or zeros, on the device
        write_empty_product(d, c)
        return
    if c is not None and not _dense.ACCUMULATE_C_IN_KERNEL_1D1D:
        # A/B switch shared with the dense 1D1D path: the kernel writes A @ B^T, C is added after.
        tmp = torch.empty(d.shape, dtype=torch.float32, device=d.device)
        k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, tmp, ks, None, config)
        torch.add(c, tmp, out=d)
        return

    if sfa.shape[0] != sum_k // 128 or sfb.shape[0] != sum_k // 128:
        raise ValueError(f"sm90_fp8_gemm k-grouped: sfa / sfb need sum(ks)/128 = {sum_k // 128} rows, got "
                         f"{sfa.shape[0]} / {sfb.shape[0]}")
    rows = num_groups * m
    sfa, sfa_ld = _rows_for_tma(sfa, m)
    sfb, sfb_ld = _rows_for_tma(sfb, n)
    d2 = _as_rows(d, rows, n)
    out = None
    if d2 is None:  # group stride of d is not M rows: compute into a compact copy, then copy back
        out = d.contiguous() if c is d else torch.empty((num_groups, m, n), dtype=torch.float32, device=d.device)
        d2 = out.view(rows, n)
    ldd = _pitch(d2)
    c2 = None
    if c is d:
        c2 = d2
    elif c is not None:
        c2 = _as_rows(c, rows, n)
        if c2 is None or c2.stride(1) != 1 or (rows > 1 and c2.stride(0) != ldd):  # C uses D's row pitch
            c2 = torch.empty_strided(d2.shape, d2.stride(), dtype=torch.float32, device=d.device)
            c2.copy_(c.reshape(rows, n))

    cfg, fn = plan(m, n, ks, c is not None, d.device.index, config)
    _get_launcher()
    ks_arr = array.array("i", ks)  # int32 [G], converted in C (a ctypes array from *ks is ~5x slower)
    rc = _launcher(fn, a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d2.data_ptr(),
                   None if c2 is None else c2.data_ptr(), ks_arr.buffer_info()[0], num_groups, a.numel(),
                   b.numel(), sfa.shape[0], m, n, ldd, sfa_ld, sfb_ld, cfg.block_m, cfg.block_n, cfg.num_multicast,
                   1 if cfg.multicast_on_a else 0, _dense.epilogue_tma_flag(cfg, c2 is not None), cfg.grid,
                   cfg.smem_bytes,
                   _get_raw_stream(d.device.index))
    if rc != 0:
        raise RuntimeError(
            f"finegemm: sm90_fp8_gemm k-grouped launch failed (G={num_groups}, m={m}, n={n}, sum(ks)={sum_k}, "
            f"block_m={cfg.block_m}, block_n={cfg.block_n}): {jit.error_string(rc)}"
        )
    if out is not None:
        d.copy_(out)
