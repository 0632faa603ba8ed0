"""qnn.add's C kernel (csrc/qelementwise.c) against onnxruntime's com.microsoft QLinearAdd,
bit for bit: same shapes, a per-channel residual and a scalar on either side, general
broadcasting, saturation and ties; compiled models keep the op on c_kernels."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato.ir.errors import ExecutionError
from ck_util import run_qlinear
from legato_c_kernels.kernels import qnn_elementwise

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402


def run_qlinear_add(a, a_s, a_z, b, b_s, b_z, y_s, y_z):
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
    return run_qlinear("QLinearAdd", dict(zip(names, (a, a_s, a_z, b, b_s, b_z, y_s, y_z))),
                       a.dtype)


def rand_q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


CASES = [  # dtype, a shape, b shape
    (np.int8, (1, 64, 28, 28), (1, 64, 28, 28)),     # a residual add
    (np.uint8, (2, 3, 1000), (2, 3, 1000)),
    (np.int8, (1, 16, 9, 9), (1, 16, 1, 1)),         # one value per row, on either side
    (np.uint8, (1, 16, 1, 1), (1, 16, 9, 9)),
    (np.int8, (), (5, 7)),                           # a scalar
    (np.uint8, (4, 7), (1,)),
    (np.int8, (3, 1, 5), (4, 5)),                    # general broadcasting
    (np.uint8, (200, 700), (200, 700)),              # past the threading threshold
]


@pytest.mark.parametrize("dtype, a_shape, b_shape", CASES)
def test_qnn_add_matches_onnxruntime(dtype, a_shape, b_shape):
    rng = np.random.default_rng(len(a_shape) * 31 + len(b_shape))
    for trial in range(3):
        a, b = rand_q(rng, dtype, a_shape), rand_q(rng, dtype, b_shape)
        params = (np.float32(rng.uniform(0.01, 0.2)), rand_q(rng, dtype, ()),
                  np.float32(rng.uniform(0.01, 0.2)), rand_q(rng, dtype, ()),
                  np.float32(rng.uniform(0.02, 0.3)), rand_q(rng, dtype, ()))
        a_s, a_z, b_s, b_z, y_s, y_z = params
        want = run_qlinear_add(a, a_s, a_z, b, b_s, b_z, y_s, y_z)
        got = qnn_elementwise.qnn_add(a, a_s, a_z, b, b_s, b_z, y_s, y_z)
        np.testing.assert_array_equal(got, want)
        out = np.empty(want.shape, dtype)   # the prepared call, scales re-read per run
        qnn_elementwise.qnn_add.bind(a, a_s, a_z, b, b_s, b_z, y_s, y_z, out=out)()
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype, shape", [
    (np.int8, (1, 2048, 7, 7)),   # ResNet-50's last residual: rows of 7, in runs of 16 Ki
    (np.uint8, (3, 5, 1111)),     # one run and 281 more
])
def test_dense_qnn_add_in_runs_matches_cpu_ref_and_onnxruntime_off_ties(dtype, shape):
    """Dense operands run as one stretch in runs of 16 Ki elements, not row by row. Equal
    to cpu_ref's add; onnxruntime 1.32 rounds some exact ties (x.5) of large inputs up, not
    to even (-103.5 -> -103), so it is compared off the ties."""
    from legato_cpu_ref import quantized
    rng = np.random.default_rng(11)
    for trial in range(3):
        a, b = rand_q(rng, dtype, shape), rand_q(rng, dtype, shape)
        a_s, b_s, y_s = (np.float32(rng.uniform(lo, hi)) for lo, hi in
                         ((0.01, 0.2), (0.01, 0.2), (0.02, 0.3)))
        a_z, b_z, y_z = (rand_q(rng, dtype, ()) for _ in range(3))
        got = qnn_elementwise.qnn_add(a, a_s, a_z, b, b_s, b_z, y_s, y_z)
        np.testing.assert_array_equal(got, quantized.add(a, a_s, a_z, b, b_s, b_z, y_s, y_z))
        exact = (a.astype(np.float64) - a_z) * (a_s / y_s) \
            + (b.astype(np.float64) - b_z) * (b_s / y_s) + y_z
        off_tie = np.abs(exact - np.floor(exact) - 0.5) > 1e-3
        want = run_qlinear_add(a, a_s, a_z, b, b_s, b_z, y_s, y_z)
        np.testing.assert_array_equal(got[off_tie], want[off_tie])


def test_qnn_add_saturates_and_rounds_ties_to_even():
    a = np.array([0, 1, 3, 5, 127, -128], np.int8)
    b = np.array([0, 0, 0, 0, 127, -128], np.int8)
    args = (a, np.float32(0.5), np.int8(0), b, np.float32(1.0), np.int8(0), np.float32(1.0),
            np.int8(0))
    want = run_qlinear_add(*args)
    np.testing.assert_array_equal(qnn_elementwise.qnn_add(*args), want)
    np.testing.assert_array_equal(want[:4], [0, 0, 2, 2])
    assert want[4] == 127 and want[5] == -128


def test_qnn_add_refuses_bad_inputs():
    a = np.zeros((2, 3), np.int8)
    one, z8, zu8 = np.float32(1.0), np.int8(0), np.uint8(0)
    with pytest.raises(ExecutionError, match="must share one dtype"):
        qnn_elementwise.qnn_add(a, one, z8, a.astype(np.uint8), one, zu8, one, z8)
    with pytest.raises(ExecutionError, match="do not broadcast"):
        qnn_elementwise.qnn_add(a, one, z8, np.zeros((4,), np.int8), one, z8, one, z8)
    with pytest.raises(ExecutionError, match="a_scale must hold one value"):
        qnn_elementwise.qnn_add(a, np.ones(2, np.float32), z8, a, one, z8, one, z8)
    with pytest.raises(ExecutionError, match="out_zero_point must have dtype int8"):
        qnn_elementwise.qnn_add(a, one, z8, a, one, z8, one, zu8)


def test_compiled_qnn_add_runs_on_c_kernels():
    from legato.frontends import onnx as onnx_frontend
    rng = np.random.default_rng(3)
    a, b = rand_q(rng, np.int8, (1, 8, 6, 6)), rand_q(rng, np.int8, (1, 8, 6, 6))
    params = (np.float32(0.05), np.int8(3), np.float32(0.07), np.int8(-5), np.float32(0.1),
              np.int8(2))
    tensor = helper.np_dtype_to_tensor_dtype
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names[4:], params[2:])]
    inits += [onnx.numpy_helper.from_array(np.asarray(v), n)
              for n, v in zip(["a_s", "a_z"], params[:2])]
    graph = helper.make_graph(
        [helper.make_node("QLinearAdd", names, ["y"], domain="com.microsoft")], "g",
        [helper.make_tensor_value_info(n, tensor(np.dtype(np.int8)), [1, 8, 6, 6]) for n in "ab"],
        [helper.make_tensor_value_info("y", tensor(np.dtype(np.int8)), None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    compiled = legato.compile(onnx_frontend.load(model), "c_kernels")
    assert [call.op for call in compiled.module.main.calls] == ["qnn.add"]
    assert compiled.report.per_backend["c_kernels"] == {"qnn.add": 1}
    want = run_qlinear_add(a, params[0], params[1], b, *params[2:])
    np.testing.assert_array_equal(compiled(a, b), want)
