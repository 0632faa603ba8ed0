"""Convolution and pooling (level 1), decomposed through pad + strided slices.

Convolution becomes im2col by slicing (one strided slice per kernel tap) and a matmul, so a
backend with only matmul and data movement still runs CNNs. Pools reduce the same slices.
Grid sampling (level 2) gathers its taps with gather_elements.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import shapes
from ..ir import TensorType
from ..ir.shapes import Window, channel_view
from . import layout_rules
from .base import composite, f32, fail, is_float, require_float, same_dtype

SPATIAL_AXES = {"NCHW": (2, 3), "NHWC": (1, 2)}
KERNEL_PERM_TO_OIHW = {"OIHW": None, "HWIO": [3, 2, 0, 1], "OHWI": [0, 3, 1, 2]}
WINDOW_ATTRS = {"strides": ("ints", [1, 1]), "padding": ("ints", [0, 0, 0, 0]),
                "dilation": ("ints", [1, 1]), "data_layout": ("str:NCHW|NHWC", "NCHW")}


def _layout(shape, layout):
    """(N, C, H, W) of a tensor shape in the given data layout."""
    return (shape[0], shape[1], shape[2], shape[3]) if layout == "NCHW" else \
        (shape[0], shape[3], shape[1], shape[2])


def _from_nchw(n, c, h, w, layout):
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def oihw_shape(shape, layout):
    perm = KERNEL_PERM_TO_OIHW[layout]
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def conv_window(data_shape, weight_shape, attrs) -> Window:
    """The validated geometry of an nn.conv2d (or qnn.conv2d) call."""
    _, _, h, w = _layout(data_shape, attrs["data_layout"])
    _, _, kh, kw = oihw_shape(weight_shape, attrs["kernel_layout"])
    return shapes.window((h, w), (kh, kw), attrs["strides"], attrs["dilation"],
                         attrs["padding"], what="conv2d",  # (the name made for an error only)
                         kernel_name=lambda: f"weight {list(weight_shape)} "
                                             f"({attrs['kernel_layout']}) kernel")


def _conv2d(types, attrs):
    data, weight, bias = types
    if data.rank != 4 or weight.rank != 4:
        fail(f"data {list(data.shape)} and weight {list(weight.shape)} must be 4-D")
    if same_dtype(types) == "bool":
        fail("convolution needs numeric tensors, got bool")
    n, c, _, _ = _layout(data.shape, attrs["data_layout"])
    o, cg, _, _ = oihw_shape(weight.shape, attrs["kernel_layout"])
    groups = attrs["groups"]
    if groups < 1 or c % groups or o % groups or cg != c // groups:
        fail(f"{c} input channels, weight {list(weight.shape)} ({attrs['kernel_layout']}) and "
             f"groups={groups} do not match (weight I must be C/groups)")
    if bias is not None and bias.shape != (o,):
        fail(f"bias {list(bias.shape)} must be ({o},)")
    oh, ow = conv_window(data.shape, weight.shape, attrs).out
    return TensorType(_from_nchw(n, o, oh, ow, attrs["data_layout"]), data.dtype)


CONV_ATTRS = {**WINDOW_ATTRS, "groups": ("int", 1),
              "kernel_layout": ("str:OIHW|HWIO|OHWI", "OIHW")}


def window_slices(b, x, win: Window, axes):
    """One strided slice per kernel tap of x (padded by at least win.padding), each
    covering every output position."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = win.kernel, win.strides, win.dilation, win.out
    taps = []
    for i in range(kh):
        for j in range(kw):
            begin = [i * dh, j * dw]
            end = [begin[0] + (oh - 1) * sh + 1, begin[1] + (ow - 1) * sw + 1]
            full = begin == [0, 0] and end == [x.shape[axes[0]], x.shape[axes[1]]] \
                and (sh, sw) == (1, 1)
            taps.append(x if full else b.strided_slice(x, begin=begin, end=end,
                                                        strides=[sh, sw], axes=list(axes)))
    return taps


def pad_spatial(b, x, pads_hw, axes, value):
    """Pad the two spatial axes by (top, left, bottom, right)."""
    if not any(pads_hw):
        return x
    pads = [0] * (2 * x.rank)
    top, left, bottom, right = pads_hw
    pads[axes[0]], pads[axes[1]] = top, left
    pads[x.rank + axes[0]], pads[x.rank + axes[1]] = bottom, right
    return b.pad(x, pads=pads, value=value)


@composite("nn.conv2d", "data, weight, bias?", _conv2d, "out_elemwise_fusable", 1,
           [((f32(1, 4, 5, 5), f32(6, 2, 3, 3), f32(6)),
             {"padding": [1, 1, 1, 1], "groups": 2, "strides": [2, 1]}),
            ((f32(1, 5, 5, 4), f32(3, 3, 4, 6), None),
             {"data_layout": "NHWC", "kernel_layout": "HWIO", "dilation": [2, 2]})],
           CONV_ATTRS, layout_rule=layout_rules.data_layout)
def conv2d(b, x, weight, bias, strides, padding, dilation, groups, data_layout, kernel_layout):
    """2-D convolution; padding `[top, left, bottom, right]`; `data_layout` NCHW or NHWC,
    `kernel_layout` OIHW, HWIO or OHWI (its `I` is `C / groups`); the result in
    `data_layout`"""
    if data_layout == "NHWC":
        x = b.permute_dims(x, axes=[0, 3, 1, 2])
    if KERNEL_PERM_TO_OIHW[kernel_layout]:
        weight = b.permute_dims(weight, axes=KERNEL_PERM_TO_OIHW[kernel_layout])
    (n, c, h, w), (o, cg, kh, kw) = x.shape, weight.shape
    win = shapes.window((h, w), (kh, kw), strides, dilation, padding)
    oh, ow = win.out
    x = pad_spatial(b, x, win.padding, (2, 3), 0.0)
    taps = [b.reshape(t, shape=[n, c, 1, oh * ow]) for t in window_slices(b, x, win, (2, 3))]
    cols = b.concat(*taps, axis=2) if len(taps) > 1 else taps[0]
    cols = b.reshape(cols, shape=[n, groups, cg * kh * kw, oh * ow])
    y = b.matmul(b.reshape(weight, shape=[groups, o // groups, cg * kh * kw]), cols)
    y = b.reshape(y, shape=[n, o, oh, ow])
    if bias is not None:
        y = b.add(y, b.reshape(bias, shape=list(channel_view(o, 4, 1))))
    return b.permute_dims(y, axes=[0, 2, 3, 1]) if data_layout == "NHWC" else y


# --- pooling ------------------------------------------------------------------------------

POOL_ATTRS = {"pool_size": ("ints",), "strides": ("ints?", None),
              "padding": ("ints", [0, 0, 0, 0]), "dilation": ("ints", [1, 1]),
              "ceil_mode": ("bool", False), "data_layout": ("str:NCHW|NHWC", "NCHW")}


def pool_window(data_shape, attrs) -> Window:
    """The validated geometry of an nn.max_pool2d / nn.avg_pool2d call. A window over
    padding alone has no defined value (an average of nothing), so it is refused."""
    _, _, h, w = _layout(data_shape, attrs["data_layout"])
    win = shapes.window((h, w), attrs["pool_size"], attrs["strides"], attrs["dilation"],
                        attrs["padding"], attrs["ceil_mode"], what="pool",
                        kernel_name="pool_size")
    axis = win.blind_axis()
    if axis is not None:
        fail(f"padding {list(win.padding)} with pool_size {list(win.kernel)}, dilation "
             f"{list(win.dilation)} and strides {list(win.strides)} makes a window cover only "
             f"padding along the {('height', 'width')[axis]} ({win.spatial_in[axis]}); keep "
             "each window on at least one input cell")
    return win


def _pool(types, attrs):
    (data,) = types
    if data.rank != 4:
        fail(f"data {list(data.shape)} must be 4-D")
    if data.dtype == "bool":
        fail("pooling needs a numeric tensor, got bool")
    n, c, _, _ = _layout(data.shape, attrs["data_layout"])
    oh, ow = pool_window(data.shape, attrs).out
    return TensorType(_from_nchw(n, c, oh, ow, attrs["data_layout"]), data.dtype)


def _pool_taps(b, x, attrs, value):
    """The window taps of x padded with `value` (explicit padding plus what ceil mode's
    last window needs), and the window."""
    win = pool_window(x.shape, attrs)
    axes = SPATIAL_AXES[attrs["data_layout"]]
    x = pad_spatial(b, x, win.sweep_padding, axes, value)
    return window_slices(b, x, win, axes), win


def _tree(b, op, values):
    while len(values) > 1:
        values = [b.call(op, *values[i:i + 2]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


POOL_EXAMPLES = [((f32(1, 2, 5, 5),), {"pool_size": [2, 2], "ceil_mode": True}),
                 ((f32(1, 5, 5, 2),), {"pool_size": [3, 3], "strides": [1, 1],
                                       "padding": [1, 1, 1, 1], "data_layout": "NHWC"})]


@composite("nn.max_pool2d", "data", _pool, "opaque", 1, POOL_EXAMPLES, POOL_ATTRS,
           tolerance=0.0, layout_rule=layout_rules.data_layout)
def max_pool2d(b, x, **attrs):
    """the maximum of each window; `strides=None` is `pool_size`; padded cells are `-inf`
    """
    lowest = float("-inf") if is_float(x.dtype) else float(np.iinfo(x.dtype).min)
    return _tree(b, "maximum", _pool_taps(b, x, attrs, lowest)[0])


def _window_counts(win: Window, count_include_pad: bool) -> np.ndarray:
    """How many cells each window averages: explicit padding counts only if asked, the
    ceil-mode overhang never."""
    (top, left), (bottom, right) = win.pads_begin, win.pads_end
    ones = np.pad(np.ones(win.spatial_in), [(top, bottom), (left, right)],
                  constant_values=1.0 if count_include_pad else 0.0)
    ones = np.pad(ones, [(0, win.overhang[0]), (0, win.overhang[1])])
    (oh, ow), (kh, kw) = win.out, win.kernel
    (sh, sw), (dh, dw) = win.strides, win.dilation
    counts = np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            counts += ones[i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
    return counts


def _avg_pool(types, attrs):
    require_float(types[0])  # ONNX AveragePool is float-only; integer sums would wrap
    return _pool(types, attrs)


@composite("nn.avg_pool2d", "data", _avg_pool, "opaque", 1, POOL_EXAMPLES,
           {**POOL_ATTRS, "count_include_pad": ("bool", False)},
           layout_rule=layout_rules.data_layout)
def avg_pool2d(b, x, count_include_pad, **attrs):
    """ONNX AveragePool: the mean of each window, padded cells counted only with
    `count_include_pad`"""
    taps, win = _pool_taps(b, x, attrs, 0.0)
    total = _tree(b, "add", taps)
    axes = SPATIAL_AXES[attrs["data_layout"]]
    counts = _window_counts(win, count_include_pad)
    shape = [1] * 4
    shape[axes[0]], shape[axes[1]] = counts.shape
    return b.divide(total, b.const(counts.reshape(shape).astype(x.dtype)))



# --- grid sampling -------------------------------------------------------------------------

def _grid_sample(types, attrs):
    data, grid = types
    require_float(data, "data")
    spatial = data.rank - 2
    if spatial not in (2, 3) or grid.rank != data.rank or grid.shape[0] != data.shape[0] \
            or grid.shape[-1] != spatial:
        fail(f"data {list(data.shape)} must be (N, C, [D,] H, W) and grid {list(grid.shape)} "
             f"(N, [Do,] Ho, Wo, {max(spatial, 0)})")
    if grid.dtype != data.dtype:
        fail(f"grid must be {data.dtype} like the data, got {grid.dtype}")
    if attrs["mode"] == "bicubic" and spatial != 2:
        fail("bicubic grid sampling needs 4-D data")
    return TensorType(data.shape[:2] + grid.shape[1:-1], data.dtype)


def _reflect_coordinates(b, v, size: int, align: bool):
    """v mirrored at the borders (the pixel centres 0 and size - 1 with align_corners, else
    the edges -1/2 and size - 1/2), as often as it takes."""
    twice = 2.0 * (size - 1) if align else 2.0 * size
    if twice == 0:
        return b.multiply(v, 0.0)
    v = b.abs(v if align else b.add(v, 0.5))
    extra = b.subtract(v, b.multiply(b.trunc(b.divide(v, twice)), twice))
    folded = b.minimum(extra, b.subtract(twice, extra))
    return folded if align else b.subtract(folded, 0.5)


def _cubic_weights(b, t, a: float = -0.75):
    """Keys' cubic convolution weights of the taps at -1, 0, 1 and 2 for an offset t."""
    def near(x):  # ((a + 2) x - (a + 3)) x x + 1, for |x| <= 1
        return b.add(b.multiply(b.multiply(b.subtract(b.multiply(x, a + 2), a + 3), x), x),
                     1.0)

    def far(x):  # ((a x - 5a) x + 8a) x - 4a, for 1 < |x| < 2
        return b.subtract(b.multiply(b.add(b.multiply(b.subtract(b.multiply(x, a), 5 * a), x),
                                           8 * a), x), 4 * a)
    return [far(b.add(t, 1.0)), near(t), near(b.subtract(1.0, t)), far(b.subtract(2.0, t))]


class _GridSampler:
    """The decomposition of nn.grid_sample: coordinates unnormalized and padded per axis,
    each tap a gather_elements of the flattened data, weighted and summed."""

    def __init__(self, b, x, grid, padding_mode: str, align_corners: bool):
        self.b, self.padding_mode, self.align = b, padding_mode, align_corners
        self.n, self.c, self.sizes = x.shape[0], x.shape[1], list(x.shape[2:])
        self.out = list(grid.shape[1:-1])
        self.count = int(np.prod(self.out))
        self.flat = b.reshape(x, shape=[self.n, self.c, int(np.prod(self.sizes))])
        last = grid.rank - 1
        coords = [b.reshape(b.strided_slice(grid, begin=[i], end=[i + 1], axes=[last]),
                            shape=[self.n, self.count]) for i in range(len(self.sizes))]
        self.coords = [self.unnormalize(v, size) for v, size in
                       zip(reversed(coords), self.sizes)]  # in the order of the data's dims

    def unnormalize(self, v, size: int):
        scaled = self.b.multiply(self.b.add(v, 1.0), (size - 1) / 2 if self.align else size / 2)
        return scaled if self.align else self.b.subtract(scaled, 0.5)

    def pad(self, v, size: int):
        if self.padding_mode == "reflection":
            v = _reflect_coordinates(self.b, v, size, self.align)
        return v if self.padding_mode == "zeros" else \
            self.b.clip(v, min=0.0, max=float(size - 1))

    def tap(self, points, weight=None):
        """The data at integral float `points` (one per dim), times `weight`; 0 outside."""
        b, flat_index, inside = self.b, None, None
        stride = int(np.prod(self.sizes))
        for v, size in zip(points, self.sizes):
            stride //= size
            ok = b.logical_and(b.greater_equal(v, 0.0), b.less_equal(v, float(size - 1)))
            inside = ok if inside is None else b.logical_and(inside, ok)
            term = b.multiply(b.clip(v, min=0.0, max=float(size - 1)), float(stride))
            flat_index = term if flat_index is None else b.add(flat_index, term)
        index = b.broadcast_to(b.expand_dims(b.cast(flat_index, dtype="int64"), axes=[1]),
                               shape=[self.n, self.c, self.count])
        values = b.gather_elements(self.flat, index, axis=2)
        weight = b.cast(inside, dtype=self.flat.dtype) if weight is None else \
            b.where(inside, weight, 0.0)
        return b.multiply(values, b.expand_dims(weight, axes=[1]))

    def nearest(self):  # round half to even, as nearbyint
        return self.tap([self.b.round(self.pad(v, s)) for v, s in zip(self.coords, self.sizes)])

    def bilinear(self):
        """The 2 ** k corners, each weighted by the opposite box."""
        b = self.b
        coords = [self.pad(v, s) for v, s in zip(self.coords, self.sizes)]
        floors = [b.floor(v) for v in coords]
        highs = [b.subtract(v, f) for v, f in zip(coords, floors)]
        lows = [b.subtract(1.0, h) for h in highs]
        total = None
        for corner in itertools.product((0, 1), repeat=len(coords)):
            factors = [h if step else low for h, low, step in zip(highs, lows, corner)]
            weight = factors[0]
            for f in factors[1:]:
                weight = b.multiply(weight, f)
            part = self.tap([b.add(f, float(step)) for f, step in zip(floors, corner)], weight)
            total = part if total is None else b.add(total, part)
        return total

    def bicubic(self):
        """Cubic along x for each of 4 rows, then along y; padding applies per tap."""
        b = self.b
        floors = [b.floor(v) for v in self.coords]
        wy, wx = (_cubic_weights(b, b.subtract(v, f)) for v, f in zip(self.coords, floors))
        total = None
        for j in range(4):
            y = self.pad(b.add(floors[0], float(j - 1)), self.sizes[0])
            row = None
            for i in range(4):
                x = self.pad(b.add(floors[1], float(i - 1)), self.sizes[1])
                part = self.tap([y, x], wx[i])
                row = part if row is None else b.add(row, part)
            part = b.multiply(row, b.expand_dims(wy[j], axes=[1]))
            total = part if total is None else b.add(total, part)
        return total


GRID_EXAMPLES = [((f32(1, 2, 4, 5), f32(1, 3, 2, 2)), {}),
                 ((f32(1, 2, 4, 5), f32(1, 3, 2, 2)), {"mode": "bicubic",
                                                       "padding_mode": "reflection"}),
                 ((f32(1, 2, 3, 4, 5), f32(1, 2, 3, 2, 3)), {"mode": "nearest",
                                                             "padding_mode": "border",
                                                             "align_corners": True})]


@composite("nn.grid_sample", "data, grid", _grid_sample, "opaque", 2, GRID_EXAMPLES,
           {"mode": ("str:bilinear|nearest|bicubic", "bilinear"),
            "padding_mode": ("str:zeros|border|reflection", "zeros"),
            "align_corners": ("bool", False)}, tolerance=1e-5)
def grid_sample(b, x, grid, mode, padding_mode, align_corners):
    """ONNX GridSample / `torch.nn.functional.grid_sample` on (N, C, [D,] H, W) data at the
    grid's normalized (x, y[, z]) points in [-1, 1] (N, [Do,] Ho, Wo, k); bicubic on 4-D
    data only (Keys, a = -0.75)"""
    sampler = _GridSampler(b, x, grid, padding_mode, align_corners)
    return b.reshape(getattr(sampler, mode)(), shape=[sampler.n, sampler.c] + sampler.out)
