"""Converters of the `quantized_decomposed` ops that PyTorch's PT2E quantization writes
(torchao's `prepare_pt2e` / `convert_pt2e`): quantize and dequantize per tensor (a scale
and zero point given as numbers, `.default`, or as one-element tensors, `.tensor`) and per
channel, and the dynamic `choose_qparams`, onto qnn.quantize and qnn.dequantize, so that
legato.compile's QDQ folding sees the same `dequantize -> op -> quantize` regions as in an
ONNX QDQ file.

A quantize's `quant_min`/`quant_max` narrower than its dtype (XNNPACK's symmetric int8
weights use [-127, 127]) clamp the integers after qnn.quantize saturates them, as
`clamp(round(x / scale) + zero_point, quant_min, quant_max)` does. A dequantize reads no
range. PT2E leaves the bias of a quantized conv or linear float, which the QDQ fold
quantizes to int32 itself. A batched aten.matmul stays whole in a quantized program
(`kept_whole`).
"""
from __future__ import annotations

import numpy as np

from ...ir import Const
from ...ir.errors import LegatoError
from ...ops.qnn import QUANT_RANGES
from .registry import register

NS = "quantized_decomposed::"
# decomposed elsewhere, kept whole in a quantized program: PyTorch writes a batched matmul
# as broadcast, reshape, bmm and reshape, which would put data movement between the matmul
# and its dequantize and quantize calls, so the region would not fold into qnn.matmul
WHOLE = ("aten.matmul.default",)


def _dtype(dtype, op: str) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in ("int8", "uint8", "int16", "int32"):
        raise LegatoError(f"{op} with dtype {name}: legato's quantized dtypes are int8 and "
                          "uint8 (and int16, int32 to dequantize)")
    return name


def _param(b, value, dtype: str):
    """A scale or zero point (a number, or a tensor of one value or one per channel) as a
    value of `dtype`."""
    if not hasattr(value, "type"):
        return Const.of(np.array(value, dtype))
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        return Const.of(np.asarray(value.data).astype(dtype))
    return b.cast(value, dtype=dtype)


def _bound(value, op: str) -> int:
    """quant_min or quant_max: a number, or a constant tensor (the `.tensor2` overloads)."""
    if isinstance(value, Const):
        return int(np.asarray(value.data).reshape(-1)[0])
    if hasattr(value, "type"):
        raise LegatoError(f"{op}: a computed quant_min or quant_max (legato needs constants)")
    return int(value)


def _range(dtype: str, quant_min, quant_max, op: str) -> tuple[int, int, int, int]:
    """(dtype's least, greatest, quant_min, quant_max), the range checked within the dtype's."""
    lo, hi = QUANT_RANGES[dtype]
    quant_min, quant_max = _bound(quant_min, op), _bound(quant_max, op)
    if not lo <= quant_min <= quant_max <= hi:
        raise LegatoError(f"{op}: quant range [{quant_min}, {quant_max}] is not within "
                          f"{dtype}'s [{lo}, {hi}]")
    return lo, hi, quant_min, quant_max


def quantize(b, x, scale, zero_point, quant_min, quant_max, dtype, axis=1, op="quantize"):
    """`clamp(round(x / scale) + zero_point, quant_min, quant_max)` in `dtype` (float16 and
    bfloat16 input through float32, as torch computes it). torch multiplies by the float32
    reciprocal of the scale where qnn.quantize divides: the two round apart only where
    x / scale lies within an ulp of a half-way point, by one step."""
    dtype = _dtype(dtype, op)
    if dtype not in ("int8", "uint8"):
        raise LegatoError(f"{op} to {dtype}: qnn.quantize writes int8 and uint8 only")
    lo, hi, quant_min, quant_max = _range(dtype, quant_min, quant_max, op)
    if x.dtype != "float32":
        x = b.cast(x, dtype="float32")
    q = b.qnn_quantize(x, _param(b, scale, "float32"),
                       _param(b, zero_point, dtype), axis=axis, dtype=dtype)
    if quant_min > lo:
        q = b.maximum(q, Const.of(np.array(quant_min, dtype)))
    if quant_max < hi:
        q = b.minimum(q, Const.of(np.array(quant_max, dtype)))
    return q


def dequantize(b, x, scale, zero_point, quant_min, quant_max, dtype, axis=1, *,
               out_dtype=None, op="dequantize"):
    """`(x - zero_point) * scale` in float32 (then `out_dtype`); int16 data through int32,
    which holds it exactly."""
    if x.dtype != _dtype(dtype, op):
        raise LegatoError(f"{op}: the data is {x.dtype}, the call says {_dtype(dtype, op)}")
    if x.dtype == "int16":
        x = b.cast(x, dtype="int32")
    zero = np.zeros((), x.dtype) if zero_point is None else zero_point
    y = b.qnn_dequantize(x, _param(b, scale, "float32"),
                         _param(b, zero, x.dtype), axis=axis)
    out = "float32" if out_dtype is None else str(out_dtype).removeprefix("torch.")
    return y if out == "float32" else b.cast(y, dtype=out)


def quantize_per_tensor(b, x, scale, zero_point, quant_min, quant_max, dtype):
    return quantize(b, x, scale, zero_point, quant_min, quant_max, dtype,
                    op="quantize_per_tensor")


def dequantize_per_tensor(b, x, scale, zero_point, quant_min, quant_max, dtype, *,
                          out_dtype=None):
    return dequantize(b, x, scale, zero_point, quant_min, quant_max, dtype,
                      out_dtype=out_dtype, op="dequantize_per_tensor")


def quantize_per_channel(b, x, scales, zero_points, axis, quant_min, quant_max, dtype):
    return quantize(b, x, scales, zero_points, quant_min, quant_max, dtype, axis % x.rank,
                    op="quantize_per_channel")


def dequantize_per_channel(b, x, scales, zero_points, axis, quant_min, quant_max, dtype, *,
                           out_dtype=None):
    return dequantize(b, x, scales, zero_points, quant_min, quant_max, dtype, axis % x.rank,
                      out_dtype=out_dtype, op="dequantize_per_channel")


def choose_qparams(b, x, quant_min, quant_max, eps, dtype, symmetric=False):
    """A dynamic quantization's scale ([1] float64) and zero point ([1] int64) from the
    data's range, 0 included, as torch's determine_qparams computes them in float32:
    affine `(high - low) / (quant_max - quant_min)`, the zero point `quant_min -
    round(low / scale)` clamped into the range; symmetric `max(-low, high) / ((quant_max -
    quant_min) / 2)`, the zero point 0 (128 for uint8); each scale at least `eps`."""
    dtype = _dtype(dtype, "choose_qparams")
    if x.dtype != "float32":
        x = b.cast(x, dtype="float32")
    low, high = b.minimum(b.min(x), 0.0), b.maximum(b.max(x), 0.0)
    if symmetric:
        scale = b.divide(b.maximum(b.negative(low), high), (quant_max - quant_min) / 2)
    else:
        scale = b.divide(b.subtract(high, low), float(quant_max - quant_min))
    scale = b.maximum(scale, Const.of(np.array(eps, np.float32)))
    if symmetric:
        zero = Const.of(np.array(128 if dtype == "uint8" else 0, np.int64))
    else:
        zero = b.subtract(float(quant_min), b.round(b.divide(low, scale)))
        zero = b.cast(b.clip(zero, min=float(quant_min), max=float(quant_max)), dtype="int64")
    return (b.reshape(b.cast(scale, dtype="float64"), shape=[1]),
            b.reshape(zero, shape=[1]))


def choose_qparams_symmetric(b, x, quant_min, quant_max, eps, dtype):
    return choose_qparams(b, x, quant_min, quant_max, eps, dtype, symmetric=True)


def kept_whole(program, table: dict) -> dict:
    """The decomposition table for `program`: without WHOLE where it quantizes."""
    quantized = any(str(getattr(node.target, "namespace", "")) == "quantized_decomposed"
                    for node in program.graph.nodes)
    return {op: fn for op, fn in table.items() if str(op) not in WHOLE} if quantized \
        else table


for _name, _fn in (("choose_qparams", choose_qparams),
                   ("choose_qparams_symmetric", choose_qparams_symmetric),
                   ("quantize_per_tensor", quantize_per_tensor),
                   ("dequantize_per_tensor", dequantize_per_tensor),
                   ("quantize_per_channel", quantize_per_channel),
                   ("dequantize_per_channel", dequantize_per_channel)):
    register(NS + _name, _fn)
