"""int32 nn.conv2d on c_kernels (ONNX ConvInteger): on the int8 conv where the data
fits bytes (less one zero point) and each filter does too (less one of its own), a numpy
convolution otherwise; always cpu_ref's integers."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato import GraphBuilder
from legato_c_kernels.kernels import int_conv


@pytest.fixture
def numpy_taken(monkeypatch):
    """How many int32 convs went to numpy (not the int8 conv)."""
    taken = []
    original = int_conv._numpy_conv

    def spy(*args):
        taken.append(True)
        return original(*args)
    monkeypatch.setattr(int_conv, "_numpy_conv", spy)
    return taken


def conv_module(x_shape, w, bias, **attrs):
    b = GraphBuilder()
    y = b.call("nn.conv2d", b.input("x", x_shape, "int32"), b.const(w),
               None if bias is None else b.const(bias), **attrs)
    return b.build(y)


CASES = {  # data dtype, weight dtype, channels in/out, groups, attrs
    "u8 data, s8 weight, padded": (np.uint8, np.int8, 3, 8, 1, {"padding": [1, 1, 1, 1]}),
    "s8 data, u8 weight, strided and dilated": (np.int8, np.uint8, 4, 6, 1, {
        "padding": [2, 0, 1, 2], "strides": [2, 1], "dilation": [2, 2]}),
    "depthwise": (np.uint8, np.int8, 6, 6, 6, {"padding": [1, 1, 1, 1], "strides": [2, 2]}),
    "grouped": (np.uint8, np.int8, 6, 4, 2, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("with_bias", [False, True])
def test_int32_conv_of_byte_values_runs_on_the_int8_conv(name, with_bias, numpy_taken):
    x_dtype, w_dtype, cin, cout, groups, attrs = CASES[name]
    rng = np.random.default_rng(len(name))
    info, winfo = np.iinfo(x_dtype), np.iinfo(w_dtype)
    x = rng.integers(info.min, info.max + 1, (2, cin, 9, 8)).astype(np.int32) - \
        np.int32(rng.integers(info.min, info.max + 1))
    w = rng.integers(winfo.min, winfo.max + 1, (cout, cin // groups, 3, 3)).astype(np.int32)
    w -= rng.integers(winfo.min, winfo.max + 1, (cout, 1, 1, 1)).astype(np.int32)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32) if with_bias else None
    module = conv_module(x.shape, w, bias, groups=groups, **attrs)
    want = legato.compile(module, "cpu_ref")(x)
    np.testing.assert_array_equal(legato.compile(module, "c_kernels")(x), want)
    assert numpy_taken == []


def test_wide_data_or_weights_go_to_numpy_with_the_same_integers(numpy_taken):
    rng = np.random.default_rng(2)
    x = rng.integers(-3000, 3000, (1, 4, 7, 7)).astype(np.int32)  # spans ~6000 values
    w = rng.integers(-100, 100, (4, 2, 3, 3)).astype(np.int32)
    module = conv_module(x.shape, w, None, groups=2, padding=[1, 1, 1, 1])
    np.testing.assert_array_equal(legato.compile(module, "c_kernels")(x),
                                  legato.compile(module, "cpu_ref")(x))
    w[0, 0, 0, 0] = 400  # a filter spanning more than 256 values; data that fits
    x = rng.integers(0, 256, (1, 4, 7, 7)).astype(np.int32)
    module = conv_module(x.shape, w, None, groups=2, padding=[1, 1, 1, 1], strides=[2, 2])
    np.testing.assert_array_equal(legato.compile(module, "c_kernels")(x),
                                  legato.compile(module, "cpu_ref")(x))
    assert numpy_taken == [True, True]
