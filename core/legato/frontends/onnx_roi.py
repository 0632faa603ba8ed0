"""ONNX RoiAlign: bilinear samples at positions computed from run-time boxes, gathered
from the feature map and averaged (or maxed) per output bin."""
from __future__ import annotations

import numpy as np

from ..ir import Const
from .onnx_convert import converter


def _axis_samples(node, start, end, size: int, bins: int, grid: int, legacy: bool):
    """Per box, along one axis of `size` pixels: (low index, high index, low weight, high
    weight), each (R, bins * grid), zero weights where a sample falls outside."""
    extent = node.call("subtract", end, start)
    if legacy:   # output_half_pixel: boxes are at least one pixel
        extent = node.call("maximum", extent, 1.0)
    bin_size = node.call("divide", extent, float(bins))
    dtype = start.dtype
    bin_index = Const.of(np.repeat(np.arange(bins), grid).astype(dtype))
    offset = Const.of((np.tile(np.arange(grid), bins) + 0.5).astype(dtype))
    at = node.call("add", node.call("add", start, node.call("multiply", bin_size, bin_index)),
                   node.call("divide", node.call("multiply", bin_size, offset), float(grid)))
    inside = node.call("logical_and", node.call("greater_equal", at, -1.0),
                       node.call("less_equal", at, float(size)))
    at = node.call("maximum", at, 0.0)
    floor = node.call("floor", at)
    last = node.call("greater_equal", floor, float(size - 1))
    low = node.call("where", last, float(size - 1), floor)
    high = node.call("where", last, float(size - 1), node.call("add", floor, 1.0))
    frac = node.call("where", last, 0.0, node.call("subtract", at, floor))
    keep = node.call("cast", inside, dtype=dtype)
    weight_low = node.call("multiply", node.call("subtract", 1.0, frac), keep)
    weight_high = node.call("multiply", frac, keep)
    as_index = [node.call("cast", v, dtype="int64") for v in (low, high)]
    return as_index[0], as_index[1], weight_low, weight_high


@converter("RoiAlign")
def roi_align(node):
    x, rois, batch_index = node.arg(0), node.arg(1), node.arg(2)
    node.require(x.rank == 4 and rois.rank == 2 and rois.shape[1] == 4 and
                 batch_index.shape == (rois.shape[0],),
                 f"X {x.type}, rois {rois.type} and batch_indices {batch_index.type} must be "
                 "(N, C, H, W), (R, 4) and (R,)")
    mode = node.attr("mode", "avg")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    node.require(mode in ("avg", "max"), f"attribute 'mode' = {mode!r} is none of avg, max")
    node.require(transform in ("half_pixel", "output_half_pixel"),
                 f"attribute 'coordinate_transformation_mode' = {transform!r} is none of "
                 "half_pixel, output_half_pixel")
    out_h, out_w = node.positive("output_height", 1), node.positive("output_width", 1)
    grid = node.attr("sampling_ratio", 0)
    if grid <= 0:
        node.refuse("sampling_ratio 0 takes as many samples per bin as each box is large, a "
                    "count that depends on the boxes' run-time values; give a sampling_ratio")
    n, channels, height, width = x.shape
    legacy = transform == "output_half_pixel"
    offset = 0.0 if legacy else 0.5
    boxes = node.call("subtract", node.call("multiply", rois, node.attr("spatial_scale", 1.0)),
                      offset)
    x1, y1, x2, y2 = (node.call("strided_slice", boxes, begin=[i], end=[i + 1], axes=[1])
                      for i in range(4))
    y_low, y_high, wy_low, wy_high = _axis_samples(node, y1, y2, height, out_h, grid, legacy)
    x_low, x_high, wx_low, wx_high = _axis_samples(node, x1, x2, width, out_w, grid, legacy)
    base = node.call("multiply", node.call("reshape", node.call(
        "cast", batch_index, dtype="int64"), shape=[-1, 1, 1]), height * width)
    pixels = node.call("reshape", node.call("permute_dims", x, axes=[0, 2, 3, 1]),
                       shape=[n * height * width, channels])

    def tap(rows, columns):                       # (R, P, Q, C)
        index = node.call("add", node.call("add", base, node.call(
            "multiply", node.call("expand_dims", rows, axes=[2]), width)),
            node.call("expand_dims", columns, axes=[1]))
        return node.call("take", pixels, index, axis=0)

    def weight(wy, wx):                           # (R, P, Q, 1)
        return node.call("expand_dims", node.call("multiply", node.call(
            "expand_dims", wy, axes=[2]), node.call("expand_dims", wx, axes=[1])), axes=[3])
    terms = [node.call("multiply", weight(wy, wx), tap(rows, columns))
             for rows, wy in ((y_low, wy_low), (y_high, wy_high))
             for columns, wx in ((x_low, wx_low), (x_high, wx_high))]
    combine = "add" if mode == "avg" else "maximum"
    value = terms[0]
    for term in terms[1:]:
        value = node.call(combine, value, term)
    value = node.call("reshape", value, shape=[rois.shape[0], out_h, grid, out_w, grid,
                                               channels])
    if mode == "avg":
        pooled = node.call("divide", node.call("sum", value, axes=[2, 4]), float(grid * grid))
    else:
        pooled = node.call("max", value, axes=[2, 4])
    return node.call("permute_dims", pooled, axes=[0, 3, 1, 2])
