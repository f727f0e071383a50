"""Randomized checks of the public GEMM API: odd layouts that must work, broken inputs that must fail.

A case is one call of a public function with random shapes and a random memory placement of every
tensor: each lives inside a larger buffer (padded row / group pitches, a storage offset, a guard
tail), scales K- or MN-major, c separate or d itself. A *bad* case applies one mutation that breaks
a documented rule (dtype, rank, shape, stride, alignment, overlap, group layout, argument type).

The properties (tests/test_fuzz_cpu.py on CPU tensors, tests/gpu/test_fuzz_gpu.py on CUDA):
- a call returns, or raises TypeError / ValueError / NotImplementedError whose message starts
  with "<function>:"; a bad case raises;
- an accepted call writes only its outputs' elements: every other cell of every buffer (inputs
  included) keeps its bits;
- on CUDA, a case gets the verdict it gets on CPU (masked_m / ks_tensor values are read on the
  host for CPU tensors only, so those mutations may pass on CUDA, where the kernels clamp or do not
  read them), and an accepted call writes what the exact reference writes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from typing import Any, Callable, Optional

import torch

import finegemm
from finegemm.utils import align, ceil_div

__all__ = ["Placement", "Buf", "Case", "Outcome", "Settings", "FUNCTIONS", "VARIANTS", "MUTATIONS", "CLEAN_ERRORS",
           "NUM_SMS_CHOICES", "tma_placement", "any_placement", "materialize_buf", "materialize", "valid_case",
           "settings_case", "large_case", "skinny_case", "SKINNY", "DENSE_FUNCTIONS", "multiply_adds", "Sizes",
           "SMALL", "LARGE", "bad_case", "applied", "run_case", "call_case", "clean_error", "untouched_cells",
           "bitwise_equal", "output_values", "refill", "LEGACY", "as_legacy", "compare_outputs", "kernel_plans", "warm_plan",
           "warm_plans"]

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
F32 = torch.float32
I32 = torch.int32

CLEAN_ERRORS = (TypeError, ValueError, NotImplementedError)

# Bit pattern of the cells around (and, for outputs, inside) every tensor: NaN for floats.
_POISON_BITS = {FP8: (torch.uint8, 0x7F), BF16: (torch.int16, 0x7FC0), torch.float16: (torch.int16, 0x7E00),
                F32: (torch.int32, 0x7FC00000), I32: (torch.int32, 0x5A5A5A5A),
                torch.float8_e5m2: (torch.uint8, 0x7F), torch.int64: (torch.int64, 0x5A5A5A5A5A5A5A5A),
                torch.uint8: (torch.uint8, 0x5A), torch.int16: (torch.int16, 0x5A5A)}


# ----------------------------------------------------------------------------- placements
@dataclasses.dataclass
class Placement:
    """Where a logical tensor lives in its buffer: storage dims in the order `perm` (outermost
    first; identity = row-major), each storage dim but the outermost padded by `pad` elements,
    `offset` elements before the first one and `tail` after the block."""

    perm: tuple
    pad: tuple
    offset: int = 0
    tail: int = 0


def row_major(rank: int) -> Placement:
    return Placement(tuple(range(rank)), (0,) * rank)


@dataclasses.dataclass
class Buf:
    """A tensor argument: its logical values (CPU), dtype, placement and role."""

    values: torch.Tensor  # logical shape; for outputs the initial values (poison, or c when c is d)
    dtype: torch.dtype
    place: Placement
    output: bool = False
    expand_dim: Optional[int] = None  # a stride-0 view along this dim (mutation "self_overlap")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The process-wide knobs a case runs under (set_num_sms, set_pdl,
    set_mk_alignment_for_contiguous_layout); the defaults are the library's."""

    num_sms: Optional[int] = None  # None: every SM of the device
    pdl: bool = False
    mk_alignment: int = 128

    def describe(self) -> str:
        return f"num_sms={self.num_sms} pdl={self.pdl} mk_alignment={self.mk_alignment}"


@dataclasses.dataclass
class Case:
    fn: str
    args: dict  # name -> Buf | (Buf, Buf) | _Alias (c is d, or part of it) | scalar | list
    outputs: tuple = ("d",)
    mutation: Optional[str] = None
    host_value_rule: bool = False  # mutation of values that only CPU calls check (masked_m, ks_tensor)
    note: str = ""
    settings: Settings = Settings()

    def describe(self) -> str:
        return f"{self.fn} [{self.mutation or 'valid'}] {self.note}"

    def accumulates_into_d(self) -> bool:
        """c is d: a second call would add again (not a repeat of the first)."""
        return isinstance(self.args.get("c"), _Alias)

    def unsupported_on_cuda(self) -> bool:
        """A documented limit of the kernels (the CPU path runs it): m-grouped contiguous layouts
        aligned to fewer rows than a tile (mk alignment 16 / 32) raise NotImplementedError on CUDA."""
        return self.fn.startswith("m_grouped") and self.fn.endswith("contiguous") and self.settings.mk_alignment < 64


def _tma_pad(rng: random.Random, n: int, esize: int, odd: bool) -> int:
    """Extra elements for a storage dim of n elements so that the pitch is a 16-byte multiple
    (0 or one more 16-byte step) - or, with odd, so that it is not."""
    unit = 16 // esize  # > 1: elements here are 1, 2 or 4 bytes
    base = align(n, unit) - n
    if odd:
        return base + rng.randrange(1, unit)
    return base + unit * rng.choice((0, 0, 1, 2))


def tma_placement(rng: random.Random, shape: tuple, dtype: torch.dtype, *, strange: bool = True) -> Placement:
    """Row-major with the TMA rule kept: 16-byte row / group pitches and base. strange=False: the
    smallest such placement (the row padded to 16 bytes only when it must be)."""
    esize = torch.empty((), dtype=dtype).element_size()
    rank = len(shape)
    pads = [0] * rank
    if rank > 1:
        pads[-1] = _tma_pad(rng, shape[-1], esize, False) if strange else align(shape[-1], 16 // esize) - shape[-1]
    if not strange:
        return Placement(tuple(range(rank)), tuple(pads))
    for i in range(1, rank - 1):  # gaps between groups: whole rows, so 16-byte multiples too
        pads[i] = rng.choice((0, 0, 1, 3))
    offset = (16 // esize) * rng.choice((0, 0, 1, 5))
    return Placement(tuple(range(rank)), tuple(pads), offset, rng.choice((0, 16)))


def any_placement(rng: random.Random, shape: tuple) -> Placement:
    """Any strides (scales): row- or column-major storage of the last two dims, any pads / offset."""
    rank = len(shape)
    perm = list(range(rank))
    if rank >= 2 and rng.random() < 0.5:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    pads = tuple(0 if i == 0 else rng.choice((0, 0, 1, 3)) for i in range(rank))
    return Placement(tuple(perm), pads, rng.choice((0, 1, 3)), rng.choice((0, 5)))


def _storage(shape: tuple, place: Placement) -> list:
    st = [shape[p] for p in place.perm]
    return [s + (place.pad[i] if i > 0 else 0) for i, s in enumerate(st)]


def _view_of(buf: torch.Tensor, shape: tuple, place: Placement, expand_dim: Optional[int] = None) -> torch.Tensor:
    st = _storage(shape, place)
    n = math.prod(st)
    block = buf[place.offset: place.offset + n].view(st)
    view = block[tuple(slice(0, shape[p]) for p in place.perm)]
    inv = [0] * len(shape)
    for i, p in enumerate(place.perm):
        inv[p] = i
    view = view.permute(inv)
    if expand_dim is not None:  # every index along expand_dim aliases index 0
        idx = [slice(None)] * len(shape)
        idx[expand_dim] = slice(0, 1)
        view = view[tuple(idx)].expand(shape)
    return view


def _buffer_numel(shape: tuple, place: Placement) -> int:
    return place.offset + math.prod(_storage(shape, place)) + place.tail


def materialize_buf(b: Buf, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(view, buffer, bool mask of the view's cells in the buffer) on `device`."""
    shape = tuple(b.values.shape)
    int_dtype, bits = _POISON_BITS[b.dtype]
    numel = _buffer_numel(shape, b.place)
    raw = torch.full((numel,), bits, dtype=int_dtype, device=device)
    buf = raw.view(b.dtype)
    view = _view_of(buf, shape, b.place, b.expand_dim)
    if view.numel():
        if b.expand_dim is None:
            view.copy_(b.values.to(device=device))
        else:
            idx = [slice(None)] * len(shape)
            idx[b.expand_dim] = slice(0, 1)
            view[tuple(idx)].copy_(b.values[tuple(idx)].to(device=device))
    pos = _view_of(torch.arange(numel, dtype=torch.int64), shape, b.place, b.expand_dim)
    mask = torch.zeros(numel, dtype=torch.bool)
    mask[pos.reshape(-1)] = True
    return view, buf, mask


@dataclasses.dataclass
class Materialized:
    kwargs: dict
    bufs: dict  # name -> (buffer, mask, Buf)


def materialize(case: Case, device) -> Materialized:
    kwargs, bufs = {}, {}
    for name, v in case.args.items():
        if isinstance(v, Buf):
            view, buf, mask = materialize_buf(v, device)
            kwargs[name] = view
            bufs[name] = (buf, mask, v)
        elif isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, Buf) for x in v):
            out = []
            for j, x in enumerate(v):
                view, buf, mask = materialize_buf(x, device)
                out.append(view)
                bufs[f"{name}[{j}]"] = (buf, mask, x)
            kwargs[name] = tuple(out)
        elif isinstance(v, _Alias):
            kwargs[name] = None  # filled below
        else:
            kwargs[name] = v
    for name, v in case.args.items():
        if isinstance(v, _Alias):
            kwargs[name] = v.resolve(kwargs)
    return Materialized(kwargs, bufs)


@dataclasses.dataclass
class _Alias:
    """An argument that is (a view of) another one's memory: c = d, or a partial overlap."""

    target: str
    rows_shift: int = 0

    def resolve(self, kwargs: dict):
        t = kwargs[self.target]
        if self.rows_shift == 0:
            return t
        # the same shape, moved rows_shift rows down inside the target's buffer: partial overlap
        return t.as_strided(t.shape, t.stride(), t.storage_offset() + self.rows_shift * t.stride(-2))


# ----------------------------------------------------------------------------- values
def _fp8_values(g: torch.Generator, shape) -> torch.Tensor:
    return (torch.randn(shape, generator=g) * 2).to(FP8)


def _scales(g: torch.Generator, shape) -> torch.Tensor:
    return torch.exp2(torch.randint(-3, 4, shape, generator=g).float())


def _bf16_values(g: torch.Generator, shape) -> torch.Tensor:
    return torch.randn(shape, generator=g).to(BF16)


def _poison_values(shape, dtype) -> torch.Tensor:
    int_dtype, bits = _POISON_BITS[dtype]
    return torch.full(shape, bits, dtype=int_dtype).view(dtype)


def _out(shape, dtype, rng, strange=True) -> Buf:
    return Buf(_poison_values(shape, dtype), dtype, tma_placement(rng, shape, dtype, strange=strange), output=True)


def _tma_in(values: torch.Tensor, rng, strange=True) -> Buf:
    return Buf(values, values.dtype, tma_placement(rng, tuple(values.shape), values.dtype, strange=strange))


def _any_in(values: torch.Tensor, rng) -> Buf:
    return Buf(values, values.dtype, any_placement(rng, tuple(values.shape)))


def _int_in(values: torch.Tensor) -> Buf:
    return Buf(values.to(I32), I32, row_major(values.dim()))


def _c_arg(rng, g, shape, d: Buf) -> object:
    """None, a separate fp32 c, or c = d (then d starts with c's values)."""
    r = rng.random()
    if r < 0.35:
        return None
    values = torch.randn(shape, generator=g)
    if r < 0.7:
        return _tma_in(values, rng)
    d.values = values.clone()
    return _Alias("d")


# ----------------------------------------------------------------------------- valid cases
M_CHOICES = (0, 1, 17, 64, 65, 128, 130, 257)
N_CHOICES = (1, 8, 16, 24, 100, 136, 200, 256, 264, 576)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The shape choices of the generators. SMALL (valid_case) reaches every edge of a tile at
    little cost; LARGE (large_case) reaches what only many tiles do: persistent loops over several
    tiles per CTA, multicast pairs, the tuned tables' big tiles, full waves with a ragged last one."""

    m: tuple = M_CHOICES
    n: tuple = N_CHOICES
    fp8_k: tuple = (0, 16, 48, 128, 144, 256, 400, 512)
    fp8_k_steps: tuple = (1, 40)  # the other 10%: 16 * randrange(*fp8_k_steps)
    bf16_k: tuple = (0, 8, 24, 64, 72, 200, 256, 512)
    segment_rows: tuple = (0, 1, 17, 64, 128, 130, 200)
    grouped_n: tuple = (16, 64, 100, 136, 256, 264)
    grouped_fp8_k: tuple = (16, 128, 144, 256, 400)
    grouped_bf16_k: tuple = (8, 64, 72, 200, 256)
    masked_m_max: tuple = (1, 17, 64, 130)
    masked_n: tuple = (1, 16, 64, 100, 136, 256)
    masked_fp8_k: tuple = (16, 128, 144, 256)
    masked_bf16_k: tuple = (8, 64, 72, 200)
    k_grouped_ks: tuple = (0, 128, 256, 384)
    k_grouped_fp8_m: tuple = (1, 17, 64, 128, 136)
    k_grouped_fp8_n: tuple = (1, 16, 100, 128, 264)
    k_grouped_bf16_m: tuple = (8, 16, 40, 128, 136)
    k_grouped_bf16_n: tuple = (8, 16, 48, 128, 264)


SMALL = Sizes()
LARGE = Sizes(m=(1000, 2049, 4097), n=(1000, 2112, 4096, 4100, 7168), fp8_k=(512, 1024, 1040, 2048),
              fp8_k_steps=(32, 160), bf16_k=(512, 1000, 1024, 2048), segment_rows=(0, 1, 17, 300, 1000, 1500),
              grouped_n=(1000, 2112, 4096, 4104), grouped_fp8_k=(512, 1024, 2048),
              grouped_bf16_k=(512, 1000, 1024), masked_m_max=(300, 1000, 2049), masked_n=(1000, 2112, 4096),
              masked_fp8_k=(512, 1024, 2048), masked_bf16_k=(512, 1000, 1024), k_grouped_ks=(0, 512, 1024, 2048),
              k_grouped_fp8_m=(257, 1000, 2112), k_grouped_fp8_n=(136, 1000, 2112),
              k_grouped_bf16_m=(256, 1000, 2112), k_grouped_bf16_n=(136, 1000, 2112))
# Decode-sized dense problems: few rows, the anchors' long K (split-K, split clusters, k-batches).
SKINNY = Sizes(m=(1, 17, 64, 128), n=(256, 2112, 4096, 7168), fp8_k=(2048, 7168), fp8_k_steps=(448, 449),
               bf16_k=(2048, 7168))
DENSE_FUNCTIONS = tuple(f"{p}_gemm_{layout}" for p in ("fp8", "bf16") for layout in ("nt", "nn", "tn", "tt"))
_sizes = SMALL


def _dense_fp8(rng, g, layout: str) -> Case:
    m = rng.choice(_sizes.m)
    n = rng.choice(_sizes.n)
    k = rng.choice(_sizes.fp8_k) if rng.random() < 0.9 else 16 * rng.randrange(*_sizes.fp8_k_steps)
    recipe = rng.choice((None, (1, 128, 128), (1, 1, 128)))
    one_d_one_d = recipe == (1, 1, 128)
    d_dtype = F32 if one_d_one_d else rng.choice((BF16, F32))
    kb = ceil_div(k, 128)
    a_mk, b_nk = layout[0] == "n", layout[1] == "t"
    A = _fp8_values(g, (m, k) if a_mk else (k, m))
    sfa = _scales(g, (m, kb) if a_mk else (kb, m))
    nb = n if one_d_one_d else ceil_div(n, 128)
    B = _fp8_values(g, (n, k) if b_nk else (k, n))
    sfb = _scales(g, (nb, kb) if b_nk else (kb, nb))
    d = _out((m, n), d_dtype, rng)
    args = {"a": (_tma_in(A, rng), _any_in(sfa, rng)), "b": (_tma_in(B, rng), _any_in(sfb, rng)), "d": d}
    if d_dtype == F32:
        c = _c_arg(rng, g, (m, n), d)
        if c is not None:
            args["c"] = c
    if recipe is not None:
        args["recipe"] = recipe
    case = Case(f"fp8_gemm_{layout}", args, note=f"M={m} N={n} K={k} recipe={recipe} d={d_dtype}")
    # Drawn last, so that the cases drawn before this variant existed stay as they were.
    if layout == "nt" and not one_d_one_d and "c" not in args and rng.random() < 0.5:
        return _skip_head_mid(rng, case, m, n, d_dtype)
    if layout == "nt" and rng.random() < 0.2:  # drawn after everything else, as skip_head_mid
        return _fp8_einsum(rng, g)
    return case


def _fp8_einsum(rng, g) -> Case:
    """fp8_einsum("bhr,hdr->bhd"): A [b, h, r] with per-token scales, B [h, d, r] with per-block
    ones; a bf16 d needs d % 8 == 0 (its rule), an fp32 d any d (and maybe c)."""
    batch = rng.choice((0, 1, 3, 17, 40))
    heads = rng.choice((1, 2, 3, 5))
    r = rng.choice((0, 16, 128, 144, 256, 512)) if rng.random() < 0.9 else 16 * rng.randrange(1, 40)
    d_dtype = rng.choice((BF16, F32))
    n = rng.choice((8, 16, 64, 128, 136, 264) if d_dtype == BF16 else (1, 12, 64, 100, 136))
    kb = ceil_div(r, 128)
    A, sfa = _fp8_values(g, (batch, heads, r)), _scales(g, (batch, heads, kb))
    B, sfb = _fp8_values(g, (heads, n, r)), _scales(g, (heads, ceil_div(n, 128), kb))
    d = _out((batch, heads, n), d_dtype, rng)
    args = {"expr": "bhr,hdr->bhd", "a": (_tma_in(A, rng), _any_in(sfa, rng)),
            "b": (_tma_in(B, rng), _any_in(sfb, rng)), "d": d}
    if d_dtype == F32:
        c = _c_arg(rng, g, (batch, heads, n), d)
        if c is not None:
            args["c"] = c
    if rng.random() < 0.3:
        args["recipe"] = (1, 128, 128)
    return Case("fp8_einsum", args, note=f"b={batch} h={heads} r={r} d={n} d={d_dtype}")


def _skip_head_mid(rng, case: Case, m: int, n: int, d_dtype) -> Case:
    """The dense nt case as fp8_gemm_nt_skip_head_mid: heads of left + right rows of B (a divisor
    of N), a gap of mid columns in each head of d."""
    per_head = rng.choice([x for x in range(1, n + 1) if n % x == 0])
    left = rng.randrange(per_head + 1)
    mid = rng.choice((0, 8, 16, 40))
    heads = n // per_head
    case.args["d"] = _out((m, n + heads * mid), d_dtype, rng)
    case.args["head_splits"] = (left, mid, per_head - left)
    return dataclasses.replace(case, fn="fp8_gemm_nt_skip_head_mid",
                               note=case.note + f" head_splits={case.args['head_splits']}")


def _dense_bf16(rng, g, layout: str) -> Case:
    m = rng.choice(_sizes.m)
    n = rng.choice(_sizes.n)
    k = rng.choice(_sizes.bf16_k)
    a_mk, b_nk = layout[0] == "n", layout[1] == "t"
    a = _bf16_values(g, (m, k) if a_mk else (k, m))
    b = _bf16_values(g, (n, k) if b_nk else (k, n))
    d_dtype = rng.choice((BF16, F32))
    d = _out((m, n), d_dtype, rng)
    args = {"a": _tma_in(a, rng), "b": _tma_in(b, rng), "d": d}
    if d_dtype == F32:
        c = _c_arg(rng, g, (m, n), d)
        if c is not None:
            args["c"] = c
    case = Case(f"bf16_gemm_{layout}", args, note=f"M={m} N={n} K={k} d={d_dtype}")
    # Drawn last (the cases drawn before these variants existed stay as they were): the same call
    # through cuBLAS, or an einsum of its own.
    r = rng.random()
    if r < 0.15:
        return dataclasses.replace(case, fn=f"cublaslt_gemm_{layout}")
    if r < 0.3:
        return _einsum(rng, g)
    return case


def _einsum(rng, g) -> Case:
    from finegemm.api.einsum import SUPPORTED_EXPRESSIONS

    expr = rng.choice(SUPPORTED_EXPRESSIONS)
    inputs, d_dims = expr.split("->")
    a_dims, b_dims = inputs.split(",")
    letters = dict.fromkeys(a_dims + b_dims)  # in order (a set's order changes with the hash seed)
    size = {x: rng.choice((0, 1, 3, 8, 17, 40) if x in "bhm" else (1, 8, 24, 64, 72)) for x in letters}
    a = _bf16_values(g, tuple(size[x] for x in a_dims))
    b = _bf16_values(g, tuple(size[x] for x in b_dims))
    d_shape = tuple(size[x] for x in d_dims)
    d_dtype = rng.choice((BF16, F32))
    d = _out(d_shape, d_dtype, rng)
    args = {"expr": expr, "a": _tma_in(a, rng), "b": _tma_in(b, rng), "d": d}
    if d_dtype == F32:
        c = _c_arg(rng, g, d_shape, d)
        if c is not None:
            args["c"] = c
    return Case("einsum", args, note=f"{expr} {size} d={d_dtype}")


def _segments(rng, num_groups: int, alignment: int, psum: bool) -> tuple[int, torch.Tensor]:
    """(M, grouped_layout) with random group sizes (some empty) and -1 padding rows."""
    sizes = [rng.choice(_sizes.segment_rows) for _ in range(num_groups)]
    ends, ids = [], []
    cur = 0
    for gi, s in enumerate(sizes):
        start = align(cur, alignment)
        if s == 0:
            ends.append(cur)
            continue
        ids += [-1] * (start - cur) + [gi] * s
        cur = start + s
        ends.append(cur)
    m = cur + rng.choice((0, 0, 3, alignment))
    ids += [-1] * (m - cur)
    if psum:
        return m, torch.tensor(ends, dtype=I32)
    return m, torch.tensor(ids, dtype=I32).reshape(m)


def _m_grouped_contiguous(rng, g, fp8: bool, b_kn: bool) -> Case:
    num_groups = rng.choice((1, 2, 3, 5))
    psum = rng.random() < 0.3
    alignment = finegemm.get_mk_alignment_for_contiguous_layout()
    m, gl = _segments(rng, num_groups, alignment, psum)
    n = rng.choice(_sizes.grouped_n)
    k = rng.choice(_sizes.grouped_fp8_k) if fp8 else rng.choice(_sizes.grouped_bf16_k)
    b_shape = (num_groups, k, n) if b_kn else (num_groups, n, k)
    args: dict[str, Any] = {}
    if fp8:
        kb, nb = ceil_div(k, 128), ceil_div(n, 128)
        A = _fp8_values(g, (m, k))
        B = _fp8_values(g, b_shape)
        sfb = _scales(g, (num_groups, kb, nb) if b_kn else (num_groups, nb, kb))
        args["a"] = (_tma_in(A, rng), _any_in(_scales(g, (m, kb)), rng))
        args["b"] = (_any_in(B, rng) if b_kn else _tma_in(B, rng), _any_in(sfb, rng))
        fn = "m_grouped_fp8_gemm_nn_contiguous" if b_kn else "m_grouped_fp8_gemm_nt_contiguous"
    else:
        args["a"] = _tma_in(_bf16_values(g, (m, k)), rng)
        args["b"] = _tma_in(_bf16_values(g, b_shape), rng)
        fn = "m_grouped_bf16_gemm_nn_contiguous" if b_kn else "m_grouped_bf16_gemm_nt_contiguous"
    args["d"] = _out((m, n), BF16, rng)
    args["grouped_layout"] = _int_in(gl)
    if psum:
        args["use_psum_layout"] = True
    return Case(fn, args, note=f"G={num_groups} M={m} N={n} K={k} psum={psum}")


def _masked(rng, g, fp8: bool) -> Case:
    num_groups = rng.choice((1, 2, 4))
    m_max = rng.choice(_sizes.masked_m_max)
    n = rng.choice(_sizes.masked_n)
    k = rng.choice(_sizes.masked_fp8_k) if fp8 else rng.choice(_sizes.masked_bf16_k)
    masked = torch.tensor([rng.choice((0, 1, m_max // 2, m_max, rng.randrange(0, m_max + 1)))
                           for _ in range(num_groups)], dtype=I32)
    args: dict[str, Any] = {}
    if fp8:
        kb, nb = ceil_div(k, 128), ceil_div(n, 128)
        args["a"] = (_tma_in(_fp8_values(g, (num_groups, m_max, k)), rng),
                     _any_in(_scales(g, (num_groups, m_max, kb)), rng))
        args["b"] = (_tma_in(_fp8_values(g, (num_groups, n, k)), rng), _any_in(_scales(g, (num_groups, nb, kb)), rng))
        fn = "m_grouped_fp8_gemm_nt_masked"
    else:
        args["a"] = _tma_in(_bf16_values(g, (num_groups, m_max, k)), rng)
        args["b"] = _tma_in(_bf16_values(g, (num_groups, n, k)), rng)
        fn = "m_grouped_bf16_gemm_nt_masked"
    args["d"] = _out((num_groups, m_max, n), BF16, rng)
    args["masked_m"] = _int_in(masked)
    args["expected_m"] = rng.choice((0, 1, m_max, 4 * m_max))
    return Case(fn, args, note=f"G={num_groups} Mmax={m_max} N={n} K={k} masked_m={masked.tolist()}")


def _k_grouped(rng, g, fp8: bool, tn: Optional[bool] = None) -> Case:
    num_groups = rng.choice((1, 2, 3))
    ks = [rng.choice(_sizes.k_grouped_ks) for _ in range(num_groups)]
    sum_k = sum(ks)
    m = rng.choice(_sizes.k_grouped_bf16_m) if not fp8 else rng.choice(_sizes.k_grouped_fp8_m)
    n = rng.choice(_sizes.k_grouped_bf16_n) if not fp8 else rng.choice(_sizes.k_grouped_fp8_n)
    d = _out((num_groups, m, n), F32, rng)
    args: dict[str, Any] = {}
    if fp8:
        A = _fp8_values(g, (m * sum_k,))
        B = _fp8_values(g, (n * sum_k,))
        flat = lambda v: Buf(v, FP8, Placement((0,), (0,), 16 * rng.choice((0, 1, 3)), rng.choice((0, 16))))  # noqa: E731
        args["a"] = (flat(A), _any_in(_scales(g, (sum_k // 128, m)), rng))
        args["b"] = (flat(B), _any_in(_scales(g, (sum_k // 128, n)), rng))
        fn = "k_grouped_fp8_gemm_nt_contiguous"
    else:
        args["a"] = _tma_in(_bf16_values(g, (sum_k, m)), rng)
        args["b"] = _tma_in(_bf16_values(g, (sum_k, n)), rng)
        fn = "k_grouped_bf16_gemm_tn_contiguous"
    args["d"] = d
    args["ks"] = list(ks)
    args["ks_tensor"] = _int_in(torch.tensor(ks, dtype=I32))
    c = _c_arg(rng, g, (num_groups, m, n), d)
    if c is not None:
        args["c"] = c
    if fp8 and (rng.random() < 0.5 if tn is None else tn):
        # DeepGEMM's tn form of the same problem (A_g / B_g stored [k_g, M] / [k_g, N], any strides).
        # Drawn last, so the case's shapes, kernels and every other function's cases stay as before.
        fn = "k_grouped_fp8_gemm_tn_contiguous"
        for name, cols in (("a", m), ("b", n)):
            flat, sf = args[name]
            starts = [sum(ks[:i]) for i in range(num_groups)]
            rows = [flat.values[cols * s:cols * (s + k)].view(cols, k).t() for s, k in zip(starts, ks)]
            args[name] = (_any_in(torch.cat(rows) if rows else flat.values.view(0, cols), rng), sf)
    return Case(fn, args, note=f"G={num_groups} M={m} N={n} ks={ks}")


FUNCTIONS: dict[str, Callable[[random.Random, torch.Generator], Case]] = {
    **{f"fp8_gemm_{L}": (lambda rng, g, L=L: _dense_fp8(rng, g, L)) for L in ("nt", "nn", "tn", "tt")},
    **{f"bf16_gemm_{L}": (lambda rng, g, L=L: _dense_bf16(rng, g, L)) for L in ("nt", "nn", "tn", "tt")},
    "m_grouped_fp8_gemm_nt_contiguous": lambda rng, g: _m_grouped_contiguous(rng, g, True, False),
    "m_grouped_fp8_gemm_nn_contiguous": lambda rng, g: _m_grouped_contiguous(rng, g, True, True),
    "m_grouped_bf16_gemm_nt_contiguous": lambda rng, g: _m_grouped_contiguous(rng, g, False, False),
    "m_grouped_bf16_gemm_nn_contiguous": lambda rng, g: _m_grouped_contiguous(rng, g, False, True),
    "m_grouped_fp8_gemm_nt_masked": lambda rng, g: _masked(rng, g, True),
    "m_grouped_bf16_gemm_nt_masked": lambda rng, g: _masked(rng, g, False),
    "k_grouped_fp8_gemm_nt_contiguous": lambda rng, g: _k_grouped(rng, g, True),
    "k_grouped_bf16_gemm_tn_contiguous": lambda rng, g: _k_grouped(rng, g, False),
}


def _drawn_as(fn: str, base: Callable[[random.Random, torch.Generator], Case]):
    """A generator of `fn` cases from a base generator that draws them now and then: its draws
    retried with new seeds until one is `fn` (a variant of the base's case, drawn last in it)."""
    def draw(rng, g) -> Case:
        while True:
            case = base(rng, g)
            if case.fn == fn:
                return case
            seed = rng.randrange(1 << 30)
            g.manual_seed(seed)
    return draw


# Functions drawn inside another one's generator (same shapes, another layout of the inputs, or a
# case drawn last in it), so that adding them left every earlier seed's case and kernels as they were.
VARIANTS: dict[str, Callable[[random.Random, torch.Generator], Case]] = {
    "k_grouped_fp8_gemm_tn_contiguous": lambda rng, g: _k_grouped(rng, g, True, tn=True),
    "fp8_gemm_nt_skip_head_mid": _drawn_as("fp8_gemm_nt_skip_head_mid", lambda rng, g: _dense_fp8(rng, g, "nt")),
    "einsum": _drawn_as("einsum", lambda rng, g: _dense_bf16(rng, g, "nt")),
    "fp8_einsum": _drawn_as("fp8_einsum", lambda rng, g: _dense_fp8(rng, g, "nt")),
    **{f"cublaslt_gemm_{L}": _drawn_as(f"cublaslt_gemm_{L}", lambda rng, g, L=L: _dense_bf16(rng, g, L))
       for L in ("nt", "nn", "tn", "tt")},
}


def valid_case(seed: int, fn: Optional[str] = None) -> Case:
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    name = fn or rng.choice(sorted(FUNCTIONS))
    return (VARIANTS.get(name) or FUNCTIONS[name])(rng, g)


# SM budgets of settings_case: 1-4 SMs hold fewer CTAs than a cluster of splits or a multicast
# pair may want; 131 is "all but one" (no two-CTA tiles); None is the whole device.
NUM_SMS_CHOICES = (1, 2, 3, 4, 7, 8, 16, 33, 66, 100, 131)


def settings_case(seed: int, fn: Optional[str] = None) -> Case:
    """valid_case(seed, fn) drawn and run under random knobs: an SM budget, PDL on or off, and the
    contiguous layouts' mk alignment (64 / 128, now and then 32, which CUDA rejects)."""
    rng = random.Random(seed * 104729 + 17)
    settings = Settings(num_sms=rng.choice(NUM_SMS_CHOICES) if rng.random() < 0.75 else None,
                        pdl=rng.random() < 0.5, mk_alignment=rng.choice((64, 64, 128, 32)))
    with applied(settings):  # the contiguous layouts' segments follow the alignment
        case = valid_case(seed, fn)
    case.settings = settings
    case.note += f" [{settings.describe()}]"
    return case


@contextlib.contextmanager
def _sized(sizes: Sizes):
    global _sizes
    saved, _sizes = _sizes, sizes
    try:
        yield
    finally:
        _sizes = saved


def multiply_adds(case: Case) -> int:
    """The case's multiply-adds (what its CPU reference costs)."""
    a = case.args
    d = a["d"].values
    if case.fn.startswith("k_grouped"):
        return d.numel() * sum(a["ks"])
    A = a["a"][0].values if isinstance(a["a"], tuple) else a["a"].values
    k = A.shape[-1] if case.fn.startswith(("m_grouped", "fp8_gemm_n", "bf16_gemm_n", "fp8_einsum")) else A.shape[0]
    return d.numel() * k


LARGE_MAX_MULTIPLY_ADDS = 6 * 10 ** 9  # a CPU fp64 reference in about a second on the device's host


def skinny_case(seed: int) -> Case:
    """A valid dense case (any of the eight dense functions) with SKINNY shapes."""
    fn = random.Random(seed * 31 + 5).choice(DENSE_FUNCTIONS)
    with _sized(SKINNY):
        case = valid_case(seed, fn)
    case.note += " (skinny)"
    return case


def large_case(seed: int, fn: Optional[str] = None) -> Case:
    """A valid case with LARGE shapes (M, N up to ~4-7k, K up to 2-4k; at most
    LARGE_MAX_MULTIPLY_ADDS, redrawn until so), placed like valid_case's."""
    for attempt in range(64):
        with _sized(LARGE):
            case = valid_case(seed * 64 + attempt, fn)
        if multiply_adds(case) <= LARGE_MAX_MULTIPLY_ADDS:
            case.note += f" (large, seed {seed} draw {attempt})"
            return case
    raise AssertionError(f"large_case({seed}): no draw under {LARGE_MAX_MULTIPLY_ADDS} multiply-adds")


# ----------------------------------------------------------------------------- mutations
def _tensor_args(case: Case) -> list[tuple[str, Optional[int]]]:
    """(name, index in a pair or None) of every tensor argument (aliases excluded)."""
    out = []
    for name, v in case.args.items():
        if isinstance(v, Buf):
            out.append((name, None))
        elif isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, Buf) for x in v):
            out += [(name, 0), (name, 1)]
    return out


def _get(case: Case, name: str, idx: Optional[int]) -> Buf:
    v = case.args[name]
    return v if idx is None else v[idx]


def _set(case: Case, name: str, idx: Optional[int], buf: Any) -> None:
    if idx is None:
        case.args[name] = buf
    else:
        pair = list(case.args[name])
        pair[idx] = buf
        case.args[name] = tuple(pair)


def _label(name: str, idx: Optional[int]) -> str:
    return name if idx is None else f"{name}[{idx}]"


def _allowed_dtypes(case: Case, label: str) -> tuple:
    fn = case.fn
    if label in ("grouped_layout", "masked_m", "ks_tensor"):
        return (I32,)
    if label.endswith("[1]"):
        return (F32,)
    if label.endswith("[0]"):
        return (FP8,)
    if label == "c":
        return (F32,)
    if label == "d":
        if fn.startswith("k_grouped") or "c" in case.args or case.args.get("recipe") == (1, 1, 128):
            return (F32,)
        if fn.startswith("m_grouped"):
            return (BF16,)
        return (BF16, F32)
    return (BF16,)  # bf16 a / b


def _tma_ruled(case: Case, label: str) -> bool:
    if label.endswith("[1]") or label in ("grouped_layout", "masked_m", "ks_tensor"):
        return False
    if case.fn == "einsum" or case.fn.startswith("cublaslt"):
        return False  # any strides (einsum: a contiguous last dimension, its own rule below)
    if case.fn == "m_grouped_fp8_gemm_nn_contiguous" and label == "b[0]":
        return False  # read once by a K-major copy (any strides)
    if case.fn.startswith("k_grouped_fp8") and label in ("a[0]", "b[0]"):
        return False  # nt: 1-D, contiguity rules of their own; tn: copied (any strides)
    return True


MUTATIONS = ("dtype", "rank", "shape", "inner_stride", "odd_pitch", "misalign", "not_a_tensor", "self_overlap",
             "c_partial_overlap", "scalar", "group_values", "masked_values", "ks_values", "pair")


def bad_case(seed: int, fn: Optional[str] = None) -> Optional[Case]:
    """A valid case with one rule broken, or None when the drawn mutation does not apply to it."""
    case = valid_case(seed, fn)
    rng = random.Random(seed * 7919 + 1)
    kind = rng.choice(MUTATIONS)
    case.mutation = kind
    tensors = _tensor_args(case)
    name, idx = rng.choice(tensors)
    buf = _get(case, name, idx)
    label = _label(name, idx)
    shape = tuple(buf.values.shape)
    if kind == "dtype":
        choices = [t for t in (FP8, torch.float8_e5m2, BF16, torch.float16, F32, I32, torch.int64)
                   if t not in _allowed_dtypes(case, label)]
        new = rng.choice(choices)
        vals = buf.values.float().to(torch.int64 if new in (I32, torch.int64) else new).to(new)
        _set(case, name, idx, Buf(vals, new, row_major(len(shape)), buf.output))
        case.note += f" {label}: {buf.dtype} -> {new}"
        return case
    if kind == "rank":
        vals = buf.values.unsqueeze(0) if rng.random() < 0.5 or buf.values.dim() == 1 else buf.values.flatten()
        _set(case, name, idx, Buf(vals.contiguous(), buf.dtype, row_major(vals.dim()), buf.output))
        case.note += f" {label}: rank {len(shape)} -> {vals.dim()}"
        return case
    if kind == "shape":
        c_is_d = isinstance(case.args.get("c"), _Alias)
        if label == "ks_tensor" or (c_is_d and label in ("c", "d")):
            return None  # ks_tensor's length is checked against ks first; d's values are c's
        dim = rng.randrange(len(shape))
        if dim == 0 and label == "b" and case.fn.startswith("m_grouped_bf16") and case.fn.endswith("contiguous"):
            return None  # B's group count is G itself there (no sfb to disagree): another G can be valid
        new_shape = list(shape)
        new_shape[dim] += rng.choice((1, -1)) if shape[dim] > 1 else 1
        if label.endswith("[0]") and case.fn.startswith("k_grouped_fp8"):
            new_shape[dim] = shape[dim] + 1  # 1-D: any other element count
        vals = torch.zeros(new_shape).to(buf.dtype) if buf.dtype != I32 else torch.zeros(new_shape, dtype=I32)
        _set(case, name, idx, Buf(vals, buf.dtype, row_major(len(new_shape)), buf.output))
        case.note += f" {label}: shape {shape} -> {tuple(new_shape)}"
        return case
    if kind in ("inner_stride", "odd_pitch", "misalign"):
        einsum_rule = case.fn == "einsum" and kind == "inner_stride"  # its one stride rule
        if (not (_tma_ruled(case, label) or einsum_rule) or len(shape) < 2 or min(shape) < 2
                or isinstance(case.args.get("c"), _Alias)):
            return None
        esize = buf.values.element_size()
        if kind == "inner_stride":
            perm = list(range(len(shape)))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            place = Placement(tuple(perm), (0,) * len(shape))
        elif kind == "odd_pitch":
            pads = [0] * len(shape)
            pads[-1] = _tma_pad(rng, shape[-1], esize, True)
            place = Placement(tuple(range(len(shape))), tuple(pads))
        else:
            place = Placement(tuple(range(len(shape))), tma_placement(rng, shape, buf.dtype, strange=False).pad,
                              rng.randrange(1, 16 // esize))
        _set(case, name, idx, Buf(buf.values, buf.dtype, place, buf.output))
        case.note += f" {label}: {kind}"
        return case
    if kind == "not_a_tensor":
        # None is a valid c (no accumulation): only the other non-tensors break c's rule.
        _set(case, name, idx, rng.choice((1.5, [1, 2], "x") if name == "c" else (None, 1.5, [1, 2], "x")))
        case.note += f" {label}: not a tensor"
        return case
    if kind == "self_overlap":
        out = case.args["d"]
        if (not isinstance(out, Buf) or out.values.shape[0] < 2 or out.values.numel() == 0
                or isinstance(case.args.get("c"), _Alias)):
            return None  # (an empty d has no elements to share)
        if case.fn.endswith("masked") or case.fn.startswith("k_grouped"):
            return None  # [G, ...] outputs: the 2-D outputs exercise the same rule
        out.expand_dim = 0
        case.note += " d: rows alias (stride 0)"
        return case
    if kind == "c_partial_overlap":
        d = case.args["d"]
        if "c" not in case.args or not isinstance(d, Buf) or d.values.shape[-2] < 2 or d.values.numel() == 0:
            return None  # (an empty d overlaps nothing)
        case.args["c"] = _Alias("d", rows_shift=1)
        d.place = dataclasses.replace(d.place, tail=d.place.tail + 4 * d.values.shape[-1] + 64)
        case.note += " c: d moved one row"
        return case
    if kind == "scalar":
        if case.fn.startswith("cublaslt"):
            return None  # no scalar arguments
        if case.fn == "einsum":
            key, value = rng.choice((("expr", "ij,jk->ik"), ("expr", 3), ("expr", "bhr,hdr->bhr"),
                                     ("use_cublaslt", 1)))
            case.args[key] = value
            case.note += f" {key}={value!r}"
            return case
        if case.fn == "fp8_einsum":  # no compiled_dims / disable_ue8m0_cast (DeepGEMM's signature)
            key, value = rng.choice((("expr", "ij,jk->ik"), ("expr", 3), ("expr", "bhd,hdr->bhr"),
                                     ("recipe", (1, 2, 3)), ("recipe", (1, 1, 128)), ("recipe", "x")))
            case.args[key] = value
            case.note += f" {key}={value!r}"
            return case
        choices = []
        if "head_splits" in case.args:
            left, mid, right = case.args["head_splits"]
            choices += [("head_splits", (left, mid)), ("head_splits", (left, -1, right)),
                        ("head_splits", (left, float(mid), right)), ("head_splits", (0, mid, 0)),
                        ("head_splits", "x")]
        if "expected_m" in case.args or case.fn.endswith("masked"):
            choices += [("expected_m", -1), ("expected_m", 2.5), ("expected_m", True)]
        if "fp8" in case.fn:
            choices += [("recipe", (1, 2, 3)), ("recipe", "x")]
            if not case.fn.startswith("k_grouped"):  # DeepGEMM's k-grouped function has no such flag
                choices.append(("disable_ue8m0_cast", 1))
        if "contiguous" in case.fn and case.fn.startswith("m_grouped"):
            choices += [("use_psum_layout", 1), ("ensure_zero_padding", "yes")]
        choices += [("compiled_dims", "xyz"), ("compiled_dims", 3)]
        key, value = rng.choice(choices)
        case.args[key] = value
        case.note += f" {key}={value!r}"
        return case
    if kind == "group_values":
        if "grouped_layout" not in case.args:
            return None
        gl = case.args["grouped_layout"].values.clone()
        if gl.numel() == 0:
            return None
        G = case.args["b"][0].values.shape[0] if isinstance(case.args["b"], tuple) else case.args["b"].values.shape[0]
        if case.args.get("use_psum_layout"):
            what = rng.choice(("neg", "over_m", "decreasing"))
            m = case.args["d"].values.shape[0]
            if what == "neg":
                gl[0] = -1
            elif what == "over_m":
                gl[-1] = m + 1
            else:
                if gl.numel() < 2 or int(gl[-1]) == 0:
                    return None
                gl[0] = int(gl[-1]) + 1
        else:
            what = rng.choice(("id_too_big", "id_below", "split_run", "misaligned"))
            if what == "id_too_big":
                gl[rng.randrange(gl.numel())] = G
            elif what == "id_below":
                gl[rng.randrange(gl.numel())] = -2
            elif what == "split_run":
                real = (gl >= 0).nonzero().flatten()
                if real.numel() == 0 or gl.numel() < 3:
                    return None
                gid = int(gl[real[0]])
                gl[-1] = gid
                if int(gl[-2]) == gid:  # already one run up to the end: break it
                    gl[-2] = -1
                    if gl.numel() < 3 or int(gl[-3]) != gid:
                        return None
            else:
                real = (gl >= 0).nonzero().flatten()
                if real.numel() == 0:
                    return None
                start = int(real[0])
                gid = int(gl[start])
                if start == 0:
                    return None
                gl[start - 1] = gid  # the run now starts one row early
        case.args["grouped_layout"] = _int_in(gl)
        case.note += f" grouped_layout: {what}"
        return case
    if kind == "masked_values":
        if "masked_m" not in case.args:
            return None
        mm = case.args["masked_m"].values.clone()
        m_max = case.args["d"].values.shape[1]
        mm[rng.randrange(mm.numel())] = rng.choice((-1, m_max + 1, 1 << 30))
        case.args["masked_m"] = _int_in(mm)
        case.host_value_rule = True
        case.note += f" masked_m={mm.tolist()}"
        return case
    if kind == "ks_values":
        if "ks" not in case.args:
            return None
        ks = list(case.args["ks"])
        what = rng.choice(("not_128", "negative", "length", "tensor_differs", "float"))
        if what == "not_128":
            ks[0] += 64
        elif what == "negative":
            ks[0] = -128
        elif what == "length":
            ks = ks + [0]
        elif what == "float":
            ks[0] = float(ks[0])
        else:
            t = case.args["ks_tensor"].values.clone()
            t[0] += 128
            case.args["ks_tensor"] = _int_in(t)
            case.host_value_rule = True
            case.note += " ks_tensor differs from ks"
            return case
        case.args["ks"] = ks
        case.note += f" ks: {what} {ks}"
        return case
    if kind == "pair":
        pairs = [n for n, v in case.args.items() if isinstance(v, tuple) and len(v) == 2]
        if not pairs:
            return None
        p = rng.choice(pairs)
        v = case.args[p]
        case.args[p] = rng.choice((v[0], (v[0],), (v[0], v[1], v[1]), [v[0], v[1]]))
        case.note += f" {p}: not a 2-tuple"
        return case
    return None


# ----------------------------------------------------------------------------- running
@dataclasses.dataclass
class Outcome:
    error: Optional[BaseException]
    mat: Materialized

    @property
    def accepted(self) -> bool:
        return self.error is None


def _set_knobs(num_sms: Optional[int], pdl: bool, mk_alignment: int) -> None:
    from finegemm import quant, runtime

    if num_sms is None:
        runtime._num_sms = None  # no public "whole device again": DeepGEMM's API has none either
    else:
        runtime.set_num_sms(num_sms)
    runtime.set_pdl(pdl)
    quant.set_mk_alignment_for_contiguous_layout(mk_alignment)


@contextlib.contextmanager
def applied(settings: Settings):
    """Run a block under `settings`, restoring the knobs' previous values afterwards."""
    from finegemm import quant, runtime

    saved = (runtime.get_num_sms_setting(), runtime.get_pdl(), quant.get_mk_alignment_for_contiguous_layout())
    try:
        _set_knobs(settings.num_sms, settings.pdl, settings.mk_alignment)
        yield
    finally:
        _set_knobs(*saved)


def run_case(case: Case, device, settings: Optional[Settings] = None) -> Outcome:
    """Materialize the case on `device` and call its function under the case's settings (or
    `settings`, to rerun it under other knobs)."""
    mat = materialize(case, device)
    return call_case(case, mat, settings)


def call_case(case: Case, mat: "Materialized", settings: Optional[Settings] = None) -> Outcome:
    """Call the case's function; on CUDA also finegemm.check_errors(), so that an input value
    checked on the GPU (the contiguous layouts) gets its verdict here, as the CPU call's."""
    fn = getattr(finegemm, case.fn)
    try:
        with applied(case.settings if settings is None else settings):
            fn(**mat.kwargs)
        if any(buf.is_cuda for buf, _, _ in mat.bufs.values()):
            try:
                finegemm.check_errors()
            except ValueError as exc:
                from finegemm.api import legacy

                raise (legacy.renamed_error(case.fn, exc) if case.fn in legacy.__all__ else exc) from None
    except Exception as exc:  # noqa: BLE001 - classified by the caller
        return Outcome(exc, mat)
    return Outcome(None, mat)


def clean_error(case: Case, exc: BaseException) -> bool:
    """A TypeError / ValueError / NotImplementedError whose message starts with the function's name
    (a DeepGEMM v1 name's errors: "<name> (DeepGEMM v1 name of <target>; ...): ...")."""
    msg = str(exc)
    return isinstance(exc, CLEAN_ERRORS) and (msg.startswith(f"{case.fn}:") or msg.startswith(f"{case.fn} ("))


# ----------------------------------------------------------------------------- DeepGEMM v1 names
# v1 name -> (finegemm function, the recipe it implies, d's dtype, c is d, argument renames).
LEGACY = {
    "gemm_fp8_fp8_bf16_nt": ("fp8_gemm_nt", (1, 128, 128), BF16, False, {}),
    "wgrad_gemm_fp8_fp8_fp32_nt": ("fp8_gemm_nt", (1, 1, 128), F32, True, {}),
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous": ("m_grouped_fp8_gemm_nt_contiguous", None, BF16, False,
                                                  {"grouped_layout": "m_indices"}),
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked": ("m_grouped_fp8_gemm_nt_masked", None, BF16, False, {}),
    "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt": ("k_grouped_fp8_gemm_nt_contiguous", None, F32, True,
                                             {"ks": "batch_sizes"}),
}
_LEGACY_NAMES = {"a": "lhs", "b": "rhs", "d": "out"}


def as_legacy(case: Case) -> Optional[Case]:
    """The same call through a DeepGEMM v1 name (finegemm.api.legacy), or None when the case uses
    something the v1 signature cannot express (another recipe or output dtype, a separate c, psum
    layouts, compiled_dims, ...). Bad cases map too: their broken argument under its v1 name."""
    for legacy, (target, recipe, d_dtype, c_is_d, renames) in LEGACY.items():
        if case.fn != target:
            continue
        args = dict(case.args)
        got_recipe = args.pop("recipe", None)
        if got_recipe is not None and got_recipe != recipe:
            continue
        if recipe == (1, 1, 128) and got_recipe is None:
            continue
        d = args.get("d")
        if not isinstance(d, Buf) or d.dtype != d_dtype:
            continue
        c = args.pop("c", None)
        if not ((isinstance(c, _Alias) and c.rows_shift == 0) if c_is_d else c is None):
            continue  # the v1 weight-gradient names accumulate into out (c is d); the others take no c
        args.pop("ks_tensor", None)  # the v1 k-grouped name builds it from batch_sizes
        allowed = {"a", "b", "d", "grouped_layout", "masked_m", "expected_m", "ks"}
        if set(args) - allowed:
            continue
        out = {renames.get(k, _LEGACY_NAMES.get(k, k)): v for k, v in args.items()}
        return dataclasses.replace(case, fn=legacy, args=out, outputs=("out",), note=case.note + f" (as {legacy})")
    return None


def untouched_cells(out: Outcome, case: Case) -> list[str]:
    """Names of buffers whose bits changed where they must not: any cell of an input's buffer, or a
    cell of an output's buffer outside the output's elements."""
    bad = []
    for name, (buf, mask, spec) in out.mat.bufs.items():
        int_dtype, bits = _POISON_BITS[spec.dtype]
        now = buf.view(int_dtype).cpu()
        if spec.output and name in case.outputs:
            if not bool((now[~mask] == bits).all()):
                bad.append(name)
            continue
        before = materialize_buf(spec, "cpu")[1].view(int_dtype)
        if not torch.equal(now, before):
            bad.append(name)
    return bad


def bitwise_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Same shape and the same bits in every element (NaN payloads and -0.0 included)."""
    int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return x.dtype == y.dtype and torch.equal(x.contiguous().view(int_dtype), y.contiguous().view(int_dtype))


def output_values(out: Outcome, case: Case) -> dict[str, torch.Tensor]:
    """The outputs' elements (CPU), whatever the device."""
    return {name: out.mat.kwargs[name].detach().cpu() for name in case.outputs}


def refill(case: Case, mat: Materialized, seed: int) -> Case:
    """New values, in place, in every float input of an already materialized (and called) case:
    the same tensors (addresses, shapes, strides) holding other numbers, and the outputs poisoned
    again (d holds the new c where c is d). Returns the case with those values, for the reference.
    A second call on `mat` must compute with the new values: nothing the first call cached (a
    prepared launch, a scale copy, a transposed operand) may stand in for an input."""
    g = torch.Generator().manual_seed(seed)
    new = dataclasses.replace(case, args=dict(case.args))
    c_is_d = isinstance(case.args.get("c"), _Alias)
    for name, idx in _tensor_args(case):
        b = _get(case, name, idx)
        shape = tuple(b.values.shape)
        if b.output:  # d: poisoned, or the new c when c is d
            vals = torch.randn(shape, generator=g) if c_is_d else None
        elif b.dtype == FP8:
            vals = _fp8_values(g, shape)
        elif b.dtype == BF16:
            vals = _bf16_values(g, shape)
        elif b.dtype == F32:
            vals = _scales(g, shape) if idx == 1 else torch.randn(shape, generator=g)
        else:  # group layouts, masked_m, ks_tensor: the same values
            continue
        label = _label(name, idx)
        buf, mask, _spec = mat.bufs[label]
        if vals is None:
            int_dtype, bits = _POISON_BITS[b.dtype]
            buf.view(int_dtype).fill_(bits)
            continue
        b = dataclasses.replace(b, values=vals)
        view = mat.kwargs[name] if idx is None else mat.kwargs[name][idx]
        if vals.numel():
            view.copy_(vals.to(view.device))
        _set(new, name, idx, b)
        mat.bufs[label] = (buf, mask, b)
    return new


# ----------------------------------------------------------------------------- kernels a case plans
def kernel_plans(case: Case) -> list[tuple]:
    """The plan arguments of the kernels a valid case launches on CUDA (for precompiling and a
    parallel warm-up): ("fp8", m, n, k, out_fp32, has_c, one_d_one_d), ("fp8_grouped", kind, m, n,
    k, G, expected_m, alignment), ("fp8_k_grouped", m, n, ks, has_c), ("bf16", m, n, k, layout,
    out_fp32, has_c), ("bf16_grouped", kind, m, n, k, G, expected_m, alignment, b_mn_major),
    ("bf16_k_grouped", m, n, sum_k, G, has_c), ("fp8_heads", b, d, r, h, out_fp32, has_c)."""
    from finegemm.heuristics.sm90_fp8_gemm import GEMM_GROUPED_CONTIGUOUS, GEMM_GROUPED_MASKED

    a = case.args
    fn = case.fn
    has_c = "c" in a
    if fn == "einsum" or fn.startswith("cublaslt"):
        return []  # cuBLAS through PyTorch
    if fn == "fp8_einsum":
        # The heads-packed kernel where r % 128 == 0 (whether the placements let it read in place
        # is decided at the call: both plans are warmed), else (and as its fallback) the bf16 d's
        # masked call over the heads, the fp32 d's nt GEMM per head.
        A, B = a["a"][0].values, a["b"][0].values
        batch, heads, r = A.shape
        n = B.shape[1]
        if 0 in (batch, heads, r, n):
            return []
        out_fp32 = a["d"].dtype == F32
        plans = [("fp8_heads", batch, n, r, heads, out_fp32, has_c)] if r % 128 == 0 else []
        if out_fp32:
            return plans + [("fp8", batch, n, r, True, has_c, False)]
        return plans + [("fp8_grouped", GEMM_GROUPED_MASKED, batch, n, r, heads, batch, 0)]
    if fn.startswith("fp8_gemm_"):  # fp8_gemm_nt_skip_head_mid too: the nt GEMM into a scratch
        A = a["a"][0].values
        B = a["b"][0].values
        m, k = A.shape if fn[9] == "n" else (A.shape[1], A.shape[0])
        n = B.shape[0] if fn[10] == "t" else B.shape[1]
        if 0 in (m, n, k):
            return []
        out_fp32 = a["d"].dtype == F32
        return [("fp8", m, n, k, out_fp32, has_c, a.get("recipe") == (1, 1, 128))]
    if fn.startswith("bf16_gemm_"):
        layout = fn[-2:]
        A, B = a["a"].values, a["b"].values
        m, k = A.shape if layout[0] == "n" else (A.shape[1], A.shape[0])
        n = B.shape[0] if layout[1] == "t" else B.shape[1]
        if 0 in (m, n, k):
            return []
        return [("bf16", m, n, k, layout, a["d"].dtype == F32, has_c)]
    alignment = case.settings.mk_alignment
    if case.unsupported_on_cuda():
        return []
    if fn.startswith("m_grouped") and fn.endswith("contiguous"):
        fp8 = "fp8" in fn
        b_kn = "_nn_" in fn
        A = a["a"][0].values if fp8 else a["a"].values
        B = a["b"][0].values if fp8 else a["b"].values
        m, k = A.shape
        G, n = B.shape[0], B.shape[2] if b_kn else B.shape[1]
        if 0 in (m, n, k, G):
            return []
        if fp8:
            return [("fp8_grouped", GEMM_GROUPED_CONTIGUOUS, m, n, k, G, 0, alignment)]
        return [("bf16_grouped", GEMM_GROUPED_CONTIGUOUS, m, n, k, G, 0, alignment, b_kn)]
    if fn.endswith("masked"):
        fp8 = "fp8" in fn
        A = a["a"][0].values if fp8 else a["a"].values
        G, m_max, k = A.shape
        n = (a["b"][0].values if fp8 else a["b"].values).shape[1]
        if 0 in (G, m_max, n, k):
            return []
        if fp8:
            return [("fp8_grouped", GEMM_GROUPED_MASKED, m_max, n, k, G, int(a["expected_m"]), 0)]
        return [("bf16_grouped", GEMM_GROUPED_MASKED, m_max, n, k, G, int(a["expected_m"]), 0, False)]
    G, m, n = a["d"].values.shape
    ks = tuple(a["ks"])  # hashable: plans are collected in sets
    if 0 in (G, m, n) or sum(ks) == 0:
        return []
    if fn.startswith("k_grouped_fp8"):
        return [("fp8_k_grouped", m, n, ks, has_c)]
    return [("bf16_k_grouped", m, n, sum(ks), G, has_c)]


def warm_plan(p: tuple, device: int) -> None:
    """Plan (compiling on first use) one entry of kernel_plans() on a CUDA device: what the call
    itself would do, so that a pool of threads can build a case list's kernels in parallel."""
    kind, args = p[0], p[1:]
    if kind == "fp8":
        from finegemm.ops import sm90_fp8_gemm

        m, n, k, out_fp32, has_c, one_d_one_d = args
        sm90_fp8_gemm.plan(m, n, k, out_fp32, has_c, device, one_d_one_d=one_d_one_d)
    elif kind == "fp8_grouped":
        from finegemm.ops import sm90_fp8_gemm

        sm90_fp8_gemm.plan_grouped(*args, device)
    elif kind == "fp8_heads":  # fp8_einsum's heads-packed kernel
        from finegemm.ops import sm90_fp8_gemm

        batch, n, r, heads, out_fp32, has_c = args
        for sfa_gather in (False, True):  # sfa through its copy, and gathered in place
            sm90_fp8_gemm.plan_heads_packed(batch, n, r, heads, device, out_fp32, has_c, sfa_gather)
    elif kind == "fp8_k_grouped":
        from finegemm.ops import sm90_fp8_k_grouped

        m, n, ks, has_c = args
        sm90_fp8_k_grouped.plan(m, n, list(ks), has_c, device)
    elif kind == "bf16":
        from finegemm.ops import sm90_bf16_gemm

        sm90_bf16_gemm.plan(*args, device)
    elif kind == "bf16_grouped":
        from finegemm.ops import sm90_bf16_gemm

        *head, b_mn_major = args
        sm90_bf16_gemm.plan_grouped(*head, device, b_mn_major=b_mn_major)
    elif kind == "bf16_k_grouped":
        from finegemm.ops import sm90_bf16_gemm

        sm90_bf16_gemm.plan_k_grouped(*args, device)
    else:
        raise ValueError(f"unknown plan kind {kind!r}")


def warm_plans(plans, device: int, workers: int = 16, num_sms: Optional[int] = None) -> None:
    """warm_plan() for every plan, in a pool of threads (nvcc runs in parallel), under an SM
    budget (plans are cached per budget)."""
    import concurrent.futures

    with applied(Settings(num_sms=num_sms)), concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda p: warm_plan(p, device), plans))


def compare_outputs(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], max_diff: float = 1e-5) -> list[str]:
    """Mismatches between two runs' outputs: the same cells left at the poison (NaN), and the
    others within calc_diff <= max_diff (exactly equal where the expected values are all zero)."""
    from finegemm.testing.numeric import calc_diff

    problems = []
    for name, w in want.items():
        x = got[name]
        wn, xn = torch.isnan(w.float()), torch.isnan(x.float())
        if not torch.equal(wn, xn):
            problems.append(f"{name}: NaN cells differ ({int((wn != xn).sum())} of {w.numel()})")
            continue
        keep = ~wn
        w64, x64 = w.double()[keep], x.double()[keep]
        if w64.numel() == 0:
            continue
        if not bool(torch.isfinite(x64).all()):
            problems.append(f"{name}: non-finite values where the reference is finite")
        elif float((w64 * w64).sum()) == 0.0:
            if not torch.equal(w64, x64):
                problems.append(f"{name}: expected all zeros, max |value| {float(x64.abs().max())}")
        else:
            diff = calc_diff(x64, w64)
            if diff > max_diff:
                problems.append(f"{name}: calc_diff {diff:.3g} > {max_diff}")
    return problems
