"""SM90 BF16 GEMM, every layout: plan, compile (cached) and launch.

bf16_gemm(a, b, d, c, layout) writes d = c + op(A) @ op(B) for already-validated CUDA tensors
(api/bf16.py): layout "nt" (A [M, K], B [N, K]), "nn" (A [M, K], B [K, N]), "tn" (A [K, M],
B [K, N]), "tt" (A [K, M], B [N, K]). The operands are read in their stored layout (no
transposing copies): the kernel's TMA loads and wgmma descriptors follow each operand's major
order. Per call: one dict lookup for the plan (config + loaded kernel) and one ctypes call into
the host launcher, which encodes the TMA descriptors and launches.

Split-K plans need an fp32 workspace and per-tile int32 counters, kept per (device, stream) and
grown on demand; the counters are zeroed once when allocated and the kernel leaves them at zero.
Calls captured into a CUDA graph get buffers of their own, allocated during capture and kept
alive for the process, so graph replays never share buffers with eager calls.

M-grouped (MoE) GEMMs: m_grouped_bf16_gemm_nt_contiguous / _masked run the same kernel with a
GEMM-kind template parameter (scheduler/grouped_bf16.cuh) through their own entry point and host
launcher (fg_launch_sm90_bf16_grouped); m_grouped_bf16_gemm_nn_contiguous (B [G, K, N], the MoE
backward pass) is the contiguous kind with an N-major B, read in place through a 3-D map.

K-grouped (MoE weight gradient), tn layout: k_grouped_bf16_gemm_tn_contiguous runs the kernel's
k-grouped kind in ONE launch for up to 256 groups (fg_launch_sm90_bf16_k_grouped; larger G is
split into launches of 256): the a / b tensor maps cover all groups (K is their outer dimension)
and a by-value group table in the kernel parameters gives each group's k-block range. The v1
path (the dense tn kernel once per non-empty group) stays behind K_GROUPED_SINGLE_LAUNCH = False
for A/B measurements.
"""
from __future__ import annotations

import array
import ctypes
import threading
from typing import Optional

import torch

from finegemm import jit, quant, runtime
from finegemm.ops.contiguous_layout import checked_group_ids
from finegemm.ops._runtime import (PreparedLaunch, SplitKWorkspace, c_function, check_tile,
                                   fit_grid_to_clusters, is_capturing, l2_promotion_arg, prepare_function,
                                   prepared_handle_functions, raw_stream)
from finegemm.ops._runtime import with_diag_b_group as _with_diag_b_group
from finegemm.heuristics.sm90_bf16_gemm import (
    GEMM_GROUPED_CONTIGUOUS,
    GEMM_GROUPED_MASKED,
    GEMM_NORMAL,
    LAYOUTS,
    TALL_BLOCK_M,
    THREE_WG_BLOCK_M,
    Bf16GemmConfig,
    all_kernel_keys,
    b_group_fits,
    check_multicast,
    check_tall_tile,
    grouped_kernel_keys,
    k_grouped_k_bucket,
    k_grouped_kernel_keys,
    select_config,
    select_grouped_config,
    select_k_grouped_config,
)
from finegemm.utils import align, write_empty_product

__all__ = ["bf16_gemm", "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "warmup_shape", "render",
           "plan", "representative_configs", "kernel_name", "m_grouped_bf16_gemm_nt_contiguous",
           "m_grouped_bf16_gemm_nt_masked", "k_grouped_bf16_gemm_tn_contiguous", "render_grouped",
           "grouped_kernel_name", "plan_grouped", "representative_grouped_configs", "K_GROUPED_SINGLE_LAUNCH",
           "render_k_grouped", "k_grouped_kernel_name", "plan_k_grouped", "representative_k_grouped_configs",
           "k_grouped_tables"]

_TEMPLATE = """\
#include <finegemm/impls/sm90_bf16_gemm.cuh>

extern "C" __global__ void __launch_bounds__({threads}, 1) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_d, void* d, const float* c, float* workspace, int* counters,
    uint32_t m, uint32_t n, uint32_t k, uint32_t ldd, uint32_t flags, uint32_t num_splits,
    const __grid_constant__ CUtensorMap tmap_a_last) {{
  finegemm::impls::sm90_bf16_gemm<{block_m}, {block_n}, {stages}, {a_mn_major}, {b_mn_major}, {split_k}, {tma_store}{tail}>(
      &tmap_a, &tmap_b, &tmap_d, d, c, workspace, counters, m, n, k, ldd, flags, num_splits, nullptr, 1u, nullptr,
      &tmap_a_last);
}}
"""


def _b(x: bool) -> str:
    return "true" if x else "false"


def render(block_m: int, block_n: int, num_stages: int, a_mn_major: bool, b_mn_major: bool, split_k: bool,
           tma_store: bool, b_group: int = 1, num_multicast: int = 1, multicast_on_a: bool = False) -> str:
    """The instantiation source of one kernel configuration (b_group 2 / 4: a K-major B's boxes cover
    that many k-blocks; the launch's rule is heuristics.b_group_fits; num_multicast 2: CTA pairs
    sharing A or B, heuristics.check_multicast)."""
    check_tile(block_m, block_n, num_stages, (64, 128, TALL_BLOCK_M))
    check_tall_tile(block_m, block_n, 2 if split_k else 1)
    check_multicast(block_m, block_n, a_mn_major, b_mn_major, 2 if split_k else 1, num_multicast, multicast_on_a,
                    b_group)
    if b_group != 1 and (b_group not in (2, 4) or b_mn_major or num_stages % b_group or num_stages < 2 * b_group):
        raise ValueError(f"b_group {b_group}: 2 or 4 dividing num_stages, at least two groups in the ring, "
                         "a K-major B")
    if b_mn_major and block_n % 64 and block_n not in (16, 32):
        raise ValueError(f"an N-major B needs block_n % 64 == 0 (whole 64-column boxes) or 16 / 32 (one narrow box), "
                         f"got {block_n}")
    if split_k and tma_store:
        raise ValueError("the TMA-store epilogue is not combined with split-K")
    tail = f", 0, false, false, {b_group}" if b_group != 1 or num_multicast != 1 else ""
    if num_multicast != 1:
        tail += f", {num_multicast}, {_b(multicast_on_a)}"
    return _TEMPLATE.format(threads=(block_m // 64 + 1) * 128, block_m=block_m, block_n=block_n, stages=num_stages,
                            a_mn_major=_b(a_mn_major), b_mn_major=_b(b_mn_major), split_k=_b(split_k),
                            tma_store=_b(tma_store), tail=tail)


def kernel_name(key: tuple) -> str:
    """key: a kernel_key() (7 entries, an 8th with a B group; with multicast the B group, the pair
    size and whether A is the shared operand)."""
    bm, bn, st, a_mn, b_mn, split, tma, *rest = key
    layout = {v: k for k, v in LAYOUTS.items()}[(bool(a_mn), bool(b_mn))]
    b_group = rest[0] if rest else 1
    mc = f"_mc{rest[1]}{'a' if rest[2] else 'b'}" if len(rest) > 1 else ""
    return (f"sm90_bf16_gemm_{layout}_bm{bm}_bn{bn}_s{st}{'_splitk' if split else ''}{'_tmas' if tma else ''}"
            f"{f'_bg{b_group}' if b_group != 1 else ''}{mc}")


def _render_key(key: tuple) -> str:
    return render(*key)


# ----------------------------------------------------------------------------- host launcher
_launcher = None
_launcher_lock = threading.Lock()


def _get_launcher():
    global _launcher
    if _launcher is None:
        with _launcher_lock:
            if _launcher is None:
                lib = jit.host_library()
                u64, vp, i = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
                f = c_function(lib, "fg_launch_sm90_bf16_gemm",
                               [u64, vp, vp, vp, vp, vp, vp,  # fn, a, b, d, c, workspace, counters
                                i, i, i, i, i, i,  # m, n, k, lda, ldb, ldd
                                i, i,  # a_mn_major, b_mn_major
                                i, i, i,  # block_m, block_n, num_splits
                                i, i, i, i, i,  # out_fp32, tma_store, grid, smem, l2_promotion
                                u64])  # stream
                global _launcher_prepare, _launch_prepared, _free_prepared
                _launcher_prepare = prepare_function(lib, "fg_prepare_sm90_bf16_gemm", f.argtypes, 5)
                _launch_prepared, _free_prepared = prepared_handle_functions(lib, "sm90_bf16_gemm")
                _launcher = f
    return _launcher


_launcher_prepare = _launch_prepared = _free_prepared = None


# ----------------------------------------------------------------------------- plans
_plans: dict[tuple, tuple[Bf16GemmConfig, int]] = {}
_plans_lock = threading.Lock()


def with_diag_b_group(cfg: Bf16GemmConfig) -> Bf16GemmConfig:
    """The selected config with FINEGEMM_DIAG_B_GROUP's B group where it fits (ops/_runtime.py)."""
    return _with_diag_b_group(cfg, b_group_fits)


# The dense launcher's packed options (host/sm90_bf16_gemm.cpp encode_dense): bit 12 a multicast
# pair, bit 13 A its shared operand (else B), above the L2 promotions and the B group.
MULTICAST_PAIR_BIT = 1 << 12
MULTICAST_ON_A_BIT = 1 << 13


def dense_options_arg(cfg: Bf16GemmConfig) -> int:
    """The packed `l2_promotion` argument of a dense launch (promotions, B group, multicast)."""
    arg = l2_promotion_arg(cfg.l2_promotion, cfg.b_group)
    if cfg.num_multicast == 2:
        arg |= MULTICAST_PAIR_BIT | (MULTICAST_ON_A_BIT if cfg.multicast_on_a else 0)
    return arg


def _fit_clusters(cfg: Bf16GemmConfig, fn: int) -> Bf16GemmConfig:
    """A multicast grid must fit on the GPU at once as 2-CTA clusters (GPC boundaries can leave SMs
    unpaired): shrink it to the clusters the driver reports (as the FP8 family's plan)."""
    return cfg if cfg.num_multicast == 1 else fit_grid_to_clusters(cfg, fn, cfg.num_multicast)


def _load(cfg: Bf16GemmConfig, device: int) -> int:
    key = cfg.kernel_key()
    with torch.cuda.device(device):
        k = jit.load_kernel(kernel_name(key), _render_key(key), smem_bytes=cfg.smem_bytes)
    return k.fn


def plan(m: int, n: int, k: int, layout: str, out_fp32: bool, has_c: bool,
         device: int) -> tuple[Bf16GemmConfig, int]:
    """(config, CUfunction) for a problem on `device` (cached; compiles on first use)."""
    num_sms = runtime.get_num_sms()
    key = (m, n, k, layout, out_fp32, has_c, num_sms, device)
    p = _plans.get(key)
    if p is None:
        a_mn, b_mn = LAYOUTS[layout]
        cfg = with_diag_b_group(select_config(m, n, k, num_sms, a_mn, b_mn, out_fp32, has_c))
        fn = _load(cfg, device)
        p = (_fit_clusters(cfg, fn), fn)  # a tuned multicast pair: the grid the GPU fits
        with _plans_lock:
            _plans[key] = p
    return p


# ----------------------------------------------------------------------------- split-K buffers
_get_raw_stream = raw_stream  # module-level name: tests monkeypatch it
_workspace = SplitKWorkspace()
_buffers = _workspace.buffers  # (device, stream) -> (workspace, counters); the GPU tests inspect it


def _split_buffers(cfg: Bf16GemmConfig, device: torch.device, stream: int) -> tuple[int, int]:
    return _workspace.pointers(cfg.workspace_floats, cfg.num_counters, device, stream)


# ----------------------------------------------------------------------------- entry points
def _row_pitch(t: torch.Tensor, inner: int) -> int:
    """Row stride (elements) of a 2-D operand; a one-row operand gets the natural pitch (its
    stride is never stepped over and torch may report anything for a size-1 dim)."""
    return t.stride(0) if t.shape[0] > 1 else align(max(inner, 1), 8)


_is_capturing = is_capturing  # module-level name: tests monkeypatch it


class PreparedBf16Call(PreparedLaunch):
    """A prepared dense launch of the SM90 BF16 kernel (ops/_runtime.PreparedLaunch)."""

    __slots__ = ()
    _ns = globals()
    _names = ("_launcher", "_launcher_prepare", "_launch_prepared", "_free_prepared")
    _cluster_symbol = "fg_sm90_bf16_gemm_prepared_cluster"
    _split_buffers_symbol = "fg_sm90_bf16_gemm_prepared_split_buffers"
    _rebind_symbol = "fg_rebind_prepared_sm90_bf16_gemm"

    def _describe(self) -> str:
        cfg = self.cfg
        m, n, k = self._tail[:3]
        layout = ("t" if self._tail[6] else "n") + ("n" if self._tail[7] else "t")
        mc = f", multicast={'A' if cfg.multicast_on_a else 'B'}" if cfg.num_multicast > 1 else ""
        return (f"sm90_bf16_gemm (layout={layout}, m={m}, n={n}, k={k}, block_m={cfg.block_m}, "
                f"block_n={cfg.block_n}, splits={cfg.num_splits}{mc})")


def prepare(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
            layout: str = "nt", config: Optional[Bf16GemmConfig] = None) -> Optional[PreparedBf16Call]:
    """Plan (and compile on first use) the launch of d = c + op(A) @ op(B); None when M or N is 0.

    a, b bf16 with a unit inner stride and 16-byte aligned base / row pitch; d bf16 or fp32
    [M, N] (unit column stride); c fp32 [M, N] or None (fp32 d only; may be d itself).
    config: a configuration of this problem (heuristics make_config / candidate_configs; the
    tuner) instead of the planned one. The call holds raw device pointers, not the tensors: keep
    them alive while it is called.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"sm90_bf16_gemm: layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    a_mn, b_mn = LAYOUTS[layout]
    m, k = (a.shape[1], a.shape[0]) if a_mn else (a.shape[0], a.shape[1])
    n = b.shape[1] if b_mn else b.shape[0]
    if m == 0 or n == 0:
        return None
    if k == 0 or k % 8:
        raise ValueError(f"sm90_bf16_gemm: K must be a positive multiple of 8, got {k}")
    out_fp32 = d.dtype == torch.float32
    has_c = c is not None
    if has_c and not out_fp32:
        raise ValueError("sm90_bf16_gemm: c is only supported with an fp32 d")
    keepalive = []
    if has_c and c is not d and (c.stride(1) != 1 or (m > 1 and c.stride(0) != d.stride(0))):
        c2 = torch.empty_strided(d.shape, d.stride(), dtype=torch.float32, device=d.device)
        c2.copy_(c)
        c = c2
        keepalive.append(c2)

    device = d.device
    if config is None:
        cfg, fn = plan(m, n, k, layout, out_fp32, has_c, device.index)
    else:
        if ((config.m, config.n, config.k, config.a_mn_major, config.b_mn_major, config.out_fp32, config.has_c)
                != (m, n, k, a_mn, b_mn, out_fp32, has_c) or config.gemm_kind != GEMM_NORMAL):
            raise ValueError(f"sm90_bf16_gemm: config {config} is not one of this problem "
                             f"(m={m}, n={n}, k={k}, layout={layout}, out_fp32={out_fp32}, c={has_c})")
        if config.b_group != 1 and not b_group_fits(config, config.b_group):
            raise ValueError(f"sm90_bf16_gemm: b_group {config.b_group} needs 2 or 4 dividing num_stages, at least "
                             f"two groups in the ring, a K-major B, K % 64 == 0, N % 8 == 0 and whole groups per split")
        check_multicast(config.block_m, config.block_n, a_mn, b_mn, config.num_splits, config.num_multicast,
                        config.multicast_on_a, config.b_group)
        fn = _load(config, device.index)
        cfg = _fit_clusters(config, fn)
    _get_launcher()
    lda = _row_pitch(a, m if a_mn else k)
    ldb = _row_pitch(b, n if b_mn else k)
    ldd = d.stride(0) if m > 1 else align(n, 8)
    head = (fn, a.data_ptr(), b.data_ptr(), d.data_ptr(), c.data_ptr() if has_c else None)
    tail = (m, n, k, lda, ldb, ldd, 1 if a_mn else 0, 1 if b_mn else 0,
            cfg.block_m, cfg.block_n, cfg.num_splits, 1 if out_fp32 else 0, 1 if cfg.tma_store else 0,
            cfg.grid, cfg.smem_bytes, dense_options_arg(cfg))
    return PreparedBf16Call(cfg, head, tail, device, not keepalive, keepalive)


def bf16_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
              layout: str = "nt") -> None:
    """d = c + op(A) @ op(B) on the current stream (validated CUDA tensors, see prepare())."""
    call = prepare(a, b, d, c, layout)
    if call is not None:
        call()


def bf16_gemm_nt(a, b, d, c=None) -> None:
    bf16_gemm(a, b, d, c, "nt")


def bf16_gemm_nn(a, b, d, c=None) -> None:
    bf16_gemm(a, b, d, c, "nn")


def bf16_gemm_tn(a, b, d, c=None) -> None:
    bf16_gemm(a, b, d, c, "tn")


def bf16_gemm_tt(a, b, d, c=None) -> None:
    bf16_gemm(a, b, d, c, "tt")


def warmup_shape(m: int, n: int, k: int, layout: str = "nt", out_fp32: bool = False, has_c: bool = False,
                 device: Optional[int] = None) -> Bf16GemmConfig:
    """Compile and load the kernel a shape would use (and nothing else); returns its config."""
    if device is None:
        device = torch.cuda.current_device()
    cfg, _ = plan(m, n, k, layout, out_fp32, has_c, device)
    return cfg


# ----------------------------------------------------------------------------- compile checks
def representative_configs() -> list[tuple[str, tuple]]:
    """(label, kernel key) covering the config space for `python -m finegemm compile-check`: every
    layout with both block_m at the narrowest, a middle and the widest block_n, and the split-K
    variants. tests/test_bf16_kernel_compile.py compiles every kernel select_config can pick
    (heuristics.all_kernel_keys()). The output dtype and C are run-time flags, so each kernel
    covers bf16 and fp32 (+C) outputs."""
    keep_bn = {16, 64, 128, 256}
    return [(kernel_name(key), key) for key in all_kernel_keys() if key[5] or key[1] in keep_bn]


jit.register_compile_check(
    "sm90_bf16_gemm", lambda: [(label, render(*key)) for label, key in representative_configs()]
)


# ============================================================================= m-grouped (MoE)
_GROUPED_TEMPLATE = """\
#include <finegemm/impls/sm90_bf16_gemm.cuh>

extern "C" __global__ void __launch_bounds__({threads}, 1) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_d, void* d, const float* c, float* workspace, int* counters,
    uint32_t m, uint32_t n, uint32_t k, uint32_t ldd, uint32_t flags, uint32_t num_splits,
    const int* grouped, uint32_t num_groups) {{
  finegemm::impls::sm90_bf16_gemm<{block_m}, {block_n}, {stages}, false, {b_mn_major}, false, true, {gemm_kind}>(
      &tmap_a, &tmap_b, &tmap_d, d, c, workspace, counters, m, n, k, ldd, flags, num_splits, grouped, num_groups);
}}
"""

# The contiguous kind checking a plain grouped_layout itself (kLayoutCheck, as the FP8 kernel's;
# scheduler/contiguous_layout_check.cuh): the parameters above, then the check's scratch, the
# error record and (function index << 8 | log2 alignment).
_GROUPED_LAYOUT_CHECKED_TEMPLATE = """\
#include <finegemm/impls/sm90_bf16_gemm.cuh>

extern "C" __global__ void __launch_bounds__({threads}, 1) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_d, void* d, const float* c, float* workspace, int* counters,
    uint32_t m, uint32_t n, uint32_t k, uint32_t ldd, uint32_t flags, uint32_t num_splits,
    const int* grouped, uint32_t num_groups, unsigned* layout_scratch, int* layout_record, uint32_t layout_info) {{
  finegemm::impls::sm90_bf16_gemm<{block_m}, {block_n}, {stages}, false, {b_mn_major}, false, true, {gemm_kind}, true>(
      &tmap_a, &tmap_b, &tmap_d, d, c, workspace, counters, m, n, k, ldd, flags, num_splits, grouped, num_groups,
      nullptr, nullptr, layout_scratch, layout_record, layout_info);
}}
"""

_KIND_SUFFIX = {GEMM_GROUPED_CONTIGUOUS: "gcont", GEMM_GROUPED_MASKED: "gmask"}


def render_grouped(block_m: int, block_n: int, num_stages: int, gemm_kind: int, b_mn_major: bool = False,
                   layout_check: bool = False, psum_layout: bool = False) -> str:
    """The instantiation source of one m-grouped kernel (K-major A, bf16 D, TMA-store epilogue;
    B K-major, or with b_mn_major N-major [G, K, N] in the contiguous kind; layout_check: the
    contiguous kind reading the caller's plain grouped_layout and checking its rules in a spare
    producer warp, one launch per call; psum_layout (with layout_check): reading a psum layout's
    ends instead, searched per tile, checked by CTA 0's spare warp)."""
    if gemm_kind not in _KIND_SUFFIX:
        raise ValueError(f"gemm_kind must be {GEMM_GROUPED_CONTIGUOUS} or {GEMM_GROUPED_MASKED}, got {gemm_kind}")
    # block_m 192 (three consumer warpgroups): the masked kind only.
    check_tile(block_m, block_n, num_stages,
               (64, 128, THREE_WG_BLOCK_M) if gemm_kind == GEMM_GROUPED_MASKED else (64, 128))
    if b_mn_major and (gemm_kind != GEMM_GROUPED_CONTIGUOUS or block_n % 64):
        raise ValueError(f"an N-major B is built for the contiguous kind with block_n % 64 == 0 (whole 64-column "
                         f"boxes), got kind {gemm_kind}, block_n {block_n}")
    if layout_check and gemm_kind != GEMM_GROUPED_CONTIGUOUS:
        raise ValueError("layout_check: the m-grouped contiguous kind only")
    if psum_layout and not layout_check:
        raise ValueError("psum_layout: with layout_check (the m-grouped contiguous kind)")
    template = _GROUPED_LAYOUT_CHECKED_TEMPLATE if layout_check else _GROUPED_TEMPLATE
    if psum_layout:  # kPsumLayout after kLayoutCheck
        if template.count("{gemm_kind}, true>(") != 1:
            raise RuntimeError("sm90_bf16_gemm: the layout-checked template no longer ends its arguments at kLayoutCheck")
        template = template.replace("{gemm_kind}, true>(", "{gemm_kind}, true, true>(")
    return template.format(threads=(block_m // 64 + 1) * 128, block_m=block_m, block_n=block_n, stages=num_stages,
                           gemm_kind=gemm_kind, b_mn_major=str(bool(b_mn_major)).lower())


def grouped_kernel_name(key: tuple) -> str:
    """key: a grouped_kernel_key(), optionally followed by layout_check and psum_layout."""
    bm, bn, st, kind, *rest = key
    nn = "_nn" if rest and rest[0] else ""
    lchk = "_lchk" if len(rest) > 1 and rest[1] else ""
    psum = "_psum" if len(rest) > 2 and rest[2] else ""
    return f"sm90_bf16_gemm_{_KIND_SUFFIX[kind]}{nn}_bm{bm}_bn{bn}_s{st}_tmas{lchk}{psum}"


_grouped_launcher = None


def _get_grouped_launcher():
    global _grouped_launcher
    if _grouped_launcher is None:
        with _launcher_lock:
            if _grouped_launcher is None:
                u64, vp, i = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
                f = c_function(jit.host_library(), "fg_launch_sm90_bf16_grouped",
                               [u64, vp, vp, vp, vp,  # fn, a, b, d, grouped
                                i, i, i, i, i, i,  # m, n, k, lda, ldb, ldd
                                i, i, i, i, i, i,  # block_m, block_n, grid, smem, gemm_kind, num_groups
                                i, i, ctypes.c_int64, u64])  # l2_promotion (packed), b_mn_major, ldb_group, stream
                lib = jit.host_library()
                global _grouped_prepare, _grouped_launch_prepared, _grouped_free_prepared
                _grouped_prepare = c_function(lib, "fg_prepare_sm90_bf16_grouped",
                                              [ctypes.POINTER(ctypes.c_uint64)] + f.argtypes[:-1])
                _grouped_launch_prepared, _grouped_free_prepared = prepared_handle_functions(lib, "sm90_bf16_grouped")
                # The contiguous launch with the in-kernel layout check: the same arguments, then the
                # check's scratch, the error record and layout_info, before the stream.
                global _grouped_launcher_layout_checked, _grouped_prepare_layout_checked
                fl = c_function(lib, "fg_launch_sm90_bf16_grouped_layout_checked",
                                f.argtypes[:-1] + [vp, vp, i, u64])
                _grouped_launcher_layout_checked = fl
                _grouped_prepare_layout_checked = c_function(lib, "fg_prepare_sm90_bf16_grouped_layout_checked",
                                                             [ctypes.POINTER(ctypes.c_uint64)] + fl.argtypes[:-1])
                _grouped_launcher = f
    return _grouped_launcher


_grouped_prepare = _grouped_launch_prepared = _grouped_free_prepared = None
_grouped_launcher_layout_checked = _grouped_prepare_layout_checked = None


def load_grouped(cfg: Bf16GemmConfig, device: int, layout_check: bool = False, psum_layout: bool = False) -> int:
    """CUfunction of an m-grouped configuration's kernel on `device` (compiles on first use);
    layout_check: its twin that checks a plain contiguous layout itself (same tile and grid);
    psum_layout too: the twin reading a psum layout's ends."""
    gkey = cfg.grouped_kernel_key() + ((True,) if layout_check else ()) + ((True,) if psum_layout else ())
    with torch.cuda.device(device):
        return jit.load_kernel(grouped_kernel_name(gkey), render_grouped(*gkey), smem_bytes=cfg.smem_bytes).fn


def plan_grouped(kind: int, m: int, n: int, k: int, num_groups: int, expected_m: int, alignment: int,
                 device: int, config: Optional[Bf16GemmConfig] = None,
                 b_mn_major: bool = False) -> tuple[Bf16GemmConfig, int]:
    """(config, CUfunction) of an m-grouped problem (cached; compiles on first use). `config`: a
    forced configuration of this problem (heuristics make_grouped_config / grouped_candidate_configs;
    the tuner), checked to be one."""
    if config is not None:
        if (config.gemm_kind, config.m, config.n, config.k, config.num_groups, config.b_mn_major) != (
                kind, m, n, k, num_groups, b_mn_major):
            raise ValueError(f"sm90_bf16_gemm: config {config} is not one of this m-grouped problem "
                             f"(kind {kind}, m={m}, n={n}, k={k}, G={num_groups}, b_mn_major={b_mn_major})")
        return config, load_grouped(config, device)
    num_sms = runtime.get_num_sms()
    key = ("grouped", kind, m, n, k, num_groups, expected_m, alignment, b_mn_major, num_sms, device)
    p = _plans.get(key)
    if p is None:
        cfg = select_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, b_mn_major)
        p = (cfg, load_grouped(cfg, device))
        with _plans_lock:
            _plans[key] = p
    return p


def _rows_2d(t: torch.Tensor) -> torch.Tensor:
    """[G, R, K] -> the [G*R, K] view the tensor maps cover (a contiguous copy when the group
    stride is not R rows)."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.contiguous().view(-1, t.shape[-1])


def _b_pitches(cfg: Bf16GemmConfig, b: torch.Tensor, n: int, k: int) -> tuple[int, int]:
    """(ldb, ldb_group) of the grouped launcher: the [G*N, K] view's row pitch (K-major), or an
    N-major [G, K, N] B's row and group pitches (a group or row of size 1 gets the natural one)."""
    if not cfg.b_mn_major:
        return _row_pitch(b, k), 0
    ldb = b.stride(1) if k > 1 else align(n, 8)
    ldb_group = b.stride(0) if b.shape[0] > 1 else k * ldb
    return ldb, ldb_group


def _grouped_arguments(cfg: Bf16GemmConfig, fn: int, a2: torch.Tensor, b: torch.Tensor, d2: torch.Tensor, m: int,
                       n: int, k: int, grouped: torch.Tensor, num_groups: int) -> tuple:
    """The grouped launcher's arguments but the stream."""
    ldb, ldb_group = _b_pitches(cfg, b, n, k)
    return (fn, a2.data_ptr(), b.data_ptr(), d2.data_ptr(), grouped.data_ptr(), m, n, k, _row_pitch(a2, k), ldb,
            _row_pitch(d2, n), cfg.block_m, cfg.block_n, cfg.grid, cfg.smem_bytes, cfg.gemm_kind, num_groups,
            l2_promotion_arg(cfg.l2_promotion), 1 if cfg.b_mn_major else 0, ldb_group)


def _launch_grouped(cfg: Bf16GemmConfig, fn: int, *args) -> None:
    launch = _get_grouped_launcher()
    head = _grouped_arguments(cfg, fn, *args)
    rc = launch(*head, _get_raw_stream(args[2].device.index))
    if rc != 0:
        raise RuntimeError(f"finegemm: {_describe_grouped(cfg, head)} launch failed: {jit.error_string(rc)}")


def _describe_grouped(cfg: Bf16GemmConfig, head: tuple) -> str:
    m, n, k, num_groups = head[5], head[6], head[7], head[16]
    return (f"sm90_bf16_gemm grouped (kind={cfg.gemm_kind}, G={num_groups}, m={m}, n={n}, k={k}, "
            f"block_m={cfg.block_m}, block_n={cfg.block_n}, b_mn_major={cfg.b_mn_major})")


class PreparedBf16GroupedCall(PreparedLaunch):
    """A prepared m-grouped launch of the SM90 BF16 kernel (contiguous or masked; ops/_runtime.PreparedLaunch):
    every launcher argument is in `head` (no split-K buffers)."""

    __slots__ = ()
    _ns = globals()
    _names = ("_grouped_launcher", "_grouped_prepare", "_grouped_launch_prepared", "_grouped_free_prepared")
    _one_shot_takes_buffers = False
    _head_pointer_count = 4  # a, b, d, masked_m / the ids (_grouped_arguments)
    # The host library copies a masked launch here, a layout-checked contiguous one in the subclass
    # (as PreparedGroupedCall's note in ops/sm90_fp8_gemm.py).
    _rebind_symbol = "fg_rebind_prepared_sm90_bf16_masked"

    def _describe(self) -> str:
        return _describe_grouped(self.cfg, self._head)


class PreparedBf16LayoutCheckedCall(PreparedBf16GroupedCall):
    """A contiguous launch of a kernel that checks a plain layout itself (its own launcher: the check's
    scratch, record and layout_info after the grouped arguments)."""

    __slots__ = ()
    _names = ("_grouped_launcher_layout_checked", "_grouped_prepare_layout_checked", "_grouped_launch_prepared",
              "_grouped_free_prepared")
    _rebind_symbol = "fg_rebind_prepared_sm90_bf16_contiguous"  # keeps the stream's check scratch


def _prepared_grouped(cfg: Bf16GemmConfig, fn: int, *args) -> PreparedBf16GroupedCall:
    _get_grouped_launcher()
    return PreparedBf16GroupedCall(cfg, _grouped_arguments(cfg, fn, *args), (), args[2].device, True, [])


def _check_k(k: int) -> None:
    if k == 0 or k % 8:
        raise ValueError(f"sm90_bf16_gemm: K must be a positive multiple of 8, got {k}")


def _m_grouped_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, grouped_layout: torch.Tensor,
                          use_psum_layout: bool, config: Optional[Bf16GemmConfig], b_kn: bool,
                          checked_ids: bool) -> None:
    m, k = a.shape
    num_groups, n = b.shape[0], b.shape[2 if b_kn else 1]
    if m == 0 or n == 0 or num_groups == 0:
        return
    _check_k(k)
    alignment = quant.get_mk_alignment_for_contiguous_layout()
    name = "m_grouped_bf16_gemm_nn_contiguous" if b_kn else "m_grouped_bf16_gemm_nt_contiguous"
    ids = grouped_layout if checked_ids else checked_group_ids(
        f"sm90_bf16_gemm.{name}", grouped_layout, m, num_groups, use_psum_layout, alignment)
    cfg, fn, args, _ = _contiguous_arguments(a, b, d, ids, b_kn, config)
    _launch_grouped(cfg, fn, *args)


def _contiguous_arguments(a, b, d, ids, b_kn, config=None) -> tuple:
    """(config, function, _launch_grouped's arguments, whether B was copied) of a contiguous call on
    checked ids."""
    m, k = a.shape
    num_groups, n = b.shape[0], b.shape[2 if b_kn else 1]
    b_in = b
    if not b_kn:
        b = _rows_2d(b)
    elif (num_groups > 1 and b.stride(0) < k * b.stride(1)) or b.stride(1) < n:
        b = b.contiguous()  # groups or rows overlap (e.g. an expanded B): the 3-D map needs disjoint ones
    cfg, fn = plan_grouped(GEMM_GROUPED_CONTIGUOUS, m, n, k, num_groups, 0,
                           quant.get_mk_alignment_for_contiguous_layout(), d.device.index, config, b_mn_major=b_kn)
    return cfg, fn, (a, b, d, m, n, k, ids, num_groups), b.data_ptr() != b_in.data_ptr()


def _layout_checked_arguments(a, b, d, grouped_layout, b_kn, check, psum) -> tuple:
    """(function of the config's layout-checked twin, the launcher's arguments but the stream, whether
    B was copied) of a contiguous call whose kernel checks the grouped_layout (psum: its ends) itself."""
    # The kernel reads G ends (psum) or M ids (plain): a layout of the other form would be read past its end.
    rows = b.shape[0] if psum else a.shape[0]
    if grouped_layout.dim() != 1 or grouped_layout.numel() != rows or grouped_layout.dtype != torch.int32:
        raise ValueError(f"sm90_bf16_gemm: an in-kernel checked {'psum' if psum else 'plain'} layout must be int32 "
                         f"[{rows}], got {grouped_layout.dtype} {tuple(grouped_layout.shape)}")
    cfg, _fn, args, copied = _contiguous_arguments(a, b, d, grouped_layout, b_kn)
    fn = load_grouped(cfg, d.device.index, layout_check=True, psum_layout=psum)
    return cfg, _grouped_arguments(cfg, fn, *args) + tuple(check), copied


def m_grouped_bf16_gemm_contiguous_layout_checked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                                  grouped_layout: torch.Tensor, b_kn: bool, check: tuple,
                                                  psum: bool = False) -> None:
    """m_grouped_bf16_gemm_n{n,t}_contiguous (b_kn: nn) in one launch: the kernel reads the caller's
    plain grouped_layout (int32 [M]; psum: int32 [G] row ends) and checks its rules itself. check:
    (scratch, record, layout_info) from ops/contiguous_layout.in_kernel_check. M, N, G > 0."""
    _check_k(a.shape[1])
    cfg, args, _ = _layout_checked_arguments(a, b, d, grouped_layout, b_kn, check, psum)
    _get_grouped_launcher()
    rc = _grouped_launcher_layout_checked(*args, _get_raw_stream(d.device.index))
    if rc != 0:
        raise RuntimeError(f"finegemm: {_describe_grouped(cfg, args)} launch (layout checked in the kernel) failed: "
                           f"{jit.error_string(rc)}")


def prepare_m_grouped_contiguous_layout_checked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                                grouped_layout: torch.Tensor, b_kn: bool, check: tuple,
                                                psum: bool = False) -> Optional[PreparedBf16LayoutCheckedCall]:
    """prepare_m_grouped_contiguous for the in-kernel check (check: one stream's (scratch, record,
    layout_info); the launch is kept per stream), or None where a launch needs a copy of B."""
    _check_k(a.shape[1])
    cfg, args, copied = _layout_checked_arguments(a, b, d, grouped_layout, b_kn, check, psum)
    if copied:
        return None
    _get_grouped_launcher()
    return PreparedBf16LayoutCheckedCall(cfg, args, (), d.device, True, [])


def prepare_m_grouped_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ids: torch.Tensor,
                                 b_kn: bool = False) -> Optional[PreparedBf16GroupedCall]:
    """The prepared launch of m_grouped_bf16_gemm_n{n,t}_contiguous (b_kn: nn) on checked ids (the
    layout check's output) for a kept call (api fast path); None where a launch needs a copy of B
    per call. Holds addresses: the caller keeps the tensors' addresses valid while it is called.
    M, N and G > 0."""
    _check_k(a.shape[1])
    cfg, fn, args, copied = _contiguous_arguments(a, b, d, ids, b_kn)
    return None if copied else _prepared_grouped(cfg, fn, *args)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, use_psum_layout: bool = False,
                                      config: Optional[Bf16GemmConfig] = None, *, checked_ids: bool = False) -> None:
    """d[r] = A[r] @ B[g(r)]^T for every row r (zeros for rows of no group), on the current stream.

    a bf16 [M, K], b bf16 [G, N, K], d bf16 [M, N] (validated CUDA tensors, api/bf16.py);
    grouped_layout int32 [M] group id per row (-1 = padding) whose group segments start at
    multiples of get_mk_alignment_for_contiguous_layout(), or with use_psum_layout int32 [G]
    cumulative row ends; either is checked and turned into the kernel's ids on the GPU
    (ops/contiguous_layout.py). checked_ids: grouped_layout already is that kernel's output.
    """
    _m_grouped_contiguous(a, b, d, grouped_layout, use_psum_layout, config, False, checked_ids)


def m_grouped_bf16_gemm_nn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor, use_psum_layout: bool = False,
                                      config: Optional[Bf16GemmConfig] = None, *, checked_ids: bool = False) -> None:
    """d[r] = A[r] @ B[g(r)] for every row r (zeros for rows of no group), on the current stream:
    as m_grouped_bf16_gemm_nt_contiguous with b bf16 [G, K, N] (N-major, any row / group pitch
    that TMA accepts), read in place (no transposing copy)."""
    _m_grouped_contiguous(a, b, d, grouped_layout, use_psum_layout, config, True, checked_ids)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, config: Optional[Bf16GemmConfig] = None) -> None:
    """d[g, :masked_m[g]] = A[g, :masked_m[g]] @ B[g]^T, other rows of d untouched, on the current
    stream. masked_m (int32 [G], on the GPU) is never read by the host: the kernel clamps it to
    [0, Mmax], so one captured CUDA graph serves any masked_m values. expected_m: planning hint.

    a bf16 [G, Mmax, K], b bf16 [G, N, K], d bf16 [G, Mmax, N].
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
    cfg, fn, args, _ = _masked_arguments(a, b, d2, masked_m, expected_m, config)
    _launch_grouped(cfg, fn, *args)
    if tmp is not None:
        d.copy_(tmp)


def _masked_arguments(a, b, d2, masked_m, expected_m, config=None) -> tuple:
    """(config, function, _launch_grouped's arguments, whether an input was copied) of a masked call
    into d2, the [G * Mmax, N] view of d."""
    num_groups, m_max, k = a.shape
    n = b.shape[1]
    a2, b2, masked_in = _rows_2d(a), _rows_2d(b), masked_m
    if masked_m.dtype != torch.int32 or not masked_m.is_contiguous():
        masked_m = masked_m.to(torch.int32).contiguous()
    cfg, fn = plan_grouped(GEMM_GROUPED_MASKED, m_max, n, k, num_groups, int(expected_m), 0, d2.device.index, config)
    copied = masked_m is not masked_in or a2.data_ptr() != a.data_ptr() or b2.data_ptr() != b.data_ptr()
    return cfg, fn, (a2, b2, d2, m_max, n, k, masked_m, num_groups), copied


def prepare_m_grouped_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                             expected_m: int) -> Optional[PreparedBf16GroupedCall]:
    """The prepared launch of m_grouped_bf16_gemm_nt_masked for a kept call (api fast path); None
    where a launch needs a copy of an input or of d per call. Holds addresses (as
    prepare_m_grouped_contiguous). G, Mmax and N > 0."""
    _check_k(a.shape[2])
    try:
        d2 = d.view(-1, b.shape[1])
    except RuntimeError:
        return None
    cfg, fn, args, copied = _masked_arguments(a, b, d2, masked_m, expected_m)
    return None if copied else _prepared_grouped(cfg, fn, *args)


def representative_grouped_configs() -> list[tuple[str, tuple]]:
    """(label, grouped kernel key) of every m-grouped kernel select_grouped_config can pick."""
    return [(grouped_kernel_name(key), key) for key in grouped_kernel_keys()]


jit.register_compile_check(
    "sm90_bf16_gemm_grouped",
    lambda: [(label, render_grouped(*key)) for label, key in representative_grouped_configs()],
)


# ============================================================================= k-grouped (wgrad)
# True: one launch of the k-grouped kind per call (G <= 256); False: the v1 path, the dense tn
# kernel once per non-empty group (kept for A/B measurements).
K_GROUPED_SINGLE_LAUNCH = True

_K_GROUPED_TEMPLATE = """\
#include <finegemm/impls/sm90_bf16_gemm.cuh>

extern "C" __global__ void __launch_bounds__({threads}, 1) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_d, float* d, const float* c, uint32_t m, uint32_t n, uint32_t ldd,
    uint32_t flags, const __grid_constant__ finegemm::scheduler::Bf16KGroupedArgs kgroups) {{
  finegemm::impls::sm90_bf16_gemm<{block_m}, {block_n}, {stages}, true, true, false, true,
                                  finegemm::scheduler::kBf16GemmKGrouped>(
      &tmap_a, &tmap_b, &tmap_d, d, c, nullptr, nullptr, m, n, 0u, ldd, flags, 1u, nullptr, 0u, &kgroups);
}}
"""


def render_k_grouped(block_m: int, block_n: int, num_stages: int) -> str:
    """The instantiation source of one k-grouped kernel (tn, fp32 D, optional C; the fp32 TMA epilogue
    built in, the direct stores as its fallback)."""
    check_tile(block_m, block_n, num_stages)
    if block_n % 64:
        raise ValueError(f"block_n must be 64, 128, 192 or 256 (N-major B: whole 64-column boxes), got {block_n}")
    return _K_GROUPED_TEMPLATE.format(threads=(block_m // 64 + 1) * 128, block_m=block_m, block_n=block_n,
                                      stages=num_stages)


def k_grouped_kernel_name(key: tuple) -> str:
    bm, bn, st = key
    return f"sm90_bf16_gemm_kgrouped_tn_bm{bm}_bn{bn}_s{st}"


_k_grouped_launcher = None
_K_GROUPED_LAYOUT = None  # (sizeof, max slots, offsetof group, kb_begin, num_kb) of Bf16KGroupedArgs


def _get_k_grouped_launcher():
    global _k_grouped_launcher, _K_GROUPED_LAYOUT
    if _k_grouped_launcher is None:
        with _launcher_lock:
            if _k_grouped_launcher is None:
                lib = jit.host_library()
                u64, vp, i, ip = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int)
                # ks, num_groups, skip_empty, out, max_tables, num_tables
                c_function(lib, "fg_sm90_bf16_k_grouped_tables", [vp, i, i, vp, i, ip])
                lay = c_function(lib, "fg_sm90_bf16_k_grouped_layout", [ip], None)
                out5 = (ctypes.c_int * 5)()
                lay(out5)
                _K_GROUPED_LAYOUT = tuple(out5)
                f = c_function(lib, "fg_launch_sm90_bf16_k_grouped",
                               [u64, vp, vp, vp, vp,  # fn, a, b, d, c
                                vp, i,  # ks (host int32 [G]), num_groups
                                i, i, i, i, i, i,  # m, n, sum_k, lda, ldb, ldd
                                i, i, i, i, i,  # block_m, block_n, grid, smem, tma_store
                                ip, u64])  # launches (out), stream
                _k_grouped_launcher = f
    return _k_grouped_launcher


def k_grouped_tables(ks: list, skip_empty: bool = False) -> list[dict]:
    """The group tables the host launcher passes for `ks` (one per launch), decoded: [{"group": [...],
    "kb_begin": [...], "num_kb": [...]}] (the CPU tests check them; no driver needed)."""
    _get_k_grouped_launcher()
    lib = jit.host_library()
    size, max_slots, off_group, off_begin, off_num = _K_GROUPED_LAYOUT
    buf = array.array("i", ks)
    count = ctypes.c_int(0)
    ptr = buf.buffer_info()[0]
    rc = lib.fg_sm90_bf16_k_grouped_tables(ptr, len(ks), int(skip_empty), None, 0, ctypes.byref(count))
    if rc != 0 and count.value == 0:  # the count is only set for valid ks
        raise ValueError(f"k_grouped_tables: bad ks {ks}: {jit.error_string(rc)}")
    if count.value == 0:
        return []
    out = ctypes.create_string_buffer(size * count.value)
    rc = lib.fg_sm90_bf16_k_grouped_tables(ptr, len(ks), int(skip_empty), out, count.value, ctypes.byref(count))
    if rc != 0:
        raise ValueError(f"k_grouped_tables: bad ks {ks}: {jit.error_string(rc)}")
    tables = []
    for t in range(count.value):
        raw = out.raw[t * size:(t + 1) * size]
        num_slots = int.from_bytes(raw[0:4], "little")

        def field(off, raw=raw, num_slots=num_slots):
            return list(array.array("I", raw[off:off + 4 * max_slots]))[:num_slots]

        tables.append({"group": field(off_group), "kb_begin": field(off_begin), "num_kb": field(off_num)})
    return tables


def plan_k_grouped(m: int, n: int, sum_k: int, num_groups: int, has_c: bool,
                   device: int) -> tuple[Bf16GemmConfig, int]:
    """(config, CUfunction) of a k-grouped problem (cached per planning K bucket; compiles on first use)."""
    num_sms = runtime.get_num_sms()
    k_plan = k_grouped_k_bucket(-(-sum_k // max(num_groups, 1)))
    key = ("k_grouped", m, n, k_plan, num_groups, has_c, num_sms, device)
    p = _plans.get(key)
    if p is None:
        cfg = select_k_grouped_config(m, n, k_plan, num_groups, num_sms, has_c)
        kkey = cfg.k_grouped_kernel_key()
        with torch.cuda.device(device):
            fn = jit.load_kernel(k_grouped_kernel_name(kkey), render_k_grouped(*kkey), smem_bytes=cfg.smem_bytes).fn
        p = (cfg, fn)
        with _plans_lock:
            _plans[key] = p
    return p


def _k_grouped_per_group(a, b, d, ks, c):
    """v1: the dense tn kernel once per non-empty group, on row-slice views of a and b (no copies;
    a group's K offset is a multiple of 128 rows, so the slices keep the 16-byte TMA alignment);
    an empty group gets d[g] = c[g] (or zeros)."""
    off = 0
    for g, kg in enumerate(ks):
        dg = d[g]
        cg = None if c is None else (dg if c is d else c[g])
        if kg == 0:
            write_empty_product(dg, cg)
        else:
            bf16_gemm(a[off:off + kg], b[off:off + kg], dg, cg, "tn")
        off += kg


def _k_grouped_tma_flag(has_c: bool) -> int:
    """The launcher's tma_store argument: the fp32 TMA epilogue (a reduce-add when c is d), unless
    FINEGEMM_NO_TMA_REDUCE_ADD=1 keeps the direct epilogue for c = d (as for the FP8 recipe
    (1,1,128) kernels: ops/sm90_fp8_gemm.py TMA_REDUCE_ADD). The host falls back to the direct
    epilogue by itself for a separate c or a d TMA cannot address."""
    from finegemm.ops import sm90_fp8_gemm as _fp8

    return 1 if (_fp8.TMA_REDUCE_ADD or not has_c) else 0


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks: list,
                                      c: Optional[torch.Tensor] = None) -> None:
    """d[g] = c[g] + A_g^T @ B_g (fp32), A_g = a[off_g : off_g + ks[g]] ([k_g, M]), B_g likewise
    ([k_g, N]), on the current stream. c may be d (in-place accumulation); an empty group gets
    d[g] = c[g] (or zeros).

    One launch of the k-grouped kernel for G <= 256 (ceil(G / 256) launches above), empty groups
    included (their tiles store C or zeros; skipped when c is d). The per-group K sizes travel as
    a by-value table in the kernel parameters, built by the host launcher from `ks` (Python ints:
    no device copy, no host sync; a captured CUDA graph replays with the ks of the capture).
    Extra copies only for unusual strides: d whose group stride is not M rows (computed in a
    contiguous temporary, copied back) and a separate c whose strides differ from d's.
    a bf16 [sum(ks), M], b bf16 [sum(ks), N], d fp32 [G, M, N], c fp32 [G, M, N] or None.
    """
    if not K_GROUPED_SINGLE_LAUNCH:
        _k_grouped_per_group(a, b, d, ks, c)
        return
    num_groups, m, n = d.shape
    if num_groups == 0 or m == 0 or n == 0:
        return
    sum_k = a.shape[0]
    if sum_k == 0:
        write_empty_product(d, c)
        return
    # D (and C) viewed as [G * M, N]: the kernel stores group g's tile rows at g * M + m.
    try:
        d2, tmp = d.view(num_groups * m, n), None
    except RuntimeError:
        tmp = d.contiguous()
        d2 = tmp.view(num_groups * m, n)
    ldd = _row_pitch(d2, n)
    c2 = None
    if c is d:
        c2 = d2
    elif c is not None:
        try:
            c2 = c.view(num_groups * m, n)
        except RuntimeError:
            c2 = None
        if c2 is None or (num_groups * m > 1 and c2.stride(0) != ldd) or c2.stride(1) != 1:
            c2 = torch.empty_strided(d2.shape, d2.stride(), dtype=torch.float32, device=d.device)
            c2.copy_(c.reshape(num_groups * m, n))
    cfg, fn = plan_k_grouped(m, n, sum_k, num_groups, c is not None, d.device.index)
    launch = _get_k_grouped_launcher()
    ks_buf = array.array("i", ks)  # the one packed host buffer (read during the call only)
    launches = ctypes.c_int(0)
    rc = launch(fn, a.data_ptr(), b.data_ptr(), d2.data_ptr(), None if c2 is None else c2.data_ptr(),
                ks_buf.buffer_info()[0], num_groups, m, n, sum_k, _row_pitch(a, m), _row_pitch(b, n), ldd,
                cfg.block_m, cfg.block_n, cfg.grid, cfg.smem_bytes, _k_grouped_tma_flag(c is not None),
                ctypes.byref(launches), _get_raw_stream(d.device.index))
    if rc != 0:
        raise RuntimeError(
            f"finegemm: sm90_bf16_gemm k-grouped launch failed (G={num_groups}, m={m}, n={n}, sum_k={sum_k}, "
            f"block_m={cfg.block_m}, block_n={cfg.block_n}): {jit.error_string(rc)}"
        )
    if tmp is not None:
        d.copy_(tmp)


def representative_k_grouped_configs() -> list[tuple[str, tuple]]:
    """(label, k-grouped kernel key) of every k-grouped kernel select_k_grouped_config can pick."""
    return [(k_grouped_kernel_name(key), key) for key in k_grouped_kernel_keys()]


jit.register_compile_check(
    "sm90_bf16_gemm_k_grouped",
    lambda: [(label, render_k_grouped(*key)) for label, key in representative_k_grouped_configs()],
)
