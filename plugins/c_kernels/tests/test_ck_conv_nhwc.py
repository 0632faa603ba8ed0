"""A depthwise conv whose result is only permuted to channels last (ConvNeXt: depthwise
conv, then a layer norm over channels) runs as one C call that writes NHWC: the fusion
pass takes the permute into the conv's epilogue function, and the values are the
reference's."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato_c_kernels.fusion import FUSION
from legato_c_kernels.kernels.conv_pool import nn_conv2d


def _block(*, channels=40, size=14, kernel=7, groups=None, axes=(0, 2, 3, 1),
           relu=False, second_reader=False, batch=1):
    rng = np.random.default_rng(0)
    groups = channels if groups is None else groups
    b = legato.GraphBuilder()
    x = b.input("x", (batch, channels, size, size))
    w = b.const(rng.standard_normal((channels, channels // groups, kernel, kernel))
                .astype(np.float32))
    bias = b.const(rng.standard_normal(channels).astype(np.float32))
    pad = kernel // 2
    y = b.call("nn.conv2d", x, w, bias, strides=[1, 1], padding=[pad] * 4,
               dilation=[1, 1], groups=groups)
    if relu:
        y = b.call("nn.relu", y)
    out = b.call("permute_dims", y, axes=list(axes))
    if second_reader:  # the conv's result is read again: the permute may not hide it
        out = b.call("add", out, b.call("permute_dims", y, axes=list(axes)))
    return b.build(out)


def _fused(module) -> list:
    return [fn for fn in module.functions.values()
            if fn.kind == "primitive" and fn.attrs.get("fusion") == FUSION]


def _check(mod, batch=1, channels=40, size=14):
    c = legato.compile(mod, "c_kernels")
    x = np.random.default_rng(1).standard_normal((batch, channels, size, size)) \
        .astype(np.float32)
    want = legato.reference(mod)(x)  # sums of up to 40 x 49 products: float32 rounding
    np.testing.assert_allclose(c(x), want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))
    return c


@pytest.mark.parametrize("channels,size,kernel", [(40, 14, 7), (96, 9, 7), (16, 20, 3),
                                                  (3, 33, 3), (24, 7, 5)])
def test_depthwise_conv_then_channels_last_is_one_call(channels, size, kernel):
    mod = _block(channels=channels, size=size, kernel=kernel)
    c = _check(mod, channels=channels, size=size)
    (fn,) = _fused(c.module)
    assert [call.op for call in fn.calls] == ["nn.conv2d", "permute_dims"]
    assert fn.attrs["layout"] == "NHWC"
    assert [call.op for _, call, _ in c._runner.steps] == ["nn.conv2d"]


def test_with_an_activation_and_a_batch():
    mod = _block(relu=True, batch=3)
    c = _check(mod, batch=3)
    (fn,) = _fused(c.module)
    assert [call.op for call in fn.calls] == ["nn.conv2d", "nn.relu", "permute_dims"]
    assert fn.attrs["activation"] == "nn.relu"


def test_a_symbolic_batch_fuses_and_runs_at_every_size():
    text = str(_block()).replace("float32[1, 40, 14, 14]", "float32[n, 40, 14, 14]") \
        .replace("float32[1, 14, 14, 40]", "float32[n, 14, 14, 40]")
    mod = legato.parse(text)
    c = legato.compile(mod, "c_kernels")
    assert [fn.attrs["layout"] for fn in _fused(c.module)] == ["NHWC"]
    reference = legato.compile(mod, "cpu_ref")
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 40, 14, 14)) \
            .astype(np.float32)
        np.testing.assert_allclose(c(x), reference(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kwargs", [dict(axes=(0, 3, 1, 2)), dict(second_reader=True),
                                    dict(groups=1), dict(groups=20)])
def test_not_fused_where_it_does_not_apply(kwargs):
    mod = _block(**kwargs)
    c = _check(mod)
    assert not any(fn.attrs.get("layout") for fn in _fused(c.module))
    assert "permute_dims" in [call.op for _, call, _ in c._runner.steps]


def test_the_kernel_writes_channels_last_and_refuses_what_it_cannot():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 20, 11, 13)).astype(np.float32)
    w = rng.standard_normal((20, 1, 3, 3)).astype(np.float32)
    planes = nn_conv2d(x, w, padding=(1, 1, 1, 1), groups=20)
    last = nn_conv2d(x, w, padding=(1, 1, 1, 1), groups=20, out_layout="NHWC")
    assert last.shape == (2, 11, 13, 20)
    np.testing.assert_array_equal(last, planes.transpose(0, 2, 3, 1))
    dense = rng.standard_normal((8, 20, 3, 3)).astype(np.float32)  # not depthwise
    np.testing.assert_array_equal(nn_conv2d(x, dense, out_layout="NHWC"),
                                  nn_conv2d(x, dense).transpose(0, 2, 3, 1))
    with pytest.raises(legato.LegatoError, match="out_layout='NCWH'"):
        nn_conv2d(x, w, groups=20, out_layout="NCWH")
