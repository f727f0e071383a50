"""The FP8 casts and layout helpers on CUDA tensors (finegemm/testing/cast_fuzz.py): every result
holds the documented properties and equals the CPU result bit for bit (q, sf values and sf
strides), whatever x's memory placement; bad calls with CUDA tensors raise the CPU's clean errors.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from finegemm import quant  # noqa: E402
from finegemm.testing import cast_fuzz  # noqa: E402

pytestmark = [pytest.mark.gpu]

NUM = int(os.environ.get("FINEGEMM_CAST_FUZZ_GPU_CASES", "400"))


def test_casts_on_cuda_equal_cpu_bitwise():
    problems = []
    for seed in range(500_000, 500_000 + NUM):
        case = cast_fuzz.cast_case(seed)
        x = cast_fuzz.make_input(case, "cuda")
        q, sf = cast_fuzz.run_cast(case, x)
        torch.cuda.synchronize()
        for p in cast_fuzz.check_cast(case, x, q, sf):
            problems.append(f"seed {seed}: {case}: {p}")
        q_cpu, sf_cpu = cast_fuzz.run_cast(case, x.cpu())
        if not cast_fuzz.same_bits(q, q_cpu):
            problems.append(f"seed {seed}: {case}: q differs from the CPU cast")
        if not cast_fuzz.same_bits(sf, sf_cpu) or sf.stride() != sf_cpu.stride():
            problems.append(f"seed {seed}: {case}: sf differs from the CPU cast")
    assert not problems, "\n".join(problems[:20])


def test_layout_helpers_on_cuda_equal_cpu():
    g = torch.Generator().manual_seed(3)
    for mn, kb in ((5, 2), (8, 3), (129, 7), (1, 1)):
        sf = torch.rand((3, mn, kb), generator=g)
        want = quant.get_mn_major_tma_aligned_tensor(sf)
        got = quant.get_mn_major_tma_aligned_tensor(sf.cuda())
        assert got.is_cuda and got.stride() == want.stride() and torch.equal(got.cpu(), want)
        t = quant.transform_sf_into_required_layout(sf[0].cuda(), mn, kb * 128, (1, 128, 128), is_sfa=True)
        assert t.stride() == want[0].stride() and torch.equal(t.cpu(), sf[0])


def test_scale_layout_transforms_on_cuda():
    problems = []
    for seed in range(NUM):
        kwargs, values = cast_fuzz.transform_case(seed, device="cuda")
        out = quant.transform_sf_into_required_layout(**kwargs)
        assert out.is_cuda
        problems += [f"seed {seed}: {p}" for p in cast_fuzz.check_transform(kwargs, values, out)]
    assert not problems, "\n".join(problems[:20])


def test_bad_calls_on_cuda_raise_clean_errors():
    problems = []
    for seed in range(NUM):
        problem = cast_fuzz.raises_clean(cast_fuzz.bad_call(seed, device="cuda"))
        if problem:
            problems.append(f"seed {seed}: {problem}")
    torch.cuda.synchronize()  # the context is healthy
    assert not problems, "\n".join(problems[:20])
