"""calc_diff / count_bytes properties, CPU behaviour of the GPU timers, shape sets."""

from __future__ import annotations

import pytest
import torch

from finegemm import testing
from finegemm.testing import shapes


def test_calc_diff_properties():
    x = torch.randn((64, 33), generator=torch.Generator().manual_seed(0))
    y = x + 1e-3 * torch.randn((64, 33), generator=torch.Generator().manual_seed(1))
    assert testing.calc_diff(x, x) == pytest.approx(0.0, abs=1e-15)
    assert testing.calc_diff(x, -x) == pytest.approx(2.0, abs=1e-15)
    assert testing.calc_diff(x, torch.zeros_like(x)) == pytest.approx(1.0)
    d = testing.calc_diff(x, y)
    assert isinstance(d, float) and 0 < d < 1e-5
    assert testing.calc_diff(y, x) == pytest.approx(d, rel=1e-12)
    assert testing.calc_diff(4 * x, 4 * y) == pytest.approx(d, rel=1e-9)


def test_calc_diff_zeros_and_dtypes():
    z = torch.zeros(10)
    assert testing.calc_diff(z, z) == 0.0
    assert testing.calc_diff(torch.zeros(0), torch.zeros(0)) == 0.0
    x = torch.randn(100)
    assert testing.calc_diff(x.bfloat16(), x.bfloat16().float()) == pytest.approx(0.0, abs=1e-15)


def test_count_bytes():
    a = torch.zeros((3, 4), dtype=torch.bfloat16)
    b = torch.zeros(5, dtype=torch.float32)
    c = torch.zeros(7, dtype=torch.float8_e4m3fn)
    assert testing.count_bytes(a, b, c) == 24 + 20 + 7
    assert testing.count_bytes([a, (b, None)], None) == 44
    assert testing.count_bytes() == 0
    with pytest.raises(TypeError):
        testing.count_bytes(3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error path")
def test_gpu_timers_need_cuda():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        testing.bench_kineto(lambda: None, "gemm")
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        testing.bench_events(lambda: None)


def test_host_time_per_call():
    calls = []
    t = testing.host_time_per_call(lambda: calls.append(1), 50)
    assert t > 0 and len(calls) == 51
    with pytest.raises(ValueError):
        testing.host_time_per_call(lambda: None, 0)


def test_shape_sets():
    assert len(shapes.DENSE_SHAPES) == 18 and (4096, 2112, 7168) in shapes.DENSE_SHAPES
    assert shapes.DENSE_M_CURVE == [1, 16, 32, 256, 1024, 2048, 8192]
    assert len(shapes.CONTIGUOUS_SHAPES) == 8 and (8, 4096, 7168, 3072) in shapes.CONTIGUOUS_SHAPES
    assert len(shapes.MASKED_SHAPES) == 24 and (32, 20, 7168, 2048) in shapes.MASKED_SHAPES
    assert shapes.K_GROUPED_SHAPES[2] == (16, 7168, 2048, 2048)
