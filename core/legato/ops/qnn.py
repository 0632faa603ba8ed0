"""Quantization (level 1) and attention (level 2); the quantized products and
convolution are in qnn_linear."""
from __future__ import annotations

import math

import numpy as np

from ..ir import Const, TensorType
from ..ir.shapes import channel_view
from .base import T, composite, f32, fail, require_float, same_dtype

QUANT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-2**31, 2**31 - 1)}


def one_value(t: TensorType) -> bool:
    """A per-tensor quantization parameter: a scalar or a 1-element vector."""
    return t.rank == 0 or t.shape == (1,)


def _check_qparams(data: TensorType, scale: TensorType, zero_point: TensorType, axis: int):
    """ONNX's pairings: scale and zero point each one value (a scalar or [1], in any mix,
    as onnxruntime's quantizer writes an int32 bias's [1] scale with a scalar zero point),
    or both 1-D of one length along `axis`."""
    per_tensor = one_value(scale) and (zero_point is None or one_value(zero_point))
    if not per_tensor and (scale.rank != 1 or zero_point is not None
                           and zero_point.shape != scale.shape):
        zero = "none" if zero_point is None else list(zero_point.shape)
        fail(f"scale {list(scale.shape)} and zero_point {zero} must each hold one value "
             "(a scalar or [1]) or be 1-D of one length")
    if not per_tensor:
        if not -data.rank <= axis < data.rank or data.shape[axis] != scale.shape[0]:
            fail(f"per-axis scale of {scale.shape[0]} does not match axis {axis} of "
                 f"{list(data.shape)}")
    require_float(scale, "scale")


def scale_check(*scales: tuple[int, str, bool]):
    """A const_check for the scales given as (input index, name, divides): a constant scale
    must be finite, and nonzero where the op divides by it. NaN and infinite scales, and
    0/0, have no quantized value, and backends produce different integers for them. A
    negative scale stays allowed: the arithmetic is defined and the same everywhere, and
    exporters write them (symmetric int4 weights, onnxruntime's placeholder
    DequantizeLinear), as they write zero scales that only multiply."""
    def check(inputs, attrs):
        for index, name, divides in scales:
            scale = inputs[index]
            if not isinstance(scale, Const):
                continue
            data = np.asarray(scale.data, dtype=np.float64).reshape(-1)
            bad = ~np.isfinite(data) | ((data == 0) if divides else False)
            if bad.any():
                at = int(np.argmax(bad))
                why = "divides by its scale, which must be finite and nonzero" if divides \
                    else "needs a finite scale"
                fail(f"input {index} ({name}) holds {float(data[at])} at index {at}: the op {why}")
    return check


def _quantize(types, attrs):
    data, scale, zero_point = types
    require_float(data)
    _check_qparams(data, scale, zero_point, attrs["axis"])
    if scale.dtype != data.dtype:
        fail(f"scale dtype {scale.dtype} differs from data dtype {data.dtype}")
    if zero_point.dtype != attrs["dtype"]:
        fail(f"zero_point dtype {zero_point.dtype} differs from output dtype {attrs['dtype']}")
    return TensorType(data.shape, attrs["dtype"])


def _dequantize(types, attrs):
    data, scale, zero_point = types
    if data.dtype not in QUANT_RANGES:
        fail(f"data must be int8, uint8 or int32, got {data.dtype}")
    _check_qparams(data, scale, zero_point, attrs["axis"])
    return TensorType(data.shape, scale.dtype)


def along_axis(b, param, data, axis: int):
    """A scalar or per-axis (C,) parameter, shaped to broadcast against `data` (a [1]
    parameter of a scalar `data` becomes a scalar, so the result keeps data's shape)."""
    if param.shape == (1,) and data.rank == 0:
        return b.reshape(param, shape=[])
    if one_value(param):
        return param
    return b.reshape(param, shape=list(channel_view(param.shape[0], data.rank, axis)))


Q_EXAMPLES = [((f32(2, 3), f32(), T("int8")), {}),
              ((f32(2, 3), f32(3), T("uint8", 3)), {"dtype": "uint8"}),
              ((f32(3, 2, 2), f32(3), T("int8", 3)), {"axis": 0})]


@composite("qnn.quantize", "data, scale, zero_point", _quantize, "elemwise", 1, Q_EXAMPLES,
           {"axis": ("int", 1), "dtype": ("str:int8|uint8", "int8")},
           const_check=scale_check((1, "scale", True)))
def quantize(b, x, scale, zero_point, axis, dtype):
    """ONNX QuantizeLinear: `saturate(round_half_even(x / scale) + zero_point)`; scale and
    zero point one value or 1-D along `axis`; the result's dtype is `dtype`"""
    lo, hi = QUANT_RANGES[dtype]
    q = b.round(b.divide(x, along_axis(b, scale, x, axis)))
    q = b.add(q, along_axis(b, b.cast(zero_point, dtype=x.dtype), x, axis))
    return b.cast(b.minimum(b.maximum(q, float(lo)), float(hi)), dtype=dtype)


@composite("qnn.dequantize", "data, scale, zero_point", _dequantize, "elemwise", 1,
           [((T("int8", 2, 3), f32(), T("int8")), {}),
            ((T("uint8", 2, 3), f32(3), T("uint8", 3)), {}),
            ((T("int8", 3, 2, 2), f32(3), T("int8", 3)), {"axis": 0})],
           {"axis": ("int", 1)}, tolerance=0.0, const_check=scale_check((1, "scale", False)))
def dequantize(b, x, scale, zero_point, axis):
    """ONNX DequantizeLinear: `(float(x) - float(zero_point)) * scale`, in the dtype of
    `scale`"""
    zero = along_axis(b, b.cast(zero_point, dtype=scale.dtype), x, axis)
    shifted = b.subtract(b.cast(x, dtype=scale.dtype), zero)
    return b.multiply(shifted, along_axis(b, scale, x, axis))


# --- attention ----------------------------------------------------------------------------

def _attention(types, attrs):
    q, k, v, mask = types
    if not (q.rank == k.rank == v.rank == 4):
        fail("q, k and v must be 4-D (batch, heads, seq, head_dim)")
    same_dtype([q, k, v])
    require_float(q)
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]:
        fail(f"q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} do not match")
    if mask is not None:
        if mask.dtype not in ("bool", q.dtype):
            fail(f"mask must be bool or {q.dtype} like q, got {mask.dtype}")
        scores = q.shape[:3] + (k.shape[2],)
        if len(mask.shape) > 4 or any(m not in (1, s) for m, s in
                                      zip(reversed(mask.shape), reversed(scores))):
            fail(f"mask {list(mask.shape)} does not broadcast to scores {list(scores)}")
    out = TensorType(q.shape[:3] + (v.shape[3],), q.dtype)
    # (the sizes tested first: over symbols they are checked again once bound)
    if k.shape[2] == 0 and out.size:  # a softmax over no keys: an average of nothing
        fail(f"k and v {list(k.shape)} need at least one key (seq > 0)")
    if q.shape[3] == 0 and attrs["scale"] is None and out.size:
        fail("head_dim 0 has no default scale (1/sqrt(head_dim)); give scale")
    return out


QKV = f32(1, 2, 3, 4)


def _attention_form(b, q, k, v, mask, scale, causal, q_factor, k_factor, s_factor,
                    nan_to_zero=False):
    """The attention decomposition with the scale applied as factors of q, k and the
    scores (None: not applied there); `nan_to_zero` sets NaN probabilities to 0."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    q = q if q_factor is None else b.multiply(q, q_factor(scale))
    kt = b.permute_dims(k, axes=[0, 1, 3, 2])
    kt = kt if k_factor is None else b.multiply(kt, k_factor(scale))
    scores = b.matmul(q, kt)
    scores = scores if s_factor is None else b.multiply(scores, s_factor(scale))
    if mask is not None and mask.dtype == "bool":
        scores = b.where(mask, scores, float("-inf"))
    elif mask is not None:
        scores = b.add(scores, mask)
    if causal:
        keep = np.tril(np.ones((q.shape[2], k.shape[2]), dtype=bool))
        scores = b.where(b.const(keep), scores, float("-inf"))
    probs = b.nn_softmax(scores, axis=-1)
    if nan_to_zero:
        probs = b.where(b.isnan(probs), 0.0, probs)
    return b.matmul(probs, v)


def attention_scaling_q(b, q, k, v, mask, scale, causal):
    """`softmax((q * scale) @ k^T + mask) @ v`: the scale applied to q (recomposition
    only)."""
    return _attention_form(b, q, k, v, mask, scale, causal, lambda s: s, None, None)


def attention_scaling_q_and_k(b, q, k, v, mask, scale, causal):
    """`softmax((q * sqrt(scale)) @ (k^T * sqrt(scale)) + mask) @ v`, as PyTorch's
    scaled_dot_product_attention is decomposed (recomposition only)."""
    return _attention_form(b, q, k, v, mask, scale, causal, math.sqrt, math.sqrt, None)


def attention_as_sdpa_exported(b, q, k, v, mask, scale, causal):
    """PyTorch's scaled_dot_product_attention as torch.onnx writes it: q and k^T each
    times sqrt(scale), NaN probabilities (rows whose every score is -inf, where attention
    is undefined) set to 0 (recomposition only)."""
    return _attention_form(b, q, k, v, mask, scale, causal, math.sqrt, math.sqrt, None,
                           nan_to_zero=True)


@composite("nn.attention", "q, k, v, mask?", _attention, "opaque", 2,
           [((QKV, QKV, QKV, None), {}), ((QKV, QKV, QKV, T("bool", 3, 3)), {"causal": True}),
            ((QKV, QKV, QKV, f32(1, 1, 3, 3)), {"scale": 0.5})],
           {"scale": ("float?", None), "causal": ("bool", False)},
           tolerance=1e-3,  # exp of scores that carry a matmul's rounding
           patterns=[attention_scaling_q, attention_scaling_q_and_k, attention_as_sdpa_exported])
def attention(b, q, k, v, mask, scale, causal):
    """`softmax(q @ k^T * scale + mask) @ v`, q/k/v `(batch, heads, seq, head_dim)`; a bool
    mask keeps `True`, a float mask is added; `causal` masks `j > i`; `scale=None` is
    `1/sqrt(head_dim)`"""
    return _attention_form(b, q, k, v, mask, scale, causal, None, None, lambda s: s)
