"""Tests of the SM90 BF16 GEMM heuristic (finegemm/heuristics/sm90_bf16_gemm.py); no GPU needed."""
from __future__ import annotations

import json

import pytest

from finegemm.heuristics import sm90_bf16_gemm as h
from finegemm.heuristics import tuned
from finegemm.ops import sm90_bf16_gemm as ops
from finegemm.utils import ceil_div

SMS = 132
BENCH_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
SHAPES = ([(m, n, k) for m in (1, 17, 64, 128, 4096, 4097) for n, k in BENCH_NK] +
          [(m, n, k) for m in (1, 17, 128, 4097) for n in (576, 2112, 7168) for k in (512, 7168, 4104)] +
          [(64, 256, 7168), (4096, 129280, 7168), (8192, 8192, 8192), (3, 16, 8), (1, 8, 8)])


def test_smem_mirrors_kernel_layout():
    # Sm90Bf16GemmTraits: staging + stages * (A + B tiles) + 2 barriers per stage + flag + 1 KB slack.
    assert h.smem_bytes(128, 128, 4, False) == 1024 + 4 * (128 * 128 + 128 * 128) + 4 * 16 + 16
    assert h.smem_bytes(64, 256, 3, True) == 1024 + 64 * 256 * 2 + 3 * (64 * 128 + 256 * 128) + 3 * 16 + 16


@pytest.mark.parametrize("tma", [False, True])
def test_max_stages_fit(tma):
    for bm in (64, 128):
        for b_mn in (False, True):
            for bn in h.block_n_candidates(b_mn):
                for cap in (h.MODEL_MAX_STAGES, h.MAX_STAGES):
                    st = h.max_stages(bm, bn, tma, cap=cap)
                    assert h.MIN_STAGES <= st <= cap
                    assert h.smem_bytes(bm, bn, st, tma) <= h.SMEM_LIMIT
                    if st < cap:
                        assert h.smem_bytes(bm, bn, st + 1, tma) > h.SMEM_LIMIT
                assert h.max_stages(bm, bn, tma) == h.max_stages(bm, bn, tma, cap=h.MODEL_MAX_STAGES)


def test_block_n_candidates():
    assert all(bn % 16 == 0 and 16 <= bn <= 256 for bn in h.block_n_candidates(False))
    # whole 64-column TMA boxes of an N-major B, or one 32-column box (64-byte swizzle)
    assert all(bn % 64 == 0 or bn == 32 for bn in h.block_n_candidates(True))


@pytest.mark.parametrize("layout", sorted(h.LAYOUTS))
@pytest.mark.parametrize("out_fp32,has_c", [(False, False), (True, False), (True, True)])
def test_select_config_valid_and_in_kernel_space(layout, out_fp32, has_c, monkeypatch):
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")  # the model's own choices
    a_mn, b_mn = h.LAYOUTS[layout]
    keys = set(h.all_kernel_keys())
    for m, n, k in SHAPES:
        cfg = h.select_config(m, n, k, SMS, a_mn, b_mn, out_fp32, has_c)
        assert cfg.kernel_key() in keys, (m, n, k, cfg)
        assert cfg.a_mn_major == a_mn and cfg.b_mn_major == b_mn
        assert cfg.block_m in (64, 128) and (m > 64 or cfg.block_m == 64)
        assert cfg.block_n in h.block_n_candidates(b_mn)
        assert cfg.num_tiles == ceil_div(m, cfg.block_m) * ceil_div(n, cfg.block_n)
        assert cfg.num_units == cfg.num_tiles * cfg.num_splits
        assert 1 <= cfg.grid <= SMS and cfg.grid <= cfg.num_units
        assert 1 <= cfg.num_splits <= ceil_div(k, h.BLOCK_K)
        assert cfg.smem_bytes == h.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages, cfg.tma_store)
        assert cfg.smem_bytes <= h.SMEM_LIMIT
        assert cfg.num_threads == (cfg.block_m // 64 + 1) * 128
        if cfg.split_k:
            assert (cfg.block_m, cfg.block_n) in h.MODEL_SPLIT_TILES
            assert 2 * cfg.num_tiles <= SMS
            assert ceil_div(k, h.BLOCK_K) // cfg.num_splits >= h.MIN_KB_PER_SPLIT
            assert cfg.workspace_floats == cfg.num_tiles * cfg.num_splits * cfg.block_m * cfg.block_n
            assert cfg.num_counters == cfg.num_tiles and not cfg.tma_store
        else:
            assert cfg.workspace_floats == 0 and cfg.tma_store


def test_split_k_for_skinny_long_k_and_not_for_big():
    cfg = h.select_config(1, 2112, 7168, SMS)
    assert cfg.split_k and cfg.num_units > 2 * cfg.num_tiles
    cfg = h.select_config(64, 576, 7168, SMS, False, True)
    assert cfg.split_k
    for layout in h.LAYOUTS.values():
        assert not h.select_config(4096, 7168, 7168, SMS, *layout).split_k
        assert not h.select_config(8192, 8192, 8192, SMS, *layout).split_k
    assert not h.select_config(1, 2112, 7168, SMS, allow_split_k=False).split_k


def test_big_shapes_use_big_tiles():
    for a_mn, b_mn in h.LAYOUTS.values():
        cfg = h.select_config(8192, 8192, 8192, SMS, a_mn, b_mn)
        assert cfg.block_m == 128 and cfg.block_n >= 128, cfg
        assert cfg.grid == SMS


def test_all_kernel_keys():
    keys = h.all_kernel_keys()
    assert len(keys) == len(set(keys))
    # The B-group kernels the shipped table's entries pick: a one-k-block kernel's key plus the group.
    grouped = [k for k in keys if len(k) == 8]
    assert grouped and all(k[7] in (2, 4) and k[:7] in keys and not k[4] for k in grouped)
    keys = [k for k in keys if len(k) == 7]
    n_k = len(h.BLOCK_N_K_MAJOR)
    n_mn = len(h.BLOCK_N_MN_MAJOR)
    n_split = sum(len(h.SPLIT_BLOCK_M) * len([bn for bn in h.SPLIT_BLOCK_N if bn in h.block_n_candidates(b_mn)])
                  for _, b_mn in h.LAYOUTS.values())
    model = [k for k in keys if k[2] == h.model_stages(k[0], k[1], k[6], k[4])]
    assert len(model) == 2 * 2 * (n_k + n_mn) + n_split
    for bm, bn, st, a_mn, b_mn, split, tma in keys:
        assert tma == (not split)
        # The model's ring, all that fit (a tuned entry's full-ring twin), or the deepest that fits
        # (a deep-ring twin).
        assert st in (h.model_stages(bm, bn, tma, b_mn), h.max_stages(bm, bn, tma),
                      h.max_stages(bm, bn, tma, cap=h.MAX_STAGES))
    # The model holds an N-major B's ring to ~96 KB of B: bm64 bn256 / 192 / 128 at 3 / 4 / 6 stages
    # (4 / 6 / 8 fit), and their full rings stay buildable (the shipped H200 entries name them).
    for bn, ring, full in ((256, 3, 4), (192, 4, 6), (128, 6, 8)):
        assert h.model_stages(64, bn, True, True) == ring and h.max_stages(64, bn, True) == full
        assert h.model_stages(64, bn, True, False) == full  # a K-major B keeps every stage
        for a_mn in (False, True):
            assert (64, bn, ring, a_mn, True, False, True) in model
            assert (64, bn, full, a_mn, True, False, True) in keys
    deep = [k for k in keys if k[2] > h.MODEL_MAX_STAGES]
    assert deep and all(k[2] == h.max_stages(k[0], k[1], k[6], cap=h.MAX_STAGES) for k in deep)
    assert (64, 32, 16, False, False, False, True) in deep  # 12 KB per stage: 16 fit


def test_tuned_entries_keep_their_ring_and_are_checked():
    """make_config takes a tuned entry's stage count (up to the kernel's 16 and what fits) and
    rejects one outside that, naming the limit; the tuner's deep-ring twins are such configs."""
    cfg = h.make_config(64, 4096, 7168, SMS, False, False, False, False, 64, 32, 1, num_stages=16)
    assert cfg.num_stages == 16 and cfg.smem_bytes == h.smem_bytes(64, 32, 16, True) <= h.SMEM_LIMIT
    assert cfg.kernel_key() in set(h.all_kernel_keys())
    assert h.make_config(64, 4096, 7168, SMS, False, False, False, False, 64, 32, 1).num_stages == h.MODEL_MAX_STAGES
    with pytest.raises(ValueError, match=r"num_stages 17 outside \[2, 16\]"):
        h.make_config(64, 4096, 7168, SMS, False, False, False, False, 64, 32, 1, num_stages=17)
    with pytest.raises(ValueError, match=r"num_stages 1 outside"):
        h.make_config(64, 4096, 7168, SMS, False, False, False, False, 64, 32, 1, num_stages=1)
    cands = h.candidate_configs(64, 4096, 7168, SMS)
    deep = [c for c in cands if c.num_stages > h.MODEL_MAX_STAGES]
    assert deep
    keys = set(h.all_kernel_keys())
    for c in deep:
        assert c.kernel_key() in keys and c.smem_bytes == h.smem_bytes(c.block_m, c.block_n, c.num_stages, c.tma_store)
        twin = [b for b in cands if (b.block_m, b.block_n, b.num_splits) == (c.block_m, c.block_n, c.num_splits)
                and b.num_stages == h.max_stages(b.block_m, b.block_n, b.tma_store)]
        assert twin, c


def test_cache_and_errors():
    h.clear_cache()
    a = h.select_config(128, 2112, 7168, SMS)
    assert h.select_config(128, 2112, 7168, SMS) is a
    with pytest.raises(ValueError):
        h.select_config(0, 16, 16, SMS)
    with pytest.raises(ValueError):
        h.select_config(16, 16, 16, SMS, has_c=True)  # C needs fp32


def test_print_configs(monkeypatch, capsys):
    h.clear_cache()
    monkeypatch.setenv("FINEGEMM_PRINT_CONFIGS", "1")
    h.select_config(17, 576, 512, SMS, True, False)
    err = capsys.readouterr().err
    assert "sm90_bf16_gemm tt m=17 n=576 k=512" in err and "block_m=64" in err


def test_tuned_entries_override_the_model(tmp_path, monkeypatch):
    # A bf16 entry (kind bf16_<layout>) replaces the model's choice for its layout and nearby M / K
    # only; an entry outside the kernel space is ignored (the model decides), never fatal.
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    model = h.select_config(128, 4096, 7168, SMS)
    assert (model.block_m, model.block_n, model.num_splits) != (128, 64, 1)

    def entry(layout, **cfg):
        c = {"block_m": 128, "block_n": 64, "num_stages": h.max_stages(128, 64, True),
             "num_splits": 1, "num_multicast": 1,
             "multicast_on_a": False, "tma_store": True, "half_promote": False, **cfg}
        return {"kind": f"bf16_{layout}", "num_sms": SMS, "m": 128, "n": 4096, "k": 7168, "out_fp32": False,
                "has_c": False, "config": c, "us": 1.0, "model_us": 2.0}

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "entries": [entry("nt"), entry("tt", block_n=48, num_splits=2)]}))
    empty = tmp_path / "shipped.json"  # only the user table here (the shipped one has these shapes too)
    empty.write_text(json.dumps({"version": 1, "entries": []}))
    monkeypatch.setattr(tuned, "SHIPPED_BF16_TABLE", empty)
    monkeypatch.delenv(tuned.DISABLE_TUNED_ENV)
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    tuned.clear()
    cfg = h.select_config(128, 4096, 7168, SMS)
    assert (cfg.block_m, cfg.block_n, cfg.num_splits, cfg.est_us) == (128, 64, 1, 0.0)
    assert cfg.num_stages == h.max_stages(128, 64, True)  # the entry's ring
    assert cfg.kernel_key() in set(h.all_kernel_keys()) and cfg.grid == 64 and cfg.tma_store
    assert h.select_config(100, 4096, 5000, SMS).block_n == 64  # nearest M / K within 2x
    assert h.select_config(128, 4096, 7168, SMS, False, True) == h._model_config(128, 4096, 7168, SMS, False, True,
                                                                                  False, False, True)  # nn: no entry
    assert h.select_config(128, 4096, 7168, SMS, allow_split_k=False).block_n == 64
    # tt names split-K with block_n 48: not a split kernel of the space -> the model decides
    tt = h.select_config(128, 4096, 7168, SMS, True, False)
    assert tt == h._model_config(128, 4096, 7168, SMS, True, False, False, False, True)


def test_make_config_rejects_tiles_outside_the_space():
    with pytest.raises(ValueError, match="block 128x48"):
        h.make_config(128, 4096, 7168, SMS, False, True, False, False, 128, 48, 1)  # N-major B: 64-column boxes
    with pytest.raises(ValueError, match="split-K needs"):
        h.make_config(128, 4096, 7168, SMS, False, False, False, False, 128, 256, 2)
    with pytest.raises(ValueError, match="num_splits"):
        h.make_config(128, 4096, 128, SMS, False, False, False, False, 128, 64, 3)  # 2 k-blocks
    cfg = h.make_config(128, 4096, 7168, SMS, False, False, False, False, 128, 64, 2)
    assert cfg.num_units == 128 and cfg.grid == 128 and not cfg.tma_store and cfg.workspace_floats == 64 * 2 * 128 * 64


def test_candidates_start_with_the_model_choice_and_are_in_the_space(monkeypatch):
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    keys = set(h.all_kernel_keys())
    for m, n, k in [(128, 4096, 7168), (64, 256, 7168), (4096, 4096, 7168)]:
        for a_mn, b_mn in h.LAYOUTS.values():
            cands = h.candidate_configs(m, n, k, SMS, a_mn, b_mn)
            assert cands[0] == h.select_config(m, n, k, SMS, a_mn, b_mn)
            tiles = [(c.block_m, c.block_n, c.num_splits) for c in cands]
            assert len(cands) == len({(c.block_m, c.block_n, c.num_splits, c.num_stages) for c in cands})
            assert all(c.kernel_key() in keys for c in cands)
            if m == 128 and not b_mn:  # the skinny family the model misjudges is always timed
                assert (128, 32, 1) in tiles and (128, 64, 2) in tiles
            # an N-major B's bm64 bn256 tile: the model's ring (3 stages) and the full one (4) are timed
            ring = [c.num_stages for c in cands if c.block_m == 64 and c.block_n == 256 and c.num_splits == 1]
            if ring and b_mn:
                assert h.model_stages(64, 256, True, True) in ring and h.max_stages(64, 256, True) in ring
            elif ring:
                assert h.model_stages(64, 256, True, True) not in ring


def test_shipped_bf16_table_entries_are_buildable_and_consulted(monkeypatch):
    data = json.loads(tuned.SHIPPED_BF16_TABLE.read_text())
    assert data["version"] == 1
    monkeypatch.delenv(tuned.TUNED_FILE_ENV, raising=False)
    monkeypatch.delenv(tuned.DISABLE_TUNED_ENV, raising=False)
    keys = set(h.all_kernel_keys())
    gkeys = set(h.grouped_kernel_keys())
    for e in data["entries"]:
        assert e["kind"].startswith("bf16_") and not e["has_c"]
        c = e["config"]
        if e["kind"].startswith((h.MASKED_KIND_PREFIX, h.CONTIGUOUS_KIND_PREFIX)):  # m-grouped entries
            masked = e["kind"].startswith(h.MASKED_KIND_PREFIX)
            g = int(e["kind"].rsplit("_g", 1)[1])
            kind = h.GEMM_GROUPED_MASKED if masked else h.GEMM_GROUPED_CONTIGUOUS
            m = (e["m"] + 127) // 128 * 128 + 128 if masked else e["m"]  # as the tuner planned it
            picked = h.select_grouped_config(kind, m, e["n"], e["k"], g, e["num_sms"], e["m"] if masked else 0, 128)
            assert (picked.block_m, picked.block_n) == (c["block_m"], c["block_n"])
            assert picked.grouped_kernel_key() in gkeys
            continue
        a_mn, b_mn = h.LAYOUTS[e["kind"][len("bf16_"):]]
        picked = h.select_config(e["m"], e["n"], e["k"], e["num_sms"], a_mn, b_mn, e["out_fp32"])
        assert (picked.block_m, picked.block_n, picked.num_splits, picked.num_stages) == \
            (c["block_m"], c["block_n"], c["num_splits"], c["num_stages"])
        assert picked.b_group == c.get("b_group", 1)  # every shipped group fits its entry's shape
        assert picked.kernel_key() in keys
        assert e["us"] <= e["model_us"], "the tuner keeps the model's choice unless a candidate beats it"


@pytest.mark.parametrize("kind", [h.GEMM_GROUPED_CONTIGUOUS, h.GEMM_GROUPED_MASKED])
def test_grouped_candidates_cover_the_space_model_first(kind, monkeypatch):
    """The m-grouped tuner times every tile the layout allows, the model's choice first, each
    exactly as make_grouped_config plans it and each a kernel of grouped_kernel_keys()."""
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    h.clear_cache()
    gkeys = set(h.grouped_kernel_keys())
    for m, n, k, g, em, al in [(34151, 4096, 7168, 4, 0, 128), (1152, 7168, 2048, 1, 1024, 0),
                               (320, 4096, 7168, 32, 20, 0), (4096, 576, 512, 4, 0, 64),
                               (256, 4096, 7168, 32, 192, 0), (384, 4096, 7168, 32, 320, 0)]:
        cands = h.grouped_candidate_configs(kind, m, n, k, g, SMS, em, al)
        assert cands[0] == h.select_grouped_config(kind, m, n, k, g, SMS, em, al)
        bms, _ = h.grouped_block_m_options(kind == h.GEMM_GROUPED_CONTIGUOUS, m, em, al, "BF16")
        tiles = [(c.block_m, c.block_n) for c in cands]
        assert sorted(tiles) == sorted((bm, bn) for bm in bms for bn in h.grouped_block_ns(kind, bm))
        # block_m 192 (three consumer warpgroups): masked groups where it pads fewer rows than 128.
        rows = min(em or m, m)
        assert (h.THREE_WG_BLOCK_M in bms) == (kind == h.GEMM_GROUPED_MASKED and
                                               ceil_div(rows, 192) * 192 < ceil_div(rows, 128) * 128)
        for c in cands:
            assert c == h.make_grouped_config(kind, m, n, k, g, SMS, em, al, c.block_m, c.block_n)
            assert c.grouped_kernel_key() in gkeys and c.gemm_kind == kind and c.num_groups == g


def test_three_warpgroup_tiles_are_masked_only(monkeypatch):
    """block_m 192 is a masked tile where it pads fewer rows than 128-row tiles (129-192, 513-576,
    ... planned rows per group), with its own block_n set; contiguous (block_m must divide the
    alignment) and other group sizes never get it; the model picks it at m = 192."""
    masked, cont = h.GEMM_GROUPED_MASKED, h.GEMM_GROUPED_CONTIGUOUS
    cfg = h.make_grouped_config(masked, 256, 4096, 7168, 32, SMS, 192, 0, 192, 128)
    assert (cfg.block_m, cfg.num_threads, cfg.num_stages) == (192, 512, h.max_stages(192, 128, True))
    assert cfg.num_tiles == 32 * 1 * 32  # one m-block per group
    assert cfg.grouped_kernel_key() in set(h.grouped_kernel_keys())
    with pytest.raises(ValueError, match=r"block_m 192: \(64, 128\)"):
        h.make_grouped_config(masked, 256, 4096, 7168, 32, SMS, 192, 0, 192, 192)
    for em in (128, 320):  # 192-row tiles would pad as many rows (or more): not offered
        with pytest.raises(ValueError, match=r"block_m in \[64, 128\]"):
            h.make_grouped_config(masked, 384, 4096, 7168, 32, SMS, em, 0, 192, 128)
    assert h.make_grouped_config(masked, 640, 4096, 7168, 2, SMS, 576, 0, 192, 64).num_tiles == 2 * 3 * 64
    with pytest.raises(ValueError, match=r"block_m in"):
        h.make_grouped_config(cont, 4096, 4096, 7168, 4, SMS, 0, 128, 192, 128)
    with pytest.raises(ValueError, match="block_m must be one of"):
        ops.render_grouped(192, 128, 4, cont)
    assert "finegemm_entry" in ops.render_grouped(192, 128, 4, masked)
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    h.clear_cache()
    assert h.select_grouped_config(masked, 256, 4096, 7168, 32, SMS, 192, 0).block_m == 192
    assert h.select_grouped_config(masked, 384, 4096, 7168, 32, SMS, 320, 0).block_m == 128


def test_make_grouped_config_rejects_tiles_outside_the_space():
    with pytest.raises(ValueError, match=r"block_n in \(64, 128, 192, 256\)"):
        h.make_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, 4096, 4096, 7168, 4, SMS, 0, 128, 128, 224)
    # bn256 is in the contiguous space (the padding rows are masked at the store: spill-free).
    assert h.make_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, 4096, 4096, 7168, 4, SMS, 0, 128, 128, 256).block_n == 256
    with pytest.raises(ValueError, match=r"block_m in"):  # alignment 64: block_m 64 only
        h.make_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, 4096, 4096, 7168, 4, SMS, 0, 64, 128, 128)
    with pytest.raises(ValueError, match="kind must be a grouped kind"):
        h.make_grouped_config(h.GEMM_NORMAL, 4096, 4096, 7168, 4, SMS, 0, 128, 128, 128)


def test_grouped_tuned_entries_override_the_model(tmp_path, monkeypatch):
    """A bf16_masked_g<G> entry (keyed by the expected m) or bf16_contiguous_g<G> entry (keyed by
    the stacked rows) replaces the model's tile for its G only; an entry naming a tile outside the
    space is ignored with a warning (the model decides), never fatal."""
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    h.clear_cache()
    masked_model = h.select_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 4, SMS, 1024, 0)
    cont_model = h.select_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, 34151, 4096, 7168, 4, SMS, 0, 128)
    pick_m = next((bm, bn) for bm in (64, 128) for bn in h.GROUPED_BLOCK_N[h.GEMM_GROUPED_MASKED]
                  if (bm, bn) != (masked_model.block_m, masked_model.block_n))
    pick_c = next((bm, bn) for bm in (64, 128) for bn in h.GROUPED_BLOCK_N[h.GEMM_GROUPED_CONTIGUOUS]
                  if (bm, bn) != (cont_model.block_m, cont_model.block_n))

    def entry(kind, m, n, k, tile):
        c = {"block_m": tile[0], "block_n": tile[1], "num_stages": h.max_stages(*tile, True), "num_splits": 1,
             "num_multicast": 1, "multicast_on_a": False, "tma_store": True, "half_promote": False}
        return {"kind": kind, "num_sms": SMS, "m": m, "n": n, "k": k, "out_fp32": False, "has_c": False,
                "config": c, "us": 1.0, "model_us": 2.0}

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "entries": [
        entry(f"{h.MASKED_KIND_PREFIX}4", 1024, 7168, 2048, pick_m),
        entry(f"{h.CONTIGUOUS_KIND_PREFIX}4", 34151, 4096, 7168, pick_c),
        entry(f"{h.MASKED_KIND_PREFIX}2", 1024, 7168, 2048, (64, 96)),  # no such grouped tile
    ]}))
    monkeypatch.delenv(tuned.DISABLE_TUNED_ENV)
    monkeypatch.setenv(tuned.TUNED_FILE_ENV, str(path))
    tuned.clear()
    h.clear_cache()
    got = h.select_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 4, SMS, 1024, 0)
    assert (got.block_m, got.block_n) == pick_m and got.num_stages == h.max_stages(*pick_m, True)
    got = h.select_grouped_config(h.GEMM_GROUPED_CONTIGUOUS, 34151, 4096, 7168, 4, SMS, 0, 128)
    assert (got.block_m, got.block_n) == pick_c
    # Other G: no entry -> the model; a tile outside the space -> the model.
    assert h.select_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 8, SMS, 1024, 0) == \
        h.make_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 8, SMS, 1024, 0, *_model_tile(8))
    assert (h.select_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 2, SMS, 1024, 0).block_n
            in h.GROUPED_BLOCK_N[h.GEMM_GROUPED_MASKED])
    tuned.clear()


def _model_tile(g):
    return h._grouped_model_tile(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, g, SMS, 1024, 0)


def test_grouped_tuner_records_become_bf16_table_entries(tmp_path):
    from finegemm.bench.tune import table_entry
    best = {"block_m": 64, "block_n": 128, "num_stages": h.max_stages(64, 128, True), "num_splits": 1,
            "num_multicast": 1, "multicast_on_a": False, "tma_store": True, "half_promote": False, "ctas_per_sm": 1,
            "k_batch": 1, "us": 10.0}
    for family, prefix in (("bf16_masked", h.MASKED_KIND_PREFIX), ("bf16_contiguous", h.CONTIGUOUS_KIND_PREFIX)):
        e = table_entry({"family": family, "groups": 6, "m": 1024, "n": 7168, "k": 2048, "best": best,
                         "model_us": 12.0}, SMS, {})
        assert e["kind"] == f"{prefix}6" and e["config"]["block_n"] == 128 and e["us"] == 10.0
        path = tmp_path / f"{family}.json"
        tuned.merge_entries(path, [e])
        assert json.loads(path.read_text())["entries"][0]["kind"] == f"{prefix}6"


def test_forced_grouped_config_must_be_of_the_problem():
    """ops.plan_grouped(config=...) (the tuner's path) refuses a configuration planned for another
    problem before anything is compiled or launched."""
    from finegemm.ops import sm90_bf16_gemm as ops
    cfg = h.make_grouped_config(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 4, SMS, 1024, 0, 64, 128)
    for args in [(h.GEMM_GROUPED_MASKED, 1152, 7168, 2048, 8), (h.GEMM_GROUPED_CONTIGUOUS, 1152, 7168, 2048, 4),
                 (h.GEMM_GROUPED_MASKED, 1152, 4096, 2048, 4)]:
        with pytest.raises(ValueError, match="is not one of this m-grouped problem"):
            ops.plan_grouped(*args, 1024, 0, 0, config=cfg)


@pytest.mark.parametrize("m", [65, 100, 112, 128])
@pytest.mark.parametrize("n,k", [(6144, 4096), (8192, 28672), (4096, 11008), (256, 7168)])
@pytest.mark.parametrize("a_mn_major", [False, True])
def test_model_takes_one_128_row_block_for_m_65_to_128(m, n, k, a_mn_major, monkeypatch):
    """65 <= M <= 128 (112 with MN-major A, whose boxes are not fitted) with N >= MODEL_BM128_MIN_N:
    the model's pick is one 128-row m-block (two of 64 read every B tile twice; NOTES v0.67, v0.69);
    below the bound the estimate decides as before; narrow N keeps the bm64 split-K tiles; the tuner
    times both block_m."""
    monkeypatch.setenv(tuned.DISABLE_TUNED_ENV, "1")
    cfg = h.select_config(m, n, k, SMS, a_mn_major)
    min_m = h.MODEL_BM128_MIN_M_MN_MAJOR_A if a_mn_major else h.MODEL_BM128_MIN_M
    assert h.MODEL_BM128_MIN_M == 65 and h.MODEL_BM128_MIN_M_MN_MAJOR_A == 112
    if n >= h.MODEL_BM128_MIN_N and m >= min_m:
        assert cfg.block_m == 128
    elif n < h.MODEL_BM128_MIN_N:
        assert cfg.block_m == 64 and cfg.num_splits > 1  # the router shape: split-K on bm64 tiles
    elif (n, k) == (4096, 11008):  # MN-major A: bm64 (split-K) was 1.1-1.4x faster at M = 65-100 (v0.67)
        assert cfg.block_m == 64
    cands = h.candidate_configs(m, n, k, SMS, a_mn_major)
    assert cands[0] == cfg and {c.block_m for c in cands} == {64, 128}


def test_grouped_model_tile_no_wider_than_n():
    """As the FP8 model: where N fits one n-block the tile is the narrowest candidate covering it
    (N = 128: bn128, not bn256)."""
    from finegemm.heuristics.sm90_bf16_gemm import GEMM_GROUPED_MASKED, grouped_block_ns, select_grouped_config

    for m, n, k, g in [(64, 128, 512, 128), (4096, 128, 512, 128), (64, 100, 512, 16)]:
        cfg = select_grouped_config(GEMM_GROUPED_MASKED, m, n, k, g, 132, m)
        covering = [x for x in grouped_block_ns(GEMM_GROUPED_MASKED, cfg.block_m) if x >= n]
        assert cfg.block_n < n or cfg.block_n == min(covering), (m, n, cfg.block_n)


def test_direct_epilogue_only_for_an_fp32_d_without_split_k():
    """The staging-free twin (forced configs only) is built for an fp32 D without split-K; any other
    request names the argument and the rule."""
    cfg = h.make_config(128, 129280, 7168, SMS, False, False, True, False, 128, 256, 1, num_stages=4,
                        direct_epilogue=True)
    assert not cfg.tma_store and cfg.smem_bytes == h.smem_bytes(128, 256, 4, False)
    assert cfg.kernel_key() == (128, 256, 4, False, False, False, False)
    with pytest.raises(ValueError, match="direct_epilogue: an fp32 D"):
        h.make_config(128, 4096, 7168, SMS, False, False, False, False, 128, 256, 1, direct_epilogue=True)
    with pytest.raises(ValueError, match="direct_epilogue: an fp32 D without split-K"):
        h.make_config(64, 256, 7168, SMS, False, False, True, False, 64, 32, 4, direct_epilogue=True)


def test_multicast_twins_and_entries():
    """`tune bf16 --multicast` times pair twins of the first non-split candidates (A shared where
    there are two n-blocks or more, B where there are two m-blocks or more, each where the layout lets
    a CTA load half the shared operand), with the candidate's ring and L2 promotion; a table entry
    naming a pair plans it back (config_from_fields), and the planner alone never builds one."""
    cands = h.candidate_configs(256, 128256, 4096, SMS)
    twins = h.multicast_twins(cands, SMS)[len(cands):]
    assert twins and all(t.num_multicast == 2 and t.num_splits == 1 and t.grid % 2 == 0 for t in twins)
    assert {t.multicast_on_a for t in twins} == {True, False}
    base = {(c.block_m, c.block_n, c.num_stages) for c in cands if c.num_splits == 1}
    assert all((t.block_m, t.block_n, t.num_stages) in base for t in twins)
    assert not any(c.num_multicast > 1 for c in cands)  # the planner's candidates alone: no pairs
    # One m-block (M = 64): no B-sharing twin; an N-major B takes only 128-multiple tiles as halves.
    skinny = h.candidate_configs(64, 2112, 7168, SMS)
    assert all(t.multicast_on_a for t in h.multicast_twins(skinny, SMS)[len(skinny):])
    tn = h.candidate_configs(256, 128256, 4096, SMS, True, True)
    for t in h.multicast_twins(tn, SMS)[len(tn):]:
        assert (t.block_m if t.multicast_on_a else t.block_n) % 128 == 0
    pair = twins[1]
    fields = {"block_m": pair.block_m, "block_n": pair.block_n, "num_stages": pair.num_stages, "num_splits": 1,
              "num_multicast": 2, "multicast_on_a": pair.multicast_on_a, "tma_store": True, "half_promote": False}
    back = h.config_from_fields(fields, 256, 128256, 4096, SMS, False, False, False, False)
    assert back.kernel_key() == pair.kernel_key() and back.grid == pair.grid
    assert h.config_from_fields({**fields, "num_multicast": 1, "multicast_on_a": False}, 256, 128256, 4096, SMS,
                                False, False, False, False).num_multicast == 1
