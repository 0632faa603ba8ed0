"""ONNX ops that sample at run-time positions: RoiAlign and MaxRoiPool (boxes), DeformConv
(offsets). Shapes stay static; only the gathered positions and masks depend on the data."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from .convert import converter


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


def _bin_masks(node, start, end, size: int, bins: int):
    """(R, bins, size) bool: which pixels along one axis each bin of each box covers, with
    the box rounded to pixels (half away from zero) and at least one pixel long."""
    start, end = (node.call("multiply", node.call("sign", v), node.call(
        "floor", node.call("add", node.call("abs", v), 0.5))) for v in (start, end))
    extent = node.call("maximum", node.call("add", node.call("subtract", end, start), 1.0), 1.0)
    bin_size = node.call("divide", extent, float(bins))                       # (R, 1)
    index = Const.of(np.arange(bins, dtype=start.dtype))
    low = node.call("add", node.call("floor", node.call("multiply", bin_size, index)), start)
    high = node.call("add", node.call("ceil", node.call("multiply", bin_size,
                                                        node.call("add", index, 1.0))), start)
    low, high = (node.call("expand_dims", node.call("clip", v, min=0.0, max=float(size)),
                           axes=[2]) for v in (low, high))                   # (R, bins, 1)
    pixel = Const.of(np.arange(size, dtype=start.dtype))
    return node.call("logical_and", node.call("greater_equal", pixel, low),
                     node.call("less", pixel, high))


@converter("MaxRoiPool")
def max_roi_pool(node):
    """The maximum over each bin of each box (0 for an empty bin): the box's image is
    gathered, and bins are masks over its rows and columns computed from the run-time box."""
    x, rois = node.arg(0), node.arg(1)
    node.require(x.rank == 4 and rois.rank == 2 and rois.shape[1] == 5,
                 f"X {x.type} and rois {rois.type} must be (N, C, H, W) and (R, 5)")
    pooled = node.attr("pooled_shape")
    node.require(len(pooled) == 2 and min(pooled) >= 1,
                 f"attribute 'pooled_shape' = {pooled} must be two sizes of at least 1")
    _, channels, height, width = x.shape
    count = rois.shape[0]
    node.budget(count * channels * pooled[0] * pooled[1] * height * width,
                "the MaxRoiPool masked windows")
    column = [node.call("strided_slice", rois, begin=[i], end=[i + 1], axes=[1])
              for i in range(5)]
    scale = node.attr("spatial_scale", 1.0)
    x1, y1, x2, y2 = (node.call("multiply", c, scale) for c in column[1:])
    rows = _bin_masks(node, y1, y2, height, pooled[0])                        # (R, ph, H)
    cols = _bin_masks(node, x1, x2, width, pooled[1])                         # (R, pw, W)
    mask = node.call("logical_and",
                     node.call("reshape", rows, shape=[count, 1, pooled[0], 1, height, 1]),
                     node.call("reshape", cols, shape=[count, 1, 1, pooled[1], 1, width]))
    image = node.call("take", x, node.call("cast", node.call("reshape", column[0], shape=[-1]),
                                           dtype="int64"), axis=0)        # (R, C, H, W)
    image = node.call("reshape", image, shape=[count, channels, 1, 1, height, width])
    lowest = Const.of(np.array(np.finfo(x.dtype).min, x.dtype))
    best = node.call("max", node.call("where", mask, image, lowest), axes=[4, 5])
    covered = node.call("reshape", node.call("max", node.call("cast", mask, dtype=x.dtype),
                                             axes=[4, 5]), shape=[count, 1] + pooled)
    return node.call("where", node.call("greater", covered, 0.0), best, 0.0)


@converter("DeformConv")
def deform_conv(node):
    """2-D deformable convolution: every kernel tap samples the input bilinearly (zeros
    outside) at its shifted position by nn.grid_sample, the samples are scaled by the mask,
    and the taps are contracted with the weights per group by a matmul."""
    x, w, offset, bias, mask = (node.input(i) for i in range(5))
    node.require(x is not None and w is not None and offset is not None,
                 "X, W and offset are required")
    node.require(x.rank == 4 and w.rank == 4, f"X {x.type} and W {w.type} must be 4-D "
                                               "(2-D deformable convolution)")
    n, channels, height, width = x.shape
    out_channels, group_channels, kh, kw = w.shape
    groups, offset_groups = node.positive("group", 1), node.positive("offset_group", 1)
    strides = list(node.attr("strides", [1, 1]))
    dilations = list(node.attr("dilations", [1, 1]))
    pads = list(node.attr("pads", [0, 0, 0, 0]))
    taps = kh * kw
    node.require(list(node.attr("kernel_shape", [kh, kw])) == [kh, kw] and
                 channels == group_channels * groups and out_channels % groups == 0 and
                 channels % offset_groups == 0 and offset.rank == 4 and
                 offset.shape[:2] == (n, offset_groups * taps * 2) and height > 1 and width > 1,
                 f"X {x.type}, W {w.type} and offset {offset.type} do not fit group {groups} "
                 f"and offset_group {offset_groups}")
    out_h, out_w = offset.shape[2:]
    points = out_h * out_w
    # each tap's position before its offset: (taps, points)
    tap_h, tap_w = np.meshgrid(np.arange(kh) * dilations[0], np.arange(kw) * dilations[1],
                               indexing="ij")
    at_h, at_w = np.meshgrid(np.arange(out_h) * strides[0] - pads[0],
                             np.arange(out_w) * strides[1] - pads[1], indexing="ij")
    base_h = Const.of((tap_h.reshape(-1, 1) + at_h.reshape(1, -1)).astype(x.dtype))
    base_w = Const.of((tap_w.reshape(-1, 1) + at_w.reshape(1, -1)).astype(x.dtype))
    shifts = node.call("reshape", offset, shape=[n * offset_groups, taps, 2, points])

    def normalized(index, base, size):     # grid_sample's [-1, 1] with align_corners
        shift = node.call("squeeze", node.call("strided_slice", shifts, begin=[index],
                                               end=[index + 1], axes=[2]), axes=[2])
        position = node.call("add", shift, base)
        return node.call("expand_dims", node.call("subtract", node.call(
            "multiply", node.call("divide", position, float(size - 1)), 2.0), 1.0), axes=[3])
    grid = node.call("concat", normalized(1, base_w, width), normalized(0, base_h, height),
                     axis=3)                                           # (N*og, taps, P, 2)
    data = node.call("reshape", x, shape=[n * offset_groups, channels // offset_groups,
                                          height, width])
    samples = node.call("nn.grid_sample", data, grid, mode="bilinear", padding_mode="zeros",
                        align_corners=True)                            # (N*og, C/og, taps, P)
    samples = node.call("reshape", samples, shape=[n, offset_groups, channels // offset_groups,
                                                   taps, points])
    if mask is not None:
        node.require(mask.shape == (n, offset_groups * taps, out_h, out_w),
                     f"mask {mask.type} must be ({n}, {offset_groups * taps}, {out_h}, "
                     f"{out_w})")
        scale = node.call("reshape", mask, shape=[n, offset_groups, 1, taps, points])
        samples = node.call("multiply", samples, scale)
    columns = node.call("reshape", samples, shape=[n, groups, group_channels * taps, points])
    weights = node.call("reshape", w, shape=[1, groups, out_channels // groups,
                                             group_channels * taps])
    y = node.call("reshape", node.call("matmul", weights, columns),
                  shape=[n, out_channels, out_h, out_w])
    if bias is not None:
        y = node.call("add", y, node.call("reshape", bias, shape=[1, out_channels, 1, 1]))
    return y
