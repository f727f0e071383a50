"""Prepared launches through the Python launch shim (jit.fastcall): cached dense FP8 and BF16 calls
(a split cluster, a split-K workspace call and a plain tile) take the shim, and give bitwise what
the same prepared launch gives through ctypes, eagerly and replayed in a CUDA graph."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.api import bf16 as bf16_api  # noqa: E402
from finegemm.api import dense_fp8  # noqa: E402
from finegemm.testing import calc_diff, capture_graph  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _fp8_call(m, n, k):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda", generator=g) + 0.5)
    sfb = torch.rand((n + 127) // 128, k // 128, device="cuda", generator=g) + 0.5
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn = lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)  # noqa: E731
    fn()
    call = dense_fp8._validated_calls[dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False)]
    ref = finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)  # fp64 on the GPU
    return fn, call, d, ref


@pytest.mark.parametrize("mnk", [(64, 2112, 7168), (128, 4096, 7168), (256, 7168, 2048), (4096, 7168, 2048)])
def test_fp8_prepared_launch_through_the_shim(mnk):
    fn, call, d, ref = _fp8_call(*mnk)
    assert call._fast_call is not None and call._launch_address, "the cached call does not take the shim"
    torch.cuda.synchronize()
    assert calc_diff(d, ref) < 1e-5
    first = d.clone()
    saved = call._fast_call
    try:
        call._fast_call = None  # the same prepared launch through ctypes
        d.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        assert torch.equal(d, first)
    finally:
        call._fast_call = saved
    d.fill_(float("nan"))
    graph = capture_graph(fn)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d, first)


def test_bf16_prepared_launch_through_the_shim():
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(128, 7168, device="cuda", generator=g, dtype=torch.bfloat16)
    b = torch.randn(256, 7168, device="cuda", generator=g, dtype=torch.bfloat16)
    d = torch.full((128, 256), float("nan"), device="cuda")
    finegemm.bf16_gemm_nt(a, b, d)
    calls = [c for c in bf16_api._validated_calls.values() if getattr(c, "_fast_call", None) is not None]
    assert calls, "no cached BF16 call takes the shim"
    torch.cuda.synchronize()
    assert calc_diff(d, a.double() @ b.double().t()) < 1e-5


def test_c_call_keys_on_cuda_tensors():
    """The host fast path's C key on CUDA tensors: on, it reads the device (CUDA, the tensor's
    index) and the address as PyTorch does; a seen call reuses its launch and reads the operands'
    current contents; a d at another address, or a scale tensor whose strides changed in place,
    is validated and planned again, and each answer matches the reference."""
    from finegemm.api import _validate
    from finegemm.jit import tensor_signature

    sig = _validate.signature_fn()
    assert sig is not _validate._no_signature, tensor_signature.status()
    m, n, k = 96, 640, 1024
    fn, call, d, ref = _fp8_call(m, n, k)
    (ptr, _, dev_type, dev_index, sizes, strides), = tensor_signature._decode(sig(d))
    assert (ptr, dev_type, dev_index, sizes, strides) == (d.data_ptr(), 1, d.device.index, (m, n), d.stride())
    torch.cuda.synchronize()
    assert calc_diff(d, ref) < 1e-5
    g = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sfa = finegemm.get_mn_major_tma_aligned_tensor(torch.rand(m, k // 128, device="cuda", generator=g) + 0.5)
    sfb = torch.rand((n + 127) // 128, k // 128, device="cuda", generator=g) + 0.5
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    key = dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False)
    assert type(key[0]) is bytes and key in dense_fp8._validated_calls
    a.copy_(torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn))  # same tensor, new values
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
    torch.cuda.synchronize()
    assert calc_diff(d, finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)) < 1e-5
    # sfa's strides changed in place (the same object and address, MN-major -> K-major strides over
    # the same memory: another legal layout, other values per element).
    sfa_row = sfa.contiguous()
    sfa.as_strided_(sfa_row.shape, sfa_row.stride())
    assert dense_fp8.fp8_call_key((a, sfa), (b, sfb), d, None, None, "nk", False) != key
    d2 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d2)
    torch.cuda.synchronize()
    assert calc_diff(d2, finegemm.reference.fp8_gemm_nt(a, sfa, b, sfb, out_dtype=torch.float32)) < 1e-5
