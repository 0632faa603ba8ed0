"""nn.max_pool2d of int8 / uint8 data on c_kernels (csrc/qpool.c) against onnxruntime's
MaxPool: strides 1-3, padding, dilation, ceil mode, rows past a vector; a compiled int8 pool
stays one call on c_kernels instead of a pad, strided slices and maxima."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato_c_kernels.kernels import qpool

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def pool_model(dtype, shape, kernel, strides, pads, dilations=(1, 1), ceil_mode=0):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(kernel),
                            strides=list(strides), pads=list(pads), dilations=list(dilations),
                            ceil_mode=ceil_mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TYPES[np.dtype(dtype)], list(shape))],
        [helper.make_tensor_value_info("y", TYPES[np.dtype(dtype)], None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = [  # shape, kernel, strides, ONNX pads (begins, ends), dilations, ceil mode
    ((1, 8, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),   # ResNet-50's stem pool
    ((2, 3, 9, 10), (2, 3), (2, 1), (1, 0, 0, 2), (1, 1), 1),
    ((1, 2, 11, 7), (3, 2), (3, 2), (2, 1, 2, 1), (2, 2), 0),
    ((1, 2, 5, 150), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),      # 150 columns
    ((1, 1, 4, 140), (3, 3), (2, 2), (0, 1, 0, 1), (1, 1), 1),      # 70 columns at stride 2
]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("shape, kernel, strides, pads, dilations, ceil_mode", CASES)
def test_byte_max_pool_matches_onnxruntime(dtype, shape, kernel, strides, pads, dilations,
                                           ceil_mode):
    info = np.iinfo(dtype)
    x = np.random.default_rng(len(shape) + shape[-1]).integers(
        info.min, info.max + 1, shape).astype(dtype)
    model = pool_model(dtype, shape, kernel, strides, pads, dilations, ceil_mode)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    legato_pads = [pads[0], pads[1], pads[2], pads[3]]  # (top, left, bottom, right)
    attrs = dict(pool_size=list(kernel), strides=list(strides), padding=legato_pads,
                 dilation=list(dilations), ceil_mode=bool(ceil_mode))
    np.testing.assert_array_equal(qpool.max_pool2d(x, **attrs), want)
    out = np.empty(want.shape, dtype)
    qpool.max_pool2d.bind(x, out=out, **attrs)()
    np.testing.assert_array_equal(out, want)


def test_float_max_pool_still_runs_on_the_float_kernel():
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = qpool.max_pool2d(x, pool_size=[2, 2], strides=[2, 2])
    np.testing.assert_array_equal(got, x.reshape(1, 3, 4, 2, 4, 2).max(axis=(3, 5)))


def test_compiled_byte_max_pool_is_one_c_kernels_call():
    from legato.frontends import onnx as onnx_frontend
    model = pool_model(np.int8, (1, 4, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1))
    compiled = legato.compile(onnx_frontend.load(model), "c_kernels")
    assert compiled.report.per_backend["c_kernels"] == {"nn.max_pool2d": 1}
    x = np.random.default_rng(2).integers(-128, 128, (1, 4, 9, 9)).astype(np.int8)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled(x), want)
