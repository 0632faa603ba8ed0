"""ONNX converters for elementwise math, data movement, reductions and constants."""
from __future__ import annotations

import math
from functools import reduce

import numpy as np

from ...ir import Const
from ...ir.shapes import broadcast_shapes, chunk_sizes, norm_axes, norm_axis
from ...ir.symbols import Expr, assume_le
from ...ops import REGISTRY
from ..common.fold import shape_const
from ..common.indexing import one_hot_values
from .convert import converter, onnx_dtype
from .helpers import _axes, _empty_identity, cast_to
from .tensors import quote

# --- elementwise ----------------------------------------------------------------------------

def _direct(op: str):
    def convert(node):
        return node.call(op, *node.args())
    convert.__name__ = f"direct_{op.replace('.', '_')}"
    return convert


# ONNX op types that map one to one onto a legato op say so in the op's definition (`onnx`)
for _opdef in REGISTRY.ops():
    if _opdef.onnx:
        converter(*_opdef.onnx)(_direct(_opdef.name))


@converter("Mod")
def mod(node):
    # fmod=0 is Python's sign-of-divisor remainder (integers only, by the spec)
    a, b, fmod = node.arg(0), node.arg(1), node.flag("fmod", 0)
    if isinstance(a, Const) and isinstance(b, Const) and a.data.dtype.kind in "iu" \
            and np.all(b.data != 0):  # shape arithmetic (head counts): fold it now
        return Const.of((np.fmod if fmod else np.remainder)(a.data, b.data).astype(a.dtype))
    return node.call("fmod" if fmod else "remainder", a, b)


@converter("IsInf")
def isinf(node):
    return node.call("isinf", node.arg(0), detect_positive=node.flag("detect_positive", 1),
                     detect_negative=node.flag("detect_negative", 1))


@converter("Pow")
def pow_(node):
    base, exponent = node.arg(0), node.arg(1)
    if exponent.dtype != base.dtype:  # ONNX allows mixed types; the result is base's type
        exponent = node.call("cast", exponent, dtype=base.dtype)
    return node.call("power", base, exponent)


@converter("Max", "Min", "Sum")
def variadic(node):
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add"}[node.op]
    return reduce(lambda a, b: node.call(op, a, b), node.args())


@converter("Reciprocal")
def reciprocal(node):
    return node.call("divide", 1.0, node.arg(0))


@converter("Relu")
def relu(node):
    x = node.arg(0)
    return node.call("nn.relu", x) if x.dtype.startswith(("float", "bfloat")) else \
        node.call("maximum", x, 0)


@converter("LeakyRelu")
def leaky_relu(node):
    return node.call("nn.leaky_relu", node.arg(0), alpha=node.attr("alpha", 0.01))


@converter("Gelu")
def gelu(node):
    return node.call("nn.gelu", node.arg(0), approximate=node.attr("approximate", "none"))


@converter("Clip", const_inputs=(1, 2))
def clip(node):
    return node.call("clip", node.arg(0), min=node.scalar(1), max=node.scalar(2))


@converter("Cast")
def cast(node):
    return cast_to(node, node.arg(0), onnx_dtype(node.attr("to"), "attribute 'to'"))


@converter("Identity")
def identity(node):
    return node.arg(0)


# --- linear algebra -------------------------------------------------------------------------

@converter("Gemm")
def gemm(node):
    a, b, c = node.arg(0), node.arg(1), node.input(2)
    if node.flag("transA", 0):
        a = node.call("permute_dims", a, axes=[1, 0])
    if node.flag("transB", 0):
        b = node.call("permute_dims", b, axes=[1, 0])
    y = node.call("matmul", a, b)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = node.call("multiply", y, alpha)
    if c is not None:
        y = node.call("add", y, c if beta == 1.0 else node.call("multiply", c, beta))
    return y


# --- data movement --------------------------------------------------------------------------

@converter("Reshape", const_inputs=(1,))
def reshape(node):
    x, shape = node.arg(0), node.ints(1)
    if not node.flag("allowzero", 0):  # 0 copies the input's dimension
        node.require(all(i < x.rank for i, d in enumerate(shape) if d == 0),
                     f"shape {quote(shape)} copies a dimension (0) that the rank-{x.rank} "
                     "input does not have")
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        for i, d in enumerate(shape):  # a size read as data: at 0 it would copy instead
            if isinstance(d, Expr) and not (i < x.rank and d == x.shape[i]):
                assume_le(1, d, f"Reshape node {node.label} to {d} (0 copies a dimension)")
    return node.call("reshape", x, shape=shape)


@converter("Transpose")
def transpose(node):
    return node.call("permute_dims", node.arg(0), axes=node.attr("perm"))


@converter("Concat")
def concat(node):
    return node.call("concat", *node.args(), axis=node.attr("axis"))


@converter("Split", const_inputs=(1,))
def split(node):
    x = node.arg(0)
    axis = node.axis("axis", x.rank, 0)
    sizes = node.ints(1)
    if sizes is None:
        parts = node.attr("num_outputs", len(node.outputs))
        node.require(parts == len(node.outputs), f"attribute 'num_outputs' = {parts} differs "
                                                 f"from the {len(node.outputs)} outputs")
        dim = x.shape[axis]
        node.require(parts >= 1, f"attribute 'num_outputs' = {parts} must be at least 1")
        # ONNX 18: chunks of ceil(dim / n), the last one smaller
        sizes = list(chunk_sizes(dim, -(-dim // parts))) if dim else [0] * parts
        node.require(len(sizes) == parts, f"a dim of {dim} does not split into {parts} "
                                          f"chunks of {sizes[0]} (it makes {len(sizes)})")
    result = node.call("split", x, sections=sizes, axis=axis)
    return result if isinstance(result, tuple) else (result,)


@converter("Slice", const_inputs=(1, 2, 3, 4))
def slice_(node):
    return node.call("strided_slice", node.arg(0), begin=node.ints(1), end=node.ints(2),
                     axes=node.ints(3), strides=node.ints(4))


@converter("Gather")
def gather(node):
    return node.call("take", node.arg(0), node.arg(1), axis=node.attr("axis", 0))


@converter("Expand", const_inputs=(1,))
def expand(node):
    x = node.arg(0)
    return node.call("broadcast_to", x, shape=broadcast_shapes(x.shape, tuple(node.ints(1))))


@converter("Flatten")
def flatten(node):
    return node.call("flatten", node.arg(0), axis=node.attr("axis", 1))


@converter("Squeeze", const_inputs=(1,))
def squeeze(node):
    axes = _axes(node)
    # onnx's shape inference squeezes nothing for empty axes, onnxruntime every size-1 dim
    node.require(axes is None or len(axes) > 0, "empty axes are read differently by ONNX "
                 "implementations (no axis, or every size-1 axis): name the axes, or leave "
                 "them out to squeeze every size-1 axis")
    return node.call("squeeze", node.arg(0), axes=axes)


@converter("Unsqueeze", const_inputs=(1,))
def unsqueeze(node):
    return node.call("expand_dims", node.arg(0), axes=_axes(node))


@converter("Shape")
def shape(node):
    dims = node.arg(0).shape
    start, end = node.attr("start", 0), node.attr("end", len(dims))
    return shape_const(list(dims[start:end]))


@converter("Size")
def size(node):
    return shape_const(node.arg(0).type.size)


@converter("Constant")
def constant(node):
    node.require(len(node.attrs) == 1, f"needs exactly one value attribute, has "
                                       f"{len(node.attrs)}")
    (key, value), = node.attrs.items()
    dtypes = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
              "value_ints": np.int64}
    if key not in ("value",) + tuple(dtypes):
        node.fail(f"attribute {key!r} is not supported (value, value_float(s), value_int(s))")
    return Const.of(np.array(value, dtype=dtypes.get(key)))


# --- padding --------------------------------------------------------------------------------

@converter("Pad", const_inputs=(1, 2, 3))
def pad(node):
    # messages are made only on failure: quoting pads costs more than the checks
    x, mode = node.arg(0), node.attr("mode", "constant")
    pads, value = node.ints(1), node.scalar(2, 0)
    axes = [norm_axis(a, x.rank) for a in node.ints(3, list(range(x.rank)))]  # in given order
    if len(set(axes)) != len(axes):
        node.fail(f"axes {quote(axes)} repeat an axis")
    if len(pads) != 2 * len(axes):
        node.fail(f"pads {quote(pads)} must hold two values for each of the {len(axes)} axes")
    full = [0] * (2 * x.rank)
    for i, axis in enumerate(axes):
        full[axis], full[x.rank + axis] = pads[i], pads[len(axes) + i]
    if not _all_held(full, x.shape, "pads", pads):
        node.fail(f"pads {quote(pads)} remove more than the dims {list(x.shape)} hold")
    grow = [max(p, 0) for p in full]
    crop = [min(p, 0) for p in full]  # negative pads remove elements
    if mode == "constant":  # pad, then remove: a removal may reach into the padding
        return _crop(node, node.call("pad", x, pads=grow, value=float(value), mode=mode), crop)
    if not _all_held(crop, x.shape, "negative pads", pads):
        node.fail(f"negative pads {quote(pads)} remove more than the dims {list(x.shape)} "
                  "hold")
    x = _crop(node, x, crop)
    if mode == "wrap":
        return _wrap_pad(node, x, grow)
    return node.call("pad", x, pads=grow, value=float(value), mode=mode)


def _all_held(full, shape, what: str, pads) -> bool:
    """Whether each axis's two pads (begin at i, end at rank + i) remove at most its dim:
    decided for a size, a guard for a symbolic dim (padding never compares it)."""
    rank = len(shape)
    for i, dim in enumerate(shape):
        removed = -full[i] - full[rank + i]
        if isinstance(dim, int):
            if removed > dim:
                return False
        else:
            assume_le(removed, dim, f"{what} {quote(pads)} removing {removed} of {dim}")
    return True


def _crop(node, x, crop):
    """Remove -crop[i] elements at the start and -crop[rank + i] at the end of each axis."""
    if not any(crop):
        return x
    return node.call("strided_slice", x, begin=[-c for c in crop[:x.rank]],
                     end=[d + c for d, c in zip(x.shape, crop[x.rank:])])


def _wrap_pad(node, x, pads):
    """Circular padding: each axis gets its own tail in front and its head behind."""
    for axis in range(x.rank):
        before, after, dim = pads[axis], pads[x.rank + axis], x.shape[axis]
        node.require(before <= dim and after <= dim, f"wrap pads {pads} exceed the dims "
                                                     f"{list(x.shape)}")
        parts = [node.call("strided_slice", x, begin=[dim - before], end=[dim], axes=[axis])
                 ] if before else []
        parts.append(x)
        if after:
            parts.append(node.call("strided_slice", x, begin=[0], end=[after], axes=[axis]))
        x = node.call("concat", *parts, axis=axis) if len(parts) > 1 else x
    return x


# --- reductions -----------------------------------------------------------------------------

REDUCTIONS = {"ReduceSum": ("sum", 0.0), "ReduceMean": ("mean", math.nan),
              "ReduceProd": ("prod", 1.0),
              "ReduceMax": ("max", -math.inf), "ReduceMin": ("min", math.inf)}


@converter(*REDUCTIONS, const_inputs=(1,))
def reduction(node):
    x, (op, empty) = node.arg(0), REDUCTIONS[node.op]
    axes, keepdims = _axes(node), node.flag("keepdims", 1)
    if not axes:
        if node.flag("noop_with_empty_axes", 0):
            return x
        axes = None
    axes = norm_axes(axes, x.rank)
    if any(x.shape[a] == 0 for a in axes):  # the reduction of an empty set is its identity
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes]
        node.budget(math.prod(shape), "the reduction of an empty axis")
        return Const.of(_empty_identity(empty, x.dtype, shape))
    return node.call(op, x, axes=list(axes), keepdims=keepdims)


@converter("ArgMax", "ArgMin")
def argmax(node):
    return node.call(node.op.lower(), node.arg(0), axis=node.attr("axis", 0),
                     keepdims=node.flag("keepdims", 1),
                     select_last_index=node.flag("select_last_index", 0))


# --- indexing, scans and selection ----------------------------------------------------------

@converter("GatherElements")
def gather_elements(node):
    return node.call("gather_elements", node.arg(0), node.arg(1), axis=node.attr("axis", 0))


@converter("CumSum", "CumProd", const_inputs=(1,))
def cumsum(node):
    x = node.arg(0)
    axis = int(node.scalar(1))
    node.require(-x.rank <= axis < x.rank, f"axis {axis} is out of range for rank {x.rank}")
    return node.call(node.op.lower(), x, axis=axis,
                     exclusive=node.flag("exclusive", 0), reverse=node.flag("reverse", 0))


@converter("Trilu", const_inputs=(1,))
def trilu(node):
    return node.call("trilu", node.arg(0), k=node.scalar(1, 0), upper=node.flag("upper", 1))


@converter("Tile", const_inputs=(1,))
def tile(node):
    return node.call("tile", node.arg(0), repeats=node.ints(1))


@converter("TopK", const_inputs=(1,))
def topk(node):
    x = node.arg(0)
    (k,) = node.ints(1)
    node.require(node.flag("sorted", 1), "sorted=0 is not supported (the order would be "
                                         "unspecified); legato's topk always sorts")
    return node.call("topk", x, k=k, axis=node.axis("axis", x.rank, -1),
                     largest=node.flag("largest", 1))


@converter("OneHot", const_inputs=(1, 2))
def one_hot(node):
    indices, depth = node.arg(0), int(node.scalar(1))
    values = node.const(2)
    node.require(values.size == 2, f"values must hold [off, on], not {values.size} values")
    off, on = (Const.of(v) for v in values.reshape(2))
    node.require(depth >= 0, f"depth {depth} must not be negative")
    return one_hot_values(node.b, indices, depth, node.attr("axis", -1), on, off)
