"""`python -m finegemm` subcommands that work without a GPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(args, cache, timeout=300, **extra_env):
    env = dict(os.environ, FINEGEMM_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **extra_env)
    return subprocess.run([sys.executable, "-m", "finegemm", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def test_info(tmp_path):
    r = _run(["info"], tmp_path / "c")
    assert r.returncode == 0, r.stderr
    for word in ("finegemm", "torch", "python", "cuda available", "nvcc", "cache dir"):
        assert word in r.stdout
    assert str(tmp_path / "c") in r.stdout
    from finegemm import jit

    if jit.have_nvcc():  # the prepared launches' shim is built into the cache (tests/test_jit.py calls it)
        assert "launch shim    built" in r.stdout
        assert "C call keys    on" in r.stdout  # the host fast paths' keys through the shim
    from finegemm.api import _validate

    gated = ", ".join(sorted(_validate.UNVALIDATED_ON_GPU)) or "none"
    assert f"gated paths    {gated}" in r.stdout and "paths off      none" in r.stdout
    # FINEGEMM_DISABLE_PATHS is shown; a wrong name fails the command with the allowed names.
    r = _run(["info"], tmp_path / "c", FINEGEMM_DISABLE_PATHS="fp8_skip_head_mid_fused")
    assert r.returncode == 0 and "paths off      fp8_skip_head_mid_fused" in r.stdout
    r = _run(["info"], tmp_path / "c", FINEGEMM_DISABLE_PATHS="fp8_skip_head")
    assert r.returncode == 1 and "unknown path(s) ['fp8_skip_head']" in r.stdout
    assert "fp8_contiguous_layout_in_gemm" in r.stdout


@pytest.mark.nvcc
def test_compile_check(tmp_path):
    r = _run(["compile-check", "--only", "trivial_add"], tmp_path / "c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trivial_add/block256" in r.stdout and "ok" in r.stdout


def test_missing_suites(tmp_path):
    r = _run(["bench", "no_such_suite_xyz"], tmp_path / "c")
    assert r.returncode == 2 and "not available" in r.stderr


@pytest.mark.nvcc
def test_warmup_compiles_what_the_plans_pick(tmp_path):
    """`warmup` builds, without a GPU, the kernels the heuristics pick for each (shape, kind): the
    cache then holds exactly those names (what a first call on a 132-SM GPU would look up)."""
    from finegemm import cli

    shapes, kinds = [(128, 256, 512)], ["fp8", "wgrad", "bf16_tn_fp32"]
    want = set(cli.warmup_sources(shapes, kinds, 132))
    assert len(want) == 3
    r = _run(["warmup", "--shapes", "128,256,512", "--kinds", *kinds, "--sms", "132", "--jobs", "2"], tmp_path / "c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 kernels" in r.stdout
    cached = {p.name for p in (tmp_path / "c").rglob("*") if p.is_dir()}
    assert all(any(name in c for c in cached) for name in want), (want, sorted(cached)[:20])


def test_warmup_rejects_a_bad_sm_count(tmp_path):
    for bad in ("0", "-3", "x"):
        r = _run(["warmup", "--shapes", "128,256,512", "--sms", bad], tmp_path / "c")
        assert r.returncode == 2 and "--sms must be" in r.stderr, r.stderr


def test_warmup_rejects_k_the_kernels_cannot_take():
    from finegemm import cli

    with pytest.raises(ValueError, match="K % 16"):
        cli.warmup_sources([(128, 256, 520)], ["fp8"], 132)
    with pytest.raises(ValueError, match="K % 8"):
        cli.warmup_sources([(128, 256, 4)], ["bf16_nt"], 132)


def test_warmup_grouped_sources_follow_the_routing(monkeypatch):
    """`warmup --grouped` builds what the m-grouped calls would load on first use: the masked plan's
    kernel; for a contiguous call the GEMMs that check a plain layout / read psum ends themselves
    (shipped), or, where FINEGEMM_DISABLE_PATHS turns one off, the check kernel + the plain GEMM."""
    import dataclasses

    from finegemm import cli
    from finegemm.api import _validate as _v
    from finegemm.heuristics import sm90_bf16_gemm as bh
    from finegemm.heuristics import sm90_fp8_gemm as fh
    from finegemm.ops import sm90_bf16_gemm as bo
    from finegemm.ops import sm90_fp8_gemm as fo

    monkeypatch.delenv(_v.DISABLE_PATHS_ENV, raising=False)
    g, m, n, k, e = 8, 4096, 4096, 7168, 512
    masked = fh.select_grouped_config(fh.GEMM_GROUPED_MASKED, m, n, k, g, 132, e, 0)
    cont = fh.select_grouped_config(fh.GEMM_GROUPED_CONTIGUOUS, m, n, k, g, 132, 0, 64)
    got = cli.warmup_grouped_sources([(g, m, n, k, e)], ["fp8_masked", "fp8_contiguous"], 132, 64)
    twins = [dataclasses.replace(cont, layout_check=True, psum_layout=psum) for psum in (False, True)]
    assert set(got) == {fo._kernel_name(masked)} | {fo._kernel_name(c) for c in twins}
    assert got[fo._kernel_name(twins[1])] == fo._render_cfg(twins[1])
    bkey = bh.select_grouped_config(bh.GEMM_GROUPED_CONTIGUOUS, m, n, k, g, 132, 0, 128, True).grouped_kernel_key()
    assert bkey[4] is True  # B stored [G, K, N]
    got = cli.warmup_grouped_sources([(g, m, n, k, e)], ["bf16_nn_contiguous"], 132, 128)
    assert set(got) == {bo.grouped_kernel_name(bkey + (True,)), bo.grouped_kernel_name(bkey + (True, True))}
    # The psum GEMM turned off: psum calls take the check kernel and the plain GEMM.
    monkeypatch.setenv(_v.DISABLE_PATHS_ENV, "fp8_contiguous_psum_in_gemm,bf16_contiguous_psum_in_gemm")
    got = cli.warmup_grouped_sources([(g, m, n, k, e)], ["fp8_contiguous", "bf16_nn_contiguous"], 132, 64)
    bkey64 = bh.select_grouped_config(bh.GEMM_GROUPED_CONTIGUOUS, m, n, k, g, 132, 0, 64, True).grouped_kernel_key()
    assert set(got) == {fo._kernel_name(twins[0]), fo._kernel_name(cont), bo.grouped_kernel_name(bkey64 + (True,)),
                        bo.grouped_kernel_name(bkey64), "contiguous_layout"}


def test_warmup_grouped_rejects_what_the_kernels_cannot_take(tmp_path):
    from finegemm import cli

    with pytest.raises(ValueError, match="K % 16"):
        cli.warmup_grouped_sources([(4, 256, 256, 520, 256)], ["fp8_masked"], 132, 128)
    with pytest.raises(ValueError, match="K % 8"):
        cli.warmup_grouped_sources([(4, 256, 256, 4, 256)], ["bf16_contiguous"], 132, 128)
    with pytest.raises(ValueError, match="alignment of 64 or 128"):
        cli.warmup_grouped_sources([(4, 256, 256, 512, 256)], ["fp8_contiguous"], 132, 32)
    for args, err in ((["warmup"], "give --shapes"), (["warmup", "--grouped", "4,256,256,512", "--kinds", "fp8"],
                                                       "need --shapes"),
                      (["warmup", "--shapes", "1,2,3", "--kinds", "bf16_masked"], "need --grouped"),
                      (["warmup", "--grouped", "4,256,256"], "G,M,N,K or G,M,N,K,E"),
                      (["warmup", "--grouped", "0,256,256,512"], "must be positive")):
        r = _run(args, tmp_path / "c")
        assert r.returncode == 2 and err in r.stderr, (args, r.stderr)


@pytest.mark.nvcc
def test_warmup_grouped_compiles_what_the_plans_pick(tmp_path):
    """`warmup --grouped` fills the cache with the planned kernels and the launchers' library."""
    from finegemm import cli

    want = set(cli.warmup_grouped_sources([(4, 256, 512, 512, 64)], ["fp8_masked"], 132, 128))
    r = _run(["warmup", "--grouped", "4,256,512,512,64", "--kinds", "fp8_masked", "--sms", "132", "--jobs", "2"],
             tmp_path / "c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kernels" in r.stdout and len(want) == 1
    cached = {p.name for p in (tmp_path / "c").rglob("*") if p.is_dir()}
    assert all(any(name in c for c in cached) for name in want), (want, sorted(cached)[:20])
    assert list((tmp_path / "c").rglob("host.so")), "the launchers' library was not built"


def test_bad_shape(tmp_path):
    r = _run(["warmup", "--shapes", "1,2"], tmp_path / "c")
    assert r.returncode == 2


@pytest.mark.parametrize("family", ["dense", "wgrad", "masked", "contiguous", "bf16"])
def test_tune_accepts_every_family(family, tmp_path):
    # The subcommand's choices must list every family bench/tune.py implements (bf16 was missing once).
    r = _run(["tune", family, "--help"], tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "--shapes" in r.stdout and "--table" in r.stdout


def test_tune_accepts_every_family_the_tuner_has():
    """The CLI's `tune` subcommand and the tuner's own parser accept the same families (the CLI
    once rejected bf16_masked / bf16_contiguous, which the tuner had)."""
    from finegemm import cli
    from finegemm.bench import TUNE_FAMILIES
    from finegemm.bench import tune

    assert {"bf16_masked", "bf16_contiguous", "dense", "masked"} <= set(TUNE_FAMILIES)
    for fam in TUNE_FAMILIES:
        args = cli.build_parser().parse_args(["tune", fam, "--shapes", "1,2,3"])
        assert args.family == fam and args.rest == ["--shapes", "1,2,3"]
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["tune", "no_such_family"])
    tuner_choices = next(a.choices for a in tune.build_parser()._actions if a.dest == "family")
    assert tuple(tuner_choices) == TUNE_FAMILIES
