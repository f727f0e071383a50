"""The standalone CUDA probes under scripts/ that device_run.sh builds on the GPU machine compile here
(sm_90a), so a device call never spends its minutes on a build error."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.nvcc
@pytest.mark.parametrize("probe", ["probe_cluster_fence.cu", "probe_b_stream.cu"])
def test_probe_compiles(probe, tmp_path):
    from finegemm.jit import nvcc_path

    out = tmp_path / "probe"
    proc = subprocess.run([nvcc_path(), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a",
                           "-I", str(ROOT / "finegemm" / "include"), str(ROOT / "scripts" / probe), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.is_file() and out.stat().st_size > 0


@pytest.mark.nvcc
def test_cluster_fence_probe_forms_in_sass(tmp_path):
    """The five barrier forms compile to what they claim: the release form puts a MEMBAR.ALL.GPU
    before every form arrive, the relaxed form none at all after its setup barrier, and the
    warp-0 form both kinds (warp 0's releasing arrive, the other warps' relaxed one)."""
    from sass_tools import cluster_arrives, cuobjdump, loads_unread_before_last_arrive

    from finegemm.jit import nvcc_path

    cubin = tmp_path / "probe.cubin"
    proc = subprocess.run([nvcc_path(), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin",
                           str(ROOT / "scripts" / "probe_cluster_fence.cu"), "-o", str(cubin)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump")
    text = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True).stdout
    functions = {}
    for chunk in text.split("Function : ")[1:]:
        name, body = chunk.split("\n", 1)
        form = int(name.split("probeILi")[1][0])
        functions[form] = cluster_arrives(body)
        # Each remote word is stored before the relaxed arrive after it: no load is in flight when
        # the peer overwrites the word or exits (the first run raced and faulted without it).
        unread = loads_unread_before_last_arrive(body)
        assert not unread, (form, unread)
    assert sorted(functions) == [0, 1, 2, 3, 4]
    # Every iteration: the form's arrive, then the relaxed arrive after the peer reads; the first
    # arrive of each kernel is the setup barrier's (a release).
    release, relaxed = functions[0], functions[1]
    assert release[0] and relaxed[0]
    assert any(release[1:]) and not any(relaxed[1:]), (release, relaxed)
    assert any(functions[4][1:]) and not all(functions[4][1:]), functions[4]
