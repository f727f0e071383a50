"""CPU tests of the JIT layer (need nvcc, no GPU)."""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import subprocess
import warnings
import shutil
from pathlib import Path

import pytest
import torch

from finegemm import jit
from finegemm.jit import compiler

pytestmark = pytest.mark.nvcc


def _unique_source(tag: str, block: int = 256) -> str:
    # A comment makes the key unique without changing the kernel.
    return jit.render_trivial_add(block) + f"\n// test tag: {tag}\n"


class _CompileCounter:
    def __init__(self, monkeypatch):
        self.calls = []
        real = compiler._run_compiler

        def counting(cmd, cwd=None):
            self.calls.append(cmd)
            return real(cmd, cwd=cwd)

        monkeypatch.setattr(compiler, "_run_compiler", counting)


def test_nvcc_discovery():
    path = jit.nvcc_path()
    assert os.access(path, os.X_OK)
    ver = jit.nvcc_version()
    assert len(ver) == 3 and ver[0] >= 12
    assert (Path(jit.cuda_home()) / "include" / "cuda.h").is_file()


def test_nvcc_missing_error(monkeypatch, tmp_path):
    monkeypatch.setenv("FINEGEMM_NVCC", str(tmp_path / "nope" / "nvcc"))
    with pytest.raises(RuntimeError, match="FINEGEMM_NVCC"):
        jit.nvcc_path()
    monkeypatch.delenv("FINEGEMM_NVCC")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="CUDA_HOME"):
        jit.nvcc_path()
    assert not jit.have_nvcc()


def test_cache_dir_env(fg_cache_dir):
    assert jit.cache_dir() == fg_cache_dir


def test_key_changes_with_source_and_flags():
    src = jit.render_trivial_add(256)
    k = jit.kernel_key(src)
    assert k == jit.kernel_key(src)
    assert k != jit.kernel_key(jit.render_trivial_add(128))
    assert k != jit.kernel_key(src + "\n")
    assert k != jit.kernel_key(src, jit.kernel_flags(["-DFOO=1"]))
    assert len(k) == 64


def test_lineinfo_flag_changes_key(monkeypatch):
    src = jit.render_trivial_add(256)
    k = jit.kernel_key(src)
    monkeypatch.setenv("FINEGEMM_LINEINFO", "1")
    assert "-lineinfo" in jit.kernel_flags()
    assert jit.kernel_key(src) != k


def test_build_valid_cubin_and_report(fg_cache_dir):
    path = jit.build_cubin("trivial_add", jit.render_trivial_add(256))
    assert path.name == "kernel.cubin"
    assert path.parent.parent == fg_cache_dir / "kernels"
    assert path.parent.name.startswith("trivial_add_")
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and len(data) > 0
    assert (path.parent / "build.log").is_file()
    rep = jit.ptxas_report(path)
    assert rep["spill_stores"] == 0 and rep["spill_loads"] == 0 and rep["stack_frame"] == 0
    assert not rep["spilled"]
    assert 0 < rep["registers"] <= 255
    assert "finegemm_entry" in rep["functions"]
    # no temp dirs left behind
    assert not any((fg_cache_dir / "tmp").iterdir())


def test_parse_ptxas_log_spills_and_smem():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas warning : Registers are spilled to local memory in function 'k', 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""
    rep = jit.parse_ptxas_log(log)
    assert rep["registers"] == 168 and rep["smem"] == 1024
    assert rep["stack_frame"] == 48 and rep["spill_stores"] == 40 and rep["spill_loads"] == 36
    assert rep["spilled"] and rep["warnings"]


def test_second_build_is_cache_hit(fg_cache_dir, monkeypatch):
    src = _unique_source("cache-hit")
    first = jit.build_cubin("trivial_add", src)
    counter = _CompileCounter(monkeypatch)
    before = jit.stats()
    second = jit.build_cubin("trivial_add", src)
    assert second == first
    assert counter.calls == []
    assert jit.stats()["cache_hits"] == before["cache_hits"] + 1


def test_disable_cache_rebuilds(fg_cache_dir, monkeypatch):
    src = _unique_source("disable")
    jit.build_cubin("trivial_add", src)
    counter = _CompileCounter(monkeypatch)
    monkeypatch.setenv("FINEGEMM_DISABLE_CACHE", "1")
    p = jit.build_cubin("trivial_add", src)
    assert len(counter.calls) == 1
    assert p.read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("damage", ["truncate", "empty", "not_elf", "no_marker"])
def test_corrupted_entry_is_rebuilt(fg_cache_dir, monkeypatch, damage):
    src = _unique_source("corrupt-" + damage)
    path = jit.build_cubin("trivial_add", src)
    good = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "not_elf":
        path.write_bytes(b"garbage" + good[7:])
    else:
        (path.parent / "ok").unlink()
    counter = _CompileCounter(monkeypatch)
    again = jit.build_cubin("trivial_add", src)
    assert len(counter.calls) == 1
    assert again == path
    assert again.read_bytes() == good
    assert not any((fg_cache_dir / "kernels").glob(".*"))  # the bad entry was removed


def test_print_command_and_dump_ptx(fg_cache_dir, monkeypatch, capfd):
    monkeypatch.setenv("FINEGEMM_PRINT_COMPILER_COMMAND", "1")
    monkeypatch.setenv("FINEGEMM_DUMP_PTX", "1")
    p = jit.build_cubin("trivial_add", _unique_source("dump"))
    err = capfd.readouterr().err
    assert "--cubin" in err and "sm_90a" in err
    ptx = (p.parent / "kernel.ptx").read_text()
    assert ".entry finegemm_entry" in ptx


def test_compile_error_is_reported(fg_cache_dir):
    with pytest.raises(RuntimeError, match="nvcc failed"):
        jit.build_cubin("broken", "extern \"C\" __global__ void finegemm_entry() { this is not C++; }")
    assert any((fg_cache_dir / "failed").iterdir())


def _child_build(cache: str, source: str, q) -> None:
    os.environ["FINEGEMM_CACHE_DIR"] = cache
    from finegemm import jit as j

    try:
        p = j.build_cubin("race", source)
        q.put(("ok", str(p), j.stats()["compiles"]))
    except Exception as exc:  # pragma: no cover - reported to the parent
        q.put(("err", repr(exc), 0))


def test_concurrent_processes_build_same_kernel(tmp_path):
    cache = str(tmp_path / "race-cache")
    source = _unique_source("race")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child_build, args=(cache, source, q)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [q.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(r[0] == "ok" for r in results), results
    assert results[0][1] == results[1][1]
    entries = [e for e in (Path(cache) / "kernels").iterdir()]
    assert len(entries) == 1 and entries[0].name.startswith("race_")
    assert compiler._entry_valid(entries[0], "kernel.cubin")
    assert not any((Path(cache) / "tmp").iterdir())


def test_host_library_loads_without_gpu(fg_cache_dir):
    lib = jit.host_library()
    assert isinstance(lib, ctypes.CDLL)
    for sym in ("fg_load_function", "fg_error_string", "fg_launch_trivial_add"):
        assert hasattr(lib, sym)
    assert jit.host_library() is lib
    so = Path(lib._name)
    assert so.name == "host.so" and so.read_bytes()[:4] == b"\x7fELF"
    if shutil.which("readelf"):
        needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
        assert "libcuda" not in needed and "libcudart" not in needed
    # error strings work with or without a driver
    assert "invalid argument" in jit.error_string(100001)
    assert jit.error_string(1)


def test_host_library_reports_missing_driver():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present; covered by tests/gpu")
    lib = jit.host_library()
    cubin = jit.build_cubin("trivial_add", jit.render_trivial_add(256))
    out = ctypes.c_uint64(123)
    rc = lib.fg_load_function(str(cubin).encode(), b"finegemm_entry", 0, 0, ctypes.byref(out))
    assert rc != 0 and out.value == 0
    with pytest.raises(RuntimeError, match="finegemm"):
        jit.check(rc)
    assert lib.fg_launch_trivial_add(0, None, None, None, 4, 0) != 0
    jit.check(0)


def test_compile_check_trivial(fg_cache_dir):
    reports = jit.compile_check(["trivial_add"])
    assert len(reports) >= 2
    assert all(r["ok"] and r["spill_stores"] == 0 and r["stack_frame"] == 0 for r in reports)
    assert "trivial_add" in jit.registered_compile_checks()


def test_compile_check_rejects_stack_frame(fg_cache_dir):
    # Dynamic indexing of a local array forces it into local memory (stack frame).
    src = r'''
extern "C" __global__ void __launch_bounds__(128) finegemm_entry(const int* idx, float* out) {
  float buf[64];
  #pragma unroll 1
  for (int i = 0; i < 64; ++i) buf[i] = i * out[i];
  out[threadIdx.x] = buf[idx[threadIdx.x]];
}
'''
    with pytest.raises(RuntimeError, match="stack"):
        jit.compile_check([("stacky", src)])
    reports = jit.compile_check([("stacky", src)], raise_on_failure=False)
    assert not reports[0]["ok"] and reports[0]["stack_frame"] > 0


def test_register_compile_check(fg_cache_dir):
    jit.register_compile_check("test_family", lambda: [("b64", jit.render_trivial_add(64))])
    try:
        reports = jit.compile_check(["test_family"])
        assert [r["label"] for r in reports] == ["b64"] and reports[0]["ok"]
    finally:
        from finegemm.jit import checks

        checks._registry.pop("test_family", None)
    with pytest.raises(KeyError):
        jit.compile_check(["no_such_family"])


def test_render_validation():
    with pytest.raises(ValueError):
        jit.render_trivial_add(100)
    assert "trivial_add<512>" in jit.render_trivial_add(512)


def test_relative_cache_dir_is_made_absolute(tmp_path, monkeypatch):
    from finegemm import jit

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FINEGEMM_CACHE_DIR", "rel-cache")
    assert jit.cache_dir() == tmp_path / "rel-cache"


def test_experiment_flags_reach_the_host_library(fg_cache_dir, monkeypatch):
    # A switch that changes a TMA box (impls/fitted_box_rows.h) must change the launcher that encodes
    # it too, and an experiment's launcher must never be the one a normal process loads.
    from finegemm.jit import compiler

    monkeypatch.delenv("FINEGEMM_EXTRA_NVCC_FLAGS", raising=False)
    plain = compiler.build_host_library()
    assert "-DFINEGEMM_DIAG_FULL_A_BOX" not in compiler.host_flags()
    monkeypatch.setenv("FINEGEMM_EXTRA_NVCC_FLAGS", "-DFINEGEMM_DIAG_FULL_A_BOX")
    assert "-DFINEGEMM_DIAG_FULL_A_BOX" in compiler.host_flags()
    diag = compiler.build_host_library()
    assert diag != plain and diag.is_file() and plain.is_file()
    monkeypatch.delenv("FINEGEMM_EXTRA_NVCC_FLAGS")
    assert compiler.build_host_library() == plain


def test_kernel_keys_ignore_the_host_library_sources(tmp_path, monkeypatch):
    """header_digest (part of every kernel's cache key) covers every file under include/finegemm
    but host/*.cpp (compiled into the host library only, which keys them itself): a launcher edit
    keeps the compiled kernels; a header edit, host/common.h included, does not."""
    from finegemm.jit import compiler

    root = tmp_path / "finegemm"
    (root / "host").mkdir(parents=True)
    (root / "impls").mkdir()
    (root / "host" / "launch.cpp").write_text("int f() { return 1; }")
    (root / "host" / "common.h").write_text("// shared")
    (root / "impls" / "kernel.cuh").write_text("// kernel")
    monkeypatch.setattr(compiler, "HEADER_DIR", root)
    monkeypatch.setattr(compiler, "HOST_DIR", root / "host")

    def digest():
        monkeypatch.setattr(compiler, "_header_digest", None)
        return compiler.header_digest()

    first = digest()
    (root / "host" / "launch.cpp").write_text("int f() { return 2; }")
    assert digest() == first
    (root / "host" / "common.h").write_text("// shared, changed")
    second = digest()
    assert second != first
    (root / "impls" / "kernel.cuh").write_text("// kernel, changed")
    assert digest() != second


# ----------------------------------------------------------------------------- Python launch shim
def test_fastcall_shim_calls_the_prepared_launcher():
    """jit.fastcall(): the shim built for this interpreter calls a host-library function at its
    address with the prepared-launch arguments (a null handle answers the launcher's own
    invalid-argument code, as through ctypes) and rejects malformed calls cleanly."""
    fast = jit.fastcall()
    assert fast is not None, "the Python launch shim did not build"
    lib = jit.host_library()
    fn = lib.fg_launch_prepared_sm90_fp8_gemm
    fn.argtypes, fn.restype = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64], ctypes.c_int
    address = ctypes.cast(fn, ctypes.c_void_p).value
    through_ctypes = fn(0, None, None, 0)
    assert through_ctypes != 0 and fast(address, 0, None, None, 0) == through_ctypes
    with pytest.raises(TypeError, match="expected 5 arguments"):
        fast(address, 0, None, None)
    with pytest.raises(ValueError, match="null function address"):
        fast(0, 0, None, None, 0)
    with pytest.raises(OverflowError):
        fast(address, -1, None, None, 0)
    assert jit.fastcall() is fast  # built and loaded once per process


def test_fast_kernel_launch_passes_a_one_dimensional_launch():
    """jit.fast_kernel_launch(): the shim calls a function with cuLaunchKernel's signature at its
    address (here a ctypes callback in its place) with the grid, block, shared memory, stream and
    params given, 1 for the other dimensions and null extras, and answers its result; malformed
    calls are rejected before any call."""
    launch = jit.fast_kernel_launch()
    assert launch is not None, "the Python launch shim did not build"
    u, vp = ctypes.c_uint, ctypes.c_void_p
    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp, vp)
    fake = proto(lambda *args: seen.append(args) or 7)
    address = ctypes.cast(fake, ctypes.c_void_p).value
    assert launch(address, 0x1234, 3, 1024, 96, 0x55, 0x999) == 7
    assert seen == [(0x1234, 3, 1, 1, 1024, 1, 1, 96, 0x55, 0x999, None)]
    with pytest.raises(TypeError, match="expected 7 arguments"):
        launch(address, 0x1234, 3, 1024, 96, 0x55)
    with pytest.raises(ValueError, match="null launch address, function or params"):
        launch(address, 0x1234, 3, 1024, 96, 0x55, 0)
    with pytest.raises(OverflowError):
        launch(address, 0x1234, 2**32, 1024, 96, 0x55, 0x999)
    assert len(seen) == 1


def test_fastcall_can_be_switched_off(monkeypatch):
    from finegemm.jit import runtime

    monkeypatch.setattr(runtime, "_fastcall", None)
    monkeypatch.setenv("FINEGEMM_DISABLE_FASTCALL", "1")
    assert jit.fastcall() is None


def test_fastcall_missing_headers_keeps_ctypes(monkeypatch):
    """Without Python.h the shim is not built: a warning, and fastcall() answers None (callers keep
    ctypes), never an exception."""
    import sysconfig

    from finegemm.jit import runtime

    monkeypatch.setattr(runtime, "_fastcall", None)
    monkeypatch.delenv("FINEGEMM_DISABLE_FASTCALL", raising=False)
    real = sysconfig.get_paths
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {**real(*a, **k), "include": "/nonexistent"})
    with pytest.warns(RuntimeWarning, match="no Python.h"):
        assert jit.fastcall() is None


# ----------------------------------------------------------------------------- C tensor signature
@pytest.fixture
def fresh_signature(monkeypatch):
    """jit.tensor_signature configured from scratch in the test; configured again afterwards (the
    shim's accessor table is process-wide)."""
    from finegemm.api import _validate
    from finegemm.jit import tensor_signature

    monkeypatch.setattr(tensor_signature, "_state", {})
    monkeypatch.setattr(_validate, "_signature_fn", None)
    monkeypatch.setattr(_validate, "_layout_fn", None)
    yield tensor_signature
    monkeypatch.undo()
    tensor_signature._state.clear()
    assert tensor_signature.load() is not None


def _python_signature(*tensors):
    return [(t.data_ptr(), t.dtype, t.device.type, tuple(t.shape), t.stride()) for t in tensors]


def test_tensor_signature_reads_what_the_python_accessors_read(fresh_signature):
    """The C key: each tensor's address, shape and strides as PyTorch reports them, one dtype code
    per dtype, equal bytes exactly when every tensor's metadata is equal, and None for anything that
    is not a plain tensor (tensor subclasses, None, other objects, more than 8 tensors or dims)."""
    sig = fresh_signature.load()
    assert sig is not None, fresh_signature.status()
    assert fresh_signature.status() == "on"
    g = torch.Generator().manual_seed(5)
    x = torch.randn(48, 80, generator=g)
    tensors = [x, x.t(), x[7:, 16:], x[:, ::4], x.to(torch.bfloat16), x.to(torch.float8_e4m3fn),
               x.to(torch.float8_e4m3fn)[:, 16:], x.view(torch.int32), x.reshape(6, 8, 80).permute(1, 2, 0),
               torch.zeros(0, 128, dtype=torch.float8_e5m2), torch.nn.Parameter(x.clone())]
    decoded = [d for t in tensors for d in fresh_signature._decode(sig(t))]
    assert len(decoded) == len(tensors)
    assert sig(*tensors[:8]) == b"".join(sig(t) for t in tensors[:8])  # up to 8 tensors, one after another
    codes = {}
    for t, (ptr, dtype, dev_type, dev_index, sizes, strides) in zip(tensors, decoded):
        assert (ptr, sizes, strides, dev_type, dev_index) == (t.data_ptr(), tuple(t.shape), t.stride(), 0, -1)
        assert codes.setdefault(t.dtype, dtype) == dtype
    assert len(set(codes.values())) == len(codes)
    # Equal bytes exactly when the Python accessors agree on every tensor.
    variants = [x, x.view(48, 80), x[:], x[1:], x[:, :64], x.t().contiguous().t(), x.view(torch.int32),
                torch.as_strided(x, (48, 80), (80, 1), 0), torch.as_strided(x, (48, 40), (80, 2), 0)]
    for u in variants:
        for v in variants:
            assert (sig(u) == sig(v)) == (_python_signature(u) == _python_signature(v))
            assert (sig(u, x) == sig(v, x)) == (sig(u) == sig(v))
    assert sig(x) != sig(x, x) and sig() == b""
    # Metadata changed in place (the same object) reads anew.
    y = x.clone()
    before = sig(y)
    y.t_()
    assert sig(y) != before and fresh_signature._decode(sig(y))[0][4:] == (tuple(y.shape), y.stride())

    class _Sub(torch.Tensor):
        pass

    for refused in [(x.as_subclass(_Sub),), (x, None), (x, 1.0), ([x],), (x,) * 9,
                    (torch.zeros([1] * 9),)]:
        assert sig(*refused) is None
    # Tensors without strides or storage answer None or their metadata, never an error.
    with warnings.catch_warnings():  # PyTorch's beta-feature notes for the nested and CSR tensors
        warnings.simplefilter("ignore")
        odds = (x.to_sparse(), x.to_sparse_csr(), torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)]),
                torch.empty(3, 4, device="meta"))
    for odd in odds:
        out = sig(odd)
        assert out is None or fresh_signature._decode(out)[0][4] == tuple(odd.shape)


def test_tensor_layout_is_the_signature_without_addresses(fresh_signature, monkeypatch):
    """The host fast paths' second-level key: tensor_signature's words with every address reduced
    modulo 16, and the addresses. Moved copies share a layout, another 16-byte alignment class
    does not, and what has no signature has no layout. It is off where its check against the
    signature fails, and whenever the signature is."""
    layout, sig = fresh_signature.load_layout(), fresh_signature.load()
    assert layout is not None and sig is not None, fresh_signature.status()
    x = torch.randn(48, 80)
    found, where = layout(x, x.t(), x[3:])
    assert where == (x.data_ptr(), x.data_ptr(), x[3:].data_ptr())
    assert [tuple(w) for w in fresh_signature._decode(found)] == [
        (ptr % 16, *rest) for ptr, *rest in fresh_signature._decode(sig(x, x.t(), x[3:]))]
    assert layout(x)[0] == layout(x.clone())[0] and layout(x)[1] != layout(x.clone())[1]
    flat = x.view(-1)
    assert x.data_ptr() % 16 == 0
    assert layout(flat[2:102])[0] == layout(flat[6:106])[0] != layout(flat[4:104])[0]  # 8, 8, 0 mod 16
    assert layout(flat[4:104])[0] == layout(flat[8:108])[0]

    class _Sub(torch.Tensor):
        pass

    for refused in [(x.as_subclass(_Sub),), (x, None), (x,) * 9]:
        assert layout(*refused) is None and sig(*refused) is None

    fresh_signature._state.clear()
    monkeypatch.setattr(fresh_signature, "_check_layout", lambda *args: "disagrees")
    assert fresh_signature.load() is not None and fresh_signature.load_layout() is None
    fresh_signature._state.clear()
    monkeypatch.setenv("FINEGEMM_DISABLE_TENSOR_SIGNATURE", "1")
    assert fresh_signature.load() is None and fresh_signature.load_layout() is None


def test_tensor_signature_stays_off_when_its_checks_fail(fresh_signature, monkeypatch):
    """The C key is only used after its reading of probe tensors matched PyTorch's: with the sizes
    and strides accessors swapped (a wrong ABI) the check fails and the shim answers None; with no
    offset holding the TensorImpl pointer, or the switch set, it is never configured."""
    from finegemm.jit import runtime

    swapped = list(fresh_signature._ACCESSORS)
    i, j = swapped.index("sizes"), swapped.index("strides")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    monkeypatch.setattr(fresh_signature, "_ACCESSORS", tuple(swapped))
    assert fresh_signature.load() is None
    assert "differ" in fresh_signature.status()
    assert runtime.fastcall_module().tensor_signature(torch.zeros(2, 3)) is None  # switched off in C too

    fresh_signature._state.clear()
    monkeypatch.setattr(fresh_signature, "_ACCESSORS", tuple(fresh_signature._ACCESSORS))
    monkeypatch.setattr(fresh_signature, "_CANDIDATE_OFFSETS", (32,))
    assert fresh_signature.load() is None and "offset" in fresh_signature.status()

    fresh_signature._state.clear()
    monkeypatch.setattr(fresh_signature, "_CANDIDATE_OFFSETS", (16, 24, 32))

    def broken_check(signature, probes):  # an unexpected error after configuring: off, in C too
        raise RuntimeError("probe failure")

    monkeypatch.setattr(fresh_signature, "_check", broken_check)
    assert fresh_signature.load() is None and "probe failure" in fresh_signature.status()
    assert runtime.fastcall_module().tensor_signature(torch.zeros(2, 3)) is None

    fresh_signature._state.clear()
    monkeypatch.setenv("FINEGEMM_DISABLE_TENSOR_SIGNATURE", "1")
    assert fresh_signature.load() is None and "FINEGEMM_DISABLE_TENSOR_SIGNATURE" in fresh_signature.status()


def test_impl_word_reads_only_the_object_header_words():
    from finegemm.jit import runtime

    module = runtime.fastcall_module()
    assert module is not None
    t = torch.zeros(3)
    assert t._cdata in [module.impl_word(t, off) for off in (16, 24)]
    for bad in (0, 8, 12, 40, 4096, -8):
        with pytest.raises(ValueError, match="offset"):
            module.impl_word(t, bad)
    with pytest.raises(ValueError, match="offset"):
        module.impl_word(object(), 16)  # an object too small for the word
