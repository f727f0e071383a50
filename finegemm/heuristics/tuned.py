"""Tuned-configuration tables: measured winners that override the heuristic model for known shapes.

`python -m finegemm tune dense` times every plausible configuration of a shape on the GPU and
writes the fastest into a JSON table. The heuristics consult, in order:

1. the file named by FINEGEMM_TUNED_FILE (a user's own table, e.g. tuned for their model's shapes),
2. the table shipped with the package (heuristics/tuned_sm90.json for the FP8 kinds,
   heuristics/tuned_sm90_bf16.json for the dense BF16 kernel, kinds "bf16_<layout>"; both
   measured on an H200),

and fall back to the model when neither has the shape. An entry matches on the kernel family
(`kind`), the SM count the plan uses (so set_num_sms still means what it says), N, the output
type and C; among the entries for those, the one whose tuned M and K are nearest to the call's
(sum of |log ratio|, each ratio within a factor of 2; ties to the larger M) is used, so a table
tuned at M = 1, 16, 32, 64, ... also serves the M in between, and the per-group K of k-grouped
GEMMs find the entry tuned at the expected K. The configuration it names is re-derived for the actual M
(grid, tiles): every configuration is correct for every M, only its speed was measured at the
tuned one. FINEGEMM_DISABLE_TUNED=1 ignores every table (for A/B timing against the model).

Table format (version 1): {"version": 1, "entries": [{"kind": "fp8_1d2d", "num_sms": 132,
"m": ..., "n": ..., "k": ..., "out_fp32": false, "has_c": false, "config": {"block_m": ...,
"block_n": ..., "num_stages": ..., "num_splits": ..., "num_multicast": ..., "multicast_on_a": ...,
"tma_store": ..., "half_promote": ..., "ctas_per_sm": ..., "k_batch": ... (both optional, 1),
"l2_promotion": [A, B] (optional, [256, 256]: the operand tensor maps' L2 promotion in bytes, 0 =
none; dense 1D2D FP8 and dense BF16 entries), "b_group": 2 or 4 (optional, 1: a K-major B's TMA
boxes cover that many k-blocks where the family's b_group_fits allows it at the call's K and
split, one k-block per box elsewhere; dense entries)}, "us": ..., "model_us": ..., "gpu": ...,
"commit": ...}]}.
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
from pathlib import Path
from typing import Optional

from finegemm.heuristics._common import DEFAULT_L2_PROMOTION, check_l2_promotion


__all__ = ["SHIPPED_TABLE", "SHIPPED_BF16_TABLE", "TUNED_FILE_ENV", "DISABLE_TUNED_ENV", "CONFIG_FIELDS", "OPTIONAL_FIELDS", "state", "lookup", "entry_key",
           "load_table", "merge_entries", "clear"]

SHIPPED_TABLE = Path(__file__).with_name("tuned_sm90.json")
SHIPPED_BF16_TABLE = Path(__file__).with_name("tuned_sm90_bf16.json")  # kinds "bf16_<layout>"
TUNED_FILE_ENV = "FINEGEMM_TUNED_FILE"
DISABLE_TUNED_ENV = "FINEGEMM_DISABLE_TUNED"
CONFIG_FIELDS = ("block_m", "block_n", "num_stages", "num_splits", "num_multicast", "multicast_on_a",
                 "tma_store", "half_promote")
# absent in a table = the default
OPTIONAL_FIELDS = {"ctas_per_sm": 1, "k_batch": 1, "l2_promotion": list(DEFAULT_L2_PROMOTION), "c_stage": False,
                   "b_group": 1}
_VERSION = 1

_lock = threading.Lock()
_tables: dict[str, dict] = {}  # path -> {key: config dict}


MAX_M_RATIO = 2.0  # an entry serves M within this factor of its tuned M


def entry_key(kind: str, num_sms: int, n: int, out_fp32: bool, has_c: bool) -> tuple:
    """What an entry must match exactly (M and K are matched by nearness, see lookup())."""
    return (kind, int(num_sms), int(n), bool(out_fp32), bool(has_c))


def _key_of(e: dict) -> tuple:
    return entry_key(e["kind"], e["num_sms"], e["n"], e.get("out_fp32", False), e.get("has_c", False))


_INT_FIELDS = ("block_m", "block_n", "num_stages", "num_splits", "num_multicast", "ctas_per_sm", "k_batch")
_BOOL_FIELDS = ("multicast_on_a", "tma_store", "half_promote")


def _is_int(v) -> bool:
    return type(v) is int and v >= 1  # bool is not int here; 64.0 is rejected


def _check_entry(e: dict, where: str) -> dict:
    """The entry's config, after checking every field's presence and type (a malformed table must
    fail here, once, not inside a GEMM call)."""
    if not isinstance(e, dict):
        raise ValueError(f"{where}: entry {e!r} is not an object")
    cfg = e.get("config")
    if not isinstance(cfg, dict) or any(f not in cfg for f in CONFIG_FIELDS):
        raise ValueError(f"{where}: entry {e!r} needs a 'config' with fields {CONFIG_FIELDS}")
    if not isinstance(e.get("kind"), str):
        raise ValueError(f"{where}: entry {e!r} needs a string 'kind'")
    for f in ("num_sms", "m", "n", "k"):
        if not _is_int(e.get(f)):
            raise ValueError(f"{where}: entry {e!r}: {f!r} must be an integer >= 1")
    for f in ("out_fp32", "has_c"):
        if not isinstance(e.get(f, False), bool):
            raise ValueError(f"{where}: entry {e!r}: {f!r} must be true or false")
    for f in _INT_FIELDS:
        if f in cfg and not _is_int(cfg[f]):
            raise ValueError(f"{where}: entry {e!r}: config {f!r} must be an integer >= 1")
    for f in _BOOL_FIELDS:
        if not isinstance(cfg[f], bool):
            raise ValueError(f"{where}: entry {e!r}: config {f!r} must be true or false")
    b_group = cfg.get("b_group", 1)
    if type(b_group) is not int or b_group not in (1, 2, 4):
        raise ValueError(f"{where}: entry {e!r}: config 'b_group' must be 1, 2 or 4 (k-blocks per B box)")
    if "l2_promotion" in cfg:
        try:
            check_l2_promotion(cfg["l2_promotion"])
        except ValueError as err:
            raise ValueError(f"{where}: entry {e!r}: config {err}") from None
    return cfg


def load_table(path: str | os.PathLike) -> dict:
    """{entry_key: {(tuned m, tuned k): config dict}} of one table file (cached per path; a
    missing file is empty)."""
    path = str(path)
    with _lock:
        table = _tables.get(path)
    if table is not None:
        return table
    table = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("entries"), list):
            raise ValueError(f"{path}: not a finegemm tuned table (want {{'version': {_VERSION}, 'entries': [...]}})")
        for e in data["entries"]:
            cfg = _check_entry(e, path)
            table.setdefault(_key_of(e), {})[(int(e["m"]), int(e["k"]))] = {**OPTIONAL_FIELDS, **cfg}
    with _lock:
        _tables[path] = table
    return table


def clear() -> None:
    """Forget the loaded tables (after writing a table file, or in tests)."""
    with _lock:
        _tables.clear()


def state() -> tuple:
    """What the tables consulted depend on (the planners' caches include it in their keys)."""
    return (os.environ.get(TUNED_FILE_ENV), os.environ.get(DISABLE_TUNED_ENV, "").strip() not in ("", "0"))


def _table_or_empty(path) -> dict:
    """load_table(), but a missing or malformed table is reported once and treated as empty: a GEMM
    call never fails because of a tuned table (the model decides instead)."""
    path = str(path)
    with _lock:
        table = _tables.get(path)
    if table is not None:  # loaded (or found bad) before: no file-system access
        return table
    try:
        if not os.path.exists(path) and path not in (str(SHIPPED_TABLE), str(SHIPPED_BF16_TABLE)):
            print(f"finegemm: tuned table {path} does not exist ({TUNED_FILE_ENV}); ignored", file=sys.stderr)
        return load_table(path)
    except (ValueError, OSError) as e:  # json.JSONDecodeError is a ValueError
        print(f"finegemm: ignoring tuned table {path}: {e}", file=sys.stderr)
        with _lock:
            _tables[path] = {}  # reported once: later lookups hit the cache above
        return {}


def lookup(kind: str, num_sms: int, m: int, n: int, k: int, out_fp32: bool, has_c: bool) -> Optional[dict]:
    """The tuned config fields for a problem, or None (the heuristic model decides)."""
    user, disabled = state()
    if disabled:
        return None
    key = entry_key(kind, num_sms, n, out_fp32, has_c)
    shipped = SHIPPED_BF16_TABLE if kind.startswith("bf16_") else SHIPPED_TABLE
    tables = ([_table_or_empty(user)] if user else []) + [_table_or_empty(shipped)]
    for table in tables:
        hit = _nearest(table.get(key), m, k)
        if hit is not None:
            return hit
    return None


def _ratio(a: int, b: int) -> float:
    return max(a / b, b / a)


def _nearest(by_mk: Optional[dict], m: int, k: int) -> Optional[dict]:
    if not by_mk or m < 1 or k < 1:
        return None
    near = [t for t in by_mk if _ratio(t[0], m) <= MAX_M_RATIO and _ratio(t[1], k) <= MAX_M_RATIO]
    if not near:
        return None
    best = min(near, key=lambda t: (math.log(_ratio(t[0], m)) + math.log(_ratio(t[1], k)), -t[0], -t[1]))
    return by_mk[best]


def merge_entries(path: str | os.PathLike, entries: list[dict]) -> None:
    """Add (or replace, by key) entries in a table file, written atomically."""
    path = Path(path)
    old = []
    if path.exists():
        with open(path) as f:
            data = json.load(f)
        old = data.get("entries", [])
    def key_of(e):
        return _key_of(e) + (int(e["m"]), int(e["k"]))
    for e in entries:
        _check_entry(e, str(path))
    new_keys = {key_of(e) for e in entries}
    merged = [e for e in old if key_of(e) not in new_keys] + list(entries)
    merged.sort(key=lambda e: (e["kind"], e["num_sms"], e["n"], e["k"], e["m"]))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({"version": _VERSION, "entries": merged}, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    clear()
