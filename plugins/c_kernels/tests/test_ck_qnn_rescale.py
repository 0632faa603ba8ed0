"""qnn.multiply and qnn.softmax in C (csrc/qrescale.c) and qnn.add's prepared call on a
row-broadcast operand or in place: bit for bit against cpu_ref's kernels (the ops'
ground truth) and onnxruntime's com.microsoft QLinearMul; prepared calls are one C call
(not a re-planned kernel per run); compiled models keep the ops on c_kernels."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.plugin_api import ExecutionError
from ck_util import run_qlinear
from legato_c_kernels.kernels import qnn_elementwise, qnn_rescale

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402


def ref(op: str):
    return legato.context().backend("cpu_ref").kernel(op)


def rand_q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def binary_args(rng, dtype, a_shape, b_shape):
    return (rand_q(rng, dtype, a_shape), np.float32(rng.uniform(0.01, 0.2)),
            rand_q(rng, dtype, ()), rand_q(rng, dtype, b_shape),
            np.float32(rng.uniform(0.01, 0.2)), rand_q(rng, dtype, ()),
            np.float32(rng.uniform(0.02, 0.3)), rand_q(rng, dtype, ()))


def prepared(kernel, args, shape, dtype, in_place=None):
    """The bound call's result, and whether it is the planned C call (not a partial)."""
    out = args[in_place] if in_place is not None else np.empty(shape, dtype)
    run = kernel.bind(*args, out=out)
    run()
    return out, hasattr(run, "__self__")


MUL_CASES = [  # dtype, a shape, b shape
    (np.int8, (1, 128, 3072), (1, 128, 3072)),   # GELU's x * (1 + erf)
    (np.int8, (1, 12, 128, 128), ()),            # attention's scores * constant
    (np.uint8, (4, 7), (1,)),
    (np.int8, (1, 16, 1, 1), (1, 16, 9, 9)),     # one value per 9 rows (copied)
    (np.int8, (2, 3, 1), (2, 3, 10)),             # one value per row
    (np.uint8, (5, 33), (33,)),                  # one row for all
    (np.int8, (3, 1, 5), (4, 5)),                # general broadcasting (copied)
    (np.uint8, (200, 700), (200, 700)),          # past the threading threshold
]


@pytest.mark.parametrize("dtype, a_shape, b_shape", MUL_CASES)
def test_qnn_multiply_matches_cpu_ref_and_onnxruntime(dtype, a_shape, b_shape):
    rng = np.random.default_rng(len(a_shape) * 7 + len(b_shape))
    args = binary_args(rng, dtype, a_shape, b_shape)
    want = ref("qnn.multiply")(*args)
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
    np.testing.assert_array_equal(want, run_qlinear("QLinearMul", dict(zip(names, args)), dtype))
    np.testing.assert_array_equal(qnn_rescale.qnn_multiply(*args), want)
    out, direct = prepared(qnn_rescale.qnn_multiply, args, want.shape, dtype)
    np.testing.assert_array_equal(out, want)
    assert direct == (a_shape not in ((3, 1, 5), (1, 16, 1, 1)))
    if a_shape == want.shape:  # the planner may hand a's own buffer as out
        out, direct = prepared(qnn_rescale.qnn_multiply, args, want.shape, dtype, in_place=0)
        np.testing.assert_array_equal(out, want)
        assert direct


def test_qnn_multiply_saturates_rounds_ties_to_even_and_refuses():
    a = np.array([1, 3, 5, 127, -128], np.int8)
    one, z = np.float32(1.0), np.int8(0)
    args = (a, np.float32(0.5), z, np.array(1, np.int8), one, z, one, z)
    np.testing.assert_array_equal(qnn_rescale.qnn_multiply(*args), [0, 2, 2, 64, -64])
    big = (a, one, z, a, one, z, one, z)
    np.testing.assert_array_equal(qnn_rescale.qnn_multiply(*big), ref("qnn.multiply")(*big))
    with pytest.raises(ExecutionError, match="share one dtype"):
        qnn_rescale.qnn_multiply(a, one, z, a.astype(np.uint8), one, np.uint8(0), one, z)
    with pytest.raises(ExecutionError, match="multiplier"):
        qnn_rescale.qnn_multiply(a, one, z, a, one, z, np.float32(0.0), z)


SOFTMAX_CASES = [  # dtype, shape, data scale, out zero point
    (np.int8, (1, 12, 128, 128), 0.11, -128),     # BERT-base's attention
    (np.uint8, (3, 7), 0.05, 0),
    (np.int8, (2, 1), 0.3, -128),
    (np.uint8, (4, 1000), 0.02, 0),               # numpy's pairwise sum past 128
    (np.int8, (5, 129), 1.7, 0),                  # wide range: the table's shift
]


@pytest.mark.parametrize("dtype, shape, x_scale, y_zero", SOFTMAX_CASES)
def test_qnn_softmax_matches_cpu_ref(dtype, shape, x_scale, y_zero):
    rng = np.random.default_rng(shape[-1])
    args = (rand_q(rng, dtype, shape), np.float32(x_scale), rand_q(rng, dtype, ()),
            np.float32(1 / 256), np.asarray(y_zero, dtype))
    want = ref("qnn.softmax")(*args, axis=-1)
    np.testing.assert_array_equal(qnn_rescale.qnn_softmax(*args), want)
    out, direct = prepared(qnn_rescale.qnn_softmax, args, shape, dtype, in_place=0)
    np.testing.assert_array_equal(out, want)
    assert direct
    # a new data scale at run time: the table follows it
    scaled = (args[0], np.float32(x_scale * 2), *args[2:])
    np.testing.assert_array_equal(qnn_rescale.qnn_softmax(*scaled),
                                  ref("qnn.softmax")(*scaled, axis=-1))


def test_qnn_softmax_refuses_another_axis():
    x = np.zeros((3, 4), np.int8)
    with pytest.raises(ExecutionError, match="last axis"):
        qnn_rescale.qnn_softmax(x, np.float32(0.1), np.int8(0), np.float32(1 / 256),
                                np.int8(-128), axis=0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_qnn_add_prepared_on_a_row_broadcast_operand_and_in_place(dtype):
    # a linear layer's bias (one row for every row) and a residual written over its operand
    rng = np.random.default_rng(5)
    for a_shape, b_shape, in_place in [((768,), (1, 128, 768), 3), ((2, 64), (2, 64), 0)]:
        args = binary_args(rng, dtype, a_shape, b_shape)
        want = ref("qnn.add")(*args)
        names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
        np.testing.assert_array_equal(want, run_qlinear("QLinearAdd", dict(zip(names, args)),
                                                        dtype))
        out, direct = prepared(qnn_elementwise.qnn_add, args, want.shape, dtype)
        np.testing.assert_array_equal(out, want)
        assert direct
        out, direct = prepared(qnn_elementwise.qnn_add, args, want.shape, dtype, in_place)
        np.testing.assert_array_equal(out, want)
        assert direct


def test_compiled_multiply_and_softmax_run_on_c_kernels():
    from legato.frontends import onnx as onnx_frontend
    tensor = helper.np_dtype_to_tensor_dtype
    consts = {"s": np.float32(0.05), "z": np.int8(3), "c": np.array([[2], [-1], [7]], np.int8),
              "cs": np.float32(0.5), "ys": np.float32(0.1), "yz": np.int8(-2),
              "ps": np.float32(1 / 256), "pz": np.int8(-128)}
    graph = helper.make_graph(
        [helper.make_node("QLinearMul", ["x", "s", "z", "c", "cs", "z", "ys", "yz"], ["m"],
                          domain="com.microsoft"),
         helper.make_node("QLinearSoftmax", ["m", "ys", "yz", "ps", "pz"], ["y"],
                          domain="com.microsoft", axis=-1, opset=13)], "g",
        [helper.make_tensor_value_info("x", tensor(np.dtype(np.int8)), [3, 40])],
        [helper.make_tensor_value_info("y", tensor(np.dtype(np.int8)), None)],
        [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    compiled = legato.compile(onnx_frontend.load(model), "c_kernels")
    assert compiled.report.per_backend["c_kernels"] == {"qnn.multiply": 1, "qnn.softmax": 1}
    x = rand_q(np.random.default_rng(9), np.int8, (3, 40))
    on_ref = legato.compile(onnx_frontend.load(model), "cpu_ref")
    np.testing.assert_array_equal(compiled(x), on_ref(x))


@pytest.mark.parametrize("a_shape, b_shape, one_call", [
    ((1, 12, 128, 64), (1, 12, 128, 64), True),    # attention's Q @ K^T, K^T a strided view
    ((2, 3, 5, 7), (7, 4), True),                   # a 2-D b folds every batch dim into M
    ((2, 1, 5, 7), (1, 3, 7, 4), False),            # a broadcast that does not fold: per matrix
    ((4, 5, 7), (1, 7, 6), True),                   # b repeated (batch stride 0)
])
def test_batched_qnn_matmul_is_one_c_call(a_shape, b_shape, one_call):
    from legato_c_kernels.kernels import qnn
    rng = np.random.default_rng(11)
    a = rand_q(rng, np.int8, a_shape)
    b = rand_q(rng, np.int8, b_shape)
    if a_shape == b_shape:
        b = np.swapaxes(b, -1, -2)
    args = (a, np.float32(0.02), np.int8(3), b, np.float32(0.03), np.int8(-2),
            np.float32(0.5), np.int8(1))
    want = ref("qnn.matmul")(*args)
    out = np.empty(want.shape, np.int8)
    run = qnn.qnn_matmul.bind(*args, out=out)
    run()
    np.testing.assert_array_equal(out, want)
    assert isinstance(run.__self__, qnn._QCall) == one_call
