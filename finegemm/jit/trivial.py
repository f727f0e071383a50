"""A trivial elementwise kernel (out = x + y) that exercises rendering, cache, loading, launch."""
from __future__ import annotations

from . import checks, runtime

_TEMPLATE = """\
#include <finegemm/impls/trivial_add.cuh>

extern "C" __global__ void __launch_bounds__({block}) finegemm_entry(const float* x, const float* y,
                                                                   float* out, int n) {{
  finegemm::impls::trivial_add<{block}>(x, y, out, n);
}}
"""


def render_trivial_add(block: int = 256) -> str:
    """Source of the trivial kernel for a block size (multiple of 32, <= 1024)."""
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0 or block > 1024 or block % 32:
        raise ValueError(f"block must be a multiple of 32 in [32, 1024], got {block!r}")
    return _TEMPLATE.format(block=block)


checks.register_compile_check(
    "trivial_add", lambda: [(f"block{b}", render_trivial_add(b)) for b in (128, 256)]
)

_cache: dict[tuple[int, int], tuple[int, object]] = {}  # (block, device) -> (fn, launcher)


def trivial_add(x, y, block: int = 256, out=None):
    """out = x + y for float32 CUDA tensors of equal shape (contiguous), on the current stream."""
    import torch

    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise TypeError("x and y must be torch.Tensors")
    if x.dtype != torch.float32 or y.dtype != torch.float32:
        raise TypeError(f"x and y must be float32, got {x.dtype} and {y.dtype}")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if not (x.is_cuda and y.is_cuda) or x.device != y.device:
        raise ValueError("x and y must be CUDA tensors on the same device")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("x and y must be contiguous")
    n = x.numel()
    if n >= 2**31:
        raise ValueError(f"trivial_add supports fewer than 2**31 elements, got {n}")
    if out is None:
        out = torch.empty_like(x)
    elif out.shape != x.shape or out.dtype != torch.float32 or out.device != x.device or not out.is_contiguous():
        raise ValueError("out must be a contiguous float32 tensor shaped like x on x's device")
    dev = x.device.index
    hit = _cache.get((block, dev))
    if hit is None:
        with torch.cuda.device(dev):
            k = runtime.load_kernel("trivial_add", render_trivial_add(block))
        hit = (k.fn, runtime.host_library().fg_launch_trivial_add)
        _cache[(block, dev)] = hit
    fn, launch = hit
    stream = _raw_stream(dev)
    rc = launch(fn, x.data_ptr(), y.data_ptr(), out.data_ptr(), n, stream)
    if rc:
        runtime.check(rc)
    return out


try:
    _raw_stream = __import__("torch")._C._cuda_getCurrentRawStream  # cheaper than torch.cuda.current_stream
except AttributeError:  # pragma: no cover
    def _raw_stream(dev):
        import torch

        return torch.cuda.current_stream(dev).cuda_stream
