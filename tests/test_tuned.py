"""Tuned tables (heuristics/tuned.py) and the tuner's candidate list: CPU only."""
from __future__ import annotations

import json

import pytest

from finegemm.heuristics import sm90_fp8_gemm as h
from finegemm.heuristics import tuned
from finegemm.ops import sm90_fp8_gemm as ops


SHIPPED = tuned.SHIPPED_TABLE


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    # The model's own choices are what these tests compare against: no shipped table by default.
    monkeypatch.setattr(tuned, "SHIPPED_TABLE", tmp_path / "no_shipped_table.json")
    monkeypatch.delenv(tuned.TUNED_FILE_ENV, raising=False)
    monkeypatch.delenv(tuned.DISABLE_TUNED_ENV, raising=False)
    h.clear_cache()
    tuned.clear()
    yield
    h.clear_cache()
    tuned.clear()


def _entry(m, n, k, **cfg):
    base = dict(block_m=64, block_n=96, num_stages=6, num_splits=1, num_multicast=1, multicast_on_a=False,
                tma_store=False, half_promote=False)
    base.update(cfg)
    return {"kind": "fp8_1d2d", "num_sms": 132, "m": m, "n": n, "k": k, "out_fp32": False, "has_c": False,
            "config": base, "us": 1.0}


def test_user_table_overrides_model_for_the_m_bucket_only(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(100, 2112, 7168)])
    model = h.select_config(100, 2112, 7168, 132)
    assert (model.block_n, model.num_stages) != (96, 6)  # the entry changes something
    h.clear_cache()
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    for m in (65, 100, 128):  # same number of 64-row blocks as the tuned m
        cfg = h.select_config(m, 2112, 7168, 132)
        assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.m) == (64, 96, 6, m)
        assert cfg.num_tiles == -(-m // 64) * -(-2112 // 96) and cfg.grid == min(132, cfg.num_units)
    assert h.select_config(129, 2112, 7168, 132) == h.select_config(129, 2112, 7168, 132)
    assert h.select_config(129, 2112, 7168, 132).block_n != 96 or h.select_config(129, 2112, 7168, 132).num_stages != 6
    assert h.select_config(100, 2112, 7168, 78).grid <= 78  # another SM count: the model
    assert h.select_config(100, 2112, 7168, 132, out_fp32=True).num_stages == h.max_stages(
        h.select_config(100, 2112, 7168, 132, out_fp32=True).block_m,
        h.select_config(100, 2112, 7168, 132, out_fp32=True).block_n)
    h.clear_cache()
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    assert h.select_config(100, 2112, 7168, 132) == model


def test_merge_replaces_by_key_and_keeps_others(tmp_path):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(64, 2112, 7168), _entry(64, 4096, 7168)])
    tuned.merge_entries(path, [_entry(64, 2112, 7168, block_n=128, num_stages=5)])
    data = json.loads(path.read_text())
    assert data["version"] == 1 and len(data["entries"]) == 2
    table = tuned.load_table(path)
    assert table[tuned.entry_key("fp8_1d2d", 132, 64, 2112, 7168, False, False)]["block_n"] == 128
    assert table[tuned.entry_key("fp8_1d2d", 132, 64, 4096, 7168, False, False)]["block_n"] == 96


def test_malformed_tables_are_rejected(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": []}))
    with pytest.raises(ValueError, match="not a finegemm tuned table"):
        tuned.load_table(bad)
    bad2 = tmp_path / "bad2.json"
    bad2.write_text(json.dumps({"version": 1, "entries": [{"kind": "fp8_1d2d", "num_sms": 132, "m": 1, "n": 8,
                                                           "k": 16, "config": {"block_m": 64}}]}))
    with pytest.raises(ValueError, match="needs a 'config' with fields"):
        tuned.load_table(bad2)


@pytest.mark.parametrize("cfg, rule", [
    (dict(block_n=232), "block_n"), (dict(num_stages=12), "num_stages"),
    (dict(num_multicast=2, num_splits=2), "not with split-K"), (dict(tma_store=True, num_splits=2), "tma_store"),
])
def test_illegal_entry_falls_back_to_the_model(tmp_path, monkeypatch, capsys, cfg, rule):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(64, 2112, 7168, **cfg)])
    model = h.select_config(64, 2112, 7168, 132)
    h.clear_cache()
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    h._warned.clear()
    assert h.select_config(64, 2112, 7168, 132) == model
    assert rule in capsys.readouterr().err
    with pytest.raises(ValueError, match=rule):
        h.make_config(64, 2112, 7168, 132, False, False, **{**_entry(0, 0, 0)["config"], **cfg})


def test_shipped_table_entries_are_buildable_and_consulted(monkeypatch):
    data = json.loads(SHIPPED.read_text())
    assert data["version"] == 1
    monkeypatch.setattr(tuned, "SHIPPED_TABLE", SHIPPED)
    for e in data["entries"]:
        picked = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], e["out_fp32"], e["has_c"])
        assert {f: getattr(picked, f) for f in tuned.CONFIG_FIELDS} == e["config"]
        c = e["config"]
        cfg = h.make_config(e["m"], e["n"], e["k"], e["num_sms"], e["out_fp32"], e["has_c"], c["block_m"],
                            c["block_n"], c["num_stages"], c["num_splits"], c["num_multicast"], c["multicast_on_a"],
                            c["tma_store"], c["half_promote"])
        ops._render_cfg(cfg)  # renders (the kernel's own checks)
        assert e["us"] <= e["model_us"] * 1.02 if e.get("model_us") else True


@pytest.mark.parametrize("m,n,k", [(64, 2112, 7168), (128, 32768, 512), (4096, 7168, 16384), (1, 576, 144)])
def test_candidates_start_with_the_model_choice_and_are_distinct(m, n, k, monkeypatch):
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    cands = h.candidate_configs(m, n, k, 132)
    model = h.select_config(m, n, k, 132)
    assert cands[0] == model
    keys = [c.kernel_key() + (c.num_splits, c.ctas_per_sm) for c in cands]
    assert len(keys) == len(set(keys))
    for c in cands:
        assert c.smem_bytes <= h.SMEM_LIMIT and c.grid <= 132 * c.ctas_per_sm
        if c.ctas_per_sm == 2:  # two must fit in one SM's shared memory, one consumer warpgroup
            assert c.block_m == 64 and 2 * (c.smem_bytes + 1024) <= h.SMEM_PER_SM and c.grid > 132
        ops._render_cfg(c)
    assert any(c.half_promote for c in cands)
    # Skinny shapes whose tiles cannot fill the SMs twice get two-CTA-per-SM candidates.
    assert any(c.ctas_per_sm == 2 for c in cands) == ((m, n, k) == (64, 2112, 7168))
