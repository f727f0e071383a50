"""SM90 FP8 GEMM (recipes (1, 128, 128) "1D2D" and (1, 1, 128) "1D1D"): plan, compile (cached) and launch.

fp8_gemm_nt(a, sfa, b, sfb, d, c=None) writes d = c + sum_kb sfa * sfb * (A_kb @ B_kb^T) for
already-validated CUDA tensors (api/dense_fp8.py). Per call: one dict lookup for the plan
(config + loaded kernel), the scale-layout normalization (no-ops when already in place), and
one ctypes call into the host launcher, which encodes the TMA descriptors and launches.

Split-K plans need a fp32 workspace and per-tile int32 counters. They live in a per-(device,
stream) cache, grown on demand; counters are zeroed once when allocated and the kernel leaves
them at zero, so no memset runs per call. Calls captured into a CUDA graph get buffers of
their own, allocated during capture (the counters' zero-fill becomes part of the graph) and
kept alive for the process — so graph replays never share buffers with eager calls.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
from typing import Optional

import torch

from finegemm import jit, quant, runtime
from finegemm.heuristics.sm90_fp8_gemm import (
    GEMM_GROUPED_CONTIGUOUS,
    GEMM_GROUPED_MASKED,
    GEMM_K_GROUPED,
    FP8_BLOCK_MS,
    GEMM_NORMAL,
    MAX_BLOCK_N_LEAN_LOOP,
    Fp8GemmConfig,
    b_group_fits,
    make_grouped_config,
    select_config,
    select_grouped_config,
    serial_halves,
)
from finegemm.ops.contiguous_layout import checked_group_ids
from finegemm.ops._runtime import (PreparedLaunch, SplitKWorkspace, c_function, check_tile,
                                   fit_grid_to_clusters, is_capturing, l2_promotion_arg, prepare_function,
                                   prepared_handle_functions, raw_stream)
from finegemm.ops._runtime import with_diag_b_group as _with_diag_b_group
from finegemm.quant import get_mn_major_tma_aligned_tensor
from finegemm.utils import align, write_empty_product

__all__ = ["fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
           "k_grouped_fp8_gemm_nt_contiguous", "warmup_shape", "render", "plan", "plan_grouped",
           "representative_configs"]

_TEMPLATE = """\
#include <finegemm/impls/sm90_fp8_gemm_1d2d.cuh>

extern "C" __global__ void __launch_bounds__({threads}, 1) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_sfa, const __grid_constant__ CUtensorMap tmap_d, const float* sfb, void* d, const float* c,
    float* workspace, int* counters, uint32_t m, uint32_t n, uint32_t k, uint32_t ldd,
    uint32_t flags, uint32_t num_splits, const int* grouped, uint32_t num_groups,
    const __grid_constant__ CUtensorMap tmap_a_last) {{
  finegemm::impls::sm90_fp8_gemm_1d2d<{block_m}, {block_n}, {stages}, {out_fp32}, {has_c}, {split_k},
                                      {num_multicast}, {multicast_on_a}, {half_promote}, {tma_store}, {gemm_kind}{k_batch}>(
      &tmap_a, &tmap_b, &tmap_sfa, &tmap_d, sfb, d, c, workspace, counters, m, n, k, ldd, flags, num_splits,
      grouped, num_groups, nullptr, nullptr, &tmap_a_last);
}}
"""


def _with_parameters(template: str, declared: str, passed: str) -> str:
    """_TEMPLATE with kernel parameters appended: `declared` to the entry's list, `passed` (the
    device function's trailing arguments) to its call (each edit must apply: a change of
    _TEMPLATE that breaks one fails at import)."""
    edits = (("const __grid_constant__ CUtensorMap tmap_a_last) {{",
              "const __grid_constant__ CUtensorMap tmap_a_last, " + declared + ") {{"),
             ("&tmap_a_last);", "&tmap_a_last, " + passed + ");"))
    for old, new in edits:
        if template.count(old) != 1:
            raise RuntimeError(f"sm90_fp8_gemm: _TEMPLATE no longer has {old!r} once")
        template = template.replace(old, new)
    return template


# The m-grouped contiguous kind with the layout's rules checked inside the kernel (kLayoutCheck:
# `grouped` is the caller's grouped_layout; scheduler/contiguous_layout_check.cuh): _TEMPLATE's
# parameters, then the check's scratch, the error record and (function index << 8 | log2 alignment).
_TEMPLATE_LAYOUT_CHECKED = _with_parameters(
    _TEMPLATE, "unsigned* layout_scratch, int* layout_record,\n    uint32_t layout_info",
    "layout_scratch, layout_record, layout_info")

# fp8_einsum's heads-packed masked kernel (kHeadsPacked): _TEMPLATE's parameters, then sfa where the
# caller keeps it ([M, G, Kb] fp32) and its three strides in elements; the kernel's sfa warp gathers
# the row scales from there (tmap_sfa is not encoded).
_TEMPLATE_HEADS_PACKED = _with_parameters(
    _TEMPLATE, "const float* sfa_gather, uint32_t sfa_ld_m,\n    uint32_t sfa_ld_g, uint32_t sfa_ld_k",
    "nullptr, nullptr, 0u, sfa_gather, sfa_ld_m, sfa_ld_g, sfa_ld_k")


# Recipe (1, 1, 128): the same kernel with k1D1D; sfb comes through a tensor map (last parameter).
_TEMPLATE_1D1D = """\
#include <finegemm/impls/sm90_fp8_gemm_1d2d.cuh>

extern "C" __global__ void __launch_bounds__({threads}, {min_ctas}) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_sfa, const __grid_constant__ CUtensorMap tmap_d, const float* sfb, void* d, const float* c,
    float* workspace, int* counters, uint32_t m, uint32_t n, uint32_t k, uint32_t ldd,
    uint32_t flags, uint32_t num_splits, const int* grouped, uint32_t num_groups,
    const __grid_constant__ CUtensorMap tmap_sfb) {{
  finegemm::impls::sm90_fp8_gemm_1d2d<{block_m}, {block_n}, {stages}, true, {has_c}, {split_k},
                                      {num_multicast}, {multicast_on_a}, {half_promote}, {tma_store}, 0, true{k_batch}>(
      &tmap_a, &tmap_b, &tmap_sfa, &tmap_d, sfb, d, c, workspace, counters, m, n, k, ldd, flags, num_splits,
      grouped, num_groups, &tmap_sfb);
}}
"""


# K-grouped (recipe (1, 1, 128), scheduler::kGemmKGrouped): A_g / B_g tensor maps per group in a
# __grid_constant__ table (impls/sm90_fp8_k_grouped_params.h), one scale map each over all
# groups' rows; D / C as one [G*M, N] view (tmap_d: (N, M, G), for the TMA epilogue). No split-K,
# no sfb pointer / workspace.
_TEMPLATE_K_GROUPED = """\
#include <finegemm/impls/sm90_fp8_gemm_1d2d.cuh>

extern "C" __global__ void __launch_bounds__({threads}, {min_ctas}) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_sfa, const __grid_constant__ CUtensorMap tmap_sfb, float* d,
    const float* c, uint32_t m, uint32_t n, uint32_t ldd, uint32_t flags,
    const __grid_constant__ finegemm::impls::Sm90Fp8KGroupedParams groups,
    const __grid_constant__ CUtensorMap tmap_d) {{
  finegemm::impls::sm90_fp8_gemm_1d2d<{block_m}, {block_n}, {stages}, true, {has_c}, false,
                                      {num_multicast}, {multicast_on_a}, {half_promote}, {tma_store}, 3, true{k_batch}>(
      nullptr, nullptr, &tmap_sfa, &tmap_d, nullptr, d, c, nullptr, nullptr, m, n, 0, ldd, flags, 1u, nullptr,
      groups.num_slots, &tmap_sfb, &groups);
}}
"""


def _b(x: bool) -> str:
    return "true" if x else "false"


def render(block_m: int, block_n: int, num_stages: int, out_fp32: bool, has_c: bool, split_k: bool,
           num_multicast: int = 1, multicast_on_a: bool = False, half_promote: bool = False,
           tma_store: bool = False, gemm_kind: int = GEMM_NORMAL, one_d_one_d: bool = False,
           k_batch: int = 1, c_stage: bool = False, ctas_per_sm: int = 1,
           head_splits: tuple = (0, 0, 0), layout_check: bool = False, heads_packed: bool = False,
           psum_layout: bool = False, sfa_gather: bool = False, b_group: int = 1) -> str:
    """The instantiation source of one kernel configuration (tma_store: the shared-memory + TMA
    store epilogue; bf16 out, no C, no split-K; gemm_kind: GEMM_NORMAL or an m-grouped kind,
    which has bf16 out, no C, no split-K, no half-promote and clusters sharing A only;
    one_d_one_d: recipe (1, 1, 128), dense or k-grouped kind, fp32 out; tma_store
    there: the fp32 box-ring TMA epilogue (a reduce-add when has_c: C must be D), not with split-K;
    c_stage: that kind's direct epilogue with C, C TMA-loaded into shared memory per tile;
    ctas_per_sm 2 with recipe (1, 1, 128): block_m 64 built for two CTAs per SM, the producer's
    registers handed to the consumers (kCtasPerSm); the 1D2D kernels ignore it, their two-CTA
    tiles run on the registers they compile to); head_splits (left, mid, right) with mid > 0:
    fp8_gemm_nt_skip_head_mid's epilogue, dense kind, bf16 TMA-store tile, each store box within
    one side of a head (the TMA box's columns divide left and right); layout_check: the m-grouped
    contiguous kind reading the caller's plain grouped_layout and checking its rules in a spare
    producer warp (one launch per call instead of the check kernel and the GEMM); psum_layout (with
    layout_check): the caller's grouped_layout is a psum layout (int32 [G] row ends), searched per
    tile and checked by CTA 0's spare warp; heads_packed: the masked kind on A [M, G*K] and D
    [M, G*N] (fp8_einsum's heads as groups), direct stores, or with sfa_gather TMA stores of a bf16
    d without c; sfa_gather (with heads_packed): sfa read in place by a spare producer warp (no
    map), groups all M rows; b_group 2 / 4: B's boxes cover that many k-blocks (dense kind, no head
    splits; the launch's rule is heuristics.b_group_fits)."""
    if k_batch not in (1, 2, 4) or (k_batch > 1 and half_promote):
        raise ValueError(f"k_batch must be 1, 2 or 4 (and 1 with half-promote), got {k_batch}")
    if c_stage and not (one_d_one_d and gemm_kind == GEMM_NORMAL and has_c and not tma_store and not split_k and
                        block_n % 32 == 0):
        raise ValueError("c_stage: recipe (1, 1, 128), dense kind, with C, the direct epilogue, no split-K, "
                         "block_n a multiple of 32")
    if gemm_kind == GEMM_K_GROUPED and (not one_d_one_d or split_k):
        raise ValueError("the k-grouped kind is recipe (1, 1, 128) without split-K")
    if one_d_one_d:
        if ctas_per_sm not in (1, 2) or (ctas_per_sm == 2 and block_m != 64):
            raise ValueError(f"ctas_per_sm {ctas_per_sm}: 1, or 2 with block_m 64")
        if gemm_kind not in (GEMM_NORMAL, GEMM_K_GROUPED) or not out_fp32:
            raise ValueError("recipe (1, 1, 128): dense or k-grouped kind, fp32 out")
        if tma_store and split_k:
            raise ValueError("recipe (1, 1, 128): no TMA-store epilogue with split-K")
        if num_multicast not in (1, 2):
            raise ValueError(f"num_multicast must be 1 or 2, got {num_multicast}")
        if num_multicast == 2 and split_k:
            raise ValueError("split-K and multicast are not combined")
        check_tile(block_m, block_n, block_ms=FP8_BLOCK_MS)
        template = _TEMPLATE_K_GROUPED if gemm_kind == GEMM_K_GROUPED else _TEMPLATE_1D1D
        # The trailing template arguments only as far as they differ from the defaults: the
        # sources (cache keys, cubins) of the configurations that existed before each one stay.
        if ctas_per_sm == 2:
            tail = f", {k_batch}, {_b(c_stage)}, 2"
        else:
            tail = f", {k_batch}, true" if c_stage else f", {k_batch}" if k_batch > 1 else ""
        return template.format(threads=(block_m // 64 + 1) * 128, min_ctas=ctas_per_sm, block_m=block_m,
                               block_n=block_n, stages=num_stages, has_c=_b(has_c), split_k=_b(split_k),
                               num_multicast=num_multicast, multicast_on_a=_b(num_multicast == 2 and multicast_on_a),
                               tma_store=_b(tma_store), half_promote=_b(half_promote), k_batch=tail)
    if gemm_kind not in (GEMM_NORMAL, GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED):
        raise ValueError(f"gemm_kind must be 0, 1 or 2, got {gemm_kind}")
    if gemm_kind != GEMM_NORMAL and (((out_fp32 or has_c) and not heads_packed) or split_k or
                                     (half_promote and not serial_halves(block_m, block_n, half_promote)) or
                                     (num_multicast == 2 and not multicast_on_a)):
        raise ValueError("grouped kinds: bf16 out, no C (fp32 out and C: the heads-packed masked kind only), no "
                         "split-K, multicast on A only, half-promote only as serial halves (block_m 128, "
                         "block_n > 208)")
    if num_multicast not in (1, 2):
        raise ValueError(f"num_multicast must be 1 or 2, got {num_multicast}")
    check_tile(block_m, block_n, block_ms=FP8_BLOCK_MS)
    if has_c and not out_fp32:
        raise ValueError("has_c requires out_fp32")
    if tma_store and (out_fp32 or has_c or split_k):
        raise ValueError("tma_store needs a bf16 output without C and without split-K")
    tail = f", false, {k_batch}" if k_batch > 1 else ""  # k_batch 1: the source it always had
    if tuple(head_splits) != (0, 0, 0):
        left, mid, right = head_splits
        box_cols = tma_store_box_cols(block_n)
        if not (tma_store and gemm_kind == GEMM_NORMAL and mid > 0 and left + right > 0
                and left % box_cols == 0 and right % box_cols == 0):
            raise ValueError(f"head_splits {tuple(head_splits)}: the dense bf16 TMA-store tile, mid > 0, "
                             f"left and right multiples of its {box_cols}-column store box")
        tail = f", false, {k_batch}, false, 1, {left}, {mid}, {right}"
    if b_group != 1:
        if b_group not in (2, 4) or gemm_kind != GEMM_NORMAL or tuple(head_splits) != (0, 0, 0) or \
                num_stages % b_group or (num_multicast == 2 and not multicast_on_a):
            raise ValueError(f"b_group {b_group}: 2 or 4 dividing num_stages, the dense kind without head splits, "
                             f"B not multicast")
        tail = f", false, {k_batch}, false, 1, 0, 0, 0, false, false, false, false, {b_group}"
    template = _TEMPLATE
    if layout_check:
        if gemm_kind != GEMM_GROUPED_CONTIGUOUS or tuple(head_splits) != (0, 0, 0):
            raise ValueError("layout_check: the m-grouped contiguous kind only")
        template = _TEMPLATE_LAYOUT_CHECKED
        tail = f", false, {k_batch}, false, 1, 0, 0, 0, true" + (", false, true" if psum_layout else "")
    elif psum_layout:
        raise ValueError("psum_layout: with layout_check (the m-grouped contiguous kind)")
    if heads_packed:
        if gemm_kind != GEMM_GROUPED_MASKED or tuple(head_splits) != (0, 0, 0):
            raise ValueError("heads_packed: the m-grouped masked kind only")
        if tma_store and (not sfa_gather or out_fp32 or has_c):
            raise ValueError("heads_packed with tma_store: bf16 d, no c, sfa gathered (the shipped kernel)")
        tail = f", false, {k_batch}, false, 1, 0, 0, 0, false, true"
        if sfa_gather:
            if block_m > 128 or block_n > MAX_BLOCK_N_LEAN_LOOP:
                raise ValueError(f"sfa_gather: block_m <= 128 and block_n <= {MAX_BLOCK_N_LEAN_LOOP} (the lean "
                                 f"tiles, whose spare producer warp gathers sfa), got {block_m} x {block_n}")
            template = _TEMPLATE_HEADS_PACKED
            tail += ", false, true"
    elif sfa_gather:
        raise ValueError("sfa_gather: with heads_packed only")
    return template.format(threads=(block_m // 64 + 1) * 128, block_m=block_m, block_n=block_n,
                            stages=num_stages, out_fp32=_b(out_fp32), has_c=_b(has_c), split_k=_b(split_k),
                            num_multicast=num_multicast, multicast_on_a=_b(num_multicast == 2 and multicast_on_a),
                            half_promote=_b(half_promote), tma_store=_b(tma_store), gemm_kind=gemm_kind,
                            k_batch=tail)


def tma_store_box_cols(block_n: int) -> int:
    """Columns of one TMA store box of the bf16 epilogue: the largest swizzle span (128, 64 or 32
    bytes) dividing a row of the tile, in bf16 elements (epilogue::TmaStoreBf16::kBoxCols)."""
    row_bytes = block_n * 2
    return (128 if row_bytes % 128 == 0 else 64 if row_bytes % 64 == 0 else 32) // 2


def _render_cfg(cfg: Fp8GemmConfig) -> str:
    return render(cfg.block_m, cfg.block_n, cfg.num_stages, cfg.out_fp32, cfg.has_c, cfg.split_k,
                  cfg.num_multicast, cfg.multicast_on_a, cfg.half_promote, cfg.tma_store, cfg.gemm_kind,
                  cfg.one_d_one_d, cfg.k_batch, cfg.c_stage, cfg.ctas_per_sm, cfg.head_splits, cfg.layout_check,
                  cfg.heads_packed, cfg.psum_layout, cfg.sfa_gather, cfg.b_group)


def _kernel_name(cfg: Fp8GemmConfig) -> str:
    return (f"sm90_fp8_gemm_1d2d_bm{cfg.block_m}_bn{cfg.block_n}_s{cfg.num_stages}"
            f"{'_f32' if cfg.out_fp32 else '_bf16'}{'_c' if cfg.has_c else ''}{'_splitk' if cfg.split_k else ''}"
            f"{('_mca' if cfg.multicast_on_a else '_mcb') if cfg.num_multicast == 2 else ''}"
            f"{'_hp' if cfg.half_promote else ''}{'_tmas' if cfg.tma_store else ''}"
            f"{_KIND_SUFFIX[cfg.gemm_kind]}{'_1d1d' if cfg.one_d_one_d else ''}"
            f"{f'_kb{cfg.k_batch}' if cfg.k_batch > 1 else ''}{'_cst' if cfg.c_stage else ''}"
            f"{'_2cta' if cfg.one_d_one_d and cfg.ctas_per_sm == 2 else ''}"
            f"{'_hs{}_{}_{}'.format(*cfg.head_splits) if tuple(cfg.head_splits) != (0, 0, 0) else ''}"
            f"{'_lchk' if cfg.layout_check else ''}{'_psum' if cfg.psum_layout else ''}"
            f"{'_heads' if cfg.heads_packed else ''}{'_sfag' if cfg.sfa_gather else ''}"
            f"{f'_bg{cfg.b_group}' if cfg.b_group > 1 else ''}")


_KIND_SUFFIX = {GEMM_NORMAL: "", GEMM_GROUPED_CONTIGUOUS: "_gcont", GEMM_GROUPED_MASKED: "_gmask",
                GEMM_K_GROUPED: "_kgrp"}


# ----------------------------------------------------------------------------- host launcher
_launcher = None
_launcher_1d1d = None
_launcher_lock = threading.Lock()


def _get_launcher():
    global _launcher
    if _launcher is None:
        with _launcher_lock:
            if _launcher is None:
                lib = jit.host_library()
                u64, vp, i = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
                f = c_function(lib, "fg_launch_sm90_fp8_gemm",
                               [u64, vp, vp, vp, vp, vp, vp, vp, vp,  # fn, a, b, sfa, sfb, d, c, ws, counters
                                i, i, i, i, i, i, i,  # m, n, k, lda, ldb, ldd, sfa_ld
                                i, i, i, i, i,  # block_m, block_n, num_splits, num_multicast, multicast_on_a
                                i, i, i, i,  # out_fp32, tma_store, grid, smem
                                i, vp, i, i,  # gemm_kind, grouped, num_groups, l2_promotion
                                u64])  # stream
                f1 = c_function(lib, "fg_launch_sm90_fp8_gemm_1d1d",
                                [u64, vp, vp, vp, vp, vp, vp, vp, vp,  # fn, a, b, sfa, sfb, d, c, ws, counters
                                 i, i, i, i, i, i, i, i,  # m, n, k, lda, ldb, ldd, sfa_ld, sfb_ld
                                 i, i, i, i, i,  # block_m, block_n, num_splits, num_multicast, multicast_on_a
                                 i, i, i,  # tma_store, grid, smem
                                 u64])  # stream
                # fp8_gemm_nt_skip_head_mid's fused launch: the same arguments, then d's width and
                # the head splits, before the stream.
                fh = c_function(lib, "fg_launch_sm90_fp8_gemm_head_splits", f.argtypes[:-1] + [i, i, i, i, u64])
                global _launcher_1d1d, _launcher_prepare, _launcher_prepare_1d1d, _launch_prepared, _free_prepared
                global _launcher_head_splits, _launcher_prepare_head_splits
                global _launcher_layout_checked, _launcher_prepare_layout_checked
                # The m-grouped contiguous launch with the in-kernel layout check: the same arguments,
                # then the check's scratch, the error record and layout_info, before the stream.
                fl = c_function(lib, "fg_launch_sm90_fp8_gemm_layout_checked", f.argtypes[:-1] + [vp, vp, i, u64])
                _launcher_layout_checked = fl
                _launcher_prepare_layout_checked = prepare_function(lib, "fg_prepare_sm90_fp8_gemm_layout_checked",
                                                                    fl.argtypes, 7)
                _launcher_1d1d = f1
                # fp8_einsum's masked launch with the heads packed along K and N (fg_launch_sm90_fp8_gemm's
                # arguments); with sfa gathered in place (sfa_ld: sfa's row stride), then sfa's head and
                # k-block strides, before the stream.
                global _launcher_heads_packed, _launcher_heads_packed_gather, _launcher_prepare_heads_packed_gather
                _launcher_heads_packed = c_function(lib, "fg_launch_sm90_fp8_gemm_heads_packed", f.argtypes)
                fhg = c_function(lib, "fg_launch_sm90_fp8_gemm_heads_packed_gather", f.argtypes[:-1] + [i, i, u64])
                _launcher_heads_packed_gather = fhg
                _launcher_prepare_heads_packed_gather = prepare_function(
                    lib, "fg_prepare_sm90_fp8_gemm_heads_packed_gather", fhg.argtypes, 7)
                _launcher_head_splits = fh
                _launcher_prepare_head_splits = prepare_function(lib, "fg_prepare_sm90_fp8_gemm_head_splits",
                                                                 fh.argtypes, 7)
                _launcher_prepare = prepare_function(lib, "fg_prepare_sm90_fp8_gemm", f.argtypes, 7)
                _launcher_prepare_1d1d = prepare_function(lib, "fg_prepare_sm90_fp8_gemm_1d1d", f1.argtypes, 7)
                _launch_prepared, _free_prepared = prepared_handle_functions(lib, "sm90_fp8_gemm")
                _launcher = f
    return _launcher


_launcher_prepare = _launcher_prepare_1d1d = _launch_prepared = _free_prepared = None
_launcher_head_splits = _launcher_prepare_head_splits = None
_launcher_layout_checked = _launcher_prepare_layout_checked = None
_launcher_heads_packed = _launcher_heads_packed_gather = _launcher_prepare_heads_packed_gather = None


# ----------------------------------------------------------------------------- plans
def with_diag_b_group(cfg):
    """The selected config with FINEGEMM_DIAG_B_GROUP's B group where it fits (ops/_runtime.py)."""
    return _with_diag_b_group(cfg, b_group_fits)


_plans: dict[tuple, tuple[Fp8GemmConfig, int]] = {}  # (m, n, k, out_fp32, has_c, sms, device) -> (cfg, fn)
_plans_lock = threading.Lock()


def _load(cfg: Fp8GemmConfig, device: int) -> int:
    with torch.cuda.device(device):
        k = jit.load_kernel(_kernel_name(cfg), _render_cfg(cfg), smem_bytes=cfg.smem_bytes)
    return k.fn


def _fit_clusters(cfg: Fp8GemmConfig, fn: int) -> Fp8GemmConfig:
    """A persistent grid must fit on the GPU at once: 2-CTA clusters (GPC boundaries can leave
    SMs unpaired) and two CTAs per SM (the compiled register count decides whether they fit):
    shrink it to the occupancy the driver reports."""
    if cfg.num_multicast == 1 and cfg.ctas_per_sm == 1:
        return cfg
    return fit_grid_to_clusters(cfg, fn, cfg.num_multicast)


def plan(m: int, n: int, k: int, out_fp32: bool, has_c: bool, device: int,
         one_d_one_d: bool = False, config: Optional[Fp8GemmConfig] = None) -> tuple[Fp8GemmConfig, int]:
    """(config, CUfunction) for a problem on `device` (cached; compiles on first use). `config`
    forces a configuration (the tuner; heuristics.make_config / candidate_configs build them)."""
    if config is not None:
        if (config.m, config.n, config.k, config.out_fp32, config.has_c, config.one_d_one_d) != \
                (m, n, k, out_fp32, has_c, one_d_one_d):
            raise ValueError(f"sm90_fp8_gemm: forced config is for {(config.m, config.n, config.k)}, "
                             f"the problem is {(m, n, k)}")
        if config.b_group != 1 and not b_group_fits(config, config.b_group):
            raise ValueError(f"sm90_fp8_gemm: b_group {config.b_group} needs 2 or 4 dividing num_stages, the dense "
                             f"kind, B not multicast, K % 128 == 0, N % 8 == 0 and whole groups per split")
        fn = _load(config, device)
        return _fit_clusters(config, fn), fn
    num_sms = runtime.get_num_sms()
    # Hot path (a call with new tensors plans again): the key holds no environment reads; tuned
    # tables are consulted once per shape (README: set FINEGEMM_TUNED_FILE before the first call).
    key = (m, n, k, out_fp32, has_c, num_sms, device, one_d_one_d)
    p = _plans.get(key)
    if p is None:
        # Two CTAs per SM only when every SM may be used (a set_num_sms limit is a limit on SMs).
        whole = num_sms >= torch.cuda.get_device_properties(device).multi_processor_count
        cfg = select_config(m, n, k, num_sms, out_fp32, has_c, one_d_one_d=one_d_one_d, allow_two_cta=whole)
        cfg = with_diag_b_group(cfg)
        fn = _load(cfg, device)
        p = (_fit_clusters(cfg, fn), fn)
        with _plans_lock:
            _plans[key] = p
    return p


# ----------------------------------------------------------------------------- split-K buffers
_workspace = SplitKWorkspace()
_buffers = _workspace.buffers  # (device, stream) -> (workspace, counters); the GPU tests inspect it


def _split_buffers(cfg: Fp8GemmConfig, device: torch.device, stream: int) -> tuple[int, int]:
    return _workspace.pointers(cfg.workspace_floats, cfg.num_counters, device, stream)


# ----------------------------------------------------------------------------- entry points
def _aligned16(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0


def _sfa_for_tma(sfa: torch.Tensor, m: int) -> tuple[torch.Tensor, int]:
    """sfa [M, Kb] -> (MN-major, TMA-aligned tensor, its Kb stride in elements)."""
    if sfa.dtype != torch.float32:
        sfa = sfa.float()
    sfa = get_mn_major_tma_aligned_tensor(sfa)
    ld = sfa.stride(1) if sfa.shape[1] > 1 else align(m, 4)
    if ld % 4 or ld < m or not _aligned16(sfa):
        # A user tensor that already had the layout but sits at an unaligned offset: copy.
        fresh = torch.empty((sfa.shape[1], align(m, 4)), dtype=torch.float32, device=sfa.device)
        fresh[:, :m].copy_(sfa.t())
        sfa = fresh[:, :m].t()
        ld = align(m, 4)
    return sfa, ld


# Module-level names (tests monkeypatch them): the shared plumbing of ops/_runtime.py.
_get_raw_stream = raw_stream
_is_capturing = is_capturing


class PreparedCall(PreparedLaunch):
    """A prepared launch of the SM90 FP8 kernel, recipe (1, 128, 128) (ops/_runtime.PreparedLaunch)."""

    __slots__ = ()
    # Module-level names of the ctypes functions (looked up per call: tests substitute the launcher).
    _ns = globals()
    _names = ("_launcher", "_launcher_prepare", "_launch_prepared", "_free_prepared")
    _cluster_symbol = "fg_sm90_fp8_gemm_prepared_cluster"
    _split_buffers_symbol = "fg_sm90_fp8_gemm_prepared_split_buffers"
    _rebind_symbol = "fg_rebind_prepared_sm90_fp8_gemm"  # dense recipe (1, 128, 128) only: subclasses clear it
    _what = "sm90_fp8_gemm"

    def _describe(self) -> str:
        cfg = self.cfg
        m, n, k = self._tail[:3]
        return (f"{self._what} (m={m}, n={n}, k={k}, block_m={cfg.block_m}, block_n={cfg.block_n}, "
                f"splits={cfg.num_splits})")


def _c_like_d(c: torch.Tensor, d: torch.Tensor, m: int, keepalive: list) -> torch.Tensor:
    """C as the kernel reads it: d's row pitch (the epilogue indexes both with ldd). Copies (and
    records the temporary in keepalive) only when c's layout differs; c may be d itself."""
    if c is d or (c.stride(1) == 1 and (m <= 1 or c.stride(0) == d.stride(0))):
        return c
    c2 = torch.empty_strided(d.shape, d.stride(), dtype=torch.float32, device=d.device)
    c2.copy_(c)
    keepalive.append(c2)
    return c2


def prepare(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
            c: Optional[torch.Tensor] = None, recipe=(1, 128, 128),
            config: Optional[Fp8GemmConfig] = None) -> Optional[PreparedCall]:
    """Plan (and compile on first use) the launch of d = c + A @ B^T; None when M or N is 0.

    a fp8 e4m3 [M, K] (K-major, 16-byte row pitch and base), sfa fp32 [M, ceil(K/128)] (any
    strides; the MN-major TMA-aligned layout costs no copy), b fp8 [N, K] like a, sfb fp32
    [ceil(N/128), ceil(K/128)], d bf16/fp32 [M, N] (unit column stride), c fp32 [M, N] or None
    (fp32 d only; may be d itself). `config`: a forced configuration (see plan()).
    The call holds raw device pointers, not the tensors: keep them alive while it is called.
    """
    if tuple(recipe) == (1, 1, 128):
        return _prepare_1d1d(a, sfa, b, sfb, d, c, config)
    if tuple(recipe) != (1, 128, 128):
        raise NotImplementedError(f"sm90_fp8_gemm: recipe {tuple(recipe)} is not supported by this kernel")
    if a.shape[0] == 0 or b.shape[0] == 0:
        return None
    cfg, head, tail, keepalive = _launch_arguments(a, sfa, b, sfb, d, c, config)
    return PreparedCall(cfg, head, tail, d.device, not keepalive, keepalive)


def _launch_arguments(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                      c: Optional[torch.Tensor], config: Optional[Fp8GemmConfig],
                      ldd: Optional[int] = None) -> tuple:
    """(config, launcher head, launcher tail, temporaries) of a recipe (1, 128, 128) call with M, N > 0
    (prepare()'s arguments; ldd: d's row pitch where it is not d.stride(0))."""
    m, k = a.shape
    n = b.shape[0]
    out_fp32 = d.dtype == torch.float32
    has_c = c is not None
    if has_c and not out_fp32:
        raise ValueError("sm90_fp8_gemm: c is only supported with an fp32 d")
    if k % 16 or k == 0:
        raise ValueError(f"sm90_fp8_gemm: K must be a positive multiple of 16, got {k}")

    keepalive = []
    sfa_in = sfa
    sfa, sfa_ld = _sfa_for_tma(sfa, m)
    if sfa is not sfa_in:
        keepalive.append(sfa)
    sfb_in = sfb
    sfb = _sfb_for_kernel(sfb)
    if sfb is not sfb_in:
        keepalive.append(sfb)
    if has_c:
        c = _c_like_d(c, d, m, keepalive)

    device = d.device
    cfg, fn = plan(m, n, k, out_fp32, has_c, device.index, config=config)
    _get_launcher()
    # The row stride of a one-row operand is never used (and torch may report anything for a
    # size-1 dim): pass the natural one so the TMA descriptor checks see a valid pitch.
    lda = a.stride(0) if m > 1 else align(k, 16)
    ldb = b.stride(0) if n > 1 else align(k, 16)
    if ldd is None:
        ldd = d.stride(0) if m > 1 else align(n, 8)
    head = (fn, a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d.data_ptr(),
            c.data_ptr() if has_c else None)
    tail = (m, n, k, lda, ldb, ldd, sfa_ld,
            cfg.block_m, cfg.block_n, cfg.num_splits, cfg.num_multicast, 1 if cfg.multicast_on_a else 0,
            1 if out_fp32 else 0, 1 if cfg.tma_store else 0, cfg.grid, cfg.smem_bytes, GEMM_NORMAL, None, 1,
            l2_promotion_arg(cfg.l2_promotion, cfg.b_group))
    return cfg, head, tail, keepalive


class PreparedHeadSplitsCall(PreparedCall):
    """fp8_gemm_nt_skip_head_mid's fused launch (a kernel built with head splits; its own host
    launcher: D's map over D's full width)."""

    __slots__ = ()
    _rebind_symbol = "fg_rebind_prepared_sm90_fp8_head_splits"  # D's map over d's full width re-pointed
    _names = ("_launcher_head_splits", "_launcher_prepare_head_splits", "_launch_prepared", "_free_prepared")
    _what = "sm90_fp8_gemm (head splits)"


_head_split_plans: dict[tuple, Optional[Fp8GemmConfig]] = {}


def _head_split_config(m: int, n: int, k: int, head_splits: tuple, device: int) -> Optional[Fp8GemmConfig]:
    """The plain call's configuration with the head splits' epilogue, or None where that epilogue
    cannot serve it (the plan is not a bf16 TMA-store tile without split-K, or a store box would
    straddle two sides of a head); cached per shape."""
    key = (m, n, k, head_splits, runtime.get_num_sms(), device)
    if key not in _head_split_plans:
        cfg, _ = plan(m, n, k, False, False, device)
        left, _mid, right = head_splits
        box = tma_store_box_cols(cfg.block_n)
        fits = (cfg.tma_store and not cfg.split_k and cfg.gemm_kind == GEMM_NORMAL and left % box == 0
                and right % box == 0)
        _head_split_plans[key] = dataclasses.replace(cfg, head_splits=head_splits) if fits else None
    return _head_split_plans[key]


def prepare_skip_head_mid(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                          head_splits: tuple) -> Optional[PreparedHeadSplitsCall]:
    """The fused launch of d's head columns = A @ B^T (recipe (1, 128, 128); d bf16 [M, N + (N /
    (left + right)) * mid], validated by the caller, mid > 0, M and N > 0), or None where it does not
    apply (fp32 d, a tile without the TMA store, a store box across a side, d's base or pitch off
    16 bytes): the caller then writes a scratch and copies (api/skip_head_mid.py)."""
    m, k = a.shape
    n = b.shape[0]
    d_cols = d.shape[1]
    ldd = d.stride(0) if m > 1 else align(d_cols, 8)
    if d.dtype != torch.bfloat16 or d.data_ptr() % 16 or ldd % 8 or d_cols % 8:
        return None
    cfg = _head_split_config(m, n, k, tuple(head_splits), d.device.index)
    if cfg is None:
        return None
    cfg, head, tail, keepalive = _launch_arguments(a, sfa, b, sfb, d, None, cfg, ldd=ldd)
    return PreparedHeadSplitsCall(cfg, head, tail + (d_cols, *head_splits), d.device, not keepalive, keepalive)


class PreparedCall1d1d(PreparedCall):
    """A PreparedCall of the recipe (1, 1, 128) kernel (its own host launcher: sfb through TMA)."""

    __slots__ = ()
    _rebind_symbol = ""  # another prepare entry (its maps differ): a moved call encodes itself anew
    _names = ("_launcher_1d1d", "_launcher_prepare_1d1d", "_launch_prepared", "_free_prepared")
    _what = "sm90_fp8_gemm (1, 1, 128)"


# Recipe (1, 1, 128) with C: True = the kernel's C epilogue (one pass over d); False = the kernel
# writes a temporary and C is added after it (_AccumulateAfter: one extra fp32 M x N write + read).
# The in-kernel path had a race (shared-memory scale loads still in flight when the stage was
# released: fixed with a proxy fence before the release, impls/sm90_fp8_gemm_1d2d.cuh); the
# fallback stays for A/B checks (scripts/probe_determinism.py).
ACCUMULATE_C_IN_KERNEL_1D1D = True

# Recipe (1, 1, 128) with c = d and a TMA-epilogue config: D += tile by TMA reduce-add (at L2), the
# same fp32 add as the direct epilogue's C + tile on normal values. FINEGEMM_NO_TMA_REDUCE_ADD=1
# (read once, at import) keeps the direct epilogue there instead: one GPU run of four saw subnormal
# C values change under the reduce-add (benchmarks/NOTES.md v0.23).
TMA_REDUCE_ADD = os.environ.get("FINEGEMM_NO_TMA_REDUCE_ADD", "0") in ("", "0")


def epilogue_tma_flag(cfg: Fp8GemmConfig, has_c: bool) -> int:
    """The launcher's tma_store argument of a recipe (1, 1, 128) call (0: direct epilogue)."""
    return 1 if cfg.tma_store and (TMA_REDUCE_ADD or not has_c) else 0


class _AccumulateAfter:
    """Recipe (1, 1, 128) with C, ACCUMULATE_C_IN_KERNEL_1D1D False: the kernel writes A @ B^T
    into a temporary, then d = c + tmp."""

    __slots__ = ("cfg", "_inner", "_c", "_d", "_tmp")
    cacheable = False  # the temporary is per call

    def __init__(self, inner, c, d, tmp):
        self.cfg, self._inner, self._c, self._d, self._tmp = inner.cfg, inner, c, d, tmp

    def __call__(self) -> None:
        self._inner()
        torch.add(self._c, self._tmp, out=self._d)


def _prepare_1d1d(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                  c: Optional[torch.Tensor], config: Optional[Fp8GemmConfig] = None):
    if c is not None and not ACCUMULATE_C_IN_KERNEL_1D1D:
        if a.shape[0] == 0 or b.shape[0] == 0:
            return None
        if config is None:
            config = select_config(a.shape[0], b.shape[0], a.shape[1], runtime.get_num_sms(), True, True,
                                   one_d_one_d=True)
        tmp = torch.empty(d.shape, dtype=torch.float32, device=d.device)
        inner = _prepare_1d1d_kernel(a, sfa, b, sfb, tmp, None, dataclasses.replace(config, has_c=False))
        return None if inner is None else _AccumulateAfter(inner, c, d, tmp)
    return _prepare_1d1d_kernel(a, sfa, b, sfb, d, c, config)


def _prepare_1d1d_kernel(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                         c: Optional[torch.Tensor], config: Optional[Fp8GemmConfig] = None) -> Optional[PreparedCall]:
    """prepare() for recipe (1, 1, 128): sfb fp32 [N, ceil(K/128)] (any strides; converted to the
    MN-major TMA-aligned layout like sfa, a no-op when already in it), d fp32, c fp32 or None."""
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return None
    if d.dtype != torch.float32:
        raise ValueError("sm90_fp8_gemm: recipe (1, 1, 128) needs an fp32 d")
    has_c = c is not None
    if k % 16 or k == 0:
        raise ValueError(f"sm90_fp8_gemm: K must be a positive multiple of 16, got {k}")

    keepalive = []
    sfa_in, sfb_in = sfa, sfb
    sfa, sfa_ld = _sfa_for_tma(sfa, m)
    if sfa is not sfa_in:
        keepalive.append(sfa)
    sfb, sfb_ld = _sfa_for_tma(sfb, n)
    if sfb is not sfb_in:
        keepalive.append(sfb)
    if has_c:
        c = _c_like_d(c, d, m, keepalive)

    device = d.device
    cfg, fn = plan(m, n, k, True, has_c, device.index, one_d_one_d=True, config=config)
    _get_launcher()
    lda = a.stride(0) if m > 1 else align(k, 16)
    ldb = b.stride(0) if n > 1 else align(k, 16)
    ldd = d.stride(0) if m > 1 else align(n, 8)
    head = (fn, a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d.data_ptr(),
            c.data_ptr() if has_c else None)
    tail = (m, n, k, lda, ldb, ldd, sfa_ld, sfb_ld,
            cfg.block_m, cfg.block_n, cfg.num_splits, cfg.num_multicast, 1 if cfg.multicast_on_a else 0,
            epilogue_tma_flag(cfg, has_c), cfg.grid, cfg.smem_bytes)
    return PreparedCall1d1d(cfg, head, tail, device, not keepalive, keepalive)


def fp8_gemm_nt(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor, d: torch.Tensor,
                c: Optional[torch.Tensor] = None, recipe=(1, 128, 128)) -> None:
    """d = c + A @ B^T with 1x128 (A) and 128x128 (B) fp32 block scales, on the current stream
    (arguments as in prepare())."""
    call = prepare(a, sfa, b, sfb, d, c, recipe)
    if call is not None:
        call()


# ----------------------------------------------------------------------------- k-grouped (MoE wgrad)
# True: one persistent launch for all groups (ops/sm90_fp8_k_grouped.py, scheduler kind
# GEMM_K_GROUPED). False: the v1 path, one dense 1D1D launch per non-empty group (kept for A/B
# measurements and as a fallback).
K_GROUPED_SINGLE_LAUNCH = True


def k_grouped_fp8_gemm_nt_contiguous(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                     d: torch.Tensor, ks, c: Optional[torch.Tensor] = None) -> None:
    """D_g = C_g + A_g @ B_g^T (recipe (1, 1, 128)) for every group g, on the current stream.

    a fp8 1-D (A_g [M, k_g] row-major one after another), sfa fp32 [sum(ks)/128, M] (group g's
    [k_g/128, M] block after the previous ones), b / sfb likewise with N, d fp32 [G, M, N], c fp32
    [G, M, N] or None (may be d), ks: Python ints, multiples of 128 (0: D_g = C_g or zeros).

    K_GROUPED_SINGLE_LAUNCH (default): one persistent launch over all groups' tiles (one per 64
    groups; ops/sm90_fp8_k_grouped.py). Otherwise _k_grouped_per_group_launches (v1).
    """
    if K_GROUPED_SINGLE_LAUNCH:
        from finegemm.ops import sm90_fp8_k_grouped  # imports this module: resolved at call time

        sm90_fp8_k_grouped.k_grouped_fp8_gemm_nt_contiguous(a, sfa, b, sfb, d, ks, c)
        return
    _k_grouped_per_group_launches(a, sfa, b, sfb, d, ks, c)


def _k_grouped_per_group_launches(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                  d: torch.Tensor, ks, c: Optional[torch.Tensor] = None) -> None:
    """v1 of k_grouped_fp8_gemm_nt_contiguous: G launches of the dense 1D1D kernel, one per
    non-empty group (each group's scale block is already the MN-major [Kb_g, M] layout the kernel
    reads: no copy when M % 4 == 0 and the rows are contiguous); empty groups get C or zeros."""
    num_groups, m, n = d.shape
    a_off = b_off = kb_off = 0
    for g in range(num_groups):
        kg = int(ks[g])
        kb = kg // 128
        if kg == 0:
            dg = d[g]
            write_empty_product(dg, None if c is None else (dg if c is d else c[g]))
        else:
            a_g = a[a_off:a_off + m * kg].view(m, kg)
            b_g = b[b_off:b_off + n * kg].view(n, kg)
            sfa_g = sfa[kb_off:kb_off + kb].t()  # [M, Kb_g], MN-major
            sfb_g = sfb[kb_off:kb_off + kb].t()  # [N, Kb_g], MN-major
            fp8_gemm_nt(a_g, sfa_g, b_g, sfb_g, d[g], None if c is None else c[g], (1, 1, 128))
        a_off += m * kg
        b_off += n * kg
        kb_off += kb


# ----------------------------------------------------------------------------- m-grouped (MoE)
def plan_grouped(kind: int, m: int, n: int, k: int, num_groups: int, expected_m: int, alignment: int,
                 device: int, config: Optional[Fp8GemmConfig] = None) -> tuple[Fp8GemmConfig, int]:
    """(config, CUfunction) of an m-grouped problem (cached; compiles on first use). `config`
    forces a configuration (the tuner: heuristics.grouped_candidate_configs)."""
    if config is not None:
        if (config.gemm_kind, config.m, config.n, config.k, config.num_groups) != (kind, m, n, k, num_groups):
            raise ValueError("sm90_fp8_gemm: forced grouped config does not match the problem")
        fn = _load(config, device)
        return _fit_clusters(config, fn), fn
    num_sms = runtime.get_num_sms()
    key = ("grouped", kind, m, n, k, num_groups, expected_m, alignment, num_sms, device)
    p = _plans.get(key)
    if p is None:
        cfg = select_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment)
        fn = _load(cfg, device)
        p = (_fit_clusters(cfg, fn), fn)
        with _plans_lock:
            _plans[key] = p
    return p


def _sfb_for_kernel(sfb: torch.Tensor) -> torch.Tensor:
    """The 128x128 B scales as the kernels read them through a pointer: fp32, contiguous (a copy
    only where sfb is not)."""
    return sfb if sfb.dtype == torch.float32 and sfb.is_contiguous() else sfb.float().contiguous()


def _rows_2d(t: torch.Tensor) -> torch.Tensor:
    """[G, R, K] -> the [G*R, K] view the tensor maps cover (a contiguous copy when the group
    stride is not R rows)."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.contiguous().view(-1, t.shape[-1])


def _row_pitch(t2: torch.Tensor, inner: int, elems_16b: int) -> int:
    # The row stride of a one-row view is never used (torch may report anything): a valid pitch.
    return t2.stride(0) if t2.shape[0] > 1 else align(inner, elems_16b)


GROUPED_TAIL_POINTER = 17  # where _grouped_arguments' tail holds `grouped` (masked_m or the ids)


def _grouped_arguments(cfg: Fp8GemmConfig, fn: int, a2, sfa, sfa_ld, b2, sfb, d2, m, n, k, grouped,
                       num_groups) -> tuple[tuple, tuple]:
    """The launcher's arguments of an m-grouped call before and after (workspace, counters)."""
    head = (fn, a2.data_ptr(), b2.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d2.data_ptr(), None)
    tail = (m, n, k, _row_pitch(a2, k, 16), _row_pitch(b2, k, 16), _row_pitch(d2, n, 8), sfa_ld,
            cfg.block_m, cfg.block_n, 1, cfg.num_multicast, 1 if cfg.multicast_on_a else 0, 0,
            1 if cfg.tma_store else 0, cfg.grid, cfg.smem_bytes, cfg.gemm_kind, grouped.data_ptr(),
            num_groups, l2_promotion_arg(cfg.l2_promotion))
    return head, tail


def _launch_grouped(cfg: Fp8GemmConfig, fn: int, *args) -> None:
    _get_launcher()
    head, tail = _grouped_arguments(cfg, fn, *args)
    rc = _launcher(*head, None, None, *tail, _get_raw_stream(args[5].device.index))
    if rc != 0:
        raise RuntimeError(
            f"finegemm: sm90_fp8_gemm grouped launch failed (kind={cfg.gemm_kind}, G={tail[-2]}, m={tail[0]}, "
            f"n={tail[1]}, k={tail[2]}, block_m={cfg.block_m}, block_n={cfg.block_n}): {jit.error_string(rc)}"
        )


class PreparedGroupedCall(PreparedCall):
    """A PreparedCall of an m-grouped launch (contiguous or masked)."""

    __slots__ = ()
    # The host library copies a masked launch here. A contiguous one on finegemm's ids buffer is
    # never re-pointed (its PreparedContiguous is not cacheable); one checking the layout itself is
    # a PreparedLayoutCheckedCall (its own rebind entry).
    _rebind_symbol = "fg_rebind_prepared_sm90_fp8_masked"
    _tail_pointer_at = (GROUPED_TAIL_POINTER,)  # masked_m / the ids

    def _describe(self) -> str:
        cfg = self.cfg
        m, n, k = self._tail[:3]
        return (f"sm90_fp8_gemm grouped (kind={cfg.gemm_kind}, G={self._tail[-2]}, m={m}, n={n}, k={k}, "
                f"block_m={cfg.block_m}, block_n={cfg.block_n})")


def _check_k(k: int) -> None:
    if k % 16 or k == 0:
        raise ValueError(f"sm90_fp8_gemm: K must be a positive multiple of 16, got {k}")


def m_grouped_fp8_gemm_nt_contiguous(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                     d: torch.Tensor, grouped_layout: torch.Tensor,
                                     use_psum_layout: bool = False, config: Optional[Fp8GemmConfig] = None, *,
                                     checked_ids: bool = False) -> None:
    """d[r] = A[r] @ B[g(r)]^T for every row r (zeros for padding rows), on the current stream.

    a fp8 [M, K], sfa fp32 [M, ceil(K/128)] (any strides), b fp8 [G, N, K], sfb fp32
    [G, ceil(N/128), ceil(K/128)], d bf16 [M, N]; grouped_layout int32 [M] group id per row (-1 =
    padding) whose group segments start at multiples of get_mk_alignment_for_contiguous_layout(),
    or with use_psum_layout int32 [G] cumulative row ends; either is checked and turned into the
    kernel's ids on the GPU (ops/contiguous_layout.py; a broken rule is reported by
    contiguous_layout.check_errors). checked_ids: grouped_layout already is that kernel's output.
    """
    m, k = a.shape
    num_groups, n = b.shape[0], b.shape[1]
    if m == 0 or n == 0 or num_groups == 0:
        return
    _check_k(k)
    alignment = quant.get_mk_alignment_for_contiguous_layout()
    ids = grouped_layout if checked_ids else checked_group_ids(
        "sm90_fp8_gemm.m_grouped_fp8_gemm_nt_contiguous", grouped_layout, m, num_groups, use_psum_layout, alignment)
    cfg, fn, args, _ = _contiguous_arguments(a, sfa, b, sfb, d, ids, config)
    _launch_grouped(cfg, fn, *args)


def _contiguous_arguments(a, sfa, b, sfb, d, ids, config=None) -> tuple:
    """(config, function, _launch_grouped's arguments, copies made) of a contiguous call on
    checked ids."""
    m, k = a.shape
    num_groups, n = b.shape[0], b.shape[1]
    sfa_in, sfb_in = sfa, sfb
    sfa, sfa_ld = _sfa_for_tma(sfa, m)
    b2 = _rows_2d(b)
    sfb = _sfb_for_kernel(sfb)
    cfg, fn = plan_grouped(GEMM_GROUPED_CONTIGUOUS, m, n, k, num_groups, 0,
                           quant.get_mk_alignment_for_contiguous_layout(), d.device.index, config=config)
    copied = sfa is not sfa_in or sfb is not sfb_in or b2.data_ptr() != b.data_ptr()
    return cfg, fn, (a, sfa, sfa_ld, b2, sfb, d, m, n, k, ids, num_groups), copied


class PreparedLayoutCheckedCall(PreparedGroupedCall):
    """An m-grouped contiguous launch of a kernel with the in-kernel layout check (its own host
    launcher: the check's scratch, record and layout_info after the grouped arguments)."""

    __slots__ = ()
    _names = ("_launcher_layout_checked", "_launcher_prepare_layout_checked", "_launch_prepared", "_free_prepared")
    _rebind_symbol = "fg_rebind_prepared_sm90_fp8_contiguous"  # keeps the stream's check scratch

    def _describe(self) -> str:
        cfg = self.cfg
        m, n, k = self._tail[:3]
        return (f"sm90_fp8_gemm grouped contiguous, layout checked in the kernel (G={cfg.num_groups}, m={m}, "
                f"n={n}, k={k}, block_m={cfg.block_m}, block_n={cfg.block_n})")


_layout_checked_functions: dict[tuple, int] = {}


def _layout_checked(cfg: Fp8GemmConfig, device: int, psum: bool = False) -> tuple[Fp8GemmConfig, int]:
    """The plan's configuration with the in-kernel layout check (psum: of a psum layout), and its
    function (compiled on first use). Same tile, stages and grid: only a spare producer warp has
    work (and, psum, the walkers search the ends)."""
    checked = dataclasses.replace(cfg, layout_check=True, psum_layout=psum)
    key = (checked.kernel_key(), device)
    fn = _layout_checked_functions.get(key)
    if fn is None:
        fn = _layout_checked_functions.setdefault(key, _load(checked, device))
    return checked, fn


def _layout_checked_arguments(a, sfa, b, sfb, d, grouped_layout, check: tuple, psum: bool) -> tuple:
    """_contiguous_arguments for the in-kernel check: the config and function with the check, and
    the launcher tail's extra (scratch, record, layout_info)."""
    # The kernel reads G ends (psum) or M ids (plain): a layout of the other form would be read past its end.
    rows = b.shape[0] if psum else a.shape[0]
    if grouped_layout.dim() != 1 or grouped_layout.numel() != rows or grouped_layout.dtype != torch.int32:
        raise ValueError(f"sm90_fp8_gemm: an in-kernel checked {'psum' if psum else 'plain'} layout must be int32 "
                         f"[{rows}], got {grouped_layout.dtype} {tuple(grouped_layout.shape)}")
    cfg, _fn, args, copied = _contiguous_arguments(a, sfa, b, sfb, d, grouped_layout)
    cfg, fn = _layout_checked(cfg, d.device.index, psum)
    return cfg, fn, args, copied, tuple(check)


def m_grouped_fp8_gemm_nt_contiguous_layout_checked(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor,
                                                    sfb: torch.Tensor, d: torch.Tensor, grouped_layout: torch.Tensor,
                                                    check: tuple, psum: bool = False) -> None:
    """m_grouped_fp8_gemm_nt_contiguous in one launch: the kernel reads the caller's plain
    grouped_layout (int32 [M]; psum: int32 [G] row ends) and checks its rules itself. check:
    (scratch, record, layout_info) from ops/contiguous_layout.in_kernel_check (the current
    stream's scratch). M, N, G > 0."""
    _check_k(a.shape[1])
    cfg, fn, args, _, extra = _layout_checked_arguments(a, sfa, b, sfb, d, grouped_layout, check, psum)
    _get_launcher()
    head, tail = _grouped_arguments(cfg, fn, *args)
    rc = _launcher_layout_checked(*head, None, None, *tail, *extra, _get_raw_stream(d.device.index))
    if rc != 0:
        raise RuntimeError(f"finegemm: sm90_fp8_gemm grouped contiguous launch (layout checked in the kernel) "
                           f"failed (G={tail[-2]}, m={tail[0]}, n={tail[1]}, k={tail[2]}, block_m={cfg.block_m}, "
                           f"block_n={cfg.block_n}): {jit.error_string(rc)}")


def prepare_m_grouped_contiguous_layout_checked(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor,
                                                sfb: torch.Tensor, d: torch.Tensor, grouped_layout: torch.Tensor,
                                                check: tuple, psum: bool = False) -> Optional[PreparedLayoutCheckedCall]:
    """prepare_m_grouped_contiguous for the in-kernel check (check: one stream's (scratch, record,
    layout_info); the launch is kept per stream), or None where a launch needs a copy per call."""
    _check_k(a.shape[1])
    cfg, fn, args, copied, extra = _layout_checked_arguments(a, sfa, b, sfb, d, grouped_layout, check, psum)
    if copied:
        return None
    _get_launcher()
    head, tail = _grouped_arguments(cfg, fn, *args)
    return PreparedLayoutCheckedCall(cfg, head, tail + extra, args[5].device, True, [])


def _prepared_grouped(cfg: Fp8GemmConfig, fn: int, args: tuple, copied: bool) -> Optional[PreparedGroupedCall]:
    if copied:  # a temporary copy's contents would go stale in a kept launch
        return None
    _get_launcher()
    head, tail = _grouped_arguments(cfg, fn, *args)
    return PreparedGroupedCall(cfg, head, tail, args[5].device, True, [])


def prepare_m_grouped_contiguous(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                 d: torch.Tensor, ids: torch.Tensor) -> Optional[PreparedGroupedCall]:
    """The prepared launch of m_grouped_fp8_gemm_nt_contiguous on checked ids (the layout check's
    output: every id in [-1, G)) for a kept call (api fast path); None where a launch needs a copy
    of an input per call (then the call stays one-shot). Holds addresses: the caller keeps the
    tensors' addresses valid while it is called. M, N and G > 0."""
    _check_k(a.shape[1])
    return _prepared_grouped(*_contiguous_arguments(a, sfa, b, sfb, d, ids))


def _sfa_masked_for_tma(sfa: torch.Tensor, m_max: int) -> tuple[torch.Tensor, int]:
    """sfa [G, Mmax, Kb] -> MN-major TMA-aligned (strides (Kb * al, 1, al)) and al (elements)."""
    if sfa.dtype != torch.float32:
        sfa = sfa.float()
    sfa = get_mn_major_tma_aligned_tensor(sfa)
    al = align(m_max, 4)
    if not _aligned16(sfa):
        fresh = torch.empty((sfa.shape[0], sfa.shape[2], al), dtype=torch.float32, device=sfa.device)
        out = fresh[..., :m_max].transpose(1, 2)
        out.copy_(sfa)
        sfa = out
    return sfa, al


def m_grouped_fp8_gemm_nt_masked(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                 d: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                 config: Optional[Fp8GemmConfig] = None) -> None:
    """d[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g]^T, other rows of d untouched, on the current
    stream. masked_m (int32 [G], on the GPU) is never read by the host: the kernel clamps it to
    [0, Mmax], so one captured CUDA graph serves any masked_m values. expected_m: planning hint.

    a fp8 [G, Mmax, K], sfa fp32 [G, Mmax, ceil(K/128)], b fp8 [G, N, K], sfb fp32
    [G, ceil(N/128), ceil(K/128)], d bf16 [G, Mmax, N].
    """
    num_groups, m_max, k = a.shape
    n = b.shape[1]
    if num_groups == 0 or m_max == 0 or n == 0:
        return
    _check_k(k)
    try:
        d2, tmp = d.view(-1, n), None
    except RuntimeError:  # group stride of d is not Mmax rows: compute into a copy (rows kept)
        tmp = d.contiguous()
        d2 = tmp.view(-1, n)
    cfg, fn, args, _ = _masked_arguments(a, sfa, b, sfb, d2, masked_m, expected_m, config)
    _launch_grouped(cfg, fn, *args)
    if tmp is not None:
        d.copy_(tmp)


def _masked_arguments(a, sfa, b, sfb, d2, masked_m, expected_m, config=None) -> tuple:
    """(config, function, _launch_grouped's arguments, copies made) of a masked call into d2, the
    [G * Mmax, N] view of d."""
    num_groups, m_max, k = a.shape
    n = b.shape[1]
    a2, b2 = _rows_2d(a), _rows_2d(b)
    sfa_in, sfb_in, masked_in = sfa, sfb, masked_m
    sfa, sfa_ld = _sfa_masked_for_tma(sfa, m_max)
    sfb = _sfb_for_kernel(sfb)
    if masked_m.dtype != torch.int32 or not masked_m.is_contiguous():
        masked_m = masked_m.to(torch.int32).contiguous()
    cfg, fn = plan_grouped(GEMM_GROUPED_MASKED, m_max, n, k, num_groups, int(expected_m), 0, d2.device.index,
                           config=config)
    copied = (sfa is not sfa_in or sfb is not sfb_in or masked_m is not masked_in or a2.data_ptr() != a.data_ptr()
              or b2.data_ptr() != b.data_ptr())
    return cfg, fn, (a2, sfa, sfa_ld, b2, sfb, d2, m_max, n, k, masked_m, num_groups), copied


# ----------------------------------------------------------------------------- fp8_einsum, heads packed
_heads_packed_plans: dict[tuple, tuple[Fp8GemmConfig, int]] = {}


def heads_packed_layouts(a: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None) -> bool:
    """Whether fp8_einsum's A [b, h, r] and d [b, h, n] (and c) are what the heads-packed kernel
    reads and writes in place: each row holds every head side by side (stride(1) == r, resp. n; a
    row pitch of at least h * r / h * n), r % 128 == 0 (no k-box reaches the next head), and c
    with d's strides (the kernel reads C at D's pitch)."""
    batch, heads, r = a.shape
    n = d.shape[2]
    if r % 128 != 0 or a.stride(2) != 1 or d.stride(2) != 1:
        return False
    if c is not None and (batch > 1 or heads > 1) and c.stride() != d.stride():
        return False
    if heads > 1 and (a.stride(1) != r or d.stride(1) != n):
        return False
    return batch == 1 or (a.stride(0) >= heads * r and d.stride(0) >= heads * n)


def heads_packed_config(batch: int, n: int, r: int, heads: int, num_sms: int, out_fp32: bool = False,
                        has_c: bool = False, sfa_gather: bool = False, tma_store: bool = True) -> Fp8GemmConfig:
    """The configuration of fp8_einsum's heads-packed launch: the masked plan's tile for these
    groups (b rows each), with direct stores (the kernel reading sfa's copy); sfa_gather: at most
    128 x MAX_BLOCK_N_LEAN_LOOP (the lean tiles, whose spare producer warp gathers sfa in place),
    and a bf16 d without c whose d is a multiple of the tile's width (no store box reaches the next
    head) is stored through TMA, which overlaps a tile's stores with the next tile's loop (a CTA
    runs b / block_m * h / SMs tiles of only r / 128 k-blocks each), unless tma_store is False
    (FINEGEMM_DISABLE_PATHS=fp8_einsum_tma_store)."""
    from finegemm.heuristics.sm90_fp8_gemm import MAX_STAGES, max_stages

    base = select_grouped_config(GEMM_GROUPED_MASKED, batch, n, r, heads, num_sms, batch, 0)
    block_m, block_n, stages, mc = base.block_m, base.block_n, base.num_stages, base.num_multicast
    tma = False
    if sfa_gather:
        block_m, block_n = min(block_m, 128), min(block_n, MAX_BLOCK_N_LEAN_LOOP)
        tma = tma_store and not out_fp32 and not has_c and n % block_n == 0
        stages = min(stages, max_stages(block_m, block_n, tma, cap=MAX_STAGES))
        mc = mc if block_m == base.block_m else 1
    cfg = make_grouped_config(GEMM_GROUPED_MASKED, batch, n, r, heads, num_sms, batch, 0, block_m, block_n, stages,
                              mc, tma)
    return dataclasses.replace(cfg, heads_packed=True, sfa_gather=sfa_gather, l2_promotion=base.l2_promotion,
                               out_fp32=out_fp32, has_c=has_c)


def plan_heads_packed(batch: int, n: int, r: int, heads: int, device: int, out_fp32: bool = False,
                      has_c: bool = False, sfa_gather: bool = False, tma_store: bool = True
                      ) -> tuple[Fp8GemmConfig, int]:
    """(config, CUfunction) of fp8_einsum's heads-packed launch (cached; compiles on first use)."""
    num_sms = runtime.get_num_sms()
    key = (batch, n, r, heads, out_fp32, has_c, sfa_gather, tma_store, num_sms, device)
    p = _heads_packed_plans.get(key)
    if p is None:
        cfg = heads_packed_config(batch, n, r, heads, num_sms, out_fp32, has_c, sfa_gather, tma_store)
        fn = _load(cfg, device)
        p = _heads_packed_plans.setdefault(key, (_fit_clusters(cfg, fn), fn))
    return p


# The masked_m of fp8_einsum's masked composition and of its heads-packed kernel reading sfa through
# a map (the one gathering sfa reads none): every group full. The kernel clamps each value to
# [0, b], so one buffer of INT32_MAX serves every b and stream: kept per device (never freed: a
# captured graph may hold its address), filled before any launch reads it (one synchronization per
# buffer), grown by a new buffer when more heads come; made per call under capture.
_ALL_ROWS: dict[int, torch.Tensor] = {}
_ALL_ROWS_KEEP: list[torch.Tensor] = []


def all_rows(heads: int, device: torch.device) -> torch.Tensor:
    """int32 [>= heads] of INT32_MAX on `device`: the masked kernel's masked_m of groups that are
    all full (fp8_einsum's heads; slice [:heads] for a [G] argument)."""
    if _is_capturing():
        return torch.full((heads,), 2 ** 31 - 1, dtype=torch.int32, device=device)
    t = _ALL_ROWS.get(device.index)
    if t is None or t.numel() < heads:
        t = torch.full((max(heads, 256),), 2 ** 31 - 1, dtype=torch.int32, device=device)
        torch.cuda.synchronize(device)  # once per buffer: a launch on another stream may read it next
        _ALL_ROWS_KEEP.append(t)
        _ALL_ROWS[device.index] = t
    return t


class PreparedHeadsPackedCall(PreparedCall):
    """A PreparedCall of fp8_einsum's heads-packed launch with sfa read in place (its own host
    launcher: sfa's strides)."""

    __slots__ = ()
    _rebind_symbol = "fg_rebind_prepared_sm90_fp8_heads_packed"  # sfa's pointer re-pointed (no map)
    _names = ("_launcher_heads_packed_gather", "_launcher_prepare_heads_packed_gather", "_launch_prepared",
              "_free_prepared")
    _what = "sm90_fp8_gemm heads-packed (fp8_einsum: m = b, n = d, k = r per head)"


# sfa's strides are 32-bit kernel parameters.
_MAX_STRIDE = 2 ** 31 - 1


def _heads_packed_arguments(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                            d: torch.Tensor, c: Optional[torch.Tensor], sfa_gather: bool,
                            tma_store: bool = True) -> tuple:
    """(config, launcher head, launcher tail, temporaries) of a heads-packed call with b, h, d > 0.
    sfa_gather: sfa read in place (the tail ends with its head and k-block strides); otherwise an
    MN-major TMA-aligned copy of it, read through its map (the tail's sfa_ld: that copy's pitch)."""
    batch, heads, r = a.shape
    n = b.shape[1]
    _check_k(r)
    out_fp32 = d.dtype == torch.float32
    cfg, fn = plan_heads_packed(batch, n, r, heads, d.device.index, out_fp32, c is not None, sfa_gather, tma_store)
    keepalive = []
    sfa_in = sfa
    if not sfa_gather:
        sfa, sfa_ld = _sfa_masked_for_tma(sfa.permute(1, 0, 2), batch)
    elif sfa.dtype != torch.float32 or max(sfa.stride()) > _MAX_STRIDE:  # the kernel reads fp32, 32-bit strides
        sfa = sfa.float().contiguous()
    if sfa is not sfa_in:
        keepalive.append(sfa)
    b2 = _rows_2d(b)
    if b2.data_ptr() != b.data_ptr():
        keepalive.append(b2)
    sfb_in = sfb
    sfb = _sfb_for_kernel(sfb)
    if sfb is not sfb_in:
        keepalive.append(sfb)
    lda = a.stride(0) if batch > 1 else heads * r  # a one-row view's pitch is never stepped over
    ldd = d.stride(0) if batch > 1 else heads * n
    head = (fn, a.data_ptr(), b2.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), d.data_ptr(),
            None if c is None else c.data_ptr())
    if sfa_gather:  # no masked_m: every group full; strides of size-1 dimensions are never used
        sfa_ld = sfa.stride(0) if batch > 1 else 0
        masked_m, strides = None, (sfa.stride(1) if heads > 1 else 0, sfa.stride(2) if sfa.shape[2] > 1 else 0)
    else:
        masked_m, strides = all_rows(heads, d.device).data_ptr(), ()
    tail = (batch, n, r, lda, _row_pitch(b2, r, 16), ldd, sfa_ld, cfg.block_m, cfg.block_n, 1, cfg.num_multicast,
            1 if cfg.multicast_on_a else 0, int(out_fp32), int(cfg.tma_store), cfg.grid, cfg.smem_bytes,
            GEMM_GROUPED_MASKED, masked_m, heads, l2_promotion_arg(cfg.l2_promotion)) + strides
    return cfg, head, tail, keepalive


def fp8_einsum_heads_packed(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                            d: torch.Tensor, c: Optional[torch.Tensor] = None, sfa_gather: bool = False,
                            tma_store: bool = True) -> None:
    """d[:, h] = c[:, h] + A[:, h] @ B[h]^T for every head h, in place (fp8_einsum "bhr,hdr->bhd"),
    on the current stream: the masked kernel with the heads as groups, reading A [b, h*r] and
    writing D [b, h*n] row by row (heads_packed_layouts(a, d, c) must hold). sfa [b, h, ceil(r/128)]
    (any strides; sfa_gather: read in place, else through an MN-major copy), B [h, n, r], sfb
    [h, ceil(n/128), ceil(r/128)], d bf16 or fp32, c (fp32 d only; may be d). tma_store (with
    sfa_gather): a bf16 d stored through TMA where heads_packed_config takes it."""
    batch, heads, _ = a.shape
    if batch == 0 or heads == 0 or b.shape[1] == 0:
        return
    cfg, head, tail, _keep = _heads_packed_arguments(a, sfa, b, sfb, d, c, sfa_gather, tma_store)
    _get_launcher()
    launcher = _launcher_heads_packed_gather if sfa_gather else _launcher_heads_packed
    rc = launcher(*head, None, None, *tail, _get_raw_stream(d.device.index))
    if rc != 0:
        raise RuntimeError(f"finegemm: sm90_fp8_gemm heads-packed launch failed (b={batch}, h={heads}, r={tail[2]}, "
                           f"d={tail[1]}, block_m={cfg.block_m}, block_n={cfg.block_n}, sfa_gather={sfa_gather}): "
                           f"{jit.error_string(rc)}")


def prepare_fp8_einsum_heads_packed(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                                    d: torch.Tensor, c: Optional[torch.Tensor] = None, tma_store: bool = True
                                    ) -> Optional[PreparedHeadsPackedCall]:
    """The prepared launch of fp8_einsum_heads_packed with sfa read in place, for a kept call (api
    fast path); None where a launch needs a copy of an input per call (then the call stays
    one-shot). Holds addresses, as prepare_m_grouped_contiguous. b, h, d > 0."""
    cfg, head, tail, keepalive = _heads_packed_arguments(a, sfa, b, sfb, d, c, True, tma_store)
    if keepalive:
        return None
    _get_launcher()
    return PreparedHeadsPackedCall(cfg, head, tail, d.device, True, [])


def prepare_m_grouped_masked(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                             d: torch.Tensor, masked_m: torch.Tensor,
                             expected_m: int) -> Optional[PreparedGroupedCall]:
    """The prepared launch of m_grouped_fp8_gemm_nt_masked for a kept call (api fast path); None
    where a launch needs a copy of an input or of d per call (then the call stays one-shot).
    Holds addresses, as prepare_m_grouped_contiguous. G, Mmax and N > 0."""
    _check_k(a.shape[2])
    try:
        d2 = d.view(-1, b.shape[1])
    except RuntimeError:
        return None
    return _prepared_grouped(*_masked_arguments(a, sfa, b, sfb, d2, masked_m, expected_m))


def warmup_shape(m: int, n: int, k: int, out_fp32: bool = False, has_c: bool = False,
                 device: Optional[int] = None, one_d_one_d: bool = False) -> Fp8GemmConfig:
    """Compile and load the kernel a shape would use (and nothing else); returns its config."""
    if device is None:
        device = torch.cuda.current_device()
    if one_d_one_d:
        cfg, _ = plan(m, n, k, True, has_c, device, one_d_one_d=True)
        return cfg
    cfg, _ = plan(m, n, k, out_fp32, has_c, device)
    return cfg


# ----------------------------------------------------------------------------- compile checks
def representative_configs() -> list[tuple[str, tuple]]:
    """(label, (block_m, block_n, stages, out_fp32, has_c, split_k, num_multicast, multicast_on_a[,
    half_promote, tma_store]))
    covering the config space: both block_m, the narrowest and widest block_n, 1/2/3-scale-block
    spans, split-K, fp32 + C, multicast on A and on B; bf16 outputs without C and split-K use the
    TMA-store epilogue (as select_config does; label suffix _tmas)."""
    from finegemm.heuristics.sm90_fp8_gemm import max_stages

    out = []
    for bm, bn, f32, has_c, split, mc, mc_a in [
        (128, 176, False, False, False, 2, False),
        (128, 192, False, False, False, 2, True),
        (128, 144, True, True, False, 2, False),
        (64, 112, False, False, False, 2, True),
        (64, 208, False, False, False, 2, False),
        (128, 64, False, False, True, 2, True),  # split-K with multicast (workspace reduction)
        (64, 128, True, True, True, 2, False),
    ]:
        tma = not (f32 or has_c or split)
        st = max_stages(bm, bn, tma)
        label = (f"bm{bm}_bn{bn}_s{st}{'_f32' if f32 else ''}{'_c' if has_c else ''}{'_splitk' if split else ''}"
                 f"_mc{'a' if mc_a else 'b'}{'_tmas' if tma else ''}")
        out.append((label, (bm, bn, st, f32, has_c, split, mc, mc_a, False, tma)))
    # The half-promote mainloop variant (not chosen by the heuristic: measured slower on H200).
    out.append(("bm128_bn208_s5_mcb_hp", (128, 208, max_stages(128, 208), False, False, False, 2, False, True)))
    out.append(("bm128_bn208_s4_mcb_hp_tmas",
                (128, 208, max_stages(128, 208, True), False, False, False, 2, False, True, True)))
    # k-block batches (staggered waits): the widest tile of each batch size, both block_m.
    for bm, bn, kb in [(128, 96, 2), (64, 96, 2), (128, 64, 4), (64, 64, 4)]:
        st = max_stages(bm, bn, True)
        out.append((f"bm{bm}_bn{bn}_s{st}_tmas_kb{kb}",
                    (bm, bn, st, False, False, False, 1, False, False, True, GEMM_NORMAL, False, kb)))
    for bm, bn, f32, has_c, split in [
        (64, 16, False, False, False),
        (64, 64, False, False, True),
        (64, 112, False, False, False),
        (64, 208, False, False, False),   # widest for one consumer WG; spans 3 scale blocks
        (64, 208, True, True, True),
        (128, 128, False, False, False),
        (128, 144, False, False, False),
        (128, 160, False, False, False),
        (128, 176, False, False, False),
        (128, 192, False, False, False),
        (128, 224, False, False, False),  # widest for two consumer WGs (heuristics.MAX_BLOCK_N)
        (128, 192, True, True, True),
        (128, 112, False, False, True),
        (128, 128, True, True, False),
        (128, 128, True, False, False),
    ]:
        tma = not (f32 or has_c or split)
        st = max_stages(bm, bn, tma)
        label = (f"bm{bm}_bn{bn}_s{st}{'_f32' if f32 else ''}{'_c' if has_c else ''}{'_splitk' if split else ''}"
                 f"{'_tmas' if tma else ''}")
        out.append((label, (bm, bn, st, f32, has_c, split, 1, False, False, tma)))
    # m-grouped kinds (MoE): contiguous and masked, TMA-store and direct epilogues, with and
    # without clusters sharing A (the only multicast the grouped kinds use).
    for kind, bm, bn, mc, tma in [
        (GEMM_GROUPED_CONTIGUOUS, 128, 192, 2, True),
        (GEMM_GROUPED_CONTIGUOUS, 128, 224, 1, False),
        (GEMM_GROUPED_CONTIGUOUS, 64, 144, 1, True),
        (GEMM_GROUPED_MASKED, 128, 192, 2, True),  # widest masked bm128 with TMA store (MAX_BLOCK_N_MASKED_TMA)
        (GEMM_GROUPED_MASKED, 64, 112, 2, True),
        (GEMM_GROUPED_MASKED, 64, 208, 1, False),
        (GEMM_GROUPED_MASKED, 128, 160, 1, True),
    ]:
        st = max_stages(bm, bn, tma)
        label = f"bm{bm}_bn{bn}_s{st}{'_mca' if mc == 2 else ''}{'_tmas' if tma else ''}{_KIND_SUFFIX[kind]}"
        out.append((label, (bm, bn, st, False, False, False, mc, mc == 2, False, tma, kind)))
    # fp8_einsum's heads-packed masked kind: the tiles plan_heads_packed takes on
    # DeepSeek's MLA shapes (b = 64 / 4096 / 1-40, h = 128 / 16, r = 512, d = 128).
    # bf16 d, and fp32 d with and without C (the same tiles' fp32 epilogue); then with sfa gathered
    # in place (_sfag: the lean tiles of at most 128 rows, where a spare producer warp gathers),
    # whose bf16 d is stored through TMA where d is a multiple of the tile's width (_tmas).
    heads_tiles = {False: [(64, 208, 1, False, False, False), (64, 16, 2, False, False, False),
                           (128, 192, 1, False, False, False), (64, 128, 1, True, True, False),
                           (128, 128, 1, True, False, False), (64, 16, 2, True, True, False)],
                   True: [(64, 208, 1, False, False, True), (64, 16, 2, False, False, True),
                          (128, 192, 1, False, False, True), (64, 128, 1, True, True, False),
                          (128, 128, 1, True, False, False), (128, 128, 1, False, False, True),
                          (128, 144, 1, False, False, False)]}
    for gather, tiles in heads_tiles.items():
        for bm, bn, mc, f32, has_c, tma in tiles:
            st = max_stages(bm, bn, tma)
            label = (f"bm{bm}_bn{bn}_s{st}{'_f32' if f32 else ''}{'_c' if has_c else ''}{'_mca' if mc == 2 else ''}"
                     f"{'_tmas' if tma else ''}_gmask_heads{'_sfag' if gather else ''}")
            out.append((label, (bm, bn, st, f32, has_c, False, mc, mc == 2, False, tma, GEMM_GROUPED_MASKED,
                                False, 1, False, 1, (0, 0, 0), False, True) + ((False, True) if gather else ())))
    # Recipe (1, 1, 128) (weight gradients): fp32 out, with and without C, split-K, multicast on
    # A and on B, both block_m, the widest block_n.
    for bm, bn, has_c, split, mc, mc_a in [
        (128, 208, True, False, 2, False),  # widest bm128 (MAX_BLOCK_N_1D1D)
        (128, 192, True, True, 1, False),
        (128, 128, False, False, 2, True),
        (64, 208, True, True, 1, False),
        (64, 112, False, False, 1, False),
        (64, 16, True, False, 2, True),
    ]:
        st = max_stages(bm, bn, False, True)
        label = (f"bm{bm}_bn{bn}_s{st}_f32{'_c' if has_c else ''}{'_splitk' if split else ''}"
                 f"{('_mca' if mc_a else '_mcb') if mc == 2 else ''}_1d1d")
        out.append((label, (bm, bn, st, True, has_c, split, mc, mc_a, False, False, GEMM_NORMAL, True)))
    # K-grouped (recipe (1, 1, 128), one launch for all groups): what select_k_grouped_config picks
    # on the shapes (bm128 bn208 mcb; bm128 bn128 mca), the narrow / single-WG ends.
    for bm, bn, has_c, mc, mc_a in [
        (128, 208, True, 2, False),
        (128, 128, True, 2, True),
        (128, 208, False, 1, False),
        (64, 112, True, 1, False),
        (64, 16, True, 2, True),
    ]:
        st = max_stages(bm, bn, False, True)
        label = (f"bm{bm}_bn{bn}_s{st}_f32{'_c' if has_c else ''}"
                 f"{('_mca' if mc_a else '_mcb') if mc == 2 else ''}_kgrp_1d1d")
        out.append((label, (bm, bn, st, True, has_c, False, mc, mc_a, False, False, GEMM_K_GROUPED, True)))
    return out


jit.register_compile_check(
    "sm90_fp8_gemm", lambda: [(label, render(*args)) for label, args in representative_configs()]
)
