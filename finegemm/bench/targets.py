"""`python -m finegemm targets`: where the bench results stand against the issues' speed targets.

Reads the JSON that `python -m finegemm bench dense|grouped|bf16` wrote (and the anchors file) and
evaluates every per-shape and geomean target of issues #3 (dense FP8), #4 (grouped FP8) and #5
(BF16) from the records, so a closing note's targets table is computed, not copied by hand. No GPU
needed: the results are plain JSON.

Each target gives one row: issue, target, measured value, met (True / False; None when the files
hold no record for it) and the records that miss it.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Optional

from finegemm.testing.shapes import DENSE_M as DENSE_MS  # the 18 shapes of issue #3: these M x DENSE_NK
from finegemm.testing.shapes import DENSE_NK

from ._common import ANCHORS_PATH as ANCHORS
from ._common import geomean as _geomean

RESULTS_DIR = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results"

BF16_DENSE_LAYOUTS = ("nt", "nn", "tn", "tt")
HOST_US_TARGET = 8.0
SMALL_MASKED_M = (20, 192)  # issue #4's memory-bound masked problems (rows per group)


def _row(issue: int, target: str, value: str, met: Optional[bool], misses=()) -> dict:
    return {"issue": issue, "target": target, "value": value, "met": met, "misses": list(misses)}


def _shape(*dims) -> str:
    return "x".join(str(d) for d in dims)


def dense_rows(dense: dict, anchors: dict) -> list[dict]:
    """Issue #3 from a `bench dense` result: the 18 anchor shapes and the host time per call."""
    goals = {(a["m"], a["n"], a["k"]): a for a in anchors.get("dense", [])}
    recs = {}
    for r in dense.get("records", []):
        key = (r["m"], r["n"], r["k"])
        if r["m"] in DENSE_MS and (r["n"], r["k"]) in DENSE_NK and key not in recs and r["us"].get("finegemm"):
            recs[key] = r  # a record without our time (an error) counts as not measured
    rows = []
    if len(recs) < len(DENSE_MS) * len(DENSE_NK):
        missing = [_shape(m, n, k) for m in DENSE_MS for n, k in DENSE_NK if (m, n, k) not in recs]
        rows.append(_row(3, "the 18 shapes measured", f"{len(recs)} of 18", False, missing))
    ours = {key: r["us"].get("finegemm") for key, r in recs.items()}
    vs_dg = {key: r["deepgemm_anchor_us"] / ours[key] for key, r in recs.items()
             if r.get("deepgemm_anchor_us") and ours[key]}
    vs_cublas = {key: r["us"]["cublas_blockwise"] / ours[key] for key, r in recs.items()
                 if r["us"].get("cublas_blockwise") and ours[key]}
    g_dg, g_cb = _geomean(vs_dg.values()), _geomean(vs_cublas.values())
    rows.append(_row(3, "geomean >= 1.3x DeepGEMM", _x(g_dg), None if g_dg is None else g_dg >= 1.3))
    rows.append(_row(3, "geomean >= 1.7x cuBLAS blockwise", _x(g_cb), None if g_cb is None else g_cb >= 1.7))
    slow_dg = sorted((s, key) for key, s in vs_dg.items() if s < 1.0)
    rows.append(_row(3, "none slower than DeepGEMM", f"{len(slow_dg)} slower", not slow_dg if vs_dg else None,
                     [f"{_shape(*key)} {s:.3f}x" for s, key in slow_dg]))
    slow_cb = sorted((s, key) for key, s in vs_cublas.items() if s < 1.0)
    rows.append(_row(3, "none slower than cuBLAS blockwise", f"{len(slow_cb)} slower",
                     not slow_cb if vs_cublas else None, [f"{_shape(*key)} {s:.3f}x" for s, key in slow_cb]))
    for label, sel in (("M = 4096 shapes at the goal (>= 1.10x DeepGEMM)", lambda m: m == 4096),
                       ("M <= 128 shapes at the goal (1.5x DeepGEMM or 80% of the floor)", lambda m: m <= 128)):
        pairs = [(ours[key], goals[key]["goal_us"], key) for key in recs
                 if sel(key[0]) and ours[key] and goals.get(key, {}).get("goal_us")]
        short = sorted((us / goal, key) for us, goal, key in pairs if us > goal)
        value = f"{len(pairs) - len(short)} of {len(pairs)}"
        if pairs:
            dg_range = [vs_dg[key] for _us, _goal, key in pairs if key in vs_dg]
            if dg_range:
                value += f" ({min(dg_range):.3f}-{max(dg_range):.3f}x DeepGEMM)"
        rows.append(_row(3, label, value, (not short) if pairs else None,
                         [f"{_shape(*key)} {t:.2f}x the goal's time" for t, key in short]))
    host = [(r["host_us_per_call"], (r["m"], r["n"], r["k"])) for r in dense.get("records", [])
            if r.get("host_us_per_call")]
    over = [f"{_shape(*key)} {us:.2f} us" for us, key in host if us > HOST_US_TARGET]
    rows.append(_row(3, f"host <= {HOST_US_TARGET:g} us per cached call",
                     f"{min(u for u, _ in host):.2f}-{max(u for u, _ in host):.2f} us" if host else "not measured",
                     (not over) if host else None, over))
    return rows


def grouped_rows(grouped: dict, anchors: dict) -> list[dict]:
    """Issue #4 from a `bench grouped` result: contiguous / masked anchors, the cuBLAS loop,
    the k-grouped first shape."""
    goal_of = {}
    for a in anchors.get("m_grouped_contiguous", []):
        goal_of[("contiguous", a["groups"], a["n"], a["k"])] = a.get("goal_us")
    for a in anchors.get("m_grouped_masked", []):
        goal_of[("masked", a["groups"], a["expected_m_per_group"], a["n"], a["k"])] = a.get("goal_us")
    rows = []
    for kind in ("contiguous", "masked"):
        recs = [r for r in grouped.get("records", []) if r.get("kind") == kind]
        anchored = []
        for r in recs:
            key = (kind, r["groups"], r["n"], r["k"]) if kind == "contiguous" else \
                (kind, r["groups"], r["m"], r["n"], r["k"])
            goal, ours = goal_of.get(key), r["us"].get("finegemm")
            if goal and ours and r.get("deepgemm_anchor_us"):
                anchored.append((r["deepgemm_anchor_us"] / ours, ours <= goal, r))
        short = [f"{_grouped_shape(r)} {s:.3f}x" for s, ok, r in sorted(anchored, key=lambda t: t[0]) if not ok]
        value = f"{len(anchored) - len(short)} of {len(anchored)}"
        if anchored:
            value += f" ({min(s for s, _, _ in anchored):.3f}-{max(s for s, _, _ in anchored):.3f}x DeepGEMM)"
        rows.append(_row(4, f"{kind}: every anchored shape >= 1.10x DeepGEMM", value,
                         (not short) if anchored else None, short))
        slow = [f"{_grouped_shape(r)} {r['us']['cublas_blockwise_loop'] / r['us']['finegemm']:.3f}x" for r in recs
                if r["us"].get("finegemm") and r["us"].get("cublas_blockwise_loop")
                and r["us"]["finegemm"] > r["us"]["cublas_blockwise_loop"]]
        rows.append(_row(4, f"{kind}: none slower than the cuBLAS per-group loop", f"{len(slow)} slower",
                         (not slow) if recs else None, slow))
    # Masked with few rows per group (m = 20, 192): memory-bound; the floor is every byte moved once
    # at the anchors' copy ceiling (read + write), and the target at least 80% of it.
    ceiling = anchors.get("ceilings", {}).get("copy_TBps_read_plus_write")
    small = [r for r in grouped.get("records", []) if r.get("kind") == "masked" and r["m"] in SMALL_MASKED_M
             and r["us"].get("finegemm")]
    if ceiling and small:
        fracs = sorted((masked_floor_us(r, ceiling) / r["us"]["finegemm"], _grouped_shape(r)) for r in small)
        short = [f"{name} {f:.0%}" for f, name in fracs if f < 0.8]
        rows.append(_row(4, "masked, m = 20 / 192 per group: >= 80% of the memory floor",
                         f"{len(fracs) - len(short)} of {len(fracs)} ({fracs[0][0]:.0%}-{fracs[-1][0]:.0%} of the floor)",
                         not short, short))
    else:
        rows.append(_row(4, "masked, m = 20 / 192 per group: >= 80% of the memory floor", "not measured", None))
    k_first = [r for r in grouped.get("records", []) if r.get("kind") == "k_grouped"]
    if k_first:
        tf = k_first[0].get("tflops", {}).get("finegemm")
        rows.append(_row(4, f"k-grouped >= 1000 TFLOPS at the first shape ({_grouped_shape(k_first[0])})",
                         f"{tf:.0f} TFLOPS" if tf else "not measured", None if tf is None else tf >= 1000))
    else:
        rows.append(_row(4, "k-grouped >= 1000 TFLOPS at the first shape", "not measured", None))
    return rows


def masked_floor_us(r: dict, ceiling_tbps: float) -> float:
    """A masked FP8 record's memory floor: A, B, their fp32 scales (1x128, 128x128) and the bf16 D
    of every group, each moved once at `ceiling_tbps`."""
    g, m, n, k = r["groups"], r["m"], r["n"], r["k"]
    kb = -(-k // 128)
    per_group = m * k + n * k + 4 * m * kb + 4 * -(-n // 128) * kb + 2 * m * n
    return g * per_group / (ceiling_tbps * 1e6)


def bf16_rows(bf16: dict) -> list[dict]:
    """Issue #5 from a `bench bf16` result: dense against torch (all, M <= 128, the lowest) and the
    grouped kinds against torch._grouped_mm."""
    dense = [r for r in bf16.get("records", []) if r.get("layout") in BF16_DENSE_LAYOUTS
             and r["us"].get("finegemm") and r["us"].get("torch")]
    speed = [(r["us"]["torch"] / r["us"]["finegemm"], r) for r in dense]
    rows = []
    g_all = _geomean(s for s, _ in speed)
    rows.append(_row(5, "dense geomean >= 1.0x torch", _x(g_all), None if g_all is None else g_all >= 1.0))
    low = sorted((s, f"{r['layout']} {_shape(r['m'], r['n'], r['k'])}") for s, r in speed if s < 0.9)
    lowest = min(speed, key=lambda t: t[0]) if speed else None
    rows.append(_row(5, "no dense record below 0.9x torch",
                     f"lowest {lowest[0]:.3f}x ({lowest[1]['layout']} {_shape(lowest[1]['m'], lowest[1]['n'], lowest[1]['k'])})"
                     if lowest else "not measured", (not low) if speed else None, [f"{n} {s:.3f}x" for s, n in low]))
    g_small = _geomean(s for s, r in speed if r["m"] <= 128)
    rows.append(_row(5, "dense M <= 128 geomean >= 1.1x torch", _x(g_small),
                     None if g_small is None else g_small >= 1.1))
    grouped = [r["us"]["torch_grouped_mm"] / r["us"]["finegemm"] for r in bf16.get("records", [])
               if r.get("layout", "").startswith(("grouped_", "k_grouped")) and r["us"].get("finegemm")
               and r["us"].get("torch_grouped_mm") and r.get("layout") != "grouped_contiguous_nn"]
    g_grp = _geomean(grouped)
    rows.append(_row(5, "grouped geomean >= 1.3x torch._grouped_mm", _x(g_grp), None if g_grp is None else g_grp >= 1.3))
    return rows


def _x(v: Optional[float]) -> str:
    return "not measured" if v is None else f"{v:.3f}x"


def _grouped_shape(r: dict) -> str:
    return f"{r['kind']} G={r['groups']} {_shape(r['m'], r['n'], r['k'])}"


def newest(suite: str, gpu: str = "h200", results_dir: pathlib.Path = RESULTS_DIR) -> Optional[pathlib.Path]:
    """The newest `<date>_<gpu>_<suite>_<commit>.json` under benchmarks/results (by date, then name)."""
    pat = re.compile(rf"^(\d{{4}}-\d{{2}}-\d{{2}})_{re.escape(gpu)}_{re.escape(suite)}_[0-9a-f]{{7,40}}\.json$")
    found = sorted((m.group(1), p.name, p) for p in results_dir.glob("*.json") if (m := pat.match(p.name)))
    return found[-1][2] if found else None


def evaluate(dense: Optional[dict], grouped: Optional[dict], bf16: Optional[dict], anchors: dict) -> list[dict]:
    rows = []
    if dense is not None:
        rows += dense_rows(dense, anchors)
    if grouped is not None:
        rows += grouped_rows(grouped, anchors)
    if bf16 is not None:
        rows += bf16_rows(bf16)
    return rows


def to_markdown(rows: list[dict], sources: dict) -> str:
    lines = ["| issue | target | where it stands | met |", "| --- | --- | --- | --- |"]
    for r in rows:
        met = {True: "yes", False: "no", None: "-"}[r["met"]]
        miss = f" (short: {', '.join(r['misses'])})" if r["misses"] and r["met"] is False else ""
        lines.append(f"| #{r['issue']} | {r['target']} | {r['value']}{miss} | {met} |")
    src = "; ".join(f"{k}: {v}" for k, v in sources.items())
    return "\n".join(lines) + f"\n\nFrom {src}.\n"


def _load(path) -> Optional[dict]:
    return json.loads(pathlib.Path(path).read_text()) if path else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m finegemm targets", description=__doc__.splitlines()[0])
    for suite in ("dense", "grouped", "bf16"):
        p.add_argument(f"--{suite}", metavar="JSON", help=f"a `bench {suite}` result (default: the newest "
                       f"benchmarks/results/<date>_<gpu>_{suite}_<commit>.json)")
    p.add_argument("--gpu", default="h200", help="the GPU tag of the default files (default h200)")
    p.add_argument("--anchors", default=str(ANCHORS), help="the anchors file (goals per shape)")
    p.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = p.parse_args(argv)
    paths = {s: getattr(args, s) or newest(s, args.gpu) for s in ("dense", "grouped", "bf16")}
    if not any(paths.values()):
        print("finegemm targets: no bench results given or found", file=sys.stderr)
        return 2
    gone = [str(path) for path in list(paths.values()) + [args.anchors] if path and not pathlib.Path(path).is_file()]
    if gone:
        print(f"finegemm targets: no such file: {', '.join(gone)}", file=sys.stderr)
        return 2
    anchors = json.loads(pathlib.Path(args.anchors).read_text())
    data = {s: _load(path) for s, path in paths.items()}
    rows = evaluate(data["dense"], data["grouped"], data["bf16"], anchors)
    sources = {s: f"{pathlib.Path(path).name} ({data[s].get('gpu', '?')}, {data[s].get('commit', '?')})"
               for s, path in paths.items() if path}
    print(to_markdown(rows, sources))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"sources": sources, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
