"""onnxruntime's own operators (domain `com.microsoft`), as its transformer optimizer writes
them into BERT, GPT-2 and Llama-style models, mapped onto legato's kept-whole ops.

FastGelu / BiasGelu / Gelu become `nn.gelu` (tanh or erf form) after a bias `add`; the skip
and embedding layer norms are the adds, gathers and `nn.layer_norm` / `nn.rms_norm` they fuse;
the attention ops live in `contrib_attention`. onnx has no schemas for these ops, so each
converter brings one (attribute names and types, inputs and outputs, optional ones marked)
that the importer's structural checks hold nodes against. Any other op of the domain is
refused by name when the model is loaded.
"""
from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np

from ...ir import Const
from . import nn  # noqa: F401  (registers LayerNormalization, whose schema is widened below)
from .convert import CONVERTERS, converter

MS = "com.microsoft"
# the epsilon onnxruntime uses when the attribute is absent
SKIP_EPSILON = 1e-12      # SkipLayerNormalization, SkipSimplified..., EmbedLayerNormalization
LAYER_EPSILON = 1e-5      # SimplifiedLayerNormalization
QUICK_GELU_ALPHA = 1.702

ATTRIBUTE_TYPES = {"f": "FLOAT", "i": "INT", "s": "STRING", "ints": "INTS"}


def schema(op_type: str, inputs: str, outputs: str, domain: str = MS, **attrs: str):
    """An onnx OpSchema from a short spelling: parameter names, `?` after an optional one;
    attributes as `name="f" | "i" | "s" | "ints"`, `!` after a required one."""
    from onnx.defs import OpSchema

    def params(names: str):
        return [OpSchema.FormalParameter(name.rstrip("?"), "T", param_option=(
            OpSchema.FormalParameterOption.Optional if name.endswith("?") else
            OpSchema.FormalParameterOption.Single)) for name in names.split()]
    types = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)",
             "tensor(int32)", "tensor(int64)", "tensor(uint8)", "tensor(int8)"]
    return OpSchema(op_type, domain, 1, inputs=params(inputs), outputs=params(outputs),
                    type_constraints=[("T", types, "")],
                    attributes=[OpSchema.Attribute(name, getattr(
                        OpSchema.AttrType, ATTRIBUTE_TYPES[kind.rstrip("!")]), "",
                        required=kind.endswith("!")) for name, kind in attrs.items()])


def contrib(op_type: str, inputs: str, outputs: str, domain: str = MS, **attrs: str):
    """Register the decorated converter for `op_type` of onnxruntime's `domain`; its schema
    is built when first asked for (onnx is imported only then)."""
    return converter(op_type, domain=domain,
                     schema=cache(lambda: schema(op_type, inputs, outputs, domain, **attrs)))


def with_bias(node, x, index: int):
    """x plus the optional 1-D bias of input `index`."""
    bias = node.input(index)
    return x if bias is None else node.call("add", x, bias)


# --- activations ------------------------------------------------------------------------------

@contrib("Gelu", "X", "Y")
def gelu(node):
    return node.call("nn.gelu", node.arg(0), approximate="none")


@contrib("BiasGelu", "A B", "C")
def bias_gelu(node):
    return node.call("nn.gelu", node.call("add", node.arg(0), node.arg(1)), approximate="none")


@contrib("FastGelu", "X bias?", "Y")
def fast_gelu(node):
    # 0.5 x (1 + tanh(0.797885 x + 0.035677 x^3)) is the tanh form: 0.035677 = 0.044715 * 0.797885
    return node.call("nn.gelu", with_bias(node, node.arg(0), 1), approximate="tanh")


@contrib("QuickGelu", "X", "Y", alpha="f")
def quick_gelu(node):
    x, alpha = node.arg(0), node.attr("alpha", QUICK_GELU_ALPHA)
    if alpha == 1.0:
        return node.call("nn.silu", x)
    return node.call("multiply", x, node.call("sigmoid", node.call("multiply", x, alpha)))


@contrib("BiasAdd", "X bias skip", "Y")
def bias_add(node):
    return node.call("add", node.call("add", node.arg(0), node.arg(1)), node.arg(2))


# --- normalizations ---------------------------------------------------------------------------

def statistics(node, x, epsilon: float, rms: bool):
    """(mean, inverse standard deviation) over the last axis, kept as (..., 1), in float32
    as onnxruntime returns them; the mean of an RMS norm is not defined (None)."""
    wide = x if x.dtype == "float32" else node.call("cast", x, dtype="float32")
    spread = node.call("mean", node.call("multiply", wide, wide), axes=[-1], keepdims=True) \
        if rms else node.call("variance", wide, axes=[-1], keepdims=True)
    inv_std = node.call("rsqrt", node.call("add", spread, epsilon))
    return (None if rms else node.call("mean", wide, axes=[-1], keepdims=True)), inv_std


def skip_norm(node, rms: bool):
    """input + skip (+ bias), normalised over the last axis; outputs the result, the mean,
    the inverse standard deviation and the sum that was normalised."""
    x, skip, gamma = node.arg(0), node.arg(1), node.arg(2)
    beta, bias = (None, node.input(3)) if rms else (node.input(3), node.input(4))
    node.require(x.rank in (2, 3) and gamma.shape == (x.shape[-1],),
                 f"input {x.type} must be 2-D or 3-D with gamma of its hidden size, not "
                 f"{gamma.type}")
    total = node.call("add", x, skip)
    if bias is not None:
        total = node.call("add", total, bias)
    epsilon = node.attr("epsilon", SKIP_EPSILON)
    y = node.call("nn.rms_norm", total, gamma, axes=[-1], epsilon=epsilon) if rms else \
        node.call("nn.layer_norm", total, gamma, beta, axes=[-1], epsilon=epsilon)
    if not (node.wants(1) or node.wants(2)):
        return y, None, None, total
    mean, inv_std = statistics(node, total, epsilon, rms)
    node.require(mean is not None or not node.wants(1),
                 "output 1 (mean) is not defined for a root-mean-square norm")
    return y, mean, inv_std, total


@contrib("SkipLayerNormalization", "input skip gamma beta? bias?",
         "output mean? inv_std_var? input_skip_bias_sum?", epsilon="f")
def skip_layer_norm(node):
    return skip_norm(node, rms=False)


@contrib("SkipSimplifiedLayerNormalization", "input skip gamma bias?",
         "output mean? inv_std_var? input_skip_bias_sum?", epsilon="f")
def skip_simplified_layer_norm(node):
    return skip_norm(node, rms=True)


# onnxruntime runs LayerNormalization in the default domain at every opset, as ONNX defines
# it from opset 17 on: its optimizer writes it into models of older opsets
@cache
def _layer_norm_17():
    from onnx import defs
    return defs.get_schema("LayerNormalization", 17, "")


CONVERTERS["LayerNormalization"] = replace(CONVERTERS["LayerNormalization"],
                                           schema=_layer_norm_17)


# onnxruntime registers this one in the default domain, where its optimizer writes it
@contrib("SimplifiedLayerNormalization", "X scale", "Y inv_std_var?", domain="",
         axis="i", epsilon="f", stash_type="i")
def simplified_layer_norm(node):
    x, scale = node.arg(0), node.arg(1)
    axis, epsilon = node.axis("axis", x.rank, -1), node.attr("epsilon", LAYER_EPSILON)
    node.require(node.attr("stash_type", 1) == 1, "attribute 'stash_type' = "
                 f"{node.attr('stash_type')}: only 1 (float32 statistics) is defined")
    axes = list(range(axis, x.rank))
    y = node.call("nn.rms_norm", x, scale, axes=axes, epsilon=epsilon)
    if not node.wants(1):
        return y
    wide = x if x.dtype == "float32" else node.call("cast", x, dtype="float32")
    square = node.call("mean", node.call("multiply", wide, wide), axes=axes, keepdims=True)
    return y, node.call("rsqrt", node.call("add", square, epsilon))


@contrib("EmbedLayerNormalization", "input_ids segment_ids? word_embedding position_embedding "
         "segment_embedding? gamma beta mask? position_ids?", "output mask_index? embedding_sum?",
         epsilon="f", mask_index_type="i")
def embed_layer_norm(node):
    """word[ids] + position[position_ids or 0, 1, ...] (+ segment[segment_ids]), layer
    normalised; mask_index counts the entries of each mask row equal to 1, as onnxruntime
    does."""
    ids, words, positions = node.arg(0), node.arg(2), node.arg(3)
    segment_ids, segments, gamma, beta, mask, position_ids = (
        node.input(i) for i in (1, 4, 5, 6, 7, 8))
    node.require(ids.rank == 2, f"input_ids {ids.type} must be (batch, sequence)")
    node.require((segment_ids is None) == (segments is None),
                 "segment_ids and segment_embedding come together")
    batch, seq = ids.shape
    if position_ids is None:
        node.require(positions.shape[0] >= seq, f"position_embedding {positions.type} has "
                                                f"fewer rows than the {seq} positions")
        position_ids = Const.of(np.arange(seq, dtype=np.int64)[None, :])
    total = node.call("add", node.call("take", words, ids, axis=0),
                      node.call("take", positions, position_ids, axis=0))
    if segments is not None:
        total = node.call("add", total, node.call("take", segments, segment_ids, axis=0))
    y = node.call("nn.layer_norm", total, gamma, beta, axes=[-1],
                  epsilon=node.attr("epsilon", SKIP_EPSILON))
    mask_index = None
    if node.wants(1):
        node.require(mask is not None, "output 1 (mask_index) needs input 7 (mask)")
        kept = node.call("cast", node.call("equal", mask, 1), dtype="int32")
        mask_index = node.call("sum", kept, axes=[1])
    return y, mask_index, total

