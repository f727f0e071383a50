"""Launch configuration of the SM90 FP8 "1D2D" GEMM (impls/sm90_fp8_gemm_1d2d.cuh).

select_config() lists every candidate (block_m, block_n, num_splits), estimates its time with
a small roofline model of the persistent kernel and returns the cheapest. The model:

* A work unit is one (tile, split). The grid is min(num_sms, units); the busiest CTA runs
  ceil(units / grid) units ("waves"), so a partly filled last wave costs a full unit time.
* A unit's main loop is bound by the tensor cores or by the L2 -> SM operand traffic:
  - MMA: 2 * block_m * block_n * 128 flops per k-block at the per-SM FP8 peak, derated by
    (a) shared-memory bandwidth for narrow N (wgmma m64nNk32 reads the 2 KB A slice and
        32*N bytes of B per N/2 tensor-core cycles, so N < 64 is smem-bound), and
    (b) the promotion bubble: with one consumer warpgroup (block_m 64) the tensor core idles
        while the warpgroup promotes; two warpgroups (block_m 128) mostly hide it.
  - loads: (block_m + block_n) * 128 bytes per k-block at the per-SM share of L2 bandwidth.
* Epilogue: with the TMA-store epilogue (bf16 D, no C, no split-K: `tma_store`) the consumers
  only write the tile into shared memory (stmatrix) and the TMA store overlaps the next tile's
  main loop, so a unit pays the smem write; its staging buffer (block_m x block_n bf16) costs
  pipeline stages, and fewer than 4 stages derate the main loop. Both epilogues are candidates
  where the TMA store applies (long K may prefer the direct one's extra stages). Otherwise (direct stores, not
  overlapped) the tile's valid outputs are written at a per-SM store rate; split-K adds the
  partial write per unit and the last CTA's read of all partials.
* Whole problem: at least the DRAM time of the unique bytes (A, B, D, C, split workspace), at a
  bandwidth scaled down when the grid is below 85% of the SMs.
Wasted work on edge tiles (rows past M, columns past N) is charged automatically because the
kernel computes whole tiles. Ties go to fewer units, then to the larger tile.

Split-K is considered only when the tile count is below half the SMs and every split keeps
>= MIN_KB_PER_SPLIT k-blocks.

TMA multicast (2-CTA clusters; never with split-K in the model, in tuned entries of recipe
(1, 128, 128) it may be: both CTAs take the same split, partials through the workspace): the two
CTAs of a cluster share A (two n-blocks of one m-block) or B (two m-blocks of one n-block); each
loads half of the shared box for both, so a unit's L2 traffic per k-block drops from
(bm + bn) * 128 to (bm/2 + bn) * 128 or (bm + bn/2) * 128. Pairs that stick out of the tile grid
compute a phantom tile (charged).
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
from finegemm.utils import align, ceil_div

__all__ = [
    "Fp8GemmConfig",
    "select_config",
    "select_grouped_config",
    "make_config",
    "candidate_configs",
    "make_grouped_config",
    "grouped_candidate_configs",
    "config_from_fields",
    "grouped_config_from_fields",
    "tuned_entry_config",
    "CONTIGUOUS_KIND_PREFIX",
    "MASKED_KIND_PREFIX",
    "GEMM_NORMAL",
    "GEMM_GROUPED_CONTIGUOUS",
    "GEMM_GROUPED_MASKED",
    "GEMM_K_GROUPED",
    "select_k_grouped_config",
    "make_k_grouped_config",
    "k_grouped_candidate_configs",
    "K_GROUPED_KIND",
    "k_grouped_plan_k",
    "smem_bytes",
    "max_stages",
    "MAX_STAGES",
    "MODEL_MAX_STAGES",
    "num_threads",
    "block_n_candidates",
    "MAX_BLOCK_N",
    "MAX_BLOCK_N_1D1D",
    "SMEM_LIMIT",
    "clear_cache",
]

BLOCK_K = 128
# GEMM kinds of the kernel family (mirror scheduler::GemmKind in include/finegemm/scheduler/persistent.cuh).
GEMM_NORMAL = 0
GEMM_GROUPED_CONTIGUOUS = 1
GEMM_GROUPED_MASKED = 2
GEMM_K_GROUPED = 3  # recipe (1, 1, 128) only: groups differing in K, one launch (select_k_grouped_config)
K_GROUPED_KIND = "fp8_k_grouped"  # tuned-table kind of k-grouped entries (m per group, k = k_grouped_plan_k)
MASKED_KIND_PREFIX = "fp8_masked_g"  # tuned-table kind of masked entries: prefix + number of groups
CONTIGUOUS_KIND_PREFIX = "fp8_contiguous_g"  # contiguous entries: prefix + number of groups (m: all rows)
SMEM_LIMIT = 232448  # 227 KB: the SM90 per-block dynamic shared memory limit
SMEM_PER_SM = 233472  # 228 KB per SM, of which the driver reserves 1 KB per resident CTA
# Two co-resident CTAs per SM (`ctas_per_sm` 2): two independent wgmma -> promote chains and twice
# the loads in flight per SM, for skinny shapes whose single chain is latency-bound. block_m 64
# only (one consumer warpgroup, no setmaxnreg: registers as compiled, at most 128 per thread
# for two 256-thread CTAs; the launch checks the real occupancy and shrinks the grid otherwise).
SMEM_LIMIT_2CTA = SMEM_PER_SM // 2 - 1024
# k_batch (k-blocks per wgmma wait): k_batch accumulator sets per thread, so only narrow tiles
# (spill-free up to these block_n in every variant: tests/test_fp8_kernel_compile.py).
MAX_BLOCK_N_KBATCH = {2: 96, 4: 64}
# Recipe (1, 1, 128) k-block batches (the promotion keeps no B-scale registers; bm128 spills above).
MAX_BLOCK_N_KBATCH_1D1D = {2: 128, 4: 80}
# Widest block_n of the kernel's lean main loop (impls/sm90_fp8_gemm_1d2d.cuh kLeanLoop); wider
# tiles run the old loop, measured 4-10% slower at M = 4096 (benchmarks/NOTES.md v0.13).
MAX_BLOCK_N_LEAN_LOOP = 208
_WIDE_LOOP_EFFICIENCY = 0.93
MAX_BLOCK_N_HALF_PROMOTE = 208  # two half accumulator sets: bm128 bn224 spilled 16 bytes (nvcc 13.0)
# Above that, half-promote at block_m 128 (recipe (1, 128, 128)) runs the halves one after the other
# through one accumulator set (the kernel's kSerialHalves), which fits up to block_n 256: the
# 128 x 256 tile has the fewest shared-memory bytes per FLOP (benchmarks/NOTES.md v0.47).
MAX_BLOCK_N_SERIAL_HALVES = 256
# No split-K with them (the split reduction spills). What the tuner proposes of them (shapes with
# M >= SERIAL_HALVES_MIN_M; the model does not rank them).
SERIAL_HALVES_BLOCK_N = (224, 256)
SERIAL_HALVES_MIN_M = 256


# The model's use of them is a measured rule, not an estimate (benchmarks/NOTES.md v0.49: 36 LLM
# shapes without table entries, M 1024 / 4096 / 8192): bm128 bn256 with the TMA store wherever the
# 128 x 256 tiles are many (M >= 4096), N is whole 256-column tiles and K amortizes a tile's fixed
# cost (K >= 2048); multicast on B from N >= 8192. There: -0.5% to +6.6% against the model's own
# choice (mean +2.4%); at M = 1024 the same tile lost up to 31% wherever its waves were ragged.
SERIAL_HALVES_MODEL_MIN_M = 4096
SERIAL_HALVES_MODEL_MIN_K = 2048
SERIAL_HALVES_MODEL_MCB_MIN_N = 8192


def serial_halves(block_m: int, block_n: int, half_promote: bool, one_d_one_d: bool = False) -> bool:
    """Whether the kernel half-promotes this tile serially (impls/sm90_fp8_gemm_1d2d.cuh kSerialHalves)."""
    return bool(half_promote) and block_m == 128 and block_n > MAX_BLOCK_N_HALF_PROMOTE and not one_d_one_d
# Stages: the model builds rings of up to MODEL_MAX_STAGES; tuned entries and the tuner's deep-ring
# twins may use up to MAX_STAGES (the kernel's limit, Sm90Fp8Gemm1d2dTraits). A deeper ring keeps
# more of a narrow tile's B in flight: 64x4096x7168 bm64 bn32 14.4 us at 16 stages vs 15.5 at 8,
# but bm64 bn64 at 64x7168x16384 measured 41.2 at 13 vs 39.5 at 8 (benchmarks/NOTES.md v0.19), so
# only measurement picks it.
MAX_STAGES = 16
MODEL_MAX_STAGES = 8
# The model offers no 2-CTA multicast where M <= this: its load-time term counts the L2 bytes
# multicast saves but not the pair's handshake. On 10 off-table (N, K) the same tile ran slower with
# multicast: geomean +16% at M = 1, +10% at 16, +5% at 64 and 128, +3.6% at 256, in 2,800 timed
# pairs (benchmarks/NOTES.md v0.66). At M = 192-384, 35 of 48 tuned winners had none (v0.70), and
# out of sample at M = 160-512 the model's choice without multicast was faster on 37 of 49 shapes
# (geomean 1.070x, worst 0.942x; v0.71). The tuner still times it, and tuned entries may name it.
MODEL_NO_MULTICAST_MAX_M = 512
MIN_STAGES = 2
MAX_SPLITS = 16
MIN_KB_PER_SPLIT = 4
# Largest block_n that compiles without spills in every variant (tests/test_fp8_kernel_compile.py):
# the consumer keeps block_n/2 wgmma accumulators + block_n/2 promoted sums per thread, under
# 232 registers (block_m 128: setmaxnreg 232) or 255 (block_m 64: one consumer warpgroup).
MAX_BLOCK_N = {64: 208, 128: 224, THREE_WG_BLOCK_M: 144}
# The masked grouped kind with the TMA-store epilogue keeps a few more registers live (the group
# walk, the per-warpgroup choice between TMA and predicated stores): bm128 spills above 192
# (tests/test_fp8_kernel_compile.py::test_every_grouped_block_n_compiles_spill_free).
MAX_BLOCK_N_MASKED_TMA = {64: 208, 128: 192, THREE_WG_BLOCK_M: 144}
# Recipe (1, 1, 128): the promotion reads per-column scales from shared memory; bm128 spills at
# block_n 224 (tests/test_fp8_kernel_compile.py::test_every_1d1d_block_n_compiles_spill_free).
MAX_BLOCK_N_1D1D = {64: 208, 128: 208, THREE_WG_BLOCK_M: 144}
# block_m 192 (three consumer warpgroups, 160 registers each after setmaxnreg): a third wgmma ->
# promote chain per SM for loops bound by that chain (recipe (1, 1, 128), benchmarks/NOTES.md
# v0.22). One CTA per SM, no split-K, no multicast, no k-block batches. Dense kinds: only the
# tuner proposes it (the model has not been calibrated on it), so it runs where a table says so.
# The masked kind: offered to the model and the tuner where it pads fewer rows than 128-row tiles
# (a group of 129-192 rows is one m-block instead of two; benchmarks/NOTES.md v0.45).
FP8_BLOCK_MS = (64, 128, THREE_WG_BLOCK_M)
THREE_WG_BLOCK_N = (96, 112, 128, 144)

# Machine model (H100/H200 SXM; only ratios matter for the choice).
_PEAK_FLOPS_PER_SM_US = 1979e6 / 132  # dense FP8 flops per microsecond per SM
_L2_BYTES_PER_SM_US = 8.0e6 / 132  # L2 -> SM operand bandwidth share (~8 TB/s measured cap)
_STORE_BYTES_PER_SM_US = 5.0e6 / 132  # epilogue stores (registers -> global) per SM
_SMEM_EPI_BYTES_PER_SM_US = 150e3  # TMA-store epilogue: stmatrix into smem + 2 WG barriers
_STAGE_EFFICIENCY = {2: 0.75, 3: 0.9}  # short rings expose L2/TMA latency (>= 4 stages: 1.0)
_DRAM_BYTES_US = 4.0e6  # HBM bandwidth (bytes per microsecond)
_WG_EFFICIENCY = {64: 0.70, 128: 0.92, THREE_WG_BLOCK_M: 0.92}  # promotion bubble: 1 vs 2 (3) consumer warpgroups
_FIXED_US = 2.0  # launch + pipeline fill
# A grid much smaller than the machine cannot pull the full HBM bandwidth: the DRAM floor is
# scaled by grid / (fraction * SMs) below that fraction (measured: 64x7168x2048 at 90 CTAs
# 10.0 us vs 8.9 us at 112 CTAs, v0.2).
_DRAM_FULL_GRID_FRACTION = 0.85


@dataclass(frozen=True)
class Fp8GemmConfig:
    m: int
    n: int
    k: int
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
    num_multicast: int = 1  # 2: 2-CTA clusters sharing one operand through TMA multicast
    multicast_on_a: bool = False  # with num_multicast 2: the pair shares A (else B)
    half_promote: bool = False  # wgmma in two column halves; one half promoted while the other runs
    tma_store: bool = False  # epilogue through swizzled smem + TMA store (bf16 D, no C, no split-K)
    gemm_kind: int = GEMM_NORMAL  # GEMM_GROUPED_*: m-grouped MoE kernels (same kernel, template parameter)
    num_groups: int = 1
    one_d_one_d: bool = False  # recipe (1, 1, 128): per-row sfb TMA-loaded per stage (fp32 D, dense kind)
    ctas_per_sm: int = 1  # 2: a grid of up to 2 x SMs with smem for two co-resident CTAs (block_m 64)
    k_batch: int = 1  # k-blocks whose wgmmas share one wait (narrow tiles: shorter serial chain)
    l2_promotion: tuple = DEFAULT_L2_PROMOTION  # A / B tensor maps' L2 promotion bytes (host-side; 1D2D launches)
    c_stage: bool = False  # recipe (1, 1, 128) direct epilogue with C: C TMA-loaded into shared memory per tile
    # (left, mid, right) of fp8_gemm_nt_skip_head_mid's fused epilogue (a bf16 TMA-store tile whose
    # boxes land around a gap of `mid` columns in every head of D); (0, 0, 0): a plain D
    head_splits: tuple = (0, 0, 0)
    # m-grouped contiguous kind: the kernel reads the caller's plain grouped_layout and checks its
    # rules itself (one launch per call; ops/contiguous_layout.py); False: the standalone check's ids
    layout_check: bool = False
    # masked kind: A [M, G*K] and D [M, G*N] with group g at columns g*K / g*N (fp8_einsum
    # "bhr,hdr->bhd" with the heads as groups, no copies); direct stores
    heads_packed: bool = False
    # with layout_check: the caller's grouped_layout is a psum layout (int32 [G] cumulative row
    # ends), read by the kernel's tile walkers and checked by CTA 0's spare warp
    psum_layout: bool = False
    # with heads_packed: sfa [M, G, Kb] read in place by a spare producer warp (no TMA map, no copy
    # of sfa per call), every group M rows (masked_m not read)
    sfa_gather: bool = False
    # 2 / 4: each TMA box of B covers that many consecutive k-blocks of the tile's rows (kBGroup;
    # b_group_fits() says where), 1: one k-block per box
    b_group: int = 1

    @property
    def split_k(self) -> bool:
        return self.num_splits > 1

    @property
    def workspace_floats(self) -> int:
        """fp32 elements of split-K workspace the launch needs (0 without split-K)."""
        return self.num_tiles * self.num_splits * self.block_m * self.block_n if self.split_k else 0

    @property
    def num_counters(self) -> int:
        """int32 per-tile counters the launch needs (0 without split-K)."""
        return self.num_tiles if self.split_k else 0

    def kernel_key(self) -> tuple:
        """What selects the compiled kernel (everything else is a runtime argument)."""
        return (self.block_m, self.block_n, self.num_stages, self.out_fp32, self.has_c, self.split_k,
                self.num_multicast, self.multicast_on_a, self.half_promote, self.tma_store, self.gemm_kind,
                self.one_d_one_d, self.k_batch, self.c_stage,
                # recipe (1, 1, 128) builds two-CTA tiles with their own register split (kCtasPerSm)
                self.one_d_one_d and self.ctas_per_sm == 2, self.head_splits, self.layout_check, self.heads_packed,
                self.psum_layout, self.sfa_gather, self.b_group)


def b_group_fits(cfg: Fp8GemmConfig, group: int) -> bool:
    """Whether a recipe (1, 128, 128) configuration may read B in boxes of `group` consecutive
    k-blocks (b_group; the kernel's kBGroup and the host's rule): 2 or 4 dividing the ring, the
    dense kind without head splits, B not multicast, whole k-blocks (K % 128 == 0), whole 8-row
    groups of B (N % 8 == 0), and every split's k-range whole groups."""
    if cfg.gemm_kind != GEMM_NORMAL or cfg.one_d_one_d or cfg.heads_packed:
        return False
    if (cfg.num_multicast == 2 and not cfg.multicast_on_a) or tuple(cfg.head_splits) != (0, 0, 0):
        return False
    return whole_b_groups(group, cfg.num_stages, cfg.k, 128, cfg.n, cfg.num_splits)


def num_threads(block_m: int) -> int:
    """Consumer warpgroups (block_m / 64) + one producer warpgroup."""
    return (block_m // 64 + 1) * 128


def fp32_epilogue_ring_bytes(block_n: int) -> int:
    """One consumer warpgroup's staging of the recipe (1, 1, 128) TMA epilogue: a ring of 64-row
    fp32 column boxes (32 columns, or 16 when block_n % 32), at most 16 KB; mirrors
    epilogue::TmaStoreFp32<BLOCK_N>::kBytes."""
    box_cols = 32 if block_n % 32 == 0 else 16
    box_bytes = 64 * box_cols * 4
    return min(block_n // box_cols, 16384 // box_bytes) * box_bytes


def _staging_bytes(block_m: int, block_n: int, tma_store: bool, one_d_one_d: bool = False) -> int:
    if not tma_store:
        return 0
    return (block_m // 64) * fp32_epilogue_ring_bytes(block_n) if one_d_one_d else block_m * block_n * 2


def _sfb_stage_bytes(block_n: int, one_d_one_d: bool) -> int:
    """Recipe (1, 1, 128): block_n fp32 column scales per stage, padded to 128 bytes; 1D2D: the
    tile's (at most 3) B scales of the stage's k-block, 16 bytes."""
    return ceil_div(block_n * 4, 128) * 128 if one_d_one_d else 16


def c_stage_bytes(block_m: int, block_n: int, c_stage: bool) -> int:
    """The C tile in shared memory (c_stage: block_m x block_n fp32) and its full / empty barrier
    per consumer warpgroup; mirrors Sm90Fp8Gemm1d2dTraits::kSmemC and its barriers."""
    return block_m * block_n * 4 + 16 * (block_m // 64) if c_stage else 0


def smem_bytes(block_m: int, block_n: int, num_stages: int, tma_store: bool = False,
               one_d_one_d: bool = False, c_stage: bool = False) -> int:
    """Dynamic shared memory of a launch; mirrors Sm90Fp8Gemm1d2dTraits::kDynamicSmemBytes:
    the TMA-store staging buffer (block_m x block_n bf16 when tma_store; with recipe (1, 1, 128) a
    16 KB fp32 box ring per consumer warpgroup: fp32_epilogue_ring_bytes), per stage A
    (block_m x 128 B) + B (block_n x 128 B) + sfa (block_m fp32) + sfb (16 B; block_n fp32, padded
    to 128 B, with recipe (1, 1, 128)) + 2 barriers (16 B), a 16-byte flag, the C stage (c_stage_bytes)
    and 1024 bytes of slack to align the base to the 128B-swizzle atom."""
    return (1024 + _staging_bytes(block_m, block_n, tma_store, one_d_one_d) + c_stage_bytes(block_m, block_n, c_stage) +
            num_stages * (block_m * BLOCK_K + block_n * BLOCK_K + block_m * 4 + _sfb_stage_bytes(block_n, one_d_one_d))
            + num_stages * 16 + 16)


def max_stages(block_m: int, block_n: int, tma_store: bool = False, one_d_one_d: bool = False,
               ctas_per_sm: int = 1, cap: int = MODEL_MAX_STAGES, c_stage: bool = False) -> int:
    """The most stages that fit in shared memory, at most `cap` (the model's ring by default;
    MAX_STAGES for what the kernel builds)."""
    per_stage = block_m * BLOCK_K + block_n * BLOCK_K + block_m * 4 + 16 + _sfb_stage_bytes(block_n, one_d_one_d)
    limit = SMEM_LIMIT if ctas_per_sm == 1 else SMEM_LIMIT_2CTA
    return min(cap, (limit - 1024 - 16 - _staging_bytes(block_m, block_n, tma_store, one_d_one_d) -
                     c_stage_bytes(block_m, block_n, c_stage)) // per_stage)


def block_n_candidates(block_m: int, one_d_one_d: bool = False) -> list[int]:
    top = MAX_BLOCK_N_1D1D[block_m] if one_d_one_d else MAX_BLOCK_N[block_m]
    return list(range(16, top + 1, 16))


def _mma_efficiency(block_n: int) -> float:
    # Per wgmma m64nNk32: N/2 tensor-core cycles vs (2048 + 32 N) / 128 smem cycles.
    return (block_n / 2) / max(block_n / 2, 16 + block_n / 4)


def _main_loop_efficiency(block_n: int, one_d_one_d: bool) -> float:
    return _WIDE_LOOP_EFFICIENCY if block_n > MAX_BLOCK_N_LEAN_LOOP and not one_d_one_d else 1.0


def _units(m: int, n: int, bm: int, bn: int, splits: int, mc: int, mc_on_a: bool) -> tuple[int, int]:
    """(tiles, work units in CTAs incl. phantom tiles of clusters)."""
    mb, nb = ceil_div(m, bm), ceil_div(n, bn)
    tiles = mb * nb
    if mc == 1:
        return tiles, tiles * splits
    if mc_on_a:
        return tiles, mb * ceil_div(nb, 2) * 2 * splits
    return tiles, ceil_div(mb, 2) * 2 * nb * splits


def _grid(units: int, num_sms: int, mc: int, ctas_per_sm: int = 1) -> int:
    slots = num_sms * ctas_per_sm
    if mc == 1:
        return min(slots, units)
    return 2 * min(slots // 2, units // 2)


def _estimate(m: int, n: int, k: int, bm: int, bn: int, splits: int, num_sms: int, out_bytes: int,
              has_c: bool, mc: int = 1, mc_on_a: bool = False, tma_store: bool = False,
              b_groups: int = 1, one_d_one_d: bool = False, ctas_per_sm: int = 1) -> tuple[float, int, int]:
    num_kb = ceil_div(k, BLOCK_K)
    tiles, units = _units(m, n, bm, bn, splits, mc, mc_on_a)
    grid = _grid(units, num_sms, mc, ctas_per_sm)
    # Two CTAs per SM share its tensor core and bandwidth: a wave of 2 x SMs units costs about
    # what one of SMs units does, minus the latency the second chain hides (not modelled).
    waves = ceil_div(units, grid) * ctas_per_sm
    kb_unit = ceil_div(num_kb, splits)
    flops = 2.0 * bm * bn * BLOCK_K * kb_unit
    stage_eff = _STAGE_EFFICIENCY.get(max_stages(bm, bn, tma_store, one_d_one_d), 1.0)
    t_mma = flops / (_PEAK_FLOPS_PER_SM_US * _mma_efficiency(bn) * _WG_EFFICIENCY[bm] * stage_eff
                     * _main_loop_efficiency(bn, one_d_one_d))
    rows_loaded = (bm // 2 + bn) if (mc == 2 and mc_on_a) else (bm + bn // 2) if mc == 2 else (bm + bn)
    t_load = kb_unit * BLOCK_K * rows_loaded / _L2_BYTES_PER_SM_US
    rows = min(bm, m)
    cols = min(bn, n)
    if tma_store:
        t_epi = bm * bn * out_bytes / _SMEM_EPI_BYTES_PER_SM_US  # tile into smem; the store overlaps
    else:
        t_epi = rows * cols * (out_bytes + (4 if has_c else 0)) / _STORE_BYTES_PER_SM_US
    t_reduce = 0.0
    if splits > 1:
        t_epi += rows * cols * 4 / _STORE_BYTES_PER_SM_US  # partial write
        t_reduce = splits * rows * cols * 4 / _L2_BYTES_PER_SM_US  # last CTA reads all partials
    t_unit = max(t_mma, t_load) + t_epi
    dram = m * k + b_groups * n * k + m * n * (out_bytes + (4 if has_c else 0))
    if splits > 1:
        dram += 2 * splits * m * n * 4
    dram_bw = _DRAM_BYTES_US * min(1.0, grid / (_DRAM_FULL_GRID_FRACTION * num_sms))
    total = max(waves * t_unit + t_reduce, dram / dram_bw) + _FIXED_US
    return total, tiles, units


_cache: dict[tuple, Fp8GemmConfig] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def make_config(m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool, block_m: int, block_n: int,
                num_stages: int, num_splits: int = 1, num_multicast: int = 1, multicast_on_a: bool = False,
                tma_store: bool = False, half_promote: bool = False, one_d_one_d: bool = False,
                est_us: float | None = None, ctas_per_sm: int = 1, k_batch: int = 1,
                c_stage: bool = False) -> Fp8GemmConfig:
    """A dense-kind config with the given kernel choices, grid and tile counts derived for (m, n, k).

    Raises ValueError for a combination the kernel does not build (the tuner and the tuned tables
    go through here, so a bad table entry can never reach a launch)."""
    bm, bn = block_m, block_n
    serial = serial_halves(bm, bn, half_promote, one_d_one_d)
    top = MAX_BLOCK_N_SERIAL_HALVES if serial else (MAX_BLOCK_N_1D1D if one_d_one_d else MAX_BLOCK_N).get(bm)
    if top is None or bn % 16 or not 16 <= bn <= top:
        raise ValueError(f"block_m {bm} / block_n {bn}: need block_m in {FP8_BLOCK_MS}, block_n a multiple of 16 <= {top}"
                         f"{'' if serial else f' (up to {MAX_BLOCK_N_SERIAL_HALVES} with half_promote at block_m 128, recipe (1, 128, 128))'}")
    if serial and num_splits != 1:
        raise ValueError(f"half_promote with block_n > {MAX_BLOCK_N_HALF_PROMOTE} (serial halves): no split-K (its "
                         "reduction spills)")
    if bm == THREE_WG_BLOCK_M and (num_splits != 1 or num_multicast != 1 or ctas_per_sm != 1 or k_batch != 1):
        raise ValueError("block_m 192: no split-K, no multicast, one CTA per SM, k_batch 1")
    kbatch_top = MAX_BLOCK_N_KBATCH_1D1D if one_d_one_d else MAX_BLOCK_N_KBATCH
    if k_batch != 1 and (k_batch not in kbatch_top or bn > kbatch_top[k_batch] or half_promote):
        raise ValueError(f"k_batch {k_batch}: 1, or 2 / 4 with block_n <= {kbatch_top} (no half-promote)")
    if k_batch > num_stages:  # a batch waits for k_batch full stages before releasing one: deadlock
        raise ValueError(f"k_batch {k_batch} > num_stages {num_stages}")
    if ctas_per_sm not in (1, 2) or (ctas_per_sm == 2 and bm != 64):
        raise ValueError(f"ctas_per_sm {ctas_per_sm}: 1, or 2 with block_m 64")
    if c_stage and not (one_d_one_d and has_c and not tma_store and num_splits == 1 and bn % 32 == 0):
        raise ValueError("c_stage: recipe (1, 1, 128) with C, the direct epilogue (no tma_store), no split-K, "
                         "block_n a multiple of 32")
    top_stages = max_stages(bm, bn, tma_store, one_d_one_d, ctas_per_sm, cap=MAX_STAGES, c_stage=c_stage)
    if not MIN_STAGES <= num_stages <= top_stages:
        raise ValueError(f"num_stages {num_stages} outside [{MIN_STAGES}, {top_stages}] for block {bm}x{bn}"
                         f"{' with 2 CTAs per SM' if ctas_per_sm == 2 else ''}")
    if num_multicast not in (1, 2) or (num_multicast == 2 and num_splits > 1 and one_d_one_d) or num_splits < 1:
        raise ValueError(f"num_multicast {num_multicast} / num_splits {num_splits}: multicast 1 or 2, with split-K "
                         "only for recipe (1, 128, 128)")
    if num_multicast == 2 and num_sms < 2:
        raise ValueError("multicast needs >= 2 SMs")
    if tma_store and not one_d_one_d and (out_fp32 or has_c or num_splits > 1):
        raise ValueError("tma_store needs a bf16 output without C and without split-K")
    if one_d_one_d and (not out_fp32 or (tma_store and num_splits > 1)):
        raise ValueError("recipe (1, 1, 128): fp32 out, no TMA store with split-K")
    if has_c and not out_fp32:
        raise ValueError("C needs an fp32 output")
    if num_splits > ceil_div(k, BLOCK_K):
        raise ValueError(f"num_splits {num_splits} > k-blocks {ceil_div(k, BLOCK_K)}")
    out_bytes = 4 if out_fp32 else 2
    est, tiles, units = _estimate(m, n, k, bm, bn, num_splits, num_sms, out_bytes, has_c, num_multicast,
                                  multicast_on_a, tma_store, one_d_one_d=one_d_one_d, ctas_per_sm=ctas_per_sm)
    return Fp8GemmConfig(
        m=m, n=n, k=k, block_m=bm, block_n=bn, num_stages=num_stages, num_splits=num_splits,
        grid=_grid(units, num_sms, num_multicast, ctas_per_sm),
        smem_bytes=smem_bytes(bm, bn, num_stages, tma_store, one_d_one_d, c_stage), ctas_per_sm=ctas_per_sm,
        k_batch=k_batch, c_stage=bool(c_stage),
        num_threads=num_threads(bm), num_tiles=tiles, num_units=units, out_fp32=bool(out_fp32), has_c=bool(has_c),
        est_us=est if est_us is None else est_us, num_multicast=num_multicast,
        multicast_on_a=bool(multicast_on_a and num_multicast == 2), half_promote=bool(half_promote),
        tma_store=bool(tma_store), one_d_one_d=bool(one_d_one_d),
    )


def _model_skips_multicast(m: int, one_d_one_d: bool) -> bool:
    # Measured on recipe (1, 128, 128) only; the weight-gradient model keeps its multicast.
    return m <= MODEL_NO_MULTICAST_MAX_M and not one_d_one_d


def _model_candidates(m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool, allow_split_k: bool,
                      allow_multicast: bool, one_d_one_d: bool) -> list[tuple]:
    """Every (rank, bm, bn, splits, mc, mc_on_a, tma, est, tiles, units) the model considers."""
    out_bytes = 4 if out_fp32 else 2
    num_kb = ceil_div(k, BLOCK_K)
    out = []
    for bm in ([64] if m <= 64 else [64, 128]):
        for bn in (block_n_candidates(bm, True) if one_d_one_d else block_n_candidates(bm)):
            tiles = ceil_div(m, bm) * ceil_div(n, bn)
            split_options = [1]
            if allow_split_k and 2 * tiles <= num_sms and num_kb >= 2 * MIN_KB_PER_SPLIT:
                top = min(MAX_SPLITS, num_kb // MIN_KB_PER_SPLIT, num_sms // tiles)
                split_options += list(range(2, top + 1))
            options = [(s_, 1, False) for s_ in split_options]
            if allow_multicast and num_sms >= 2:
                options += [(1, 2, True), (1, 2, False)]
            for splits, mc, mc_on_a in options:
                # The TMA-store epilogue where the kernel has it; the direct one keeps more stages
                # (better for long K, where the epilogue is a small part of a tile). Recipe (1, 1, 128):
                # the fp32 TMA epilogue (a reduce-add with C) won 13 of the 14 tuned wgrad shapes by
                # 2-73% (benchmarks/NOTES.md v0.21).
                tma_options = (True, False) if ((one_d_one_d or (not out_fp32 and not has_c)) and splits == 1) \
                    else (False,)
                for tma in tma_options:
                    est, tiles, units = _estimate(m, n, k, bm, bn, splits, num_sms, out_bytes, has_c, mc, mc_on_a,
                                                  tma, one_d_one_d=one_d_one_d)
                    # Tie-break: faster, then fewer units, then no cluster, then bigger tiles, then TMA
                    # store, then the order listed here.
                    rank = (round(est, 4), units, mc, -bm * bn, not tma, len(out))
                    out.append((rank, bm, bn, splits, mc, mc_on_a, tma, est, tiles, units))
    return out


def _top_and_family_bests(ranked: list, top: int, family) -> list:
    """The first `top` of a ranked candidate list, plus the best of every family ranked lower (the
    model's blind spots are whole families, not neighbours)."""
    chosen, seen = [], set()
    for c in ranked:
        if len(chosen) < top or family(c) not in seen:
            chosen.append(c)
        seen.add(family(c))
    return chosen


def candidate_configs(m: int, n: int, k: int, num_sms: int, out_fp32: bool = False, has_c: bool = False,
                      top: int = 16, one_d_one_d: bool = False, half_promote: int = 0,
                      k_batch: int = 12, deep_ring: int = 32) -> list[Fp8GemmConfig]:
    """What the tuner times for a shape: the model's `top` best, plus the best of every
    (block_m, splits > 1, multicast, epilogue) family the model ranks lower (its blind spots are
    whole families, not neighbours), plus half-promote twins of the first `half_promote` of each
    block_m (0 by default: ptxas serializes that kernel's wgmmas, measured 1.3-2x slower), plus
    k_batch 2 / 4 twins of the first `k_batch` narrow ones (the model does not rank either),
    plus two-CTA-per-SM configs, plus deep-ring twins (up to MAX_STAGES stages) of the first
    `deep_ring` of those (k_batch 1, no half-promote) whose tile fits more stages than the model's
    ring, and of the first `deep_ring` k-batch twins. The model's own choice is first."""
    cands = sorted(_model_candidates(m, n, k, num_sms, out_fp32, has_c, True, True, one_d_one_d))
    # The model's own choice first (select_config: no multicast on skinny M), then the rest in rank order.
    pick = next(c for c in cands if c[4] == 1 or not _model_skips_multicast(m, one_d_one_d))
    cands.remove(pick)
    cands.insert(0, pick)
    # family: (block_m, split-K, multicast, multicast on A, TMA store)
    chosen = _top_and_family_bests(cands, top, lambda c: (c[1], c[3] > 1, c[4], c[5], c[6]))
    rule = _model_serial_halves(m, n, k, num_sms, out_fp32, has_c, True, one_d_one_d)
    out = [] if rule is None else [rule]  # where the serial-halves rule applies, it is the model's choice
    hp_left = {64: half_promote, 128: half_promote}
    for _, bm, bn, splits, mc, mc_on_a, tma, est, tiles, units in chosen:
        stages = max_stages(bm, bn, tma, one_d_one_d)
        cfg = make_config(m, n, k, num_sms, out_fp32, has_c, bm, bn, stages, splits, mc, mc_on_a, tma,
                          one_d_one_d=one_d_one_d, est_us=est)
        out.append(cfg)
        if hp_left[bm] > 0 and not one_d_one_d:
            hp_left[bm] -= 1
            out.append(dataclasses.replace(cfg, half_promote=True))
    out += _two_cta_candidates(m, n, k, num_sms, out_fp32, has_c, one_d_one_d)
    out += _three_wg_candidates(m, n, k, num_sms, out_fp32, has_c, one_d_one_d)
    if not one_d_one_d:
        out += _serial_halves_candidates(m, n, k, num_sms, out_fp32, has_c)
    if one_d_one_d:
        out += _fp32_tma_epilogue_twins(out, m, n, k, num_sms, has_c)
        whole = [c for c in out if c.ctas_per_sm == 1]
        out += [dataclasses.replace(c, half_promote=True) for c in whole if c.block_n <= MAX_BLOCK_N_HALF_PROMOTE]
        # k-block batches: the promotion of one k-block overlaps the next one's wgmmas. Batches
        # need narrow tiles, which the model ranks low: bm128 tiles up to the batch limit are added.
        out += [dataclasses.replace(c, k_batch=kbat) for c in whole for kbat in (2, 4)
                if c.block_m != THREE_WG_BLOCK_M and c.block_n <= MAX_BLOCK_N_KBATCH_1D1D[kbat] and c.num_stages >= kbat
                and ceil_div(ceil_div(k, BLOCK_K), c.num_splits) >= kbat]
        out += _kbatch_1d1d_candidates(m, n, k, num_sms, has_c, {c.kernel_key() for c in out})
        out += _c_stage_twins(out, m, n, k, num_sms, has_c)
        out += _two_cta_1d1d_candidates(m, n, k, num_sms, has_c)
    if not one_d_one_d:
        narrow = [c for c in out if not c.half_promote and c.block_m != THREE_WG_BLOCK_M
                  and c.block_n <= MAX_BLOCK_N_KBATCH[2]][:k_batch]
        for c in narrow:
            for kbat in (2, 4):
                if c.block_n <= MAX_BLOCK_N_KBATCH[kbat] and ceil_div(ceil_div(k, BLOCK_K), c.num_splits) >= kbat:
                    out.append(dataclasses.replace(c, k_batch=kbat))
    # Deep rings of the k_batch 1 candidates first, then of the k-batch twins: on skinny shapes
    # both sides of the main loop run at about the same rate (benchmarks/NOTES.md v0.20), k-batch
    # speeds the consumers and a deep ring the loads, so only the pair can gain.
    plain = [c for c in out if c.k_batch == 1 and not c.half_promote]
    batched = [c for c in out if c.k_batch > 1]
    out += _deep_ring_twins(plain, deep_ring, m, n, k, num_sms, out_fp32, has_c, one_d_one_d)
    out += _deep_ring_twins(batched, deep_ring, m, n, k, num_sms, out_fp32, has_c, one_d_one_d)
    # The twin generators may meet (e.g. a block_m 192 TMA candidate and the TMA twin of its
    # direct-epilogue sibling).
    return unique_launches(out)


def _serial_halves_candidates(m: int, n: int, k: int, num_sms: int, out_fp32: bool,
                              has_c: bool) -> list[Fp8GemmConfig]:
    """bm128 tiles wider than the two-accumulator limit, half-promoted serially (MAX_BLOCK_N_SERIAL_HALVES),
    alone, with multicast on A or B, and with the TMA-store epilogue where it applies; for M >=
    SERIAL_HALVES_MIN_M (a skinny shape has too few tiles for them)."""
    if m < SERIAL_HALVES_MIN_M:
        return []
    out = []
    tmas = (False, True) if not (out_fp32 or has_c) else (False,)
    for bn in SERIAL_HALVES_BLOCK_N:
        for mc, on_a in ((1, False), (2, True), (2, False)):
            if mc == 2 and num_sms < 2:
                continue
            for tma in tmas:
                out.append(make_config(m, n, k, num_sms, out_fp32, has_c, 128, bn, max_stages(128, bn, tma), 1, mc, on_a,
                                       tma, half_promote=True))
    return out


def unique_launches(cfgs: list[Fp8GemmConfig]) -> list[Fp8GemmConfig]:
    """Each launch (kernel and grid) once, first occurrence kept."""
    unique, seen = [], set()
    for c in cfgs:
        key = (c.kernel_key(), c.grid)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def _three_wg_candidates(m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool,
                         one_d_one_d: bool) -> list[Fp8GemmConfig]:
    """block_m 192 tiles (three consumer warpgroups) for the tuner: recipe (1, 1, 128) with at least
    two m-blocks, block_n THREE_WG_BLOCK_N, each epilogue, deepest ring (and half-promote twins
    in the 1D1D branch of candidate_configs); 1D2D only for M >= 1024 with bf16 out (the
    direct epilogue: the bf16 staging leaves too few stages)."""
    bm = THREE_WG_BLOCK_M
    if m < 2 * bm or (not one_d_one_d and (m < 1024 or out_fp32)):
        return []
    out = []
    for bn in THREE_WG_BLOCK_N:
        if bn > (MAX_BLOCK_N_1D1D if one_d_one_d else MAX_BLOCK_N)[bm]:
            continue
        for tma in ((True, False) if one_d_one_d else (False,)):
            stages = max_stages(bm, bn, tma, one_d_one_d, cap=MAX_STAGES)
            if stages < 3:
                continue
            out.append(make_config(m, n, k, num_sms, out_fp32, has_c, bm, bn, stages, tma_store=tma,
                                   one_d_one_d=one_d_one_d))
    return out


def _kbatch_1d1d_candidates(m: int, n: int, k: int, num_sms: int, has_c: bool, seen: set) -> list[Fp8GemmConfig]:
    """Recipe (1, 1, 128): bm128 tiles of block_n 96-128 with k-block batches of 2, each multicast
    choice and epilogue, deepest ring (kernels whose kernel_key `seen` does not hold yet)."""
    out = []
    if m <= 64 or ceil_div(k, BLOCK_K) < 2:
        return out
    for bn in (96, 112, 128):
        for mc, mc_a in ((1, False), (2, True), (2, False)):
            for tma in (True, False):
                try:
                    cfg = make_config(m, n, k, num_sms, True, has_c, 128, bn, max_stages(128, bn, tma, True), 1, mc,
                                      mc_a, tma, one_d_one_d=True, k_batch=2)
                except ValueError:  # e.g. multicast on one SM
                    continue
                if cfg.kernel_key() not in seen:
                    out.append(cfg)
    return out


def _fp32_tma_epilogue_twins(cands: list[Fp8GemmConfig], m: int, n: int, k: int, num_sms: int,
                             has_c: bool) -> list[Fp8GemmConfig]:
    """Recipe (1, 1, 128): every candidate without split-K again with the TMA epilogue (stores, or
    reduce-adds when C is D) and the stages its staging ring leaves. The model does not rank the
    epilogues against each other here: only measurement picks one."""
    out = []
    for c in cands:
        if c.num_splits > 1 or c.tma_store:
            continue
        stages = min(c.num_stages, max_stages(c.block_m, c.block_n, True, True, c.ctas_per_sm, cap=MAX_STAGES))
        if stages < 3:
            continue
        out.append(make_config(m, n, k, num_sms, True, has_c, c.block_m, c.block_n, stages, 1, c.num_multicast,
                               c.multicast_on_a, True, one_d_one_d=True, est_us=c.est_us, ctas_per_sm=c.ctas_per_sm))
    return out


def _c_stage_twins(cands: list[Fp8GemmConfig], m: int, n: int, k: int, num_sms: int,
                   has_c: bool) -> list[Fp8GemmConfig]:
    """Recipe (1, 1, 128) with C: every direct-epilogue candidate (no split-K, one CTA per SM,
    block_n % 32 == 0) again with C staged in shared memory (c_stage) and the stages it leaves.
    Only measurement picks it (benchmarks/NOTES.md v0.75)."""
    out, seen = [], set()
    if not has_c:
        return out
    for c in cands:
        if c.tma_store or c.num_splits > 1 or c.ctas_per_sm != 1 or c.block_n % 32 or c.c_stage:
            continue
        stages = min(c.num_stages, max_stages(c.block_m, c.block_n, False, True, cap=MAX_STAGES, c_stage=True))
        if stages < max(3, c.k_batch):
            continue
        cfg = make_config(m, n, k, num_sms, True, True, c.block_m, c.block_n, stages, 1, c.num_multicast,
                          c.multicast_on_a, False, c.half_promote, one_d_one_d=True, est_us=c.est_us,
                          k_batch=c.k_batch, c_stage=True)
        if cfg.kernel_key() not in seen:
            seen.add(cfg.kernel_key())
            out.append(cfg)
    return out


# Recipe (1, 1, 128) tiles run two CTAs per SM (block_m 64, kCtasPerSm: the producer's registers
# go to the consumer warpgroup), so one CTA's C read and D write can overlap the other's main loop.
# Measured (benchmarks/NOTES.md v0.76): within 1.5% of the best one-CTA tile at K = 512 (a tile's
# time mostly its epilogue), 18-27% slower at K = 1536 / 2048; so only short-K shapes get them.
# Widths the register split builds spill-free (tests/test_fp8_kernel_compile.py).
TWO_CTA_1D1D_BLOCK_N = (96, 128, 160, 192)
TWO_CTA_1D1D_MAX_K = 1024


def _two_cta_1d1d_candidates(m: int, n: int, k: int, num_sms: int, has_c: bool) -> list[Fp8GemmConfig]:
    """Recipe (1, 1, 128): block_m 64 tiles for two CTAs per SM, each multicast choice, the direct
    epilogue with and without the C stage, the deepest ring that fits half an SM; where the grid
    has at least four such tiles per CTA (fewer: the skinny two-CTA candidates cover it), for
    K <= TWO_CTA_1D1D_MAX_K."""
    out = []
    if k > TWO_CTA_1D1D_MAX_K:
        return out
    for bn in TWO_CTA_1D1D_BLOCK_N:
        if ceil_div(m, 64) * ceil_div(n, bn) < 8 * num_sms:
            continue
        for mc, mc_a in ((1, False), (2, False), (2, True)):
            if mc == 2 and num_sms < 2:
                continue
            for cst in ((False, True) if has_c and bn % 32 == 0 else (False,)):
                stages = max_stages(64, bn, False, True, 2, cap=MAX_STAGES, c_stage=cst)
                if stages < MIN_STAGES:
                    continue
                out.append(make_config(m, n, k, num_sms, True, has_c, 64, bn, stages, 1, mc, mc_a, False,
                                       one_d_one_d=True, ctas_per_sm=2, c_stage=cst))
    return out


def _deep_ring_twins(cands: list[Fp8GemmConfig], limit: int, m: int, n: int, k: int, num_sms: int,
                     out_fp32: bool, has_c: bool, one_d_one_d: bool) -> list[Fp8GemmConfig]:
    """The first `limit` candidates again with the deepest ring the kernel builds, where that is
    deeper than the model's (narrow tiles) and the tile's k-range can fill it."""
    out, seen = [], set()
    for c in cands:
        if len(out) >= limit:
            break
        deep = max_stages(c.block_m, c.block_n, c.tma_store, one_d_one_d, c.ctas_per_sm, cap=MAX_STAGES)
        per_unit_kb = ceil_div(ceil_div(k, BLOCK_K), c.num_splits)
        deep = min(deep, max(per_unit_kb, c.num_stages))
        key = (c.block_m, c.block_n, deep, c.num_splits, c.num_multicast, c.multicast_on_a, c.tma_store,
               c.ctas_per_sm, c.k_batch)
        if deep <= c.num_stages or key in seen:
            continue
        seen.add(key)
        out.append(make_config(m, n, k, num_sms, out_fp32, has_c, c.block_m, c.block_n, deep, c.num_splits,
                               c.num_multicast, c.multicast_on_a, c.tma_store, one_d_one_d=one_d_one_d,
                               est_us=c.est_us, ctas_per_sm=c.ctas_per_sm, k_batch=c.k_batch))
    return out


def _two_cta_candidates(m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool,
                        one_d_one_d: bool) -> list[Fp8GemmConfig]:
    """block_m 64 configs that put two CTAs on each SM: only where one CTA per SM leaves SMs
    idle or runs few, long chains (units beyond the SM count). Narrow tiles (<= 128 registers per
    thread) with the largest split that keeps >= MIN_KB_PER_SPLIT k-blocks and <= 2 x SMs units."""
    if m > 64 * 4 or num_sms < 2:
        return []
    num_kb = ceil_div(k, BLOCK_K)
    out = []
    # Up to bn128: 64x32768x512 bn128 with two CTAs per SM fills one wave (256 tiles) and measured
    # 8.9 us against the table's one-CTA bn160 9.8 (benchmarks/NOTES.md v0.20).
    for bn in (32, 48, 64, 80, 96, 112, 128):
        tiles = ceil_div(m, 64) * ceil_div(n, bn)
        if tiles > 2 * num_sms:
            continue
        splits = max(1, min(MAX_SPLITS, num_kb // MIN_KB_PER_SPLIT, (2 * num_sms) // tiles))
        if tiles * splits <= num_sms:
            continue  # fits one CTA per SM: the one-CTA candidates cover it
        variants = [(splits, 1, False, False)]
        if splits == 1:
            variants += [(1, 1, False, True), (1, 2, True, True)]
        for sp, mc, mc_a, tma in variants:
            if tma and (out_fp32 or has_c):
                continue
            stages = max_stages(64, bn, tma, one_d_one_d, ctas_per_sm=2)
            if stages < 3:  # the bn128 + TMA-store ring holds 3 (the 64x32768x512 winner)
                continue
            cfg = make_config(m, n, k, num_sms, out_fp32, has_c, 64, bn, stages, sp, mc, mc_a, tma,
                              one_d_one_d=one_d_one_d, ctas_per_sm=2)
            out.append(cfg)
            if not one_d_one_d:  # through make_config: it rejects what the kernel does not build
                out.append(make_config(m, n, k, num_sms, out_fp32, has_c, 64, bn, stages, sp, mc, mc_a, tma,
                                       half_promote=True, ctas_per_sm=2))
    return out


# Recipe (1,1,128) calls of K >= this take the table entry of the other C mode when theirs has none
# (_tuned_config): measured -2% to -9% without C on 8 of the 10 wgrad shapes with K >= 2048, +1.5% at
# most on the other two; +2.6% / +7% at K = 1536 / 512 (NOTES v0.26).
NO_C_FALLBACK_MIN_K = 2048


def _tuned_config(m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool, allow_split_k: bool,
                  allow_multicast: bool, one_d_one_d: bool, allow_two_cta: bool = True,
                  kind: str | None = None) -> Fp8GemmConfig | None:
    kind = kind or ("fp8_1d1d" if one_d_one_d else "fp8_1d2d")
    hit = tuned.lookup(kind, num_sms, m, n, k, out_fp32, has_c)
    if hit is None and kind == "fp8_1d1d" and k >= NO_C_FALLBACK_MIN_K:
        # Recipe (1,1,128) entries are tuned with C (c = d, the wgrad call). A call without C runs
        # the same tile and loop with a TMA store instead of the reduce-add, so where the main loop
        # dominates the entry of the other C mode beats the model too; at short K the epilogue
        # dominates and its best tile differs (bench grouped finegemm_no_c, NOTES v0.26).
        hit = tuned.lookup(kind, num_sms, m, n, k, out_fp32, not has_c)
    if hit is None:
        return None
    if (not allow_split_k and hit["num_splits"] > 1) or (not allow_multicast and hit["num_multicast"] > 1) or \
            (not allow_two_cta and hit.get("ctas_per_sm", 1) > 1):
        return None
    try:
        return config_from_fields(hit, m, n, k, num_sms, out_fp32, has_c, one_d_one_d)
    except ValueError as e:
        _warn_bad_entry(m, n, k, e)
        return None


def config_from_fields(f: dict, m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool,
                       one_d_one_d: bool = False) -> Fp8GemmConfig:
    """make_config() from a tuned entry's config fields (tuned.CONFIG_FIELDS + OPTIONAL_FIELDS)."""
    cfg = make_config(m, n, k, num_sms, out_fp32, has_c, f["block_m"], f["block_n"], f["num_stages"],
                      f["num_splits"], f["num_multicast"], f["multicast_on_a"], f["tma_store"], f["half_promote"],
                      one_d_one_d, ctas_per_sm=f.get("ctas_per_sm", 1), k_batch=f.get("k_batch", 1),
                      # an entry of the other C mode (the no-C fallback) runs without the C stage
                      c_stage=bool(f.get("c_stage", False)) and has_c)
    return with_entry_b_group(with_entry_promotion(cfg, f), f, b_group_fits)  # both used by 1D2D launches only


def grouped_config_from_fields(f: dict, kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int,
                               expected_m: int, alignment: int) -> Fp8GemmConfig:
    """make_grouped_config() from a tuned entry's config fields."""
    return with_entry_promotion(
        make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, f["block_m"], f["block_n"],
                            f["num_stages"], f["num_multicast"], f["tma_store"], half_promote=f.get("half_promote", False)),
        f)


def _grouped_tuned_kind(kind: int, m: int, num_groups: int, expected_m: int) -> tuple[str, int]:
    """(tuned-table kind, the M its entries are keyed by) of an m-grouped problem (_common.grouped_tuned_key)."""
    return grouped_tuned_key(kind == GEMM_GROUPED_CONTIGUOUS, CONTIGUOUS_KIND_PREFIX, MASKED_KIND_PREFIX, m,
                             num_groups, expected_m)


def tuned_entry_config(e: dict) -> Fp8GemmConfig:
    """The configuration a tuned-table entry names, at the entry's own shape, planned as the ops
    plan: contiguous entries with expected_m 0 and alignment 128, masked ones with Mmax = expected
    m rounded up to 128, k-grouped ones as one group."""
    f = {**tuned.OPTIONAL_FIELDS, **e["config"]}
    if e["kind"] == K_GROUPED_KIND:  # k-grouped: one group of the entry's (m, n, planning K)
        return make_k_grouped_config(e["m"], e["n"], e["k"], 1, 1, e["num_sms"], e.get("has_c", False), f["block_m"],
                                     f["block_n"], f["num_stages"], f["num_multicast"], f["multicast_on_a"],
                                     tma_store=f["tma_store"], half_promote=f["half_promote"], k_batch=f["k_batch"])
    if e["kind"].startswith(CONTIGUOUS_KIND_PREFIX):
        return grouped_config_from_fields(f, GEMM_GROUPED_CONTIGUOUS, e["m"], e["n"], e["k"],
                                          int(e["kind"][len(CONTIGUOUS_KIND_PREFIX):]), e["num_sms"], 0, 128)
    if e["kind"].startswith(MASKED_KIND_PREFIX):
        return grouped_config_from_fields(f, GEMM_GROUPED_MASKED, ceil_div(e["m"], 128) * 128, e["n"], e["k"],
                                          int(e["kind"][len(MASKED_KIND_PREFIX):]), e["num_sms"], e["m"], 0)
    return config_from_fields(f, e["m"], e["n"], e["k"], e["num_sms"], e.get("out_fp32", False),
                              e.get("has_c", False), e["kind"] == "fp8_1d1d")


_warned: set = set()


def _warn_bad_entry(m, n, k, err) -> None:
    if (n, k, str(err)) not in _warned:
        _warned.add((n, k, str(err)))
        print(f"finegemm: ignoring a tuned-table entry for n={n} k={k} (m={m}): {err}", file=sys.stderr, flush=True)


def select_config(m: int, n: int, k: int, num_sms: int, out_fp32: bool = False, has_c: bool = False,
                  allow_split_k: bool = True, allow_multicast: bool = True,
                  one_d_one_d: bool = False, allow_two_cta: bool = True) -> Fp8GemmConfig:
    """The launch configuration for D[m, n] (+C) = A[m, k] . B[n, k] on num_sms SMs (cached).

    m, n >= 1, k >= 16 (k % 16 == 0). has_c requires out_fp32. one_d_one_d: recipe (1, 1, 128)
    (weight gradients; needs out_fp32): the same model with the per-stage sfb row in the stage size.
    allow_two_cta=False: no two-CTA-per-SM tuned entry (ops passes it when set_num_sms limits the
    SMs: two CTAs per SM on a grid of 2 x num_sms could spread over more SMs than allowed).
    """
    key = (m, n, k, num_sms, bool(out_fp32), bool(has_c), bool(allow_split_k), bool(allow_multicast),
           bool(allow_two_cta), tuned.state())
    if one_d_one_d:
        key = key + ("1d1d",)
    cfg = _cache.get(key)
    if cfg is not None:
        return cfg
    if m < 1 or n < 1 or k < 1 or num_sms < 1:
        raise ValueError(f"select_config: need m, n, k, num_sms >= 1, got {(m, n, k, num_sms)}")
    if has_c and not out_fp32:
        raise ValueError("select_config: C is only supported with an fp32 output")
    if one_d_one_d and not out_fp32:
        raise ValueError("select_config: recipe (1, 1, 128) needs an fp32 output")
    cfg = _tuned_config(m, n, k, num_sms, out_fp32, has_c, allow_split_k, allow_multicast, one_d_one_d,
                        allow_two_cta)
    source = "tuned"
    if cfg is None:
        source = "model"
        cfg = _model_serial_halves(m, n, k, num_sms, out_fp32, has_c, allow_multicast, one_d_one_d)
    if cfg is None:
        best = min(_model_candidates(m, n, k, num_sms, out_fp32, has_c, allow_split_k,
                                     allow_multicast and not _model_skips_multicast(m, one_d_one_d), one_d_one_d))
        _, bm, bn, splits, mc, mc_on_a, tma, est, tiles, units = best
        cfg = make_config(m, n, k, num_sms, out_fp32, has_c, bm, bn, max_stages(bm, bn, tma, one_d_one_d), splits,
                          mc, mc_on_a, tma, one_d_one_d=one_d_one_d, est_us=est)
    with _cache_lock:
        _cache[key] = cfg
    if print_configs_enabled():
        print(
            f"finegemm: sm90_fp8_gemm m={m} n={n} k={k} out={'fp32' if out_fp32 else 'bf16'}"
            f"{' +C' if has_c else ''}{' 1d1d' if one_d_one_d else ''} sms={num_sms} -> ({source}) "
            f"block_m={cfg.block_m} block_n={cfg.block_n} stages={cfg.num_stages} splits={cfg.num_splits} "
            f"multicast={cfg.num_multicast}{'(A)' if cfg.multicast_on_a else '(B)' if cfg.num_multicast == 2 else ''}"
            f"{' half-promote' if cfg.half_promote else ''}{' 2-CTA/SM' if cfg.ctas_per_sm == 2 else ''}"
            f"{f' k-batch {cfg.k_batch}' if cfg.k_batch > 1 else ''}{l2_promotion_note(cfg.l2_promotion)} "
            f"epilogue={'tma' if cfg.tma_store else 'direct+C stage' if cfg.c_stage else 'direct'} "
            f"tiles={cfg.num_tiles} grid={cfg.grid} smem={cfg.smem_bytes} est={cfg.est_us:.1f}us",
            file=sys.stderr, flush=True,
        )
    return cfg


def _model_serial_halves(m: int, n: int, k: int, num_sms: int, out_fp32: bool, has_c: bool, allow_multicast: bool,
                         one_d_one_d: bool) -> Fp8GemmConfig | None:
    """The model's serial-halves rule (SERIAL_HALVES_MODEL_*), or None where it does not apply."""
    if (out_fp32 or has_c or one_d_one_d or m < SERIAL_HALVES_MODEL_MIN_M or k < SERIAL_HALVES_MODEL_MIN_K
            or n % MAX_BLOCK_N_SERIAL_HALVES):
        return None
    mc = 2 if allow_multicast and num_sms >= 2 and n >= SERIAL_HALVES_MODEL_MCB_MIN_N else 1
    return make_config(m, n, k, num_sms, False, False, 128, MAX_BLOCK_N_SERIAL_HALVES,
                       max_stages(128, MAX_BLOCK_N_SERIAL_HALVES, True), 1, mc, False, True, half_promote=True)


def _grouped_model_candidates(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int,
                              expected_m: int, alignment: int) -> list[tuple]:
    """Every (rank, bm, bn, mc, mc_on_a, tma, est, tiles, units) the grouped model considers."""
    contiguous = kind == GEMM_GROUPED_CONTIGUOUS
    bms, em = grouped_block_m_options(contiguous, m, expected_m, alignment, "FP8")
    out = []
    for bm in bms:
        m_eff = grouped_model_rows(contiguous, m, num_groups, em, bm)
        for bn in block_n_candidates(bm):
            options = [(1, False)] + ([(2, True)] if num_sms >= 2 and bm != THREE_WG_BLOCK_M else [])
            for mc, mc_on_a in options:
                for tma in (True, False):
                    if tma and kind == GEMM_GROUPED_MASKED and bn > MAX_BLOCK_N_MASKED_TMA[bm]:
                        continue
                    est, tiles, units = _estimate(m_eff, n, k, bm, bn, 1, num_sms, 2, False, mc, mc_on_a, tma,
                                                  b_groups=num_groups)
                    rank = (round(est, 4), units, mc, -bm * bn, not tma, len(out))
                    out.append((rank, bm, bn, mc, mc_on_a, tma, est, tiles, units))
    return out


def make_grouped_config(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int, expected_m: int,
                        alignment: int, block_m: int, block_n: int, num_stages: int, num_multicast: int,
                        tma_store: bool, est_us: float | None = None, half_promote: bool = False) -> Fp8GemmConfig:
    """An m-grouped config with the given choices (ValueError for one the kernel does not build).
    half_promote: only the serial halves (block_m 128, block_n above MAX_BLOCK_N_HALF_PROMOTE)."""
    contiguous = kind == GEMM_GROUPED_CONTIGUOUS
    bms, em = grouped_block_m_options(contiguous, m, expected_m, alignment, "FP8")
    bm, bn, mc = block_m, block_n, num_multicast
    if half_promote and not (serial_halves(bm, bn, half_promote) and bn <= MAX_BLOCK_N_SERIAL_HALVES):
        raise ValueError(f"grouped half_promote: block_m 128 with block_n in ({MAX_BLOCK_N_HALF_PROMOTE}, "
                         f"{MAX_BLOCK_N_SERIAL_HALVES}] (serial halves), got {bm}x{bn}")
    if half_promote:
        top = MAX_BLOCK_N_SERIAL_HALVES
    else:
        top = MAX_BLOCK_N_MASKED_TMA[bm] if (tma_store and not contiguous and bm in MAX_BLOCK_N_MASKED_TMA) \
            else MAX_BLOCK_N.get(bm, 0)
    if bm not in bms or bn % 16 or not 16 <= bn <= top:
        raise ValueError(f"grouped block {bm}x{bn}: block_m in {bms}, block_n a multiple of 16 <= {top}")
    if mc not in (1, 2) or (mc == 2 and num_sms < 2):
        raise ValueError(f"num_multicast {mc}: 1 or 2")
    if bm == THREE_WG_BLOCK_M and mc != 1:
        raise ValueError("block_m 192: no multicast")
    top_stages = max_stages(bm, bn, tma_store, cap=MAX_STAGES)
    if not MIN_STAGES <= num_stages <= top_stages:
        raise ValueError(f"num_stages {num_stages} outside [{MIN_STAGES}, {top_stages}]")
    m_eff = grouped_model_rows(contiguous, m, num_groups, em, bm)
    est, tiles, units = _estimate(m_eff, n, k, bm, bn, 1, num_sms, 2, False, mc, mc == 2, tma_store,
                                  b_groups=num_groups)
    if kind == GEMM_GROUPED_MASKED:
        grid = num_sms if mc == 1 else 2 * (num_sms // 2)
    else:
        grid = _grid(units, num_sms, mc)
    return Fp8GemmConfig(
        m=m, n=n, k=k, block_m=bm, block_n=bn, num_stages=num_stages, num_splits=1, grid=grid,
        smem_bytes=smem_bytes(bm, bn, num_stages, tma_store), num_threads=num_threads(bm), num_tiles=tiles,
        num_units=units, out_fp32=False, has_c=False, est_us=est if est_us is None else est_us, num_multicast=mc,
        multicast_on_a=bool(mc == 2), tma_store=bool(tma_store), gemm_kind=kind, num_groups=num_groups,
        half_promote=bool(half_promote),
    )


def grouped_candidate_configs(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int, expected_m: int,
                              alignment: int, top: int = 16) -> list[Fp8GemmConfig]:
    """What the tuner times for an m-grouped shape: the model's `top` best plus the best of each
    (block_m, multicast, epilogue) family, each also with one stage fewer for the TMA store (the
    model's own choice first)."""
    cands = sorted(_grouped_model_candidates(kind, m, n, k, num_groups, num_sms, expected_m, alignment))
    # family: (block_m, multicast, TMA store)
    chosen = _top_and_family_bests(cands, top, lambda c: (c[1], c[3], c[5]))
    out = [make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, bm, bn,
                               max_stages(bm, bn, tma), mc, tma, est_us=est)
           for _, bm, bn, mc, _mca, tma, est, _t, _u in chosen]
    # Serial halves (the model does not rank them): bm128 x SERIAL_HALVES_BLOCK_N, alone or sharing A,
    # each epilogue, where 128-row tiles are an option and the groups' rows can fill them.
    bms, em = grouped_block_m_options(kind == GEMM_GROUPED_CONTIGUOUS, m, expected_m, alignment, "FP8")
    if 128 in bms and (em if kind == GEMM_GROUPED_MASKED else m) >= SERIAL_HALVES_MIN_M:
        out += [make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, 128, bn,
                                    max_stages(128, bn, tma), mc, tma, half_promote=True)
                for bn in SERIAL_HALVES_BLOCK_N for mc in ((1, 2) if num_sms >= 2 else (1,)) for tma in (False, True)]
    return out


def select_grouped_config(kind: int, m: int, n: int, k: int, num_groups: int, num_sms: int,
                          expected_m: int = 0, alignment: int = 128) -> Fp8GemmConfig:
    """Launch configuration of the m-grouped kernels (bf16 D, no C, no split-K in v1; cached).

    kind GEMM_GROUPED_CONTIGUOUS: m = total rows (all groups stacked); block_m must divide the
    mk alignment (segments start at multiples of it, so a tile never holds two groups): 128 and
    64 for alignment 128, 64 for alignment 64; smaller alignments raise NotImplementedError. The
    model is the dense one over the stacked rows, with G weights read from DRAM.
    kind GEMM_GROUPED_MASKED: m = Mmax; the tiles are G x ceil(expected_m / block_m) x n-blocks
    (expected_m: the planning hint, 0 = Mmax), block_m 64 when expected_m <= 64. The grid is every
    SM (the real tile count depends on masked_m, which stays on the GPU); idle CTAs exit.
    Clusters only share A (two n-blocks of one m-block, which lie in one group).
    """
    key = ("grouped", kind, m, n, k, num_groups, num_sms, expected_m, alignment, tuned.state())
    cfg = _cache.get(key)
    if cfg is not None:
        return cfg
    if kind not in (GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED):
        raise ValueError(f"select_grouped_config: kind must be a grouped kind, got {kind}")
    if m < 1 or n < 1 or k < 1 or num_groups < 1 or num_sms < 1:
        raise ValueError(f"select_grouped_config: need m, n, k, num_groups, num_sms >= 1, got "
                         f"{(m, n, k, num_groups, num_sms)}")
    cfg = None
    source = "model"
    tuned_kind, tuned_m = _grouped_tuned_kind(kind, m, num_groups, expected_m)
    hit = tuned.lookup(tuned_kind, num_sms, tuned_m, n, k, False, False)
    if hit is not None:
        try:
            cfg = grouped_config_from_fields(hit, kind, m, n, k, num_groups, num_sms, expected_m, alignment)
            source = "tuned"
        except ValueError as e:
            _warn_bad_entry(m, n, k, e)
    if cfg is None:
        _, bm, bn, mc, mc_on_a, tma, est, tiles, units = min(
            _grouped_model_candidates(kind, m, n, k, num_groups, num_sms, expected_m, alignment))
        if bn > align(n, 16):
            # One n-block either way: where the estimates tie the model takes the widest tile, whose
            # columns past N only read the next group's B rows (N = 128: bn208 -> bn128).
            bn, est = align(n, 16), None  # make_grouped_config estimates the narrower tile
        cfg = make_grouped_config(kind, m, n, k, num_groups, num_sms, expected_m, alignment, bm, bn,
                                  max_stages(bm, bn, tma), mc, tma, est_us=est)
    with _cache_lock:
        _cache[key] = cfg
    if print_configs_enabled():
        print(
            f"finegemm: sm90_fp8_gemm {'contiguous' if kind == GEMM_GROUPED_CONTIGUOUS else 'masked'} G={num_groups} "
            f"m={m} n={n} k={k} expected_m={expected_m} sms={num_sms} -> ({source}) block_m={cfg.block_m} "
            f"block_n={cfg.block_n} stages={cfg.num_stages} multicast={cfg.num_multicast}"
            f"{'(A)' if cfg.num_multicast == 2 else ''}{l2_promotion_note(cfg.l2_promotion)} "
            f"epilogue={'tma' if cfg.tma_store else 'direct'} "
            f"tiles~{cfg.num_tiles} grid={cfg.grid} smem={cfg.smem_bytes} est={cfg.est_us:.1f}us",
            file=sys.stderr, flush=True,
        )
    return cfg


# ----------------------------------------------------------------------------- k-grouped (one launch)
def k_grouped_plan_k(ks) -> tuple[int, int]:
    """(non-empty groups, planning K) of a k-grouped problem: the mean k_g of the non-empty groups
    rounded up to the next 128 * {1, 1.5, 2, 3, 4, 6, ...} (within 1.5x). ks change every training
    step (tokens per expert); the bucket keeps the plan cache small, and the choice hardly moves
    inside a bucket (K scales every unit alike). (0, 0) when every group is empty."""
    ks = ks if isinstance(ks, list) else list(ks)
    active = len(ks) - ks.count(0)  # C-level: this runs on every call (plan key)
    if active == 0:
        return 0, 0
    mean = ceil_div(sum(ks), active)
    lo = BLOCK_K
    while 2 * lo < mean:
        lo *= 2
    # lo < mean <= 2 lo (or mean <= 128): lo, 1.5 lo (a multiple of 128 once lo >= 256) or 2 lo.
    if mean <= lo:
        return active, lo
    return active, lo * 3 // 2 if lo > BLOCK_K and mean <= lo * 3 // 2 else 2 * lo


def make_k_grouped_config(m: int, n: int, k_plan: int, num_groups: int, active_groups: int, num_sms: int,
                          has_c: bool, block_m: int, block_n: int, num_stages: int, num_multicast: int = 1,
                          multicast_on_a: bool = False, est_us: float | None = None,
                          tma_store: bool = False, half_promote: bool = False, k_batch: int = 1) -> Fp8GemmConfig:
    """A k-grouped config (scheduler kind GEMM_K_GROUPED, recipe (1, 1, 128), fp32 D, no split-K) with
    the given kernel choices. The estimate is the dense model's on the non-empty groups' stacked
    rows (active_groups * m, n, k_plan): one persistent launch runs them all as one pool of units.
    Tiles and units count every group (an empty group's tiles still write C or zeros); the grid is
    every SM (the host shrinks it for a launch with fewer units). ValueError for a combination the
    kernel does not build."""
    if num_groups < 1 or active_groups < 1 or active_groups > num_groups or k_plan < BLOCK_K:
        raise ValueError(f"k-grouped config: need 1 <= active_groups <= num_groups and k_plan >= 128, got "
                         f"{(num_groups, active_groups, k_plan)}")
    base = make_config(active_groups * m, n, k_plan, num_sms, True, has_c, block_m, block_n, num_stages, 1,
                       num_multicast, multicast_on_a, tma_store, half_promote, one_d_one_d=True, est_us=est_us,
                       k_batch=k_batch)
    mb, nb = ceil_div(m, block_m), ceil_div(n, block_n)
    _, per_group = _units(m, n, block_m, block_n, 1, num_multicast, multicast_on_a)
    units = num_groups * per_group
    return dataclasses.replace(base, m=m, k=k_plan, gemm_kind=GEMM_K_GROUPED, num_groups=num_groups,
                               num_tiles=num_groups * mb * nb, num_units=units,
                               grid=_grid(units, num_sms, num_multicast))


def k_grouped_candidate_configs(m: int, n: int, ks, num_sms: int, has_c: bool = True,
                                top: int = 16) -> list[Fp8GemmConfig]:
    """What `tune k_grouped` times for one k-grouped problem: the planner's choice first, then the
    dense 1D1D candidates of the stacked shape (non-empty groups x m rows, n, planning K) that the
    k-grouped kind builds (no split-K, one CTA per SM), each as a k-grouped config of this problem."""
    active, k_plan = k_grouped_plan_k(ks)
    num_groups = len(ks)
    first = select_k_grouped_config(m, n, ks, num_sms, has_c)
    out, seen = [first], {(first.kernel_key(), first.grid)}
    for c in candidate_configs(active * m, n, k_plan, num_sms, True, has_c, top=top, one_d_one_d=True):
        if c.num_splits > 1 or c.ctas_per_sm > 1:
            continue
        try:
            cfg = make_k_grouped_config(m, n, k_plan, num_groups, active, num_sms, has_c, c.block_m, c.block_n,
                                        c.num_stages, c.num_multicast, c.multicast_on_a, est_us=c.est_us,
                                        tma_store=c.tma_store, half_promote=c.half_promote, k_batch=c.k_batch)
        except ValueError:
            continue
        key = (cfg.kernel_key(), cfg.grid)
        if key not in seen:
            seen.add(key)
            out.append(cfg)
    return out


def select_k_grouped_config(m: int, n: int, ks, num_sms: int, has_c: bool = False) -> Fp8GemmConfig:
    """Launch configuration of the k-grouped FP8 GEMM (one launch for every group; cached).

    The kernel choices (block_m, block_n, stages, multicast) are those of a K_GROUPED_KIND table
    entry for (m, n, planning K = k_grouped_plan_k(ks)) when there is one (measured on the k-grouped
    launch), else the dense 1D1D ones of an average group: a tuned-table entry for (m, n, planning K)
    when there is one without split-K and with one CTA per SM (measured on the dense kernel, whose
    main loop this is), else the dense model's best without split-K on the stacked shape (non-empty groups x m
    rows, n, planning K) — one launch runs all groups' units as one pool, so wave quantization is
    that of the stack. Units of all G groups, a grid of every SM. At least one k_g must be non-zero."""
    num_groups = len(ks)
    active, k_plan = k_grouped_plan_k(ks)
    if m < 1 or n < 1 or num_sms < 1 or active == 0:
        raise ValueError(f"select_k_grouped_config: need m, n, num_sms >= 1 and a non-empty group, got "
                         f"{(m, n, num_sms, list(ks)[:8])}")
    key = ("k_grouped", m, n, k_plan, num_groups, active, num_sms, bool(has_c), tuned.state())
    cfg = _cache.get(key)
    if cfg is not None:
        return cfg
    cfg = None
    source = "model"
    # A k-grouped entry (kind K_GROUPED_KIND: m per group, k the planning K) first, measured on the
    # k-grouped launch itself; else the dense 1D1D entry of the average group.
    hit = _tuned_config(m, n, k_plan, num_sms, True, has_c, False, True, True, allow_two_cta=False,
                        kind=K_GROUPED_KIND)
    if hit is None:
        hit = _tuned_config(m, n, k_plan, num_sms, True, has_c, False, True, True, allow_two_cta=False)
    if hit is not None:
        try:
            cfg = make_k_grouped_config(m, n, k_plan, num_groups, active, num_sms, has_c, hit.block_m, hit.block_n,
                                        hit.num_stages, hit.num_multicast, hit.multicast_on_a,
                                        tma_store=hit.tma_store, half_promote=hit.half_promote,
                                        k_batch=hit.k_batch)
            source = "tuned"
        except ValueError as e:
            _warn_bad_entry(m, n, k_plan, e)
    if cfg is None:
        best = min(_model_candidates(active * m, n, k_plan, num_sms, True, has_c, False, True, True))
        _, bm, bn, _splits, mc, mc_on_a, tma, est, _tiles, _units_ = best
        cfg = make_k_grouped_config(m, n, k_plan, num_groups, active, num_sms, has_c, bm, bn,
                                    max_stages(bm, bn, tma, True), mc, mc_on_a, est_us=est, tma_store=tma)
    with _cache_lock:
        _cache[key] = cfg
    if print_configs_enabled():
        print(
            f"finegemm: sm90_fp8_gemm k-grouped G={num_groups} (non-empty {active}) m={m} n={n} k~{k_plan}"
            f"{' +C' if has_c else ''} sms={num_sms} -> ({source}) block_m={cfg.block_m} block_n={cfg.block_n} "
            f"stages={cfg.num_stages} multicast={cfg.num_multicast}"
            f"{'(A)' if cfg.multicast_on_a else '(B)' if cfg.num_multicast == 2 else ''} "
            f"epilogue={'tma' if cfg.tma_store else 'direct'} "
            f"tiles={cfg.num_tiles} grid={cfg.grid} smem={cfg.smem_bytes} est={cfg.est_us:.1f}us",
            file=sys.stderr, flush=True,
        )
    return cfg
