"""Pieces shared by the heuristics of every kernel family."""
from __future__ import annotations

import dataclasses
import os

from finegemm.utils import ceil_div


# Three consumer warpgroups (setmaxnreg 160 / producer 32), in both kernel families.
THREE_WG_BLOCK_M = 192

# L2 promotion of the A and B tensor maps (bytes; 0: none), a host-side choice of a configuration
# (the kernel is the same): 256B unless a tuned table entry names another (NOTES v0.40).
L2_PROMOTIONS = (0, 64, 128, 256)
DEFAULT_L2_PROMOTION = (256, 256)


def check_l2_promotion(v) -> tuple:
    """(A bytes, B bytes) from a table's or a caller's value; ValueError for anything else."""
    if (not isinstance(v, (list, tuple)) or len(v) != 2
            or any(type(x) is not int or x not in L2_PROMOTIONS for x in v)):
        raise ValueError(f"l2_promotion must be [A, B] with each one of {L2_PROMOTIONS}, got {v!r}")
    return (v[0], v[1])


def with_entry_promotion(cfg, fields: dict):
    """A configuration (any family's dataclass) with the L2 promotion a table entry's fields name
    (the default when they name none)."""
    promotion = check_l2_promotion(fields.get("l2_promotion", DEFAULT_L2_PROMOTION))
    return cfg if promotion == cfg.l2_promotion else dataclasses.replace(cfg, l2_promotion=promotion)


def with_entry_b_group(cfg, fields: dict, fits):
    """A configuration with the B group a table entry names, where the family's b_group_fits
    allows it: a speed choice measured at the entry's shape, so at a K or split where the group does
    not fit, one k-block per box (as correct) is what runs."""
    group = fields.get("b_group", 1)
    return dataclasses.replace(cfg, b_group=group) if group > 1 and fits(cfg, group) else cfg


def b_group_twins(cands: list, groups, fits) -> list:
    """The candidates, then for each B group in `groups` a twin of every candidate it fits (the
    family's b_group_fits; a twin only where the candidate reads one k-block per box): what
    `finegemm tune --b-group` times, so a table entry names a group only where a run chose it."""
    def launch(c):  # every field but the model's estimate
        return dataclasses.replace(c, est_us=0.0)

    out, seen = list(cands), {launch(c) for c in cands}
    for g in groups:
        for c in cands:
            twin = dataclasses.replace(c, b_group=g)
            if c.b_group == 1 and fits(c, g) and launch(twin) not in seen:
                seen.add(launch(twin))
                out.append(twin)
    return out


def l2_promotion_note(p: tuple) -> str:
    """FINEGEMM_PRINT_CONFIGS text: empty for the default."""
    return "" if tuple(p) == DEFAULT_L2_PROMOTION else f" l2-promotion={p[0]}/{p[1]}"


def whole_b_groups(group: int, num_stages: int, k: int, block_k: int, n: int, num_splits: int) -> bool:
    """The part of both families' b_group_fits (and of the host's fg::b_group_fits) that is the
    same: 2 or 4 k-blocks dividing the ring, whole k-blocks, whole 8-row groups of B, every split's
    k-range whole groups."""
    return (group in (2, 4) and num_stages % group == 0 and k % block_k == 0 and n % 8 == 0
            and (k // block_k) % (num_splits * group) == 0)


def print_configs_enabled() -> bool:
    """FINEGEMM_PRINT_CONFIGS is set to something truthy."""
    return os.environ.get("FINEGEMM_PRINT_CONFIGS", "").strip().lower() not in ("", "0", "false", "no", "off")


def grouped_block_m_options(contiguous: bool, m: int, expected_m: int, alignment: int,
                            what: str) -> tuple[list[int], int]:
    """(block_m candidates, rows per group the model plans for), for both kernel families.

    Contiguous: block_m must divide the mk alignment (segments start at multiples of it, so a
    tile never holds two groups). Masked: plan for expected_m rows per group (0 = Mmax), and only
    64-row tiles when that is <= 64; 192-row tiles (three consumer warpgroups) too where they pad
    fewer rows than 128-row ones (ceil(em / 192) * 192 < ceil(em / 128) * 128: 129-192, 513-576,
    ... rows). Where the padding is equal (257-384 rows) the 128-row tiles stay: a 192-row tile
    measured ~4% slower per computed row (benchmarks/NOTES.md v0.44).
    """
    if contiguous:
        bms = [bm for bm in (64, 128) if alignment % bm == 0]
        if not bms:
            raise NotImplementedError(
                f"m-grouped contiguous {what} GEMM: the mk alignment {alignment} must be a multiple of block_m "
                f"(64 or 128) so that a tile never spans two groups; set_mk_alignment_for_contiguous_layout(64 "
                f"or 128)")
        return bms, m
    em = min(max(expected_m, 1), m) if expected_m > 0 else m
    if em <= 64:
        return [64], em
    three_wg = ceil_div(em, THREE_WG_BLOCK_M) * THREE_WG_BLOCK_M < ceil_div(em, 128) * 128
    return ([64, 128, THREE_WG_BLOCK_M] if three_wg else [64, 128]), em


def grouped_model_rows(contiguous: bool, m: int, num_groups: int, planned_m: int, block_m: int) -> int:
    """Rows the cost model charges: the stacked rows (contiguous), or every group's planned rows
    rounded up to whole tiles (masked: per-group edge tiles are charged whole)."""
    return m if contiguous else num_groups * ceil_div(planned_m, block_m) * block_m


def grouped_tuned_key(contiguous: bool, contiguous_prefix: str, masked_prefix: str, m: int, num_groups: int,
                      expected_m: int) -> tuple[str, int]:
    """(tuned-table kind, the M its entries are keyed by) of an m-grouped problem: prefix + G, and
    the stacked rows for the contiguous kind, the expected m (else Mmax) for the masked kind."""
    if contiguous:
        return f"{contiguous_prefix}{num_groups}", m
    return f"{masked_prefix}{num_groups}", expected_m if expected_m > 0 else m
