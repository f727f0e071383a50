"""The split-K workspace bookkeeping shared by the kernel families (CPU tensors stand in for CUDA)."""
import ctypes
import types

import pytest
import torch

from finegemm.ops._runtime import SplitKWorkspace, c_function, check_tile, prepare_function, prepared_handle_functions

CPU = torch.device("cpu")


def test_reuses_per_stream_and_grows():
    ws = SplitKWorkspace()
    p1 = ws.pointers(100, 10, CPU, stream=7, capturing=False)
    assert ws.pointers(50, 5, CPU, stream=7, capturing=False) == p1  # big enough: reused
    w, c = ws.buffers[(None, 7)]
    assert w.numel() == 100 and c.numel() == SplitKWorkspace.MIN_COUNTERS and not c.any()
    p2 = ws.pointers(200, 10, CPU, stream=7, capturing=False)  # grows
    assert ws.buffers[(None, 7)][0].numel() == 200
    assert len(ws.retired) == 1 and ws.retired[0][0].data_ptr() == p1[0]  # old pair kept alive
    p3 = ws.pointers(10, 10, CPU, stream=8, capturing=False)  # another stream: its own pair
    assert p3 != p2 and len(ws.buffers) == 2


def test_capture_gets_private_buffers():
    ws = SplitKWorkspace()
    eager = ws.pointers(64, 4, CPU, stream=1, capturing=False)
    g1 = ws.pointers(64, 4, CPU, stream=1, capturing=True)
    g2 = ws.pointers(64, 4, CPU, stream=1, capturing=True)
    assert len({eager, g1, g2}) == 3
    assert all(not c.any() for _, c in ws.retired)  # counters start at zero
    assert ws.buffers[(None, 1)][0].data_ptr() == eager[0]  # capture never replaces eager buffers


def _fake_lib(*names):
    """An object with one plain attribute-holder per entry point (ctypes declarations are attributes)."""
    return types.SimpleNamespace(**{n: types.SimpleNamespace() for n in names})


def test_ctypes_declaration_helpers():
    u64, vp, i = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
    lib = _fake_lib("fg_launch_x", "fg_prepare_x", "fg_launch_prepared_x", "fg_free_prepared_x")
    launch = c_function(lib, "fg_launch_x", [u64, vp, vp, vp, vp, i, i, u64])  # fn, a, b, ws, counters, m, n, stream
    assert launch is lib.fg_launch_x and launch.restype is ctypes.c_int
    prep = prepare_function(lib, "fg_prepare_x", launch.argtypes, 3)
    # out-pointer for the handle, then the launch arguments without (workspace, counters) and stream
    assert prep.argtypes == [ctypes.POINTER(u64), u64, vp, vp, i, i] and prep.restype is ctypes.c_int
    lp, fp = prepared_handle_functions(lib, "x")
    assert lp.argtypes == [u64, vp, vp, u64] and lp.restype is ctypes.c_int
    assert fp.argtypes == [u64] and fp.restype is None


@pytest.mark.parametrize("args, word", [((96, 128, 4), "block_m"), ((128, 24, 4), "block_n"),
                                        ((128, 272, 4), "block_n"), ((64, 64, 1), "num_stages")])
def test_check_tile_names_the_broken_rule(args, word):
    with pytest.raises(ValueError, match=word):
        check_tile(*args)
    check_tile(128, 208, 4)  # a valid tile passes


def test_cluster_size_without_a_prepared_launch(monkeypatch):
    """A call whose launcher is not the host library's (mocked here, as on a machine without the
    driver) has no prepared launch to ask: cluster_size() answers 0, never raises."""
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.ops import sm90_bf16_gemm as ob

    cfg = hb.select_config(64, 256, 7168, 132, False, False, True)
    monkeypatch.setattr(ob, "_load", lambda cfg, device: 1)
    monkeypatch.setattr(ob, "_get_launcher", lambda: None)
    call = ob.prepare(torch.zeros(64, 7168, dtype=torch.bfloat16), torch.zeros(256, 7168, dtype=torch.bfloat16),
                      torch.empty(64, 256), config=cfg)
    assert call._cluster_symbol == "fg_sm90_bf16_gemm_prepared_cluster"
    assert call._split_buffers_symbol == "fg_sm90_bf16_gemm_prepared_split_buffers"
    assert call.cluster_size() == 0
    assert call._query(call._split_buffers_symbol, 0) == -1  # no handle: no answer, no library call


@pytest.mark.nvcc
def test_host_library_answers_cluster_queries():
    """Both GEMM families export their prepared-cluster and split-buffer queries (the ops layer's
    symbols); a null handle answers -1."""
    import ctypes

    from finegemm import jit
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as of

    lib = jit.host_library()
    for family, call_cls in (("sm90_fp8_gemm", of.PreparedCall), ("sm90_bf16_gemm", ob.PreparedBf16Call)):
        for query in ("prepared_cluster", "prepared_split_buffers"):
            name = f"fg_{family}_{query}"
            assert name in (call_cls._cluster_symbol, call_cls._split_buffers_symbol)
            f = getattr(lib, name)
            f.argtypes, f.restype = [ctypes.c_uint64], ctypes.c_int
            assert f(0) == -1


def test_bf16_grouped_prepared_call_without_a_handle_passes_the_one_shot_arguments(monkeypatch):
    """PreparedBf16GroupedCall whose launcher is not the host library's (mocked): no handle, so every
    call takes the one-shot grouped launcher with exactly its argument list (no split-K buffers
    between head and tail: _one_shot_takes_buffers is False) and the current stream last; a failing
    launch raises with the call described."""
    from finegemm.heuristics import sm90_bf16_gemm as hb
    from finegemm.ops import sm90_bf16_gemm as ob

    g, m_max, n, k = 2, 64, 256, 512
    cfg = hb.select_grouped_config(hb.GEMM_GROUPED_MASKED, m_max, n, k, g, 132, m_max, 0)
    seen, rc = [], [0]
    monkeypatch.setattr(ob, "load_grouped", lambda cfg, device: 77)
    monkeypatch.setattr(ob, "plan_grouped", lambda *args, **kw: (cfg, 77))
    monkeypatch.setattr(ob, "_get_grouped_launcher", lambda: None)
    monkeypatch.setattr(ob, "_grouped_launcher", lambda *args: seen.append(args) or rc[0])
    monkeypatch.setattr(ob, "_get_raw_stream", lambda device: 1234)
    a, b = torch.zeros(g, m_max, k, dtype=torch.bfloat16), torch.zeros(g, n, k, dtype=torch.bfloat16)
    d, masked = torch.empty(g, m_max, n, dtype=torch.bfloat16), torch.full((g,), 5, dtype=torch.int32)
    call = ob.prepare_m_grouped_masked(a, b, d, masked, m_max)
    assert isinstance(call, ob.PreparedBf16GroupedCall)
    call()
    call()
    expected = ob._grouped_arguments(cfg, 77, a.view(-1, k), b.view(-1, k), d.view(-1, n), m_max, n, k, masked, g)
    assert seen == [expected + (1234,)] * 2 and len(expected) == 20
    assert ob.prepare_m_grouped_masked(a, b, d, masked.long(), m_max) is None  # a masked_m copy per call: none
    rc[0] = 100001
    monkeypatch.setattr(ob.jit, "error_string", lambda code: f"error {code}")  # no host library needed
    with pytest.raises(RuntimeError, match=r"sm90_bf16_gemm grouped \(kind=2, G=2, m=64, n=256, k=512.*error 100001"):
        call()


def _launch_class(symbol: str):
    """A PreparedLaunch whose family functions are stand-ins (none is called here)."""
    from finegemm.ops._runtime import PreparedLaunch

    class _Launch(PreparedLaunch):
        __slots__ = ()
        _ns = {"_launcher": None, "_launcher_prepare": None, "_launch_prepared": None, "_free_prepared": None}
        _names = ("_launcher", "_launcher_prepare", "_launch_prepared", "_free_prepared")
        _rebind_symbol = symbol

        def _describe(self) -> str:
            return "fake launch"

    return _Launch


def test_rebound_copies_a_prepared_launch_in_the_host_library(monkeypatch):
    """PreparedLaunch.rebound: where the launch is prepared (a handle, the shim in use) and its family
    has a rebind symbol, the host library's copy at the new addresses becomes the new call's handle
    (with the launch's shim and split-K answer), so its first call encodes nothing; a refusal (0), no
    symbol, or no handle yet leaves the new call to encode itself. A launch that is not cacheable
    cannot be rebound."""
    from finegemm.ops import _runtime

    calls = []
    answer = {"handle": 4242}

    def rebind(address, handle, *pointers):
        calls.append((address, handle) + pointers)
        return answer["handle"]

    monkeypatch.setattr(_runtime, "_rebind_function", lambda symbol: (rebind, 99) if symbol == "fg_rebind_x" else None)
    cfg = types.SimpleNamespace(split_k=True)
    proto = _launch_class("fg_rebind_x")(cfg, (1, 16, 32, 48, None), ("tail",), CPU, True, [])
    assert proto.head_pointers() == (16, 32, 48, None)
    fresh = proto.rebound((64, 80, 96, None))  # not prepared yet: nothing to copy
    assert fresh._handle is None and not calls and fresh.head_pointers() == (64, 80, 96, None)
    proto._handle, proto._fast_call, proto._launch_address, proto._split_k = 77, object(), 5, False
    copied = proto.rebound((64, 80, 96, None))
    assert calls == [(99, 77, 64, 80, 96, None)]
    assert (copied._handle, copied._fast_call, copied._launch_address, copied._split_k) == (4242, proto._fast_call, 5,
                                                                                           False)
    assert copied._tail == proto._tail and copied.cfg is cfg and copied.cacheable
    answer["handle"] = 0  # the library refused: the new call encodes itself
    refused = proto.rebound((64, 80, 96, None))
    assert refused._handle is None and refused._split_k is True and len(calls) == 2
    other = _launch_class("")(cfg, (1, 16, 32, 48, None), (), CPU, True, [])
    other._handle, other._fast_call = 77, object()
    assert other.rebound((64, 80, 96, None))._handle is None and len(calls) == 2
    with pytest.raises(ValueError, match="one address per head pointer"):
        proto.rebound((64, 80))
    not_kept = _launch_class("fg_rebind_x")(cfg, (1, 16, 32, 48, None), (), CPU, False, [])
    with pytest.raises(ValueError, match="cacheable"):
        not_kept.rebound((64, 80, 96, None))
    for launch in (proto, copied, other):  # no free function here: forget the fake handles
        launch._handle = None


def test_rebound_re_points_tensor_pointers_in_head_and_tail(monkeypatch):
    """A launch whose tensor pointers are the first _head_pointer_count of its head (then plain
    arguments, as the BF16 grouped launches) and its tail at _tail_pointer_at (masked_m in the FP8
    grouped launches): head_pointers lists exactly those, and rebound replaces exactly those, passing
    them to the host copy in that order."""
    from finegemm.ops import _runtime

    calls = []
    monkeypatch.setattr(_runtime, "_rebind_function",
                        lambda symbol: ((lambda address, handle, *p: calls.append(p) or 0), 99))
    cfg = types.SimpleNamespace(split_k=False)
    counted = type("_Counted", (_launch_class("fg_rebind_x"),), {"__slots__": (), "_head_pointer_count": 2})
    proto = counted(cfg, (1, 16, 32, 7, 8), ("t",), CPU, True, [])
    assert proto.head_pointers() == (16, 32)
    moved = proto.rebound((64, 80))
    assert moved._head == (1, 64, 80, 7, 8) and moved._tail == ("t",)
    tailed = type("_Tailed", (_launch_class("fg_rebind_x"),), {"__slots__": (), "_tail_pointer_at": (1,)})
    proto = tailed(cfg, (1, 16, None), (5, 48, 6), CPU, True, [])
    assert proto.head_pointers() == (16, None, 48)
    proto._handle, proto._fast_call = 77, object()
    moved = proto.rebound((64, None, 96))
    assert moved._head == (1, 64, None) and moved._tail == (5, 96, 6) and proto._tail == (5, 48, 6)
    assert calls == [(64, None, 96)]
    with pytest.raises(ValueError, match="one address per head pointer"):
        proto.rebound((64, None))
    proto._handle = None


def test_contiguous_rebound_copies_each_streams_launch(monkeypatch):
    """PreparedContiguous.rebound (a GEMM checking the layout itself) re-points every stream's launch
    and passes `copy` on: with it, the host library's copy becomes each new launch's handle (the
    stream's check scratch stays in the copied launch); without it, each new launch encodes itself.
    The kept call is left as it was."""
    from finegemm.ops import _runtime
    from finegemm.ops.contiguous_layout import PreparedContiguous

    calls = []
    monkeypatch.setattr(_runtime, "_rebind_function",
                        lambda symbol: ((lambda address, handle, *p: calls.append((handle,) + p) or handle + 1000), 9)
                        if symbol == "fg_rebind_x" else None)
    cfg = types.SimpleNamespace(split_k=False)
    tailed = type("_Tailed", (_launch_class("fg_rebind_x"),), {"__slots__": (), "_tail_pointer_at": (0,)})
    kept = object.__new__(PreparedContiguous)
    kept.fn, kept.in_kernel, kept._plan, kept._m, kept._groups, kept._alignment, kept._device = (
        "f", True, None, 256, 2, 128, CPU)
    kept._streams = {}
    for stream, handle in ((11, 1), (12, 2)):
        launch = tailed(cfg, (1, 16, 32), (48, "scratch"), CPU, True, [])
        launch._handle, launch._fast_call = handle, object()
        kept._streams[stream] = (None, None, launch)
    assert kept.cacheable and kept.head_pointers() == (16, 32, 48)
    moved = kept.rebound((64, 80, 96), copy=True)
    assert sorted(calls) == [(1, 64, 80, 96), (2, 64, 80, 96)]
    for stream, handle in ((11, 1), (12, 2)):
        launch = moved._streams[stream][2]
        assert launch._handle == handle + 1000 and launch._head == (1, 64, 80) and launch._tail == (96, "scratch")
        assert kept._streams[stream][2]._handle == handle and kept._streams[stream][2]._tail == (48, "scratch")
    assert moved.cacheable and moved.head_pointers() == (64, 80, 96)
    encoded = kept.rebound((64, 80, 96), copy=False)
    assert len(calls) == 2 and all(e[2]._handle is None for e in encoded._streams.values())
    for call in (kept, moved):  # no free function here: forget the fake handles
        for entry in call._streams.values():
            entry[2]._handle = None


@pytest.mark.nvcc
def test_rebind_symbols_are_the_host_librarys():
    """Each prepared launch class that names a host rebind entry names one the host library exports
    (a wrong name would leave every moved call encoding its launch anew, silently), one entry per
    prepare entry: the GEMMs that check a contiguous layout themselves have their own (their
    launches hold the check's buffers), and so has fp8_einsum's heads-packed launch (sfa gathered
    through its pointer)."""
    from finegemm import jit
    from finegemm.ops import sm90_bf16_gemm as ob
    from finegemm.ops import sm90_fp8_gemm as of

    lib = jit.host_library()
    classes = [of.PreparedCall, of.PreparedGroupedCall, of.PreparedLayoutCheckedCall, of.PreparedHeadsPackedCall,
               of.PreparedHeadSplitsCall, ob.PreparedBf16Call, ob.PreparedBf16GroupedCall, ob.PreparedBf16LayoutCheckedCall]
    for cls in classes:
        assert cls._rebind_symbol and hasattr(lib, cls._rebind_symbol), cls.__name__
    assert of.PreparedLayoutCheckedCall._rebind_symbol == "fg_rebind_prepared_sm90_fp8_contiguous"
    assert ob.PreparedBf16LayoutCheckedCall._rebind_symbol == "fg_rebind_prepared_sm90_bf16_contiguous"
    assert len({cls._rebind_symbol for cls in classes}) == len(classes)


@pytest.mark.nvcc
@pytest.mark.parametrize("family, count", [("sm90_fp8_gemm", 6), ("sm90_bf16_gemm", 4), ("sm90_fp8_masked", 7),
                                           ("sm90_bf16_masked", 4), ("sm90_fp8_contiguous", 7),
                                           ("sm90_bf16_contiguous", 4), ("sm90_fp8_heads_packed", 6),
                                           ("sm90_fp8_head_splits", 6)])
def test_host_rebind_refuses_before_reading_the_handle(family, count):
    """fg_rebind_prepared_<family> refuses a null handle, another pointer count or a null out
    (FG_ERROR_INVALID_ARGUMENT, no handle written) before it reads the prepared launch; the launch
    shim's rebind_prepared answers 0 for a refusal and checks its own arguments."""
    from finegemm import jit
    from finegemm.jit import runtime as jit_runtime

    lib = jit.host_library()
    u64 = ctypes.c_uint64
    rebind = c_function(lib, f"fg_rebind_prepared_{family}",
                        [u64, ctypes.POINTER(u64), ctypes.c_int, ctypes.POINTER(u64)])
    pointers = (u64 * 8)(*range(16, 16 * 9, 16))
    out = u64(7)
    invalid = 100001  # fg::FG_ERROR_INVALID_ARGUMENT
    assert rebind(0, pointers, count, ctypes.byref(out)) == invalid and out.value == 0
    for wrong in (count - 1, count + 1, 0):
        out.value = 7
        assert rebind(8, pointers, wrong, ctypes.byref(out)) == invalid and out.value == 0  # a bogus handle: unread
    assert rebind(0, pointers, count, None) == invalid
    module = jit_runtime.fastcall_module()
    if module is None:
        pytest.skip("no launch shim here (no Python.h)")
    address = ctypes.cast(rebind, ctypes.c_void_p).value
    assert module.rebind_prepared(address, 0, *[16] * count) == 0
    assert module.rebind_prepared(address, 8, *[16] * (count + 1)) == 0
    with pytest.raises(ValueError, match="null function address"):
        module.rebind_prepared(0, 8, 16)
    with pytest.raises(TypeError, match="2 to 10 arguments"):
        module.rebind_prepared(address, 8, *[16] * 9)
