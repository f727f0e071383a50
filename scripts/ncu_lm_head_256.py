"""One 256x128256x4096 nt call of ours and of torch.matmul inside a profiler range, for
ncu --profile-from-start off (the mid-M LM head, benchmarks/NOTES.md v1.09)."""
import torch

import finegemm

m, n, k = 256, 128256, 4096
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
finegemm.bf16_gemm_nt(a, b, d)  # compile / load outside the profiled range
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
finegemm.bf16_gemm_nt(a, b, d)
torch.matmul(a, b.t())
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
