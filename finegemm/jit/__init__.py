"""JIT layer: nvcc discovery, cache keys, on-disk cubin cache, loading, the host library.

See docs/ARCHITECTURE.md ("JIT contract"). Environment: FINEGEMM_CACHE_DIR, FINEGEMM_NVCC,
FINEGEMM_PRINT_COMPILER_COMMAND, FINEGEMM_PTXAS_VERBOSE, FINEGEMM_DUMP_PTX, FINEGEMM_DUMP_SASS,
FINEGEMM_LINEINFO, FINEGEMM_DISABLE_CACHE, FINEGEMM_EXTRA_NVCC_FLAGS (experiment macros),
FINEGEMM_DISABLE_FASTCALL (prepared launches through ctypes instead of the Python launch shim).
"""
from .compiler import (
    INCLUDE_DIR,
    build_cubin,
    build_many,
    build_host_library,
    build_python_shim,
    cache_dir,
    cuda_home,
    have_nvcc,
    header_digest,
    kernel_flags,
    kernel_key,
    nvcc_path,
    nvcc_version,
    parse_ptxas_log,
    ptxas_report,
    stats,
)
from .runtime import (Kernel, check, error_string, fast_kernel_launch, fastcall, host_library, load_function,
                      load_kernel)
from .checks import compile_check, register_compile_check, registered_compile_checks
from .trivial import render_trivial_add, trivial_add

__all__ = [
    "INCLUDE_DIR", "build_cubin", "build_many", "build_host_library", "build_python_shim", "cache_dir", "cuda_home", "have_nvcc",
    "header_digest", "kernel_flags", "kernel_key", "nvcc_path", "nvcc_version", "parse_ptxas_log",
    "ptxas_report", "stats", "Kernel", "check", "error_string", "fast_kernel_launch", "fastcall", "host_library",
    "load_function",
    "load_kernel", "compile_check", "register_compile_check", "registered_compile_checks",
    "render_trivial_add", "trivial_add",
]
