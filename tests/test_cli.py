"""`python -m finegemm` subcommands that work without a GPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(args, cache, timeout=300):
    env = dict(os.environ, FINEGEMM_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "finegemm", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def test_info(tmp_path):
    r = _run(["info"], tmp_path / "c")
    assert r.returncode == 0, r.stderr
    for word in ("finegemm", "torch", "python", "cuda available", "nvcc", "cache dir"):
        assert word in r.stdout
    assert str(tmp_path / "c") in r.stdout


@pytest.mark.nvcc
def test_compile_check(tmp_path):
    r = _run(["compile-check", "--only", "trivial_add"], tmp_path / "c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trivial_add/block256" in r.stdout and "ok" in r.stdout


def test_warmup_and_missing_suites(tmp_path):
    r = _run(["warmup", "--shapes", "128,256,512"], tmp_path / "c")
    assert r.returncode in (0, 1), r.stderr
    r = _run(["bench", "no_such_suite_xyz"], tmp_path / "c")
    assert r.returncode == 2 and "not available" in r.stderr


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
