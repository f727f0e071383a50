"""What the benchmark suites can show without a GPU: argument parsing, the shape sets and seeded
draws, the row sampling of the reference checks, the record builders run end to end on CPU
tensors (the API runs the exact reference there, timing replaced by a stub), and that the
precompile scripts list the kernels the new records launch."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.bench import _common, bf16 as bench_bf16, dense as bench_dense, grouped as bench_grouped  # noqa: E402
from finegemm.bench.dense import DENSE_NK  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _stub_timer(fn, num_tests):
    fn()
    return 10.0


def _load_script(name):
    spec = importlib.util.spec_from_file_location(f"_fg_script_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _anchors():
    return json.loads((ROOT / "benchmarks" / "anchors_h200.json").read_text())


# ----------------------------------------------------------------------------- argument parsing
def test_grouped_parser():
    p = bench_grouped.build_parser()
    args = p.parse_args([])
    assert args.kinds == ["contiguous", "masked", "k_grouped", "wgrad"]
    assert args.wgrad_sets == ["dense", "anchor"]
    assert p.parse_args(["--kinds", "k_grouped", "wgrad"]).kinds == ["k_grouped", "wgrad"]
    assert p.parse_args(["--wgrad-sets", "dense", "--ref-flops", "1e12"]).ref_flops == 1e12
    with pytest.raises(SystemExit):
        p.parse_args(["--kinds", "dense"])
    # Idle time before each record (clocks recover after the multi-ms contiguous records).
    assert args.settle_ms == 300.0 and p.parse_args(["--settle-ms", "0"]).settle_ms == 0.0


@pytest.mark.parametrize("bad", ["-1", "inf", "nan", "soon"])
def test_settle_ms_is_checked(bad, capsys):
    for p in (bench_grouped.build_parser(), bench_dense.build_parser()):
        with pytest.raises(SystemExit):
            p.parse_args(["--settle-ms", bad])
        err = capsys.readouterr().err
        assert "--settle-ms" in err and "milliseconds >= 0" in err
    assert bench_dense.build_parser().parse_args([]).settle_ms == 300.0


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "x"])
def test_warm_ms_is_checked(bad, capsys):
    for p in (bench_grouped.build_parser(), bench_dense.build_parser(), bench_bf16.build_parser()):
        with pytest.raises(SystemExit):
            p.parse_args(["--warm-ms", bad])
        assert "--warm-ms" in capsys.readouterr().err
        assert p.parse_args([]).warm_ms == 0.0 and p.parse_args(["--warm-ms", "20"]).warm_ms == 20.0


def test_bf16_parser():
    p = bench_bf16.build_parser()
    args = p.parse_args([])
    assert args.grouped is True
    assert args.grouped_layouts == ["grouped_contiguous", "grouped_masked", "k_grouped", "grouped_contiguous_nn"]
    assert p.parse_args(["--no-grouped"]).grouped is False
    assert p.parse_args(["--layouts"]).layouts == []  # grouped records only
    with pytest.raises(SystemExit):
        p.parse_args(["--grouped-layouts", "nt"])


def test_list_without_gpu(capsys):
    assert bench_grouped.main(["--list", "--kinds", "k_grouped", "wgrad"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum("k_grouped" in line for line in out) == 3 and sum("wgrad" in line for line in out) == 12
    assert bench_bf16.main(["--list", "--grouped-layouts", "k_grouped"]) == 0
    assert sum("k_grouped" in line for line in capsys.readouterr().out.splitlines()) == 3
    assert bench_bf16.main(["--list", "--no-grouped"]) == 0
    assert capsys.readouterr().out == ""


# ----------------------------------------------------------------------------- shape sets and draws
def test_k_grouped_draws():
    probs = bench_grouped.k_grouped_problems()
    assert [(g, m, n, ek) for g, m, n, _, ek in probs] == [
        (4, 4096, 7168, 8192), (8, 4096, 7168, 4096), (16, 7168, 2048, 2048)]
    for g, _m, _n, ks, ek in probs:
        assert len(ks) == g
        for kg in ks:
            assert kg % 128 == 0 and 0.7 * ek <= kg < 1.3 * ek + 128
    assert bench_grouped.k_grouped_problems() == probs  # seeded: reproducible
    assert [p[3] for p in bench_grouped.k_grouped_problems(seed=1)] != [p[3] for p in probs]
    # The draws walk DeepGEMM's six problems in order: our k_g are the anchors' k_g.
    anchor_ks = {(r["groups"], r["m"], r["n"]): r["ks"] for r in _anchors()["k_grouped_wgrad"]}
    for g, m, n, ks, _ in probs:
        assert anchor_ks[(g, m, n)] == ks


def test_draw_ks_rounds_up_to_128():
    class Fixed(random.Random):
        def uniform(self, a, b):
            return 0.7

    assert bench_grouped.draw_ks(2, 1000, Fixed()) == [768, 768]  # int(700) -> 768
    assert bench_grouped.draw_ks(1, 1280, Fixed()) == [896]  # 896 exactly stays


def test_fit_ms_to_padded_total():
    fit = bench_grouped.fit_ms_to_padded_total
    ms = [1000, 300, 129, 5000]  # padded 1024 + 384 + 256 + 5120 = 6784
    assert fit(ms, 6784, 128) == ms  # already there: unchanged (a copy)
    for total in (6784 + 3 * 128, 6784 - 5 * 128, 4 * 128):
        out = fit(ms, total, 128)
        assert sum(-(-x // 128) * 128 for x in out) == total
        assert all(x >= 1 for x in out)
        assert [x % 128 for x in out] == [x % 128 for x in ms]  # every group keeps its padding
        assert sum(abs(a - b) for a, b in zip(out, ms)) == abs(total - 6784)  # only the rows needed move
    assert fit(ms, 6784 + 128, 128) == [1000, 300, 257, 5000]  # rows go to the smallest group
    assert fit(ms, 6784 - 128, 128) == [1000, 300, 129, 4872]  # and come from the largest
    for bad in (6784 + 64, 3 * 128):  # not a multiple of the alignment; below one segment per group
        with pytest.raises(ValueError, match="cannot hold"):
            fit(ms, bad, 128)


def test_wgrad_shapes():
    dense = bench_grouped.wgrad_shapes(("dense",))
    assert dense == [("dense", 4096, n, k) for (n, k) in DENSE_NK]
    anchor = bench_grouped.wgrad_shapes(("anchor",))
    assert {(m, n, k) for _, m, n, k in anchor} == {
        (r["m"], r["n"], r["k"]) for r in _anchors()["dense_wgrad_fp32_accumulate"]}
    assert bench_grouped.wgrad_shapes() == dense + anchor


def test_plans_share_sets():
    plan = bench_grouped.plan_records()
    kinds = [r["kind"] for r in plan]
    assert kinds.count("contiguous") == 8 and kinds.count("masked") == 24
    assert kinds.count("k_grouped") == 3 and kinds.count("wgrad") == 12
    # The contiguous plan: one random.Random(0) in order, each draw fitted to its anchor's padded
    # total where the anchors have the shape (the records then do DeepGEMM's padded work).
    rng = random.Random(0)
    totals = {(r["groups"], r["expected_m_per_group"], r["n"], r["k"]): r["m_total"]
              for r in _anchors()["m_grouped_contiguous"]}
    fitted = 0
    for r in (r for r in plan if r["kind"] == "contiguous"):
        drawn = [int(r["m"] * rng.uniform(0.7, 1.3)) for _ in range(r["groups"])]
        total = totals.get((r["groups"], r["m"], r["n"], r["k"]))
        assert r["ms"] == (bench_grouped.fit_ms_to_padded_total(drawn, total, 128) if total else drawn)
        if total:
            fitted += 1
            assert sum(-(-x // 128) * 128 for x in r["ms"]) == total
    assert fitted == len(totals) == 4
    # bench bf16's grouped records: the same sets, segment sizes and k_g as the FP8 bench.
    gplan = bench_bf16.grouped_plan()
    strip = lambda r, key: {k: v for k, v in r.items() if k not in (key, "kind", "layout")}  # noqa: E731
    for fp8_kind, bf16_layout in (("contiguous", "grouped_contiguous"), ("masked", "grouped_masked"),
                                  ("k_grouped", "k_grouped")):
        a = [strip(r, "kind") for r in plan if r["kind"] == fp8_kind]
        b = [strip(r, "layout") for r in gplan if r["layout"] == bf16_layout]
        assert a == b and a
    only_k = bench_bf16.grouped_plan(["k_grouped"])
    assert [r["layout"] for r in only_k] == ["k_grouped"] * 3
    # The nn records: the contiguous set's shapes and segment sizes, each right after its nt twin.
    both = bench_bf16.grouped_plan(["grouped_contiguous", "grouped_contiguous_nn"])
    nt = [strip(r, "layout") for r in both if r["layout"] == "grouped_contiguous"]
    nn = [strip(r, "layout") for r in both if r["layout"] == "grouped_contiguous_nn"]
    assert nt == nn == [strip(r, "layout") for r in gplan if r["layout"] == "grouped_contiguous"]
    assert [r["layout"] for r in both[:2]] == ["grouped_contiguous", "grouped_contiguous_nn"]


def test_sample_rows():
    assert _common.sample_rows(300, 1.0, budget=1e9) == list(range(300))
    assert _common.sample_rows(100, 1e12, budget=1.0) == list(range(100))  # min_rows >= m: all
    rows = _common.sample_rows(10000, 1e9, budget=5e11, seed=3)
    assert len(rows) == 500 and rows == sorted(set(rows))
    assert rows[0] == 0 and rows[-1] == 9999 and all(0 <= r < 10000 for r in rows)
    assert rows == _common.sample_rows(10000, 1e9, budget=5e11, seed=3)
    assert rows != _common.sample_rows(10000, 1e9, budget=5e11, seed=4)
    assert len(_common.sample_rows(10000, 1e12, budget=1.0)) == _common.REF_MIN_ROWS
    assert _common.sample_rows(0, 1.0) == []


# ----------------------------------------------------------------------------- records on CPU
def _gen():
    return torch.Generator().manual_seed(0)


def test_k_grouped_record_cpu():
    rec = bench_grouped.bench_k_grouped(3, 200, 40, [256, 0, 128], _gen(), 2, device="cpu", timer=_stub_timer,
                                        ref_flops=1.0)
    assert rec["kind"] == "k_grouped" and rec["k"] == 384 and rec["groups"] == 3
    assert rec["calc_diff_rows"] == _common.REF_MIN_ROWS
    assert rec["calc_diff"] is not None and rec["calc_diff"] < 1e-12
    assert rec["us"]["finegemm"] == 10.0 and rec["tflops"]["finegemm"] == pytest.approx(2 * 200 * 40 * 384 / 10e6)
    assert "torch_grouped_mm_bf16" in rec["us"] or "torch_matmul_loop_bf16" in rec["us"]
    # cuBLAS blockwise needs a GPU: its error is recorded, the record is still complete.
    assert "cublas_blockwise_loop" in rec["us"] or "cublas_blockwise_loop" in rec["errors"]


def test_k_grouped_record_catches_wrong_results(monkeypatch):
    real = finegemm.k_grouped_fp8_gemm_nt_contiguous

    def wrong(a, b, d, ks, ks_tensor, c=None):
        real(a, b, d, ks, ks_tensor, c=c)
        d[2] += 0.5 * d[2].abs().mean()

    monkeypatch.setattr(finegemm, "k_grouped_fp8_gemm_nt_contiguous", wrong)
    rec = bench_grouped.bench_k_grouped(3, 200, 40, [256, 0, 128], _gen(), 2, device="cpu", timer=_stub_timer,
                                        ref_flops=1.0)
    assert rec["calc_diff"] > 1e-3


def test_k_grouped_record_survives_failing_contender(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no grouped mm here")

    monkeypatch.setattr(torch, "_grouped_mm", broken)
    rec = bench_grouped.bench_k_grouped(2, 64, 32, [128, 128], _gen(), 2, device="cpu", timer=_stub_timer)
    assert "no grouped mm here" in rec["errors"]["torch_grouped_mm_bf16"]
    assert rec["us"]["torch_matmul_loop_bf16"] == 10.0 and rec["us"]["finegemm"] == 10.0


def test_wgrad_record_cpu(monkeypatch):
    rec = bench_grouped.bench_wgrad(200, 48, 256, _gen(), 2, device="cpu", timer=_stub_timer, ref_flops=1.0)
    assert (rec["kind"], rec["m"], rec["n"], rec["k"], rec["groups"]) == ("wgrad", 200, 48, 256, 1)
    assert rec["calc_diff"] < 1e-12 and rec["calc_diff_rows"] == _common.REF_MIN_ROWS
    assert set(rec["us"]) >= {"finegemm", "torch_bf16"}
    assert "cublas_blockwise" in rec["us"] or "cublas_blockwise" in rec["errors"]
    # A kernel that ignored C (no accumulation) must show in calc_diff.
    real = finegemm.fp8_gemm_nt
    monkeypatch.setattr(finegemm, "fp8_gemm_nt", lambda a, b, d, c=None, recipe=None: real(a, b, d, recipe=recipe))
    bad = bench_grouped.bench_wgrad(200, 48, 256, _gen(), 2, device="cpu", timer=_stub_timer)
    assert bad["calc_diff"] > 1e-3


def test_reverse_round_if_long():
    calls = []

    def timer(fn, num_tests):
        calls.append(fn)
        return fn()

    # Below the line: one round, nothing changes.
    rec, order = {"us": {}}, []
    for name, t in (("a", 900.0), ("b", 10.0)):
        assert _common.time_into(rec, name, lambda t=t: t, 2, timer, order)
    assert not _common.reverse_round_if_long(rec, order, 2, timer) and "us_rounds" not in rec
    assert [n for n, _ in order] == ["a", "b"] and len(calls) == 2

    # A long record: every timed contender again, in the reverse order; the means reported. A
    # contender that failed in round one is not re-timed; one failing in round two keeps its time.
    state = {"second": False}

    def flaky():
        if state["second"]:
            raise RuntimeError("gone")
        return 30.0

    calls.clear()
    rec, order = {"us": {}}, []
    fns = {"a": lambda: 1200.0 if not state["second"] else 1000.0, "b": flaky, "c": lambda: 50.0 if not state["second"]
           else 70.0}
    for name in ("a", "b", "c"):
        _common.time_into(rec, name, fns[name], 2, timer, order)
    assert not _common.time_into(rec, "broken", lambda: 1 / 0, 2, timer, order)
    assert [n for n, _ in order] == ["a", "b", "c"] and "broken" in rec["errors"]
    state["second"] = True
    first_calls = len(calls)
    assert _common.reverse_round_if_long(rec, order, 2, timer)
    assert calls[first_calls:] == [fns["c"], fns["b"], fns["a"]]
    assert rec["us_rounds"] == {"a": [1200.0, 1000.0], "c": [50.0, 70.0]}
    assert rec["us"] == {"a": 1100.0, "b": 30.0, "c": 60.0}
    assert "gone" in rec["errors"]["b_round2"]


def test_long_grouped_records_get_a_reverse_round(monkeypatch):
    seen = []

    def slow_timer(fn, num_tests):
        fn()
        seen.append(fn)
        return 2000.0 + len(seen)

    rec = bench_grouped.bench_k_grouped(2, 64, 32, [128, 128], _gen(), 2, device="cpu", timer=slow_timer)
    names = list(rec["us_rounds"])
    assert len(names) >= 3 and "finegemm" in names and "finegemm_no_c" in names
    half = len(seen) // 2
    assert len(seen) == 2 * len(names) and seen[half:] == seen[:half][::-1]
    for name, (first, second) in rec["us_rounds"].items():
        assert second > first and rec["us"][name] == (first + second) / 2
    assert rec["tflops"]["finegemm"] == pytest.approx(2 * 64 * 32 * 256 / rec["us"]["finegemm"] / 1e6)
    seen.clear()
    brec = bench_bf16.bench_grouped_masked(2, 40, 32, 128, _gen(), 2, device="cpu", timer=slow_timer)
    assert list(brec["us_rounds"]) == ["finegemm", "torch_grouped_mm"] and len(seen) == 4
    assert brec["speedup_vs_torch_grouped_mm"] == pytest.approx(brec["us"]["torch_grouped_mm"] / brec["us"]["finegemm"])


def test_new_kind_anchors_and_summary():
    anchors = _anchors()
    g, m, n, ks, ek = bench_grouped.k_grouped_problems()[0]
    rec = {"kind": "k_grouped", "groups": g, "m": m, "n": n, "k": sum(ks), "ks": ks,
           "us": {"finegemm": 1000.0, "finegemm_no_c": 750.0, "cublas_blockwise_loop": 1500.0,
                  "torch_grouped_mm_bf16": 3000.0},
           "tflops": {"finegemm": 2.0 * m * n * sum(ks) / 1000.0 / 1e6}, "calc_diff": 1e-9}
    bench_grouped._attach_new_kind_anchors(rec, anchors)
    dg_us = next(r for r in anchors["k_grouped_wgrad"] if (r["groups"], r["m"], r["n"]) == (g, m, n))["us"]
    assert rec["deepgemm_same_ks"] is True
    assert rec["speedup_vs_deepgemm"] == pytest.approx(dg_us["deepgemm_2_6_1"] / 1000.0)
    assert rec["speedup_vs_cublas_blockwise"] == pytest.approx(1.5)
    assert rec["speedup_vs_cublas_blockwise_no_c"] == pytest.approx(2.0)  # like for like: no C either side
    assert rec["speedup_vs_torch_bf16"] == pytest.approx(3.0)
    w = {"kind": "wgrad", "set": "anchor", "groups": 1, "m": 4096, "n": 7168, "k": 4096,
         "us": {"finegemm": 200.0, "torch_bf16": 300.0}, "calc_diff": 2e-9, "errors": {"cublas_blockwise": "x"}}
    bench_grouped._attach_new_kind_anchors(w, anchors)
    assert w["speedup_vs_deepgemm"] == pytest.approx(256.2 / 200.0) and w["speedup_vs_cublas_blockwise"] is None
    s = bench_grouped._summary([rec, w])
    assert s["k_grouped"]["geomean_speedup_vs_cublas_blockwise"] == pytest.approx(1.5)
    assert s["k_grouped"]["geomean_speedup_vs_cublas_blockwise_no_c"] == pytest.approx(2.0)
    assert s["wgrad"]["geomean_speedup_vs_cublas_blockwise_no_c"] is None  # no timing of either
    assert s["wgrad"]["max_calc_diff"] == 2e-9
    assert s["geomean_speedup_vs_deepgemm"] is None  # m-grouped kinds only
    assert s["errors"] == [("wgrad", 1, 4096, 7168, 4096, ["cublas_blockwise"])]


@pytest.mark.parametrize("layout", ["grouped_contiguous", "grouped_masked", "k_grouped"])
def test_bf16_grouped_records_cpu(layout):
    kw = dict(device="cpu", timer=_stub_timer, ref_flops=1.0)
    if layout == "grouped_contiguous":
        rec = bench_bf16.bench_grouped_contiguous(3, [100, 0, 150], 48, 256, _gen(), 2, **kw)
        assert rec["m"] == 250 and rec["m_padded"] == 384 and rec["all_written"] is True
        tol = 1e-5  # bf16 output
    elif layout == "grouped_masked":
        rec = bench_bf16.bench_grouped_masked(2, 150, 48, 256, _gen(), 2, **kw)
        assert rec["m_max"] == 256 and rec["all_written"] is True
        tol = 1e-5
    else:
        rec = bench_bf16.bench_k_grouped_tn(3, 200, 48, [128, 0, 256], _gen(), 2, **kw)
        assert rec["k"] == 384 and rec["ks"] == [128, 0, 256]
        tol = 1e-12  # fp32 output, fp64 reference on CPU
    assert rec["layout"] == layout and rec["calc_diff_rows"] == _common.REF_MIN_ROWS
    assert rec["calc_diff"] is not None and rec["calc_diff"] < tol
    assert rec["us"]["finegemm"] == 10.0 and rec["us"]["torch_grouped_mm"] == 10.0
    assert rec["speedup_vs_torch_grouped_mm"] == 1.0
    assert rec["calc_diff_torch_grouped_mm"] < 1e-4  # the contender computes the same product


def test_bf16_grouped_summary(monkeypatch):
    def wrong(a, b, d, masked_m, expected_m, compiled_dims="nk"):
        d.zero_()

    monkeypatch.setattr(finegemm, "m_grouped_bf16_gemm_nt_masked", wrong)
    plan = [{"layout": "grouped_masked", "groups": 2, "m": 20, "n": 32, "k": 128},
            {"layout": "k_grouped", "groups": 2, "m": 16, "n": 32, "k": 256, "ks": [128, 128]}]
    recs = bench_bf16.run_grouped(plan, _gen(), 2, device="cpu", timer=_stub_timer)
    assert recs[0]["calc_diff"] > 0.5 and recs[1]["calc_diff"] < 1e-12
    s = bench_bf16.grouped_summary(recs + [{"layout": "nt", "us": {}}])
    assert s["geomean_speedup_vs_torch_grouped_mm"] == pytest.approx(1.0) and s["meets_target"] is False
    assert s["max_calc_diff"] == recs[0]["calc_diff"] and s["target"] == 1.3
    assert set(s["geomean_speedup_vs_torch_grouped_mm_by_layout"]) == {"grouped_masked", "k_grouped"}


# ----------------------------------------------------------------------------- precompile lists
def test_precompile_fp8_includes_new_bench_configs():
    from finegemm.heuristics.sm90_fp8_gemm import select_config
    from finegemm.ops import sm90_fp8_gemm as ops

    problems = bench_grouped.planned_1d1d_problems()
    n_groups = sum(sum(1 for kg in ks if kg) for _, _, _, ks, _ in bench_grouped.k_grouped_problems())
    assert len(problems) == n_groups + 2 * 12  # wgrad: c = d and the finegemm_no_c timing
    assert (4096, 7168, 9984, True) in problems and (4096, 7168, 16384, True) in problems
    assert (4096, 7168, 16384, False) in problems
    assert (7168, 16384, 4096, True) in problems
    names = {ops._kernel_name(c) for c in _load_script("precompile").wgrad_configs(132)}
    for (m, n, k, has_c) in problems:
        cfg = select_config(m, n, k, 132, True, has_c, one_d_one_d=True)  # what ops.plan picks for the call
        assert ops._kernel_name(cfg) in names, (m, n, k)


def test_precompile_bf16_includes_grouped_bench_configs():
    from finegemm.heuristics.sm90_bf16_gemm import select_config
    from finegemm.ops import sm90_bf16_gemm as ops

    pc = _load_script("precompile_bf16")
    probs = pc.bench_k_grouped_problems()
    assert len(probs) == sum(len(ks) for _, _, _, ks, _ in bench_grouped.k_grouped_problems())
    assert all(has_c for *_, has_c in probs) and (4096, 7168, 9984, True) in probs
    cfgs = pc.bench_grouped_configs(132)
    assert len(cfgs) == 8 + 8 + 24  # contiguous nt, contiguous nn, masked
    assert sum(c.b_mn_major for c in cfgs) == 8
    names = set(pc.kernel_sources(132, shapes_only=True))
    for c in cfgs:  # the m-grouped kernels the contiguous / masked records launch
        assert ops.grouped_kernel_name(c.grouped_kernel_key()) in names
    for (m, n, k, has_c) in probs:  # the dense tn kernel each k-grouped group launches (ops.plan's choice)
        assert ops.kernel_name(select_config(m, n, k, 132, True, True, True, has_c).kernel_key()) in names


# ----------------------------------------------------------------------------- cuBLAS blockwise contender
def _fake_scaled_mm(scale=1.0):
    from finegemm import reference

    def fake(mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b, output_dtype=torch.bfloat16, **kwargs):
        out = reference.fp8_gemm_nt(mat_a, scale_a, mat_b.t(), scale_b, out_dtype=torch.float32, recipe=(1, 1, 128))
        return (out * scale).to(output_dtype)

    return fake


def test_cublas_blockwise_selection(monkeypatch):
    F = torch.nn.functional
    if not (hasattr(F, "scaled_mm") and hasattr(F, "ScalingType")):
        pytest.skip("this torch has no torch.nn.functional.scaled_mm")
    x, w = torch.randn(300, 256, generator=_gen()), torch.randn(600, 256, generator=_gen())
    a, sfa = finegemm.per_token_cast_to_fp8(x)
    b, sfb = finegemm.per_token_cast_to_fp8(w)
    monkeypatch.setattr(F, "scaled_mm", _fake_scaled_mm())
    fn, what = bench_grouped.cublas_blockwise_1x128(a, sfa, b, sfb)
    assert what.startswith("F.scaled_mm") and "float32" in what and fn().shape == (300, 600)
    # A contender that runs but computes another product is not taken (here nothing else runs on CPU).
    monkeypatch.setattr(F, "scaled_mm", _fake_scaled_mm(1.5))
    monkeypatch.setattr(torch, "_scaled_mm", lambda *args, **kwargs: torch.zeros(300, 600))
    with pytest.raises(RuntimeError, match="wrong result") as info:
        bench_grouped.cublas_blockwise_1x128(a, sfa, b, sfb)
    assert str(info.value).count("wrong result") == 6  # 2 x F.scaled_mm, 4 x torch._scaled_mm


def test_records_time_cublas_when_it_runs(monkeypatch):
    F = torch.nn.functional
    if not (hasattr(F, "scaled_mm") and hasattr(F, "ScalingType")):
        pytest.skip("this torch has no torch.nn.functional.scaled_mm")
    monkeypatch.setattr(F, "scaled_mm", _fake_scaled_mm())
    rec = bench_grouped.bench_k_grouped(3, 200, 40, [256, 0, 128], _gen(), 2, device="cpu", timer=_stub_timer,
                                        ref_flops=1.0)
    assert rec["us"]["cublas_blockwise_loop"] == 10.0 and "cublas_blockwise_loop" not in rec.get("errors", {})
    assert rec["calc_diff_contenders"]["cublas_blockwise_loop"] < 1e-12
    w = bench_grouped.bench_wgrad(200, 48, 256, _gen(), 2, device="cpu", timer=_stub_timer)
    assert w["us"]["cublas_blockwise"] == 10.0 and w["calc_diff_contenders"]["cublas_blockwise"] < 1e-12


def test_tuner_checks_catch_bad_candidates():
    """The grouped tuners' acceptance checks (shared by the FP8 and BF16 families): a candidate that
    writes rows past masked_m, leaves NaN, differs between runs, or is wrong is rejected."""
    import torch

    from finegemm.bench.tune import _contiguous_check, _masked_check

    g, m_max, n, m = 2, 8, 16, 5
    ref = torch.randn(g, m_max, n)
    good = torch.full((g, m_max, n), float("nan"))
    good[:, :m] = ref[:, :m]
    good = good.to(torch.bfloat16)
    assert _masked_check(good, good.clone(), ref, m)[1]
    wrote_past = good.clone()
    wrote_past[1, m] = 0
    assert not _masked_check(wrote_past, good.clone(), ref, m)[1]
    hole = good.clone()
    hole[0, 2, 3] = float("nan")
    assert not _masked_check(hole, good.clone(), ref, m)[1]
    other = good.clone()
    other[0, 0, 0] += 1
    assert not _masked_check(good, other, ref, m)[1]
    wrong = good.clone()
    wrong[:, :m] = -wrong[:, :m]
    diff, ok = _masked_check(wrong, wrong.clone(), ref, m)
    assert not ok and diff > 1.0

    layout = torch.tensor([0, 0, -1, 1, 1, 1, -1, -1])
    ref2 = torch.randn(8, n)
    ref2[layout < 0] = 0
    d = ref2.to(torch.bfloat16)
    assert _contiguous_check(d, d.clone(), ref2, layout)[1]
    pad_written = d.clone()
    pad_written[2, 0] = 1
    assert not _contiguous_check(pad_written, pad_written.clone(), ref2, layout)[1]
    other = d.clone()
    other[0, 0] += 1
    assert not _contiguous_check(d, other, ref2, layout)[1]


def test_tune_block_m_is_checked(capsys):
    """`tune --block-m`: one of the FP8 kernel's block_m values, and only for the families it
    narrows; otherwise an error that names the option."""
    from finegemm.bench import tune

    p = tune.build_parser()
    assert p.parse_args(["wgrad", "--block-m", "192"]).block_m == 192
    with pytest.raises(SystemExit):
        p.parse_args(["wgrad", "--block-m", "100"])
    assert "--block-m" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--block-m"):
        tune.main(["masked", "--block-m", "192"])


def test_tune_half_promote_is_checked():
    """`tune --half-promote` narrows dense / masked / contiguous only; elsewhere an error naming it."""
    from finegemm.bench import tune

    assert tune.build_parser().parse_args(["masked", "--half-promote"]).half_promote
    for family in ("wgrad", "k_grouped", "bf16"):
        with pytest.raises(SystemExit, match="--half-promote"):
            tune.main([family, "--half-promote"])


def test_tune_multicast_is_checked():
    """--multicast (2-CTA pair twins) is the bf16 family's option: any other family is refused by name."""
    from finegemm.bench.tune import main

    for family in ("dense", "masked", "wgrad"):
        with pytest.raises(SystemExit, match="--multicast applies to bf16 only"):
            main([family, "--multicast"])


def test_tune_b_group_is_checked():
    """`tune --b-group` adds twins for dense / bf16 only; 2 or 4; elsewhere an error naming it."""
    from finegemm.bench import tune

    assert tune.build_parser().parse_args(["dense", "--b-group", "2", "4"]).b_group == [2, 4]
    assert tune.build_parser().parse_args(["bf16"]).b_group == []
    with pytest.raises(SystemExit):
        tune.build_parser().parse_args(["bf16", "--b-group", "3"])
    for family in ("wgrad", "masked", "contiguous", "k_grouped", "bf16_masked"):
        with pytest.raises(SystemExit, match="--b-group"):
            tune.main([family, "--b-group", "2"])


@pytest.mark.parametrize("family", ["fp8", "bf16"])
@pytest.mark.parametrize("shape", [(128, 4096, 7168), (64, 7168, 2048), (4096, 7168, 2048), (64, 2112, 7168)])
def test_b_group_twins_fit_and_keep_the_candidates_first(family, shape):
    """The tuner's B-group twins: the candidates unchanged and first (the current one's index
    holds), then one twin per candidate and group where the family's rule lets it read B in
    groups, and no launch twice."""
    import dataclasses

    from finegemm.heuristics import sm90_bf16_gemm as bh
    from finegemm.heuristics import sm90_fp8_gemm as fh
    from finegemm.heuristics._common import b_group_twins

    h = fh if family == "fp8" else bh
    cands = h.candidate_configs(*shape, 132)
    out = b_group_twins(cands, (2, 4), h.b_group_fits)
    assert out[:len(cands)] == cands
    twins = out[len(cands):]
    launches = [dataclasses.replace(c, est_us=0.0) for c in out]
    assert len(set(launches)) == len(launches)
    for t in twins:
        assert t.b_group in (2, 4) and h.b_group_fits(t, t.b_group)
        assert dataclasses.replace(t, b_group=1) in cands
    want = {(dataclasses.replace(c, est_us=0.0), g) for c in cands for g in (2, 4) if h.b_group_fits(c, g)}
    assert {(dataclasses.replace(t, b_group=1, est_us=0.0), t.b_group) for t in twins} == want
    if family == "fp8":  # never a multicast-B twin (the kernel's rule)
        assert not any(t.num_multicast == 2 and not t.multicast_on_a for t in twins)
    assert b_group_twins(cands, (), h.b_group_fits) == cands
    # A candidate that already reads B in groups (a table entry's) gets no twin of its own.
    grouped = [t for t in twins if t.b_group == 2][:1]
    assert b_group_twins(grouped, (2, 4), h.b_group_fits) == grouped


def test_precompile_bf16_builds_the_tuners_b_group_twins():
    """`precompile_bf16.py --b-group-twins 2` compiles every twin `tune bf16 --b-group 2` times on
    its M <= 128 nt / tt shapes, and nothing of the sort without the option."""
    from finegemm.bench.tune import bf16_tune_shapes
    from finegemm.heuristics import sm90_bf16_gemm as bh
    from finegemm.heuristics._common import b_group_twins
    from finegemm.ops import sm90_bf16_gemm as ops

    pc = _load_script("precompile_bf16")
    assert pc.b_group_twin_configs(132, ()) == []
    names = set(pc.kernel_sources(132, b_group_twins=(2,)))
    plain = set(pc.kernel_sources(132))
    want = set()
    for (m, n, k, f32) in bf16_tune_shapes():
        for layout in ("nt", "tt"):
            a_mn, b_mn = bh.LAYOUTS[layout]
            cands = bh.candidate_configs(m, n, k, 132, a_mn, b_mn, out_fp32=f32)
            want |= {ops.kernel_name(c.kernel_key()) for c in b_group_twins(cands, (2,), bh.b_group_fits)
                     if m <= 128 and c.b_group == 2}
    assert want and want <= names and not want <= plain


def test_kernel_time_us_rejects_an_unknown_flush_mode():
    from finegemm.bench._common import kernel_time_us

    with pytest.raises(ValueError, match="flush_mode"):
        kernel_time_us(lambda: None, flush_mode="clean")


def test_tuner_rows_record_the_launched_l2_promotion():
    """A candidate row names the L2 promotion it launched with, so table_entry keeps a table entry's
    pair when today's selection wins again, and the merge tool recognises the entry's configuration
    among the rows (without it every entry with a pair read as 'old config not timed')."""
    import dataclasses

    from finegemm.bench.tune import _grouped_row, table_entry
    from finegemm.heuristics import sm90_fp8_gemm as h
    from finegemm.heuristics.tuned import CONFIG_FIELDS

    cfg = dataclasses.replace(h.select_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 4096, 7168, 1, 132, 1024, 0),
                              l2_promotion=(128, 0))
    row = {**_grouped_row(cfg), "us": 1.0}
    assert row["l2_promotion"] == [128, 0]
    entry = table_entry({"family": "masked", "groups": 1, "m": 1024, "n": 4096, "k": 7168, "best": row}, 132,
                        {"gpu": "x", "commit": "y", "date": "z"})
    assert entry["config"]["l2_promotion"] == [128, 0]
    merge = _load_script("merge_tuned_table")
    assert merge.same_config(entry["config"], row)
    assert not merge.same_config({f: row[f] for f in CONFIG_FIELDS}, row)  # an entry without the pair


def test_precompile_bf16_tune_shapes_build_the_tuners_pair_twins():
    """`precompile_bf16.py --tune-shapes ... --multicast` compiles what `tune bf16 --multicast` times:
    today's selection, the candidates, and 2-CTA pairs sharing A and sharing B; without
    --multicast no pair."""
    from finegemm.heuristics import sm90_bf16_gemm as bh
    from finegemm.ops import sm90_bf16_gemm as ops

    pc = _load_script("precompile_bf16")
    name = lambda c: ops.kernel_name(c.kernel_key())  # noqa: E731
    shapes = [(4096, 2112, 7168)]
    plain = pc.tune_configs(132, shapes, ["nt"], False)
    pairs = pc.tune_configs(132, shapes, ["nt"], True)
    assert not any(c.num_multicast == 2 for c in plain)
    assert {name(c) for c in plain} < {name(c) for c in pairs}
    shared = {c.multicast_on_a for c in pairs if c.num_multicast == 2}
    assert shared == {True, False}, "pairs sharing A (2112 columns) and B (4096 rows)"
    assert name(bh.select_config(4096, 2112, 7168, 132, False, False)) in {name(c) for c in plain}


def test_masked_tune_candidates_hold_todays_selection():
    """The list `tune masked` times and `precompile_tune.py --masked-shapes` compiles holds what the
    library launches today (the table entry of masked G = 1 1024x4096x7168) at the index the tuner
    marks as current, so a re-tune's winner is compared with it."""
    from finegemm.bench.tune import masked_tune_candidates
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED, select_grouped_config
    from finegemm.ops import sm90_fp8_gemm as ops

    cands, cur = masked_tune_candidates(1, 1024, 4096, 7168, 132, 16)
    today = select_grouped_config(GEMM_GROUPED_MASKED, 1024 + 128, 4096, 7168, 1, 132, 1024, 0)
    assert (today.block_m, today.block_n) == (128, 256), "the shipped table's entry for this shape"
    assert ops._kernel_name(cands[cur]) == ops._kernel_name(today)
    assert len({ops._kernel_name(c) for c in cands}) > 4
