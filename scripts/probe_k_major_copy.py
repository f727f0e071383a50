"""Time the k-grouped tn GEMM's K-major copies: the grouped kernel (every group of A and B in one
launch) against the per-group word kernel, on the k-grouped bench problems (NOTES v0.87); alone, and
(--gemm) inside the whole k_grouped_fp8_gemm_tn_contiguous call (c = d), rounds alternating.

    python3 scripts/probe_k_major_copy.py --out $OUT/k_major_copy.json [--gemm --rounds 3] [--nn]

--nn: m_grouped_fp8_gemm_nn_contiguous (B [G, K, N] copied to [G, N, K] per call) with finegemm's
copy and with PyTorch's .contiguous() of the transposed view (the path before v0.87), against the nt
call on the same data, on the bench's contiguous shapes.
--dense: fp8_gemm_nn / tn / tt (MN-major A [K, M] and / or B [K, N] copied K-major per call), the
same three ways.

Kernel-only, L2 flushed (finegemm.bench._common.kernel_time_us); bytes = one read and one write of
A [sum(ks), M] and B [sum(ks), N]; the copies are checked bitwise against each other first.
"""
from __future__ import annotations

import argparse

import functools

import torch

import finegemm
from finegemm.bench._common import kernel_time_us, write_probe_json
from finegemm.bench.grouped import k_grouped_problems
from finegemm.ops import k_major_copy
from finegemm.ops.k_major_copy import k_major_copies

_REAL_COPIES = k_major_copies
_REAL_BATCHED = k_major_copy.k_major_batched
_REAL_TRANSPOSES = k_major_copy.k_major_transposes


def _fp8_bytes(shape, gen) -> torch.Tensor:
    """Random bytes below 0x7f: finite e4m3 values (the GEMMs run on them)."""
    return torch.randint(0, 0x7f, shape, device="cuda", dtype=torch.uint8, generator=gen).view(torch.float8_e4m3fn)


def _tn_call_us(a, b, m, n, ks, grouped: bool, num_tests: int) -> float:
    """The whole tn call (copies + GEMM, c = d) with the copies' path forced."""
    g = len(ks)
    sfa = torch.ones(sum(ks) // 128, m, device="cuda")
    sfb = torch.ones(sum(ks) // 128, n, device="cuda")
    d = torch.zeros(g, m, n, device="cuda")
    ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
    k_major_copy.k_major_copies = functools.partial(_REAL_COPIES, grouped=grouped)
    try:
        return kernel_time_us(lambda: finegemm.k_grouped_fp8_gemm_tn_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=d),
                              num_tests=num_tests)
    finally:
        k_major_copy.k_major_copies = _REAL_COPIES


def _nn_records(num_tests: int, rounds: int) -> list:
    from finegemm.bench.grouped import CONTIGUOUS_GM, GROUPED_NK

    out = []
    for (g, m_per), (n, k) in [(gm, nk) for gm in CONTIGUOUS_GM for nk in GROUPED_NK[:2]]:
        gen = torch.Generator(device="cuda").manual_seed(g + n + k)
        a = _fp8_bytes((g * m_per, k), gen)
        sfa = torch.ones(g * m_per, -(-k // 128), device="cuda")
        b_kn = _fp8_bytes((g, k, n), gen)
        sfb_kn = torch.ones(g, -(-k // 128), -(-n // 128), device="cuda")
        b_nk, sfb_nk = b_kn.transpose(1, 2).contiguous(), sfb_kn.transpose(1, 2).contiguous()
        layout = torch.arange(g, device="cuda", dtype=torch.int32).repeat_interleave(m_per)
        d = torch.empty(g * m_per, n, device="cuda", dtype=torch.bfloat16)
        rec = {"kind": "nn_contiguous", "g": g, "m_per_group": m_per, "n": n, "k": k,
               "us": {"nt": [], "nn_finegemm_copy": [], "nn_torch_copy": []}}
        nt = lambda: finegemm.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b_nk, sfb_nk), d, layout)  # noqa: E731
        nn = lambda: finegemm.m_grouped_fp8_gemm_nn_contiguous((a, sfa), (b_kn, sfb_kn), d, layout)  # noqa: E731
        nn()
        d_nn = d.clone()
        nt()
        rec["nn_bitwise_nt"] = bool(torch.equal(d.view(torch.int16), d_nn.view(torch.int16)))
        for _ in range(rounds):
            rec["us"]["nt"].append(kernel_time_us(nt, num_tests=num_tests))
            rec["us"]["nn_finegemm_copy"].append(kernel_time_us(nn, num_tests=num_tests))
            k_major_copy.k_major_batched = lambda x, **kw: x.transpose(1, 2).contiguous()
            try:
                rec["us"]["nn_torch_copy"].append(kernel_time_us(nn, num_tests=num_tests))
            finally:
                k_major_copy.k_major_batched = _REAL_BATCHED
        print(f"nn contiguous G{g} {m_per}x{n}x{k}: " + ", ".join(f"{name} {[round(x, 1) for x in v]} us"
              for name, v in rec["us"].items()) + f", nn bitwise nt {rec['nn_bitwise_nt']}", flush=True)
        out.append(rec)
    return out


def _dense_records(num_tests: int, rounds: int) -> list:
    out = []
    for m, n, k in ((128, 4096, 7168), (4096, 2112, 7168), (4096, 7168, 2048)):
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        a, b = _fp8_bytes((m, k), gen), _fp8_bytes((n, k), gen)
        sfa, sfb = torch.ones(m, -(-k // 128), device="cuda"), torch.ones(-(-n // 128), -(-k // 128), device="cuda")
        a_km, b_kn = a.t().contiguous(), b.t().contiguous()
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        nt = lambda: finegemm.fp8_gemm_nt((a, sfa), (b, sfb), d)  # noqa: E731
        for layout in ("nn", "tn", "tt"):
            a_arg = (a, sfa) if layout[0] == "n" else (a_km, sfa.t())
            b_arg = (b, sfb) if layout[1] == "t" else (b_kn, sfb.t())
            call = lambda: getattr(finegemm, f"fp8_gemm_{layout}")(a_arg, b_arg, d)  # noqa: E731
            rec = {"kind": f"dense_{layout}", "m": m, "n": n, "k": k,
                   "us": {"nt": [], f"{layout}_finegemm_copy": [], f"{layout}_torch_copy": []}}
            for _ in range(rounds):
                rec["us"]["nt"].append(kernel_time_us(nt, num_tests=num_tests))
                rec["us"][f"{layout}_finegemm_copy"].append(kernel_time_us(call, num_tests=num_tests))
                k_major_copy.k_major_transposes = lambda xs, **kw: [x.transpose(1, 2).contiguous() for x in xs]
                try:
                    rec["us"][f"{layout}_torch_copy"].append(kernel_time_us(call, num_tests=num_tests))
                finally:
                    k_major_copy.k_major_transposes = _REAL_TRANSPOSES
            print(f"fp8_gemm_{layout} {m}x{n}x{k}: " + ", ".join(f"{name} {[round(x, 1) for x in v]} us"
                  for name, v in rec["us"].items()), flush=True)
            out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tests", type=int, default=30)
    ap.add_argument("--gemm", action="store_true", help="also time the whole tn call both ways")
    ap.add_argument("--rounds", type=int, default=3, help="--gemm / --nn: alternating rounds per path")
    ap.add_argument("--nn", action="store_true", help="also the FP8 nn contiguous call, both copies")
    ap.add_argument("--dense", action="store_true", help="also fp8_gemm_nn / tn / tt, both copies")
    ap.add_argument("--skip-copies", action="store_true", help="only --nn / --dense")
    args = ap.parse_args()
    records = []
    for g, m, n, ks, _ek in ([] if args.skip_copies else k_grouped_problems()):
        gen = torch.Generator(device="cuda").manual_seed(g + m + n)
        a, b = _fp8_bytes((sum(ks), m), gen), _fp8_bytes((sum(ks), n), gen)
        items = [(a, m), (b, n)]
        want = k_major_copies(items, ks, grouped=False)
        got = k_major_copies(items, ks, grouped=True)
        same = all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(got, want))
        rec = {"g": g, "m": m, "n": n, "sum_k": sum(ks), "bitwise_equal": same, "us": {}, "tbps": {}}
        moved = 2 * (m + n) * sum(ks)
        for name, grouped in (("per_group", False), ("grouped", True)):
            us = kernel_time_us(lambda: k_major_copies(items, ks, grouped=grouped), num_tests=args.tests)
            rec["us"][name], rec["tbps"][name] = us, moved / us / 1e6
        print(f"G{g} {m}x{n} sum k {sum(ks)}: per-group {rec['us']['per_group']:.1f} us "
              f"({rec['tbps']['per_group']:.2f} TB/s), grouped {rec['us']['grouped']:.1f} us "
              f"({rec['tbps']['grouped']:.2f} TB/s), bitwise equal {same}", flush=True)
        if args.gemm:
            rec["tn_call_us"] = {"per_group": [], "grouped": []}
            for _ in range(args.rounds):
                for name, grouped in (("per_group", False), ("grouped", True)):
                    rec["tn_call_us"][name].append(_tn_call_us(a, b, m, n, ks, grouped, args.tests))
            rounds = {name: [round(x, 1) for x in v] for name, v in rec["tn_call_us"].items()}
            print(f"  tn call (copies + GEMM, c = d): per-group {rounds['per_group']} us, "
                  f"grouped {rounds['grouped']} us", flush=True)
        records.append(rec)
    if args.nn:
        records += _nn_records(args.tests, args.rounds)
    if args.dense:
        records += _dense_records(args.tests, args.rounds)
    write_probe_json(args.out, records)


if __name__ == "__main__":
    main()
