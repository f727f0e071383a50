"""The k-grouped FP8 call of the first k-grouped bench shape, with c = d ("c") and without C
("noc"), twice each: for ncu (NOTES, state of the thirty-first session: the no-C call is slower).
Usage: ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -k regex:finegemm \
       python scripts/probe_k_grouped_no_c.py c noc
"""
import sys, torch
sys.path.insert(0, '.')
import finegemm
from finegemm.bench.grouped import k_grouped_problems, k_grouped_inputs
g, m, n, ks, ek = k_grouped_problems()[0]
gen = torch.Generator(device="cuda").manual_seed(0)
a, sfa, b, sfb, _, _ = k_grouped_inputs(m, n, ks, gen, "cuda")
ks_t = torch.tensor(ks, dtype=torch.int32, device="cuda")
d = torch.randn(g, m, n, device="cuda")
out = torch.empty_like(d)
for mode in sys.argv[1:]:
    for _ in range(2):
        if mode == "c":
            finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, ks, ks_t, c=d)
        else:
            finegemm.k_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), out, ks, ks_t)
    torch.cuda.synchronize()
print("done", g, m, n, sum(ks))
