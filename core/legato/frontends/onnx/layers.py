"""ONNX converters for layers composed of legato ops: Dropout (the inference identity),
MeanVarianceNormalization, GridSample, Col2Im (sliding blocks back into an image),
TensorScatter (cache writes) and CausalConvWithState (Fourier transforms: signal.py)."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from .convert import converter
from .nn import window_ints


@converter("Dropout", const_inputs=(1, 2))
def dropout(node):
    """Inference: the identity, and a mask that keeps every element. Training mode with a
    non-zero ratio draws random numbers, which a compiled graph cannot reproduce."""
    x = node.arg(0)
    if node.input(2) is not None and bool(node.scalar(2)):
        ratio = node.scalar(1, 0.5)
        if ratio != 0:
            node.refuse(f"training_mode is true with ratio {ratio}: training-mode "
                        "dropout samples a random mask, and legato imports "
                        "deterministic inference graphs only")
    if not node.wants(1):
        return x
    mask = node.call("broadcast_to", Const.of(np.array(True)), shape=list(x.shape))
    return x, mask


@converter("MeanVarianceNormalization")
def mean_variance_normalization(node):
    """(x - mean) / sqrt(variance + 1e-9) over `axes`, as the ONNX function body has it."""
    x = node.arg(0)
    axes = [a % x.rank for a in node.attr("axes", [0, 2, 3])]
    node.require(all(-x.rank <= a < x.rank for a in node.attr("axes", [0, 2, 3])) and
                 len(set(axes)) == len(axes),
                 f"attribute 'axes' = {node.attr('axes')} does not fit an input of rank "
                 f"{x.rank}")
    mean = node.call("mean", x, axes=axes, keepdims=True)
    centred = node.call("subtract", x, mean)
    variance = node.call("mean", node.call("multiply", centred, centred), axes=axes,
                         keepdims=True)
    return node.call("divide", centred, node.call("sqrt", node.call("add", variance, 1e-9)))


# ONNX 20 renamed GridSample's modes after their N-d meaning
GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest",
              "cubic": "bicubic", "bicubic": "bicubic"}


@converter("GridSample")
def grid_sample(node):
    mode, padding = node.attr("mode", "bilinear"), node.attr("padding_mode", "zeros")
    node.require(mode in GRID_MODES, f"attribute 'mode' = {mode!r} is none of "
                                     f"{', '.join(GRID_MODES)}")
    node.require(padding in ("zeros", "border", "reflection"),
                 f"attribute 'padding_mode' = {padding!r} is none of zeros, border, reflection")
    return node.call("nn.grid_sample", node.arg(0), node.arg(1), mode=GRID_MODES[mode],
                     padding_mode=padding, align_corners=node.flag("align_corners", 0))


@converter("Col2Im", const_inputs=(1, 2))
def col2im(node):
    """Sum sliding blocks back into an image: the columns times a constant 0/1 matrix that
    sends each (block offset, block position) to its pixel (pixels in the padding drop)."""
    x, image, block = node.arg(0), node.ints(1), node.ints(2)
    dims = len(image)
    node.require(dims >= 1 and len(block) == dims and all(v >= 1 for v in image + block),
                 f"image_shape {image} and block_shape {block} must be as many sizes >= 1")
    strides = window_ints(node, "strides", dims, 1)
    dilations = window_ints(node, "dilations", dims, 1)
    pads = window_ints(node, "pads", 2 * dims, 0)
    kernel = int(np.prod(block))
    counts = [(image[d] + pads[d] + pads[d + dims] - dilations[d] * (block[d] - 1) - 1)
              // strides[d] + 1 for d in range(dims)]
    positions = int(np.prod(counts))
    node.require(x.rank == 3 and x.shape[1] % kernel == 0 and x.shape[2] == positions
                 and min(counts) >= 1,
                 f"input {x.type} must be (N, C * {kernel}, {positions}) for these blocks")
    node.budget(kernel * positions * int(np.prod(image)), "the Col2Im scatter matrix")
    offsets = np.indices(block).reshape(dims, kernel, 1)        # per kernel tap
    starts = np.indices(counts).reshape(dims, 1, positions)     # per block position
    step = np.array(strides).reshape(dims, 1, 1)
    dilate = np.array(dilations).reshape(dims, 1, 1)
    pixel = starts * step + offsets * dilate - np.array(pads[:dims]).reshape(dims, 1, 1)
    inside = np.all((pixel >= 0) & (pixel < np.array(image).reshape(dims, 1, 1)), axis=0)
    flat = np.ravel_multi_index(tuple(np.clip(pixel, 0, np.array(image).reshape(dims, 1, 1)
                                              - 1)), image)
    scatter = np.zeros((kernel * positions, int(np.prod(image))), dtype=x.dtype)
    rows = np.arange(kernel * positions).reshape(kernel, positions)
    scatter[rows[inside], flat[inside]] = 1
    n, channels = x.shape[0], x.shape[1] // kernel
    columns = node.call("reshape", x, shape=[n, channels, kernel * positions])
    summed = node.call("matmul", columns, Const.of(scatter))
    return node.call("reshape", summed, shape=[n, channels] + image)


@converter("TensorScatter")
def tensor_scatter(node):
    """The update written into the cache along `axis` from each batch entry's write index
    (modulo the cache length when circular): scatter_elements with positions computed from
    the indices, which may be run-time data."""
    cache, update, starts = node.arg(0), node.arg(1), node.input(2)
    axis = node.axis("axis", cache.rank, -2)
    mode = node.attr("mode", "linear")
    node.require(mode in ("linear", "circular"), f"attribute 'mode' = {mode!r} is none of "
                                                 "linear, circular")
    node.require(axis >= 1 and update.rank == cache.rank and all(
        u == c for d, (u, c) in enumerate(zip(update.shape, cache.shape)) if d != axis) and
        update.shape[axis] <= cache.shape[axis],
        f"update {update.type} must match the cache {cache.type} but along axis {axis}")
    steps = [1] * update.rank
    steps[axis] = update.shape[axis]
    positions = Const.of(np.arange(update.shape[axis], dtype=np.int64).reshape(steps))
    if starts is not None:
        node.require(starts.shape == (cache.shape[0],), f"write_indices {starts.type} must "
                                                        f"hold one index per batch entry")
        starts = node.call("reshape", node.call("cast", starts, dtype="int64"),
                           shape=[cache.shape[0]] + [1] * (update.rank - 1))
        positions = node.call("add", positions, starts)
    if mode == "circular":
        positions = node.call("remainder", positions, cache.shape[axis])
    positions = node.call("broadcast_to", positions, shape=list(update.shape))
    return node.call("scatter_elements", cache, positions, update, axis=axis)


@converter("CausalConvWithState")
def causal_conv_with_state(node):
    """A depthwise 1-D convolution over the carried state followed by the input (zeros when
    no state is given); the new state is the last k - 1 positions of that sequence."""
    x, weight, bias, past = node.arg(0), node.arg(1), node.input(2), node.input(3)
    activation = node.attr("activation", "none")
    node.require(activation in ("none", "silu", "swish"),
                 f"attribute 'activation' = {activation!r} is none of none, silu, swish")
    node.require(x.rank == 3 and weight.rank == 3 and weight.shape[:2] == (x.shape[1], 1),
                 f"input {x.type} and weight {weight.type} must be (N, C, L) and (C, 1, k)")
    batch, channels, length = x.shape
    carried = weight.shape[2] - 1
    if past is None:
        past = Const.of(np.zeros((batch, channels, carried), x.dtype))
    node.require(past.shape == (batch, channels, carried),
                 f"past_state {past.type} must be ({batch}, {channels}, {carried})")
    sequence = x if carried == 0 else node.call("concat", past, x, axis=2)
    y = node.call("nn.conv2d", node.call("expand_dims", sequence, axes=[2]),
                  node.call("expand_dims", weight, axes=[2]), bias, strides=[1, 1],
                  dilation=[1, 1], padding=[0, 0, 0, 0], groups=channels)
    y = node.call("squeeze", y, axes=[2])
    if activation != "none":
        y = node.call("nn.silu", y)
    if carried == 0:
        return y, past
    present = node.call("strided_slice", sequence, begin=[length], end=[length + carried],
                        axes=[2])
    return y, present
