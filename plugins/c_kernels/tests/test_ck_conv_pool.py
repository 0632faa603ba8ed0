
import itertools
import math

import numpy as np
import pytest

from legato.ir.errors import LegatoError

from ck_util import assert_close, f32

from legato_c_kernels import kernels as K


def conv_ref(x, w, b, strides, padding, dilation, groups):
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = strides, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for g, i, j in itertools.product(range(groups), range(kh), range(kw)):
        patch = xp[:, g * cg:(g + 1) * cg, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                   j * dw:j * dw + sw * (ow - 1) + 1:sw]
        out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    return out if b is None else out + b.reshape(1, -1, 1, 1)


CONV_CASES = [
    # (x shape, (O, kh, kw), strides, padding, dilation, groups)
    ((1, 1, 1, 1), (1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 3, 17, 17), (4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 3, 17, 5), (5, 3, 2), (2, 1), (0, 1, 2, 0), (1, 1), 1),
    ((2, 4, 9, 11), (6, 3, 3), (2, 3), (1, 0, 1, 2), (2, 1), 2),
    ((1, 6, 8, 8), (6, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),   # depthwise
    ((2, 8, 7, 6), (16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # pointwise fast path
    ((1, 8, 7, 6), (4, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 2),   # 1x1 strided
    ((1, 3, 5, 5), (2, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    ((1, 2, 3, 3), (3, 3, 3), (3, 3), (4, 4, 4, 4), (2, 2), 1),   # padding > kernel
    ((3, 129, 4, 4), (17, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 2, 2), (12, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # 2x2 map, 12 filters
    ((1, 5, 1, 1), (7, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),   # 1x1 map, 3x3 kernel
    ((1, 3, 40, 40), (8, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),
]

DEPTHWISE_CASES = [
    # (x shape, multiplier, (kh, kw), strides, padding, dilation)
    ((1, 32, 16, 16), 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
    ((2, 5, 9, 13), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 8, 8), 2, (3, 5), (1, 2), (1, 2, 0, 1), (2, 1)),   # multiplier, dilation
    ((1, 4, 1, 1), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),   # 1x1 map
    ((1, 4, 2, 2), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),   # kernel larger than input
    ((1, 2, 3, 3), 1, (3, 3), (3, 3), (4, 4, 4, 4), (2, 2)),   # padding > kernel
    ((1, 6, 20, 20), 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((0, 4, 5, 5), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),   # zero-size batch
]


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("threads", ["1", "2"])
def test_conv2d(rng, monkeypatch, case, threads):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    shape, (o, kh, kw), strides, padding, dilation, groups = case
    x = f32(rng, *shape)
    w = f32(rng, o, shape[1] // groups, kh, kw)
    b = f32(rng, o)
    for bias in (b, None):
        got = K.nn_conv2d(x, w, bias, strides=strides, padding=padding, dilation=dilation,
                          groups=groups, data_layout="NCHW", kernel_layout="OIHW")
        assert_close(got, conv_ref(x, w, bias, strides, padding, dilation, groups), atol=1e-5)


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("threads", ["1", "2"])
def test_conv2d_prepacked_weight(rng, monkeypatch, case, threads):
    """A weight packed once (groups == 1): the same results through the pixels x filters
    GEMM, with and without bias and a fused activation."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    shape, (o, kh, kw), strides, padding, dilation, groups = case
    x, w, b = f32(rng, *shape), f32(rng, o, shape[1] // groups, kh, kw), f32(rng, o)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    packed = K.pack_conv_weight(w, **attrs)
    if groups != 1:
        assert packed is None
        return
    for bias, activation in ((b, "none"), (None, "none"), (b, "nn.relu")):
        got = K.nn_conv2d(x, packed, bias, activation=activation, **attrs)
        ref = conv_ref(x, w, bias, strides, padding, dilation, groups)
        assert_close(got, np.maximum(ref, 0) if activation == "nn.relu" else ref, atol=1e-5)


@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=str)
@pytest.mark.parametrize("threads", ["1", "2"])
def test_conv2d_depthwise(rng, monkeypatch, case, threads):
    """Depthwise convs (one input channel per group) take the direct kernel."""
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    shape, mult, (kh, kw), strides, padding, dilation = case
    c = shape[1]
    x, w, b = f32(rng, *shape), f32(rng, c * mult, 1, kh, kw), f32(rng, c * mult)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=c)
    for bias, activation in ((b, "none"), (None, "none"), (b, "nn.silu")):
        got = K.nn_conv2d(x, w, bias, activation=activation, **attrs)
        ref = conv_ref(x, w, bias, strides, padding, dilation, c)
        if activation == "nn.silu":
            ref = ref / (1 + np.exp(-ref))
        assert_close(got, ref, atol=1e-5)


def test_packed_conv_weight_is_checked(rng):
    packed = K.pack_conv_weight(f32(rng, 4, 3, 3, 3))
    with pytest.raises(LegatoError, match="groups=1"):
        K.nn_conv2d(f32(rng, 1, 3, 5, 5), packed, groups=3)
    with pytest.raises(LegatoError, match="channels do not match"):
        K.nn_conv2d(f32(rng, 1, 2, 5, 5), packed)


def test_conv2d_fused_relu_noncontiguous_and_out(rng):
    x = f32(rng, 2, 6, 20, 10)[:, ::2, ::2]   # (2, 3, 10, 10) non-contiguous
    w = f32(rng, 5, 3, 3, 3)
    b = f32(rng, 5)
    ref = np.maximum(conv_ref(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1), 0)
    out = np.empty((2, 5, 10, 10), np.float32)
    got = K.nn_conv2d(x, w, b, padding=(1, 1, 1, 1), activation="relu", out=out)
    assert got is out
    assert_close(got, ref, atol=1e-5)


def test_conv2d_banded_im2col(rng):
    """Big enough that im2col runs in row bands (scratch budget 4M floats)."""
    x = f32(rng, 1, 64, 72, 128)
    w = f32(rng, 8, 64, 3, 3)
    got = K.nn_conv2d(x, w, None, padding=(1, 1, 1, 1))
    assert_close(got, conv_ref(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1), atol=1e-4)


def test_conv2d_errors(rng):
    x, w = f32(rng, 1, 4, 8, 8), f32(rng, 2, 4, 3, 3)
    with pytest.raises(LegatoError, match="data_layout='NHWC' is not supported"):
        K.nn_conv2d(x, w, data_layout="NHWC")
    with pytest.raises(LegatoError, match="kernel_layout='HWIO' is not supported"):
        K.nn_conv2d(x, w, kernel_layout="HWIO")
    with pytest.raises(LegatoError, match="channels"):
        K.nn_conv2d(x, f32(rng, 2, 3, 3, 3))
    with pytest.raises(LegatoError, match="channels"):
        K.nn_conv2d(x, f32(rng, 3, 2, 3, 3), groups=2)
    with pytest.raises(LegatoError, match="padding"):
        K.nn_conv2d(x, w, padding=(1, 1))
    with pytest.raises(LegatoError, match="padding"):
        K.nn_conv2d(x, w, padding=(-1, 0, 0, 0))
    with pytest.raises(LegatoError, match="strides"):
        K.nn_conv2d(x, w, strides=(0, 1))
    with pytest.raises(LegatoError, match="geometry"):
        K.nn_conv2d(x, f32(rng, 2, 4, 9, 9))
    with pytest.raises(LegatoError, match="bias"):
        K.nn_conv2d(x, w, f32(rng, 3))
    with pytest.raises(LegatoError, match="groups"):
        K.nn_conv2d(x, w, groups=0)
    with pytest.raises(LegatoError, match="float32"):
        K.nn_conv2d(x.astype(np.float64), w)
    with pytest.raises(LegatoError, match="4-D"):
        K.nn_conv2d(x[0], w)


def out_len(size, k, s, p0, p1, d, ceil_mode):
    span = d * (k - 1) + 1
    if not ceil_mode:
        return (size + p0 + p1 - span) // s + 1
    n = math.ceil((size + p0 + p1 - span) / s) + 1
    return n - 1 if (n - 1) * s >= size + p0 else n


def pool_ref(x, kernel, strides, padding, dilation, ceil_mode, mode, count_include_pad=False):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = kernel, strides, padding, dilation
    oh, ow = out_len(h, kh, sh, pt, pb, dh, ceil_mode), out_len(w, kw, sw, pl, pr, dw, ceil_mode)
    out = np.empty((n, c, oh, ow))
    x = x.astype(np.float64)
    for oy, ox in itertools.product(range(oh), range(ow)):
        ys = [oy * sh - pt + i * dh for i in range(kh)]
        xs = [ox * sw - pl + j * dw for j in range(kw)]
        vy, vx = [y for y in ys if 0 <= y < h], [v for v in xs if 0 <= v < w]
        vals = x[:, :, vy][:, :, :, vx].reshape(n, c, -1)
        if mode == "max":
            out[:, :, oy, ox] = vals.max(axis=-1) if vals.shape[-1] else -np.inf
            continue
        if count_include_pad:
            count = sum(-pt <= y < h + pb for y in ys) * sum(-pl <= v < w + pr for v in xs)
        else:
            count = len(vy) * len(vx)
        out[:, :, oy, ox] = vals.sum(axis=-1) / count if count else np.nan
    return out


POOL_CASES = [
    ((1, 1, 1, 1), (1, 1), None, (0, 0, 0, 0), (1, 1), False),
    ((2, 3, 17, 17), (2, 2), None, (0, 0, 0, 0), (1, 1), False),
    ((2, 3, 17, 17), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((1, 2, 17, 17), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((1, 2, 10, 9), (3, 2), (3, 2), (0, 1, 2, 0), (1, 1), True),
    ((1, 2, 12, 12), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2), True),
    ((1, 1, 5, 5), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True),
    ((1, 3, 4, 129), (2, 5), (1, 4), (1, 2, 1, 2), (1, 3), False),
    ((2, 2, 9, 9), (9, 9), None, (0, 0, 0, 0), (1, 1), False),     # global pooling
    ((1, 2, 6, 40), (2, 3), (1, 2), (0, 3, 1, 3), (2, 2), True),   # wide rows, dilated
]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_pooling(rng, case):
    shape, kernel, strides, padding, dilation, ceil_mode = case
    x = f32(rng, *shape)
    s = kernel if strides is None else strides
    got = K.nn_max_pool2d(x, pool_size=kernel, strides=strides, padding=padding,
                          dilation=dilation, ceil_mode=ceil_mode, data_layout="NCHW")
    assert_close(got, pool_ref(x, kernel, s, padding, dilation, ceil_mode, "max"))
    for cip in (False, True):
        got = K.nn_avg_pool2d(x, pool_size=list(kernel), strides=strides, padding=padding,
                              dilation=dilation, ceil_mode=ceil_mode, count_include_pad=cip)
        assert_close(got, pool_ref(x, kernel, s, padding, dilation, ceil_mode, "avg", cip))


def test_pool_nan_and_errors(rng):
    x = f32(rng, 1, 1, 4, 4)
    x[0, 0, 1, 1] = np.nan
    assert np.isnan(K.nn_max_pool2d(x, pool_size=[2, 2])[0, 0, 0, 0])
    with pytest.raises(LegatoError, match="NHWC"):
        K.nn_max_pool2d(x, pool_size=[2, 2], data_layout="NHWC")
    with pytest.raises(LegatoError, match="pool_size"):
        K.nn_avg_pool2d(x, pool_size=[2])
    with pytest.raises(LegatoError, match="geometry"):
        K.nn_max_pool2d(x, pool_size=[5, 5])
    with pytest.raises(LegatoError, match="4-D"):
        K.nn_max_pool2d(x[0], pool_size=[2, 2])


@pytest.mark.parametrize("size, pool, stride, padding", [
    ((1, 3), (1, 1), (1, 1), (0, 0, 1, 0)),   # the last ceil window starts in the padding
    ((5, 6), (2, 3), (2, 2), (1, 0, 2, 2)),
    ((4, 4), (3, 3), (3, 2), (0, 1, 2, 1)),
])
def test_ceil_mode_windows_follow_the_shared_rule(rng, size, pool, stride, padding):
    """Output sizes come from legato.ir.shapes (ONNX/PyTorch: a last ceil-mode window must
    start inside the input or the begin padding); values agree with cpu_ref."""
    import legato
    x = f32(rng, 1, 2, *size)
    attrs = dict(pool_size=pool, strides=stride, padding=padding, ceil_mode=True)
    reference = legato.get_backend("cpu_ref")
    for op, kernel in (("nn.max_pool2d", K.nn_max_pool2d), ("nn.avg_pool2d", K.nn_avg_pool2d)):
        want = reference.kernel(op)(x, **attrs, dilation=(1, 1), data_layout="NCHW",
                                    **({"count_include_pad": False} if "avg" in op else {}))
        got = kernel(x, **attrs)
        assert got.shape == want.shape, op
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
