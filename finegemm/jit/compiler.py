"""nvcc discovery, cache keys, the on-disk kernel cache and ptxas reports.

Cache layout (all under cache_dir()):
    kernels/<name>_<key16>/kernel.cubin   the compiled kernel
                           ok             sha256 of kernel.cubin, written last (validity marker)
                           build.log      nvcc/ptxas stderr (always compiled with -Xptxas=-v)
                           kernel.cu      the rendered source
                           kernel.ptx / kernel.sass   with FINEGEMM_DUMP_PTX / FINEGEMM_DUMP_SASS
    host/host_<key16>/host.so (+ ok, build.log)
    tmp/        per-build temp dirs (same filesystem, so the final os.replace is atomic)
    failed/     sources + logs of failed builds, for debugging
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterable, Sequence

PACKAGE_DIR = Path(__file__).resolve().parent.parent
INCLUDE_DIR = PACKAGE_DIR / "include"  # -I root: sources say #include <finegemm/...>
HEADER_DIR = INCLUDE_DIR / "finegemm"
HOST_DIR = HEADER_DIR / "host"

_ELF_MAGIC = b"\x7fELF"
_KEY_VERSION = b"finegemm-jit-1"

_stats_lock = threading.Lock()
_stats = {"compiles": 0, "cache_hits": 0, "host_compiles": 0}


def stats() -> dict:
    """Counters of this process: nvcc kernel compiles, cache hits, host-library compiles."""
    with _stats_lock:
        return dict(_stats)


def _bump(key: str) -> None:
    with _stats_lock:
        _stats[key] += 1


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


# ----------------------------------------------------------------------------- discovery
def nvcc_path() -> str:
    """Path of nvcc: $FINEGEMM_NVCC, else $CUDA_HOME/bin/nvcc, else nvcc on PATH."""
    env = os.environ.get("FINEGEMM_NVCC")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise RuntimeError(f"FINEGEMM_NVCC={env!r} is not an executable file")
        return env
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            cand = os.path.join(home, "bin", "nvcc")
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    found = shutil.which("nvcc")
    if found:
        return found
    raise RuntimeError(
        "finegemm: nvcc (CUDA toolkit >= 12.3) not found. Set FINEGEMM_NVCC to the nvcc executable, "
        "or CUDA_HOME to the toolkit root (with bin/nvcc), or put nvcc on PATH."
    )


def have_nvcc() -> bool:
    try:
        nvcc_path()
        return True
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=None)
def _nvcc_version_text(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"finegemm: running {path} --version failed: {exc}") from exc
    return out.stdout.strip()


def nvcc_version() -> tuple[int, ...]:
    """nvcc's version as a tuple, e.g. (13, 0, 88) (cached per nvcc path)."""
    text = _nvcc_version_text(nvcc_path())
    m = re.search(r"V(\d+)\.(\d+)\.(\d+)", text) or re.search(r"release (\d+)\.(\d+)", text)
    if not m:
        raise RuntimeError(f"finegemm: cannot parse nvcc version from: {text!r}")
    return tuple(int(g) for g in m.groups())


def _has_cuda_h(home: Path) -> bool:
    return (home / "include" / "cuda.h").is_file()


@functools.lru_cache(maxsize=None)
def _cuda_home_for(nvcc: str) -> str | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and _has_cuda_h(Path(home)):
            return home
    real = Path(nvcc).resolve()
    if _has_cuda_h(real.parent.parent):
        return str(real.parent.parent)
    # nvcc may be a wrapper script: ask it where its toolkit is (the TOP= line of a dry run).
    try:
        out = subprocess.run([nvcc, "--dryrun", "--version"], capture_output=True, text=True, timeout=120)
        m = re.search(r"TOP=(\S+)", out.stdout + out.stderr)
        if m and _has_cuda_h(Path(m.group(1)).resolve()):
            return str(Path(m.group(1)).resolve())
    except (OSError, subprocess.SubprocessError):
        pass
    for cand in [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"), reverse=True)]:
        if _has_cuda_h(cand):
            return str(cand)
    return None


def cuda_home() -> str | None:
    """The CUDA toolkit root (the directory holding include/cuda.h) that goes with nvcc_path()."""
    return _cuda_home_for(nvcc_path())


def cuda_include_dir() -> str | None:
    home = cuda_home()
    return str(Path(home) / "include") if home else None


def _find_tool(name: str) -> str | None:
    try:
        home = cuda_home()
    except RuntimeError:
        home = None
    if home:
        cand = Path(home) / "bin" / name
        if cand.is_file():
            return str(cand)
    return shutil.which(name)


def find_cuobjdump() -> str | None:
    """The CUDA toolkit's cuobjdump, else the one Triton's pip package carries (not every toolkit
    install has one)."""
    tool = _find_tool("cuobjdump")
    if tool:
        return tool
    try:
        import triton
    except ImportError:
        return None
    cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(cand) if cand.is_file() else None


def cache_dir() -> Path:
    """$FINEGEMM_CACHE_DIR, default ~/.cache/finegemm (created on first use)."""
    env = os.environ.get("FINEGEMM_CACHE_DIR")
    path = Path(env).expanduser() if env else Path.home() / ".cache" / "finegemm"
    # Absolute: nvcc runs with other working directories, and a relative cache must not move.
    return path.absolute()


# ----------------------------------------------------------------------------- hashing
_header_digest_lock = threading.Lock()
_header_digest: str | None = None


def header_digest() -> str:
    """sha256 over every file under include/finegemm (relative path + bytes) but the host library's
    sources (host/*.cpp: no kernel includes them; build_host_library keys them itself), so a change
    to a launcher does not invalidate every compiled kernel; once per process."""
    global _header_digest
    with _header_digest_lock:
        if _header_digest is None:
            h = hashlib.sha256()
            if HEADER_DIR.is_dir():
                for p in sorted(HEADER_DIR.rglob("*")):
                    if p.is_file() and "__pycache__" not in p.parts and not (p.parent == HOST_DIR and
                                                                              p.suffix == ".cpp"):
                        rel = p.relative_to(HEADER_DIR).as_posix().encode()
                        data = p.read_bytes()
                        h.update(len(rel).to_bytes(8, "little") + rel)
                        h.update(len(data).to_bytes(8, "little") + data)
            _header_digest = h.hexdigest()
        return _header_digest


def _key_flags(flags: Iterable[str]) -> list[str]:
    # Include-path flags carry install locations, not semantics (header contents are hashed).
    return [f for f in flags if not f.startswith("-I")]


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256(_KEY_VERSION)
    for part in parts:
        b = part.encode() if isinstance(part, str) else part
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def kernel_flags(extra_flags: Sequence[str] = ()) -> list[str]:
    """The nvcc flags of a kernel compile (without the output and input arguments)."""
    flags = [
        "-std=c++17",
        "-O3",
        "-gencode=arch=compute_90a,code=sm_90a",
        f"-I{INCLUDE_DIR}",
    ]
    inc = cuda_include_dir()
    if inc:
        flags.append(f"-I{inc}")
    flags += ["--expt-relaxed-constexpr", "-Xptxas=--warn-on-spills", "-Xptxas=-v"]
    if _env_flag("FINEGEMM_LINEINFO"):
        flags.append("-lineinfo")
    # Experiments: e.g. FINEGEMM_EXTRA_NVCC_FLAGS="-DFINEGEMM_WG_SKEW=0" (part of the cache key).
    flags += os.environ.get("FINEGEMM_EXTRA_NVCC_FLAGS", "").split()
    flags += list(extra_flags)
    mode = ffma_yield_mode()
    if mode is not None:  # names the edited cubins in the cache key (nvcc ignores it)
        flags.append("-DFINEGEMM_DIAG_FFMA_YIELD_" + re.sub(r"\W", "_", mode).upper())
    return flags


def ffma_yield_mode() -> str | None:
    """FINEGEMM_DIAG_FFMA_YIELD (a mode of jit/sass_patch.py: "all", "9/16" or "none"; developer
    diagnostic): how a kernel build edits the FP8 promotion FFMAs' scheduling hints; None: unset."""
    from .sass_patch import MODES

    value = os.environ.get("FINEGEMM_DIAG_FFMA_YIELD", "").strip()
    if not value or value == "0":
        return None
    if value not in MODES:
        raise ValueError(f"FINEGEMM_DIAG_FFMA_YIELD must be one of {', '.join(MODES)} (or unset), got {value!r}")
    return value


def _edit_ffma_hints(cubin: Path, mode: str) -> str:
    """Apply FINEGEMM_DIAG_FFMA_YIELD to a fresh cubin in place; returns the build.log line."""
    from .sass_patch import edit_ffma_hints

    tool = find_cuobjdump()
    if tool is None:
        raise RuntimeError("FINEGEMM_DIAG_FFMA_YIELD needs cuobjdump (the CUDA toolkit's, or Triton's)")
    proc = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump failed on {cubin}: {proc.stderr}")
    edited, changed = edit_ffma_hints(cubin.read_bytes(), proc.stdout, mode)
    cubin.write_bytes(edited)
    return f"finegemm: FINEGEMM_DIAG_FFMA_YIELD={mode} edited the hints of {changed} FFMAs\n"


def kernel_key(source: str, flags: Sequence[str] | None = None) -> str:
    """Cache key (hex sha256) of a kernel: source, headers, flags (kernel_flags() by default), nvcc."""
    if flags is None:
        flags = kernel_flags()
    return _digest(
        source, header_digest(), "\0".join(_key_flags(flags)), _nvcc_version_text(nvcc_path())
    )


# ----------------------------------------------------------------------------- cache entries
def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry_valid(entry: Path, artifact: str) -> bool:
    """Artifact exists, is a non-empty ELF, and matches the sha256 in the `ok` marker."""
    art = entry / artifact
    try:
        if art.stat().st_size <= 0:
            return False
        with open(art, "rb") as f:
            if f.read(4) != _ELF_MAGIC:
                return False
        marker = (entry / "ok").read_text().strip()
        return marker == _sha256_file(art)
    except OSError:
        return False


def _make_tmp_dir(root: Path, prefix: str) -> Path:
    tmp_root = root / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    # Leftovers of crashed builds (older than a day) are removed; live builds are minutes old.
    try:
        import time

        cutoff = time.time() - 86400
        for old in tmp_root.iterdir():
            if old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root))


def _publish(tmp: Path, final: Path, artifact: str) -> Path:
    """Atomically move the finished temp entry into place; accept another process's valid entry."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(5):
        try:
            os.replace(tmp, final)  # atomic; fails if final is a non-empty directory
            return final
        except OSError:
            if _entry_valid(final, artifact):
                shutil.rmtree(tmp, ignore_errors=True)  # another process won the race
                return final
            # A corrupted entry sits there: move it aside (atomically), remove it, retry.
            aside = final.parent / f".{final.name}.bad.{os.getpid()}.{threading.get_ident()}"
            try:
                os.replace(final, aside)
            except OSError:
                pass
            shutil.rmtree(aside, ignore_errors=True)
    raise RuntimeError(f"finegemm: could not publish cache entry {final}")


def _run_compiler(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run nvcc (a single place, so tests can count or intercept compiles)."""
    if _env_flag("FINEGEMM_PRINT_COMPILER_COMMAND"):
        print("finegemm: " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


def _fail(tmp: Path, root: Path, what: str, cmd: list[str], proc: subprocess.CompletedProcess) -> None:
    failed = root / "failed" / tmp.name
    try:
        failed.parent.mkdir(parents=True, exist_ok=True)
        (tmp / "build.log").write_text(proc.stdout + proc.stderr)
        os.replace(tmp, failed)
        where = f"\n(sources and log kept in {failed})"
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        where = ""
    raise RuntimeError(
        f"finegemm: nvcc failed building {what} (exit {proc.returncode})\n"
        f"command: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}{where}"
    )


def _dump_extras(entry: Path, source_file: Path, flags: list[str]) -> None:
    """FINEGEMM_DUMP_PTX / FINEGEMM_DUMP_SASS: write kernel.ptx / kernel.sass next to the cubin."""
    if _env_flag("FINEGEMM_DUMP_PTX") and not (entry / "kernel.ptx").exists():
        tmp = entry / f".kernel.ptx.{os.getpid()}.{threading.get_ident()}"
        cmd = [nvcc_path(), *[f for f in flags if f != "-Xptxas=-v" and f != "-Xptxas=--warn-on-spills"],
               "--ptx", "-o", str(tmp), str(source_file)]
        proc = _run_compiler(cmd)
        if proc.returncode == 0 and tmp.exists():
            os.replace(tmp, entry / "kernel.ptx")
        else:
            print(f"finegemm: PTX dump failed: {proc.stderr}", file=sys.stderr)
            tmp.unlink(missing_ok=True)
    if _env_flag("FINEGEMM_DUMP_SASS") and not (entry / "kernel.sass").exists():
        tool = find_cuobjdump()
        if tool is None:
            print("finegemm: FINEGEMM_DUMP_SASS set but cuobjdump not found; no SASS written", file=sys.stderr)
            return
        proc = subprocess.run([tool, "-sass", str(entry / "kernel.cubin")], capture_output=True, text=True)
        if proc.returncode == 0:
            tmp = entry / f".kernel.sass.{os.getpid()}.{threading.get_ident()}"
            tmp.write_text(proc.stdout)
            os.replace(tmp, entry / "kernel.sass")
        else:
            print(f"finegemm: cuobjdump failed: {proc.stderr}", file=sys.stderr)


_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def build_cubin(name: str, source: str, extra_flags: Sequence[str] = ()) -> Path:
    """Compile a rendered kernel source for sm_90a (cached); returns the path of kernel.cubin."""
    flags = kernel_flags(extra_flags)
    key = kernel_key(source, flags)
    root = cache_dir()
    safe = _SAFE_NAME.sub("_", name)[:80] or "kernel"
    entry = root / "kernels" / f"{safe}_{key[:16]}"
    if not _env_flag("FINEGEMM_DISABLE_CACHE") and _entry_valid(entry, "kernel.cubin"):
        _bump("cache_hits")
        _dump_extras(entry, entry / "kernel.cu", flags)
        return entry / "kernel.cubin"

    tmp = _make_tmp_dir(root, f"{safe}_{key[:16]}.")
    src = tmp / "kernel.cu"
    src.write_text(source)
    cubin = tmp / "kernel.cubin"
    cmd = [nvcc_path(), *flags, "--cubin", "-o", str(cubin), str(src)]
    _bump("compiles")
    proc = _run_compiler(cmd, cwd=tmp)
    if proc.returncode != 0 or not cubin.is_file():
        _fail(tmp, root, f"kernel {name!r}", cmd, proc)
    log = proc.stdout + proc.stderr
    yield_mode = ffma_yield_mode()
    if yield_mode is not None:
        log += _edit_ffma_hints(cubin, yield_mode)
    (tmp / "build.log").write_text(log)
    (tmp / "ok").write_text(_sha256_file(cubin) + "\n")
    if _env_flag("FINEGEMM_PTXAS_VERBOSE"):
        print(f"finegemm: ptxas output for {name} ({entry.name}):\n{log}", file=sys.stderr, flush=True)

    if _env_flag("FINEGEMM_DISABLE_CACHE") and entry.exists():
        # Rebuild requested: replace whatever is there.
        aside = entry.parent / f".{entry.name}.old.{os.getpid()}.{threading.get_ident()}"
        try:
            os.replace(entry, aside)
        except OSError:
            pass
        shutil.rmtree(aside, ignore_errors=True)
    final = _publish(tmp, entry, "kernel.cubin")
    _dump_extras(final, final / "kernel.cu", flags)
    return final / "kernel.cubin"


# ----------------------------------------------------------------------------- host library

def build_many(sources: "dict[str, str]", jobs: int = 2, progress: bool = True) -> None:
    """Compile many rendered kernels (name -> source) into the cache, `jobs` at a time (the
    ahead-of-time scripts: scripts/precompile*.py); raises the first compile error."""
    import concurrent.futures
    import time

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futs = [pool.submit(build_cubin, name, src) for name, src in sources.items()]
        for i, f in enumerate(concurrent.futures.as_completed(futs), 1):
            f.result()
            if progress:
                print(f"\r{i}/{len(futs)} ({time.time() - t0:.0f} s)", end="", flush=True)
    if progress:
        print()

def host_sources() -> list[Path]:
    return sorted(HOST_DIR.glob("*.cpp"))


def host_flags() -> list[str]:
    flags = ["-O2", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-cudart", "none", f"-I{INCLUDE_DIR}"]
    inc = cuda_include_dir()
    if inc:
        flags.append(f"-I{inc}")
    # Experiment macros reach the launchers too: a switch that changes a TMA box must change it on
    # both sides (impls/fitted_box_rows.h). Part of the host library's cache key.
    flags += os.environ.get("FINEGEMM_EXTRA_NVCC_FLAGS", "").split()
    return flags


def _build_shared_object(prefix: str, key: str, artifact: str, cmd: list[str], what: str) -> Path:
    """Compile one shared object into the cache's host/ folder (entry <prefix>_<key>), or return
    the cached one. `cmd` is the compiler command without its output (-o <artifact> is added)."""
    root = cache_dir()
    entry = root / "host" / f"{prefix}_{key[:16]}"
    if not _env_flag("FINEGEMM_DISABLE_CACHE") and _entry_valid(entry, artifact):
        return entry / artifact
    tmp = _make_tmp_dir(root, f"{prefix}_{key[:16]}.")
    out = tmp / artifact
    cmd = [*cmd, "-o", str(out)]
    _bump("host_compiles")
    proc = _run_compiler(cmd, cwd=tmp)
    if proc.returncode != 0 or not out.is_file():
        _fail(tmp, root, what, cmd, proc)
    (tmp / "build.log").write_text(proc.stdout + proc.stderr)
    (tmp / "ok").write_text(_sha256_file(out) + "\n")
    if _env_flag("FINEGEMM_DISABLE_CACHE") and entry.exists():
        aside = entry.parent / f".{entry.name}.old.{os.getpid()}.{threading.get_ident()}"
        try:
            os.replace(entry, aside)
        except OSError:
            pass
        shutil.rmtree(aside, ignore_errors=True)
    return _publish(tmp, entry, artifact) / artifact


def build_host_library() -> Path:
    """Compile every include/finegemm/host/*.cpp into one host.so (cached); returns its path."""
    sources = host_sources()
    if not sources:
        raise RuntimeError(f"finegemm: no host sources under {HOST_DIR}")
    flags = host_flags()
    parts = []
    for p in sources:
        parts += [p.name, p.read_bytes()]
    key = _digest(*parts, header_digest(), "\0".join(_key_flags(flags)), _nvcc_version_text(nvcc_path()))
    cmd = [nvcc_path(), *flags, *[str(p) for p in sources], "-ldl"]
    return _build_shared_object("host", key, "host.so", cmd, "the host library")


FASTCALL_SOURCE = PACKAGE_DIR / "jit" / "fastcall.cpp"


def build_python_shim() -> Path:
    """Compile jit/fastcall.cpp into a CPython extension for the running interpreter (cached by
    source, interpreter ABI and compiler); returns its path. Raises RuntimeError when it cannot be
    built (e.g. no Python.h): the callers then keep calling the host library through ctypes."""
    import sysconfig

    include = sysconfig.get_paths().get("include") or ""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    if not (Path(include) / "Python.h").is_file():
        raise RuntimeError(f"finegemm: no Python.h under {include!r}: the prepared launches stay on ctypes")
    flags = ["-O2", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-cudart", "none", f"-I{include}"]
    key = _digest(FASTCALL_SOURCE.read_bytes(), sys.version, suffix, "\0".join(_key_flags(flags)),
                  _nvcc_version_text(nvcc_path()))
    cmd = [nvcc_path(), *flags, str(FASTCALL_SOURCE)]
    return _build_shared_object("fastcall", key, "_finegemm_fastcall" + suffix, cmd, "the Python launch shim")


# ----------------------------------------------------------------------------- ptxas report
_RE_FUNC = re.compile(r"Function properties for (\S+)")
_RE_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_LMEM = re.compile(r"(\d+) bytes lmem")
_RE_SPILL_WARN = re.compile(r"Registers are spilled to local memory in function '([^']+)'")


def parse_ptxas_log(text: str) -> dict:
    """Parse `ptxas -v` output into a dict (maxima over all functions, plus per-function data)."""
    funcs: dict[str, dict] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _RE_COMPILING.search(line) or _RE_FUNC.search(line)
        if m:
            current = m.group(1)
            funcs.setdefault(current, {"registers": 0, "spill_stores": 0, "spill_loads": 0,
                                       "stack_frame": 0, "smem": 0, "lmem": 0})
            continue
        if current is None:
            continue
        f = funcs[current]
        m = _RE_FRAME.search(line)
        if m:
            f["stack_frame"], f["spill_stores"], f["spill_loads"] = (int(g) for g in m.groups())
        m = _RE_USED.search(line)
        if m:
            f["registers"] = int(m.group(1))
            s = _RE_SMEM.search(line)
            if s:
                f["smem"] = int(s.group(1))
            lm = _RE_LMEM.search(line)
            if lm:
                f["lmem"] = int(lm.group(1))
    # ptxas reports some losses as info lines, e.g. "(C7508) Potential Performance Loss: 'setmaxnreg'
    # ignored" (the entry's register count unknown): kept with the warnings.
    warnings = [ln.strip() for ln in text.splitlines()
                if "warning" in ln.lower() or "potential performance loss" in ln.lower()]
    spill_warned = bool(_RE_SPILL_WARN.search(text))
    report = {
        key: max((f[key] for f in funcs.values()), default=0)
        for key in ("registers", "spill_stores", "spill_loads", "stack_frame", "smem", "lmem")
    }
    report["functions"] = funcs
    report["warnings"] = warnings
    report["spilled"] = spill_warned or report["spill_stores"] > 0 or report["spill_loads"] > 0
    # C7514 / C7515 ...: ptxas found accumulator registers touched while a wgmma may be in flight
    # and made every wgmma of the function synchronous (correct, but the pipelining is gone).
    report["wgmma_serialized"] = "wgmma.mma_async instructions are serialized" in text
    return report


def ptxas_report(path: str | os.PathLike) -> dict:
    """ptxas resource usage of a cached kernel: registers, spill_stores, spill_loads, stack_frame,
    smem, lmem, spilled, warnings, functions. `path` is the cubin, its entry dir, or a build.log."""
    p = Path(path)
    if p.is_dir():
        p = p / "build.log"
    elif p.name != "build.log" and p.suffix != ".log":
        p = p.parent / "build.log"
    report = parse_ptxas_log(p.read_text())
    report["log"] = str(p)
    return report
