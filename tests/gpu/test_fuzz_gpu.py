"""The API fuzz (finegemm/testing/fuzz.py) on CUDA tensors, against the same cases on CPU.

Valid cases (random shapes, padded pitches, storage offsets, MN-major scales, c = d): the CUDA call
is accepted, writes what the CPU path (the exact fp64 reference) writes (calc_diff <= 1e-5, the
same cells left untouched), changes no other cell of any buffer (not the guard cells around d,
not one bit of an input), a repeat on fresh buffers gives bitwise the same outputs (cases without
c = d), and a call on the same tensors refilled in place with new values computes with the new
values (nothing a first call cached may stand in for an input).
- Large cases: M and N in the thousands (several tiles per CTA, multicast pairs, the tuned
  tables' tiles); settings cases: valid cases under random knobs (set_num_sms down to one SM,
  set_pdl, the mk alignment), then the same tensors again under the default knobs.
- Graph replay (capturable functions, no host read of a device value): captured after one eager
  call, replayed on re-poisoned outputs (bitwise the eager result, nothing else written), then
  replayed on inputs refilled in place (the reference's result for the new values).
- Bad cases (one broken rule each): the CUDA call raises what the CPU call raises (same type, same
  message start), except masked_m / ks_tensor values, which only CPU calls read on the host (CUDA
  clamps / ignores them): those must not write outside d.
After every case the CUDA context is healthy (a synchronize raises nothing).

The kernels of the valid cases are planned first in a pool of threads (nvcc in parallel); the
seeds are fixed, so scripts/precompile*.py can build the same kernels ahead of time.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm.testing import fuzz  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

NUM_VALID = int(os.environ.get("FINEGEMM_FUZZ_GPU_CASES", "320"))
VALID_SEEDS = range(100_000, 100_000 + NUM_VALID)
BAD_SEEDS = range(200_000, 200_000 + 2 * NUM_VALID)
NUM_SETTINGS = int(os.environ.get("FINEGEMM_FUZZ_GPU_SETTINGS_CASES", "200"))
SETTINGS_SEEDS = range(300_000, 300_000 + NUM_SETTINGS)
NUM_LARGE = int(os.environ.get("FINEGEMM_FUZZ_GPU_LARGE_CASES", "48"))
LARGE_SEEDS = range(500_000, 500_000 + NUM_LARGE)


def planned_kernels() -> set:
    """Every kernel plan of the valid GPU cases (read by scripts/precompile*.py)."""
    return {p for seed in VALID_SEEDS for p in fuzz.kernel_plans(fuzz.valid_case(seed))}


def planned_large_kernels() -> set:
    return {p for seed in LARGE_SEEDS for p in fuzz.kernel_plans(fuzz.large_case(seed))}


def planned_settings_kernels() -> set:
    """(SM budget or None, plan) of every kernel of the settings cases, under their own budget and
    again under the whole device (their rerun with the default knobs)."""
    out = set()
    for seed in SETTINGS_SEEDS:
        case = fuzz.settings_case(seed)
        for p in fuzz.kernel_plans(case):
            out |= {(case.settings.num_sms, p), (None, p)}
    return out


@pytest.fixture(scope="module")
def warm():
    plans = sorted(planned_kernels(), key=repr)
    fuzz.warm_plans(plans, torch.cuda.current_device(), min(16, os.cpu_count() or 4))
    return len(plans)


@pytest.fixture(scope="module")
def warm_large():
    plans = sorted(planned_large_kernels(), key=repr)
    fuzz.warm_plans(plans, torch.cuda.current_device(), min(16, os.cpu_count() or 4))
    return len(plans)


@pytest.fixture(scope="module")
def warm_settings():
    by_budget: dict = {}
    for sms, p in planned_settings_kernels():
        by_budget.setdefault(sms, set()).add(p)
    for sms, plans in sorted(by_budget.items(), key=lambda kv: kv[0] or 0):
        fuzz.warm_plans(sorted(plans, key=repr), torch.cuda.current_device(), min(16, os.cpu_count() or 4), sms)
    return sum(len(v) for v in by_budget.values())


def _healthy() -> str:
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        return f"CUDA error after the call: {exc}"
    return ""


def _check_valid(seed: int, case) -> list:
    """Problems of one valid case on CUDA against the CPU path (empty: none)."""
    problems = []
    got = fuzz.run_case(case, "cuda")
    err = _healthy()
    if err:
        pytest.fail(f"seed {seed}: {case.describe()}: {err}")  # the context is gone: stop here
    if case.unsupported_on_cuda():
        if not (isinstance(got.error, NotImplementedError) and fuzz.clean_error(case, got.error)):
            problems.append(f"seed {seed}: {case.describe()}: expected NotImplementedError naming the function, "
                            f"got {got.error!r}")
        elif fuzz.untouched_cells(got, case) or any(
                not bool(torch.isnan(v.float()).all()) for v in fuzz.output_values(got, case).values()
                if v.numel() and v.dtype != torch.int32):
            problems.append(f"seed {seed}: {case.describe()}: rejected, but wrote")
        return problems
    if got.error is not None:
        return [f"seed {seed}: {case.describe()}: rejected on CUDA: {type(got.error).__name__}: {got.error}"]
    want = fuzz.run_case(case, "cpu")
    assert want.error is None, f"seed {seed}: the CPU path rejected a valid case: {want.error}"
    touched = fuzz.untouched_cells(got, case)
    if touched:
        problems.append(f"seed {seed}: {case.describe()}: cells changed outside the outputs in {touched}")
    got_values = fuzz.output_values(got, case)
    for p in fuzz.compare_outputs(got_values, fuzz.output_values(want, case)):
        problems.append(f"seed {seed}: {case.describe()}: {p}")
    if not case.accumulates_into_d():  # a repeat on fresh buffers: bitwise the same outputs
        again = fuzz.output_values(fuzz.run_case(case, "cuda"), case)
        for name, v in got_values.items():
            if not fuzz.bitwise_equal(v, again[name]):
                problems.append(f"seed {seed}: {case.describe()}: {name} not bitwise repeatable")
    # The same tensors holding new values: the call must read them (a cached prepared launch, a
    # scale copy or a transposed operand of the first call must not stand in for them).
    case2 = fuzz.refill(case, got.mat, seed + 7)
    want2 = fuzz.output_values(fuzz.run_case(case2, "cpu"), case2)
    second = fuzz.call_case(case2, got.mat)
    err = _healthy()
    if err:
        pytest.fail(f"seed {seed}: {case.describe()}: new values: {err}")
    if second.error is not None:
        return problems + [f"seed {seed}: {case.describe()}: new values: {second.error!r}"]
    for p in fuzz.compare_outputs(fuzz.output_values(second, case2), want2):
        problems.append(f"seed {seed}: {case.describe()}: new values in the same tensors: {p}")
    touched = fuzz.untouched_cells(second, case2)
    if touched:
        problems.append(f"seed {seed}: {case.describe()}: new values: cells changed outside the outputs "
                        f"in {touched}")
    if case.settings != fuzz.Settings() and not case.accumulates_into_d():
        # The same tensors again under the default knobs (a cached call must not keep the old
        # plan's grid or split), on re-poisoned outputs: the reference's result again.
        _repoison(got.mat, case2)
        other = fuzz.call_case(case2, got.mat, fuzz.Settings(mk_alignment=case.settings.mk_alignment))
        err = _healthy()
        if err:
            pytest.fail(f"seed {seed}: {case.describe()}: default knobs: {err}")
        if other.error is not None:
            problems.append(f"seed {seed}: {case.describe()}: default knobs: {other.error!r}")
        else:
            for p in fuzz.compare_outputs(fuzz.output_values(other, case2), want2):
                problems.append(f"seed {seed}: {case.describe()}: default knobs: {p}")
    return problems


def _repoison(mat, case) -> None:
    """The poison again in every cell of the outputs' buffers."""
    for name in case.outputs:
        buf, _mask, spec = mat.bufs[name]
        int_dtype, bits = fuzz._POISON_BITS[spec.dtype]
        buf.view(int_dtype).fill_(bits)


def _check_all(draw, seeds) -> None:
    problems = [p for seed in seeds for p in _check_valid(seed, draw(seed))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chunk", range(8))
def test_valid_cases_match_cpu(chunk, warm):
    _check_all(fuzz.valid_case, VALID_SEEDS[chunk::8])


@pytest.mark.parametrize("fn", sorted(fuzz.VARIANTS))
def test_variant_functions_by_name_match_cpu(fn):
    """The functions drawn inside another one's generator (seldom among the seeds above), drawn
    by name (tests/test_fuzz_cpu.py draws the same seeds on CPU)."""
    _check_all(lambda seed: fuzz.valid_case(seed, fn), range(700_000, 700_000 + 16))


@pytest.mark.parametrize("chunk", range(4))
def test_large_cases_match_cpu(chunk, warm_large):
    """Valid cases with thousands of rows and columns (several tiles per CTA, multicast pairs,
    the tuned tables' tiles, ragged last waves), placed and checked like the small ones."""
    _check_all(fuzz.large_case, LARGE_SEEDS[chunk::4])


@pytest.mark.parametrize("chunk", range(4))
def test_settings_cases_match_cpu(chunk, warm_settings):
    """Valid cases under random knobs (set_num_sms down to 1 SM, PDL, mk alignment 64 / 128; 32
    must raise NotImplementedError on the contiguous kinds): the same checks, plus the same
    tensors again under the default knobs."""
    _check_all(fuzz.settings_case, SETTINGS_SEEDS[chunk::4])


@pytest.mark.parametrize("chunk", range(4))
def test_bad_cases_same_verdict_as_cpu(chunk, warm):
    problems, ran = [], 0
    for seed in BAD_SEEDS[chunk::4]:
        case = fuzz.bad_case(seed)
        if case is None:
            continue
        ran += 1
        cpu = fuzz.run_case(case, "cpu")
        assert cpu.error is not None and fuzz.clean_error(case, cpu.error), f"seed {seed}: {case.describe()}: CPU"
        got = fuzz.run_case(case, "cuda")
        err = _healthy()
        if err:
            pytest.fail(f"seed {seed}: {case.describe()}: {err}")
        if got.error is None:
            if not case.host_value_rule:
                problems.append(f"seed {seed}: {case.describe()}: accepted on CUDA, CPU raised {cpu.error}")
            elif fuzz.untouched_cells(got, case):
                problems.append(f"seed {seed}: {case.describe()}: wrote outside the outputs")
            continue
        if type(got.error) is not type(cpu.error) or not fuzz.clean_error(case, got.error):
            problems.append(f"seed {seed}: {case.describe()}: CUDA {type(got.error).__name__}: {got.error} / "
                            f"CPU {type(cpu.error).__name__}: {cpu.error}")
    assert ran > 0
    assert not problems, "\n".join(problems)


# Functions whose calls read no device value on the host: all of the new names (the m-grouped
# contiguous ones check grouped_layout on the GPU, ops/contiguous_layout.py).
_CAPTURABLE = ("fp8_gemm_", "bf16_gemm_", "m_grouped_fp8_gemm_", "m_grouped_bf16_gemm_", "k_grouped_")


def _check_replay(seed: int, case) -> list:
    """A valid case captured in a CUDA graph (after one eager call) and replayed on re-poisoned
    outputs writes bitwise what the eager call wrote, and nothing else."""
    from finegemm.testing import capture_graph

    problems = []
    mat = fuzz.materialize(case, "cuda")
    fn = getattr(finegemm, case.fn)
    with fuzz.applied(case.settings):
        fn(**mat.kwargs)
        eager = {name: mat.kwargs[name].detach().clone() for name in case.outputs}
        graph = capture_graph(lambda: fn(**mat.kwargs))
    _repoison(mat, case)
    graph.replay()
    err = _healthy()
    if err:
        pytest.fail(f"seed {seed}: {case.describe()}: {err}")
    for name in case.outputs:
        if not fuzz.bitwise_equal(mat.kwargs[name], eager[name]):
            problems.append(f"seed {seed}: {case.describe()}: replay of {name} differs from the eager call")
    touched = fuzz.untouched_cells(fuzz.Outcome(None, mat), case)
    if touched:
        problems.append(f"seed {seed}: {case.describe()}: replay changed cells outside the outputs in {touched}")
    # Serving engines replay one graph over static buffers refilled in place: the replay must
    # compute with the new values.
    case2 = fuzz.refill(case, mat, seed + 11)
    graph.replay()
    err = _healthy()
    if err:
        pytest.fail(f"seed {seed}: {case.describe()}: replay on new values: {err}")
    want2 = fuzz.output_values(fuzz.run_case(case2, "cpu"), case2)
    for p in fuzz.compare_outputs(fuzz.output_values(fuzz.Outcome(None, mat), case2), want2):
        problems.append(f"seed {seed}: {case.describe()}: replay on new values in the same buffers: {p}")
    return problems


def _capturable(case) -> bool:
    return case.fn.startswith(_CAPTURABLE) and not case.accumulates_into_d() and not case.unsupported_on_cuda()


def _check_all_replays(draw, seeds) -> None:
    cases = [(seed, draw(seed)) for seed in seeds]
    cases = [(seed, case) for seed, case in cases if _capturable(case)]
    assert cases
    problems = [p for seed, case in cases for p in _check_replay(seed, case)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chunk", range(2))
def test_graph_replay_matches_eager(chunk, warm):
    _check_all_replays(fuzz.valid_case, VALID_SEEDS[chunk::6])


def test_graph_replay_under_settings_matches_eager(warm_settings):
    """The same under the settings cases' knobs (PDL edges in the graph, small SM budgets)."""
    _check_all_replays(fuzz.settings_case, SETTINGS_SEEDS[::3])


def test_valid_calls_never_synchronize(warm):
    """No public GEMM call synchronizes the stream (README, "Threads, streams and CUDA graphs"):
    each valid case once to compile and plan, then on tensors of its own (so that no prepared or
    validated-call cache stands in for the full path) under torch's sync debug mode "error"."""
    problems, functions = [], set()
    for seed in VALID_SEEDS[::3]:
        case = fuzz.valid_case(seed)
        if case.unsupported_on_cuda():
            continue
        fn = getattr(finegemm, case.fn)
        first, fresh = fuzz.materialize(case, "cuda"), fuzz.materialize(case, "cuda")
        with fuzz.applied(case.settings):
            fn(**first.kwargs)
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
            try:
                fn(**fresh.kwargs)
            except RuntimeError as exc:
                problems.append(f"seed {seed}: {case.describe()}: {exc}")
            finally:
                torch.cuda.set_sync_debug_mode("default")
        functions.add(case.fn)
    finegemm.check_errors()
    assert len(functions) >= 12, sorted(functions)  # most of the API was drawn
    assert not problems, "\n".join(problems)


def test_deepgemm_v1_names_and_torch_op_on_cuda(warm):
    """The valid cases a DeepGEMM v1 name can express, through that name, and the fp8_gemm_nt cases
    through the registered torch op (finegemm.torch_ops): bitwise the finegemm function's outputs."""
    import finegemm.torch_ops  # noqa: F401 - registers torch.ops.finegemm.fp8_gemm_nt

    problems, ran = [], 0
    for seed in VALID_SEEDS:
        case = fuzz.valid_case(seed)
        want = None
        legacy = fuzz.as_legacy(case)
        if legacy is not None:
            ran += 1
            want = fuzz.output_values(fuzz.run_case(case, "cuda"), case)["d"]
            got = fuzz.run_case(legacy, "cuda")
            if got.error is not None:
                problems.append(f"seed {seed}: {legacy.describe()}: {got.error!r}")
            elif not fuzz.bitwise_equal(fuzz.output_values(got, legacy)["out"], want):
                problems.append(f"seed {seed}: {legacy.describe()}: differs from {case.fn}")
        if case.fn == "fp8_gemm_nt" and "c" not in case.args and case.args.get("recipe") in (None, (1, 128, 128)):
            ran += 1
            if want is None:
                want = fuzz.output_values(fuzz.run_case(case, "cuda"), case)["d"]
            mat = fuzz.materialize(case, "cuda")
            (a, sfa), (b, sfb), d = mat.kwargs["a"], mat.kwargs["b"], mat.kwargs["d"]
            torch.ops.finegemm.fp8_gemm_nt(a, sfa, b, sfb, d)
            if not fuzz.bitwise_equal(d.cpu(), want):
                problems.append(f"seed {seed}: {case.describe()}: torch.ops.finegemm.fp8_gemm_nt differs")
    assert _healthy() == ""
    assert ran >= 20
    assert not problems, "\n".join(problems)
