"""Randomized checks of the FP8 casts and scale-layout helpers (finegemm.quant, DeepGEMM's utils).

A *cast case* is one call of per_token / per_block / per_channel_cast_to_fp8 on a random x: shape
(empty, 1, partial blocks, several blocks), dtype (bf16, fp16, fp32), granularity, UE8M0 on or
off, a random memory placement (transposed, row-padded, offset views), values over many decades
with whole blocks of zeros, values at the FP8 limits, and sometimes inf / NaN. `check_cast` states
what every result must satisfy; `bad_call` builds one call that breaks a documented rule.

Properties (tests/test_quant_fuzz.py on CPU, tests/gpu/test_quant_gpu.py on CUDA, where the
results must also equal the CPU's bit for bit):
- q is e4m3fn, x's shape, contiguous, |q| <= 448 wherever finite; sf is fp32 of the documented
  shape and strides;
- a finite block's scale is max(amax, 1e-4) * fp32(1/448) (DeepGEMM's amax / 448 as CUDA computes
  it), or with UE8M0 the power of two in
  [that, 2 x that); a block holding inf gets an inf scale, one holding NaN a NaN scale, so it
  dequantizes to NaN everywhere (never to finite values);
- q * sf is within FP8's rounding of x on finite blocks (3 mantissa bits, half a subnormal step);
- the result does not depend on x's strides (bitwise equal to the cast of x.contiguous());
  `same_bits` compares two results (NaNs equal whatever their payload or sign);
- a bad call raises TypeError / ValueError / NotImplementedError whose message starts with
  "<function>:" and names the argument.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Callable, Optional

import torch

from finegemm import quant
from finegemm.utils import align, ceil_div

__all__ = ["CAST_FUNCTIONS", "CastCase", "cast_case", "make_input", "run_cast", "check_cast", "block_geometry",
           "BadCall", "bad_call", "BAD_CALL_KINDS", "raises_clean", "same_bits", "transform_case", "check_transform"]

CAST_FUNCTIONS = ("per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8")
_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_SPECIALS = ("none", "none", "none", "zeros", "limits", "inf", "nan")


@dataclasses.dataclass(frozen=True)
class CastCase:
    fn: str
    shape: tuple  # (rows, cols) of x
    dtype: torch.dtype
    gran_k: int
    use_ue8m0: bool
    layout: str  # "contiguous", "transposed", "padded" (row pitch > cols), "offset"
    special: str  # values beyond plain random: see _SPECIALS
    seed: int


def cast_case(seed: int, fn: Optional[str] = None) -> CastCase:
    rng = random.Random(seed)
    fn = fn or rng.choice(CAST_FUNCTIONS)
    gran = rng.choice((128, 128, 128, 64, 32))
    dim = lambda: rng.choice((0, 1, 2, gran - 1, gran, gran + 1, 2 * gran + rng.randrange(1, gran), rng.randrange(1, 700)))
    shape = (dim(), dim())
    dtype = rng.choice(_DTYPES)
    special = rng.choice(_SPECIALS)
    if dtype == torch.float16 and special == "limits":
        special = "none"  # fp16 cannot hold the magnitudes of "limits"
    return CastCase(fn, shape, dtype, gran, rng.random() < 0.5, rng.choice(("contiguous", "transposed", "padded", "offset")),
                    special, seed)


def _values(case: CastCase) -> torch.Tensor:
    g = torch.Generator().manual_seed(case.seed)
    rows, cols = case.shape
    x = torch.randn((rows, cols), generator=g, dtype=torch.float64)
    # Magnitudes over 12 decades, per row and per column, so blocks differ by orders of magnitude.
    x *= torch.pow(10.0, torch.randint(-6, 6, (rows, 1), generator=g)).double()
    x *= torch.pow(10.0, torch.randint(-2, 2, (1, cols), generator=g)).double()
    if case.dtype == torch.float16:
        x = x.clamp(-6e4, 6e4)
    if x.numel():
        r, c = torch.randint(0, rows, (1,), generator=g).item(), torch.randint(0, cols, (1,), generator=g).item()
        if case.special == "zeros":  # a band of zero rows and columns: all-zero blocks
            x[r:r + case.gran_k] = 0
            x[:, c:c + case.gran_k] = 0
        elif case.special == "limits":  # bf16 / fp32 extremes and exact FP8 maxima
            x[r, :] = 448.0
            x[:, c] = -3.0e38 if case.dtype == torch.float32 else -3.0e38 / 2
            x[r, c] = 1e-30
        elif case.special == "inf":
            x[r, c] = float("inf") if (r + c) % 2 else float("-inf")
        elif case.special == "nan":
            x[r, c] = float("nan")
    return x.to(case.dtype)


def make_input(case: CastCase, device) -> torch.Tensor:
    """x with the case's values in the case's memory placement on `device`."""
    x = _values(case).to(device)
    rows, cols = case.shape
    if case.layout == "transposed":
        return x.t().contiguous().t()
    if case.layout == "padded":
        buf = torch.full((rows, cols + 3), float("nan"), dtype=case.dtype, device=device)
        buf[:, :cols] = x
        return buf[:, :cols]
    if case.layout == "offset":
        buf = torch.full((rows * cols + 5,), float("nan"), dtype=case.dtype, device=device)
        view = buf[5:].view(rows, cols)
        view.copy_(x)
        return view
    return x


def run_cast(case: CastCase, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return getattr(quant, case.fn)(x, use_ue8m0=case.use_ue8m0, gran_k=case.gran_k)


def block_geometry(case: CastCase) -> tuple[tuple, tuple, Callable]:
    """(sf shape, sf strides, expand) for the case: expand(sf) broadcasts sf to x's shape."""
    rows, cols = case.shape
    g = case.gran_k
    if case.fn == "per_token_cast_to_fp8":
        shape = (rows, ceil_div(cols, g))
        return shape, (1, align(rows, 4)), lambda s: s.repeat_interleave(g, 1)[:, :cols]
    if case.fn == "per_block_cast_to_fp8":
        shape = (ceil_div(rows, g), ceil_div(cols, g))
        return shape, (shape[1], 1), lambda s: s.repeat_interleave(g, 0)[:rows].repeat_interleave(g, 1)[:, :cols]
    shape = (ceil_div(rows, g), cols)
    return shape, (align(cols, 4), 1), lambda s: s.repeat_interleave(g, 0)[:rows]


def _block_amax(case: CastCase, x: torch.Tensor) -> torch.Tensor:
    """Per-block max |x| in fp64 (NaN where a block holds NaN), in sf's shape."""
    rows, cols = case.shape
    g = case.gran_k
    (sr, sc), _, _ = block_geometry(case)
    rb = g if case.fn in ("per_block_cast_to_fp8", "per_channel_cast_to_fp8") else 1
    cb = g if case.fn in ("per_token_cast_to_fp8", "per_block_cast_to_fp8") else 1
    padded = torch.zeros((sr * rb, sc * cb), dtype=torch.float64)
    padded[:rows, :cols] = x.double().cpu()
    blocks = padded.view(sr, rb, sc, cb).abs()
    amax = blocks.amax(dim=(1, 3))
    return torch.where(blocks.isnan().any(dim=3).any(dim=1), torch.full_like(amax, float("nan")), amax)


def check_cast(case: CastCase, x: torch.Tensor, q: torch.Tensor, sf: torch.Tensor) -> list[str]:
    """The properties of one result; a list of what failed (empty when all hold)."""
    bad = []
    shape, strides, expand = block_geometry(case)
    if q.dtype != torch.float8_e4m3fn or tuple(q.shape) != case.shape or not q.is_contiguous():
        bad.append(f"q: {q.dtype} {tuple(q.shape)} contiguous={q.is_contiguous()}")
    if sf.dtype != torch.float32 or tuple(sf.shape) != shape:
        bad.append(f"sf: {sf.dtype} {tuple(sf.shape)}, want {shape}")
        return bad
    if sf.numel() and all(n > 1 for n in shape) and sf.stride() != strides:
        bad.append(f"sf strides {sf.stride()}, want {strides}")
    qf, s = q.float().cpu(), sf.cpu().double()
    if (qf[qf.isfinite()].abs() > 448).any():
        bad.append("|q| > 448")
    amax = _block_amax(case, x)
    exact = amax.clamp(min=1e-4).float().double() / 448  # the fp32 amax, divided in fp64
    finite = amax.isfinite()
    if case.use_ue8m0:
        mant, _ = torch.frexp(s[finite])
        if not ((mant == 0.5).all() and (s[finite] >= exact[finite] * (1 - 2**-23)).all()
                and (s[finite] < 2 * exact[finite] * (1 + 2**-23)).all()):
            bad.append("UE8M0 scale is not the power of two in [amax/448, 2 amax/448)")
    elif not torch.equal(sf.cpu()[finite], amax[finite].clamp(min=1e-4).float() * torch.tensor(1 / 448).float()):
        bad.append("scale != max(amax, 1e-4) * fp32(1/448) (fp32)")
    if not (s[amax.isinf()].isinf().all() and s[amax.isnan()].isnan().all()):
        bad.append("a non-finite block's scale is finite")
    full = expand(s)
    deq = qf.double() * full
    xf = x.double().cpu()
    fin = expand(finite.double()).bool() if sf.numel() else torch.zeros(case.shape, dtype=torch.bool)
    err = (xf - deq).abs()[fin]
    bound = (xf.abs() * 2**-4 + full * 2**-10)[fin] * (1 + 1e-6)
    if not (err <= bound).all():
        bad.append(f"roundtrip error beyond FP8 rounding (max excess {(err - bound).max().item():.3g})")
    if not deq[~fin].isnan().all():
        bad.append("a block holding inf / NaN dequantizes to finite values")
    return bad


# ----------------------------------------------------------------------------- scale layouts
def transform_case(seed: int, device="cpu") -> tuple[dict, torch.Tensor]:
    """Random valid transform_sf_into_required_layout arguments (sfa / sfb, both recipes or
    recipe_ab, grouped or not) with sf in a random memory placement; returns (kwargs, sf values)."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    mn, k = rng.choice((1, 4, 5, 127, 128, 129, 300)), rng.choice((16, 128, 300, 1024))
    is_sfa = rng.random() < 0.5
    gran_mn = 1 if is_sfa else rng.choice((1, 128))
    groups = rng.choice((None, 1, 3))
    shape = ((groups,) if groups is not None else ()) + (ceil_div(mn, gran_mn), ceil_div(k, 128))
    values = torch.rand(shape, generator=g) + 0.5
    sf = values.to(device)
    placement = rng.choice(("contiguous", "mn_major", "padded"))
    if placement == "mn_major":  # already transposed storage (maybe TMA-aligned already)
        sf = sf.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif placement == "padded":
        buf = torch.full(shape[:-1] + (shape[-1] + 2,), float("nan"), device=device)
        buf[..., :shape[-1]] = sf
        sf = buf[..., :shape[-1]]
    kwargs = {"sf": sf, "mn": mn, "k": k, "is_sfa": is_sfa, "num_groups": groups}
    if rng.random() < 0.5:
        kwargs["recipe"] = (1, gran_mn, 128) if not is_sfa else (1, rng.choice((1, 128)), 128)
    else:
        kwargs.update(recipe=None, recipe_ab=(gran_mn, 128))
    return kwargs, values


def check_transform(kwargs: dict, values: torch.Tensor, out: torch.Tensor) -> list[str]:
    """The layout transform's result: the same values; per-row scales MN-major with a 16-byte
    aligned MN stride, 128 x 128 scales contiguous; no copy when sf already has that layout."""
    bad = []
    if out.dtype != torch.float32 or out.shape != values.shape or not torch.equal(out.cpu(), values):
        bad.append(f"values / shape changed: {tuple(out.shape)} {out.dtype}")
    mn_rows, kb = values.shape[-2], values.shape[-1]
    recipe = kwargs.get("recipe")
    gran_mn = kwargs["recipe_ab"][0] if recipe is None else recipe[0 if kwargs["is_sfa"] else 1]
    if gran_mn == 1:
        aligned = align(mn_rows, 4)
        want = (1, aligned) if values.dim() == 2 else (kb * aligned, 1, aligned)
    else:
        want = out.contiguous().stride()
    if out.numel() and out.stride() != want:
        bad.append(f"strides {out.stride()}, want {want}")
    if kwargs["sf"].stride() == want and out.data_ptr() != kwargs["sf"].data_ptr():
        bad.append("copied a tensor that already had the layout")
    return bad


# ----------------------------------------------------------------------------- bad calls
@dataclasses.dataclass
class BadCall:
    fn: str  # the name the error must start with
    arg: str  # the argument it must name
    call: Callable[[], object]
    kind: str


BAD_CALL_KINDS = ("x_type", "x_rank", "x_dtype", "ue8m0_type", "gran_type", "gran_value", "packed",
                  "packed_type", "mn_major_type", "mn_major_rank", "aligned_size", "transform_sf_type",
                  "transform_mn", "transform_recipe", "transform_gran", "transform_dtype", "transform_shape",
                  "transform_flag", "transform_groups")


def bad_call(seed: int, device="cpu") -> BadCall:
    """One call that breaks a documented rule of the casts / layout helpers."""
    rng = random.Random(seed)
    kind = rng.choice(BAD_CALL_KINDS)
    fn = rng.choice(CAST_FUNCTIONS)
    cast = getattr(quant, fn)
    x = torch.randn((rng.randrange(1, 300), rng.randrange(1, 300)), device=device)
    tf = "transform_sf_into_required_layout"
    sfb = torch.rand((2, 3), device=device)  # valid sfb for mn in (129, 256], k in (257, 384], (1, 128, 128)
    transform = lambda **kw: quant.transform_sf_into_required_layout(**{
        "sf": sfb, "mn": 200, "k": 300, "recipe": (1, 128, 128), **kw})
    if kind == "x_type":
        return BadCall(fn, "x", lambda: cast(rng.choice(([1.0, 2.0], None, 3.0, x.tolist()))), kind)
    if kind == "x_rank":
        shape = rng.choice(((7,), (2, 3, 4), ()))
        return BadCall(fn, "x", lambda: cast(torch.randn(shape, device=device)), kind)
    if kind == "x_dtype":
        dtype = rng.choice((torch.int32, torch.int8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint8))
        return BadCall(fn, "x", lambda: cast(torch.zeros((4, 4), device=device).to(dtype)), kind)
    if kind == "ue8m0_type":
        return BadCall(fn, "use_ue8m0", lambda: cast(x, use_ue8m0=rng.choice((1, "yes", None, 0.0))), kind)
    if kind == "gran_type":
        return BadCall(fn, "gran_k", lambda: cast(x, gran_k=rng.choice((128.0, "128", True, None))), kind)
    if kind == "gran_value":
        return BadCall(fn, "gran_k", lambda: cast(x, gran_k=rng.choice((0, -128))), kind)
    if kind == "packed":
        return BadCall("per_token_cast_to_fp8", "use_packed_ue8m0",
                       lambda: quant.per_token_cast_to_fp8(x, use_ue8m0=True, use_packed_ue8m0=True), kind)
    if kind == "packed_type":
        return BadCall("per_token_cast_to_fp8", "use_packed_ue8m0",
                       lambda: quant.per_token_cast_to_fp8(x, use_packed_ue8m0=1), kind)
    if kind == "mn_major_type":
        return BadCall("get_mn_major_tma_aligned_tensor", "sf",
                       lambda: quant.get_mn_major_tma_aligned_tensor(rng.choice((None, [[1.0]], 2))), kind)
    if kind == "mn_major_rank":
        shape = rng.choice(((5,), (1, 2, 3, 4), ()))
        return BadCall("get_mn_major_tma_aligned_tensor", "sf",
                       lambda: quant.get_mn_major_tma_aligned_tensor(torch.rand(shape, device=device)), kind)
    if kind == "aligned_size":
        arg, args = rng.choice((("x", (-1, 4)), ("x", (5.0, 4)), ("x", (True, 4)), ("element_size", (5, 3)),
                                ("element_size", (5, 0)), ("element_size", (5, 32))))
        return BadCall("get_tma_aligned_size", arg, lambda: quant.get_tma_aligned_size(*args), kind)
    if kind == "transform_sf_type":
        return BadCall(tf, "sf", lambda: transform(sf=sfb.tolist()), kind)
    if kind == "transform_mn":
        arg, value = rng.choice((("mn", -1), ("mn", 200.0), ("k", -300), ("k", "300"), ("mn", True)))
        return BadCall(tf, arg, lambda: transform(**{arg: value}), kind)
    if kind == "transform_recipe":
        kw = rng.choice(({"recipe": None}, {"recipe": (1, 128)}, {"recipe": (1, 128.0, 128)}, {"recipe": "1x128"},
                         {"recipe_ab": (128, 128)}, {"recipe": None, "recipe_ab": (128,)}))
        return BadCall(tf, "recipe", lambda: transform(**kw), kind)
    if kind == "transform_gran":
        kw = rng.choice(({"recipe": (1, 64, 128)}, {"recipe": (1, 128, 64)}, {"recipe": None, "recipe_ab": (32, 128)}))
        return BadCall(tf, "granularity", lambda: transform(**kw), kind)
    if kind == "transform_dtype":
        dtype = rng.choice((torch.bfloat16, torch.int32, torch.float64))
        return BadCall(tf, "fp32", lambda: transform(sf=sfb.to(dtype)), kind)
    if kind == "transform_shape":
        kw = rng.choice(({"mn": 300}, {"k": 600}, {"sf": sfb.t()}, {"is_sfa": True}))
        return BadCall(tf, "shape", lambda: transform(**kw), kind)
    if kind == "transform_flag":
        arg = rng.choice(("is_sfa", "disable_ue8m0_cast"))
        return BadCall(tf, arg, lambda: transform(**{arg: rng.choice((1, None, "no"))}), kind)
    value = rng.choice((-1, True, 2.0, 3))  # transform_groups: bad type / value, or a count sf lacks
    return BadCall(tf, "num_groups" if value != 3 else "shape", lambda: transform(num_groups=value), kind)


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Bitwise equality of two results, on any devices; NaNs count as equal to NaNs (CPU and CUDA
    produce different NaN payloads and signs)."""
    x, y = x.cpu(), y.cpu()
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    nan_x, nan_y = x.float().isnan(), y.float().isnan()
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return torch.equal(nan_x, nan_y) and torch.equal(x.view(bits)[~nan_x], y.view(bits)[~nan_y])


def raises_clean(bad: BadCall) -> Optional[str]:
    """None when the call raised a clean error naming its function and argument; else what it did."""
    try:
        bad.call()
    except (TypeError, ValueError, NotImplementedError) as exc:
        msg = str(exc)
        if not msg.startswith(f"{bad.fn}: "):
            return f"{bad.kind}: message does not start with '{bad.fn}: ': {msg!r}"
        if bad.arg not in msg:
            return f"{bad.kind}: message does not name {bad.arg!r}: {msg!r}"
        return None
    except Exception as exc:  # noqa: BLE001 - any other type is the finding
        return f"{bad.kind}: {type(exc).__name__}: {exc}"
    return f"{bad.kind}: no error"
