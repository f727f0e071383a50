"""The split-K workspace bookkeeping shared by the kernel families (CPU tensors stand in for CUDA)."""
import torch

from finegemm.ops._runtime import SplitKWorkspace

CPU = torch.device("cpu")


def test_reuses_per_stream_and_grows():
    ws = SplitKWorkspace()
    p1 = ws.pointers(100, 10, CPU, stream=7, capturing=False)
    assert ws.pointers(50, 5, CPU, stream=7, capturing=False) == p1  # big enough: reused
    w, c = ws.buffers[(None, 7)]
    assert w.numel() == 100 and c.numel() == SplitKWorkspace.MIN_COUNTERS and not c.any()
    p2 = ws.pointers(200, 10, CPU, stream=7, capturing=False)  # grows
    assert ws.buffers[(None, 7)][0].numel() == 200
    assert len(ws.retired) == 1 and ws.retired[0][0].data_ptr() == p1[0]  # old pair kept alive
    p3 = ws.pointers(10, 10, CPU, stream=8, capturing=False)  # another stream: its own pair
    assert p3 != p2 and len(ws.buffers) == 2


def test_capture_gets_private_buffers():
    ws = SplitKWorkspace()
    eager = ws.pointers(64, 4, CPU, stream=1, capturing=False)
    g1 = ws.pointers(64, 4, CPU, stream=1, capturing=True)
    g2 = ws.pointers(64, 4, CPU, stream=1, capturing=True)
    assert len({eager, g1, g2}) == 3
    assert all(not c.any() for _, c in ws.retired)  # counters start at zero
    assert ws.buffers[(None, 1)][0].data_ptr() == eager[0]  # capture never replaces eager buffers
