"""legato.shapes against outside formulas: the ONNX reference's pooling geometry, numpy's
slicing, reshaping and broadcasting, and brute-force enumeration of windows."""
import dataclasses

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx.reference.ops.op_pool_common import (get_output_shape_explicit_padding,
                                               get_pad_shape, get_pad_with_auto_pad)

from legato.ir import shapes
from legato.ir.errors import ShapeError

small = st.integers(0, 12)
positive = st.integers(1, 6)


def brute_force_out(size, kernel, stride, dilation, begin, end, ceil_mode):
    """Count windows by walking them: floor mode keeps the windows inside the padded
    input; ceil mode adds windows while the previous one left cells uncovered, then drops
    the last one if it starts in the end padding (once: ONNX and PyTorch)."""
    span, padded = dilation * (kernel - 1) + 1, begin + size + end
    count = 0
    while count * stride + span <= padded or \
            ceil_mode and count and (count - 1) * stride + span < padded:
        count += 1
    if ceil_mode and count and (count - 1) * stride >= begin + size:
        count -= 1
    return count


@settings(max_examples=600, deadline=None)
@given(small, positive, positive, positive, small, small, st.booleans())
def test_out_size_matches_the_onnx_reference_and_brute_force(size, kernel, stride, dilation,
                                                            begin, end, ceil_mode):
    span = dilation * (kernel - 1) + 1
    room = size + begin + end - span
    if room < 0 and ceil_mode and stride > -room and size + begin:
        # one window larger than the padded input, as ONNX and PyTorch count it
        reference, _ = get_output_shape_explicit_padding([begin, end], [size], [kernel],
                                                         [stride], [dilation], ceil_mode)
        assert shapes.out_size(size, kernel, stride, dilation, begin, end, ceil_mode) == 1 \
            == reference[0]
        return
    if room < 0:
        with pytest.raises(ShapeError, match="does not fit"):
            shapes.out_size(size, kernel, stride, dilation, begin, end, ceil_mode)
        return
    out = shapes.out_size(size, kernel, stride, dilation, begin, end, ceil_mode)
    reference, _ = get_output_shape_explicit_padding([begin, end], [size], [kernel], [stride],
                                                     [dilation], ceil_mode)
    assert out == reference[0]
    assert out == brute_force_out(size, kernel, stride, dilation, begin, end, ceil_mode)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), positive, positive, st.integers(1, 3), st.data())
def test_out_size_matches_torch_pooling(size, kernel, stride, dilation, data):
    """PyTorch defines the ceil-mode rule; it takes symmetric padding of at most half the
    kernel."""
    torch = pytest.importorskip("torch")
    pad = data.draw(st.integers(0, kernel // 2))
    x = torch.zeros(1, 1, size)
    for ceil_mode in (False, True):
        try:
            y = torch.nn.functional.max_pool1d(x, kernel, stride, pad, dilation, ceil_mode)
        except RuntimeError:  # no window: legato refuses too
            with pytest.raises(ShapeError, match="does not fit"):
                shapes.out_size(size, kernel, stride, dilation, pad, pad, ceil_mode)
            continue
        assert shapes.out_size(size, kernel, stride, dilation, pad, pad, ceil_mode) == \
            y.shape[-1]


@pytest.mark.parametrize("size, kernel, stride, begin, end, expected", [
    (5, 2, 2, 0, 0, 3),   # a partial last window
    (4, 2, 2, 0, 0, 2),   # exact: no extra window
    (4, 3, 2, 0, 1, 2),   # ceil would give 3, but the third window starts in the end padding
    (1, 1, 2, 0, 1, 1),   # the same with a unit kernel
    (6, 3, 3, 1, 1, 3),   # the third window starts in the input, overhanging the padding
])
def test_ceil_mode_edge_cases(size, kernel, stride, begin, end, expected):
    assert shapes.out_size(size, kernel, stride, 1, begin, end, ceil_mode=True) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(small, positive, positive, positive, small, small), min_size=1,
                max_size=3), st.booleans())
def test_window_sweep_padding_holds_every_window(axes, ceil_mode):
    spatial, kernel, strides, dilation, begins, ends = (list(a) for a in zip(*axes))
    try:
        w = shapes.window(spatial, kernel, strides, dilation, begins + ends, ceil_mode)
    except ShapeError:
        return
    n = len(spatial)
    assert w.padding == tuple(begins + ends) and w.rank == n
    for i in range(n):
        padded = w.sweep_padding[i] + spatial[i] + w.sweep_padding[n + i]
        if w.out[i] == 0:  # ceil mode drops a lone window that starts in the end padding
            assert w.unreached[i] == w.padded_in[i] and w.overhang[i] == 0
            continue
        # w.kernel: ceil mode's one window larger than the padded input is cut to its taps
        assert w.kernel[i] == kernel[i] or (w.out[i] == 1 and w.kernel[i] < kernel[i])
        last_cell = (w.out[i] - 1) * w.strides[i] + (w.kernel[i] - 1) * dilation[i]
        assert last_cell == padded - 1 - w.unreached[i]  # the last window ends the sweep
        assert w.overhang[i] == 0 or w.unreached[i] == 0
        assert (w.overhang[i] > 0) <= ceil_mode  # floor-mode windows never overhang


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5), st.integers(1, 3), st.integers(1, 4), st.integers(1, 6),
       st.integers(0, 6), st.integers(0, 4), st.booleans())
def test_blind_axis_matches_brute_force(size, kernel, stride, dilation, begin, end, ceil_mode):
    try:
        w = shapes.window([size], [kernel], [stride], [dilation], [begin, end], ceil_mode)
    except ShapeError:
        return
    blind = any(not any(begin <= o * stride + t * dilation < begin + size
                        for t in range(kernel)) for o in range(w.out[0]))
    assert (w.blind_axis() == 0) == blind


def test_window_defaults_and_immutability():
    w = shapes.window((5, 7), (3, 2))
    assert w.strides == (3, 2) and w.dilation == (1, 1) and w.padding == (0, 0, 0, 0)
    assert w.out == (1, 3) and w.span == (3, 2) and w.padded_in == (5, 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.out = (2, 2)


@pytest.mark.parametrize("args, message", [
    (((4, 4), (0, 2)), r"pool pool_size \[0, 2\] must be 2 positive ints"),
    (((4, 4), (2, 2), (0, 1)), r"strides \[0, 1\] must be 2 positive"),
    (((4, 4), (2, 2), (1, 1), (1, 1), (0, -1, 0, 0)), r"padding \[0, -1, 0, 0\] must be 4 non"),
    (((4, 4), (2, 2), (2**31, 1)), r"strides \[2147483648, 1\] .* below 2\*\*31"),
    (((4, 4), (2, 2), (1, 1), (1, 1, 1)), r"dilation \[1, 1, 1\] must be 2"),
    (((3,), (4,)), r"window of 4 \(kernel 4, dilation 1\) does not fit input 3"),
])
def test_window_refusals_name_the_attribute(args, message):
    with pytest.raises(ShapeError, match=message):
        shapes.window(*args, what="pool", kernel_name="pool_size")


def test_a_conv_weight_of_no_taps_is_named_with_its_shape_and_layout():
    """conv2d passes its kernel's name as a function (made only for the error)."""
    import legato
    b = legato.GraphBuilder()
    x = b.input("x", (1, 2, 3, 3))
    weight = b.const(np.zeros((4, 2, 0, 1), np.float32))
    with pytest.raises(ShapeError, match=r"conv2d weight \[4, 2, 0, 1\] \(OIHW\) kernel "
                                         r"\[0, 1\] must be 2 positive ints"):
        b.call("nn.conv2d", x, weight, None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), positive, positive), min_size=1, max_size=3),
       st.sampled_from(["SAME_UPPER", "SAME_LOWER"]), st.booleans())
def test_same_auto_pad_gives_ceil_of_size_over_stride(axes, mode, ceil_mode):
    spatial, kernel, strides = (list(a) for a in zip(*axes))
    dilation = [1] * len(spatial)
    pads = shapes.auto_pads(mode, spatial, kernel, strides, dilation)
    if any(s == 0 for s in spatial):
        return
    out = [-(-s // t) for s, t in zip(spatial, strides)]
    reference = get_pad_with_auto_pad(mode, get_pad_shape(mode, spatial, kernel, strides, out))
    assert list(pads) == [max(0, p) for p in reference] or \
        any(p < 0 for p in reference)  # the reference leaves negative totals unclamped
    assert shapes.window(spatial, kernel, strides, dilation, pads, ceil_mode).out == tuple(out)


def test_auto_pad_with_dilation_valid_and_notset():
    # span 5 over 7 cells, stride 2: 4 windows need 3 + 5 = 11 cells, 4 of them padding
    assert shapes.auto_pads("SAME_UPPER", [7], [3], [2], [2]) == (2, 2)
    assert shapes.auto_pads("SAME_LOWER", [6], [2], [1], [2]) == (1, 1)
    assert shapes.auto_pads("SAME_LOWER", [6], [2], [1], [1]) == (1, 0)
    assert shapes.auto_pads("VALID", [6, 6], [2, 2], [1, 1], [1, 1], [1, 1, 1, 1]) == (0,) * 4
    assert shapes.auto_pads("NOTSET", [6], [2], [1], [1], [1, 2]) == (1, 2)
    with pytest.raises(ShapeError, match="auto_pad 'SAME' must be one of"):
        shapes.auto_pads("SAME", [6], [2], [1], [1])


# --- slices, splits, reshapes, broadcasting, axes ------------------------------------------

bound = st.integers(-12, 12) | st.sampled_from([-2**63, 2**63 - 1])


@settings(max_examples=600, deadline=None)
@given(st.integers(0, 8), bound, bound, st.integers(-4, 4).filter(bool))
def test_slice_axis_selects_what_numpy_selects(dim, start, stop, step):
    s = shapes.slice_axis(dim, start, stop, step)
    picked = np.arange(dim)[s.as_slice()]
    # ONNX clamps a negative-step start below -dim to 0 (numpy to "before index 0")
    python_start = 0 if step < 0 and start < -dim else start
    assert picked.tolist() == np.arange(dim)[python_start:stop:step].tolist()
    assert s.length == len(picked)
    if len(picked):
        assert (picked[0], picked[-1]) == (s.start, s.start + (s.length - 1) * s.step)


def test_slice_params_and_refusals():
    params = shapes.slice_params((4, 5), {"begin": [-1], "end": [-100], "strides": [-2],
                                          "axes": [-1]})
    assert params == [(0, 4, 1, 4), (4, -1, -2, 3)]
    assert params[1].as_slice() == slice(4, None, -2)
    with pytest.raises(ShapeError, match="step cannot be 0"):
        shapes.slice_params((4,), {"begin": [0], "end": [1], "strides": [0]})
    with pytest.raises(ShapeError, match="sliced twice"):
        shapes.slice_params((4,), {"begin": [0, 0], "end": [1, 1], "axes": [0, -1]})


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 24), st.integers(1, 6) | st.lists(st.integers(0, 6), max_size=4))
def test_split_sizes_partition_the_dimension(dim, sections):
    try:
        sizes = shapes.split_sizes(dim, sections)
    except ShapeError:
        equal = isinstance(sections, int)
        assert (dim % sections if equal else not sections or sum(sections) != dim)
        return
    assert sum(sizes) == dim
    assert len(set(sizes)) <= 1 if isinstance(sections, int) else list(sizes) == sections


@pytest.mark.parametrize("dim, chunk, expected", [(7, 3, (3, 3, 1)), (6, 3, (3, 3)),
                                                  (2, 5, (2,)), (0, 2, (0,))])
def test_chunk_sizes_as_torch_split(dim, chunk, expected):
    torch = pytest.importorskip("torch")
    assert shapes.chunk_sizes(dim, chunk) == expected
    assert tuple(len(p) for p in torch.arange(dim).split(chunk)) == expected


def test_split_sizes_accepts_numpy_ints_and_bounds_empty_parts():
    assert shapes.split_sizes(6, np.int64(3)) == (2, 2, 2)
    with pytest.raises(ShapeError, match="at most 65536"):
        shapes.split_sizes(0, 2**70)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=4), st.lists(st.integers(-1, 6), max_size=4))
def test_resolve_reshape_agrees_with_numpy(shape, target):
    data = np.zeros(shape)
    try:
        expected = data.reshape(target).shape
    except ValueError:  # also a -1 next to a 0 (ambiguous): legato refuses it too
        with pytest.raises(ShapeError):
            shapes.resolve_reshape(shape, target)
        return
    assert shapes.resolve_reshape(shape, target) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=4), min_size=1, max_size=3))
def test_broadcast_shapes_agrees_with_numpy(shape_list):
    try:
        expected = np.broadcast_shapes(*map(tuple, shape_list))
    except ValueError:
        with pytest.raises(ShapeError, match="do not broadcast"):
            shapes.broadcast_shapes(*shape_list)
        return
    assert shapes.broadcast_shapes(*shape_list) == expected


@pytest.mark.parametrize("rank, axis", [(4, 1), (4, -1), (3, 0), (1, 0), (2, -2)])
def test_channel_view_broadcasts_along_the_axis(rank, axis):
    channels = 3
    data = np.zeros(tuple(channels if i == axis % rank else 2 for i in range(rank)))
    param = np.arange(channels)
    view = param.reshape(shapes.channel_view(channels, rank, axis))
    product = data + view
    assert product.shape == data.shape
    assert np.all(np.moveaxis(product, axis, -1) == param)


def test_axes_normalisation():
    assert shapes.norm_axis(-1, 3) == 2 and shapes.norm_axis(-3, 3) == 0
    assert shapes.norm_axes([-1, 0], 3) == (0, 2) and shapes.norm_axes(None, 2) == (0, 1)
    assert shapes.norm_axes([-1, 0], 3, keep_order=True) == (2, 0)
    assert shapes.reduced_shape((2, 3, 4), (0, 2), False) == (3,)
    assert shapes.reduced_shape((2, 3, 4), (0, 2), True) == (1, 3, 1)
    with pytest.raises(ShapeError, match="axis 3 is out of range for rank 3"):
        shapes.norm_axis(3, 3)
    with pytest.raises(ShapeError, match="repeat an axis"):
        shapes.norm_axes([1, -2], 3)


# --- every backend's window kernels agree with the one rule ---------------------------------

def window_kernels():
    import legato
    found = []
    for name in legato.list_backends():
        backend = legato.get_backend(name)
        found += [pytest.param(backend, op, id=f"{name}-{op}") for op in
                  ("nn.max_pool2d", "nn.avg_pool2d", "nn.conv2d") if backend.has_kernel(op)]
    return found


@pytest.mark.parametrize("backend, op", window_kernels())
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 7), st.integers(1, 3), st.integers(1, 3),
                          st.integers(1, 2), st.integers(0, 3), st.integers(0, 3)),
                min_size=2, max_size=2), st.booleans())
@example(axes=[(1, 1, 1, 1, 0, 1), (3, 1, 1, 1, 0, 0)], ceil_mode=True)  # drops a floor window
def test_window_kernels_give_the_inferred_shape(backend, op, axes, ceil_mode):
    """The result of a backend's conv / pool kernel has the shape op inference gives, on
    geometry inference accepts (ceil mode's dropped windows included)."""
    from legato.ops.conv import conv_window, pool_window
    spatial, kernel, strides, dilation, begins, ends = (list(a) for a in zip(*axes))
    x = np.ones((1, 2) + tuple(spatial), np.float32)
    attrs = {"strides": strides, "dilation": dilation, "padding": begins + ends,
             "data_layout": "NCHW"}
    if op == "nn.conv2d":
        inputs = (x, np.ones((3, 2) + tuple(kernel), np.float32), None)
        attrs.update(groups=1, kernel_layout="OIHW")
        window = conv_window
    else:
        inputs = (x,)
        attrs.update(pool_size=kernel, ceil_mode=ceil_mode)
        window = pool_window
        if op == "nn.avg_pool2d":
            attrs["count_include_pad"] = False
    try:
        win = window(x.shape, *inputs[1:2] and (inputs[1].shape,), attrs)
    except ShapeError:
        return  # refused at inference: kernels never see it
    y = backend.kernel(op)(*inputs, **attrs)
    assert y.shape == (1, inputs[1].shape[0] if op == "nn.conv2d" else 2) + win.out
