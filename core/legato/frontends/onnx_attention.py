"""The ONNX Attention converter (opsets 23+).

Plain attention (4-D or 3-D heads, grouped KV heads, top-left causal, no extras) becomes one
`nn.attention` call so backends can keep it whole. Everything ONNX adds on top (KV cache,
softcap, masks that may block whole rows, sliding windows, padded KV lengths, the
`qk_matmul_output` result) is composed from primitives following the ONNX reference: an
additive bias, softmax, and zeroed rows where the bias blocks every key.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Const
from .onnx_convert import converter

NEG_INF = -math.inf


def split_heads(node, x, heads: int):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    n, seq, hidden = x.shape
    x = node.call("reshape", x, shape=[n, seq, heads, hidden // heads])
    return node.call("permute_dims", x, axes=[0, 2, 1, 3])


def merge_heads(node, y):
    n, heads, seq, size = y.shape
    y = node.call("permute_dims", y, axes=[0, 2, 1, 3])
    return node.call("reshape", y, shape=[n, seq, heads * size])


def repeat_heads(node, x, repeats: int):
    """Each KV head used by `repeats` consecutive query heads: [h0, h0, h1, h1, ...]."""
    if repeats == 1:
        return x
    n, heads, seq, size = x.shape
    wide = node.call("broadcast_to", node.call("expand_dims", x, axes=[2]),
                     shape=[n, heads, repeats, seq, size])
    return node.call("reshape", wide, shape=[n, heads * repeats, seq, size])


@converter("Attention")
def attention(node):
    q, k, v = node.arg(0), node.arg(1), node.arg(2)
    mask, past_k, past_v, nonpad = (node.input(i) for i in range(3, 7))
    three_d = q.rank == 3
    node.require(q.rank in (3, 4) and k.rank == v.rank == q.rank,
                 f"Q, K and V must all be 3-D or all 4-D, not of ranks {q.rank}, {k.rank}, "
                 f"{v.rank}")
    if three_d:
        q = split_heads(node, q, node.positive("q_num_heads", 0))
        k, v = (split_heads(node, t, node.positive("kv_num_heads", 0)) for t in (k, v))
    if past_k is not None:
        k = node.call("concat", past_k, k, axis=2)
        v = node.call("concat", past_v, v, axis=2)
    present_k, present_v = k, v
    node.require(k.shape[1] >= 1 and q.shape[1] % k.shape[1] == 0, f"{q.shape[1]} query heads do not group "
                                               f"into {k.shape[1]} KV heads")
    k, v = (repeat_heads(node, t, q.shape[1] // k.shape[1]) for t in (k, v))
    scale = node.attr("scale")
    plain = (mask is None and past_k is None and nonpad is None and not node.wants(3)
             and not node.attr("softcap", 0.0) and _window(node) == (-1, -1))
    if plain:
        y, qk = node.call("nn.attention", q, k, v, None, scale=scale,
                          causal=node.flag("is_causal", 0)), None
    else:
        y, qk = composed(node, q, k, v, mask, past_k, nonpad, scale)
    return (merge_heads(node, y) if three_d else y), present_k, present_v, qk


def _window(node):
    return node.attr("left_window_size", -1), node.attr("right_window_size", -1)


def composed(node, q, k, v, mask, past_k, nonpad, scale):
    node.require(scale is not None or q.shape[3] > 0, "head size 0 leaves the default scale "
                                                     "1/sqrt(head size) undefined")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    root = math.sqrt(scale)  # ONNX scales q and k by sqrt(scale) each
    scores = node.call("matmul", node.call("multiply", q, root), node.call(
        "permute_dims", node.call("multiply", k, root), axes=[0, 1, 3, 2]))
    softcap = node.attr("softcap", 0.0)
    # the ONNX reference skips a NaN softcap (NaN > 0 is false), onnxruntime applies it
    node.require(not math.isnan(softcap), "softcap is NaN")
    if softcap > 0:
        scores = node.call("multiply", node.call("tanh", node.call("divide", scores, softcap)),
                           softcap)
    bias = attention_bias(node, q, k, mask, past_k, nonpad)
    with_bias = scores if bias is None else node.call("add", scores, bias)
    probs = node.call("nn.softmax", with_bias, axis=-1)
    if bias is not None:  # rows where every key is blocked attend to nothing: zeros
        blocked = node.call("equal", node.call("max", bias, axes=[-1], keepdims=True),
                            node.b.scalar(NEG_INF, q.dtype))
        probs = node.call("where", blocked, node.b.scalar(0.0, q.dtype), probs)
    mode = node.attr("qk_matmul_output_mode", 0)
    qk = {2: with_bias, 3: probs}.get(mode, scores)
    return node.call("matmul", probs, v), qk


def attention_bias(node, q, k, mask, past_k, nonpad):
    """The additive bias (0 or -inf, plus a float mask) over (..., q_seq, kv_seq)."""
    q_len, kv_len, dtype = q.shape[2], k.shape[2], q.dtype
    node.budget(q_len * kv_len, "the attention bias")
    if mask is not None and mask.shape[-1] < kv_len:  # a short mask is padded as blocked
        pads = [0] * (2 * mask.rank)
        pads[-1] = kv_len - mask.shape[-1]
        mask = node.call("pad", mask, pads=pads, value=0.0 if mask.dtype == "bool" else NEG_INF)
    if mask is not None and mask.dtype == "bool":
        mask = blocked_to_bias(node, mask, dtype)
    terms = [] if mask is None else [mask]
    # query i attends key j where j - i <= offset: the past length, or per batch the
    # unpadded KV length minus the query length (an external cache)
    offset = past_k.shape[2] if past_k is not None else 0
    if nonpad is not None and past_k is None:
        offset = node.call("reshape", node.call("subtract", nonpad, q_len), shape=[-1, 1, 1, 1])
    distance = np.arange(kv_len)[None, :] - np.arange(q_len)[:, None]  # j - i
    left, right = _window(node)
    if node.flag("is_causal", 0):
        terms.append(allowed_bias(node, _le(node, _minus(node, distance, offset), 0), dtype))
    if left >= 0 or right >= 0:  # sliding window: -left <= (j - i - offset) <= right
        bounds = []
        if left >= 0:
            bounds.append(_le(node, _minus(node, offset, distance), left))
        if right >= 0:
            bounds.append(_le(node, _minus(node, distance, offset), right))
        allowed = bounds[0] if len(bounds) == 1 else _and(node, *bounds)
        terms.append(allowed_bias(node, allowed, dtype))
    if nonpad is not None:
        lengths = node.call("reshape", nonpad, shape=[-1, 1, 1, 1])
        keys = Const.of(np.arange(kv_len, dtype=nonpad.dtype))
        terms.append(allowed_bias(node, node.call("less", keys, lengths), dtype))
    return _sum(node, terms, dtype)


def _static(*items) -> bool:
    return all(isinstance(t, (int, np.ndarray)) for t in items)


def _value(item):
    if isinstance(item, int):
        return Const.of(np.int64(item))
    return Const.of(item) if isinstance(item, np.ndarray) else item


def _minus(node, a, b):
    """a - b, computed now when both are known, else as a call."""
    return a - b if _static(a, b) else node.call("subtract", _value(a), _value(b))


def _le(node, a, bound: int):
    if _static(a):
        return a <= bound
    return node.call("logical_not", node.call("greater", a, node.b.scalar(bound, a.dtype)))


def _and(node, a, b):
    return a & b if _static(a, b) else node.call("logical_and", _value(a), _value(b))


def allowed_bias(node, allowed, dtype: str):
    if isinstance(allowed, np.ndarray):
        return np.where(allowed, 0.0, NEG_INF).astype(dtype)
    return blocked_to_bias(node, allowed, dtype)


def blocked_to_bias(node, keep, dtype: str):
    return node.call("where", keep, node.b.scalar(0.0, dtype), node.b.scalar(NEG_INF, dtype))


def _sum(node, terms, dtype: str):
    static = [t for t in terms if isinstance(t, np.ndarray)]
    values = [t for t in terms if not isinstance(t, np.ndarray)]
    if static:
        total = static[0]
        for t in static[1:]:
            total = total + t
        values.append(Const.of(total.astype(dtype)))
    if not values:
        return None
    result = values[0]
    for t in values[1:]:
        result = node.call("add", result, t)
    return result
