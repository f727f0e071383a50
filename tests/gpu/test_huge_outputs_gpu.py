"""Outputs of more than 2^31 elements: no 32-bit offset may wrap.

Each case writes a d of 2.15-2.2 G elements (4-9 GB) through the epilogue that addresses global
memory itself (direct stores: fp32 D with C, bf16 rows that do not end on 16 bytes, odd N) or
through TMA coordinates (masked groups, k-grouped [G, M, N]). K is small, so the kernels run in
milliseconds. d sits in a larger buffer whose tail is NaN and must stay NaN; rows on both sides of
element 2^31, the last rows and a few random rows are checked against the exact reference on
CPU (that costs little: K <= 256). Needs ~30 GB of GPU memory; skipped on smaller GPUs.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import finegemm  # noqa: E402
from finegemm import reference  # noqa: E402
from finegemm.testing.numeric import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

FP8 = torch.float8_e4m3fn
TAIL = 4096  # NaN elements after d in its buffer
LIMIT = 1 << 31

# (m, n, k, d dtype, with c): m * n > 2^31. fp32 + C and bf16 with N % 8 != 0 take the direct stores.
DENSE_FP8 = [(16500, 131200, 128, torch.float32, True), (16400, 131100, 128, torch.bfloat16, False)]
DENSE_BF16 = [(16400, 131101, 64, torch.float32, False)]
MASKED_FP8 = (4, 4200, 131072, 128)  # G, Mmax, N, K: group 3 lies past element 2^31
K_GROUPED_FP8 = (2, 8200, 131072, (128, 128))  # G, M, N, ks


def planned_kernels() -> set:
    """The plans of these cases (fuzz.kernel_plans' tuples; read by scripts/precompile.py)."""
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_MASKED

    plans = {("fp8", m, n, k, dt == torch.float32, c, False) for m, n, k, dt, c in DENSE_FP8}
    plans |= {("bf16", m, n, k, "nt", dt == torch.float32, False) for m, n, k, dt, _ in DENSE_BF16}
    g, mm, n, k = MASKED_FP8
    plans.add(("fp8_grouped", GEMM_GROUPED_MASKED, mm, n, k, g, mm, 0))
    g, m, n, ks = K_GROUPED_FP8
    plans.add(("fp8_k_grouped", m, n, ks, False))
    return plans


@pytest.fixture(autouse=True)
def _enough_memory():
    if torch.cuda.get_device_properties(0).total_memory < 60 * 2**30:
        pytest.skip("needs a GPU with >= 60 GB")
    yield
    torch.cuda.empty_cache()


def _rows_to_check(m: int, n: int, gen: torch.Generator) -> list[int]:
    edge = LIMIT // n
    rows = set(range(max(0, edge - 2), min(m, edge + 3))) | set(range(m - 3, m))
    rows |= set(torch.randint(0, m, (4,), generator=gen).tolist()) | {0}
    return sorted(rows)


def _out_with_tail(shape, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    numel = 1
    for s in shape:
        numel *= s
    buf = torch.full((numel + TAIL,), float("nan"), dtype=dtype, device="cuda")
    return buf[:numel].view(shape), buf[numel:]


def _fp8(shape, gen):
    return (torch.randn(shape, device="cuda", generator=gen) * 2).to(FP8)


def _scales(shape, gen):
    return torch.exp2(torch.randint(-3, 4, shape, device="cuda", generator=gen).float())


def _rows(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """x[r] on the CPU (fp8 rows gathered as bytes)."""
    if x.dtype == FP8:
        return x.view(torch.uint8)[r].view(FP8).cpu()
    return x[r].cpu()


def _check(got_rows: torch.Tensor, want_rows: torch.Tensor, what: str) -> None:
    got, want = got_rows.double(), want_rows.double()
    assert not torch.isnan(got).any(), f"{what}: unwritten (NaN) cells"
    assert calc_diff(got, want) < 1e-5, f"{what}: calc_diff {calc_diff(got, want)}"


@pytest.mark.parametrize("m,n,k,d_dtype,with_c", DENSE_FP8)
def test_fp8_dense_past_2_31(m, n, k, d_dtype, with_c):
    gen = torch.Generator(device="cuda").manual_seed(m)
    a, sfa = _fp8((m, k), gen), _scales((m, k // 128), gen)
    b, sfb = _fp8((n, k), gen), _scales(((n + 127) // 128, k // 128), gen)
    c = torch.randn((m, n), device="cuda", generator=gen) if with_c else None
    # bf16 rows of N % 8 != 0 elements: a 16-byte row pitch (the TMA rule for d)
    pitch = n if d_dtype == torch.float32 else (n + 7) // 8 * 8
    d_full, tail = _out_with_tail((m, pitch), d_dtype)
    d = d_full[:, :n]
    finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d, c=c)
    torch.cuda.synchronize()
    assert torch.isnan(tail.float()).all(), "wrote past d's buffer"
    if pitch != n:
        assert torch.isnan(d_full[-4:, n:].float()).all(), "wrote into the row padding"
    rows = _rows_to_check(m, pitch, torch.Generator().manual_seed(1))
    r = torch.tensor(rows, device="cuda")
    want = reference.fp8_gemm_nt(_rows(a, r), _rows(sfa, r), b.cpu(), sfb.cpu(),
                                 c=None if c is None else c[r].cpu(), out_dtype=d_dtype)
    _check(d[r].cpu(), want, f"fp8 {m}x{n}x{k} rows {rows}")


@pytest.mark.parametrize("m,n,k,d_dtype,with_c", DENSE_BF16)
def test_bf16_dense_past_2_31(m, n, k, d_dtype, with_c):
    gen = torch.Generator(device="cuda").manual_seed(m)
    a = torch.randn((m, k), device="cuda", generator=gen).bfloat16()
    b = torch.randn((n, k), device="cuda", generator=gen).bfloat16()
    pitch = (n + 3) // 4 * 4
    d_full, tail = _out_with_tail((m, pitch), d_dtype)
    d = d_full[:, :n]
    finegemm.bf16_gemm_nt(a, b, d)
    torch.cuda.synchronize()
    assert torch.isnan(tail).all(), "wrote past d's buffer"
    assert torch.isnan(d_full[-4:, n:]).all(), "wrote into the row padding"
    rows = _rows_to_check(m, pitch, torch.Generator().manual_seed(2))
    r = torch.tensor(rows, device="cuda")
    want = reference.bf16_gemm_nt(_rows(a, r), b.cpu(), out_dtype=d_dtype)
    _check(d[r].cpu(), want, f"bf16 {m}x{n}x{k} rows {rows}")


def test_fp8_masked_past_2_31():
    g, mm, n, k = MASKED_FP8
    gen = torch.Generator(device="cuda").manual_seed(3)
    a, sfa = _fp8((g, mm, k), gen), _scales((g, mm, k // 128), gen)
    b, sfb = _fp8((g, n, k), gen), _scales((g, n // 128, k // 128), gen)
    masked_m = torch.tensor([mm, mm - 100, 0, mm], dtype=torch.int32, device="cuda")
    d, tail = _out_with_tail((g, mm, n), torch.bfloat16)
    finegemm.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m=mm)
    torch.cuda.synchronize()
    assert torch.isnan(tail.float()).all(), "wrote past d's buffer"
    assert torch.isnan(d[1, mm - 100:].float()).all() and torch.isnan(d[2].float()).all(), "rows past masked_m"
    for grp in (1, 3):
        rows = sorted({0, masked_m[grp].item() - 1, (LIMIT // n) % mm if grp == 3 else 7})
        r = torch.tensor(rows, device="cuda")
        want = reference.fp8_gemm_nt(_rows(a[grp], r), _rows(sfa[grp], r), b[grp].cpu(), sfb[grp].cpu())
        _check(d[grp][r].cpu(), want, f"masked group {grp} rows {rows}")


def test_fp8_k_grouped_past_2_31():
    g, m, n, ks = K_GROUPED_FP8
    gen = torch.Generator(device="cuda").manual_seed(4)
    sum_k = sum(ks)
    a = _fp8((m * sum_k,), gen)
    b = _fp8((n * sum_k,), gen)
    sfa, sfb = _scales((sum_k // 128, m), gen), _scales((sum_k // 128, n), gen)
    d, tail = _out_with_tail((g, m, n), torch.float32)
    ks_tensor = torch.tensor(ks, dtype=torch.int32, device="cuda")
    finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, list(ks), ks_tensor)
    torch.cuda.synchronize()
    assert torch.isnan(tail).all(), "wrote past d's buffer"
    # group 1's A / B: [m, k1] / [n, k1] after group 0's m * k0 / n * k0 elements, scales rows k0 / 128 on
    k0, k1 = ks
    a1 = a[m * k0: m * (k0 + k1)].view(m, k1)
    b1 = b[n * k0: n * (k0 + k1)].view(n, k1)
    rows = sorted({0, m - 1, (LIMIT // n) % m})
    r = torch.tensor(rows, device="cuda")
    want = reference.fp8_gemm_nt(_rows(a1, r), sfa[k0 // 128:, r].t().cpu(), b1.cpu(),
                                 sfb[k0 // 128:].t().cpu(), out_dtype=torch.float32, recipe=(1, 1, 128))
    _check(d[1][r].cpu(), want, f"k-grouped group 1 rows {rows}")
