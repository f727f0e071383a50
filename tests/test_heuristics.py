"""Properties of the SM90 FP8 GEMM heuristic (pure Python, no GPU)."""
from __future__ import annotations

import itertools

import pytest

from finegemm.heuristics import sm90_fp8_gemm as h
from finegemm.utils import ceil_div

MS = [1, 2, 17, 63, 64, 65, 127, 128, 129, 256, 511, 1024, 4096, 4097, 8192]
NKS = [(576, 7168), (2112, 7168), (7168, 7296), (7168, 512), (24576, 1536), (129280, 7168),
       (7168, 144), (4096, 7168), (16, 16), (8, 128), (1000, 2048), (7168, 2048), (256, 16384)]
SMS = [132, 78, 1]


@pytest.fixture(autouse=True)
def _model_only(monkeypatch):
    """These are properties of the model; measured tables (tests/test_tuned.py) may override it."""
    monkeypatch.setenv("FINEGEMM_DISABLE_TUNED", "1")
    h.clear_cache()
    yield
    h.clear_cache()


def _all():
    for m, (n, k), sms, (f32, c) in itertools.product(MS, NKS, SMS, [(False, False), (True, False), (True, True)]):
        yield m, n, k, sms, f32, c, h.select_config(m, n, k, sms, f32, c)


def test_properties():
    for m, n, k, sms, f32, has_c, cfg in _all():
        where = (m, n, k, sms, f32, has_c, cfg)
        assert cfg.block_m in (64, 128), where
        if m <= 64:
            assert cfg.block_m == 64, where
        top = h.MAX_BLOCK_N_SERIAL_HALVES if h.serial_halves(cfg.block_m, cfg.block_n, cfg.half_promote) \
            else h.MAX_BLOCK_N[cfg.block_m]
        assert cfg.block_n % 16 == 0 and 16 <= cfg.block_n <= top, where
        # The serial-halves rule: bf16 D without C, M >= 4096, K >= 2048, whole 256-column tiles.
        rule = (not f32 and m >= h.SERIAL_HALVES_MODEL_MIN_M and k >= h.SERIAL_HALVES_MODEL_MIN_K
                and n % h.MAX_BLOCK_N_SERIAL_HALVES == 0)
        assert cfg.half_promote == rule and (cfg.block_n == h.MAX_BLOCK_N_SERIAL_HALVES) == rule, where
        if rule:
            assert cfg.tma_store and cfg.num_multicast == (2 if n >= h.SERIAL_HALVES_MODEL_MCB_MIN_N and sms >= 2 else 1)
            assert not cfg.multicast_on_a, where
        assert h.MIN_STAGES <= cfg.num_stages <= h.MODEL_MAX_STAGES, where
        # The TMA-store epilogue only where the kernel supports it (bf16 D, no C, no split-K).
        if cfg.tma_store:
            assert not f32 and not has_c and cfg.num_splits == 1, where
        assert cfg.smem_bytes == h.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages, cfg.tma_store), where
        assert cfg.smem_bytes <= h.SMEM_LIMIT, where
        assert h.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages + 1, cfg.tma_store) > h.SMEM_LIMIT or \
            cfg.num_stages == h.MODEL_MAX_STAGES, where  # as many stages as fit (the model's ring)
        assert cfg.num_threads == (cfg.block_m // 64 + 1) * 128, where
        tiles = ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
        assert cfg.num_tiles == tiles, where
        assert cfg.num_multicast in (1, 2), where
        if cfg.num_multicast == 1:
            assert not cfg.multicast_on_a
            assert cfg.num_units == tiles * cfg.num_splits, where
            assert 1 <= cfg.grid <= sms and cfg.grid == min(sms, cfg.num_units), where
        else:
            # Pairs of tiles (phantoms at odd edges) on an even grid of 2-CTA clusters; no split-K.
            assert cfg.num_splits == 1, where
            mb, nb = ceil_div(m, cfg.block_m), ceil_div(n, cfg.block_n)
            pairs = mb * ceil_div(nb, 2) if cfg.multicast_on_a else ceil_div(mb, 2) * nb
            assert cfg.num_units == 2 * pairs, where
            assert cfg.grid % 2 == 0 and 2 <= cfg.grid <= sms and cfg.grid <= cfg.num_units, where
        num_kb = ceil_div(k, 128)
        assert 1 <= cfg.num_splits <= min(h.MAX_SPLITS, num_kb), where
        if cfg.num_splits > 1:
            assert num_kb // cfg.num_splits >= h.MIN_KB_PER_SPLIT, where  # every split has >= 4 k-blocks
            assert 2 * tiles <= sms and cfg.num_units <= sms, where  # only for skinny problems, one wave
            assert cfg.workspace_floats == tiles * cfg.num_splits * cfg.block_m * cfg.block_n
            assert cfg.num_counters == tiles
        else:
            assert cfg.workspace_floats == 0 and cfg.num_counters == 0
        assert cfg.out_fp32 == f32 and cfg.has_c == has_c
        assert cfg.est_us > 0


def test_cached_and_frozen():
    a = h.select_config(4096, 7168, 7168, 132)
    assert h.select_config(4096, 7168, 7168, 132) is a
    with pytest.raises(Exception):
        a.block_n = 16  # frozen dataclass


def test_sensible_choices():
    # Large square-ish problem: big tiles, two consumer warpgroups, no split (bf16 D: the
    # serial-halves rule's 128 x 256 tile; fp32 D: the model's own).
    big = h.select_config(4096, 7168, 7168, 132, out_fp32=True)
    assert big.block_m == 128 and big.block_n >= 112 and big.num_splits == 1
    wide = h.select_config(4096, 7168, 7168, 132)
    assert (wide.block_m, wide.block_n, wide.half_promote, wide.num_splits) == (128, 256, True, 1)
    # Skinny problem with a long K: split-K fills the machine.
    skinny = h.select_config(1, 576, 7168, 132)
    assert skinny.block_m == 64 and skinny.num_splits > 1 and skinny.num_units > 66
    # Short K: never split.
    assert h.select_config(1, 576, 512, 132).num_splits == 1
    assert h.select_config(64, 7168, 144, 132).num_splits == 1
    # Splitting and multicast can be disabled.
    assert h.select_config(1, 576, 7168, 132, allow_split_k=False).num_splits == 1
    assert h.select_config(4096, 7168, 7168, 132, allow_multicast=False).num_multicast == 1
    assert h.select_config(4096, 8192, 7168, 132).num_multicast == 2  # the rule's multicast on B
    assert h.select_config(4096, 8192, 7168, 132, allow_multicast=False).num_multicast == 1
    # Large problems are L2-bandwidth bound: they share an operand across a 2-CTA cluster.
    assert big.num_multicast == 2
    # Short K, many tiles: the overlapped TMA-store epilogue; long K keeps the direct one when
    # its extra pipeline stages (and a better tile count) pay more (4096x7168x16384, v0.2).
    assert h.select_config(4096, 32768, 512, 132).tma_store
    assert h.select_config(4096, 7168, 2048, 132).tma_store
    assert not h.select_config(4096, 7168, 7168, 132, out_fp32=True).tma_store


def test_invalid_arguments():
    with pytest.raises(ValueError):
        h.select_config(0, 16, 16, 132)
    with pytest.raises(ValueError):
        h.select_config(16, 16, 16, 132, out_fp32=False, has_c=True)


def test_print_configs(monkeypatch, capsys):
    h.clear_cache()
    monkeypatch.setenv("FINEGEMM_PRINT_CONFIGS", "1")
    cfg = h.select_config(777, 4096, 2048, 132)
    err = capsys.readouterr().err
    assert "sm90_fp8_gemm" in err and f"block_n={cfg.block_n}" in err
    h.select_config(777, 4096, 2048, 132)  # cached: printed once
    assert capsys.readouterr().err == ""


def test_smem_formula_matches_kernel_layout():
    # Mirrors Sm90Fp8Gemm1d2dTraits: stages * (A + B + sfa + 16-byte sfb slot + 2 barriers) + flag
    # + 1024 alignment slack.
    assert h.smem_bytes(128, 128, 6) == 1024 + 6 * (16384 + 16384 + 512 + 16) + 6 * 16 + 16
    assert h.max_stages(64, 16) == h.MODEL_MAX_STAGES
    assert h.max_stages(64, 16, cap=h.MAX_STAGES) == h.MAX_STAGES == 16  # the kernel's limit
    assert h.max_stages(64, 64, cap=h.MAX_STAGES) == 13  # 16.4 KB per stage
    assert h.max_stages(128, 192) == 5
    # + the TMA-store staging buffer (block_m x block_n bf16) in front of the stages.
    assert h.smem_bytes(128, 208, 4, True) == 1024 + 128 * 208 * 2 + 4 * (16384 + 208 * 128 + 512 + 16) + 4 * 16 + 16
    assert h.smem_bytes(64, 112, 3, False) == h.smem_bytes(64, 112, 3, True) - 64 * 112 * 2
    assert h.max_stages(128, 192, True) == 4 and h.max_stages(128, 224, True) == 3
    assert h.MAX_BLOCK_N == {64: 208, 128: 224, 192: 144}
    # block_m 192: 24 KB of A, 768 B of sfa per stage.
    assert h.smem_bytes(192, 128, 5) == 1024 + 5 * (24576 + 16384 + 768 + 16) + 5 * 16 + 16
    assert h.max_stages(192, 128, cap=h.MAX_STAGES) == 5 and h.max_stages(192, 144, True, True) == 4


def test_three_warpgroup_tiles_only_from_the_tuner():
    """block_m 192 (three consumer warpgroups): the tuner proposes it (1D1D with >= 2 m-blocks;
    1D2D for M >= 1024 with bf16 out), the model never picks it, and make_config rejects what the
    kernel does not build with it (split-K, multicast, k-block batches, two CTAs per SM, wide tiles)."""
    for args, kw in (((4096, 7168, 4096, 132, True, True), {"one_d_one_d": True}),
                     ((4096, 7168, 16384, 132, False, False), {})):
        cands = h.candidate_configs(*args, **kw)
        three = [c for c in cands if c.block_m == 192]
        assert three and all(c.num_threads == 512 and c.k_batch == 1 and c.num_splits == 1 and c.num_multicast == 1
                             for c in three)
        assert len({(c.kernel_key(), c.grid) for c in cands}) == len(cands), "duplicate candidates"
        assert h.select_config(*args, **kw).block_m != 192
    assert not [c for c in h.candidate_configs(256, 7168, 4096, 132, True, True, one_d_one_d=True) if c.block_m == 192]
    assert not [c for c in h.candidate_configs(512, 7168, 4096, 132) if c.block_m == 192]
    for kw in ({"num_splits": 2}, {"num_multicast": 2}, {"k_batch": 2}):
        with pytest.raises(ValueError, match="block_m 192"):
            h.make_config(4096, 7168, 4096, 132, True, True, 192, 96, 4, one_d_one_d=True, **kw)
    with pytest.raises(ValueError, match="block_n"):
        h.make_config(4096, 7168, 4096, 132, False, False, 192, 160, 4)


def test_deep_rings_are_built_only_up_to_the_kernel_limit():
    """Tuned entries may use rings deeper than the model's, up to the kernel's 16 stages and what
    fits in shared memory; one more is an error that names the limit."""
    cfg = h.make_config(64, 4096, 7168, 132, False, False, 64, 32, 16)
    assert cfg.num_stages == 16 and cfg.smem_bytes <= h.SMEM_LIMIT
    with pytest.raises(ValueError, match=r"num_stages 17 outside \[2, 16\]"):
        h.make_config(64, 4096, 7168, 132, False, False, 64, 32, 17)
    with pytest.raises(ValueError, match=r"num_stages 14 outside \[2, 13\]"):  # 14 x 16.4 KB does not fit
        h.make_config(64, 4096, 7168, 132, False, False, 64, 64, 14)
    with pytest.raises(ValueError, match="num_stages"):  # two CTAs per SM: half the shared memory
        h.make_config(64, 4096, 7168, 132, False, False, 64, 32, 16, ctas_per_sm=2)


@pytest.mark.parametrize("shape", [(64, 4096, 7168), (128, 2112, 7168), (1, 7168, 16384)])
def test_tuner_times_deep_ring_twins_of_narrow_tiles(shape):
    """The tuner's candidates include, for narrow tiles, the same configuration with the deepest
    ring that fits (capped by the k-blocks a unit runs); nothing else differs."""
    cands = h.candidate_configs(*shape, 132)
    base = {(c.block_m, c.block_n, c.num_splits, c.num_multicast, c.multicast_on_a, c.tma_store, c.ctas_per_sm,
             c.k_batch): c
            for c in cands if c.num_stages <= h.MODEL_MAX_STAGES and not c.half_promote}
    deep = [c for c in cands if c.num_stages > h.MODEL_MAX_STAGES]
    assert deep, shape
    # k-batch twins get deep rings too (v0.20: only the pair speeds both sides of a skinny loop).
    assert any(c.k_batch > 1 for c in deep) and any(c.k_batch == 1 for c in deep), shape
    k_blocks = ceil_div(shape[2], 128)
    for c in deep:
        key = (c.block_m, c.block_n, c.num_splits, c.num_multicast, c.multicast_on_a, c.tma_store, c.ctas_per_sm,
               c.k_batch)
        assert key in base, c
        assert c.num_stages == min(h.max_stages(c.block_m, c.block_n, c.tma_store, ctas_per_sm=c.ctas_per_sm,
                                                cap=h.MAX_STAGES),
                                   max(ceil_div(k_blocks, c.num_splits), base[key].num_stages)), c
        assert not c.half_promote and c.k_batch <= c.num_stages
    assert len({(c.block_m, c.block_n, c.num_stages, c.num_splits, c.num_multicast, c.multicast_on_a, c.tma_store,
                 c.ctas_per_sm, c.k_batch) for c in deep}) == len(deep)  # no duplicates


def test_no_deep_ring_twins_where_the_ring_is_already_smem_bound():
    assert all(c.num_stages <= h.MODEL_MAX_STAGES for c in h.candidate_configs(4096, 4096, 7168, 132))


def test_tuner_times_two_cta_bn128_where_it_fills_one_wave():
    """64x32768x512: 256 tiles of 64x128 are one wave at two CTAs per SM; the tuner must time that
    configuration (the shipped entry, v0.20) with and without the TMA-store epilogue."""
    cands = h.candidate_configs(64, 32768, 512, 132)
    two = {(c.block_n, c.tma_store) for c in cands if c.ctas_per_sm == 2 and c.block_m == 64}
    assert (128, True) in two and (128, False) in two
    for c in cands:
        if c.ctas_per_sm == 2:
            assert c.smem_bytes <= h.SMEM_LIMIT_2CTA and c.num_units <= 2 * 132


def test_tune_block_m_filter_keeps_todays_selection_first():
    """`tune --block-m 192`: today's selection (table or model) first, then only block_m 192
    candidates, each launch once; without the option the candidate list is untouched."""
    from finegemm.bench.tune import _restrict

    args = (4096, 7168, 4096, 132, True, True)
    cands = h.candidate_configs(*args, one_d_one_d=True)
    current = h.select_config(*args, one_d_one_d=True)
    out = _restrict(cands, current, 192)
    assert out[0] == current and current.block_m != 192
    assert len(out) > 1 and all(c.block_m == 192 for c in out[1:])
    assert len({(c.kernel_key(), c.grid) for c in out}) == len(out)
    assert _restrict(cands, current, None) is cands


def test_tune_half_promote_filter_keeps_todays_selection_first():
    """`tune masked --half-promote`: today's selection first, then only half-promoted candidates (the
    serial halves at bm128 x 224 / 256), each launch once; and their rows carry half_promote (a
    grouped entry without it would name a tile the kernel does not build)."""
    from finegemm.bench.tune import _grouped_row, _restrict

    args = (h.GEMM_GROUPED_MASKED, 1152, 4096, 7168, 1, 132, 1024, 0)
    cands = h.grouped_candidate_configs(*args)
    current = h.select_grouped_config(*args)
    out = _restrict(cands, current, None, half_promote=True)
    assert out[0] == current
    assert len(out) > 1 and all(c.half_promote and c.block_n in h.SERIAL_HALVES_BLOCK_N for c in out[1:])
    assert len({(c.kernel_key(), c.grid) for c in out}) == len(out)
    assert all(_grouped_row(c)["half_promote"] == c.half_promote for c in out)


def test_masked_three_warpgroup_tiles():
    """The masked kind plans 192-row tiles (three consumer warpgroups, no multicast) where they pad
    fewer rows than 128-row tiles; contiguous groups and other group sizes keep 64 / 128."""
    masked, cont = h.GEMM_GROUPED_MASKED, h.GEMM_GROUPED_CONTIGUOUS
    for em in (130, 192, 520, 576):  # ceil(em / 192) * 192 < ceil(em / 128) * 128
        cfg = h.select_grouped_config(masked, ceil_div(em, 128) * 128, 4096, 7168, 8, 132, em, 0)
        bms = {c[1] for c in h._grouped_model_candidates(masked, ceil_div(em, 128) * 128, 4096, 7168, 8, 132, em, 0)}
        assert h.THREE_WG_BLOCK_M in bms, em
        if em == 192:
            assert (cfg.block_m, cfg.num_multicast) == (h.THREE_WG_BLOCK_M, 1)
            assert cfg.num_threads == 512
    for em in (64, 128, 200, 256, 320, 384, 1024):  # equal or more padding with 192 rows
        bms = {c[1] for c in h._grouped_model_candidates(masked, ceil_div(em, 128) * 128, 4096, 7168, 8, 132, em, 0)}
        assert h.THREE_WG_BLOCK_M not in bms, em
    assert all(c[1] != h.THREE_WG_BLOCK_M for c in h._grouped_model_candidates(cont, 34048, 4096, 7168, 4, 132, 0, 128))
    assert all(c[3] == 1 for c in h._grouped_model_candidates(masked, 256, 4096, 7168, 32, 132, 192, 0)
               if c[1] == h.THREE_WG_BLOCK_M)
    with pytest.raises(ValueError, match="block_m 192: no multicast"):
        h.make_grouped_config(masked, 256, 4096, 7168, 32, 132, 192, 0, 192, 128, 4, 2, True)
    with pytest.raises(ValueError, match="block_m in"):
        h.make_grouped_config(cont, 34048, 4096, 7168, 4, 132, 0, 128, 192, 128, 4, 1, True)
    with pytest.raises(ValueError, match="block_n a multiple of 16 <= 144"):
        h.make_grouped_config(masked, 256, 4096, 7168, 32, 132, 192, 0, 192, 160, 4, 1, True)


def test_split_k_with_multicast_is_recipe_1d2d_only():
    """Split-K and a multicast pair combine for recipe (1, 128, 128) (the partials through the
    workspace; a pair's CTAs take the same split): a cluster unit is one pair's split, so the grid
    holds pairs of units; recipe (1, 1, 128) keeps them apart (its kernel does not build it)."""
    from finegemm.ops import sm90_fp8_gemm as ops

    cfg = h.make_config(128, 4096, 7168, 132, False, False, 128, 64, 8, 2, num_multicast=2, multicast_on_a=True)
    assert cfg.split_k and cfg.num_multicast == 2 and cfg.multicast_on_a
    assert cfg.num_units == 64 * 2 and cfg.grid == 128 and cfg.workspace_floats == 64 * 2 * 128 * 64
    src = ops.render(128, 64, 8, False, False, True, 2, True)
    assert "sm90_fp8_gemm_1d2d<128, 64, 8, false, false, true,\n" in src and "2, true, false, false, 0>" in src
    with pytest.raises(ValueError, match="multicast"):
        h.make_config(128, 4096, 7168, 132, True, False, 128, 64, 4, 2, num_multicast=2, one_d_one_d=True)
    with pytest.raises(ValueError, match="split-K and multicast"):
        ops.render(128, 64, 4, True, False, True, 2, True, one_d_one_d=True)


def test_grouped_model_tile_no_wider_than_n():
    """Where N fits one n-block, the m-grouped model's tile is no wider than N (rounded to 16): the
    widest tile of tied estimates would only read the next group's B rows (N = 128: not bn208)."""
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED, select_grouped_config

    for kind, m, n, k, g, em in [(GEMM_GROUPED_MASKED, 64, 128, 512, 128, 64), (GEMM_GROUPED_MASKED, 4096, 128, 512,
                                                                                 128, 4096),
                                 (GEMM_GROUPED_MASKED, 100, 136, 256, 128, 100),
                                 (GEMM_GROUPED_CONTIGUOUS, 128 * 64, 40, 512, 64, 0)]:
        cfg = select_grouped_config(kind, m, n, k, g, 132, em, 128 if kind == GEMM_GROUPED_CONTIGUOUS else 0)
        assert cfg.block_n <= -(-n // 16) * 16, (kind, m, n, cfg.block_n)
