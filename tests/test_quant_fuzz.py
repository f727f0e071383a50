"""The FP8 casts and scale-layout helpers under random inputs (finegemm/testing/cast_fuzz.py), on CPU:
random shapes, dtypes, granularities, memory placements and special values (zero blocks, FP8 /
dtype limits, inf, NaN) must give results with every documented property; every broken rule must
raise a clean error naming the function and the argument.

Seeds are fixed; FINEGEMM_CAST_FUZZ_CASES scales the count.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from finegemm.testing import cast_fuzz  # noqa: E402

NUM = int(os.environ.get("FINEGEMM_CAST_FUZZ_CASES", "400"))


@pytest.mark.parametrize("chunk", range(2))
def test_casts_hold_their_properties(chunk):
    problems, specials = [], set()
    for seed in range(chunk, NUM, 2):
        case = cast_fuzz.cast_case(seed)
        x = cast_fuzz.make_input(case, "cpu")
        q, sf = cast_fuzz.run_cast(case, x)
        for p in cast_fuzz.check_cast(case, x, q, sf):
            problems.append(f"seed {seed}: {case}: {p}")
        # The result does not depend on x's memory layout.
        q2, sf2 = cast_fuzz.run_cast(case, x.contiguous())
        if not (cast_fuzz.same_bits(q, q2) and cast_fuzz.same_bits(sf, sf2)):
            problems.append(f"seed {seed}: {case}: differs from the cast of x.contiguous()")
        specials.add((case.fn, case.special))
    assert not problems, "\n".join(problems[:20])
    # The seeds reach every function with every kind of special value (the fuzz covers what it claims).
    assert len(specials) == len(cast_fuzz.CAST_FUNCTIONS) * len(set(cast_fuzz._SPECIALS))


def test_check_cast_catches_wrong_results():
    """check_cast is not vacuous: a scale off by one ulp, a flipped FP8 value, a finite scale for an
    inf block and a wrong sf layout are each reported."""
    found = {}
    for seed in range(200):
        case = cast_fuzz.cast_case(seed)
        if 0 in case.shape:
            continue
        x = cast_fuzz.make_input(case, "cpu")
        q, sf = cast_fuzz.run_cast(case, x)
        if case.special == "inf" and "scale" not in found:
            found["scale"] = cast_fuzz.check_cast(case, x, q, torch.ones_like(sf).copy_(sf.nan_to_num(posinf=1.0)))
        if case.special == "none" and not case.use_ue8m0 and "ulp" not in found:
            found["ulp"] = cast_fuzz.check_cast(case, x, q, sf * (1 + 2**-22))
        if case.special == "none" and "q" not in found and (q.float().abs() > 1).any():
            bad_q = q.clone()
            i = int((q.float().abs() > 1).flatten().nonzero()[0])
            bad_q.view(-1)[i] = (-bad_q.view(-1)[i].float()).to(torch.float8_e4m3fn)
            found["q"] = cast_fuzz.check_cast(case, x, bad_q, sf)
        if (case.fn == "per_token_cast_to_fp8" and case.shape[0] > 1 and case.shape[0] % 4 and case.shape[1] > case.gran_k
                and "layout" not in found):
            found["layout"] = cast_fuzz.check_cast(case, x, q, sf.contiguous())
    expected = {"scale": "non-finite block's scale is finite", "ulp": "scale != max(amax, 1e-4) * fp32(1/448)",
                "q": "roundtrip error", "layout": "sf strides"}
    assert set(found) == set(expected)
    for name, problems in found.items():
        assert any(expected[name] in p for p in problems), (name, problems)


def test_bad_calls_raise_clean_errors():
    problems, kinds = [], set()
    for seed in range(NUM):
        bad = cast_fuzz.bad_call(seed)
        kinds.add(bad.kind)
        problem = cast_fuzz.raises_clean(bad)
        if problem:
            problems.append(f"seed {seed}: {problem}")
    assert not problems, "\n".join(problems[:20])
    assert kinds == set(cast_fuzz.BAD_CALL_KINDS)


def test_scale_layout_transforms_hold_their_properties():
    from finegemm import quant

    problems, seen = [], set()
    for seed in range(NUM):
        kwargs, values = cast_fuzz.transform_case(seed)
        out = quant.transform_sf_into_required_layout(**kwargs)
        problems += [f"seed {seed}: {p}" for p in cast_fuzz.check_transform(kwargs, values, out)]
        seen.add(("rows" if out.stride()[-2] == 1 else "blocks", out.data_ptr() == kwargs["sf"].data_ptr(),
                  kwargs["num_groups"] is not None))
        if seed == 0:  # the check is not vacuous: a copy with other strides is reported
            assert cast_fuzz.check_transform(kwargs, values, out.clone(memory_format=torch.contiguous_format)
                                             if out.stride()[-2] == 1 else out.t().contiguous().t())
    assert not problems, "\n".join(problems[:20])
    assert len(seen) == 8  # per-row and 128 x 128 scales, copied and not, grouped and not
