"""qnn ops in TOSA 1.0's pro_int profile: int8 CONV2D / DEPTHWISE_CONV2D / MATMUL with
zero points into int32, RESCALE, TABLE.

Every requantization is one RESCALE whose multiplier and shift come from the float32
multiplier cpu_ref (and onnxruntime's CPU kernels) use, e.g. `float32(float32(data_scale *
weight_scale) / out_scale)`: a float32 has a 24-bit significand, so `multiplier * 2**-shift`
(a 31-bit multiplier, TOSA's scale32) is that float exactly. The results differ from
cpu_ref's in the rounding alone: TOSA rounds the exact product `acc * multiplier` half up
(apply_scale_32: add 2**(shift-1), shift right), cpu_ref rounds the float32 product
`float32(acc) * multiplier` half to even, so an element differs by one step where the
product lies at or within a float32 rounding of a half.

uint8 is handled at the boundary, as TOSA's own legalizations do: TOSA 1.0's main
operators take int8, so a uint8 operand is RESCALEd (input_unsigned) to int8 with its
zero point moved down by 128, and a uint8 result is the last RESCALE's output_unsigned.
uint8 tensors are i8 in the module (narrowing.py).

A call these rules cannot lower exactly (scales or zero points that are not constants,
per-channel zero points TOSA's scalar ones cannot hold, grouped convolutions that are not
depthwise) is declined with the reason in the rule's docstring: its decomposition runs
instead, which needs int32 ops TOSA does not have, so legalization names the op.
"""
from __future__ import annotations

import functools

import numpy as np
from legato.plugin_api import Const, window_counts


from .rules import NCHW_TO_NHWC, NHWC_TO_NCHW, TO_OHWI, _fit_windows, _level_problem, \
    broadcast, call_window, permute, reshape, splat

SCALE32_BITS = 31
MAX_SHIFT = 62   # apply_scale_32 requires 2 <= shift <= 62
WIDE = 2 ** 20   # qnn.add's operands are rescaled to int32 at 2**20 times their steps


# --- the RESCALE operator ---------------------------------------------------------------------

def multiplier_shift(scale) -> tuple[np.ndarray, np.ndarray] | None:
    """TOSA scale32 parameters of each scale: `multiplier * 2**-shift == scale` with the
    multiplier in [2**30, 2**31) (the LLVM TOSA utilities' computeMultiplierAndShift-
    TosaScale32), shift at most 62 (a smaller scale loses low multiplier bits); None
    if a scale is negative, not finite, or at least 2**29 (shift below 2)."""
    scale = np.asarray(scale, np.float64).reshape(-1)
    if not np.isfinite(scale).all() or (scale < 0).any():
        return None
    mantissa, exponent = np.frexp(scale)
    multiplier = np.round(mantissa * 2.0 ** SCALE32_BITS).astype(np.int64)
    carry = multiplier == 2 ** SCALE32_BITS
    multiplier, exponent = np.where(carry, multiplier // 2, multiplier), exponent + carry
    shift = SCALE32_BITS - exponent
    multiplier = np.where(scale == 0, 0, multiplier)
    shift = np.where(scale == 0, SCALE32_BITS, shift)
    drop = np.clip(shift - MAX_SHIFT, 0, SCALE32_BITS)
    multiplier, shift = multiplier >> drop, shift - drop
    if (shift < 2).any():
        return None
    return multiplier.astype(np.int32), shift.astype(np.int8)


def apply_scale_32(value, multiplier, shift) -> np.ndarray:
    """TOSA 1.0's apply_scale_32 without double rounding, in int64 (numpy broadcasting)."""
    value, shift = np.asarray(value, np.int64), np.asarray(shift, np.int64)
    return (value * np.asarray(multiplier, np.int64) + (1 << (shift - 1))) >> shift


def zero_point(value: int, dtype: str) -> np.ndarray:
    """A [1] zero-point operand; a uint8 one as its own dtype (printed as its i8 bits)."""
    return np.array([value], dtype=dtype)


def rescale(b, x, scale, in_zp: int, out_zp: int, dtype: str):
    """RESCALE x (int8/uint8/int16/int32) to `dtype`: `saturate(apply_scale_32(x - in_zp)
    + out_zp)`, `scale` one value or one per channel of x's last axis. A nonzero int32
    zero point (RESCALE takes none) is subtracted first. None if a scale has no scale32
    form (see multiplier_shift)."""
    params = multiplier_shift(scale)
    if params is None:
        return None
    # an unsigned side needs an 8/16-bit other side: go through int8 (uint8 - 128)
    if x.dtype == "uint8" and dtype not in ("int8", "int16"):
        x, in_zp = to_int8(b, x, in_zp)
    if dtype == "uint8" and x.dtype not in ("int8", "int16"):
        y = rescale(b, x, scale, in_zp, out_zp - 128, "int8")
        return rescale(b, y, 1.0, -128, 0, "uint8")
    if x.dtype in ("int32", "int16") and in_zp:
        x, in_zp = b.subtract(x, b.const(zero_point(in_zp, x.dtype))), 0
    multiplier, shift = params
    x = _in_scale_range(b, x, int(shift.min()), dtype)
    return b.call("tosa.rescale", x, b.const(multiplier), b.const(shift),
                  b.const(zero_point(in_zp, x.dtype)), b.const(zero_point(out_zp, dtype)),
                  dtype=dtype)


def _in_scale_range(b, x, shift: int, dtype: str):
    """apply_scale_32 requires |value| < 2**(shift-1); a larger int32 value, which only a
    scale of 0.5 and more meets, saturates an 8- or 16-bit result anyway (its product is
    at least 2**29), so it is clamped there first (MAXIMUM / MINIMUM)."""
    if x.dtype not in ("int32", "int64") or shift > 31 or dtype not in ("int8", "uint8",
                                                                        "int16"):
        return x
    bound = 1 << (shift - 1)
    return b.minimum(b.maximum(x, splat(b, x, -bound, np.int32)),
                     splat(b, x, bound - 1, np.int32))


def rescale_stage(b, acc, multiplier, out_zp: int, dtype: str):
    """The output stage of an int32 accumulator: one RESCALE (integer-only targets)."""
    return rescale(b, acc, multiplier, 0, out_zp, dtype)


def float_stage(b, acc, multiplier, out_zp: int, dtype: str):
    """onnxruntime's output stage in float32 (`output_stage="float"`, targets with
    pro_fp): `saturate(rint(float32(acc) * multiplier) + zero_point)`, the multiplier per
    tensor or along the last axis, CLAMPed, one CAST rounding half to even (checked on the
    reference model), and a RESCALE by 1 adds the zero point (rounded).
    Bit-exact with cpu_ref, where RESCALE rounds the exact product (ties half up)."""
    m = np.asarray(multiplier, np.float32).reshape(-1)
    m = m.reshape((1,) * (acc.rank - 1) + (m.size,)) if m.size > 1 else \
        m.reshape((1,) * acc.rank)
    return rounded(b, b.multiply(b.cast(acc, dtype="float32"), b.const(m)), out_zp, dtype)


QRANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def rounded(b, y, zp: int, dtype: str):
    """float32 y rounded half to even, plus the zero point, saturated to int8/uint8: CLAMP
    to the integers `zp` leaves room for, CAST (to int8 itself where zp is 0), RESCALE by
    1 adding zp."""
    lo, hi = QRANGES[dtype]
    y = b.clip(y, min=float(lo - zp), max=float(hi - zp))
    if zp == 0 and dtype == "int8":
        return b.call("tosa.cast", y, dtype="int8")
    return rescale(b, b.call("tosa.cast", y, dtype="int16"), 1.0, 0, zp, dtype)


def half_even(b, acc, scale):
    """int32 `acc * scale` rounded with exact ties to even, as onnxruntime's rint does
    (RESCALE rounds them up). Where sums are divided by a count, a tie is common (a sum of
    4 over 4, 14% of a 2x2 pool's outputs at one scale). `up = floor(v + 1/2)` and
    `-RESCALE(-acc) = ceil(v - 1/2)` differ exactly at a tie, and there the even one of
    the two is taken. None if the scale has no scale32 form."""
    up = rescale(b, acc, scale, 0, 0, "int32")
    if up is None:
        return None
    down = rescale(b, b.negative(acc), scale, 0, 0, "int32")  # -ceil(v - 1/2)
    odd_tie = b.bitwise_and(b.bitwise_and(b.add(up, down), up), splat(b, up, 1, np.int32))
    return b.subtract(up, odd_tie)


def rescale_half_even(b, acc, scale, out_zp: int, dtype: str):
    """half_even, then the zero point and saturation (a RESCALE by 1)."""
    even = half_even(b, acc, scale)
    return None if even is None else rescale(b, even, 1.0, 0, out_zp, dtype)


def to_int8(b, x, zp: int):
    """(x, zero point) as int8: uint8 moves down by 128 (a constant in numpy)."""
    if x.dtype != "uint8":
        return x, zp
    if isinstance(x, Const):
        return b.const((x.data.astype(np.int16) - 128).astype(np.int8)), zp - 128
    return rescale(b, x, 1.0, 128, 0, "int8"), zp - 128


def widen(b, x, zp: int, scale=1.0):
    """int32 `(x - zp) * scale` of int8/uint8 x (one RESCALE)."""
    return rescale(b, x, scale, zp, 0, "int32")


# --- constant parameters ----------------------------------------------------------------------

def consts(*values) -> list[np.ndarray] | None:
    """The data of quantization parameters, or None if one is not a constant."""
    if not all(isinstance(v, Const) for v in values):
        return None
    return [np.asarray(v.data) for v in values]


def one_zero_point(zp: np.ndarray) -> int | None:
    """A per-tensor (or per-channel but equal) zero point as an int; None otherwise:
    TOSA's zero points are scalars."""
    flat = zp.reshape(-1).astype(np.int64)
    return int(flat[0]) if (flat == flat[0]).all() else None


def product_multiplier(a_scale, b_scale, out_scale) -> np.ndarray:
    """float32(float32(a_scale * b_scale) / out_scale), in cpu_ref's order."""
    f32 = np.float32
    return (np.asarray(a_scale, f32) * np.asarray(b_scale, f32)).astype(f32) / \
        np.asarray(out_scale, f32)


def _missing(params) -> bool:
    return params is None or any(p is None for p in params)


def _params(call, positions):
    """Scales and zero points at `positions` as arrays, zero points as ints (None if not
    constants, or a zero point per channel that differs)."""
    found = consts(*(call.inputs[i] for i in positions))
    if found is None:
        return None
    return [one_zero_point(v) if np.issubdtype(v.dtype, np.integer) else v for v in found]


# --- products ---------------------------------------------------------------------------------

def qconv2d(b, call, stage=None):
    """qnn.conv2d: groups 1 -> CONV2D, groups == channels -> DEPTHWISE_CONV2D, other
    groups -> one CONV2D per group on a slice of the channels, concatenated (int8, zero
    points, int32 bias), then RESCALE per output channel. Declines non-constant
    parameters or weights, per-channel weight zero points that differ."""
    x, _, _, w, _, _, _, _, bias = call.inputs
    params = _params(call, (1, 2, 4, 5, 6, 7))
    a = call.attrs
    if _missing(params) or not isinstance(w, Const):
        return None
    xs, xz, ws, wz, ys, yz = params
    win = _conv_window(call)
    channels = x.shape[a["data_layout"].index("C")]
    depthwise = a["groups"] == channels and a["groups"] > 1 and \
        w.shape[a["kernel_layout"].index("I")] == 1
    if _level_problem(win):
        return None
    x, xz = to_int8(b, x, xz)
    w, wz = to_int8(b, w, wz)
    x = permute(b, x, NCHW_TO_NHWC if a["data_layout"] == "NCHW" else None)
    w = permute(b, w, TO_OHWI[a["kernel_layout"]])
    x, padding = _fit_windows(b, x, win)
    out = w.shape[0]
    bias = b.const(np.zeros(out, np.int32)) if bias is None else bias
    props = dict(strides=list(win.strides), padding=padding, dilation=list(win.dilation))
    zps = (b.const(zero_point(xz, "int8")), b.const(zero_point(wz, "int8")))
    acc = conv_products(b, x, w, bias, a["groups"] if not depthwise else -1, zps, props)
    y = (stage or rescale_stage)(b, acc, product_multiplier(xs, ws, ys), yz,
                                call.outputs[0].dtype)
    if y is None:
        return None
    return permute(b, y, NHWC_TO_NCHW if a["data_layout"] == "NCHW" else None)


def conv_products(b, x, w, bias, groups: int, zps, props):
    """The int32 products of NHWC int8 `x` and OHWI int8 `w` (zero points `zps`, int32
    bias): groups -1 (depthwise) DEPTHWISE_CONV2D, 1 CONV2D, others one CONV2D a group."""
    if groups == -1:  # OHWI [C*M, KH, KW, 1] -> [KH, KW, C, M]: output o = c * M + m
        (out, kh, kw), channels = w.shape[:3], x.shape[3]
        w = reshape(b, permute(b, w, (1, 2, 3, 0)), (kh, kw, channels, out // channels))
        return b.call("tosa.qdepthwise_conv2d", x, w, bias, *zps, **props)
    if groups == 1:
        return b.call("tosa.qconv2d", x, w, bias, *zps, **props)
    return _grouped(b, x, w, bias, groups, zps, props)


def _grouped(b, x, w, bias, groups: int, zps, props):
    """A grouped convolution (NHWC x, OHWI constant w) as one CONV2D per group."""
    per_in, per_out = x.shape[3] // groups, w.shape[0] // groups
    parts = []
    for g in range(groups):
        xg = b.strided_slice(x, begin=[g * per_in], end=[(g + 1) * per_in], axes=[3])
        outs = slice(g * per_out, (g + 1) * per_out)
        bg = b.const(np.asarray(bias.data)[outs]) if isinstance(bias, Const) else \
            b.strided_slice(bias, begin=[outs.start], end=[outs.stop], axes=[0])
        parts.append(b.call("tosa.qconv2d", xg, b.const(w.data[outs]), bg, *zps, **props))
    return b.concat(*parts, axis=3)


def _conv_window(call):
    """The window of a qnn.conv2d call (call_window reads nn.conv2d's operands)."""
    from legato.plugin_api import window
    x, w, a = call.inputs[0], call.inputs[3], call.attrs
    hw = x.shape[1:3] if a["data_layout"] == "NHWC" else x.shape[2:4]
    kernel = [w.shape[a["kernel_layout"].index(k)] for k in "HW"]
    return window(hw, kernel, a["strides"], a["dilation"], a["padding"], what=call.op)


def _matmul3(b, x, w, xz: int, wz: int):
    """int32 [N, M, K] x [N, K, W] TOSA MATMUL of int8 operands with zero points."""
    return b.call("tosa.qmatmul", x, w, b.const(zero_point(xz, "int8")),
                  b.const(zero_point(wz, "int8")))


def qlinear(b, call, stage=None):
    """qnn.linear: data [..., K] as [1, rows, K] times weight^T [1, K, N] (MATMUL), plus
    the int32 bias, RESCALE per output channel."""
    x, _, _, w, _, _, _, _, bias = call.inputs
    params = _params(call, (1, 2, 4, 5, 6, 7))
    if _missing(params):
        return None
    xs, xz, ws, wz, ys, yz = params
    x, xz = to_int8(b, x, xz)
    w, wz = to_int8(b, w, wz)
    n, k = w.shape
    rows = int(np.prod(x.shape[:-1]))
    acc = _matmul3(b, reshape(b, x, (1, rows, k)), reshape(b, permute(b, w, (1, 0)),
                                                          (1, k, n)), xz, wz)
    if bias is not None:
        acc = b.add(acc, reshape(b, bias, (1, 1, n)))
    y = (stage or rescale_stage)(b, acc, product_multiplier(xs, ws, ys), yz,
                                call.outputs[0].dtype)
    return None if y is None else reshape(b, y, call.outputs[0].shape)


def qmatmul(b, call, stage=None):
    """qnn.matmul (numpy matmul, b per tensor or per column): batch dims broadcast and
    folded into MATMUL's N, RESCALE per column. Declines 1-D operands."""
    a, _, _, w, _, _, _, _ = call.inputs
    params = _params(call, (1, 2, 4, 5, 6, 7))
    if _missing(params) or a.rank < 2 or w.rank < 2:
        return None
    as_, az, ws, wz, ys, yz = params
    a, az = to_int8(b, a, az)
    w, wz = to_int8(b, w, wz)
    (m, k), n = a.shape[-2:], w.shape[-1]
    batch = tuple(call.outputs[0].shape[:-2])
    count = int(np.prod(batch))
    if int(np.prod(w.shape[:-2])) == 1:  # no batch in b: the batch folds into the rows
        acc = _matmul3(b, reshape(b, a, (1, count * m, k)), reshape(b, w, (1, k, n)), az, wz)
    else:
        a3 = reshape(b, broadcast(b, a, batch + (m, k)), (count, m, k))
        w3 = reshape(b, broadcast(b, w, batch + (k, n)), (count, k, n))
        acc = _matmul3(b, a3, w3, az, wz)
    y = (stage or rescale_stage)(b, acc, product_multiplier(as_, ws, ys), yz,
                                call.outputs[0].dtype)
    return None if y is None else reshape(b, y, call.outputs[0].shape)


# --- requantize, elementwise, pooling ----------------------------------------------------------

def requantize(b, call):
    """qnn.requantize: one RESCALE by `float32(in_scale / out_scale)` (per channel: along
    the last axis, the axis moved there and back)."""
    x = call.inputs[0]
    params = _params(call, (1, 2, 3, 4))
    if _missing(params):
        return None
    xs, xz, ys, yz = params
    ratio = np.asarray(xs, np.float32) / np.asarray(ys, np.float32)
    axis = call.attrs["axis"] % max(x.rank, 1)
    last = ratio.size == 1 or axis == x.rank - 1
    order = None if last else [d for d in range(x.rank) if d != axis] + [axis]
    y = rescale(b, permute(b, x, order), ratio, xz, yz, call.outputs[0].dtype)
    return y if y is None or last else permute(b, y, np.argsort(order).tolist())


def qadd(b, call):
    """qnn.add as TOSA's legalizations compute it: both operands RESCALEd to int32 at a
    common scale (2**20 steps of twice the larger input scale), added, RESCALEd to the
    output."""
    a, _, _, x = call.inputs[:4]
    params = _params(call, (1, 2, 4, 5, 6, 7))
    if _missing(params):
        return None
    as_, az, xs, xz, ys, yz = (p if isinstance(p, int) else float(p.reshape(-1)[0])
                               for p in params)
    common = 2 * max(as_, xs)
    wa, wx = widen(b, a, az, as_ / common * WIDE), widen(b, x, xz, xs / common * WIDE)
    if wa is None or wx is None:
        return None
    return rescale(b, b.add(wa, wx), common / (WIDE * ys), 0, yz, call.outputs[0].dtype)


def qmultiply(b, call, stage=None):
    """qnn.multiply: the zero-point-shifted operands in int32, MUL, RESCALE by
    `float32(float32(a_scale * b_scale) / out_scale)`."""
    a, _, _, x = call.inputs[:4]
    params = _params(call, (1, 2, 4, 5, 6, 7))
    if _missing(params):
        return None
    as_, az, xs, xz, ys, yz = params
    product = b.multiply(widen(b, a, az), widen(b, x, xz))
    return (stage or rescale_stage)(b, product, product_multiplier(as_, xs, ys), yz,
                                    call.outputs[0].dtype)


def qglobal_avg_pool2d(b, call):
    """qnn.global_avg_pool2d: the int32 sum of `x - zero_point` over H and W (REDUCE_SUM),
    RESCALEd by `float32(data_scale / float32(out_scale * count))` as cpu_ref computes it."""
    x = call.inputs[0]
    params = _params(call, (1, 2, 3, 4))
    if _missing(params):
        return None
    xs, xz, ys, yz = params
    layout = call.attrs["data_layout"]
    axes = [layout.index("H"), layout.index("W")]
    count = x.shape[axes[0]] * x.shape[axes[1]]
    total = b.sum(widen(b, x, xz), axes=axes, keepdims=True)
    f32 = np.float32
    scale = np.asarray(xs, f32) / (np.asarray(ys, f32) * f32(count)).astype(f32)
    return rescale_half_even(b, total, scale, yz, call.outputs[0].dtype)


def qavg_pool2d(b, call):
    """qnn.avg_pool2d: the int32 window sums of `x - zero_point` (a DEPTHWISE_CONV2D of
    ones: padded taps add 0), each requantized once, ties to even, by `float32(data_scale
    / float32(out_scale * count))`, count being its window's taps: one RESCALE per
    distinct count, SELECTed by position. AVG_POOL2D would round the mean first (half
    up), then requantize: 85 of 216 outputs of a padded 3x3 pool were one step off cpu_ref
    in the tests, 3 are now (ties cpu_ref's float32 rounding decides). Declines dilation
    and windows that overhang (ceil_mode)."""
    x = call.inputs[0]
    params = _params(call, (1, 2, 3, 4))
    a, win = call.attrs, call_window(call)
    if _missing(params) or any(win.overhang) or win.dilation != (1, 1) or \
            _level_problem(win):
        return None
    xs, xz, ys, yz = params
    nchw = a["data_layout"] == "NCHW"
    x, xz = to_int8(b, x, xz)
    x, padding = _fit_windows(b, permute(b, x, NCHW_TO_NHWC if nchw else None), win)
    (kh, kw), channels = win.kernel, x.shape[3]
    zps = (b.const(zero_point(xz, "int8")), b.const(zero_point(0, "int8")))
    total = b.call("tosa.qdepthwise_conv2d", x, b.const(np.ones((kh, kw, channels, 1), np.int8)),
                   b.const(np.zeros(channels, np.int32)), *zps, strides=list(win.strides),
                   padding=padding, dilation=[1, 1])
    counts = window_counts(win, a["count_include_pad"])
    f32 = np.float32
    even = None
    for count in sorted(set(counts.flat), reverse=True):
        scale = np.asarray(xs, f32) / (np.asarray(ys, f32) * f32(count)).astype(f32)
        part = half_even(b, total, scale)
        if part is None:
            return None
        mask = (counts == count).reshape((1,) + counts.shape + (1,))
        even = part if even is None else b.where(b.const(mask), part, even)
    y = rescale(b, even, 1.0, 0, yz, call.outputs[0].dtype)
    return permute(b, y, NHWC_TO_NCHW if nchw else None)


# --- tables -----------------------------------------------------------------------------------

def _table_of(call) -> np.ndarray:
    """The call's results for each of the 256 values of its input dtype, computed by
    legato's reference (cpu_ref, as onnxruntime's own lookup tables)."""
    import legato
    from legato.plugin_api import GraphBuilder
    x = call.inputs[0]
    lo = -128 if x.dtype == "int8" else 0
    values = np.arange(lo, lo + 256).astype(x.dtype)
    g = GraphBuilder()
    data = g.input("x", (256,), x.dtype)
    y = g.call(call.op, data, *call.inputs[1:], **call.attrs)
    return np.asarray(legato.reference(g.build(y))(values))


def table(b, call):
    """qnn.sigmoid, qnn.leaky_relu (any per-tensor activation of one int8/uint8 tensor):
    TOSA TABLE, whose 256 int8 entries are cpu_ref's results for each input value, so the
    lowering is bit-exact. uint8 data enters as int8 (x - 128: TABLE's index is the same
    u8 value), a uint8 result leaves by a RESCALE from int8 that adds 128."""
    if consts(*call.inputs[1:]) is None:
        return None
    x = call.inputs[0]
    entries = _table_of(call)
    out = call.outputs[0].dtype
    if out == "uint8":
        entries = entries.astype(np.int16) - 128
    x8, _ = to_int8(b, x, 0)
    y = b.call("tosa.table", x8, b.const(entries.astype(np.int8)))
    return y if out == "int8" else rescale(b, y, 1.0, -128, 0, "uint8")


OUTPUT_STAGES = ("rescale", "float")
STAGED = ("qnn.conv2d", "qnn.linear", "qnn.matmul", "qnn.multiply")


def rules_for(output_stage: str = "rescale") -> dict:
    """RULES with the products' output stage: "rescale" (RESCALE, integer-only targets)
    or "float" (onnxruntime's float32 stage, bit-exact with cpu_ref; needs pro_fp)."""
    if output_stage == "rescale":
        return RULES
    staged = {}
    for op in STAGED:
        fn = functools.partial(RULES[op], stage=float_stage)
        functools.update_wrapper(fn, RULES[op])
        staged[op] = fn
    return {**RULES, **staged}


RULES = {"qnn.conv2d": qconv2d, "qnn.linear": qlinear, "qnn.matmul": qmatmul,
         "qnn.requantize": requantize, "qnn.add": qadd, "qnn.multiply": qmultiply,
         "qnn.global_avg_pool2d": qglobal_avg_pool2d, "qnn.avg_pool2d": qavg_pool2d,
         "qnn.sigmoid": table, "qnn.leaky_relu": table}
