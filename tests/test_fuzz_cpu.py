"""The API fuzz on CPU tensors (finegemm/testing/fuzz.py): random shapes and memory placements
that must be accepted and must write only the outputs' elements; one broken rule per bad case,
which must raise TypeError / ValueError / NotImplementedError naming the function.

Seeds are fixed (the same cases every run); FINEGEMM_FUZZ_CASES scales the count.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from finegemm.testing import fuzz  # noqa: E402

NUM = int(os.environ.get("FINEGEMM_FUZZ_CASES", "240"))


@pytest.mark.parametrize("chunk", range(4))
def test_valid_cases_are_accepted_and_write_only_outputs(chunk):
    problems = []
    for seed in range(chunk, NUM, 4):
        case = fuzz.valid_case(seed)
        out = fuzz.run_case(case, "cpu")
        if out.error is not None:
            problems.append(f"seed {seed}: {case.describe()}: rejected: {type(out.error).__name__}: {out.error}")
            continue
        touched = fuzz.untouched_cells(out, case)
        if touched:
            problems.append(f"seed {seed}: {case.describe()}: cells changed outside the outputs in {touched}")
        # refill(): the same tensors with new values give what a fresh materialization of them gives
        case2 = fuzz.refill(case, out.mat, seed + 7)
        second = fuzz.call_case(case2, out.mat)
        fresh = fuzz.run_case(case2, "cpu")
        assert second.error is None and fresh.error is None
        if fuzz.untouched_cells(second, case2):
            problems.append(f"seed {seed}: {case.describe()}: refill wrote outside the tensors")
        for name, v in fuzz.output_values(second, case2).items():
            w = fuzz.output_values(fresh, case2)[name]
            if not torch.equal(v.view(torch.uint8) if v.element_size() == 1 else v.float().nan_to_num(7.0),
                               w.view(torch.uint8) if w.element_size() == 1 else w.float().nan_to_num(7.0)):
                problems.append(f"seed {seed}: {case.describe()}: refilled call differs from a fresh one")
        if case.fn.startswith(("fp8_gemm", "bf16_gemm")) and "c" not in case.args:
            changed = fuzz.output_values(out, case)["d"]  # out.mat holds the second call's d now
            first = fuzz.output_values(fuzz.run_case(case, "cpu"), case)["d"]
            if changed.numel() and float(first.float().nan_to_num(0).abs().sum()) > 0 and torch.equal(
                    changed.float().nan_to_num(7.0), first.float().nan_to_num(7.0)):
                problems.append(f"seed {seed}: {case.describe()}: refill left the inputs' values as they were")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chunk", range(4))
def test_bad_cases_raise_a_clean_error(chunk):
    problems, ran = [], 0
    for seed in range(chunk, 2 * NUM, 4):
        case = fuzz.bad_case(seed)
        if case is None:
            continue
        ran += 1
        out = fuzz.run_case(case, "cpu")
        if out.error is None:
            problems.append(f"seed {seed}: {case.describe()}: accepted")
        elif not fuzz.clean_error(case, out.error):
            problems.append(f"seed {seed}: {case.describe()}: {type(out.error).__name__}: {out.error}")
    assert ran >= NUM // 4, f"only {ran} bad cases applied"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("fn", sorted(fuzz.VARIANTS))
def test_variant_functions_by_name(fn):
    """The functions drawn inside another one's generator, drawn by name: seldom among the seeds
    above, so each gets its own valid cases (accepted, outputs only) and bad ones (clean errors)."""
    problems = []
    for seed in range(700_000, 700_000 + 24):
        case = fuzz.valid_case(seed, fn)
        assert case.fn == fn
        out = fuzz.run_case(case, "cpu")
        if out.error is not None:
            problems.append(f"seed {seed}: {case.describe()}: rejected: {type(out.error).__name__}: {out.error}")
        elif fuzz.untouched_cells(out, case):
            problems.append(f"seed {seed}: {case.describe()}: cells changed outside the outputs")
    for seed in range(700_000, 700_000 + 60):
        case = fuzz.bad_case(seed, fn)
        if case is None:
            continue
        out = fuzz.run_case(case, "cpu")
        if out.error is None or not fuzz.clean_error(case, out.error):
            problems.append(f"seed {seed}: {case.describe()}: {out.error!r}")
    assert not problems, "\n".join(problems)


def test_every_function_and_mutation_is_drawn():
    """The generators reach every public function and every mutation kind (so a new rule or
    function is not silently left out of the fuzz)."""
    fns, kinds = set(), set()
    for seed in range(2 * NUM):
        case = fuzz.bad_case(seed)
        if case is not None:
            fns.add(case.fn)
            kinds.add(case.mutation)
    assert fns == set(fuzz.FUNCTIONS) | set(fuzz.VARIANTS)
    import finegemm.api

    assert fns == set(finegemm.api.__all__)  # every public GEMM function
    assert kinds == set(fuzz.MUTATIONS)


def test_placements_are_what_they_claim():
    """materialize(): the view holds the values, the mask marks exactly its cells, the rest of the
    buffer is poison (a fuzz helper whose own bug would hide kernel bugs)."""
    import random

    rng = random.Random(3)
    vals = torch.randn(3, 5, 7)
    for _ in range(20):
        place = fuzz.tma_placement(rng, tuple(vals.shape), torch.float32)
        view, buf, mask = fuzz.materialize_buf(fuzz.Buf(vals, torch.float32, place), "cpu")
        assert torch.equal(view, vals)
        assert int(mask.sum()) == vals.numel()
        assert bool(torch.isnan(buf[~mask]).all())
        assert view.stride(-1) == 1 and all(s * 4 % 16 == 0 for s in view.stride()[:-1])
        assert view.data_ptr() % 16 == 0
        place = fuzz.any_placement(rng, tuple(vals.shape))
        view, buf, mask = fuzz.materialize_buf(fuzz.Buf(vals, torch.float32, place), "cpu")
        assert torch.equal(view, vals) and int(mask.sum()) == vals.numel()


@pytest.mark.parametrize("chunk", range(2))
def test_settings_cases_are_accepted_and_restore_the_knobs(chunk):
    """Valid cases drawn and run under random knobs (SM budget, PDL, mk alignment): accepted on
    CPU, writing only their outputs, and every knob is back at its value afterwards."""
    import finegemm

    before = (finegemm.runtime.get_num_sms_setting(), finegemm.get_pdl(),
              finegemm.get_mk_alignment_for_contiguous_layout())
    problems, drawn = [], set()
    for seed in range(300_000 + chunk, 300_000 + NUM // 2, 2):
        case = fuzz.settings_case(seed)
        drawn.add(case.settings.mk_alignment)
        out = fuzz.run_case(case, "cpu")
        if out.error is not None:
            problems.append(f"seed {seed}: {case.describe()}: rejected: {type(out.error).__name__}: {out.error}")
        elif fuzz.untouched_cells(out, case):
            problems.append(f"seed {seed}: {case.describe()}: cells changed outside the outputs")
        now = (finegemm.runtime.get_num_sms_setting(), finegemm.get_pdl(),
               finegemm.get_mk_alignment_for_contiguous_layout())
        assert now == before, f"seed {seed}: knobs not restored: {now} != {before}"
    assert drawn == {32, 64, 128}
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("fn", ["m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous",
                                "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous"])
def test_cuda_refuses_mk_alignment_below_a_tile(fn, monkeypatch):
    """With an mk alignment of 16 / 32 the CUDA path raises NotImplementedError naming the function
    (whatever M and K: empty problems too) and writes nothing; the CPU path runs the same call."""
    import finegemm
    from finegemm.api import _validate

    seen = 0
    for seed in range(400_000, 400_400):
        case = fuzz.settings_case(seed, fn)
        if not case.unsupported_on_cuda():
            continue
        seen += 1
        assert fuzz.run_case(case, "cpu").error is None
        with monkeypatch.context() as mp:
            mp.setattr(_validate, "on_cuda", lambda t: True)
            out = fuzz.run_case(case, "cpu")
        assert isinstance(out.error, NotImplementedError) and fuzz.clean_error(case, out.error), out.error
        assert "mk alignment" in str(out.error)
        assert not fuzz.untouched_cells(out, case)
        for v in fuzz.output_values(out, case).values():
            assert bool(torch.isnan(v.float()).all())  # still the poison
        assert finegemm.get_mk_alignment_for_contiguous_layout() == 128
    assert seen >= 5


def test_deepgemm_v1_names_match_their_functions():
    """Every valid case that a DeepGEMM v1 name can express gives, through that name, bitwise the
    outputs of the finegemm function; every bad one raises the function's error type, named after
    the v1 name (its ks_tensor is built by the name itself, so a broken ks_tensor does not reach it)."""
    problems, valid, bad = [], 0, 0
    for seed in range(2 * NUM):
        case = fuzz.valid_case(seed)
        legacy = fuzz.as_legacy(case)
        if legacy is not None:
            valid += 1
            got, want = fuzz.run_case(legacy, "cpu"), fuzz.run_case(case, "cpu")
            if got.error is not None:
                problems.append(f"seed {seed}: {legacy.describe()}: {got.error!r}")
            else:
                x, y = fuzz.output_values(got, legacy)["out"], fuzz.output_values(want, case)["d"]
                if not fuzz.bitwise_equal(x, y):
                    problems.append(f"seed {seed}: {legacy.describe()}: differs from {case.fn}")
        broken = fuzz.bad_case(seed)
        legacy = None if broken is None else fuzz.as_legacy(broken)
        if legacy is None or "ks_tensor" in broken.note:
            continue
        bad += 1
        got, want = fuzz.run_case(legacy, "cpu"), fuzz.run_case(broken, "cpu")
        if got.error is None:
            problems.append(f"seed {seed}: {legacy.describe()}: accepted ({broken.fn} raised {want.error!r})")
        elif type(got.error) is not type(want.error) or not fuzz.clean_error(legacy, got.error):
            problems.append(f"seed {seed}: {legacy.describe()}: {got.error!r} / {broken.fn}: {want.error!r}")
    assert valid >= 20 and bad >= 10, (valid, bad)
    assert not problems, "\n".join(problems)
