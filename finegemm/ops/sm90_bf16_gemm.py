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
"""
from __future__ import annotations

import ctypes
import threading
from typing import Optional

import torch

from finegemm import jit, runtime
from finegemm.heuristics.sm90_bf16_gemm import LAYOUTS, Bf16GemmConfig, all_kernel_keys, select_config
from finegemm.utils import align

__all__ = ["bf16_gemm", "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt", "warmup_shape", "render",
           "plan", "representative_configs", "kernel_name"]

_TEMPLATE = """\
#include <finegemm/impls/sm90_bf16_gemm.cuh>

extern "C" __global__ void __launch_bounds__({threads}, 1) finegemm_entry(
    const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
    const __grid_constant__ CUtensorMap tmap_d, void* d, const float* c, float* workspace, int* counters,
    uint32_t m, uint32_t n, uint32_t k, uint32_t ldd, uint32_t flags, uint32_t num_splits) {{
  finegemm::impls::sm90_bf16_gemm<{block_m}, {block_n}, {stages}, {a_mn_major}, {b_mn_major}, {split_k}, {tma_store}>(
      &tmap_a, &tmap_b, &tmap_d, d, c, workspace, counters, m, n, k, ldd, flags, num_splits);
}}
"""


def _b(x: bool) -> str:
    return "true" if x else "false"


def render(block_m: int, block_n: int, num_stages: int, a_mn_major: bool, b_mn_major: bool, split_k: bool,
           tma_store: bool) -> str:
    """The instantiation source of one kernel configuration."""
    if block_m not in (64, 128):
        raise ValueError(f"block_m must be 64 or 128, got {block_m}")
    if block_n % 16 or not 16 <= block_n <= 256:
        raise ValueError(f"block_n must be a multiple of 16 in [16, 256], got {block_n}")
    if b_mn_major and block_n % 64:
        raise ValueError(f"an N-major B needs block_n % 64 == 0, got {block_n}")
    if split_k and tma_store:
        raise ValueError("the TMA-store epilogue is not combined with split-K")
    if num_stages < 2:
        raise ValueError(f"num_stages must be >= 2, got {num_stages}")
    return _TEMPLATE.format(threads=(block_m // 64 + 1) * 128, block_m=block_m, block_n=block_n, stages=num_stages,
                            a_mn_major=_b(a_mn_major), b_mn_major=_b(b_mn_major), split_k=_b(split_k),
                            tma_store=_b(tma_store))


def kernel_name(key: tuple) -> str:
    bm, bn, st, a_mn, b_mn, split, tma = key
    layout = {v: k for k, v in LAYOUTS.items()}[(bool(a_mn), bool(b_mn))]
    return (f"sm90_bf16_gemm_{layout}_bm{bm}_bn{bn}_s{st}{'_splitk' if split else ''}{'_tmas' if tma else ''}")


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
                f = lib.fg_launch_sm90_bf16_gemm
                u64, vp, i = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
                f.argtypes = [u64, vp, vp, vp, vp, vp, vp,  # fn, a, b, d, c, workspace, counters
                              i, i, i, i, i, i,  # m, n, k, lda, ldb, ldd
                              i, i,  # a_mn_major, b_mn_major
                              i, i, i,  # block_m, block_n, num_splits
                              i, i, i, i,  # out_fp32, tma_store, grid, smem
                              u64]  # stream
                f.restype = ctypes.c_int
                _launcher = f
    return _launcher


# ----------------------------------------------------------------------------- plans
_plans: dict[tuple, tuple[Bf16GemmConfig, int]] = {}
_plans_lock = threading.Lock()


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
        cfg = select_config(m, n, k, num_sms, a_mn, b_mn, out_fp32, has_c)
        p = (cfg, _load(cfg, device))
        with _plans_lock:
            _plans[key] = p
    return p


# ----------------------------------------------------------------------------- split-K buffers
_buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (device, stream) -> (workspace, counters)
_graph_buffers: list = []  # buffers allocated during CUDA-graph capture (kept alive)
_buffers_lock = threading.Lock()

try:
    _get_raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover
    def _get_raw_stream(device_index: int) -> int:
        return torch.cuda.current_stream(device_index).cuda_stream


def _split_buffers(cfg: Bf16GemmConfig, device: torch.device, stream: int) -> tuple[int, int]:
    need_ws, need_cnt = cfg.workspace_floats, cfg.num_counters
    if torch.cuda.is_current_stream_capturing():
        ws = torch.empty(need_ws, dtype=torch.float32, device=device)
        cnt = torch.zeros(need_cnt, dtype=torch.int32, device=device)
        with _buffers_lock:
            _graph_buffers.append((ws, cnt))
        return ws.data_ptr(), cnt.data_ptr()
    key = (device.index, stream)
    buf = _buffers.get(key)
    if buf is None or buf[0].numel() < need_ws or buf[1].numel() < need_cnt:
        old_ws = buf[0].numel() if buf is not None else 0
        old_cnt = buf[1].numel() if buf is not None else 0
        ws = torch.empty(max(need_ws, old_ws), dtype=torch.float32, device=device)
        # Zeroed on this stream, before the kernel that first uses them (stream order).
        cnt = torch.zeros(max(need_cnt, old_cnt, 1024), dtype=torch.int32, device=device)
        buf = (ws, cnt)
        with _buffers_lock:
            # The old buffers may still be in use by queued kernels: keep them alive.
            if key in _buffers:
                _graph_buffers.append(_buffers[key])
            _buffers[key] = buf
    return buf[0].data_ptr(), buf[1].data_ptr()


# ----------------------------------------------------------------------------- entry points
def _row_pitch(t: torch.Tensor, inner: int) -> int:
    """Row stride (elements) of a 2-D operand; a one-row operand gets the natural pitch (its
    stride is never stepped over and torch may report anything for a size-1 dim)."""
    return t.stride(0) if t.shape[0] > 1 else align(max(inner, 1), 8)


def bf16_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: Optional[torch.Tensor] = None,
              layout: str = "nt") -> None:
    """d = c + op(A) @ op(B) on the current stream (validated CUDA tensors, see module doc).

    a, b bf16 with a unit inner stride and 16-byte aligned base / row pitch; d bf16 or fp32
    [M, N] (unit column stride); c fp32 [M, N] or None (fp32 d only; may be d itself).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"sm90_bf16_gemm: layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    a_mn, b_mn = LAYOUTS[layout]
    m, k = (a.shape[1], a.shape[0]) if a_mn else (a.shape[0], a.shape[1])
    n = b.shape[1] if b_mn else b.shape[0]
    if m == 0 or n == 0:
        return
    if k == 0 or k % 8:
        raise ValueError(f"sm90_bf16_gemm: K must be a positive multiple of 8, got {k}")
    out_fp32 = d.dtype == torch.float32
    has_c = c is not None
    if has_c and not out_fp32:
        raise ValueError("sm90_bf16_gemm: c is only supported with an fp32 d")
    keepalive = None
    if has_c and c is not d and (c.stride(1) != 1 or (m > 1 and c.stride(0) != d.stride(0))):
        c2 = torch.empty_strided(d.shape, d.stride(), dtype=torch.float32, device=d.device)
        c2.copy_(c)
        c = keepalive = c2

    device = d.device
    cfg, fn = plan(m, n, k, layout, out_fp32, has_c, device.index)
    launch = _get_launcher()
    lda = _row_pitch(a, m if a_mn else k)
    ldb = _row_pitch(b, n if b_mn else k)
    ldd = d.stride(0) if m > 1 else align(n, 8)
    stream = _get_raw_stream(device.index)
    if cfg.split_k:
        ws_ptr, cnt_ptr = _split_buffers(cfg, device, stream)
    else:
        ws_ptr = cnt_ptr = None
    rc = launch(fn, a.data_ptr(), b.data_ptr(), d.data_ptr(), c.data_ptr() if has_c else None, ws_ptr, cnt_ptr,
                m, n, k, lda, ldb, ldd, 1 if a_mn else 0, 1 if b_mn else 0,
                cfg.block_m, cfg.block_n, cfg.num_splits, 1 if out_fp32 else 0, 1 if cfg.tma_store else 0,
                cfg.grid, cfg.smem_bytes, stream)
    del keepalive  # the copy kernel and the GEMM are stream-ordered; the allocator reuses safely
    if rc != 0:
        raise RuntimeError(
            f"finegemm: sm90_bf16_gemm launch failed (layout={layout}, m={m}, n={n}, k={k}, "
            f"block_m={cfg.block_m}, block_n={cfg.block_n}, splits={cfg.num_splits}): {jit.error_string(rc)}"
        )


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
