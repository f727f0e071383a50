"""Tuned tables (heuristics/tuned.py) and the tuner's candidate list: CPU only."""
from __future__ import annotations

import dataclasses
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


def test_user_table_serves_the_nearest_tuned_m(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(16, 2112, 7168), _entry(64, 2112, 7168, block_n=128, num_stages=5)])
    model = h.select_config(100, 2112, 7168, 132)
    assert (model.block_n, model.num_stages) not in ((96, 6), (128, 5))  # the entries change something
    h.clear_cache()
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    # nearest tuned M in ratio, within 2x; ties go to the larger tuned M
    for m, bn in ((8, 96), (16, 96), (31, 96), (32, 128), (64, 128), (100, 128), (128, 128)):
        cfg = h.select_config(m, 2112, 7168, 132)
        assert (cfg.block_n, cfg.m) == (bn, m), (m, cfg)
        assert cfg.num_tiles == -(-m // cfg.block_m) * -(-2112 // bn) and cfg.grid == min(132, cfg.num_units)
    model129, model7 = (_model(129), _model(7))
    assert _cfg_fields(h.select_config(129, 2112, 7168, 132)) == _cfg_fields(model129)  # > 2x from 64: model
    assert _cfg_fields(h.select_config(7, 2112, 7168, 132)) == _cfg_fields(model7)  # > 2x from 16: model
    # K is matched by nearness too (within 2x): 5120 finds the 7168 entries, 3072 does not.
    assert h.select_config(64, 2112, 5120, 132).block_n == 128
    assert _cfg_fields(h.select_config(64, 2112, 3072, 132)) == _cfg_fields(_model(64, 3072))
    assert h.select_config(100, 2112, 7168, 78).grid <= 78  # another SM count: the model
    h.clear_cache()
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    assert h.select_config(100, 2112, 7168, 132) == model


def _cfg_fields(cfg):
    """A configuration's table fields, as a table holds them (JSON: lists, not tuples)."""
    return {f: list(v) if isinstance(v, tuple) else v
            for f, v in ((f, getattr(cfg, f)) for f in (*tuned.CONFIG_FIELDS, *tuned.OPTIONAL_FIELDS))}


def _model(m, k=7168):
    import os
    saved = os.environ.get(tuned.DISABLE_TUNED_ENV)
    os.environ[tuned.DISABLE_TUNED_ENV] = "1"
    try:
        h.clear_cache()
        return h.select_config(m, 2112, k, 132)
    finally:
        if saved is None:
            del os.environ[tuned.DISABLE_TUNED_ENV]
        else:
            os.environ[tuned.DISABLE_TUNED_ENV] = saved
        h.clear_cache()


def test_merge_replaces_by_key_and_keeps_others(tmp_path):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(64, 2112, 7168), _entry(64, 4096, 7168), _entry(64, 2112, 2048)])
    tuned.merge_entries(path, [_entry(64, 2112, 7168, block_n=128, num_stages=5)])
    data = json.loads(path.read_text())
    assert data["version"] == 1 and len(data["entries"]) == 3  # same N, other K: a separate entry
    table = tuned.load_table(path)
    assert table[tuned.entry_key("fp8_1d2d", 132, 2112, False, False)][(64, 7168)]["block_n"] == 128
    assert table[tuned.entry_key("fp8_1d2d", 132, 4096, False, False)][(64, 7168)]["block_n"] == 96


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
    (dict(num_multicast=4), "num_multicast"), (dict(tma_store=True, num_splits=2), "tma_store"),
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
        if e["kind"].startswith("fp8_contiguous_g"):  # m-grouped contiguous: (G, stacked rows, N, K)
            g, c = int(e["kind"][len("fp8_contiguous_g"):]), e["config"]
            picked = h.select_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, e["m"], e["n"], e["k"], g, e["num_sms"], 0, 128)
            fields = ("block_m", "block_n", "num_stages", "num_multicast", "tma_store")
            assert {f: getattr(picked, f) for f in fields} == {f: c[f] for f in fields}
            assert h.tuned_entry_config(e) == picked
            ops._render_cfg(picked)
            assert e["us"] <= e["model_us"]
            continue
        if e["kind"].startswith("fp8_masked_g"):  # m-grouped masked: (G, expected m, N, K)
            g, c = int(e["kind"][len("fp8_masked_g"):]), e["config"]
            m_max = -(-e["m"] // 128) * 128
            picked = h.select_grouped_config(h.GEMM_GROUPED_MASKED, m_max, e["n"], e["k"], g, e["num_sms"], e["m"], 0)
            fields = ("block_m", "block_n", "num_stages", "num_multicast", "tma_store")
            assert {f: getattr(picked, f) for f in fields} == {f: c[f] for f in fields}
            ops._render_cfg(picked)
            assert e["us"] <= e["model_us"]
            continue
        if e["kind"] == h.K_GROUPED_KIND:  # k-grouped: (M per group, N, planning K); G does not matter
            c = e["config"]
            ks = [e["k"]] * 4
            picked = h.select_k_grouped_config(e["m"], e["n"], ks, e["num_sms"], e["has_c"])
            fields = ("block_m", "block_n", "num_stages", "num_multicast", "multicast_on_a", "tma_store",
                      "half_promote", "k_batch")
            assert {f: getattr(picked, f) for f in fields} == {f: c[f] for f in fields}
            assert picked.gemm_kind == h.GEMM_K_GROUPED and h.tuned_entry_config(e).gemm_kind == h.GEMM_K_GROUPED
            ops._render_cfg(picked)
            continue
        picked = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], e["out_fp32"], e["has_c"],
                                 one_d_one_d=e["kind"] == "fp8_1d1d")
        assert _cfg_fields(picked) == {**tuned.OPTIONAL_FIELDS, **e["config"]}
        c = e["config"]
        cfg = h.make_config(e["m"], e["n"], e["k"], e["num_sms"], e["out_fp32"], e["has_c"], c["block_m"],
                            c["block_n"], c["num_stages"], c["num_splits"], c["num_multicast"], c["multicast_on_a"],
                            c["tma_store"], c["half_promote"], one_d_one_d=e["kind"] == "fp8_1d1d",
                            ctas_per_sm=c.get("ctas_per_sm", 1),
                            k_batch=c.get("k_batch", 1))
        ops._render_cfg(cfg)  # renders (the kernel's own checks)
        assert e["us"] <= e["model_us"], "the tuner keeps the model's choice unless a candidate beats it"


@pytest.mark.parametrize("m,n,k", [(64, 2112, 7168), (128, 32768, 512), (4096, 7168, 16384), (1, 576, 144)])
def test_candidates_start_with_the_model_choice_and_are_distinct(m, n, k, monkeypatch):
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    cands = h.candidate_configs(m, n, k, 132)
    model = h.select_config(m, n, k, 132)
    assert cands[0] == model
    keys = [c.kernel_key() + (c.num_splits, c.ctas_per_sm) for c in cands]
    # k-batched twins of the narrow candidates (none among the wide tiles of big or short-K shapes)
    assert any(c.k_batch > 1 for c in cands) == ((m, n, k) in ((64, 2112, 7168), (1, 576, 144)))
    assert len(keys) == len(set(keys))
    for c in cands:
        assert c.smem_bytes <= h.SMEM_LIMIT and c.grid <= 132 * c.ctas_per_sm
        if c.ctas_per_sm == 2:  # two must fit in one SM's shared memory, one consumer warpgroup
            assert c.block_m == 64 and 2 * (c.smem_bytes + 1024) <= h.SMEM_PER_SM and c.grid > 132
        ops._render_cfg(c)
    # Skinny shapes whose tiles cannot fill the SMs twice get two-CTA-per-SM candidates.
    assert any(c.ctas_per_sm == 2 for c in cands) == ((m, n, k) == (64, 2112, 7168))


def test_wgrad_family_entries_and_shapes(tmp_path, monkeypatch):
    from finegemm.bench import tune
    shapes = tune.wgrad_default_shapes()
    assert len(shapes) == len(set(shapes)) and (4096, 7168, 16384) in shapes and (7168, 2048, 2048) in shapes
    rec = {"family": "wgrad", "m": 4096, "n": 7168, "k": 4096, "model_us": 300.0,
           "best": {**_entry(0, 0, 0)["config"], "ctas_per_sm": 1, "k_batch": 1, "us": 250.0}}
    e = tune.table_entry(rec, 132, {"gpu": "x", "commit": "y", "date": "z"})
    assert (e["kind"], e["out_fp32"], e["has_c"], e["us"]) == ("fp8_1d1d", True, True, 250.0)
    assert tune.table_entry({**rec, "family": "dense"}, 132, {})["kind"] == "fp8_1d2d"
    # Tuned without C (`tune wgrad --no-c`): an entry of its own, which the call without C takes
    # before the fallback to the entry tuned with C, and the call with C does not take.
    e_no_c = tune.table_entry({**rec, "has_c": False, "best": {**rec["best"], "block_n": 160}}, 132, {})
    assert (e_no_c["kind"], e_no_c["has_c"], e_no_c["config"]["block_n"]) == ("fp8_1d1d", False, 160)
    assert e["config"]["block_n"] != 160
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [e, e_no_c])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    tuned.clear()
    h.clear_cache()
    try:
        no_c = h.select_config(4096, 7168, 4096, 132, True, False, one_d_one_d=True)
        with_c = h.select_config(4096, 7168, 4096, 132, True, True, one_d_one_d=True)
    finally:
        monkeypatch.delenv(tuned.TUNED_FILE_ENV)
        tuned.clear()
        h.clear_cache()
    assert (no_c.block_n, no_c.has_c) == (160, False)
    assert (with_c.block_n, with_c.has_c) == (e["config"]["block_n"], True)


def _grouped_choices_with_entry(tmp_path, monkeypatch, entry, kind, m, n, k, groups, other_groups, expected_m,
                                alignment):
    """select_grouped_config with `entry` in a user table: the config for `groups`, then for
    `other_groups` with the table and with tuned tables disabled (the model's)."""
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [entry])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    h.clear_cache()
    cfg = h.select_grouped_config(kind, m, n, k, groups, 132, expected_m, alignment)
    other = h.select_grouped_config(kind, m, n, k, other_groups, 132, expected_m, alignment)
    h.clear_cache()
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    return cfg, other, h.select_grouped_config(kind, m, n, k, other_groups, 132, expected_m, alignment)


def test_masked_family_entries_and_shapes(tmp_path, monkeypatch):
    from finegemm.bench import tune
    shapes = tune.masked_default_shapes()
    assert len(shapes) == 24 and (32, 20, 4096, 7168) in shapes
    rec = {"family": "masked", "groups": 32, "m": 20, "n": 4096, "k": 7168, "model_us": 300.0,
           "best": {**_entry(0, 0, 0)["config"], "block_m": 64, "block_n": 128, "num_stages": 6,
                    "ctas_per_sm": 1, "k_batch": 1, "us": 250.0}}
    e = tune.table_entry(rec, 132, {})
    assert (e["kind"], e["m"], e["out_fp32"], e["has_c"]) == ("fp8_masked_g32", 20, False, False)
    # The entry steers select_grouped_config for G = 32 (and nearby expected_m), not other G.
    cfg, other, other_model = _grouped_choices_with_entry(tmp_path, monkeypatch, e, h.GEMM_GROUPED_MASKED, 128, 4096,
                                                          7168, 32, 16, 24, 0)
    assert (cfg.block_m, cfg.block_n, cfg.num_stages) == (64, 128, 6) and cfg.grid == 132
    assert other == other_model


def test_contiguous_family_entries_and_problems(tmp_path, monkeypatch):
    from finegemm.bench import tune
    probs = tune.contiguous_default_problems()
    assert len(probs) == 8 and all(len(ms) == g for g, _m, _n, _k, ms in probs)
    rec = {"family": "contiguous", "groups": 4, "m": 34304, "n": 4096, "k": 7168, "model_us": 1500.0,
           "best": {**_entry(0, 0, 0)["config"], "block_m": 128, "block_n": 192, "num_stages": 4, "num_multicast": 2,
                    "multicast_on_a": True, "tma_store": True, "ctas_per_sm": 1, "k_batch": 1, "us": 1400.0}}
    e = tune.table_entry(rec, 132, {})
    assert (e["kind"], e["m"], e["out_fp32"], e["has_c"]) == ("fp8_contiguous_g4", 34304, False, False)
    # The entry steers select_grouped_config for G = 4 contiguous near its stacked rows, not other G.
    cfg, other, other_model = _grouped_choices_with_entry(tmp_path, monkeypatch, e, h.GEMM_GROUPED_CONTIGUOUS, 30000,
                                                          4096, 7168, 4, 8, 0, 128)
    assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.num_multicast, cfg.tma_store) == (128, 192, 4, 2, True)
    assert other == other_model


def test_k_batch_above_stages_is_rejected():
    """A batch waits for k_batch full stages before releasing one: more than the ring deadlocks."""
    with pytest.raises(ValueError, match="k_batch 4 > num_stages 3"):
        h.make_config(16, 576, 7168, 132, False, False, 64, 64, 3, k_batch=4)
    assert h.make_config(16, 576, 7168, 132, False, False, 64, 64, 4, k_batch=4).k_batch == 4


@pytest.mark.parametrize("bad, rule", [
    ({"m": 0}, "'m' must be an integer >= 1"),
    ({"k": 0}, "'k' must be an integer >= 1"),
    ({"config": {**_entry(1, 1, 16)["config"], "block_m": 64.0}}, "config 'block_m' must be an integer"),
    ({"config": {**_entry(1, 1, 16)["config"], "tma_store": 1}}, "config 'tma_store' must be true or false"),
    ({"out_fp32": "no"}, "'out_fp32' must be true or false"),
    ({"config": {**_entry(1, 1, 16)["config"], "b_group": 3}}, "config 'b_group' must be 1, 2 or 4"),
    ({"config": {**_entry(1, 1, 16)["config"], "b_group": True}}, "config 'b_group' must be 1, 2 or 4"),
])
def test_malformed_user_table_is_ignored_with_a_warning(tmp_path, monkeypatch, capsys, bad, rule):
    path = tmp_path / "t.json"
    entry = {**_entry(64, 2112, 7168, block_n=128, num_stages=5), **bad}
    path.write_text(json.dumps({"version": 1, "entries": [entry]}))
    with pytest.raises(ValueError, match=rule):
        tuned.load_table(path)
    tuned.clear()
    model = h.select_config(64, 2112, 7168, 132)
    h.clear_cache()
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    assert h.select_config(64, 2112, 7168, 132) == model  # the model decides; no exception
    assert "ignoring tuned table" in capsys.readouterr().err


def test_missing_or_broken_user_table_files(tmp_path, monkeypatch, capsys):
    model = h.select_config(64, 2112, 7168, 132)
    for name, text in (("missing.json", None), ("broken.json", "{not json")):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
        h.clear_cache()
        tuned.clear()
        assert h.select_config(64, 2112, 7168, 132) == model
        err = capsys.readouterr().err
        assert ("does not exist" in err) if text is None else ("ignoring tuned table" in err)


def test_env_changes_after_the_first_call_take_effect(tmp_path, monkeypatch):
    """The planners' caches key on the tables' state (FINEGEMM_TUNED_FILE, FINEGEMM_DISABLE_TUNED)."""
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(64, 2112, 7168, block_n=128, num_stages=5)])
    model = h.select_config(64, 2112, 7168, 132)
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    assert h.select_config(64, 2112, 7168, 132).block_n == 128  # no clear_cache() needed
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    assert h.select_config(64, 2112, 7168, 132) == model


def test_two_cta_entries_need_the_whole_device(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(64, 2112, 7168, block_n=32, num_stages=8, num_splits=4, ctas_per_sm=2)])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    assert h.select_config(64, 2112, 7168, 132).ctas_per_sm == 2
    assert h.select_config(64, 2112, 7168, 132, allow_two_cta=False).ctas_per_sm == 1


def test_tune_cli_rejects_bad_shapes(capsys):
    from finegemm.bench import tune
    for bad in ("64,2112", "64,2112,7169", "0,2112,7168", "a,b,c", "1,2,3,4,5"):
        with pytest.raises(SystemExit):
            tune.main(["dense", "--shapes", bad])
        assert "--shapes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune.main(["sparse"])
    assert "family" in capsys.readouterr().err


def test_forced_configs_must_match_the_problem():
    """ops.plan / plan_grouped(config=...) name the mismatch instead of launching a wrong plan."""
    cfg = h.make_config(64, 2112, 7168, 132, False, False, 64, 64, 8)
    with pytest.raises(ValueError, match="forced config is for"):
        ops.plan(64, 2112, 7296, False, False, 0, config=cfg)
    g = h.make_grouped_config(h.GEMM_GROUPED_MASKED, 256, 4096, 7168, 4, 132, 192, 0, 128, 128, 5, 1, True)
    with pytest.raises(ValueError, match="forced grouped config does not match"):
        ops.plan_grouped(h.GEMM_GROUPED_MASKED, 256, 4096, 7168, 8, 192, 0, 0, config=g)
    # The contiguous kind's config= (the tuner): another kind or another G is refused too.
    c = h.make_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, 1024, 4096, 7168, 4, 132, 0, 128, 128, 128, 5, 1, True)
    with pytest.raises(ValueError, match="forced grouped config does not match"):
        ops.plan_grouped(h.GEMM_GROUPED_MASKED, 1024, 4096, 7168, 4, 0, 0, 0, config=c)
    with pytest.raises(ValueError, match="forced grouped config does not match"):
        ops.plan_grouped(h.GEMM_GROUPED_CONTIGUOUS, 1024, 4096, 7168, 8, 0, 128, 0, config=c)


def test_bf16_forced_config_must_match_the_problem():
    """sm90_bf16_gemm.prepare(config=...) names the argument when the config is another problem's."""
    import torch

    from finegemm.heuristics import sm90_bf16_gemm as bh
    from finegemm.ops import sm90_bf16_gemm as bops
    a, b = torch.zeros(128, 512, dtype=torch.bfloat16), torch.zeros(256, 512, dtype=torch.bfloat16)
    d = torch.empty(128, 256, dtype=torch.bfloat16)
    for wrong in (bh.make_config(64, 256, 512, 132, False, False, False, False, 64, 64, 1),  # other M
                  bh.make_config(128, 256, 512, 132, False, True, False, False, 128, 64, 1),  # other layout
                  bh.make_config(128, 256, 512, 132, False, False, True, False, 128, 64, 1)):  # fp32 out
        with pytest.raises(ValueError, match="config .* is not one of this problem"):
            bops.prepare(a, b, d, None, "nt", config=wrong)


@pytest.mark.parametrize("args, rule", [
    (dict(block_m=256), "block_m in"), (dict(block_n=200), "block_n a multiple of 16"),
    (dict(num_multicast=3), "num_multicast 3"), (dict(num_stages=20), "num_stages 20 outside"),
])
def test_illegal_grouped_configs_are_rejected(args, rule):
    base = dict(block_m=128, block_n=128, num_stages=5, num_multicast=1, tma_store=True)
    base.update(args)
    with pytest.raises(ValueError, match=rule):
        h.make_grouped_config(h.GEMM_GROUPED_MASKED, 256, 4096, 7168, 4, 132, 192, 0, base["block_m"],
                              base["block_n"], base["num_stages"], base["num_multicast"], base["tma_store"])


def test_bf16_tune_shapes_keep_the_bench_output_dtype():
    from finegemm.bench.tune import bf16_default_shapes, bf16_tune_shapes

    assert bf16_tune_shapes(None) == bf16_default_shapes()
    got = bf16_tune_shapes([(64, 256, 7168), (64, 2112, 7168), (100, 256, 7168)])
    # The bench times N = 256 with fp32 d and the dense set with bf16 d; unknown shapes: bf16 d.
    assert got == [(64, 256, 7168, True), (64, 2112, 7168, False), (100, 256, 7168, False)]


def test_1d1d_call_without_c_uses_the_entry_tuned_with_c(monkeypatch):
    """Recipe (1,1,128) entries are tuned with C (c = d); a call without C and K >= 2048 whose shape
    has no entry tuned without C (`tune wgrad --no-c`) gets the same tile (its kernel stores instead
    of reduce-adding), not the model; one that has gets its own; recipe (1,128,128) never crosses."""
    monkeypatch.setattr(tuned, "SHIPPED_TABLE", SHIPPED)
    h.clear_cache()
    entries = [e for e in json.loads(SHIPPED.read_text())["entries"] if e["kind"] == "fp8_1d1d"]
    no_c_entries = {(e["m"], e["n"], e["k"]): e for e in entries if not e["has_c"]}
    entries = [e for e in entries if e["has_c"]]
    assert entries and no_c_entries
    for e in no_c_entries.values():
        no_c = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], True, False, one_d_one_d=True)
        assert _cfg_fields(no_c) == {**tuned.OPTIONAL_FIELDS, **e["config"]} and not no_c.has_c
    for e in entries:
        with_c = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], True, True, one_d_one_d=True)
        no_c = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], True, False, one_d_one_d=True)
        assert _cfg_fields(with_c) == {**tuned.OPTIONAL_FIELDS, **e["config"]}
        assert not no_c.has_c and with_c.has_c
        if (e["m"], e["n"], e["k"]) in no_c_entries:
            continue  # checked above
        if e["k"] >= h.NO_C_FALLBACK_MIN_K:  # the same tile (without C there is no C stage)
            assert _cfg_fields(no_c) == {**_cfg_fields(with_c), "c_stage": False}
        else:  # short K: the epilogue dominates, the model decides without C
            monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
            h.clear_cache()
            model = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], True, False, one_d_one_d=True)
            monkeypatch.delenv(tuned.DISABLE_TUNED_ENV)
            h.clear_cache()
            assert _cfg_fields(no_c) == _cfg_fields(model)
    calls = []
    real = tuned.lookup
    monkeypatch.setattr(tuned, "lookup", lambda *a: calls.append(a) or real(*a))
    h.clear_cache()
    h.select_config(4096, 7000, 7168, 132, True, True)  # recipe (1,128,128), fp32 + C: no such entry
    assert [c[-1] for c in calls if c[0] == "fp8_1d2d"] == [True], "1D2D looks up its own C mode only"


@pytest.mark.parametrize("m", [1, 16, 64, 128, 129, 256, 384, 512, 600])
@pytest.mark.parametrize("n,k", [(6144, 4096), (10240, 8192), (8192, 28672), (36864, 7168)])
def test_model_skips_multicast_on_skinny_shapes_but_the_tuner_times_it(m, n, k, monkeypatch):
    """The model picks no 2-CTA multicast for recipe (1, 128, 128) problems up to
    MODEL_NO_MULTICAST_MAX_M rows (measured slower there, NOTES v0.66, v0.71); the tuner still
    proposes multicast candidates, after the model's choice."""
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    model = h.select_config(m, n, k, 132)
    cands = h.candidate_configs(m, n, k, 132)
    assert cands[0] == model
    assert any(c.num_multicast == 2 for c in cands)
    threshold = h.MODEL_NO_MULTICAST_MAX_M
    if m <= threshold:
        assert model.num_multicast == 1
    # The rule covers recipe (1, 128, 128) only: the weight-gradient model is what it was without it.
    wgrad = h.select_config(m, n, k, 132, True, True, one_d_one_d=True)
    monkeypatch.setattr(h, "MODEL_NO_MULTICAST_MAX_M", 0)
    h.clear_cache()
    try:
        assert h.select_config(m, n, k, 132, True, True, one_d_one_d=True) == wgrad
        if m > threshold:  # and above the threshold the dense model is unchanged too
            assert h.select_config(m, n, k, 132) == model
    finally:
        h.clear_cache()


def test_the_skinny_multicast_rule_changes_the_model_choice_somewhere(monkeypatch):
    """Guards the rule against being dead code: on these shapes the estimate alone ranks a multicast
    tile first, the model's choice does not."""
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    changed = 0
    for (m, n, k) in [(1, 6144, 4096), (16, 4096, 4096), (64, 8192, 8192), (16, 8192, 28672)]:
        ranked = sorted(h._model_candidates(m, n, k, 132, False, False, True, True, False))
        changed += ranked[0][4] == 2 and h.select_config(m, n, k, 132).num_multicast == 1
    assert changed >= 3


def test_c_stage_candidates_entries_and_rules(tmp_path, monkeypatch):
    """The C stage (recipe (1, 1, 128), direct epilogue with C): the tuner times a twin of every
    direct candidate with C (none without C); make_config rejects it elsewhere; its smem holds the
    C tile; a table entry that names it serves calls with C only (the no-C fallback drops it); the
    tuner writes the field only when it chose the stage."""
    from finegemm.bench import tune

    with_c = h.candidate_configs(4096, 32768, 512, 132, True, True, one_d_one_d=True)
    staged = [c for c in with_c if c.c_stage]
    assert staged and all(c.has_c and not c.tma_store and c.num_splits == 1 and c.block_n % 32 == 0 for c in staged)
    assert len({c.kernel_key() for c in with_c}) == len(with_c)
    assert not any(c.c_stage for c in h.candidate_configs(4096, 32768, 512, 132, True, False, one_d_one_d=True))
    ok = dict(m=4096, n=32768, k=512, num_sms=132, out_fp32=True, has_c=True, block_m=128, block_n=128, num_stages=4,
              one_d_one_d=True, c_stage=True)
    cfg = h.make_config(**ok)
    assert cfg.c_stage and ops._kernel_name(cfg).endswith("_cst")
    assert cfg.smem_bytes == h.smem_bytes(128, 128, 4, False, True) + 128 * 128 * 4 + 2 * 16
    assert h.max_stages(128, 128, False, True, cap=16, c_stage=True) < h.max_stages(128, 128, False, True, cap=16)
    for bad in [dict(has_c=False), dict(tma_store=True), dict(num_splits=2), dict(block_n=112), dict(one_d_one_d=False),
                dict(ctas_per_sm=2), dict(block_m=64, ctas_per_sm=2, num_stages=4), dict(num_stages=6)]:
        with pytest.raises(ValueError):
            h.make_config(**{**ok, **bad})
    # Two CTAs per SM stage C too (block_m 64: a 64 x block_n C tile each, within half an SM).
    two = h.make_config(**{**ok, "block_m": 64, "ctas_per_sm": 2, "num_stages": 3})
    assert two.c_stage and two.smem_bytes <= h.SMEM_LIMIT_2CTA and ops._kernel_name(two).endswith("_cst_2cta")
    assert any(c.c_stage and c.ctas_per_sm == 2 for c in with_c)
    # ... only at short K (NOTES v0.76: 18-27% slower than one CTA per SM at K = 1536 / 2048).
    assert not any(c.ctas_per_sm == 2 for c in h.candidate_configs(4096, 7168, 2048, 132, True, True,
                                                                   one_d_one_d=True))
    # Table entries: K = 512 (no no-C fallback) and K = 4096 (the fallback takes the tile, not the stage).
    cfg_fields = dict(block_m=128, block_n=128, num_stages=4, num_splits=1, num_multicast=2, multicast_on_a=True,
                      tma_store=False, half_promote=False, c_stage=True)
    path = tmp_path / "t.json"
    tuned.merge_entries(path, [{"kind": "fp8_1d1d", "num_sms": 132, "m": 4096, "n": n, "k": k, "out_fp32": True,
                                "has_c": True, "config": cfg_fields, "us": 1.0} for n, k in ((32768, 512), (7168, 4096))])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    h.clear_cache()
    for n, k in ((32768, 512), (7168, 4096)):
        assert h.select_config(4096, n, k, 132, True, True, one_d_one_d=True).c_stage
        assert not h.select_config(4096, n, k, 132, True, False, one_d_one_d=True).c_stage
    assert h.select_config(4096, 7168, 4096, 132, True, False, one_d_one_d=True).block_n == 128  # the fallback
    rec = {"family": "wgrad", "m": 4096, "n": 32768, "k": 512, "model_us": 300.0,
           "best": {**cfg_fields, "ctas_per_sm": 1, "k_batch": 2, "us": 250.0}}
    assert tune.table_entry(rec, 132, {})["config"]["c_stage"] is True
    rec["best"]["c_stage"] = False
    assert "c_stage" not in tune.table_entry(rec, 132, {})["config"]


def test_tuner_always_times_todays_selection(tmp_path, monkeypatch):
    """`finegemm tune` times what a call gets today (its table entry) even where no candidate
    generator produces it (here an l2_promotion the generators never set), right after the model's
    choice, and marks its row: a winner is then always compared with it (v0.86: a re-tune without
    it would have replaced entries 5% faster than the run's winners)."""
    from finegemm.bench.tune import _log_result, _mark_current, _with_current

    path = tmp_path / "t.json"
    tuned.merge_entries(path, [_entry(128, 24576, 1536, block_m=128, block_n=192, num_stages=4, tma_store=True,
                                      l2_promotion=[256, 128])])
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    h.clear_cache()
    tuned.clear()
    current = h.select_config(128, 24576, 1536, 132)
    assert tuple(current.l2_promotion) == (256, 128)
    cands = h.candidate_configs(128, 24576, 1536, 132)
    assert not any(tuple(c.l2_promotion) == (256, 128) for c in cands)
    out, i = _with_current(cands, current)
    assert i == 1 and out[1] is current and out[0] is cands[0] and out[2:] == cands[1:]
    # Already a candidate: the list is untouched and the index points at it.
    twin = dataclasses.replace(current, est_us=current.est_us + 1.0)  # the same launch, another estimate
    again, j = _with_current(out, twin)
    assert again is out and j == 1
    rows = [{"us": 16.4, "ok": True}, {"us": 15.3, "ok": True}, {"us": 15.9, "ok": True}]
    rec = _mark_current(rows, i, {"candidates": rows})
    assert rec["current_us"] == 15.3 and rows[1]["current"] and not rows[0].get("current")
    lines = []
    _log_result(lines.append, "128x24576x1536", rows, rows[1], "bm128 bn192")
    assert "current    15.30 us" in lines[0]


def test_b_group_entries_apply_where_the_group_fits(tmp_path, monkeypatch):
    """A dense entry's b_group is taken where the family's b_group_fits allows it at the call's
    shape, and dropped (one k-block per box, as correct) where it does not; FP8 and BF16 alike;
    the tuner writes the field only when it is not 1."""
    from finegemm.bench import tune
    from finegemm.heuristics import sm90_bf16_gemm as bh
    from finegemm.ops import _runtime

    fp8 = _entry(64, 2112, 7168, block_n=128, num_stages=6)
    fp8["config"]["b_group"] = 2
    bf16 = {**fp8, "kind": "bf16_nt", "n": 7168, "k": 16384,
            "config": {**fp8["config"], "block_n": 64, "num_stages": 10, "b_group": 4}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "entries": [fp8, bf16]}))
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    h.clear_cache()
    bh.clear_cache()
    tuned.clear()
    picked = h.select_config(64, 2112, 7168, 132)
    assert (picked.block_n, picked.num_stages, picked.b_group) == (128, 6, 2)
    # K = 7040: 55 k-blocks, not whole groups of 2 -> the entry's tile with one k-block per box
    odd = h.select_config(64, 2112, 7040, 132)
    assert (odd.block_n, odd.b_group) == (128, 1) and not h.b_group_fits(odd, 2)
    # a ring of 10 is not whole groups of 4 -> dropped; at 8 stages it fits
    assert bh.select_config(64, 7168, 16384, 132).b_group == 1
    bf16["config"]["num_stages"] = 8
    path.write_text(json.dumps({"version": 1, "entries": [fp8, bf16]}))
    tuned.clear()
    bh.clear_cache()
    grouped = bh.select_config(64, 7168, 16384, 132)
    assert (grouped.num_stages, grouped.b_group) == (8, 4)
    assert grouped.kernel_key()[7:] == (4,)
    # FINEGEMM_DIAG_B_GROUP=1 takes the table's group away (the A/B of a table's choice)
    monkeypatch.setattr(_runtime, "DIAG_B_GROUP", 1)
    assert _runtime.with_diag_b_group(grouped, bh.b_group_fits).b_group == 1
    monkeypatch.setattr(_runtime, "DIAG_B_GROUP", 0)
    assert _runtime.with_diag_b_group(grouped, bh.b_group_fits) is grouped
    rec = {"family": "bf16", "layout": "nt", "m": 64, "n": 7168, "k": 16384, "model_us": 70.0,
           "best": {**bf16["config"], "us": 60.0}}
    assert tune.table_entry(rec, 132, {})["config"]["b_group"] == 4
    rec["best"]["b_group"] = 1
    assert "b_group" not in tune.table_entry(rec, 132, {})["config"]
