"""onnxruntime's attention operators (domain `com.microsoft`): Attention (BERT, GPT-2),
MultiHeadAttention, GroupQueryAttention and RotaryEmbedding (Llama-style models).

Each becomes one `nn.attention` call on (batch, heads, seq, head_size) tensors so backends
keep it whole. Masks follow onnxruntime's CPU kernels: Attention's and MultiHeadAttention's
mask forms become an additive bias of 0 and `mask_filter_value` (-10000), and the causal
mask hides later keys entirely (a row whose keys are all padding still attends to them,
a causally hidden key never); GroupQueryAttention places the new keys after each
batch entry's past tokens (`seqlens_k`, read at run time) and attends to the causal window
only. Forms that need a buffer shared between past and present, beam-search indirection,
quantized caches or other run-time-sized results are refused, naming the input and why.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from .attention import merge_heads, repeat_heads, split_heads
from .contrib import contrib

MASK_FILTER = -10000.0   # onnxruntime's default mask_filter_value


# --- shared pieces ----------------------------------------------------------------------------

def project(node, x, weights, bias, start: int, stop: int):
    """x @ weights[:, start:stop] + bias[start:stop], as one nn.linear."""
    if isinstance(weights, Const):
        w = Const.of(np.ascontiguousarray(weights.data[:, start:stop].T))
    else:
        w = node.call("permute_dims", node.call("strided_slice", weights, begin=[start],
                                                end=[stop], axes=[1]), axes=[1, 0])
    return node.call("nn.linear", x, w, None if bias is None else part(node, bias, start, stop))


def part(node, x, start: int, stop: int, axis: int = -1):
    if isinstance(x, Const):
        return Const.of(np.ascontiguousarray(np.take(x.data, range(start, stop), axis=axis)))
    return node.call("strided_slice", x, begin=[start], end=[stop], axes=[axis % x.rank])


def key_positions(count: int):
    return Const.of(np.arange(count, dtype=np.int64))


def filled(node, blocked, value: float, dtype: str):
    """`value` where `blocked`, else 0, in `dtype`."""
    if isinstance(blocked, np.ndarray):
        return Const.of(np.where(blocked, value, 0.0).astype(dtype))
    return node.call("where", blocked, node.b.scalar(value, dtype), node.b.scalar(0.0, dtype))


def padding_bias(node, mask, batch: int, q_len: int, total: int, dtype: str, fill: float):
    """onnxruntime's key mask as an additive bias broadcasting to (batch, 1, q_len, total):
    key lengths (batch,), end and start positions (2 * batch,), or a 0/1 mask of
    (batch, total) or (batch, q_len, total)."""
    shape = list(mask.shape)
    if mask.rank == 1 and shape[0] in (batch, 2 * batch):
        keys = key_positions(total)
        ends = node.call("reshape", part(node, mask, 0, batch, 0), shape=[batch, 1, 1, 1])
        blocked = node.call("greater_equal", keys, node.call("cast", ends, dtype="int64"))
        if shape[0] == 2 * batch:   # left padding too: keys before the start position
            starts = node.call("reshape", part(node, mask, batch, 2 * batch, 0),
                               shape=[batch, 1, 1, 1])
            blocked = node.call("logical_or", blocked, node.call(
                "less", keys, node.call("cast", starts, dtype="int64")))
        return filled(node, blocked, fill, dtype)
    if shape in ([batch, total], [batch, q_len, total]):
        wide = [batch, 1, 1, total] if mask.rank == 2 else [batch, 1, q_len, total]
        return filled(node, node.call("reshape", node.call("less_equal", mask, 0), shape=wide),
                      fill, dtype)
    form = "(3 * batch + 2) positions of packed sequences" if shape == [3 * batch + 2] else \
        "(batch, 1, max_seq, max_seq) of Megatron GPT-2" if mask.rank == 4 else f"{shape}"
    node.refuse(f"a mask of shape {form} is not imported: legato takes key lengths "
                f"({batch},), end and start positions ({2 * batch},), or 0/1 masks "
                f"({batch}, {total}) and ({batch}, {q_len}, {total}) (onnxruntime's CPU "
                "kernels take the same)")


def causal_bias(node, q_len: int, total: int, past: int, dtype: str):
    """-inf where key j lies after query i's position past + i."""
    later = np.arange(total)[None, :] > past + np.arange(q_len)[:, None]
    return filled(node, later, -math.inf, dtype)


def add_all(node, terms):
    terms = [t for t in terms if t is not None]
    total = terms[0] if terms else None
    for t in terms[1:]:
        total = node.call("add", total, t)
    return total


def attend(node, q, k, v, bias, scale, causal: bool = False):
    """nn.attention over (batch, heads, seq, size); fewer K/V heads are repeated."""
    k, v = (repeat_heads(node, t, q.shape[1] // t.shape[1]) for t in (k, v))
    return node.call("nn.attention", q, k, v, bias, scale=scale, causal=causal)


def masked_attention(node, q, k, v, mask, extra, past: int, causal: bool, scale):
    """Attention and MultiHeadAttention: onnxruntime adds mask_filter_value for each masked
    key and hides the keys after each query's position entirely (-inf; nn.attention's own
    causal flag when there is no past)."""
    batch, _, q_len, _ = q.shape
    total, dtype = k.shape[2], q.dtype
    fill = node.attr("mask_filter_value", MASK_FILTER)
    terms = [] if mask is None else [padding_bias(node, mask, batch, q_len, total, dtype, fill)]
    if causal and past:
        terms.append(causal_bias(node, q_len, total, past, dtype))
    return attend(node, q, k, v, add_all(node, terms + [extra]), scale, causal and not past)


def refuse_inputs(node, reasons: dict[int, str]) -> None:
    for index, why in reasons.items():
        if node.input(index) is not None:
            node.refuse(f"input {index} ({node.proto.input[index]!r}) is not imported: {why}")


SHARED_BUFFER = "it goes with a KV buffer shared between past and present, whose filled " \
                "length is known only at run time"


# --- Attention --------------------------------------------------------------------------------

@contrib("Attention", "input weights bias? mask_index? past? attention_bias? past_sequence_length?",
         "output present?", do_rotary="i", mask_filter_value="f", num_heads="i!",
         past_present_share_buffer="i", qkv_hidden_sizes="ints", rotary_embedding_dim="i",
         scale="f", unidirectional="i")
def attention(node):
    """Self-attention with the Q, K and V projections packed in one weight (Din, Dq+Dk+Dv)."""
    x, weights = node.arg(0), node.arg(1)
    bias, mask, past, extra = (node.input(i) for i in range(2, 6))
    refuse_inputs(node, {6: SHARED_BUFFER})
    node.require(not node.flag("past_present_share_buffer", 0),
                 f"attribute 'past_present_share_buffer' = 1 is not imported: {SHARED_BUFFER}")
    node.require(not node.flag("do_rotary", 0), "attribute 'do_rotary' = 1 is not imported "
                 "(onnxruntime's CPU kernel refuses it too: rotary models use "
                 "MultiHeadAttention with RotaryEmbedding)")
    heads = node.positive("num_heads", 1)
    node.require(x.rank == 3 and weights.rank == 2 and weights.shape[0] == x.shape[2],
                 f"input {x.type} must be (batch, seq, hidden) and weights {weights.type} "
                 "(hidden, q + k + v hidden sizes)")
    sizes = node.attr("qkv_hidden_sizes") or [weights.shape[1] // 3] * 3
    node.require(len(sizes) == 3 and sum(sizes) == weights.shape[1] and sizes[0] == sizes[1]
                 and all(s > 0 and s % heads == 0 for s in sizes),
                 f"qkv_hidden_sizes {sizes} must be three multiples of num_heads = {heads}, "
                 f"q and k equal, summing to the weights' {weights.shape[1]} columns")
    edges = np.cumsum([0] + list(sizes))
    q, k, v = (split_heads(node, project(node, x, weights, bias, int(edges[i]),
                                         int(edges[i + 1])), heads) for i in range(3))
    past_len = 0
    if past is not None:
        node.require(past.rank == 5 and past.shape[0] == 2 and past.shape[1:3] == k.shape[:2]
                     and past.shape[4] == k.shape[3] and sizes[1] == sizes[2],
                     f"past {past.type} must be (2, batch, {heads}, past_seq, "
                     f"{k.shape[3]}) with equal K and V hidden sizes")
        past_len = past.shape[3]
        k = node.call("concat", node.call("take", past, Const.of(np.int64(0)), axis=0), k, axis=2)
        v = node.call("concat", node.call("take", past, Const.of(np.int64(1)), axis=0), v, axis=2)
    y = masked_attention(node, q, k, v, mask, extra, past_len, node.flag("unidirectional", 0),
                         node.attr("scale"))
    present = None
    if node.wants(1):
        present = node.call("concat", *(node.call("expand_dims", t, axes=[0]) for t in (k, v)),
                            axis=0)
    return merge_heads(node, y), present


# --- MultiHeadAttention -----------------------------------------------------------------------

@contrib("MultiHeadAttention", "query key? value? bias? key_padding_mask? attention_bias? "
         "past_key? past_value? past_sequence_length? cache_indirection?",
         "output present_key? present_value? qk?", mask_filter_value="f", num_heads="i!",
         scale="f", unidirectional="i")
def multi_head_attention(node):
    """Q, K, V given apart (batch, seq, hidden) or K and V already split into heads
    (batch, heads, seq, size), or packed as (batch, seq, heads, 3 or 2, size)."""
    refuse_inputs(node, {8: SHARED_BUFFER, 9: "it reorders the KV cache by beam (beam "
                                              "search), which legato's import does not model"})
    node.require(not node.wants(3), "output 3 (qk) is not imported")
    heads = node.positive("num_heads", 1)
    q, k, v = mha_heads(node, heads)
    past_k, past_v = node.input(6), node.input(7)
    node.require((past_k is None) == (past_v is None), "past_key and past_value come together")
    past_len = 0
    if past_k is not None:
        node.require(past_k.rank == 4 and past_k.shape[:2] == k.shape[:2]
                     and past_k.shape[3] == k.shape[3] and past_v.shape[:3] == past_k.shape[:3],
                     f"past_key {past_k.type} and past_value {past_v.type} must be (batch, "
                     f"{heads}, past_seq, head_size)")
        past_len = past_k.shape[2]
        k, v = node.call("concat", past_k, k, axis=2), node.call("concat", past_v, v, axis=2)
    y = masked_attention(node, q, k, v, node.input(4), node.input(5), past_len,
                         node.flag("unidirectional", 0), node.attr("scale"))
    return merge_heads(node, y), k, v, None


def mha_heads(node, heads: int):
    """(q, k, v) as (batch, heads, seq, size), the bias of the input projection added."""
    query, key, value, bias = (node.input(i) for i in range(4))
    query = node.arg(0)
    if query.rank == 5:   # packed QKV: (batch, seq, heads, 3, size)
        node.require(key is None and value is None and query.shape[2:4] == (heads, 3),
                     f"packed query {query.type} must be (batch, seq, {heads}, 3, size) "
                     "with no key and value")
        q, k, v = unpack(node, query, 3)
        width = heads * q.shape[3]
        return tuple(head_bias(node, t, bias, i * width) for i, t in enumerate((q, k, v)))
    node.require(query.rank == 3 and key is not None,
                 f"query {query.type} must be (batch, seq, hidden) with a key, or packed QKV")
    q = head_bias(node, split_heads(node, query, heads), bias, 0)
    width = heads * q.shape[3]
    if key.rank == 5:     # packed KV: (batch, kv_seq, heads, 2, size)
        node.require(value is None and key.shape[2:4] == (heads, 2),
                     f"packed key {key.type} must be (batch, kv_seq, {heads}, 2, size) with "
                     "no value")
        k, v = unpack(node, key, 2)
    else:
        node.require(value is not None and key.rank == value.rank and key.rank in (3, 4),
                     f"key {key.type} and value {None if value is None else value.type} must "
                     "both be (batch, kv_seq, hidden) or (batch, heads, kv_seq, size)")
        if key.rank == 4:     # already projected and split into heads (a cross-attention cache)
            node.require(bias is None, "a bias with key and value split into heads is not "
                                       "imported (the bias belongs to the input projection)")
            return q, key, value
        k, v = split_heads(node, key, heads), split_heads(node, value, heads)
    return q, head_bias(node, k, bias, width), head_bias(node, v, bias, 2 * width)


def unpack(node, packed, count: int):
    """(batch, seq, heads, count, size) -> `count` tensors (batch, heads, seq, size)."""
    return [node.call("permute_dims", node.call("take", packed, Const.of(np.int64(i)), axis=3),
                      axes=[0, 2, 1, 3]) for i in range(count)]


def head_bias(node, x, bias, start: int):
    """x (batch, heads, seq, size) plus bias[start : start + heads * size], per head."""
    if bias is None:
        return x
    heads, size = x.shape[1], x.shape[3]
    slab = part(node, bias, start, start + heads * size, 0)
    return node.call("add", x, node.call("reshape", slab, shape=[1, heads, 1, size]))


# --- rotary embeddings ------------------------------------------------------------------------

def rotate(node, x, cos, sin, dim: int, interleaved: bool):
    """x (..., head_size) with its first `dim` channels rotated by cos and sin
    (broadcasting to (..., dim / 2)): the halves [0, dim/2) and [dim/2, dim) are the real
    and imaginary parts, or the even and odd channels when `interleaved`."""
    head = x.shape[-1]
    axis = x.rank - 1
    rotated = x if dim == head else part(node, x, 0, dim, axis)
    if interleaved:
        pairs = node.call("reshape", rotated, shape=list(rotated.shape[:-1]) + [dim // 2, 2])
        x1, x2 = (node.call("take", pairs, Const.of(np.int64(i)), axis=axis + 1) for i in (0, 1))
    else:
        x1, x2 = node.call("split", rotated, sections=2, axis=axis)
    real = node.call("subtract", node.call("multiply", x1, cos), node.call("multiply", x2, sin))
    imag = node.call("add", node.call("multiply", x2, cos), node.call("multiply", x1, sin))
    if interleaved:
        pairs = node.call("concat", *(node.call("expand_dims", t, axes=[axis + 1])
                                      for t in (real, imag)), axis=axis + 1)
        rotated = node.call("reshape", pairs, shape=list(rotated.shape))
    else:
        rotated = node.call("concat", real, imag, axis=axis)
    return rotated if dim == head else node.call("concat", rotated,
                                                  part(node, x, dim, head, axis), axis=axis)


def cache_rows(node, cache, positions):
    """cos or sin rows at `positions` (int64, any shape): (*positions.shape, dim / 2)."""
    return node.call("take", cache, positions, axis=0)


@contrib("RotaryEmbedding", "input position_ids cos_cache sin_cache", "output", interleaved="i",
         is_packed_batching="i", num_heads="i", rotary_embedding_dim="i", scale="f")
def rotary_embedding(node):
    """(batch, seq, heads * size) or (batch, heads, seq, size); positions (batch, seq) or
    one start position for every batch entry."""
    x, position_ids, cos, sin = (node.arg(i) for i in range(4))
    node.require(not node.flag("is_packed_batching", 0),
                 "attribute 'is_packed_batching' = 1 (ragged batches) is not imported")
    node.require(node.attr("scale", 1.0) == 1.0, f"attribute 'scale' = {node.attr('scale')} "
                 "is not imported (onnxruntime's CPU kernel does not apply it either)")
    half = cos.shape[-1]
    node.require(cos.rank == 2 and sin.shape == cos.shape, f"cos_cache {cos.type} and "
                 f"sin_cache {sin.type} must both be (max_seq, rotary_dim / 2)")
    dim = node.attr("rotary_embedding_dim", 0) or 2 * half
    node.require(dim == 2 * half, f"rotary_embedding_dim {dim} is not twice the caches' "
                                  f"{half} columns")
    if x.rank == 4:
        batch, _, seq, size = x.shape
        heads_first = x
    else:
        node.require(x.rank == 3, f"input {x.type} must be 3-D or 4-D")
        batch, seq, hidden = x.shape
        heads = node.attr("num_heads", 0) or hidden // dim
        node.require(heads >= 1 and hidden % heads == 0, f"hidden size {hidden} does not "
                                                         f"split into {heads} heads")
        heads_first = split_heads(node, x, heads)
        size = hidden // heads
    node.require(dim <= size, f"rotary dimension {dim} exceeds the head size {size}")
    positions = node.call("cast", position_ids, dtype="int64")
    if position_ids.rank == 1:   # one start position: start, start + 1, ...
        node.require(position_ids.shape == (1,), f"position_ids {position_ids.type} must be "
                                                 "(1,) or (batch, seq)")
        positions = node.call("add", positions, key_positions(seq))
        positions = node.call("reshape", positions, shape=[1, seq])
    else:
        node.require(position_ids.shape in ((batch, seq), (1, seq)),
                     f"position_ids {position_ids.type} must be (batch, seq) or (1,)")
    rows = [node.call("expand_dims", cache_rows(node, c, positions), axes=[1]) for c in (cos, sin)]
    y = rotate(node, heads_first, *rows, dim, node.flag("interleaved", 0))
    return y if x.rank == 4 else merge_heads(node, y)


# --- GroupQueryAttention ----------------------------------------------------------------------

QUANTIZED = "a quantized KV cache is not imported"
NORMED = "per-head Q/K RMS norms are not imported (onnxruntime's CPU kernel refuses them too)"


@contrib("GroupQueryAttention", "query key? value? past_key? past_value? seqlens_k "
         "total_sequence_length cos_cache? sin_cache? position_ids? attention_bias? head_sink? "
         "k_scale? v_scale? q_norm_weight? k_norm_weight? query_seqlens?",
         "output present_key? present_value? output_qk?", causal="i", do_rotary="i",
         k_norm_epsilon="f", k_quant_type="s", kv_cache_bit_width="i", kv_num_heads="i!",
         local_window_size="i", num_heads="i!", q_norm_epsilon="f", qk_norm_epsilon="f",
         qk_output="i", rotary_interleaved="i", scale="f", sliding_window_cache="i",
         smooth_softmax="i", softcap="f", v_quant_type="s")
def group_query_attention(node):
    """Batch entry b holds seqlens_k[b] + 1 tokens after this step: its new tokens follow
    its max(seqlens_k[b] + 1 - seq, 0) past ones in the present cache, query s sits at that
    past length + s and sees the keys up to its own position (the last local_window_size of
    them when that is set)."""
    refuse_inputs(node, {11: "head_sink (smooth softmax) is not imported", 12: QUANTIZED,
                         13: QUANTIZED, 14: NORMED, 15: NORMED,
                         16: "right-padded query chunks (query_seqlens) are not imported"})
    for name in ("smooth_softmax", "qk_output", "sliding_window_cache"):
        node.require(not node.attr(name, 0), f"attribute {name!r} = {node.attr(name)} is not "
                                             "imported")
    for name in ("k_quant_type", "v_quant_type"):
        node.require(node.attr(name, "NONE") == "NONE", f"attribute {name!r} = "
                     f"{node.attr(name)!r}: {QUANTIZED}")
    q, k, v = gqa_heads(node, node.positive("num_heads", 1), node.positive("kv_num_heads", 1))
    batch, _, seq, size = q.shape
    past_k, past_v = node.input(3), node.input(4)
    node.require((past_k is None) == (past_v is None), "past_key and past_value come together")
    past_len = 0 if past_k is None else past_k.shape[2]
    node.require(past_k is None or (past_k.shape == past_v.shape and past_k.shape[:2] ==
                                    k.shape[:2] and past_k.shape[3] == size),
                 f"past_key and past_value must be (batch, {k.shape[1]}, past_seq, {size})")
    total = node.scalar(6)
    length = max(int(total), past_len)   # the present cache's length, as onnxruntime sizes it
    totals = node.call("add", node.call("reshape", node.call(
        "cast", node.arg(5), dtype="int64"), shape=[batch, 1]), 1)           # (batch, 1)
    pasts = node.call("maximum", node.call("subtract", totals, seq), 0)       # (batch, 1)
    steps = node.call("add", pasts, key_positions(seq))                      # (batch, seq)
    if node.flag("do_rotary", 0):
        q, k = gqa_rotary(node, q, k, steps)
    present_k, present_v = (place(node, old, new, pasts, length)
                            for old, new in ((past_k, k), (past_v, v)))
    bias = add_all(node, [gqa_bias(node, totals, steps, length, q.dtype), node.input(10)])
    softcap = node.attr("softcap", 0.0)
    y = softcapped(node, q, present_k, present_v, bias, softcap) if softcap > 0 else \
        attend(node, q, present_k, present_v, bias, node.attr("scale", 0.0) or None)
    return merge_heads(node, y), present_k, present_v, None


def gqa_heads(node, heads: int, kv_heads: int):
    query, key, value = node.arg(0), node.input(1), node.input(2)
    node.require(heads % kv_heads == 0, f"num_heads {heads} is not a multiple of "
                                        f"kv_num_heads {kv_heads}")
    if key is None:   # packed (batch, seq, (heads + 2 kv_heads) * size)
        node.require(value is None and query.rank == 3 and query.shape[2] %
                     (heads + 2 * kv_heads) == 0, f"packed query {query.type} must be (batch, "
                     f"seq, ({heads} + 2 * {kv_heads}) * head_size)")
        size = query.shape[2] // (heads + 2 * kv_heads)
        edges = [0, heads * size, (heads + kv_heads) * size, query.shape[2]]
        query, key, value = (part(node, query, edges[i], edges[i + 1]) for i in range(3))
    node.require(value is not None and query.rank == key.rank == value.rank == 3 and
                 key.shape == value.shape and key.shape[:2] == query.shape[:2],
                 "query, key and value must be (batch, seq, hidden) of one sequence length")
    return (split_heads(node, query, heads), split_heads(node, key, kv_heads),
            split_heads(node, value, kv_heads))


def gqa_rotary(node, q, k, steps):
    cos, sin = node.input(7), node.input(8)
    node.require(cos is not None and sin is not None, "do_rotary = 1 needs cos_cache and "
                                                      "sin_cache (inputs 7 and 8)")
    positions = steps if node.input(9) is None else node.call("cast", node.input(9),
                                                              dtype="int64")
    rows = [node.call("expand_dims", cache_rows(node, c, positions), axes=[1])
            for c in (cos, sin)]
    interleaved = node.flag("rotary_interleaved", 0)
    dim = 2 * cos.shape[-1]
    node.require(dim <= q.shape[3], f"cos_cache {cos.type} rotates more than the head size "
                                    f"{q.shape[3]}")
    return tuple(rotate(node, t, *rows, dim, interleaved) for t in (q, k))


def place(node, old, new, pasts, length: int):
    """The present cache (batch, kv_heads, length, size): rows [0, past_b) from `old`, the
    new rows from past_b on, zeros after them."""
    batch, heads, seq, size = new.shape
    if old is None and length == seq:
        return new   # a first prompt: rows past a shorter entry's length are unspecified
    keys = key_positions(length)
    offset = node.call("subtract", keys, pasts)                              # (batch, length)
    index = node.call("clip", offset, min=0, max=seq - 1)
    index = node.call("broadcast_to", node.call("reshape", index, shape=[batch, 1, length, 1]),
                      shape=[batch, heads, length, size])
    fresh = node.call("gather_elements", new, index, axis=2)
    is_new = node.call("logical_and", node.call("greater_equal", offset, 0),
                       node.call("less", offset, seq))
    is_new = node.call("reshape", is_new, shape=[batch, 1, length, 1])
    kept = Const.of(np.zeros((1, 1, length, 1), new.dtype)) if old is None else old
    if old is not None and old.shape[2] < length:
        kept = node.call("pad", old, pads=[0, 0, 0, 0, 0, 0, length - old.shape[2], 0])
    if old is not None:
        is_old = node.call("reshape", node.call("less", keys, pasts), shape=[batch, 1, length, 1])
        kept = node.call("where", is_old, kept, node.b.scalar(0.0, new.dtype))
    return node.call("where", is_new, fresh, kept)


def gqa_bias(node, totals, steps, length: int, dtype: str):
    """-inf for the keys query s of entry b does not see: beyond the entry's tokens, after
    its position (causal), or local_window_size or more before it."""
    keys = key_positions(length)
    own = node.call("reshape", steps, shape=[-1, 1, steps.shape[1], 1])      # (b, 1, s, 1)
    blocked = node.call("greater_equal", keys, node.call("reshape", totals, shape=[-1, 1, 1, 1]))
    if node.flag("causal", 1):
        blocked = node.call("logical_or", blocked, node.call("greater", keys, own))
    window = node.attr("local_window_size", -1)
    if window > 0:
        blocked = node.call("logical_or", blocked, node.call(
            "less_equal", keys, node.call("subtract", own, window)))
    return filled(node, blocked, -math.inf, dtype)


def softcapped(node, q, k, v, bias, softcap: float):
    """softmax(softcap * tanh(q k^T * scale / softcap) + bias) v, composed: nn.attention
    has no softcap."""
    k, v = (repeat_heads(node, t, q.shape[1] // t.shape[1]) for t in (k, v))
    scale = node.attr("scale", 0.0) or 1 / math.sqrt(q.shape[3])
    scores = node.call("multiply", node.call("matmul", q, node.call(
        "permute_dims", k, axes=[0, 1, 3, 2])), scale)
    scores = node.call("multiply", node.call("tanh", node.call("divide", scores, softcap)),
                       softcap)
    probs = node.call("nn.softmax", node.call("add", scores, bias), axis=-1)
    return node.call("matmul", probs, v)
