"""The int8 kernels (qnn.conv2d, qnn.matmul, qnn.linear) against onnxruntime's QLinearConv
and QLinearMatMul, bit for bit, under every int8 GEMM family this CPU runs."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir.errors import ExecutionError
from legato_c_kernels._lib import lib
from legato_c_kernels.kernels import qnn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

FAMILIES = [isa for isa in (lib.LGK_QISA_GENERIC, lib.LGK_QISA_AVX2, lib.LGK_QISA_AVX512_VNNI)
            if lib.lgk_qgemm_force_isa(isa) == 0]
lib.lgk_qgemm_force_isa(lib.LGK_QISA_AUTO)


@pytest.fixture(params=FAMILIES, ids=lambda isa: {1: "generic", 2: "avx2", 3: "vnni"}[isa])
def family(request):
    assert lib.lgk_qgemm_force_isa(request.param) == 0
    yield request.param
    lib.lgk_qgemm_force_isa(lib.LGK_QISA_AUTO)


def run_ort(op: str, inputs: dict, out_dtype, **attrs):
    tensor = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], **attrs)], "g",
        [helper.make_tensor_value_info(n, tensor(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", tensor(np.dtype(out_dtype)), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def rand_q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def scale(rng, n=None, lo=1e-3, hi=2e-2):
    return np.float32(rng.uniform(lo, hi)) if n is None else \
        rng.uniform(lo, hi, n).astype(np.float32)


MATMUL_CASES = [  # a dtype, b dtype, a shape, b shape, per-column b
    (np.uint8, np.int8, (37, 70), (70, 53), True),
    (np.int8, np.int8, (2, 5, 33), (33, 49), False),
    (np.uint8, np.uint8, (128, 64), (64, 96), True),
    (np.int8, np.int8, (3, 9, 16), (3, 16, 10), False),  # batched, as attention's
    (np.uint8, np.int8, (1, 300), (300, 7), True),
]


@pytest.mark.parametrize("a_dtype, b_dtype, a_shape, b_shape, per_column", MATMUL_CASES)
def test_qnn_matmul_matches_onnxruntime(family, a_dtype, b_dtype, a_shape, b_shape, per_column):
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a, b = rand_q(rng, a_dtype, a_shape), rand_q(rng, b_dtype, b_shape)
    n = b_shape[-1]
    b_scale = scale(rng, n) if per_column else np.array(scale(rng))
    b_zero = rand_q(rng, b_dtype, (n,)) if per_column else np.array(rand_q(rng, b_dtype, ()))
    a_zero, y_zero = np.array(rand_q(rng, a_dtype, ())), np.array(a_dtype(7))
    inputs = dict(a=a, a_scale=np.array(scale(rng)), a_zero_point=a_zero, b=b, b_scale=b_scale,
                  b_zero_point=b_zero, y_scale=np.array(np.float32(0.4)), y_zero_point=y_zero)
    try:
        want = run_ort("QLinearMatMul", inputs, a_dtype)
    except Exception as err:  # onnxruntime has no kernel for this type mix
        if "NOT_IMPLEMENTED" not in str(err):
            raise
        want = None
    got = qnn.qnn_matmul(*inputs.values())
    if want is None:  # u8 x u8: the same arithmetic in numpy (int64 sums, float32 stage)
        acc = (a.astype(np.int64) - a_zero) @ (b.astype(np.int64) - b_zero)
        mult = inputs["a_scale"] * b_scale / inputs["y_scale"]
        want = np.clip(np.rint(acc.astype(np.int32).astype(np.float32) * mult) + y_zero,
                       0, 255).astype(np.uint8)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    packed = qnn.pack_qweight(b, transposed=False) if b.ndim == 2 else None
    if packed is not None:
        again = qnn.qnn_matmul(a, inputs["a_scale"], a_zero, packed, b_scale, b_zero,
                               inputs["y_scale"], y_zero)
        np.testing.assert_array_equal(again, want)


def test_qnn_linear_is_matmul_by_the_transpose_plus_bias(family):
    """qnn.linear = QLinearMatMul(data, weight^T) with the int32 bias added to the sums:
    checked as QLinearConv 1x1 (which has the bias) over the rows as pixels."""
    rng = np.random.default_rng(3)
    data, weight = rand_q(rng, np.uint8, (50, 96)), rand_q(rng, np.int8, (40, 96))
    ws, wz = scale(rng, 40), rand_q(rng, np.int8, (40,))
    bias = rng.integers(-20000, 20000, 40).astype(np.int32)
    xs, xz, ys, yz = np.float32(0.02), np.uint8(120), np.float32(0.5), np.uint8(100)
    want = run_ort("QLinearConv", dict(
        x=data.T[None, :, :, None].copy(), x_scale=np.array(xs), x_zero_point=np.array(xz),
        w=weight[:, :, None, None].copy(), w_scale=ws, w_zero_point=wz,
        y_scale=np.array(ys), y_zero_point=np.array(yz), B=bias), np.uint8)[0, :, :, 0].T
    for w in (weight, qnn.pack_qweight(weight)):
        got = qnn.qnn_linear(data, xs, xz, w, ws, wz, ys, yz, bias)
        np.testing.assert_array_equal(got, want)


CONV_CASES = [  # data shape, weight shape, groups, strides, pads, dilations
    ((1, 8, 14, 14), (16, 8, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 6, 11, 9), (9, 2, 3, 2), 3, (2, 1), (1, 0, 2, 1), (1, 2)),
    ((1, 16, 10, 10), (24, 16, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),   # pointwise
    ((1, 32, 23, 23), (32, 1, 3, 3), 32, (1, 1), (1, 1, 1, 1), (1, 1)),   # depthwise
    ((2, 12, 16, 17), (12, 1, 3, 3), 12, (2, 2), (1, 1, 1, 1), (1, 1)),   # depthwise, s2
    ((1, 3, 20, 20), (8, 3, 7, 7), 1, (2, 2), (3, 3, 3, 3), (1, 1)),
]


@pytest.mark.parametrize("x_dtype, w_dtype", [(np.uint8, np.int8), (np.int8, np.int8),
                                              (np.uint8, np.uint8)])
@pytest.mark.parametrize("x_shape, w_shape, groups, strides, pads, dilations", CONV_CASES)
def test_qnn_conv2d_matches_onnxruntime(family, x_dtype, w_dtype, x_shape, w_shape, groups,
                                        strides, pads, dilations):
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x, w = rand_q(rng, x_dtype, x_shape), rand_q(rng, w_dtype, w_shape)
    o = w_shape[0]
    per_channel = w_dtype == np.int8
    inputs = dict(x=x, x_scale=np.array(scale(rng)), x_zero_point=np.array(rand_q(rng, x_dtype, ())),
                  w=w, w_scale=scale(rng, o) if per_channel else np.array(scale(rng)),
                  w_zero_point=rand_q(rng, w_dtype, (o,)) if per_channel else
                  np.array(rand_q(rng, w_dtype, ())),
                  y_scale=np.array(np.float32(0.6)), y_zero_point=np.array(x_dtype(3)),
                  B=rng.integers(-3000, 3000, o).astype(np.int32))
    attrs = dict(group=groups, strides=list(strides), pads=[pads[0], pads[1], pads[2], pads[3]],
                 dilations=list(dilations))
    want = run_ort("QLinearConv", inputs, x_dtype, **attrs)
    conv = dict(strides=list(strides), padding=[pads[0], pads[1], pads[2], pads[3]],
                dilation=list(dilations), groups=groups)
    got = qnn.qnn_conv2d(*inputs.values(), **conv)
    np.testing.assert_array_equal(got, want)
    packed = qnn.pack_qconv_weight(w, groups=groups)
    if packed is not None:
        args = list(inputs.values())
        args[3] = packed
        np.testing.assert_array_equal(qnn.qnn_conv2d(*args, **conv), want)


def test_qnn_kernels_refuse_bad_inputs():
    a, b = np.zeros((4, 8), np.uint8), np.zeros((8, 3), np.int8)
    one, zero_u8, zero_i8 = np.float32(0.1), np.uint8(0), np.int8(0)
    with pytest.raises(ExecutionError, match="qnn.matmul: a must be a int8 or uint8"):
        qnn.qnn_matmul(a.astype(np.float32), one, zero_u8, b, one, zero_i8, one, zero_u8)
    with pytest.raises(ExecutionError, match="inner dimensions differ"):
        qnn.qnn_matmul(a, one, zero_u8, b[:5], one, zero_i8, one, zero_u8)
    with pytest.raises(ExecutionError, match="b_zero_point must hold one value or 3"):
        qnn.qnn_matmul(a, one, zero_u8, b, one, np.zeros(2, np.int8), one, zero_u8)
    with pytest.raises(ExecutionError, match="a_zero_point must have dtype uint8"):
        qnn.qnn_matmul(a, one, zero_i8, b, one, zero_i8, one, zero_u8)
    with pytest.raises(ExecutionError, match="bias must have shape"):
        qnn.qnn_linear(a, one, zero_u8, b.T, one, zero_i8, one, zero_u8, np.zeros(4, np.int32))
    x, w = np.zeros((1, 4, 5, 5), np.uint8), np.zeros((2, 4, 3, 3), np.int8)
    with pytest.raises(ExecutionError, match="data_layout='NHWC' is not supported"):
        qnn.qnn_conv2d(x, one, zero_u8, w, one, zero_i8, one, zero_u8, data_layout="NHWC")
    with pytest.raises(ExecutionError, match="channels do not match"):
        qnn.qnn_conv2d(x, one, zero_u8, w, one, zero_i8, one, zero_u8, groups=2)


def qconv_module(rng, scale_input: bool):
    """A qnn.conv2d with constant weights (packed once by the planner); the data scale a
    constant or a second input (a value computed at run time)."""
    b = legato.GraphBuilder()
    x = b.input("x", (2, 8, 12, 12), "uint8")
    xs = b.input("xs", (), "float32") if scale_input else b.const(np.array(0.02, np.float32))
    const = b.const
    w = const(rand_q(rng, np.int8, (16, 8, 3, 3)))
    y = b.call("qnn.conv2d", x, xs, const(np.array(3, np.uint8)), w,
               const(scale(rng, 16)), const(rand_q(rng, np.int8, (16,))),
               const(np.array(0.5, np.float32)), const(np.array(7, np.uint8)),
               const(rng.integers(-999, 999, 16).astype(np.int32)), padding=[1, 1, 1, 1],
               strides=[1, 2])
    return b.build(y), w.data


@pytest.mark.parametrize("scale_input", [False, True])
def test_qnn_conv2d_kept_whole_and_matches_onnxruntime(scale_input, monkeypatch):
    rng = np.random.default_rng(5)
    mod, weight = qconv_module(rng, scale_input)
    packed = []
    monkeypatch.setattr(qnn.qnn_conv2d, "pack",
                        lambda w, **attrs: packed.append(qnn.pack_qconv_weight(w, **attrs))
                        or packed[-1])
    compiled = legato.compile(mod, "c_kernels")
    assert [call.op for call in compiled.module.main.calls] == ["qnn.conv2d"]
    call = mod.main.calls[0]
    for data_scale in (0.02, 0.07):  # a new scale on every run is read, not frozen at bind
        x = rand_q(rng, np.uint8, (2, 8, 12, 12))
        args = (x, np.array(data_scale, np.float32)) if scale_input else (x,)
        got = compiled(*args)
        inputs = dict(x=x, x_scale=np.array(data_scale if scale_input else 0.02, np.float32),
                      x_zero_point=np.array(3, np.uint8), w=weight,
                      w_scale=call.inputs[4].data, w_zero_point=call.inputs[5].data,
                      y_scale=np.array(0.5, np.float32), y_zero_point=np.array(7, np.uint8),
                      B=call.inputs[8].data)
        want = run_ort("QLinearConv", inputs, np.uint8, pads=[1, 1, 1, 1], strides=[1, 2])
        np.testing.assert_array_equal(got, want)
    assert len(packed) == 1 and isinstance(packed[0], qnn.PackedQWeight)  # once, at plan time


def test_out_buffer_and_its_refusals():
    rng = np.random.default_rng(9)
    a, w = rand_q(rng, np.int8, (6, 10)), rand_q(rng, np.int8, (4, 10))
    args = (a, np.float32(0.1), np.int8(1), w, np.float32(0.05), np.int8(-2), np.float32(0.2),
            np.int8(3))
    result = qnn.qnn_linear(*args)
    out = np.zeros((6, 4), np.int8)
    assert qnn.qnn_linear(*args, out=out) is out
    np.testing.assert_array_equal(out, result)
    with pytest.raises(ExecutionError, match=r"qnn\.linear: out must be a int8 array"):
        qnn.qnn_linear(*args, out=np.zeros((6, 4), np.uint8))


def test_extreme_bytes_do_not_saturate(family):
    """255 x 127 and 255 x -128 products in every k group: a pair of them (64770) is past
    int16, where vpmaddubsw would saturate; every family sums them exactly."""
    k = 64
    a = np.full((9, k), 255, np.uint8)
    b = np.where(np.arange(k * 10).reshape(k, 10) % 3 == 0, -128, 127).astype(np.int8)
    acc = a.astype(np.int64) @ b.astype(np.int64)  # zero points 0
    mult = np.float32(1.0) * np.float32(1e-4) / np.float32(1.0)
    want = np.clip(np.rint(acc.astype(np.float32) * mult), -128, 127).astype(np.int8)
    got = qnn.qnn_matmul(a, np.float32(1.0), np.uint8(0), b, np.float32(1e-4), np.int8(0),
                         np.float32(1.0), np.int8(0))
    np.testing.assert_array_equal(got, want)
    assert np.abs(acc).max() > 2**16  # far past any int16 pair sum
