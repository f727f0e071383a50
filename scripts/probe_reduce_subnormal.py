"""What the fp32 TMA reduce-add epilogue does to subnormal C (c = d, recipe (1, 1, 128)): rows of A
zeroed, so D must equal C there; prints, per repeat, how many of those elements changed and what
they became. Also repeats a normal-range C against the direct epilogue (bitwise), which would show
a race rather than a numeric rule."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finegemm import quant, runtime  # noqa: E402
from finegemm.heuristics import sm90_fp8_gemm as h  # noqa: E402
from finegemm.ops import sm90_fp8_gemm as ops  # noqa: E402


def main() -> int:
    m, n, k = 128, 256, 256
    torch.manual_seed(0)
    a, sfa = quant.per_token_cast_to_fp8(torch.randn(m, k, device="cuda"))
    b, sfb = quant.per_token_cast_to_fp8(torch.randn(n, k, device="cuda"))
    a[:64].view(torch.uint8).zero_()
    plan = h.select_config(m, n, k, runtime.get_num_sms(), True, True, one_d_one_d=True)
    cfgs = {tma: h.make_config(m, n, k, runtime.get_num_sms(), True, True, 128, 128, h.max_stages(128, 128, tma, True),
                               1, 1, False, tma, one_d_one_d=True) for tma in (True, False)}
    assert plan is not None
    for rep in range(6):
        c0 = torch.randn(m, n, device="cuda") * 1e-39
        for flush_l2 in (False, True):
            d = c0.clone()
            if flush_l2:
                torch.empty(256 << 20, dtype=torch.uint8, device="cuda").zero_()
            ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfgs[True])()
            torch.cuda.synchronize()
            diff = (d[:64].view(torch.int32) != c0[:64].view(torch.int32))
            nz = int(diff.sum())
            vals = d[:64][diff][:4].tolist()
            zero = int((d[:64][diff] == 0).sum())
            print(f"rep {rep} flush_l2={flush_l2}: {nz} of {64 * n} zero-product elements changed, "
                  f"{zero} of them to zero; e.g. {vals}", flush=True)
    bad = 0
    for rep in range(10):
        c0 = torch.randn(m, n, device="cuda")
        out = {}
        for tma in (True, False):
            d = c0.clone()
            ops._prepare_1d1d_kernel(a, sfa, b, sfb, d, d, cfgs[tma])()
            out[tma] = d
        bad += not torch.equal(out[True].view(torch.int32), out[False].view(torch.int32))
    print(f"normal-range C: {bad} of 10 repeats differ between the TMA and the direct epilogue", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
