"""ONNX converters for integer and dynamic quantization (ConvInteger, QLinearMatMul,
DynamicQuantizeLinear), the gated and rotary pieces of transformer blocks (SwiGLU,
RotaryEmbedding) and the mel filter bank constant (MelWeightMatrix)."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from .convert import converter, onnx_dtype
from .nn import _shifted_const, conv_attrs


def _shifted(node, x, zero, axis=None):
    """x - zero_point in int32 (a per-channel zero point along `axis`)."""
    x = node.call("cast", x, dtype="int32")
    if zero is None:
        return x
    zero = node.call("cast", zero, dtype="int32")
    if axis is not None and zero.rank == 1 and zero.shape[0] > 1:
        shape = [1] * x.rank
        shape[axis] = zero.shape[0]
        zero = node.call("reshape", zero, shape=shape)
    return node.call("subtract", x, zero)


@converter("ConvInteger")
def conv_integer(node):
    x, w = node.arg(0), node.arg(1)
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    node.require(len(kernel) == 2, "only 2-D ConvInteger is supported")
    zero = node.input(3)
    if isinstance(w, Const) and (zero is None or isinstance(zero, Const)):
        w = node.b.const(_shifted_const(w.data, zero, 0))  # (a backend sees its bytes)
    else:
        w = _shifted(node, w, zero, 0)
    return node.call("nn.conv2d", _shifted(node, x, node.input(2)), w,
                     **conv_attrs(node, kernel))


@converter("QLinearMatMul")
def qlinear_matmul(node):
    """qnn.matmul where `a` is quantized per tensor with float32 scales; a per-row `a` or
    float16 scales (opset 21) as the same integer arithmetic spelled out, in the scales'
    dtype."""
    ins = [node.input(i) for i in range(8)]
    if all(p.rank == 0 or p.shape == (1,) for p in ins[1:3]) and \
            all(ins[i].dtype == "float32" for i in (1, 4, 6)):
        return node.call("qnn.matmul", *ins)
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = ins
    product = node.call("matmul", _shifted(node, a, a_zero, -2), _shifted(node, b, b_zero, -1))
    dtype = a_scale.dtype
    scale = node.call("divide", node.call("multiply", a_scale, b_scale), y_scale)
    if a_scale.rank == 1 and a_scale.shape[0] > 1:  # per row of a
        scale = node.call("reshape", scale, shape=[a_scale.shape[0], 1])
    y = node.call("multiply", node.call("cast", product, dtype=dtype), scale)
    y = node.call("add", node.call("round", y), node.call("cast", y_zero, dtype=dtype))
    info = np.iinfo(y_zero.dtype)
    y = node.call("clip", y, min=float(info.min), max=float(info.max))
    return node.call("cast", y, dtype=y_zero.dtype)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(node):
    """uint8 quantization with the scale and zero point from the data's range (0
    included): scale = (max - min) / 255, zero point = round(clip(-min / scale))."""
    x = node.arg(0)
    high = node.call("maximum", node.call("max", x), 0.0)
    low = node.call("minimum", node.call("min", x), 0.0)
    spread = node.call("subtract", high, low)
    spread = node.call("where", node.call("equal", spread, 0.0), 1.0, spread)
    scale = node.call("divide", spread, 255.0)
    zero = node.call("round", node.call("clip", node.call("subtract", 0.0,
                                                           node.call("divide", low, scale)),
                                        min=0.0, max=255.0))
    y = node.call("add", node.call("round", node.call("divide", x, scale)), zero)
    y = node.call("cast", node.call("clip", y, min=0.0, max=255.0), dtype="uint8")
    return y, scale, node.call("cast", zero, dtype="uint8")


@converter("SwiGLU")
def swiglu(node):
    a, b, alpha = node.arg(0), node.arg(1), node.attr("alpha", 1.0)
    node.require(a.type == b.type, f"A {a.type} and B {b.type} must have one type")
    gate = node.call("nn.silu", a) if alpha == 1.0 else \
        node.call("multiply", a, node.call("sigmoid", node.call("multiply", a, alpha)))
    return node.call("multiply", gate, b)


@converter("RotaryEmbedding")
def rotary_embedding(node):
    x, cos, sin, positions = node.arg(0), node.arg(1), node.arg(2), node.input(3)
    b = node.b
    heads = node.attr("num_heads", 0)
    shape = x.shape
    if x.rank == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
        x = b.call("permute_dims", x, axes=[0, 2, 1, 3])
    else:
        node.require(x.rank == 3 and heads > 0 and shape[2] % heads == 0,
                     f"a 3-D input {x.type} needs num_heads dividing its hidden size")
        x = b.call("reshape", x, shape=[shape[0], shape[1], heads, shape[2] // heads])
    head = x.shape[3]
    dim = node.attr("rotary_embedding_dim", 0) or head
    half = dim // 2
    if positions is not None:
        cos, sin = (b.call("take", c, positions, axis=0) for c in (cos, sin))
    node.require(cos.shape[-1] == half and sin.shape[-1] == half,
                 f"the caches' last dim must be rotary_embedding_dim / 2 = {half}")
    cos, sin = (b.call("expand_dims", c, axes=[2]) for c in (cos, sin))
    rotated = b.call("strided_slice", x, begin=[0], end=[dim], axes=[3])
    if node.flag("interleaved", 0):
        x1 = b.call("strided_slice", rotated, begin=[0], end=[dim], strides=[2], axes=[3])
        x2 = b.call("strided_slice", rotated, begin=[1], end=[dim], strides=[2], axes=[3])
    else:
        x1, x2 = b.call("split", rotated, sections=2, axis=3)
    real = b.call("subtract", b.call("multiply", cos, x1), b.call("multiply", sin, x2))
    imag = b.call("add", b.call("multiply", sin, x1), b.call("multiply", cos, x2))
    if node.flag("interleaved", 0):
        pairs = b.call("concat", b.call("expand_dims", real, axes=[-1]),
                       b.call("expand_dims", imag, axes=[-1]), axis=-1)
        rotated = b.call("reshape", pairs, shape=list(rotated.shape))
    else:
        rotated = b.call("concat", real, imag, axis=3)
    if dim < head:
        rest = b.call("strided_slice", x, begin=[dim], end=[head], axes=[3])
        rotated = b.call("concat", rotated, rest, axis=3)
    if len(shape) == 3:
        return b.call("reshape", rotated, shape=list(shape))
    return b.call("permute_dims", rotated, axes=[0, 2, 1, 3])


@converter("MelWeightMatrix", const_inputs=(0, 1, 2, 3, 4))
def mel_weight_matrix(node):
    """Triangular mel filters over the DFT bins, as onnx's reference builds them."""
    bins, length, rate = (int(node.scalar(i)) for i in range(3))
    low, high = (float(node.scalar(i)) for i in (3, 4))
    node.budget((length // 2 + 1) * bins, "MelWeightMatrix")
    edges = np.arange(bins + 2)
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    edges = edges * ((high_mel - low_mel) / (bins + 2)) + low_mel
    edges = 700 * np.expm1(edges / 2595 * np.log(10))
    edges = (((length + 1) * edges) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i:i + 3]
        if center == left:
            out[center, i] = 1
        else:
            for j in range(left, center + 1):
                out[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j, i] = (right - j) / (right - center)
    dtype = onnx_dtype(node.attr("output_datatype", 1), "attribute 'output_datatype'")
    return Const.of(out.astype(dtype))
