"""GPU tests of the JIT layer: loading, launching, cache reuse across processes, graphs, host cost."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from finegemm import jit  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n", [1, 31, 256, 1000, 1 << 20, 3 * (1 << 22) + 7])
def test_trivial_add_correct(n):
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = jit.trivial_add(x, y)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


@pytest.mark.parametrize("block", [64, 128, 512, 1024])
def test_trivial_add_block_sizes(block):
    x = torch.randn(4099, device="cuda")
    y = torch.randn(4099, device="cuda")
    assert torch.equal(jit.trivial_add(x, y, block=block), x + y)


def test_trivial_add_2d_and_empty():
    x = torch.randn(37, 53, device="cuda")
    y = torch.randn(37, 53, device="cuda")
    assert torch.equal(jit.trivial_add(x, y), x + y)
    e = torch.empty(0, device="cuda")
    assert jit.trivial_add(e, e).numel() == 0


def test_load_kernel_smem_and_errors():
    src = jit.render_trivial_add(256)
    k = jit.load_kernel("trivial_add", src, smem_bytes=200 * 1024)
    assert k.fn != 0 and k.smem_bytes == 200 * 1024 and k.cubin.is_file()
    assert jit.load_kernel("trivial_add", src, smem_bytes=200 * 1024) is k
    with pytest.raises(RuntimeError, match="NOT_FOUND"):
        jit.load_kernel("trivial_add", src, entry="no_such_entry")
    with pytest.raises(RuntimeError):
        jit.load_kernel("trivial_add", src, smem_bytes=300 * 1024)  # above the SM90 limit


def test_launch_from_fresh_thread():
    x = torch.randn(5000, device="cuda")
    y = torch.randn(5000, device="cuda")
    jit.trivial_add(x, y)
    result = {}

    def work():
        try:
            result["out"] = jit.trivial_add(x, y)
            torch.cuda.current_stream().synchronize()
        except Exception as exc:  # reported below
            result["err"] = exc

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "err" not in result, result.get("err")
    assert torch.equal(result["out"], x + y)


def test_occupancy_query_from_fresh_thread():
    """The cluster-occupancy query the plans use (_fit_clusters, split clusters) answers the same in
    a thread that never ran a CUDA runtime call: it failed there with CUDA_ERROR_INVALID_CONTEXT
    (found by compute-sanitizer under the fuzz's warm-up pool), and the plan silently kept an
    unfitted grid."""
    from finegemm.ops import _runtime
    from finegemm.ops import sm90_fp8_gemm as ops

    cfg, fn = ops.plan(128, 576, 512, False, False, torch.cuda.current_device())  # a precompiled shape
    main = _runtime.max_active_clusters(fn, 2, cfg.num_threads, cfg.smem_bytes)
    out = []
    t = threading.Thread(target=lambda: out.append(_runtime.max_active_clusters(fn, 2, cfg.num_threads,
                                                                                   cfg.smem_bytes)))
    t.start()
    t.join()
    assert main > 0 and out == [main]


_CHILD = r"""
import json, torch
from finegemm import jit
x = torch.arange(1000, dtype=torch.float32, device="cuda")
out = jit.trivial_add(x, x)
torch.cuda.synchronize()
print(json.dumps({"ok": bool(torch.equal(out, 2 * x)), **jit.stats()}))
"""


def test_second_process_cache_hit(tmp_path):
    env = dict(os.environ, FINEGEMM_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    env.pop("FINEGEMM_DISABLE_CACHE", None)
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["ok"] and runs[1]["ok"]
    assert runs[0]["compiles"] == 1 and runs[0]["host_compiles"] == 1
    assert runs[1]["compiles"] == 0 and runs[1]["host_compiles"] == 0 and runs[1]["cache_hits"] == 1


def test_cuda_graph_capture_and_replay():
    x = torch.randn(10000, device="cuda")
    y = torch.randn(10000, device="cuda")
    jit.trivial_add(x, y)  # build + load outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            out = jit.trivial_add(x, y)
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    x.copy_(torch.randn_like(x))
    y.fill_(3.0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x + 3.0)


def test_host_time_per_call():
    x = torch.randn(1024, device="cuda")
    y = torch.randn(1024, device="cuda")
    for _ in range(100):
        jit.trivial_add(x, y)
    torch.cuda.synchronize()
    n = 2000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            jit.trivial_add(x, y)
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    out = torch.empty_like(x)
    best_out = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            jit.trivial_add(x, y, out=out)
        best_out = min(best_out, (time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    print(f"\ntrivial_add host time per call with a preallocated out: {best_out:.2f} us")
    # Reference: a torch elementwise op of the same size.
    t0 = time.perf_counter()
    for _ in range(n):
        torch.add(x, y)
    torch_us = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    print(f"\ntrivial_add host time per call: {best:.2f} us (torch.add: {torch_us:.2f} us)")
    # Relative to torch.add measured in the same run: the GPU machine's CPU speed varies by 1.5x
    # from run to run (torch.add 15 us at 1a37aff, 23 us at d2da286), so an absolute bound flakes.
    assert best < 2.0 * torch_us
