"""CPU / compile tests of the one-launch k-grouped BF16 GEMM (kernel kind kBf16GemmKGrouped; no GPU
needed, the nvcc tests need nvcc for the kernels and the host library).

* the rendered source, the heuristic (select_k_grouped_config) and its planning K bucket;
* every k-grouped kernel the heuristic can pick compiles for sm_90a with 0 spills, 0 stack frame,
  no local memory, kernel parameters inside the classic 4 KB, and (with cuobjdump) HGMMA with both
  transpose bits, TMA loads, no TMA-store staging;
* the host library's group tables (fg_sm90_bf16_k_grouped_tables: order, k-block offsets and
  counts, chunks of 256 groups, empty groups skipped in place) and the launcher's argument checks
  (bad arguments -> FG_ERROR_INVALID_ARGUMENT before any driver call);
* the ops layer end to end on CPU tensors: the launcher replaced by an emulator that reads the
  packed ks buffer and the pointers it is given, builds the same tables and computes what the
  kernel computes, so the one-launch argument plumbing (views, c copies, d temporaries) is checked
  against the reference.
"""
from __future__ import annotations

import array
import ctypes
import re
import subprocess

import pytest
import torch

from finegemm import reference
from finegemm.heuristics import sm90_bf16_gemm as heur
from finegemm.ops import sm90_bf16_gemm as ops

BF16 = torch.bfloat16
INVALID = 100001  # fg::FG_ERROR_INVALID_ARGUMENT
NO_DRIVER = 100000  # fg::FG_ERROR_NO_DRIVER


def test_render_k_grouped_source():
    src = ops.render_k_grouped(128, 256, 4)
    assert "#include <finegemm/impls/sm90_bf16_gemm.cuh>" in src
    assert "__launch_bounds__(384, 1)" in src
    assert "sm90_bf16_gemm<128, 256, 4, true, true, false, true," in src  # kTmaStore: the fp32 rings
    assert "const __grid_constant__ CUtensorMap tmap_d" in src and "&tmap_d," in src
    assert "finegemm::scheduler::kBf16GemmKGrouped>" in src
    assert "const __grid_constant__ finegemm::scheduler::Bf16KGroupedArgs kgroups" in src
    assert "__launch_bounds__(256, 1)" in ops.render_k_grouped(64, 64, 10)
    for bad in [(96, 128, 4), (64, 96, 4), (64, 320, 4), (64, 128, 1)]:
        with pytest.raises(ValueError):
            ops.render_k_grouped(*bad)
    assert ops.k_grouped_kernel_name((128, 256, 4)) == "sm90_bf16_gemm_kgrouped_tn_bm128_bn256_s4"
    # The dense and m-grouped templates are untouched.
    assert "KGrouped" not in ops.render(128, 256, 3, True, True, False, True)
    assert "KGrouped" not in ops.render_grouped(128, 128, 4, heur.GEMM_GROUPED_MASKED)


def test_k_grouped_compile_check_registered():
    from finegemm import jit

    assert "sm90_bf16_gemm_k_grouped" in jit.registered_compile_checks()
    assert len(ops.representative_k_grouped_configs()) == len(heur.k_grouped_kernel_keys()) == 8


def test_k_grouped_k_bucket():
    assert [heur.k_grouped_k_bucket(k) for k in (1, 128, 129, 4096, 5000, 8192)] == [128, 128, 256, 4096, 8192, 8192]


# The FP8 issue's k-grouped shapes (G, M, N, expected k) and small / edge ones.
K_GROUPED_SHAPES = [(4, 4096, 7168, 8192), (8, 4096, 7168, 4096), (16, 7168, 2048, 2048), (4, 100, 136, 128),
                    (64, 256, 576, 256), (300, 64, 136, 128), (1, 32, 64, 128)]


@pytest.mark.parametrize("has_c", [False, True])
def test_k_grouped_heuristic(has_c):
    keys = set(heur.k_grouped_kernel_keys())
    for g, m, n, k in K_GROUPED_SHAPES:
        cfg = heur.select_k_grouped_config(m, n, heur.k_grouped_k_bucket(k), g, 132, has_c)
        assert cfg.k_grouped_kernel_key() in keys
        assert cfg.gemm_kind == heur.GEMM_K_GROUPED and cfg.num_groups == g and cfg.has_c == has_c
        assert cfg.a_mn_major and cfg.b_mn_major and cfg.out_fp32 and not cfg.split_k
        assert not cfg.tma_store, "no bf16 staging: the fp32 box rings instead"
        assert cfg.num_stages == heur.k_grouped_max_stages(cfg.block_m, cfg.block_n) >= 4
        assert cfg.smem_bytes == heur.k_grouped_smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages) <= heur.SMEM_LIMIT
        # the rings: 16 KB per consumer warpgroup on top of the dense layout's bytes
        assert cfg.smem_bytes == (heur.smem_bytes(cfg.block_m, cfg.block_n, cfg.num_stages, False)
                                  + cfg.block_m // 64 * 16384)
        assert cfg.grid == 132 and cfg.block_n % 64 == 0
        if m <= 64:
            assert cfg.block_m == 64
    # The bench's large shapes: wide tiles (the dense tn model's choice on the average group).
    assert heur.select_k_grouped_config(4096, 7168, 8192, 4, 132, True).k_grouped_kernel_key() == (128, 256, 4)
    with pytest.raises(ValueError):
        heur.select_k_grouped_config(0, 128, 128, 1, 132)
    with pytest.raises(ValueError):
        heur.select_k_grouped_config(128, 128, 128, 0, 132)


# ----------------------------------------------------------------------------- nvcc: kernels
def _cuobjdump():
    import os
    import shutil

    try:
        import triton

        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.path.isfile(tool):
            return tool
    except Exception:
        pass
    return shutil.which("cuobjdump")


def _param_bytes(tool: str, cubin: str) -> int | None:
    """End of the last kernel parameter (offset + size) from the cubin's KPARAM_INFO records."""
    proc = subprocess.run([tool, "-elf", cubin], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    ends = [int(o, 16) + int(s, 16) for o, s in re.findall(r"Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)",
                                                              proc.stdout)]
    return max(ends) if ends else None


@pytest.mark.nvcc
def test_every_k_grouped_kernel_compiles_spill_free():
    from finegemm import jit

    configs = ops.representative_k_grouped_configs()
    reports = jit.compile_check([(label, ops.render_k_grouped(*key)) for label, key in configs],
                                raise_on_failure=False)
    bad = [r for r in reports if not r["ok"]]
    assert not bad, "\n".join(f"{r['label']}: {r['reasons']} {r['error'] or ''}" for r in bad)
    keys = dict(configs)
    tool = _cuobjdump()
    for r in reports:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert r["stack_frame"] == 0 and r["lmem"] == 0, r
        print(f"{r['label']}: {r['registers']} registers")
        if tool is None:
            continue
        bm, bn, _ = keys[r["label"]]
        params = _param_bytes(tool, r["cubin"])
        assert params is not None and params <= 4096, f"{r['label']}: {params} bytes of kernel parameters"
        sass = subprocess.run([tool, "-sass", r["cubin"]], capture_output=True, text=True).stdout
        hgmma = [line for line in sass.splitlines() if "HGMMA" in line]
        assert hgmma and all(f"HGMMA.64x{bn}x16.F32.BF16" in line for line in hgmma), r["label"]
        assert all(".tnspA" in line and ".tnspB" in line for line in hgmma), f"{r['label']}: tn layout: {hgmma[0]}"
        assert "UTMALDG" in sass, r["label"]
        # the fp32 TMA epilogue: float2 shared stores, TMA store and TMA reduce-add (no stmatrix)
        assert "UTMASTG" in sass and "UTMAREDG" in sass, f"{r['label']}: no fp32 TMA store / reduce-add"
        assert "STSM" not in sass, r["label"]
        assert not re.search(r"\b(LDL|STL)\b", sass), r["label"]
        if bm == 128:
            assert "USETMAXREG" in sass, r["label"]


# ----------------------------------------------------------------------------- nvcc: host library
@pytest.mark.nvcc
def test_k_grouped_table_layout():
    ops._get_k_grouped_launcher()
    # sizeof, max slots, offsetof(group), offsetof(kb_begin), offsetof(num_kb): mirrors
    # scheduler/k_grouped_bf16_args.h (3 KB of table: the parameters stay inside 4 KB).
    assert ops._K_GROUPED_LAYOUT == (8 + 12 * 256, 256, 8, 8 + 4 * 256, 8 + 8 * 256)


@pytest.mark.nvcc
def test_k_grouped_tables():
    ks = [128, 0, 256, 384, 0, 256]
    (t,) = ops.k_grouped_tables(ks)
    # Longest first, equal sizes in group order; kb_begin = prefix sum / 64; empty groups last.
    assert t["group"] == [3, 2, 5, 0, 1, 4]
    assert t["num_kb"] == [6, 4, 4, 2, 0, 0]
    assert t["kb_begin"] == [6, 2, 12, 0, 2, 12]
    (t,) = ops.k_grouped_tables(ks, skip_empty=True)
    assert t["group"] == [3, 2, 5, 0] and t["num_kb"] == [6, 4, 4, 2]
    assert ops.k_grouped_tables([0, 0], skip_empty=True) == []
    (t,) = ops.k_grouped_tables([0, 0])
    assert t["group"] == [0, 1] and t["num_kb"] == [0, 0] and t["kb_begin"] == [0, 0]
    # 64 groups: one table; 256: one (full); 300 and 600: chunks of 256 in the sorted order.
    for g in (1, 64, 256, 257, 300, 600):
        ks = [((i * 7) % 5) * 128 for i in range(g)]
        tables = ops.k_grouped_tables(ks)
        assert [len(t["group"]) for t in tables] == [min(256, g - 256 * i) for i in range(-(-g // 256))]
        order = [x for t in tables for x in t["group"]]
        assert order == sorted(range(g), key=lambda i: (-ks[i], i))
        prefix = [sum(ks[:i]) // 64 for i in range(g)]
        for t in tables:
            assert t["kb_begin"] == [prefix[x] for x in t["group"]]
            assert t["num_kb"] == [ks[x] // 64 for x in t["group"]]
    for bad in ([100], [-128, 256], [128, 32]):
        with pytest.raises(ValueError):
            ops.k_grouped_tables(bad)


@pytest.mark.nvcc
def test_k_grouped_launcher_rejects_bad_input():
    launch = ops._get_k_grouped_launcher()
    ks_default = [128, 0, 256]
    args = dict(fn=1, a=16, b=16, d=16, c=None, ks=ks_default, groups=3, m=128, n=64, sum_k=384, lda=128, ldb=64,
                ldd=64, block_m=128, block_n=64, grid=132, smem=100000, tma=1)

    def call(**kw):
        x = dict(args, **kw)
        ks = x["ks"]
        buf = array.array("i", ks if ks is not None else [0])
        ks_ptr = buf.buffer_info()[0] if ks is not None else None
        launches = ctypes.c_int(-1)
        rc = launch(x["fn"], x["a"], x["b"], x["d"], x["c"], ks_ptr, x["groups"], x["m"], x["n"], x["sum_k"],
                    x["lda"], x["ldb"], x["ldd"], x["block_m"], x["block_n"], x["grid"], x["smem"], x["tma"],
                    ctypes.byref(launches), 0)
        assert launches.value == 0, "nothing may be launched on an error"
        return rc

    bad = [dict(fn=0), dict(a=None), dict(b=None), dict(d=None), dict(ks=None), dict(groups=0), dict(m=0), dict(n=0),
           dict(sum_k=0), dict(sum_k=512),  # sum(ks) != sum_k
           dict(ks=[128, 0, 200], sum_k=328), dict(ks=[-128, 256, 256]),  # k % 64, k < 0
           dict(lda=120), dict(lda=136 + 4), dict(ldb=60), dict(ldb=68), dict(ldd=60),
           dict(block_m=96), dict(block_n=96), dict(block_n=32), dict(block_n=320), dict(grid=0), dict(smem=0),
           dict(d=18), dict(c=18),  # fp32 pointers
           dict(m=0x40000000, lda=0x40000000),  # groups * m rows above int32
           ]
    for kw in bad:
        assert call(**kw) == INVALID, kw
    try:
        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if not has_gpu:
        # Valid arguments reach the driver lookup (none here); c == d too.
        assert call() == NO_DRIVER
        assert call(c=16) == NO_DRIVER
        assert call(tma=0) == NO_DRIVER


# ----------------------------------------------------------------------------- ops, emulated launch
class _EmulatedLauncher:
    """Stands in for fg_launch_sm90_bf16_k_grouped on CPU tensors: reads the packed ks and the
    memory behind the pointers it is given, builds the host library's tables and computes every
    slot's tiles as the kernel does (d rows g*M.., C added, empty groups = C or zeros)."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def _tensor(ptr, dtype, rows, cols, pitch):
        count = (rows - 1) * pitch + cols
        ctype = ctypes.c_float if dtype == torch.float32 else ctypes.c_uint16
        flat = torch.frombuffer((ctype * count).from_address(ptr), dtype=dtype)
        return flat.as_strided((rows, cols), (pitch, 1))

    def __call__(self, fn, a, b, d, c, ks_ptr, groups, m, n, sum_k, lda, ldb, ldd, block_m, block_n, grid, smem,
                 tma_store, launches, stream):
        ks = list((ctypes.c_int32 * groups).from_address(ks_ptr))
        self.calls.append(dict(fn=fn, a=a, b=b, d=d, c=c, ks=ks, groups=groups, m=m, n=n, sum_k=sum_k, lda=lda,
                               ldb=ldb, ldd=ldd, block_m=block_m, block_n=block_n, grid=grid, smem=smem,
                               tma_store=tma_store))
        assert sum(ks) == sum_k
        A = self._tensor(a, BF16, sum_k, m, lda).double()
        B = self._tensor(b, BF16, sum_k, n, ldb).double()
        D = self._tensor(d, torch.float32, groups * m, n, ldd)
        C = None if c is None else self._tensor(c, torch.float32, groups * m, n, ldd)
        tables = ops.k_grouped_tables(ks, skip_empty=c is not None and c == d)
        for t in tables:
            for g, kb0, nkb in zip(t["group"], t["kb_begin"], t["num_kb"]):
                rows = slice(g * m, (g + 1) * m)
                acc = A[kb0 * 64:(kb0 + nkb) * 64].t() @ B[kb0 * 64:(kb0 + nkb) * 64]
                if C is not None:
                    acc = acc + C[rows].double()
                D[rows] = acc.float()
        launches._obj.value = len(tables)
        return 0


@pytest.fixture
def emulated(monkeypatch):
    emu = _EmulatedLauncher()
    planned = []

    def plan(m, n, sum_k, num_groups, has_c, device):
        planned.append((m, n, sum_k, num_groups, has_c))
        return heur.select_k_grouped_config(m, n, heur.k_grouped_k_bucket(-(-sum_k // num_groups)), num_groups, 132,
                                            has_c), 4321

    monkeypatch.setattr(ops, "K_GROUPED_SINGLE_LAUNCH", True)
    monkeypatch.setattr(ops, "plan_k_grouped", plan)
    monkeypatch.setattr(ops, "_get_k_grouped_launcher", lambda: emu)
    monkeypatch.setattr(ops, "_get_raw_stream", lambda index: 0)
    emu.planned = planned
    return emu


def _problem(ks, m, n, mode, a_pitch=None, d_layout="plain", c_layout="plain", seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = len(ks)
    a_pitch = a_pitch or m
    a = torch.randn(sum(ks), a_pitch, generator=gen).to(BF16)[:, :m]
    b = torch.randn(sum(ks), n, generator=gen).to(BF16)
    if d_layout == "plain":
        d = torch.full((g, m, n), float("nan"))
    else:  # padded groups and rows: d.view(G * M, N) is impossible
        d = torch.full((g, m + 3, n + 4), float("nan"))[:, :m, :n]
    c = None
    if mode == "c":
        if c_layout == "plain":
            c = torch.randn(g, m, n, generator=gen)
        else:  # another row pitch than d's
            c = torch.randn(g, m, n + 8, generator=gen)[..., :n]
    elif mode == "in_place":
        d.copy_(torch.randn(g, m, n, generator=gen))
        c = d
    want = reference.k_grouped_bf16_gemm_tn_contiguous(a, b, ks, c=None if c is None else c.clone())
    return a, b, d, c, want


@pytest.mark.nvcc
@pytest.mark.parametrize("mode", ["none", "c", "in_place"])
@pytest.mark.parametrize("ks", [[128, 0, 256, 0], [0, 384], [256], [0, 0, 128], [(i % 3) * 128 for i in range(300)]],
                         ids=["zeros_mid_last", "zero_first", "g1", "zeros_first", "g300"])
def test_k_grouped_ops_one_launch(emulated, ks, mode):
    m, n = (16, 24) if len(ks) > 8 else (100, 136)
    a, b, d, c, want = _problem(ks, m, n, mode, a_pitch=-(-m // 8) * 8, seed=len(ks))
    ops.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c)
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-4)
    (call,) = emulated.calls  # one launcher call per op call
    cfg = heur.select_k_grouped_config(m, n, heur.k_grouped_k_bucket(-(-sum(ks) // len(ks))), len(ks), 132,
                                       c is not None)
    assert call["ks"] == ks and call["groups"] == len(ks) and call["sum_k"] == sum(ks)
    assert (call["m"], call["n"], call["lda"], call["ldb"], call["ldd"]) == (m, n, a.stride(0), n, n)
    assert call["a"] == a.data_ptr() and call["b"] == b.data_ptr() and call["d"] == d.data_ptr()
    assert call["c"] == (None if c is None else c.data_ptr())  # c is d: the same pointer (in place)
    assert (call["block_m"], call["block_n"], call["grid"], call["smem"]) == (cfg.block_m, cfg.block_n, 132,
                                                                             cfg.smem_bytes)
    assert call["fn"] == 4321
    assert call["tma_store"] == 1  # the fp32 TMA epilogue (reduce-add when c is d; the host falls back)
    assert emulated.planned == [(m, n, sum(ks), len(ks), c is not None)]


@pytest.mark.nvcc
@pytest.mark.parametrize("mode", ["c", "in_place"])
def test_k_grouped_ops_odd_strides(emulated, mode):
    """d whose groups are not M rows apart (a temporary, copied back: padding untouched) and a c
    with another row pitch than d (copied into d's layout)."""
    ks, m, n = [128, 0, 256], 24, 40
    a, b, d, c, want = _problem(ks, m, n, mode, a_pitch=m + 16, d_layout="padded", c_layout="padded", seed=5)
    base = d._base if d._base is not None else None
    ops.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c)
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-4)
    assert len(emulated.calls) == 1
    assert emulated.calls[0]["d"] != d.data_ptr()  # computed in a temporary
    assert emulated.calls[0]["lda"] == m + 16
    if mode == "c":
        assert emulated.calls[0]["c"] not in (None, c.data_ptr())  # c copied into d's layout
        assert torch.isnan(base[:, m:, :]).all() and torch.isnan(base[:, :, n:]).all()


@pytest.mark.nvcc
def test_k_grouped_ops_all_empty_launches_nothing(emulated):
    for mode in ("none", "c", "in_place"):
        a, b, d, c, want = _problem([0, 0], 8, 16, mode)
        ops.k_grouped_bf16_gemm_tn_contiguous(a, b, d, [0, 0], c)
        assert torch.equal(d, want)
    assert emulated.calls == []


@pytest.mark.parametrize("with_c", ["none", "c", "in_place"])
def test_k_grouped_v1_switch_runs_per_group(monkeypatch, with_c):
    """K_GROUPED_SINGLE_LAUNCH = False: the v1 loop (one dense tn call per non-empty group)."""
    seen = []

    def fake_dense(a, b, d, c=None, layout="nt"):
        seen.append(a.shape[0])
        d.copy_((a.double().t() @ b.double() + (c.double() if c is not None else 0)).float())

    def no_launch():
        raise AssertionError("the one-launch path must not run")

    monkeypatch.setattr(ops, "K_GROUPED_SINGLE_LAUNCH", False)
    monkeypatch.setattr(ops, "bf16_gemm", fake_dense)
    monkeypatch.setattr(ops, "_get_k_grouped_launcher", no_launch)
    ks = [128, 0, 256]
    a, b, d, c, want = _problem(ks, 16, 24, with_c)
    ops.k_grouped_bf16_gemm_tn_contiguous(a, b, d, ks, c)
    torch.testing.assert_close(d, want, rtol=1e-5, atol=1e-4)
    assert seen == [128, 256]
