"""Shared pytest setup: skip `gpu` tests without a CUDA GPU and `nvcc` tests without nvcc.

Every test under tests/gpu/ is treated as marked `gpu`.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest


@functools.lru_cache(maxsize=None)
def _gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@functools.lru_cache(maxsize=None)
def _nvcc_available() -> bool:
    try:
        from finegemm.jit import have_nvcc

        return have_nvcc()
    except Exception:
        return False


@functools.lru_cache(maxsize=None)
def _cuda_driver_present() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.fixture
def cuda_driver_present() -> bool:
    """Whether libcuda.so.1 loads here: without it, valid launcher arguments reach the driver check
    and get FG_ERROR_NO_DRIVER (the host-library tests assert that on build machines)."""
    return _cuda_driver_present()


_GPU_DIR = Path(__file__).resolve().parent / "gpu"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc (set FINEGEMM_NVCC or CUDA_HOME, or put nvcc on PATH)")
    for item in items:
        try:
            in_gpu_dir = _GPU_DIR in Path(str(item.fspath)).resolve().parents
        except Exception:
            in_gpu_dir = False
        if in_gpu_dir and item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.gpu)
        if item.get_closest_marker("gpu") is not None and not _gpu_available():
            item.add_marker(skip_gpu)
        if item.get_closest_marker("nvcc") is not None and not _nvcc_available():
            item.add_marker(skip_nvcc)


@pytest.fixture
def fg_cache_dir(tmp_path, monkeypatch):
    """A private, empty finegemm JIT cache directory for one test (FINEGEMM_CACHE_DIR)."""
    d = tmp_path / "fg-cache"
    monkeypatch.setenv("FINEGEMM_CACHE_DIR", str(d))
    monkeypatch.delenv("FINEGEMM_DISABLE_CACHE", raising=False)
    return d
