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

from ...ir import Const
from .convert import converter

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


# --- LinearAttention --------------------------------------------------------------------------

LINEAR_RULES = ("linear", "gated", "delta", "gated_delta")


@converter("LinearAttention")
def linear_attention(node):
    """The recurrence run token by token (the sequence length is static): a state S of
    (B, H_kv, d_k, d_v) decayed by exp(decay) (gated rules), updated by k v^T or by the
    delta rule's beta k (v - S^T k), read out as scale q^T S per query head."""
    dtype = node.arg(0).dtype
    # half-precision inputs run the recurrence in float32, as the operator's function does
    wide = "float32" if dtype in ("float16", "bfloat16") else dtype
    query, key, value, past, decay, beta = (
        None if x is None else x if x.dtype == wide else node.call("cast", x, dtype=wide)
        for x in (node.input(i) for i in range(6)))
    node.require(query is not None and key is not None and value is not None,
                 "query, key and value are required")
    rule = node.attr("update_rule", "gated_delta")
    node.require(rule in LINEAR_RULES, f"attribute 'update_rule' = {rule!r} is none of "
                                       f"{', '.join(LINEAR_RULES)}")
    q_heads, kv_heads = node.positive("q_num_heads", 1), node.positive("kv_num_heads", 1)
    batch, steps = query.shape[:2]
    node.require(all(t.rank == 3 and t.shape[:2] == (batch, steps) for t in (query, key, value))
                 and q_heads % kv_heads == 0 and query.shape[2] % q_heads == 0
                 and value.shape[2] % kv_heads == 0
                 and key.shape[2] == query.shape[2] // q_heads * kv_heads,
                 f"query {query.type}, key {key.type} and value {value.type} do not fit "
                 f"{q_heads} query and {kv_heads} key/value heads")
    dk, dv = query.shape[2] // q_heads, value.shape[2] // kv_heads
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    node.require(not gated or decay is not None, f"update_rule {rule!r} needs decay (input 4)")
    node.require(not delta or beta is not None, f"update_rule {rule!r} needs beta (input 5)")
    scale = node.attr("scale", 0.0) or 1.0 / math.sqrt(dk)

    def heads(x, count):   # (B, T, count * d) -> (B, count, T, d)
        x = node.call("reshape", x, shape=[batch, steps, count, x.shape[2] // count])
        return node.call("permute_dims", x, axes=[0, 2, 1, 3])

    def at(x, t):          # step t of (B, H, T, ...) -> (B, H, ...)
        return node.call("take", x, Const.of(np.array(t, np.int64)), axis=2)
    q, k, v = heads(query, q_heads), heads(key, kv_heads), heads(value, kv_heads)
    if gated:
        node.require(decay.rank == 3 and decay.shape[:2] == (batch, steps) and decay.shape[2]
                     in (kv_heads * dk, kv_heads), f"decay {decay.type} must be (B, T, "
                                                   f"{kv_heads * dk} or {kv_heads})")
        decay = node.call("exp", heads(decay, kv_heads))          # (B, H_kv, T, d_k or 1)
    if delta:
        node.require(beta.rank == 3 and beta.shape[:2] == (batch, steps) and beta.shape[2]
                     in (kv_heads, 1), f"beta {beta.type} must be (B, T, {kv_heads} or 1)")
        beta = heads(beta, beta.shape[2])                          # (B, H_kv or 1, T, 1)
    shape = (batch, kv_heads, dk, dv)
    state = Const.of(np.zeros(shape, query.dtype)) if past is None else past
    node.require(state.shape == shape, f"past_state {state.type} must be {list(shape)}")
    group = q_heads // kv_heads
    outputs = []
    for t in range(steps):
        k_col = node.call("expand_dims", at(k, t), axes=[3])      # (B, H, d_k, 1)
        v_row = node.call("expand_dims", at(v, t), axes=[2])      # (B, H, 1, d_v)
        if gated:
            state = node.call("multiply", state, node.call("expand_dims", at(decay, t),
                                                           axes=[3]))
        if delta:
            k_row = node.call("permute_dims", k_col, axes=[0, 1, 3, 2])
            v_row = node.call("subtract", v_row, node.call("matmul", k_row, state))
            v_row = node.call("multiply", v_row, node.call("expand_dims", at(beta, t),
                                                           axes=[3]))
        state = node.call("add", state, node.call("multiply", k_col, v_row))
        shared = state if group == 1 else node.call("reshape", node.call(
            "broadcast_to", node.call("expand_dims", state, axes=[2]),
            shape=[batch, kv_heads, group, dk, dv]), shape=[batch, q_heads, dk, dv])
        q_row = node.call("expand_dims", at(q, t), axes=[2])      # (B, H_q, 1, d_k)
        outputs.append(node.call("multiply", node.call("matmul", q_row, shared), scale))
    out = node.call("concat", *outputs, axis=2) if steps > 1 else outputs[0]  # (B,Hq,T,dv)
    out = node.call("reshape", node.call("permute_dims", out, axes=[0, 2, 1, 3]),
                    shape=[batch, steps, q_heads * dv])
    if wide != dtype:
        return node.call("cast", out, dtype=dtype), node.call("cast", state, dtype=dtype)
    return out, state
