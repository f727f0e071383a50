"""`python -m finegemm targets`: the issues' speed targets evaluated from bench JSON (CPU only)."""
import json
import math

import pytest

from finegemm import cli
from finegemm.bench import targets

RESULTS = targets.RESULTS_DIR
# An H200 bench of all three suites at one commit (shipped in benchmarks/results).
D6393AA = {s: RESULTS / f"2026-12-05_h200_{s}_d6393aa.json" for s in ("dense", "grouped", "bf16")}


def _anchors():
    return json.loads(targets.ANCHORS.read_text())


def _dense_result(scale_of):
    """A `bench dense`-shaped result: finegemm at DeepGEMM's anchor x scale_of(m, n, k), cuBLAS at
    DeepGEMM's time."""
    recs = []
    for a in _anchors()["dense"]:
        dg = a["us"]["deepgemm"]
        recs.append({"m": a["m"], "n": a["n"], "k": a["k"], "deepgemm_anchor_us": dg,
                     "us": {"finegemm": dg * scale_of(a["m"], a["n"], a["k"]), "cublas_blockwise": dg}})
    return {"records": recs}


def _by_target(rows):
    return {r["target"]: r for r in rows}


def test_anchor_goals_are_the_issue_rules():
    # The report compares against goal_us; this is what the issue's words mean at each M.
    for a in _anchors()["dense"]:
        dg = a["us"]["deepgemm"]
        want = dg / 1.1 if a["m"] == 4096 else max(dg / 1.5, a["floor_us"] / 0.8)
        assert a["goal_us"] == pytest.approx(want, abs=0.011), (a["m"], a["n"], a["k"])


def test_dense_rows_meet_and_miss():
    # Everything at 1.6x DeepGEMM (and cuBLAS): every dense target but the cuBLAS geomean (>= 1.7x) is met.
    rows = _by_target(targets.dense_rows(_dense_result(lambda m, n, k: 1 / 1.6), _anchors()))
    assert rows["geomean >= 1.3x DeepGEMM"]["met"] is True
    assert rows["geomean >= 1.3x DeepGEMM"]["value"] == "1.600x"
    assert rows["geomean >= 1.7x cuBLAS blockwise"]["met"] is False
    assert rows["none slower than DeepGEMM"]["met"] is True
    assert rows["M = 4096 shapes at the goal (>= 1.10x DeepGEMM)"]["met"] is True
    # 1.6x DeepGEMM is inside every M <= 128 goal (1.5x DeepGEMM, or the floor rule where looser)
    small = rows["M <= 128 shapes at the goal (1.5x DeepGEMM or 80% of the floor)"]
    assert small["met"] is True
    assert rows[f"host <= {targets.HOST_US_TARGET:g} us per cached call"]["met"] is None  # not measured

    # One shape slower than DeepGEMM: named, and the geomean and goal rows follow.
    slow = (128, 4096, 7168)
    res = _dense_result(lambda m, n, k: 1.05 if (m, n, k) == slow else 1 / 1.6)
    res["records"][0]["host_us_per_call"] = 8.5
    rows = _by_target(targets.dense_rows(res, _anchors()))
    none_slower = rows["none slower than DeepGEMM"]
    assert none_slower["met"] is False and none_slower["misses"] == ["128x4096x7168 0.952x"]
    small = rows["M <= 128 shapes at the goal (1.5x DeepGEMM or 80% of the floor)"]
    assert small["met"] is False and len(small["misses"]) == 1 and small["misses"][0].startswith("128x4096x7168")
    host = rows[f"host <= {targets.HOST_US_TARGET:g} us per cached call"]
    assert host["met"] is False and host["misses"] == ["64x2112x7168 8.50 us"]


def test_dense_rows_name_missing_shapes():
    res = _dense_result(lambda m, n, k: 1.0)
    res["records"] = [r for r in res["records"] if (r["m"], r["n"], r["k"]) != (64, 2112, 7168)]
    res["records"][0]["us"]["finegemm"] = None  # a record whose call failed
    failed = res["records"][0]
    rows = _by_target(targets.dense_rows(res, _anchors()))
    assert rows["the 18 shapes measured"]["met"] is False
    assert rows["the 18 shapes measured"]["misses"] == sorted(
        ["64x2112x7168", "x".join(str(failed[d]) for d in "mnk")], key=lambda s: [
            f"{m}x{n}x{k}" for m in targets.DENSE_MS for n, k in targets.DENSE_NK].index(s))


def test_masked_floor_is_the_anchors_floor_rule():
    # One group of M rows is a dense problem: the anchors' dense floor_us is the larger of this
    # memory floor and the datasheet FP8 compute time.
    anchors = _anchors()
    ceiling = anchors["ceilings"]["copy_TBps_read_plus_write"]
    tflops = anchors["ceilings"]["fp8_dense_datasheet_TFLOPS"]
    for a in anchors["dense"]:
        rec = {"groups": 1, "m": a["m"], "n": a["n"], "k": a["k"]}
        compute_us = 2 * a["m"] * a["n"] * a["k"] / (tflops * 1e6)
        assert max(targets.masked_floor_us(rec, ceiling), compute_us) == pytest.approx(a["floor_us"], rel=0.01), a


def test_small_masked_floor_row():
    ceiling = _anchors()["ceilings"]["copy_TBps_read_plus_write"]
    recs = []
    for m, frac in ((20, 0.9), (192, 0.75), (1024, 0.1)):  # m = 1024 is not a memory-bound problem
        rec = {"kind": "masked", "groups": 32, "m": m, "n": 4096, "k": 7168}
        rec["us"] = {"finegemm": targets.masked_floor_us(rec, ceiling) / frac}
        recs.append(rec)
    rows = _by_target(targets.grouped_rows({"records": recs}, _anchors()))
    row = rows["masked, m = 20 / 192 per group: >= 80% of the memory floor"]
    assert row["met"] is False and row["value"].startswith("1 of 2 (75%-90%")
    assert row["misses"] == ["masked G=32 192x4096x7168 75%"]


def test_bf16_rows():
    recs = [{"layout": "nt", "m": 64, "n": 2112, "k": 7168, "us": {"finegemm": 10.0, "torch": 12.0}},
            {"layout": "tt", "m": 4096, "n": 2112, "k": 7168, "us": {"finegemm": 10.0, "torch": 8.5}},
            {"layout": "grouped_masked", "m": 20, "n": 4096, "k": 7168,
             "us": {"finegemm": 10.0, "torch_grouped_mm": 13.0}},
            {"layout": "grouped_contiguous_nn", "m": 20, "n": 4096, "k": 7168,  # an extra: not in the geomean
             "us": {"finegemm": 10.0, "torch_grouped_mm": 1.0}}]
    rows = _by_target(targets.bf16_rows({"records": recs}))
    assert rows["dense geomean >= 1.0x torch"]["value"] == f"{math.sqrt(1.2 * 0.85):.3f}x"
    assert rows["no dense record below 0.9x torch"]["met"] is False
    assert rows["no dense record below 0.9x torch"]["misses"] == ["tt 4096x2112x7168 0.850x"]
    assert rows["dense M <= 128 geomean >= 1.1x torch"]["met"] is True
    assert rows["grouped geomean >= 1.3x torch._grouped_mm"]["value"] == "1.300x"


@pytest.mark.skipif(not all(p.exists() for p in D6393AA.values()), reason="d6393aa's results not shipped")
def test_report_agrees_with_the_bench_summaries():
    # Two computations of the same geomeans: the bench's own summary and this report's.
    data = {s: json.loads(p.read_text()) for s, p in D6393AA.items()}
    rows = _by_target(targets.evaluate(data["dense"], data["grouped"], data["bf16"], _anchors()))
    dense_sum, bf16_sum = data["dense"]["summary"], data["bf16"]["summary"]
    assert rows["geomean >= 1.3x DeepGEMM"]["value"] == f"{dense_sum['geomean_speedup_vs_deepgemm_18']:.3f}x"
    assert rows["geomean >= 1.7x cuBLAS blockwise"]["value"] == \
        f"{dense_sum['geomean_speedup_vs_cublas_blockwise_18']:.3f}x"
    assert sorted(m.split()[0] for m in rows["none slower than DeepGEMM"]["misses"]) == \
        sorted("x".join(map(str, s)) for s in dense_sum["shapes_slower_than_deepgemm"])
    assert rows["dense geomean >= 1.0x torch"]["value"] == f"{bf16_sum['geomean_speedup_vs_torch']:.3f}x"
    assert rows["grouped geomean >= 1.3x torch._grouped_mm"]["value"] == \
        f"{bf16_sum['grouped']['geomean_speedup_vs_torch_grouped_mm']:.3f}x"
    k_first = next(r for r in data["grouped"]["records"] if r["kind"] == "k_grouped")
    assert rows[next(t for t in rows if t.startswith("k-grouped"))]["met"] == (k_first["tflops"]["finegemm"] >= 1000)


def test_cli(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert cli.main(["targets", "--dense", str(D6393AA["dense"]), "--gpu", "none", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("| issue | target |") and "#3" in text and "#5" not in text
    assert {r["issue"] for r in json.loads(out.read_text())["rows"]} == {3}
    assert cli.main(["targets", "--gpu", "no-such-gpu"]) == 2
    assert cli.main(["targets", "--bf16", str(tmp_path / "missing.json")]) == 2  # the bench did not write it
    with pytest.raises(SystemExit):
        cli.main(["info", "--no-such-option"])


def test_newest_picks_by_date(tmp_path):
    for name in ("2026-12-01_h200_dense_abc1234.json", "2026-12-05_h200_dense_0000000.json",
                 "2026-12-06_h100_dense_fffffff.json", "2026-12-04_h200_dense_nocurve_1234567.json"):
        (tmp_path / name).write_text("{}")
    assert targets.newest("dense", "h200", tmp_path).name == "2026-12-05_h200_dense_0000000.json"
    assert targets.newest("bf16", "h200", tmp_path) is None
