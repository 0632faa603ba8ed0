"""ONNX converters for the N-d gathers and scatters (GatherND, ScatterElements, ScatterND),
written as take and scatter_elements on the data with its indexed dims flattened, and for
rearrangements (DepthToSpace, SpaceToDepth, Einsum as reshapes, transposes and matmuls)."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Const
from ...ir.shapes import broadcast_shapes
from ..common.einsum import contract, sum_others
from ..common.indexing import flat_index, scatter_rows
from .convert import converter

REDUCTIONS = ("none", "add", "mul", "max", "min")


@converter("GatherND")
def gather_nd(node):
    data, indices = node.arg(0), node.arg(1)
    batch = node.attr("batch_dims", 0)
    k = indices.shape[-1]
    node.require(0 <= batch < min(data.rank, indices.rank) and batch + k <= data.rank,
                 f"batch_dims {batch} and index depth {k} do not fit data {data.type}")
    b = node.b
    rows = flat_index(b, indices, data.shape[batch:batch + k])
    count = math.prod(data.shape[batch:batch + k])
    if batch:  # each batch element indexes its own block of rows
        batches = math.prod(data.shape[:batch])
        offsets = np.arange(batches, dtype=np.int64).reshape(
            data.shape[:batch] + (1,) * (indices.rank - 1 - batch)) * count
        rows = b.call("add", rows, Const.of(offsets))
    rest = list(data.shape[batch + k:])
    flat = b.call("reshape", data, shape=[-1] + rest) if data.type.size else \
        b.call("reshape", data, shape=[math.prod(data.shape[:batch + k])] + rest)
    return b.call("take", flat, rows, axis=0)


@converter("ScatterElements")
def scatter_elements(node):
    reduction = node.attr("reduction", "none")
    node.require(reduction in REDUCTIONS, f"reduction {reduction!r} is none of {REDUCTIONS}")
    return node.call("scatter_elements", node.arg(0), node.arg(1), node.arg(2),
                     axis=node.attr("axis", 0), reduction=reduction)


@converter("ScatterND")
def scatter_nd(node):
    data, indices, updates = node.arg(0), node.arg(1), node.arg(2)
    reduction = node.attr("reduction", "none")
    node.require(reduction in REDUCTIONS, f"reduction {reduction!r} is none of {REDUCTIONS}")
    k = indices.shape[-1]
    node.require(k <= data.rank, f"index depth {k} exceeds the rank of data {data.type}")
    return scatter_rows(node.b, data, flat_index(node.b, indices, data.shape[:k]), updates,
                        k, reduction)


# --- rearrangements -------------------------------------------------------------------------

@converter("DepthToSpace")
def depth_to_space(node):
    x, size = node.arg(0), node.positive("blocksize", 1)
    node.require(x.rank == 4 and x.shape[1] % (size * size) == 0,
                 f"input {x.type} must be NCHW with C divisible by blocksize^2 = {size * size}")
    n, c, h, w = x.shape
    depth = c // (size * size)
    if node.attr("mode", "DCR") == "DCR":
        y = node.call("reshape", x, shape=[n, size, size, depth, h, w])
        y = node.call("permute_dims", y, axes=[0, 3, 4, 1, 5, 2])
    else:  # CRD
        y = node.call("reshape", x, shape=[n, depth, size, size, h, w])
        y = node.call("permute_dims", y, axes=[0, 1, 4, 2, 5, 3])
    return node.call("reshape", y, shape=[n, depth, h * size, w * size])


@converter("SpaceToDepth")
def space_to_depth(node):
    x, size = node.arg(0), node.positive("blocksize", 1)
    node.require(x.rank == 4 and x.shape[2] % size == 0 and x.shape[3] % size == 0,
                 f"input {x.type} must be NCHW with H and W divisible by {size}")
    n, c, h, w = x.shape
    y = node.call("reshape", x, shape=[n, c, h // size, size, w // size, size])
    axes = [0, 3, 5, 1, 2, 4] if node.attr("mode", "DCR") == "DCR" else [0, 1, 3, 5, 2, 4]
    y = node.call("permute_dims", y, axes=axes)
    return node.call("reshape", y, shape=[n, c * size * size, h // size, w // size])


@converter("Einsum")
def einsum(node):
    equation = node.attr("equation").replace(" ", "")
    operands = node.args()
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    node.require(len(terms) == len(operands), f"equation {equation!r} names {len(terms)} "
                                              f"operands, the node has {len(operands)}")
    b = node.b
    # an ellipsis stands for the leading dims each operand has beyond its letters; they
    # broadcast together and get capital letters of their own
    extra = max((x.rank - len(t.replace("...", "")) for t, x in zip(terms, operands)
                 if "..." in t), default=0)
    dots = "".join(chr(ord("A") + i) for i in range(extra))
    if dots:
        shape = broadcast_shapes(*(x.shape[:x.rank - len(t) + 3] for t, x in
                                   zip(terms, operands) if "..." in t))
        for k, (t, x) in enumerate(zip(terms, operands)):
            if "..." in t:
                lead = x.rank - len(t) + 3
                shape_k = list(shape) + list(x.shape[lead:])
                x = b.call("reshape", x, shape=[1] * (extra - lead) + list(x.shape)) \
                    if lead < extra else x
                operands[k] = b.call("broadcast_to", x, shape=shape_k) \
                    if tuple(x.shape) != tuple(shape_k) else x
                terms[k] = t.replace("...", dots)
    for k, (term, x) in enumerate(zip(terms, operands)):
        node.require(len(term) == x.rank, f"term {term!r} must name the {x.rank} dims of "
                                          f"{x.type}")
        operands[k], terms[k] = _diagonals(b, x, term)
    if not arrow:  # implicit output: the letters used once, in alphabetical order
        letters = "".join(terms)
        output = dots + "".join(sorted(c for c in set(letters) - set(dots)
                                       if letters.count(c) == 1))
    output = output.replace("...", dots)
    b = node.b
    value, term = operands[0], terms[0]
    for k in range(1, len(operands)):
        keep = output + "".join(terms[k + 1:])
        value, term = contract(b, value, term, operands[k], terms[k], keep)
    value, term = sum_others(b, value, term, output)
    if term != output:
        value = b.call("permute_dims", value, axes=[term.index(c) for c in output])
    return value


def _diagonals(b, x, term: str):
    """A letter repeated in one term takes the diagonal of those dims."""
    for c in dict.fromkeys(term):
        while term.count(c) > 1:
            p = term.index(c)
            q = term.index(c, p + 1)
            n = x.shape[p]
            rest = [i for i in range(x.rank) if i not in (p, q)]
            x = b.call("permute_dims", x, axes=rest + [p, q])
            x = b.call("reshape", x, shape=[x.shape[i] for i in range(len(rest))] + [n * n])
            x = b.call("strided_slice", x, begin=[0], end=[n * n], strides=[n + 1], axes=[-1])
            term = "".join(term[i] for i in rest) + c
    return x, term


@converter("Scatter")
def scatter(node):  # ScatterElements under its opset-9 name
    return node.call("scatter_elements", node.arg(0), node.arg(1), node.arg(2),
                     axis=node.attr("axis", 0))


@converter("Compress", const_inputs=(1,))
def compress(node):
    x, keep = node.arg(0), np.asarray(node.const(1)).astype(bool).reshape(-1)
    axis = node.attr("axis")
    if axis is None:
        x = node.call("reshape", x, shape=[-1])
        axis = 0
    axis = axis % x.rank if -x.rank <= axis < x.rank else node.fail(f"axis {axis} is out "
                                                                       f"of range")
    node.require(keep.size <= x.shape[axis], f"condition of {keep.size} values is longer "
                                             f"than the axis ({x.shape[axis]})")
    return node.call("take", x, Const.of(np.flatnonzero(keep).astype(np.int64)), axis=axis)


@converter("ReverseSequence", const_inputs=(1,))
def reverse_sequence(node):
    x, lengths = node.arg(0), [int(v) for v in node.const(1).reshape(-1)]
    batch_axis, time_axis = node.attr("batch_axis", 1), node.attr("time_axis", 0)
    node.require({batch_axis, time_axis} == {0, 1} and x.rank >= 2,
                 "batch_axis and time_axis must be 0 and 1")
    steps, batches = x.shape[time_axis], x.shape[batch_axis]
    node.require(len(lengths) == batches and all(0 <= n <= steps for n in lengths),
                 f"sequence_lens {lengths} must give one length in [0, {steps}] per batch")
    index = np.empty((steps, batches), np.int64)  # (time, batch)
    for k, n in enumerate(lengths):
        index[:, k] = [n - 1 - t if t < n else t for t in range(steps)]
    index = index if time_axis == 0 else index.T
    index = np.broadcast_to(index.reshape(index.shape + (1,) * (x.rank - 2)), x.shape)
    return node.call("gather_elements", x, Const.of(np.ascontiguousarray(index)),
                     axis=time_axis)


@converter("CenterCropPad", const_inputs=(1,))
def center_crop_pad(node):
    x, sizes = node.arg(0), node.ints(1)
    axes = [a % x.rank for a in node.attr("axes", range(x.rank))]
    node.require(len(sizes) == len(axes), f"{len(sizes)} sizes for {len(axes)} axes")
    for axis, size in zip(axes, sizes):
        dim = x.shape[axis]
        if size < dim:  # crop: the extra element goes at the end
            start = (dim - size) // 2
            x = node.call("strided_slice", x, begin=[start], end=[start + size], axes=[axis])
        elif size > dim:  # pad: the extra element goes at the end
            pads = [0] * (2 * x.rank)
            pads[axis], pads[x.rank + axis] = (size - dim) // 2, size - dim - (size - dim) // 2
            x = node.call("pad", x, pads=pads)
    return x


@converter("MaxUnpool", const_inputs=(2,))
def max_unpool(node):
    """Zeros with X written at the flat positions I (MaxPool's indices) of the pooled
    input's shape, zero-extended at the end to output_shape if given."""
    x, index = node.arg(0), node.arg(1)
    spatial = x.rank - 2
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * spatial))
    pads = list(node.attr("pads", [0] * (2 * spatial)))
    inferred = list(x.shape[:2]) + [(n - 1) * s + k - pads[i] - pads[spatial + i]
                                    for i, (n, s, k) in enumerate(zip(x.shape[2:], strides,
                                                                      kernel))]
    shape = node.ints(2) or inferred
    node.require(len(shape) == x.rank and all(o >= i for o, i in zip(shape, inferred)),
                 f"output_shape {shape} must have rank {x.rank} and hold {inferred}")
    size = math.prod(inferred)
    node.budget(math.prod(shape), "MaxUnpool")
    zeros = Const.of(np.zeros(size, dtype=x.dtype))
    out = node.call("scatter_elements", zeros, node.call("reshape", index, shape=[-1]),
                    node.call("reshape", x, shape=[-1]), axis=0)
    out = node.call("reshape", out, shape=inferred)
    if shape != inferred:
        out = node.call("pad", out, pads=[0] * x.rank + [o - i for o, i in zip(shape,
                                                                               inferred)])
    return out


@converter("AffineGrid", const_inputs=(1,))
def affine_grid(node):
    """theta (N, 2, 3) or (N, 3, 4) applied to the normalized [-1, 1] coordinates of every
    output position: one matmul with a constant base grid."""
    theta, size = node.arg(0), node.ints(1)
    spatial = len(size) - 2
    node.require(spatial in (2, 3) and theta.shape[1:] == (spatial, spatial + 1),
                 f"theta {theta.type} does not fit size {size}")
    aligned = node.flag("align_corners", 0)

    def axis(n):
        if aligned:
            return np.linspace(-1, 1, n) if n > 1 else np.zeros(1)
        return (2 * np.arange(n) + 1) / n - 1
    dims = size[2:]  # (H, W) or (D, H, W); coordinates are (x, y[, z]): W first
    mesh = np.meshgrid(*(axis(n) for n in dims), indexing="ij")
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(dims))],
                    axis=-1).astype(theta.dtype)
    node.budget(base.size, "AffineGrid")
    grid = node.call("matmul", Const.of(base), node.call("permute_dims", theta,
                                                         axes=[0, 2, 1]))
    return node.call("reshape", grid, shape=[size[0]] + list(dims) + [spatial])
