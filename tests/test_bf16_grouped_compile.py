"""CPU / compile tests of the m-grouped and k-grouped BF16 GEMMs (no GPU needed; the nvcc tests
need nvcc).

* every m-grouped kernel select_grouped_config can pick (heuristics.grouped_kernel_keys(): both
  kinds, both block_m, every block_n of GROUPED_BLOCK_N[kind]) compiles for sm_90a with 0 spills,
  0 stack frame, no local memory (and, with cuobjdump, HGMMA + TMA loads + stmatrix/TMA stores);
* the rendered sources, the heuristic's rules, the grouped host launcher's argument checks;
* the ops layer on CPU tensors: the psum -> per-row group id conversion matches the reference's,
  and the v1 k-grouped loop (ops.K_GROUPED_SINGLE_LAUNCH = False: one dense tn call per non-empty
  group on row slices) gives the reference result with a stand-in for the dense kernel (the
  one-launch path: tests/test_bf16_k_grouped_cpu.py).
"""
from __future__ import annotations

import re

import pytest
from sass_tools import sass as sass_of
from sass_tools import assert_k_loops_keep_smem_base
import torch

from finegemm import reference
from finegemm.api import _validate as _v
from finegemm.heuristics import sm90_bf16_gemm as heur
from finegemm.ops import sm90_bf16_gemm as ops

BF16 = torch.bfloat16


def test_render_grouped_source():
    src = ops.render_grouped(128, 192, 4, heur.GEMM_GROUPED_MASKED)
    assert "#include <finegemm/impls/sm90_bf16_gemm.cuh>" in src
    assert "__launch_bounds__(384, 1)" in src
    assert "sm90_bf16_gemm<128, 192, 4, false, false, false, true, 2>(" in src
    assert "const int* grouped, uint32_t num_groups" in src
    src = ops.render_grouped(64, 64, 10, heur.GEMM_GROUPED_CONTIGUOUS)
    assert "__launch_bounds__(256, 1)" in src and "sm90_bf16_gemm<64, 64, 10, false, false, false, true, 1>(" in src
    with pytest.raises(ValueError):
        ops.render_grouped(64, 64, 4, 0)  # the dense kind has its own render()
    with pytest.raises(ValueError):
        ops.render_grouped(96, 64, 4, 1)
    with pytest.raises(ValueError):
        ops.render_grouped(64, 120, 4, 1)
    with pytest.raises(ValueError):
        ops.render_grouped(64, 64, 1, 2)
    # The dense template is untouched (no grouped parameters).
    assert "grouped" not in ops.render(128, 256, 3, False, False, False, True)


def test_grouped_compile_check_registered():
    from finegemm import jit

    assert "sm90_bf16_gemm_grouped" in jit.registered_compile_checks()
    labels = [label for label, _ in ops.representative_grouped_configs()]
    assert any("_gcont_" in label for label in labels) and any("_gmask_" in label for label in labels)
    assert len(labels) == len(heur.grouped_kernel_keys())


@pytest.mark.parametrize("kind", [heur.GEMM_GROUPED_CONTIGUOUS, heur.GEMM_GROUPED_MASKED])
def test_grouped_heuristic(kind):
    keys = set(heur.grouped_kernel_keys())
    for m, n, k, g, em in [(32768, 4096, 7168, 8, 0), (300, 576, 7168, 1, 0), (1280, 576, 512, 64, 8),
                           (256, 4096, 7168, 4, 256), (32, 576, 512, 64, 8), (4096, 7168, 2048, 2, 100)]:
        cfg = heur.select_grouped_config(kind, m, n, k, g, 132, em, 128)
        assert cfg.grouped_kernel_key() in keys
        assert cfg.gemm_kind == kind and cfg.num_groups == g and cfg.tma_store and not cfg.split_k
        assert cfg.smem_bytes == heur.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages, True) <= heur.SMEM_LIMIT
        if kind == heur.GEMM_GROUPED_MASKED:
            assert cfg.grid == 132
            if 0 < em <= 64:
                assert cfg.block_m == 64
        else:
            assert 1 <= cfg.grid <= 132
    if kind == heur.GEMM_GROUPED_CONTIGUOUS:
        assert heur.select_grouped_config(kind, 4096, 576, 512, 4, 132, 0, 64).block_m == 64
        with pytest.raises(NotImplementedError):
            heur.select_grouped_config(kind, 4096, 576, 512, 4, 132, 0, 32)
    with pytest.raises(ValueError):
        heur.select_grouped_config(0, 128, 128, 128, 1, 132)


@pytest.mark.parametrize("alignment", [64, 128])
def test_reference_psum_expansion_follows_the_rule(alignment):
    """The reference's psum -> per-row ids (what the GPU layout check is compared with on the
    H200, tests/gpu/test_contiguous_layout_gpu.py): group g owns [align(end_{g-1}), end_g)."""
    from finegemm.reference._common import psum_layout_to_group_ids

    for ends, m in [([200, 200, 328, 390], 512), ([1, 513], 640), ([0, 0, 0], 128), ([128], 128), ([5], 256)]:
        if _v.grouped_layout_violation(torch.tensor(ends), m, len(ends), True, alignment) is not None:
            continue  # only layouts valid for this alignment
        got = psum_layout_to_group_ids(torch.tensor(ends, dtype=torch.int32), m, alignment)
        expect = torch.full((m,), -1, dtype=torch.int32)
        prev = 0
        for g, e in enumerate(ends):
            start = -(-prev // alignment) * alignment
            expect[start:e] = g
            prev = e
        assert torch.equal(got.to(torch.int32), expect), (ends, m, alignment)


@pytest.mark.parametrize("with_c", ["none", "c", "in_place"])
def test_k_grouped_ops_loop(monkeypatch, with_c):
    seen = []

    def fake_dense(a, b, d, c=None, layout="nt"):
        assert layout == "tn" and a.dtype == BF16 and b.dtype == BF16 and d.dtype == torch.float32
        seen.append((a.data_ptr(), a.shape[0]))
        out = a.double().t() @ b.double()
        d.copy_((out + (c.double() if c is not None else 0)).float())

    monkeypatch.setattr(ops, "bf16_gemm", fake_dense)
    monkeypatch.setattr(ops, "K_GROUPED_SINGLE_LAUNCH", False)
    torch.manual_seed(0)
    ks, M, N = [128, 0, 256, 0], 16, 24
    a = torch.randn(sum(ks), M).to(BF16)
    b = torch.randn(sum(ks), N).to(BF16)
    d = torch.full((len(ks), M, N), float("nan"))
    c = None
    if with_c == "c":
        c = torch.randn(len(ks), M, N)
    elif with_c == "in_place":
        d = torch.randn(len(ks), M, N)
        c = d
    c_before = None if c is None else c.clone()
    ops.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c)
    want = reference.k_grouped_bf16_gemm_tn_contiguous(a, b, ks, c=c_before)
    assert torch.allclose(d, want, rtol=1e-5, atol=1e-4)
    # One dense call per non-empty group, on row slices of a (no copies).
    assert seen == [(a.data_ptr(), 128), (a[128:].data_ptr(), 256)]


# ----------------------------------------------------------------------------- nvcc


@pytest.mark.nvcc
def test_every_grouped_kernel_compiles_spill_free():
    from finegemm import jit

    configs = ops.representative_grouped_configs()
    assert len(configs) >= 12
    reports = jit.compile_check([(label, ops.render_grouped(*key)) for label, key in configs],
                                raise_on_failure=False)
    bad = [r for r in reports if not r["ok"]]
    assert not bad, "\n".join(f"{r['label']}: {r['reasons']} {r['error'] or ''}" for r in bad)
    keys = dict(configs)
    for r in reports:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert r["stack_frame"] == 0 and r["lmem"] == 0, r
        sass = sass_of(r["cubin"])
        if sass is None:
            continue
        bm, bn, _, _, b_mn_major = keys[r["label"]]
        hgmma = [line for line in sass.splitlines() if "HGMMA" in line]
        assert hgmma and all(f"HGMMA.64x{bn}x16.F32.BF16" in line for line in hgmma), r["label"]
        # An N-major B (nn) is the only transposed operand; A is always K-major.
        assert all((".tnspB" in line) == b_mn_major for line in hgmma), r["label"]
        assert not any(".tnspA" in line for line in hgmma), r["label"]
        assert "UTMALDG" in sass and "UTMASTG" in sass and "STSM" in sass, r["label"]
        assert not re.search(r"\b(LDL|STL)\b", sass), r["label"]
        assert_k_loops_keep_smem_base(sass, r["label"])


@pytest.mark.nvcc
def test_grouped_host_launcher_rejects_bad_input():
    launch = ops._get_grouped_launcher()
    args = dict(fn=1, a=16, b=16, d=16, grouped=16, m=128, n=64, k=256, lda=256, ldb=256, ldd=64, block_m=64,
                block_n=64, grid=1, smem=100000, kind=1, groups=2, l2=0x33, b_mn=0, ldb_group=0, stream=0)

    def call(**kw):
        x = dict(args, **kw)
        return launch(x["fn"], x["a"], x["b"], x["d"], x["grouped"], x["m"], x["n"], x["k"], x["lda"], x["ldb"],
                      x["ldd"], x["block_m"], x["block_n"], x["grid"], x["smem"], x["kind"], x["groups"], x["l2"],
                      x["b_mn"], x["ldb_group"], x["stream"])

    invalid = 100001  # fg::FG_ERROR_INVALID_ARGUMENT
    assert call(fn=0) == invalid
    assert call(grouped=None) == invalid
    assert call(kind=0) == invalid and call(kind=3) == invalid
    assert call(groups=0) == invalid
    assert call(k=100, lda=104, ldb=104) == invalid
    assert call(lda=250) == invalid
    assert call(ldd=32) == invalid
    assert call(block_m=96) == invalid and call(block_n=120) == invalid
    assert call(grid=0) == invalid
    for bad_l2 in (-1, 0x34, 0x43, 0x100):  # each 4-bit field is a CUtensorMapL2promotion (0..3)
        assert call(l2=bad_l2) == invalid, hex(bad_l2)
    # N-major B ([G, K, N], nn): contiguous kind, whole 64-column boxes, disjoint rows and groups.
    nn = dict(b_mn=1, ldb=64, ldb_group=256 * 64)
    assert call(b_mn=2) == invalid
    assert call(**dict(nn, kind=2)) == invalid
    assert call(**dict(nn, block_n=32)) == invalid
    assert call(**dict(nn, ldb=56)) == invalid  # rows overlap (ldb < n)
    assert call(**dict(nn, ldb_group=255 * 64)) == invalid  # groups overlap (< k * ldb)
    assert call(**dict(nn, ldb_group=256 * 64 + 4)) == invalid  # not a 16-byte multiple
    try:
        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if not has_gpu:
        assert call() == 100000  # fg::FG_ERROR_NO_DRIVER
        for ok_l2 in (0x00, 0x21, 0x32):  # every valid promotion pair passes validation
            assert call(l2=ok_l2) == 100000, hex(ok_l2)
        assert call(**nn) == 100000  # a valid N-major B passes validation
    # The preparer (the API fast path's kept launches) validates the same arguments and hands out no
    # handle on an error; the prepared launcher rejects a null handle and split-K buffers.
    import ctypes

    out = ctypes.c_uint64(12345)

    def prepare(**kw):
        x = dict(args, **kw)
        return ops._grouped_prepare(ctypes.byref(out), x["fn"], x["a"], x["b"], x["d"], x["grouped"], x["m"], x["n"],
                                    x["k"], x["lda"], x["ldb"], x["ldd"], x["block_m"], x["block_n"], x["grid"],
                                    x["smem"], x["kind"], x["groups"], x["l2"], x["b_mn"], x["ldb_group"])

    for bad in (dict(fn=0), dict(kind=3), dict(lda=250), dict(b_mn=1, ldb=64, ldb_group=255 * 64)):
        assert prepare(**bad) == invalid and out.value == 0, bad
        out.value = 12345
    if not has_gpu:
        assert prepare() == 100000 and out.value == 0
    assert ops._grouped_launch_prepared(0, None, None, 0) == invalid
    assert ops._grouped_launch_prepared(1, 16, None, 0) == invalid  # no split-K in the grouped kinds
