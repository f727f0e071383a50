"""scripts/merge_tuned_table.py: the same-run rule for merging a tune run into a shipped table."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "merge_tuned_table.py"


def _cfg(bn: int, stages: int = 4) -> dict:
    return {"block_m": 128, "block_n": bn, "num_stages": stages, "num_splits": 1, "num_multicast": 1,
            "multicast_on_a": False, "tma_store": True, "half_promote": False, "ctas_per_sm": 1, "k_batch": 1}


def _entry(m: int, bn: int, us: float, kind: str = "fp8_1d2d") -> dict:
    return {"kind": kind, "num_sms": 132, "m": m, "n": 4096, "k": 7168, "out_fp32": False, "has_c": False,
            "config": _cfg(bn), "us": us}


def _row(bn: int, us: float, ok: bool = True) -> dict:
    return {**_cfg(bn), "ok": ok, "us": us}


def _merge(tmp_path, shipped, tuned, records, min_gain=None):
    paths = {}
    for name, obj in (("table", {"version": 1, "entries": shipped}), ("tuned", {"version": 1, "entries": tuned}),
                      ("runs", {"records": records})):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(obj))
    cmd = [sys.executable, str(SCRIPT), "--table", str(paths["table"]), "--tuned", str(paths["tuned"]),
           "--runs", str(paths["runs"])]
    if min_gain:
        cmd += ["--min-gain", str(min_gain)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {(e["m"], e["config"]["block_n"]) for e in json.loads(paths["table"].read_text())["entries"]}, out


def test_switches_only_on_a_same_run_gain(tmp_path):
    shipped = [_entry(256, 64, 20.0), _entry(1024, 128, 50.0)]
    tuned = [_entry(256, 112, 18.0), _entry(1024, 112, 49.9)]
    records = [
        {"m": 256, "n": 4096, "k": 7168, "candidates": [_row(112, 18.0), _row(64, 19.0)]},     # 5.3% better
        {"m": 1024, "n": 4096, "k": 7168, "candidates": [_row(112, 49.9), _row(128, 50.2)]},   # 0.6% better
    ]
    entries, out = _merge(tmp_path, shipped, tuned, records)
    assert entries == {(256, 112), (1024, 128)}
    assert "1 switched, 1 kept" in out


def test_new_shape_is_added_and_failed_old_config_switches(tmp_path):
    shipped = [_entry(256, 64, 20.0)]
    tuned = [_entry(256, 112, 18.0), _entry(512, 160, 30.0)]
    records = [{"m": 256, "n": 4096, "k": 7168, "candidates": [_row(112, 18.0), _row(64, 17.0, ok=False)]}]
    entries, out = _merge(tmp_path, shipped, tuned, records)
    assert entries == {(256, 112), (512, 160)}
    assert "1 added, 1 switched" in out


def test_untimed_old_config_is_kept(tmp_path):
    """A winner is only compared with what the run timed: an entry whose configuration the run never
    ran (e.g. its l2_promotion, which no candidate generator produces) stays."""
    shipped = [_entry(256, 64, 20.0)]
    tuned = [_entry(256, 112, 18.0)]
    records = [{"m": 256, "n": 4096, "k": 7168, "candidates": [_row(112, 18.0), _row(96, 19.0)]}]
    entries, out = _merge(tmp_path, shipped, tuned, records)
    assert entries == {(256, 64)}
    assert "not timed" in out and "0 switched, 1 kept" in out


def test_min_gain_threshold(tmp_path):
    shipped = [_entry(256, 64, 20.0)]
    tuned = [_entry(256, 112, 18.0)]
    records = [{"m": 256, "n": 4096, "k": 7168, "candidates": [_row(112, 18.0), _row(64, 19.0)]}]
    entries, _ = _merge(tmp_path, shipped, tuned, records, min_gain=1.10)
    assert entries == {(256, 64)}


def test_bf16_records_match_by_layout(tmp_path):
    shipped = [_entry(256, 64, 20.0, kind="bf16_nt"), _entry(256, 64, 20.0, kind="bf16_tt")]
    tuned = [_entry(256, 112, 18.0, kind="bf16_nt"), _entry(256, 112, 18.0, kind="bf16_tt")]
    records = [
        {"layout": "nt", "m": 256, "n": 4096, "k": 7168, "out_fp32": False, "candidates": [_row(112, 18.0), _row(64, 19.9)]},
        {"layout": "tt", "m": 256, "n": 4096, "k": 7168, "out_fp32": False, "candidates": [_row(112, 18.0), _row(64, 18.1)]},
    ]
    table = tmp_path / "table.json"
    _, out = _merge(tmp_path, shipped, tuned, records)
    kinds = {(e["kind"], e["config"]["block_n"]) for e in json.loads(table.read_text())["entries"]}
    assert kinds == {("bf16_nt", 112), ("bf16_tt", 64)}
    assert "1 switched, 1 kept" in out


def test_wgrad_and_k_grouped_records_match_their_fp32_entries(tmp_path):
    """wgrad / k_grouped records carry no out_fp32 field (their D is always fp32) and may share
    (m, n, k) with each other: each entry is compared with its own family's run."""
    def entry(kind, bn, us):
        return {**_entry(4096, bn, us, kind=kind), "out_fp32": True, "has_c": True}

    shipped = [entry("fp8_1d1d", 192, 150.0), entry("fp8_k_grouped", 192, 150.0)]
    tuned = [entry("fp8_1d1d", 128, 140.0), entry("fp8_k_grouped", 128, 149.5)]
    records = [
        {"family": "wgrad", "m": 4096, "n": 4096, "k": 7168, "candidates": [_row(192, 151.0), _row(128, 140.0)]},
        {"family": "k_grouped", "m": 4096, "n": 4096, "k": 7168, "candidates": [_row(192, 150.0), _row(128, 149.5)]},
    ]
    table = tmp_path / "table.json"
    _, out = _merge(tmp_path, shipped, tuned, records)
    kinds = {(e["kind"], e["config"]["block_n"]) for e in json.loads(table.read_text())["entries"]}
    assert kinds == {("fp8_1d1d", 128), ("fp8_k_grouped", 192)}
    assert "1 switched, 1 kept" in out and "not timed" not in out
