"""The operand tensor maps' L2 promotion as a configuration choice (CPU only): table entries name
it, configurations carry it, and the prepared launches pass it packed in the launcher's slot. The
host library's own checks of the packed value are in test_{fp8,bf16}_kernel_compile.py."""
from __future__ import annotations

import json

import pytest

from finegemm.heuristics import _common
from finegemm.heuristics import sm90_bf16_gemm as hb
from finegemm.heuristics import sm90_fp8_gemm as h8
from finegemm.heuristics import tuned
from finegemm.ops._runtime import l2_promotion_arg

SMS = 132


@pytest.fixture(autouse=True)
def _no_tables(monkeypatch, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": 1, "entries": []}))
    monkeypatch.setattr(tuned, "SHIPPED_TABLE", empty)
    monkeypatch.setattr(tuned, "SHIPPED_BF16_TABLE", empty)
    monkeypatch.delenv(tuned.TUNED_FILE_ENV, raising=False)
    monkeypatch.delenv(tuned.DISABLE_TUNED_ENV, raising=False)
    h8.clear_cache()
    hb.clear_cache()
    tuned.clear()
    yield
    h8.clear_cache()
    hb.clear_cache()
    tuned.clear()


def test_packing_matches_the_driver_enum():
    # CUtensorMapL2promotion: NONE 0, 64B 1, 128B 2, 256B 3; A in bits 0-3, B in bits 4-7.
    assert l2_promotion_arg((256, 256)) == 0x33
    assert l2_promotion_arg((256, 128)) == 0x23
    assert l2_promotion_arg((128, 256)) == 0x32
    assert l2_promotion_arg((0, 64)) == 0x10
    for bad in ((256,), (256, 96), None, (128, 128, 128)):
        with pytest.raises(ValueError, match="l2_promotion must be"):
            l2_promotion_arg(bad)
    assert h8.select_config(64, 2112, 7168, SMS).l2_promotion == _common.DEFAULT_L2_PROMOTION == (256, 256)
    assert hb.select_config(64, 2112, 7168, SMS).l2_promotion == (256, 256)


@pytest.mark.parametrize("bad", [[256], [256, 100], [256, "128"], "256", [128.0, 256], [256, 256, 256], [True, 256]])
def test_check_names_the_rule(bad):
    with pytest.raises(ValueError, match=r"l2_promotion must be \[A, B\]"):
        _common.check_l2_promotion(bad)


def _fp8_entry(**cfg):
    base = dict(block_m=64, block_n=64, num_stages=8, num_splits=1, num_multicast=1, multicast_on_a=False,
                tma_store=False, half_promote=False)
    return {"kind": "fp8_1d2d", "num_sms": SMS, "m": 128, "n": 4096, "k": 7168, "out_fp32": False, "has_c": False,
            "config": {**base, **cfg}, "us": 1.0}


def _bf16_entry(**cfg):
    base = dict(block_m=128, block_n=32, num_stages=hb.max_stages(128, 32, True), num_splits=1, num_multicast=1,
                multicast_on_a=False, tma_store=True, half_promote=False)
    return {"kind": "bf16_nn", "num_sms": SMS, "m": 128, "n": 4096, "k": 7168, "out_fp32": False, "has_c": False,
            "config": {**base, **cfg}, "us": 1.0}


def test_table_entries_carry_the_promotion(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_fp8_entry(l2_promotion=[256, 128]), _bf16_entry(l2_promotion=[128, 256])])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    cfg = h8.select_config(128, 4096, 7168, SMS)
    assert (cfg.block_m, cfg.block_n, cfg.l2_promotion) == (64, 64, (256, 128))
    assert h8.select_config(100, 4096, 7168, SMS).l2_promotion == (256, 128)  # the entry serves nearby M
    # The promotion is host-side: the same kernel as the entry without it.
    tuned.merge_entries(path, [_fp8_entry()])
    h8.clear_cache()
    plain = h8.select_config(128, 4096, 7168, SMS)
    assert plain.l2_promotion == (256, 256) and plain.kernel_key() == cfg.kernel_key()
    bcfg = hb.select_config(128, 4096, 7168, SMS, False, True)
    assert (bcfg.block_m, bcfg.block_n, bcfg.l2_promotion) == (128, 32, (128, 256))
    assert hb.select_config(128, 4096, 7168, SMS).l2_promotion == (256, 256)  # nt: no entry


def test_masked_entries_carry_the_promotion(tmp_path, monkeypatch):
    """m-grouped masked launches share the 1D2D launcher: their entries (per G and expected m) may
    name a promotion too."""
    g, em, n, k = 32, 20, 4096, 7168
    model = h8.select_grouped_config(h8.GEMM_GROUPED_MASKED, 128, n, k, g, SMS, em, 0)
    assert model.l2_promotion == (256, 256)
    entry = {"kind": f"{h8.MASKED_KIND_PREFIX}{g}", "num_sms": SMS, "m": em, "n": n, "k": k, "out_fp32": False,
             "has_c": False, "us": 1.0,
             "config": {"block_m": model.block_m, "block_n": model.block_n, "num_stages": model.num_stages,
                        "num_splits": 1, "num_multicast": model.num_multicast, "multicast_on_a": model.multicast_on_a,
                        "tma_store": model.tma_store, "half_promote": False, "l2_promotion": [128, 128]}}
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [entry])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    cfg = h8.select_grouped_config(h8.GEMM_GROUPED_MASKED, 128, n, k, g, SMS, em, 0)
    assert cfg.l2_promotion == (128, 128) and cfg.kernel_key() == model.kernel_key()


@pytest.mark.parametrize("masked", [True, False])
def test_bf16_grouped_entries_carry_the_promotion(tmp_path, monkeypatch, masked):
    """The BF16 m-grouped launcher takes the packed promotion too: a masked entry (per G and
    expected m) or a contiguous one (per G and stacked rows) may name a pair."""
    g, n, k = 4, 7168, 2048
    kind, m, em, align = ((hb.GEMM_GROUPED_MASKED, 256, 256, 0) if masked
                          else (hb.GEMM_GROUPED_CONTIGUOUS, 33024, 0, 128))
    model = hb.select_grouped_config(kind, m, n, k, g, SMS, em, align)
    assert model.l2_promotion == (256, 256)
    prefix = hb.MASKED_KIND_PREFIX if masked else hb.CONTIGUOUS_KIND_PREFIX
    entry = {"kind": f"{prefix}{g}", "num_sms": SMS, "m": m, "n": n, "k": k, "out_fp32": False, "has_c": False,
             "us": 1.0, "config": {"block_m": model.block_m, "block_n": model.block_n,
                                   "num_stages": model.num_stages, "num_splits": 1, "num_multicast": 1,
                                   "multicast_on_a": False, "tma_store": True, "half_promote": False,
                                   "l2_promotion": [128, 256]}}
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [entry])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    hb.clear_cache()
    cfg = hb.select_grouped_config(kind, m, n, k, g, SMS, em, align)
    assert cfg.l2_promotion == (128, 256) and cfg.grouped_kernel_key() == model.grouped_kernel_key()


def test_bf16_grouped_launch_passes_the_packed_promotion(monkeypatch):
    """m_grouped_bf16_gemm_nt_masked / _contiguous on CPU tensors up to the launcher (mocked): the
    packed value sits just before the stream."""
    torch = pytest.importorskip("torch")
    import dataclasses

    from finegemm.ops import sm90_bf16_gemm as ob

    seen = []
    monkeypatch.setattr(ob, "load_grouped", lambda cfg, device: 1)
    monkeypatch.setattr(ob, "_get_grouped_launcher", lambda: lambda *args: seen.append(args) or 0)
    monkeypatch.setattr(ob, "_get_raw_stream", lambda device: 0)
    monkeypatch.setattr(ob, "checked_group_ids", lambda fn, gl, m, g, psum, alignment: gl)  # the GPU layout check
    g, m, n, k = 2, 128, 256, 512
    bf16 = torch.bfloat16
    masked_cfg = dataclasses.replace(hb.select_grouped_config(hb.GEMM_GROUPED_MASKED, m, n, k, g, SMS, m, 0),
                                     l2_promotion=(64, 128))
    ob.m_grouped_bf16_gemm_nt_masked(torch.zeros(g, m, k, dtype=bf16), torch.zeros(g, n, k, dtype=bf16),
                                     torch.empty(g, m, n, dtype=bf16), torch.full((g,), m, dtype=torch.int32), m,
                                     config=masked_cfg)
    cont_cfg = dataclasses.replace(hb.select_grouped_config(hb.GEMM_GROUPED_CONTIGUOUS, g * m, n, k, g, SMS, 0, 128),
                                   l2_promotion=(0, 256))
    ob.m_grouped_bf16_gemm_nt_contiguous(torch.zeros(g * m, k, dtype=bf16), torch.zeros(g, n, k, dtype=bf16),
                                         torch.empty(g * m, n, dtype=bf16),
                                         torch.arange(g * m, dtype=torch.int32) // m, config=cont_cfg)
    # nn: B [G, K, N] in a padded buffer (row pitch n + 8, group pitch k * (n + 8) + 64).
    buf = torch.zeros(g * (k * (n + 8) + 64), dtype=bf16)
    b_kn = buf.as_strided((g, k, n), (k * (n + 8) + 64, n + 8, 1))
    nn_cfg = dataclasses.replace(hb.select_grouped_config(hb.GEMM_GROUPED_CONTIGUOUS, g * m, n, k, g, SMS, 0, 128,
                                                          True), l2_promotion=(128, 64))
    ob.m_grouped_bf16_gemm_nn_contiguous(torch.zeros(g * m, k, dtype=bf16), b_kn, torch.empty(g * m, n, dtype=bf16),
                                         torch.arange(g * m, dtype=torch.int32) // m, config=nn_cfg)
    # (..., l2_promotion, b_mn_major, ldb_group, stream): the packed value, then the B layout.
    assert [len(a) for a in seen] == [21, 21, 21]
    assert seen[0][-4] == 0x21 and seen[1][-4] == 0x30 and seen[2][-4] == 0x12
    assert [a[-3:-1] for a in seen] == [(0, 0), (0, 0), (1, k * (n + 8) + 64)]
    assert seen[2][9] == n + 8  # ldb: the N-major B's row pitch


@pytest.mark.parametrize("bad", [[256, 96], [128], "128"])
def test_malformed_promotion_in_a_table_is_rejected_then_ignored(tmp_path, monkeypatch, capsys, bad):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "entries": [_fp8_entry(l2_promotion=bad)]}))
    with pytest.raises(ValueError, match=r"config l2_promotion must be \[A, B\]"):
        tuned.load_table(path)
    tuned.clear()
    model = h8.select_config(128, 4096, 7168, SMS)
    h8.clear_cache()
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    assert h8.select_config(128, 4096, 7168, SMS) == model  # a GEMM call never fails on a table
    assert "ignoring tuned table" in capsys.readouterr().err


def test_print_configs_names_a_tuned_promotion(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_fp8_entry(l2_promotion=[256, 128])])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    monkeypatch.setenv("FINEGEMM_PRINT_CONFIGS", "1")
    h8.select_config(128, 4096, 7168, SMS)
    h8.select_config(128, 2112, 7168, SMS)
    err = capsys.readouterr().err.splitlines()
    assert "l2-promotion=256/128" in err[0] and "l2-promotion" not in err[1]


def test_prepared_launches_pass_the_packed_promotion(monkeypatch):
    """prepare() on CPU tensors up to the launcher (mocked): the packed value sits in the slot the
    host library reads (one-shot arguments = head, workspace, counters, tail, stream)."""
    torch = pytest.importorskip("torch")
    import dataclasses

    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as o8

    fp8 = torch.float8_e4m3fn
    cfg = dataclasses.replace(h8.select_config(128, 4096, 7168, SMS), l2_promotion=(256, 128))
    monkeypatch.setattr(o8, "_load", lambda cfg, device: 1)
    monkeypatch.setattr(o8, "_get_launcher", lambda: None)
    a, b = torch.zeros(128, 7168).to(fp8), torch.zeros(4096, 7168).to(fp8)
    call = o8.prepare(a, torch.rand(128, 56), b, torch.rand(32, 56), torch.empty(128, 4096, dtype=torch.bfloat16),
                      config=cfg)
    args = (*call._head, None, None, *call._tail)
    assert len(args) == 29 and args[-1] == 0x23  # fg_launch_sm90_fp8_gemm: l2_promotion before the stream

    bcfg = dataclasses.replace(hb.select_config(128, 4096, 7168, SMS, False, True), l2_promotion=(128, 0))
    monkeypatch.setattr(ob, "_load", lambda cfg, device: 1)
    monkeypatch.setattr(ob, "_get_launcher", lambda: None)
    bcall = ob.prepare(torch.zeros(128, 7168, dtype=torch.bfloat16), torch.zeros(7168, 4096, dtype=torch.bfloat16),
                       torch.empty(128, 4096, dtype=torch.bfloat16), layout="nn", config=bcfg)
    bargs = (*bcall._head, None, None, *bcall._tail)
    assert len(bargs) == 23 and bargs[-1] == 0x02  # fg_launch_sm90_bf16_gemm: l2_promotion before the stream


def _run_record(kind, layout, m, n, k, chosen, equal=True):
    return {"kind": kind, "layout": layout, "m": m, "n": n, "k": k, "out_fp32": False, "outputs_equal": equal,
            "chosen": chosen, "gain": 1.03}


def _apply(tmp_path, records, fp8_entries, bf16_entries):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "tune_l2_promotion.py"
    fp8, bf16, run = tmp_path / "fp8.json", tmp_path / "bf16.json", tmp_path / "run.json"
    fp8.write_text(json.dumps({"version": 1, "entries": fp8_entries}))
    bf16.write_text(json.dumps({"version": 1, "entries": bf16_entries}))
    run.write_text(json.dumps({"records": records}))
    proc = subprocess.run([sys.executable, str(script), "--apply", str(run), "--fp8-table", str(fp8),
                           "--bf16-table", str(bf16)], capture_output=True, text=True)
    return proc, json.loads(fp8.read_text())["entries"], json.loads(bf16.read_text())["entries"]


def test_apply_writes_exact_entries_only(tmp_path):
    masked = {**_fp8_entry(), "kind": "fp8_masked_g4", "m": 256}
    records = [_run_record("fp8", None, 128, 4096, 7168, [256, 128]),
               _run_record("fp8", None, 64, 4096, 7168, [128, 128]),  # no exact entry: reported, skipped
               _run_record("fp8_masked", 4, 256, 4096, 7168, [128, 128]),
               _run_record("bf16", "nn", 128, 4096, 7168, [128, 256]),
               _run_record("bf16_masked", 4, 256, 7168, 2048, [256, 128]),
               _run_record("bf16_contiguous", 8, 35328, 7168, 2048, [128, 128])]  # no entry: skipped
    bf16_masked = {**_bf16_entry(), "kind": "bf16_masked_g4", "m": 256, "n": 7168, "k": 2048}
    proc, fp8, bf16 = _apply(tmp_path, records, [_fp8_entry(), masked], [_bf16_entry(), bf16_masked])
    assert proc.returncode == 0, proc.stderr
    assert "skipped (no exact entry): fp8_1d2d 64x4096x7168" in proc.stdout
    by_kind = {e["kind"]: e for e in fp8}
    assert by_kind["fp8_1d2d"]["config"]["l2_promotion"] == [256, 128]
    assert by_kind["fp8_masked_g4"]["config"]["l2_promotion"] == [128, 128]
    bf16_by_kind = {e["kind"]: e for e in bf16}
    assert bf16_by_kind["bf16_nn"]["config"]["l2_promotion"] == [128, 256]
    assert bf16_by_kind["bf16_masked_g4"]["config"]["l2_promotion"] == [256, 128]
    assert "skipped (no exact entry): bf16_contiguous_g8 35328x7168x2048" in proc.stdout
    assert {k: v for k, v in by_kind["fp8_1d2d"]["config"].items() if k != "l2_promotion"} == _fp8_entry()["config"]
    # Back to the default: the field is dropped again.
    proc, fp8, _ = _apply(tmp_path, [_run_record("fp8", None, 128, 4096, 7168, [256, 256])],
                          [_fp8_entry(l2_promotion=[256, 128])], [])
    assert proc.returncode == 0 and "l2_promotion" not in fp8[0]["config"]


def test_apply_refuses_a_run_with_unequal_outputs(tmp_path):
    proc, fp8, _ = _apply(tmp_path, [_run_record("fp8", None, 128, 4096, 7168, [256, 128], equal=False)],
                          [_fp8_entry()], [])
    assert proc.returncode != 0 and "outputs differ" in proc.stderr + proc.stdout
    assert "l2_promotion" not in fp8[0]["config"]
