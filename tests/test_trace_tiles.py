"""scripts/trace_tiles.py's summary of a trace buffer (CPU: a synthetic buffer in the layout of
ptx/trace.cuh): the per-tile phases and a split cluster's tail come from the right events."""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def test_split_tail_phases_from_events():
    import trace_tiles as tt
    from finegemm.heuristics.sm90_fp8_gemm import make_config

    cfg = make_config(128, 4096, 7168, 132, False, False, 128, 64, 8, 2)
    tr = torch.zeros(2, tt.ROLES, tt.TILES, tt.EVENTS, dtype=torch.int64)
    # Consumer events of tile 0: head, first full, loop done, epilogue done, partial written,
    # barrier passed, rows summed, exit; producer: head, first empty, last load, kernel entry.
    for cta, skew in ((0, 0), (1, 40)):
        for wg in range(2):
            tr[cta, wg, 0] = torch.tensor([100, 300, 2000, 2900, 2100, 2500, 2800, 3400]) + skew
        tr[cta, 2, 0, :4] = torch.tensor([90, 150, 1900, 20]) + skew
    med = tt.summarise(tr, cfg, 128, 4096, 7168)["median_cycles"]
    assert (med["head_to_full"], med["mainloop"], med["epilogue"]) == (200, 1700, 900)
    assert (med["partial_write"], med["barrier_wait"], med["gather"], med["store"]) == (100, 400, 300, 100)
    assert med["exit_wait"] == 500 and med["entry_to_head"] == 80 and med["entry_to_exit"] == 3380
    assert med["producer_lead"] == 150  # first full (300) - producer's first empty stage (150)


def test_tiles_without_split_tail_report_nan():
    import math

    import trace_tiles as tt
    from finegemm.heuristics.sm90_fp8_gemm import make_config

    cfg = make_config(4096, 4096, 7168, 132, False, False, 128, 208, 4)
    tr = torch.zeros(1, tt.ROLES, tt.TILES, tt.EVENTS, dtype=torch.int64)
    for t in range(3):  # three tiles, no split events
        tr[0, 0, t, :4] = torch.tensor([1000, 1200, 5000, 5400]) + 5000 * t
    med = tt.summarise(tr, cfg, 4096, 4096, 7168)["median_cycles"]
    assert med["mainloop"] == 3800 and med["gap"] == 600
    assert math.isnan(med["barrier_wait"]) and math.isnan(med["entry_to_head"])
