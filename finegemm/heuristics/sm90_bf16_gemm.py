"""Launch configuration of the SM90 BF16 GEMM (impls/sm90_bf16_gemm.cuh), every layout.

select_config() lists every candidate (block_m, block_n, num_splits), estimates its time with
the roofline model of the FP8 family's heuristic (heuristics/sm90_fp8_gemm.py) adapted to bf16,
and returns the cheapest:

* A work unit is one (tile, split); the grid is min(num_sms, units) and the busiest CTA runs
  ceil(units / grid) units, so a partly filled last wave costs a full unit.
* A unit's main loop is bound by the tensor cores (2 * bm * bn * 64 flops per 64-wide k-block at
  the per-SM bf16 peak, derated for narrow N where wgmma m64nNk16 is shared-memory bound, and
  slightly for one consumer warpgroup) or by the L2 -> SM operand traffic ((bm + bn) * 128
  bytes per k-block).
* Epilogue: the non-split kernels carry the TMA-store staging buffer (block_m x block_n bf16),
  which bf16 outputs use (the store overlaps the next tile; a unit pays the smem write); fp32
  outputs and split-K units store directly (not overlapped). Split-K adds the partial write and
  the last CTA's read of all partials.
* Whole problem: at least the DRAM time of the unique bytes, at a bandwidth scaled down when
  the grid is below 85% of the SMs.

The kernel space is kept small on purpose (every member is compiled spill-free by
tests/test_bf16_kernel_compile.py): block_m 64 / 128; block_n from BLOCK_N_K_MAJOR when B is
K-major, from BLOCK_N_MN_MAJOR (whole 64-column TMA boxes, or one 32-column box) when B is
N-major; the stage count is a function of the tile (as many as fit); split-K only with
SPLIT_BLOCK_M x SPLIT_BLOCK_N tiles (the model: MODEL_SPLIT_TILES, for problems with fewer tiles
than half the SMs). Outside the planner, forced configs may also take the tall tile block_m 256
(TALL_BLOCK_M: four consumer warpgroups, block_n <= 128, no split-K; measured slower than block_m
128 at mid and large M on an H100, benchmarks/NOTES.md v1.10). A tuned table
(heuristics/tuned.py, kinds "bf16_<layout>", `python -m finegemm tune bf16`) overrides the model
for the shapes it holds. The output dtype and C are run-time flags of the kernel, not variants.

M-grouped GEMMs (MoE; select_grouped_config): the same kernel with a GEMM-kind template parameter
(GEMM_GROUPED_CONTIGUOUS / GEMM_GROUPED_MASKED, scheduler/grouped_bf16.cuh), nt layout, bf16 D,
no C, no split-K, always the TMA-store epilogue; block_n from GROUPED_BLOCK_N[kind] (a small set:
every member is compiled spill-free by tests/test_bf16_grouped_compile.py). The masked kind also
has block_m 192 (three consumer warpgroups, block_n from GROUPED_BLOCK_N_THREE_WG) for groups of
more than 128 planned rows: 129-192 rows make one m-block instead of two.

K-grouped GEMM (MoE weight gradient; select_k_grouped_config): the same kernel with GEMM_K_GROUPED,
tn layout, fp32 D, optional C, no split-K; its epilogue is the fp32 TMA one of the FP8 recipe
(1,1,128) kernels (a 16 KB box ring per consumer warpgroup, K_GROUPED_RING_BYTES_PER_WG: a TMA
store, or a reduce-add when C is D; direct stores for a separate C); one launch walks all groups'
tiles. The model is the dense one on the "average group": G x ceil(M / block_m) m-blocks with
K = the mean k of the groups, G weight and activation slices read from DRAM. block_n from K_GROUPED_BLOCK_N (every member compiled
spill-free by tests/test_bf16_grouped_compile.py).
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from dataclasses import dataclass

from finegemm.heuristics import tuned
from finegemm.heuristics._common import (DEFAULT_L2_PROMOTION, THREE_WG_BLOCK_M, grouped_block_m_options,
                                         grouped_model_rows, grouped_tuned_key, l2_promotion_note,
                                         print_configs_enabled, whole_b_groups, with_entry_b_group,
                                         with_entry_promotion)
from finegemm.utils import ceil_div

__all__ = [
    "Bf16GemmConfig",
    "select_config",
    "make_config",
    "config_from_fields",
    "candidate_configs",
    "tuned_kind",
    "smem_bytes",
    "max_stages",
    "model_stages",
    "num_threads",
    "block_n_candidates",
    "all_kernel_keys",
    "LAYOUTS",
    "BLOCK_K",
    "SMEM_LIMIT",
    "TALL_BLOCK_M",
    "TALL_MAX_BLOCK_N",
    "check_tall_tile",
    "check_multicast",
    "multicast_twins",
    "clear_cache",
    "select_grouped_config",
    "make_grouped_config",
    "grouped_candidate_configs",
    "grouped_tuned_kind",
    "MASKED_KIND_PREFIX",
    "CONTIGUOUS_KIND_PREFIX",
    "grouped_kernel_keys",
    "GEMM_NORMAL",
    "GEMM_GROUPED_CONTIGUOUS",
    "GEMM_GROUPED_MASKED",
    "GROUPED_BLOCK_N",
    "GEMM_K_GROUPED",
    "K_GROUPED_BLOCK_N",
    "select_k_grouped_config",
    "k_grouped_kernel_keys",
    "k_grouped_k_bucket",
]

BLOCK_K = 64
SMEM_LIMIT = 232448  # 227 KB: the SM90 per-block dynamic shared memory limit
# The model builds rings of up to MODEL_MAX_STAGES; tuned entries and the tuner's deep-ring twins
# up to MAX_STAGES (the kernel's limit). As for FP8 (benchmarks/NOTES.md v0.19), a deeper ring
# helps some narrow tiles and not others: only measurement picks it.
MAX_STAGES = 16
MODEL_MAX_STAGES = 10
MODEL_BM128_MIN_M = 65  # the model's pick uses block_m 128 alone for M in [MIN_M, MAX_M] (_model_block_ms) ...
MODEL_BM128_MIN_M_MN_MAJOR_A = 112  # ... or [this, MAX_M] where A is MN-major (its boxes are not fitted)
MODEL_BM128_MAX_M = 128
MODEL_BM128_MIN_N = 4096  # ... where N is at least this (the replay of v0.67: 2048 and 4096 alike, 4096 is what was measured)
MIN_STAGES = 2
# An N-major B (nn / tn) streams best with about this much of B in flight per CTA: the model's ring
# for such a non-split tile holds at most this many bytes of B (at least 3 stages), not every stage
# that fits. H100, v1.09 (benchmarks/NOTES.md): bm64 bn256 4 -> 3 stages 0.3-2.4% faster on 10 of 10
# shape-layouts (1-64 x 32000-151936), bn192 6 -> 4 0.3-4.5%, bn128 8 -> 6 0.5-2.5% (one shape
# bimodal); 2 stages and the narrower tiles' deep rings (bn64) lose. Unmeasured on an H200; the
# shipped table's entries name their rings and are unaffected.
N_MAJOR_B_RING_BYTES = 96 * 1024
N_MAJOR_B_MIN_RING = 3
MAX_SPLITS = 16
MIN_KB_PER_SPLIT = 8  # 512 of K per split at least
# 176: N = 2112 (the DeepSeek-V3 q_a / kv_a projection) is 12 x 176, so M = 4096 runs 384 tiles
# (2.9 waves of 132) where bn192 runs 352 (2.7: the last wave 2/3 full); cuBLAS picks 176 there
# (scripts/probe_cublas_kernels.py, NOTES v0.30).
# 112: N = 7168 is 64 x 112, so M = 256 runs 128 tiles (one wave) where bn128 runs 112 (85% of
# the SMs busy); NOTES v0.33.
BLOCK_N_K_MAJOR = (16, 32, 48, 64, 96, 112, 128, 160, 176, 192, 224, 256)
# N-major B: whole 64-column TMA boxes (128-byte swizzle), or one 32-column box (64-byte swizzle)
# for skinny N, where 64-wide tiles leave too few work units (e.g. N = 256).
BLOCK_N_MN_MAJOR = (32, 64, 128, 192, 256)
# Split-K kernels (the kernel space; tuned entries may name any of them): block_m 64 or 128, block_n
# 32 / 64 / 128 (bn256 spills with split-K). The model itself only picks MODEL_SPLIT_TILES: its
# split-K estimates for block_m 128 were 10-30% off (scripts/probe_bf16_configs.py, NOTES v0.15).
# bm64 x bn32 joined them when N-major B got 32-column tiles: at N = 256 it is what the tuner
# picks in every layout, 8-16% ahead of bn64 (NOTES v0.27).
SPLIT_BLOCK_M = (64, 128)
SPLIT_BLOCK_N = (32, 64, 128)
MODEL_SPLIT_TILES = ((64, 32), (64, 64), (64, 128))
# The tall tile (four consumer warpgroups of 112 registers; dense kind, no split-K): block_m 256
# with block_n <= TALL_MAX_BLOCK_N (block_n / 2 accumulators per thread). Forced configs only
# (scripts/probe_bf16_configs.py): the model and the tuner do not consider it (slower than
# block_m 128 where measured, benchmarks/NOTES.md v1.10).
TALL_BLOCK_M = 256
TALL_MAX_BLOCK_N = 128


def check_multicast(block_m: int, block_n: int, a_mn_major: bool, b_mn_major: bool, num_splits: int,
                    num_multicast: int, multicast_on_a: bool, b_group: int = 1) -> None:
    """The 2-CTA multicast's rule (the kernel's static_asserts, the host launcher's check): pairs
    only, without split-K (a split cluster is the cluster) or B groups on a shared B; each CTA loads
    half of the shared operand's stage: half of an MN-major operand's 64-wide boxes (a K-major box
    of half the rows always keeps whole 8-row swizzle atoms: block_m 64 / 128 / 256, block_n % 16
    == 0). ValueError naming the rule otherwise."""
    if num_multicast == 1:
        return
    if num_multicast != 2:
        raise ValueError(f"num_multicast must be 1 or 2 (a pair of CTAs), got {num_multicast}")
    if num_splits != 1:
        raise ValueError(f"multicast is not combined with split-K (got {num_splits} splits)")
    block, mn_major, name = (block_m, a_mn_major, "A") if multicast_on_a else (block_n, b_mn_major, "B")
    if mn_major and block % 128 != 0:
        raise ValueError(f"multicast of an MN-major {name} needs its block ({block}) a multiple of 128 "
                         f"(whole 64-wide boxes per CTA)")
    if not multicast_on_a and b_group != 1:
        raise ValueError("multicast of B is not combined with B groups (b_group > 1)")


def check_tall_tile(block_m: int, block_n: int, num_splits: int) -> None:
    """The tall tile's rule (the kernel's static_assert, the host launcher's check): ValueError
    for block_m 256 with split-K or block_n above TALL_MAX_BLOCK_N."""
    if block_m == TALL_BLOCK_M and (num_splits != 1 or block_n > TALL_MAX_BLOCK_N):
        raise ValueError(f"block_m {TALL_BLOCK_M}: no split-K and block_n <= {TALL_MAX_BLOCK_N}, got "
                         f"{num_splits} splits, block_n {block_n}")


# Layout suffix -> (A is M-major, B is N-major). nt: A [M, K], B [N, K]; nn: B [K, N];
# tn: A [K, M], B [K, N]; tt: A [K, M], B [N, K].
LAYOUTS = {"nt": (False, False), "nn": (False, True), "tn": (True, True), "tt": (True, False)}
# GEMM kinds (mirror scheduler::Bf16GemmKind in include/finegemm/scheduler/grouped_bf16.cuh).
GEMM_NORMAL = 0
GEMM_GROUPED_CONTIGUOUS = 1
GEMM_GROUPED_MASKED = 2
GEMM_K_GROUPED = 3
# block_n of the m-grouped kernels per kind. The contiguous kind's bn256 spilled while its
# padding rows were zeroed in the accumulators; the epilogue masks them at the store now
# (benchmarks/NOTES.md v0.80; spill-free: tests/test_bf16_grouped_compile.py).
GROUPED_BLOCK_N = {GEMM_GROUPED_CONTIGUOUS: (64, 128, 192, 256), GEMM_GROUPED_MASKED: (64, 128, 192, 256)}
# block_m 192 (three consumer warpgroups, 160 registers each after setmaxnreg; masked kind only):
# a group of 129-192 rows is one m-block instead of two (a quarter of them padding at m = 192).
# block_n 64 / 128 (6 / 4 stages next to the 192-row staging buffer); bn192 (3 stages) measured
# 2-12% slower than bn128 on every G = 32, m = 192 record (benchmarks/NOTES.md v0.44).
GROUPED_BLOCK_N_THREE_WG = (64, 128)
# Tuned-table kinds of the m-grouped kernels: prefix + number of groups (entries keyed by the
# stacked rows for contiguous, the expected m for masked; `python -m finegemm tune bf16_masked`).
MASKED_KIND_PREFIX = "bf16_masked_g"
CONTIGUOUS_KIND_PREFIX = "bf16_contiguous_g"
# block_n of the k-grouped kernel (B is N-major: whole 64-column TMA boxes).
K_GROUPED_BLOCK_N = (64, 128, 192, 256)
# The k-grouped kernel's fp32 TMA epilogue: a ring of two 32-column fp32 boxes (64 rows, 8 KB each)
# per consumer warpgroup (epilogue::TmaStoreFp32<BLOCK_N>::kBytes for every K_GROUPED_BLOCK_N).
K_GROUPED_RING_BYTES_PER_WG = 16384

# Machine model (H100/H200 SXM; only ratios matter for the choice).
_PEAK_FLOPS_PER_SM_US = 989e6 / 132  # dense bf16 flops per microsecond per SM
_L2_BYTES_PER_SM_US = 8.0e6 / 132  # L2 -> SM operand bandwidth share
_STORE_BYTES_PER_SM_US = 5.0e6 / 132  # direct epilogue stores per SM
_SMEM_EPI_BYTES_PER_SM_US = 150e3  # TMA-store epilogue: stmatrix into smem + barriers
_STAGE_EFFICIENCY = {2: 0.75, 3: 0.9}  # short rings expose L2/TMA latency (>= 4 stages: 1.0)
_DRAM_BYTES_US = 4.0e6  # HBM bandwidth (bytes per microsecond)
# Issue gaps with 1 / 2 / 3 consumer warpgroups (192: assumed as 128, not calibrated; the masked
# tables decide where it runs).
_WG_EFFICIENCY = {64: 0.85, 128: 0.95, THREE_WG_BLOCK_M: 0.95}
_FIXED_US = 2.0  # launch + pipeline fill
_DRAM_FULL_GRID_FRACTION = 0.85


@dataclass(frozen=True)
class Bf16GemmConfig:
    m: int
    n: int
    k: int
    a_mn_major: bool  # A stored [K, M]
    b_mn_major: bool  # B stored [K, N]
    block_m: int
    block_n: int
    num_stages: int
    num_splits: int
    grid: int
    smem_bytes: int
    num_threads: int
    num_tiles: int
    num_units: int
    out_fp32: bool
    has_c: bool
    est_us: float  # the model's estimate (for comparing candidates, not a prediction)
    gemm_kind: int = GEMM_NORMAL  # GEMM_GROUPED_*: m-grouped (nt, bf16 D); GEMM_K_GROUPED: k-grouped (tn, fp32 D)
    num_groups: int = 1
    l2_promotion: tuple = DEFAULT_L2_PROMOTION  # A / B tensor maps' L2 promotion bytes (host-side; dense launches)
    # 2 / 4: each TMA box of a K-major B covers that many consecutive k-blocks of the tile's rows
    # (kBGroup; b_group_fits() says where), 1: one k-block per box
    b_group: int = 1
    # A non-split kernel built without the bf16 TMA-store staging (an fp32 D is stored directly
    # from registers anyway, so the staging's shared memory can hold another stage). Forced configs
    # only (scripts/probe_bf16_configs.py): the planner never picks it (v1.09 measured no gain).
    direct_epilogue: bool = False
    # 2: a cluster of two CTAs shares one operand through TMA multicast (multicast_on_a: two n-blocks
    # of one m-block share A; else two m-blocks share B). Dense kind, no split-K (check_multicast).
    # The model never builds it; `tune bf16 --multicast` times it (multicast_twins) and a table
    # entry may name it (config_from_fields).
    num_multicast: int = 1
    multicast_on_a: bool = False

    @property
    def split_k(self) -> bool:
        return self.num_splits > 1

    @property
    def tma_store(self) -> bool:
        """The kernel carries the bf16 TMA-store staging (every non-split kernel but the k-grouped
        one, which carries the fp32 box rings instead: k_grouped_smem_bytes, and the
        direct_epilogue ones)."""
        return not self.split_k and self.gemm_kind != GEMM_K_GROUPED and not self.direct_epilogue

    @property
    def workspace_floats(self) -> int:
        return self.num_tiles * self.num_splits * self.block_m * self.block_n if self.split_k else 0

    @property
    def num_counters(self) -> int:
        return self.num_tiles if self.split_k else 0

    def kernel_key(self) -> tuple:
        """What selects the compiled kernel (everything else is a runtime argument)."""
        key = (self.block_m, self.block_n, self.num_stages, self.a_mn_major, self.b_mn_major, self.split_k,
               self.tma_store)
        if self.num_multicast != 1:
            return key + (self.b_group, self.num_multicast, self.multicast_on_a)
        return key + ((self.b_group,) if self.b_group != 1 else ())

    def grouped_kernel_key(self) -> tuple:
        """(block_m, block_n, num_stages, gemm_kind, b_mn_major) of an m-grouped config."""
        return (self.block_m, self.block_n, self.num_stages, self.gemm_kind, self.b_mn_major)

    def k_grouped_kernel_key(self) -> tuple:
        """(block_m, block_n, num_stages) of a k-grouped config."""
        return (self.block_m, self.block_n, self.num_stages)


def num_threads(block_m: int) -> int:
    """Consumer warpgroups (block_m / 64) + one producer warpgroup."""
    return (block_m // 64 + 1) * 128


def _staging_bytes(block_m: int, block_n: int, tma_store: bool) -> int:
    return block_m * block_n * 2 if tma_store else 0


def _smem(block_m: int, block_n: int, num_stages: int, staging: int) -> int:
    return 1024 + staging + num_stages * (block_m * 2 * BLOCK_K + block_n * 2 * BLOCK_K) + num_stages * 16 + 16


def _max_stages(block_m: int, block_n: int, staging: int, cap: int) -> int:
    per_stage = (block_m + block_n) * 2 * BLOCK_K + 16
    return min(cap, (SMEM_LIMIT - 1024 - 16 - staging) // per_stage)


def model_stages(block_m: int, block_n: int, tma_store: bool, b_mn_major: bool) -> int:
    """The model's ring: as many stages as fit (up to MODEL_MAX_STAGES), for a non-split tile of an
    N-major B at most N_MAJOR_B_RING_BYTES of B (and at least N_MAJOR_B_MIN_RING stages)."""
    stages = max_stages(block_m, block_n, tma_store)
    if b_mn_major and tma_store:
        stages = min(stages, max(N_MAJOR_B_MIN_RING, N_MAJOR_B_RING_BYTES // (block_n * BLOCK_K * 2)))
    return stages


def smem_bytes(block_m: int, block_n: int, num_stages: int, tma_store: bool) -> int:
    """Dynamic shared memory of a launch; mirrors Sm90Bf16GemmTraits::kDynamicSmemBytes: the
    staging buffer (tma_store), per stage A (block_m x 128 B) + B (block_n x 128 B) + 2 barriers,
    a 16-byte flag and 1024 bytes of slack to align the base to the 128B-swizzle atom."""
    return _smem(block_m, block_n, num_stages, _staging_bytes(block_m, block_n, tma_store))


def max_stages(block_m: int, block_n: int, tma_store: bool, cap: int = MODEL_MAX_STAGES) -> int:
    """The most stages that fit in shared memory, at most `cap` (the model's ring by default)."""
    return _max_stages(block_m, block_n, _staging_bytes(block_m, block_n, tma_store), cap)


def k_grouped_smem_bytes(block_m: int, block_n: int, num_stages: int) -> int:
    """Dynamic shared memory of a k-grouped launch: the fp32 epilogue's box rings in place of the
    bf16 staging (Sm90Bf16GemmTraits with kFp32Staging)."""
    return _smem(block_m, block_n, num_stages, block_m // 64 * K_GROUPED_RING_BYTES_PER_WG)


def k_grouped_max_stages(block_m: int, block_n: int) -> int:
    """The stages of a k-grouped kernel: as many as fit next to the fp32 epilogue rings."""
    return _max_stages(block_m, block_n, block_m // 64 * K_GROUPED_RING_BYTES_PER_WG, MODEL_MAX_STAGES)


def block_n_candidates(b_mn_major: bool) -> tuple[int, ...]:
    return BLOCK_N_MN_MAJOR if b_mn_major else BLOCK_N_K_MAJOR


def all_kernel_keys() -> list[tuple]:
    """Every kernel_key() select_config can return, over all layouts and shapes: the model's rings,
    the full and deep rings a tuned entry may hold (candidate_configs' twins), and the shipped
    entries' other kernels (B groups)."""
    keys = []
    for a_mn, b_mn in LAYOUTS.values():
        for bm in (64, 128):
            for bn in block_n_candidates(b_mn):
                for split in ((False, True) if bm in SPLIT_BLOCK_M and bn in SPLIT_BLOCK_N else (False,)):
                    tma = not split
                    rings = {model_stages(bm, bn, tma, b_mn), max_stages(bm, bn, tma),
                             max_stages(bm, bn, tma, cap=MAX_STAGES)}
                    for st in sorted(rings):
                        keys.append((bm, bn, st, a_mn, b_mn, split, tma))
    return keys + sorted(_shipped_entry_keys() - set(keys))


def _shipped_entry_keys() -> set:
    """The kernels the shipped table's dense entries pick, at their shapes (those outside the
    rings all_kernel_keys lists: B groups 2 / 4)."""
    keys = set()
    for (kind, num_sms, n, out_fp32, has_c), by_m_k in tuned.load_table(tuned.SHIPPED_BF16_TABLE).items():
        layout = kind[len("bf16_"):]
        if layout not in LAYOUTS:  # the m-grouped kinds
            continue
        for (m, k), f in by_m_k.items():
            keys.add(config_from_fields(f, m, n, k, num_sms, *LAYOUTS[layout], out_fp32, has_c).kernel_key())
    return keys


def _mma_efficiency(block_n: int) -> float:
    # Per wgmma m64nNk16: N/2 tensor-core cycles vs (2048 + 32 N) / 128 shared-memory cycles.
    return (block_n / 2) / max(block_n / 2, 16 + block_n / 4)


def _estimate(m: int, n: int, k: int, bm: int, bn: int, splits: int, num_sms: int, out_bytes: int,
              has_c: bool, b_groups: int = 1) -> tuple[float, int, int]:
    num_kb = ceil_div(k, BLOCK_K)
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    units = tiles * splits
    grid = min(num_sms, units)
    waves = ceil_div(units, grid)
    kb_unit = ceil_div(num_kb, splits)
    tma = splits == 1
    # The ring that fits, not model_stages(): v1.09's shorter N-major rings are measured faster, so
    # ranking the tiles by them (3 stages: 0.9) would move tile choices that no run asked to move.
    stage_eff = _STAGE_EFFICIENCY.get(max_stages(bm, bn, tma), 1.0)
    flops = 2.0 * bm * bn * BLOCK_K * kb_unit
    t_mma = flops / (_PEAK_FLOPS_PER_SM_US * _mma_efficiency(bn) * _WG_EFFICIENCY[bm] * stage_eff)
    t_load = kb_unit * 2 * BLOCK_K * (bm + bn) / _L2_BYTES_PER_SM_US
    rows, cols = min(bm, m), min(bn, n)
    if tma and out_bytes == 2 and not has_c:
        t_epi = bm * bn * 2 / _SMEM_EPI_BYTES_PER_SM_US
    else:
        t_epi = rows * cols * (out_bytes + (4 if has_c else 0)) / _STORE_BYTES_PER_SM_US
    t_reduce = 0.0
    if splits > 1:
        t_epi += rows * cols * 4 / _STORE_BYTES_PER_SM_US
        t_reduce = splits * rows * cols * 4 / _L2_BYTES_PER_SM_US
    t_unit = max(t_mma, t_load) + t_epi
    dram = 2 * (m * k + b_groups * n * k) + m * n * (out_bytes + (4 if has_c else 0))
    if splits > 1:
        dram += 2 * splits * m * n * 4
    dram_bw = _DRAM_BYTES_US * min(1.0, grid / (_DRAM_FULL_GRID_FRACTION * num_sms))
    total = max(waves * t_unit + t_reduce, dram / dram_bw) + _FIXED_US
    return total, tiles, units


_cache: dict[tuple, Bf16GemmConfig] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _fastest(options):
    """The option (block_m, block_n, splits, est, tiles, units) ranked first: fastest, then fewest
    work units, then biggest tile, then the earliest listed."""
    return min(options, key=lambda o: (round(o[3], 4), o[5], -o[0] * o[1]))


def b_group_fits(cfg: Bf16GemmConfig, group: int) -> bool:
    """Whether a dense configuration may read B in boxes of `group` consecutive k-blocks (b_group;
    the kernel's kBGroup and the host's rule): 2 or 4 dividing the ring, at least two groups in the
    ring (the consumers release a stage one k-block late), a K-major B, whole k-blocks (K % 64 == 0),
    whole 8-row groups of B (N % 8 == 0), every split's k-range whole groups; B not multicast."""
    if cfg.gemm_kind != GEMM_NORMAL or cfg.b_mn_major or cfg.num_stages < 2 * group:
        return False
    if cfg.num_multicast != 1 and not cfg.multicast_on_a:
        return False  # a shared B is loaded in halves, one k-block a box (check_multicast)
    return whole_b_groups(group, cfg.num_stages, cfg.k, BLOCK_K, cfg.n, cfg.num_splits)


def select_config(m: int, n: int, k: int, num_sms: int, a_mn_major: bool = False, b_mn_major: bool = False,
                  out_fp32: bool = False, has_c: bool = False, allow_split_k: bool = True) -> Bf16GemmConfig:
    """The launch configuration for D[m, n] (+C) = op(A) . op(B) on num_sms SMs (cached).

    m, n, k >= 1 (k % 8 == 0 for the kernel). has_c requires out_fp32.
    """
    key = (m, n, k, num_sms, bool(a_mn_major), bool(b_mn_major), bool(out_fp32), bool(has_c), bool(allow_split_k),
           tuned.state())
    cfg = _cache.get(key)
    if cfg is not None:
        return cfg
    if m < 1 or n < 1 or k < 1 or num_sms < 1:
        raise ValueError(f"select_config: need m, n, k, num_sms >= 1, got {(m, n, k, num_sms)}")
    if has_c and not out_fp32:
        raise ValueError("select_config: C is only supported with an fp32 output")
    cfg = _tuned_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, allow_split_k)
    source = "tuned"
    if cfg is None:
        cfg = _model_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, allow_split_k)
        source = f"model, est={cfg.est_us:.1f}us"
    with _cache_lock:
        _cache[key] = cfg
    if print_configs_enabled():
        layout = {v: k_ for k_, v in LAYOUTS.items()}[(bool(a_mn_major), bool(b_mn_major))]
        print(
            f"finegemm: sm90_bf16_gemm {layout} m={m} n={n} k={k} out={'fp32' if out_fp32 else 'bf16'}"
            f"{' +C' if has_c else ''} sms={num_sms} -> block_m={cfg.block_m} block_n={cfg.block_n} "
            f"stages={cfg.num_stages} splits={cfg.num_splits}{l2_promotion_note(cfg.l2_promotion)}"
            f"{(' multicast=' + ('A' if cfg.multicast_on_a else 'B')) if cfg.num_multicast > 1 else ''} "
            f"tiles={cfg.num_tiles} grid={cfg.grid} smem={cfg.smem_bytes} ({source})",
            file=sys.stderr, flush=True,
        )
    return cfg


def tuned_kind(a_mn_major: bool, b_mn_major: bool) -> str:
    """The tuned-table kind of a dense BF16 layout ("bf16_nt", ...)."""
    return "bf16_" + {v: k_ for k_, v in LAYOUTS.items()}[(bool(a_mn_major), bool(b_mn_major))]


def _tuned_config(m: int, n: int, k: int, num_sms: int, a_mn_major: bool, b_mn_major: bool, out_fp32: bool,
                  has_c: bool, allow_split_k: bool) -> Bf16GemmConfig | None:
    hit = tuned.lookup(tuned_kind(a_mn_major, b_mn_major), num_sms, m, n, k, out_fp32, has_c)
    if hit is None or (not allow_split_k and hit["num_splits"] > 1):
        return None
    try:
        return config_from_fields(hit, m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c)
    except ValueError as e:  # an entry that does not fit this problem: the model decides
        print(f"finegemm: tuned bf16 entry not usable for m={m} n={n} k={k}: {e}", file=sys.stderr)
        return None


def config_from_fields(f: dict, m: int, n: int, k: int, num_sms: int, a_mn_major: bool, b_mn_major: bool,
                       out_fp32: bool, has_c: bool) -> Bf16GemmConfig:
    """make_config() from a dense tuned entry's config fields, with its L2 promotion, B group and
    multicast pair."""
    cfg = make_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, f["block_m"], f["block_n"],
                      f["num_splits"], num_stages=f.get("num_stages"), num_multicast=int(f.get("num_multicast", 1)),
                      multicast_on_a=bool(f.get("multicast_on_a", False)))
    return with_entry_b_group(with_entry_promotion(cfg, f), f, b_group_fits)


def make_config(m: int, n: int, k: int, num_sms: int, a_mn_major: bool, b_mn_major: bool, out_fp32: bool,
                has_c: bool, block_m: int, block_n: int, num_splits: int, est_us: float = 0.0,
                num_stages: int | None = None, direct_epilogue: bool = False, num_multicast: int = 1,
                multicast_on_a: bool = False) -> Bf16GemmConfig:
    """A configuration of the kernel space for a problem (stages: the model's ring unless given,
    model_stages(), up to the kernel's MAX_STAGES; grid: one CTA per unit up to num_sms;
    direct_epilogue: no staging, for an fp32 D without split-K; num_multicast 2: CTA pairs sharing A
    (multicast_on_a) or B, the grid a whole number of pairs). Raises ValueError for a tile, split,
    ring or multicast outside the space or the problem."""
    if block_m not in (64, 128, TALL_BLOCK_M) or block_n not in block_n_candidates(b_mn_major):
        raise ValueError(f"block {block_m}x{block_n} outside the BF16 kernel space for this layout")
    check_tall_tile(block_m, block_n, num_splits)
    check_multicast(block_m, block_n, a_mn_major, b_mn_major, num_splits, num_multicast, multicast_on_a)
    num_kb = ceil_div(k, BLOCK_K)
    if num_splits < 1 or num_splits > min(MAX_SPLITS, num_kb):
        raise ValueError(f"num_splits {num_splits} outside [1, min({MAX_SPLITS}, {num_kb} k-blocks)]")
    if num_splits > 1 and (block_m not in SPLIT_BLOCK_M or block_n not in SPLIT_BLOCK_N):
        raise ValueError(f"split-K needs block_m in {SPLIT_BLOCK_M} and block_n in {SPLIT_BLOCK_N}")
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    units = tiles * num_splits
    if direct_epilogue and (num_splits > 1 or not out_fp32):
        raise ValueError("direct_epilogue: an fp32 D without split-K (split kernels carry no staging; a bf16 D "
                         "takes the TMA store)")
    tma = num_splits == 1 and not direct_epilogue
    stages = model_stages(block_m, block_n, tma, b_mn_major) if num_stages is None else num_stages
    top = max_stages(block_m, block_n, tma, cap=MAX_STAGES)
    if not MIN_STAGES <= stages <= top:
        raise ValueError(f"num_stages {stages} outside [{MIN_STAGES}, {top}] for block {block_m}x{block_n}")
    grid = min(num_sms, units)
    if num_multicast == 2:
        if num_sms < 2:
            raise ValueError(f"a multicast pair needs at least 2 SMs, got num_sms {num_sms}")
        # Pairs of tiles (a phantom partner past an odd block count): a whole number of clusters.
        pairs = (ceil_div(ceil_div(n, block_n), 2) * ceil_div(m, block_m) if multicast_on_a
                 else ceil_div(ceil_div(m, block_m), 2) * ceil_div(n, block_n))
        grid = 2 * min(num_sms // 2, pairs)
    return Bf16GemmConfig(
        m=m, n=n, k=k, a_mn_major=bool(a_mn_major), b_mn_major=bool(b_mn_major), block_m=block_m, block_n=block_n,
        num_stages=stages, num_splits=num_splits, grid=grid,
        smem_bytes=smem_bytes(block_m, block_n, stages, tma), num_threads=num_threads(block_m), num_tiles=tiles,
        num_units=units, out_fp32=bool(out_fp32), has_c=bool(has_c), est_us=est_us,
        direct_epilogue=bool(direct_epilogue), num_multicast=int(num_multicast),
        multicast_on_a=bool(multicast_on_a) and num_multicast == 2,
    )


def _model_block_ms(m: int, n: int, model_choice: bool, a_mn_major: bool = False) -> list[int]:
    if m <= 64:
        return [64]
    # One m-block of 128 rows beats two of 64 for 112 <= M <= 128: the estimate ranked bm64 first on
    # 8 of 10 off-table (N, K) at M = 128, 1.3-1.5x slower than the tuned bm128 tile on 6 of them; on
    # other off-table shapes bm128 won 1.04-1.28x at M = 112-128 and lost up to 1.4x at M = 65-100,
    # where most of its rows were padding (benchmarks/NOTES.md v0.67). Since K-major A loads only
    # the rows it has (impls/fitted_box_rows.h), bm128 won there too: 24 of 24 changed choices at
    # M = 65-111, 1.04-1.47x (v0.69); MN-major A keeps the measured 112. The tuner keeps both.
    # Narrow N (the router's 256 columns) needs split-K, which only the bm64 tiles have.
    min_m = MODEL_BM128_MIN_M_MN_MAJOR_A if a_mn_major else MODEL_BM128_MIN_M
    if model_choice and min_m <= m <= MODEL_BM128_MAX_M and n >= MODEL_BM128_MIN_N:
        return [128]
    return [64, 128]


def _model_options(m: int, n: int, k: int, num_sms: int, b_mn_major: bool, out_fp32: bool, has_c: bool,
                   allow_split_k: bool, model_choice: bool = True, a_mn_major: bool = False):
    """(bm, bn, splits, est, tiles, units) of every configuration the model considers (model_choice:
    for its own pick; False: every block_m, for the tuner's ranking)."""
    out_bytes = 4 if out_fp32 else 2
    num_kb = ceil_div(k, BLOCK_K)
    for bm in _model_block_ms(m, n, model_choice, a_mn_major):
        for bn in block_n_candidates(b_mn_major):
            tiles = ceil_div(m, bm) * ceil_div(n, bn)
            split_options = [1]
            if (allow_split_k and (bm, bn) in MODEL_SPLIT_TILES and 2 * tiles <= num_sms
                    and num_kb >= 2 * MIN_KB_PER_SPLIT):
                top = min(MAX_SPLITS, num_kb // MIN_KB_PER_SPLIT, num_sms // tiles)
                split_options += list(range(2, top + 1))
            for splits in split_options:
                yield (bm, bn, splits, *_estimate(m, n, k, bm, bn, splits, num_sms, out_bytes, has_c))


def _model_config(m: int, n: int, k: int, num_sms: int, a_mn_major: bool, b_mn_major: bool, out_fp32: bool,
                  has_c: bool, allow_split_k: bool) -> Bf16GemmConfig:
    bm, bn, splits, est, _, _ = _fastest(_model_options(m, n, k, num_sms, b_mn_major, out_fp32, has_c, allow_split_k,
                                                        a_mn_major=a_mn_major))
    return make_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, bm, bn, splits, est_us=est)


def candidate_configs(m: int, n: int, k: int, num_sms: int, a_mn_major: bool = False, b_mn_major: bool = False,
                      out_fp32: bool = False, has_c: bool = False, top: int = 12,
                      deep_ring: int = 16) -> list[Bf16GemmConfig]:
    """What `python -m finegemm tune bf16` times for a problem: the model's choice first, its next
    best estimates, and the skinny-shape family the model misjudges (block_m 128 for M > 64, block_n
    32 / 64 / 128 with the fewest splits that fill the SMs, and half that), plus twins of the first
    `deep_ring` whose tile fits more stages than the model's ring: the deepest that fits (up to
    MAX_STAGES) and, where the model holds back (an N-major B: model_stages), every stage that fits
    up to MODEL_MAX_STAGES; one kernel per ring and tile, which all_kernel_keys() lists."""
    model = _model_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, True)
    ranked = sorted(_model_options(m, n, k, num_sms, b_mn_major, out_fp32, has_c, True, model_choice=False),
                    key=lambda o: o[3])
    picks = [o[:3] for o in ranked[:top]]
    num_kb = ceil_div(k, BLOCK_K)
    for bm in _model_block_ms(m, n, model_choice=False):
        for bn in SPLIT_BLOCK_N:
            if bn not in block_n_candidates(b_mn_major):
                continue
            tiles = ceil_div(m, bm) * ceil_div(n, bn)
            fill = max(1, min(MAX_SPLITS, num_kb // MIN_KB_PER_SPLIT, num_sms // tiles))
            for splits in sorted({1, fill, max(1, fill // 2)}):
                picks.append((bm, bn, splits))
    out, seen = [model], {(model.block_m, model.block_n, model.num_splits)}
    for bm, bn, splits in picks:
        if (bm, bn, splits) in seen:
            continue
        seen.add((bm, bn, splits))
        try:
            out.append(make_config(m, n, k, num_sms, a_mn_major, b_mn_major, out_fp32, has_c, bm, bn, splits))
        except ValueError:  # a skinny-family tile outside this layout's space or K
            continue
    twins = []
    for c in out[:deep_ring]:
        tma = c.num_splits == 1
        full, deep = max_stages(c.block_m, c.block_n, tma), max_stages(c.block_m, c.block_n, tma, cap=MAX_STAGES)
        for ring in sorted({full, deep}):
            if ring > c.num_stages:
                twins.append(dataclasses.replace(c, num_stages=ring,
                                                 smem_bytes=smem_bytes(c.block_m, c.block_n, ring, tma)))
    return out + twins


def multicast_twins(cands: list, num_sms: int, first: int = 6) -> list:
    """The candidates, then twins of the first `first` non-split ones as 2-CTA pairs sharing A (two
    n-blocks or more) and sharing B (two m-blocks or more), where the layout lets each CTA load half
    the shared operand (check_multicast): what `finegemm tune bf16 --multicast` times, so a table
    entry names a pair only where a run chose it (NOTES v1.11: B shared at 256-512 x 128256 x 4096,
    A at 4096 x 2112 x 7168, -2 to -3% on an H100; slower elsewhere)."""
    out = list(cands)
    seen = {dataclasses.replace(c, est_us=0.0) for c in cands}
    for c in [c for c in cands if c.num_splits == 1 and c.num_multicast == 1 and c.gemm_kind == GEMM_NORMAL][:first]:
        for on_a, blocks in ((True, ceil_div(c.n, c.block_n)), (False, ceil_div(c.m, c.block_m))):
            if blocks < 2:
                continue
            try:
                twin = make_config(c.m, c.n, c.k, num_sms, c.a_mn_major, c.b_mn_major, c.out_fp32,
                                   c.has_c, c.block_m, c.block_n, 1, num_stages=c.num_stages,
                                   direct_epilogue=c.direct_epilogue, num_multicast=2, multicast_on_a=on_a)
            except ValueError:  # the layout's shared operand cannot be halved
                continue
            twin = dataclasses.replace(twin, l2_promotion=c.l2_promotion)
            if dataclasses.replace(twin, est_us=0.0) not in seen:
                seen.add(dataclasses.replace(twin, est_us=0.0))
                out.append(twin)
    return out


def grouped_kernel_keys() -> list[tuple]:
    """Every grouped_kernel_key() select_grouped_config can return: (block_m, block_n, stages, kind,
    b_mn_major); the N-major B (nn layout) in the contiguous kind only."""
    block_ms = {GEMM_GROUPED_CONTIGUOUS: (64, 128), GEMM_GROUPED_MASKED: (64, 128, THREE_WG_BLOCK_M)}
    return [(bm, bn, max_stages(bm, bn, True), kind, b_mn)
            for kind in (GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED) for bm in block_ms[kind]
            for bn in grouped_block_ns(kind, bm)
            for b_mn in ((False, True) if kind == GEMM_GROUPED_CONTIGUOUS else (False,))]


def grouped_block_ns(kind: int, block_m: int) -> tuple:
    """The block_n of the m-grouped space for a kind and block_m."""
    return GROUPED_BLOCK_N_THREE_WG if block_m == THREE_WG_BLOCK_M else GROUPED_BLOCK_N[kind]


def grouped_tuned_kind(kind: int, m: int, num_groups: int, expected_m: int) -> tuple[str, int]:
    """(tuned-table kind, the M its entries are keyed by) of an m-grouped problem (_common.grouped_tuned_key)."""
    return grouped_tuned_key(kind == GEMM_GROUPED_CONTIGUOUS, CONTIGUOUS_KIND_PREFIX, MASKED_KIND_PREFIX, m,
                             num_groups, expected_m)


def _check_grouped_problem(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int) -> None:
    if kind not in (GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED):
        raise ValueError(f"select_grouped_config: kind must be a grouped kind, got {kind}")
    if m < 1 or n < 1 or k < 1 or num_groups < 1 or num_sms < 1:
        raise ValueError(f"select_grouped_config: need m, n, k, num_groups, num_sms >= 1, got "
                         f"{(m, n, k, num_groups, num_sms)}")


def make_grouped_config(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int, expected_m: int,
                        alignment: int, block_m: int, block_n: int, b_mn_major: bool = False) -> Bf16GemmConfig:
    """An m-grouped configuration with the given tile (ValueError for one the kernel or the
    layout does not allow: block_m must suit the alignment / expected m, block_n one of
    GROUPED_BLOCK_N[kind]); stages as many as fit, grid as select_grouped_config plans it.
    b_mn_major: B stored [G, K, N] (the nn layout; the contiguous kind only)."""
    _check_grouped_problem(kind, m, n, k, num_groups, num_sms)
    if b_mn_major and kind != GEMM_GROUPED_CONTIGUOUS:
        raise ValueError("an N-major B ([G, K, N]) is built for the contiguous kind only")
    contiguous = kind == GEMM_GROUPED_CONTIGUOUS
    bms, em = grouped_block_m_options(contiguous, m, expected_m, alignment, "BF16")
    if block_m not in bms or block_n not in grouped_block_ns(kind, block_m):
        raise ValueError(f"grouped block {block_m}x{block_n}: block_m in {bms}, block_n in {GROUPED_BLOCK_N[kind]} "
                         f"(block_m {THREE_WG_BLOCK_M}: {GROUPED_BLOCK_N_THREE_WG})")
    est, tiles, units = _estimate(grouped_model_rows(contiguous, m, num_groups, em, block_m), n, k, block_m, block_n,
                                  1, num_sms, 2, False, b_groups=num_groups)
    stages = max_stages(block_m, block_n, True)
    return Bf16GemmConfig(
        m=m, n=n, k=k, a_mn_major=False, b_mn_major=b_mn_major, block_m=block_m, block_n=block_n, num_stages=stages,
        num_splits=1, grid=num_sms if kind == GEMM_GROUPED_MASKED else min(num_sms, units),
        smem_bytes=smem_bytes(block_m, block_n, stages, True), num_threads=num_threads(block_m), num_tiles=tiles,
        num_units=units, out_fp32=False, has_c=False, est_us=est, gemm_kind=kind, num_groups=num_groups,
    )


def _grouped_model_tile(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int, expected_m: int,
                        alignment: int) -> tuple[int, int]:
    contiguous = kind == GEMM_GROUPED_CONTIGUOUS
    bms, em = grouped_block_m_options(contiguous, m, expected_m, alignment, "BF16")
    bm, bn, *_ = _fastest(
        (bm, bn, 1, *_estimate(grouped_model_rows(contiguous, m, num_groups, em, bm), n, k, bm, bn, 1, num_sms, 2,
                               False, b_groups=num_groups))
        for bm in bms for bn in grouped_block_ns(kind, bm))
    # One n-block either way: where the estimates tie the model takes the widest tile, whose columns
    # past N only read the next group's B rows (N = 128: bn256 -> bn128).
    bn = min([x for x in grouped_block_ns(kind, bm) if x >= n] + [bn])
    return bm, bn


def grouped_candidate_configs(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int, expected_m: int = 0,
                              alignment: int = 128, b_mn_major: bool = False) -> list[Bf16GemmConfig]:
    """What `python -m finegemm tune bf16_masked|bf16_contiguous` times: every tile of the space
    (at most 2 x 4), the model's choice first."""
    _check_grouped_problem(kind, m, n, k, num_groups, num_sms)
    first = _grouped_model_tile(kind, m, n, k, num_groups, num_sms, expected_m, alignment)
    bms, _ = grouped_block_m_options(kind == GEMM_GROUPED_CONTIGUOUS, m, expected_m, alignment, "BF16")
    tiles = [first] + [(bm, bn) for bm in bms for bn in grouped_block_ns(kind, bm) if (bm, bn) != first]
    return [make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, bm, bn, b_mn_major)
            for bm, bn in tiles]


def select_grouped_config(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int, expected_m: int = 0,
                          alignment: int = 128, b_mn_major: bool = False) -> Bf16GemmConfig:
    """Launch configuration of the m-grouped BF16 kernels (nt, bf16 D, no C, no split-K; cached):
    a tuned entry (kinds MASKED_KIND_PREFIX / CONTIGUOUS_KIND_PREFIX + G) where the table has one,
    else the model.

    kind GEMM_GROUPED_CONTIGUOUS: m = total rows (all groups stacked); block_m must divide the mk
    alignment (segments start at multiples of it, so a tile never holds two groups): 64 and 128
    for alignment 128, 64 for alignment 64; smaller alignments raise NotImplementedError. The model
    is the dense one over the stacked rows, with G weight matrices read from DRAM.
    kind GEMM_GROUPED_MASKED: m = Mmax; the model's tiles are G x ceil(expected_m / block_m) m-blocks
    (expected_m: the planning hint, 0 = Mmax), block_m 64 when expected_m <= 64. The grid is every SM
    (the real tile count depends on masked_m, which stays on the GPU); idle CTAs exit at once.
    b_mn_major (contiguous kind, B stored [G, K, N]): the same tile as the K-major B would get
    (the tuned entries were measured on K-major B; the tile space is the same).
    """
    key = ("grouped", kind, m, n, k, num_groups, num_sms, expected_m, alignment, b_mn_major, tuned.state())
    cfg = _cache.get(key)
    if cfg is not None:
        return cfg
    _check_grouped_problem(kind, m, n, k, num_groups, num_sms)
    source = "model"
    tuned_kind, tuned_m = grouped_tuned_kind(kind, m, num_groups, expected_m)
    hit = tuned.lookup(tuned_kind, num_sms, tuned_m, n, k, False, False)
    cfg = None
    if hit is not None:
        try:
            cfg = with_entry_promotion(make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment,
                                                           hit["block_m"], hit["block_n"], b_mn_major), hit)
            source = "tuned"
        except ValueError as e:  # an entry that does not fit this problem: the model decides
            print(f"finegemm: tuned {tuned_kind} entry not usable for m={m} n={n} k={k}: {e}", file=sys.stderr)
    if cfg is None:
        bm, bn = _grouped_model_tile(kind, m, n, k, num_groups, num_sms, expected_m, alignment)
        cfg = make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, bm, bn, b_mn_major)
    with _cache_lock:
        _cache[key] = cfg
    if print_configs_enabled():
        print(
            f"finegemm: sm90_bf16_gemm {'contiguous' if kind == GEMM_GROUPED_CONTIGUOUS else 'masked'}"
            f"{' nn' if b_mn_major else ''} "
            f"G={num_groups} m={m} n={n} k={k} expected_m={expected_m} sms={num_sms} -> block_m={cfg.block_m} "
            f"block_n={cfg.block_n} stages={cfg.num_stages}{l2_promotion_note(cfg.l2_promotion)} "
            f"tiles~{cfg.num_tiles} grid={cfg.grid} smem={cfg.smem_bytes} est={cfg.est_us:.1f}us ({source})",
            file=sys.stderr, flush=True,
        )
    return cfg


def k_grouped_kernel_keys() -> list[tuple]:
    """Every k_grouped_kernel_key() select_k_grouped_config can return: (block_m, block_n, stages)."""
    return [(bm, bn, k_grouped_max_stages(bm, bn)) for bm in (64, 128) for bn in K_GROUPED_BLOCK_N]


def k_grouped_k_bucket(k_avg: int) -> int:
    """The planning K of a k-grouped call: the mean group k rounded up to a power of two (>= 128),
    so that calls whose token counts move a little (every MoE step) share one plan."""
    k = 128
    while k < k_avg:
        k *= 2
    return k


def select_k_grouped_config(m: int, n: int, k_avg: int, num_groups: int, num_sms: int,
                            has_c: bool = False) -> Bf16GemmConfig:
    """Launch configuration of the k-grouped BF16 kernel (tn, fp32 D [G, M, N], optional C; cached).

    k_avg: the planning K of one group (k_grouped_k_bucket of the mean k); num_groups: groups whose
    tiles the launch walks. The model is the dense tn one on G x ceil(m / block_m) m-blocks of
    k_avg (whole tiles per group, so the wave count is right when m is not a multiple of block_m).
    grid = num_sms: the host launcher clamps it to each launch's tile count.
    """
    key = ("k_grouped", m, n, k_avg, num_groups, num_sms, bool(has_c))
    cfg = _cache.get(key)
    if cfg is not None:
        return cfg
    if m < 1 or n < 1 or k_avg < 1 or num_groups < 1 or num_sms < 1:
        raise ValueError(f"select_k_grouped_config: need m, n, k_avg, num_groups, num_sms >= 1, got "
                         f"{(m, n, k_avg, num_groups, num_sms)}")
    bm, bn, _, est, tiles, units = _fastest(
        (bm, bn, 1, *_estimate(num_groups * ceil_div(m, bm) * bm, n, k_avg, bm, bn, 1, num_sms, 4, has_c,
                               b_groups=num_groups))
        for bm in ([64] if m <= 64 else [64, 128]) for bn in K_GROUPED_BLOCK_N)
    stages = k_grouped_max_stages(bm, bn)
    cfg = Bf16GemmConfig(
        m=m, n=n, k=k_avg, a_mn_major=True, b_mn_major=True, block_m=bm, block_n=bn, num_stages=stages,
        num_splits=1, grid=num_sms, smem_bytes=k_grouped_smem_bytes(bm, bn, stages), num_threads=num_threads(bm),
        num_tiles=tiles, num_units=units, out_fp32=True, has_c=bool(has_c), est_us=est, gemm_kind=GEMM_K_GROUPED,
        num_groups=num_groups,
    )
    with _cache_lock:
        _cache[key] = cfg
    if print_configs_enabled():
        print(
            f"finegemm: sm90_bf16_gemm k-grouped G={num_groups} m={m} n={n} k_avg={k_avg}{' +C' if has_c else ''} "
            f"sms={num_sms} -> block_m={bm} block_n={bn} stages={stages} tiles={tiles} smem={cfg.smem_bytes} "
            f"est={est:.1f}us",
            file=sys.stderr, flush=True,
        )
    return cfg
