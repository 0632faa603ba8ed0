"""Shared helpers of the c_kernels tests (float64 references, tolerances)."""

import math

import numpy as np

from legato_c_kernels._lib import lib

SIZES = (1, 3, 17, 129)


def assert_close(got, ref, rtol=1e-4, atol=None):
    """float32 result vs a float64 reference: relative 1e-4, with an absolute floor
    proportional to the data's magnitude for entries that cancel to ~0."""
    ref = np.asarray(ref, dtype=np.float64)
    assert got.dtype == np.float32
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if atol is None:
        finite = np.abs(ref[np.isfinite(ref)])
        atol = 1e-6 * max(1.0, float(finite.max()) if finite.size else 1.0)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)


def f32(rng, *shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)


def mm_ref(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def gemm_close(got, a, b, ref=None):
    """Error bound of a length-K float32 dot product: relative to |a| @ |b|."""
    ref = mm_ref(a, b) if ref is None else ref
    bound = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    k = a.shape[-1]
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.all(np.abs(got - ref) <= 1e-4 * np.abs(ref) + 4e-7 * max(k, 1) * bound + 1e-30)


def available_isas():
    isas = []
    for isa in (lib.LGK_ISA_GENERIC, lib.LGK_ISA_AVX2, lib.LGK_ISA_AVX512):
        if lib.lgk_gemm_force_isa(isa) == lib.LGK_OK:
            isas.append(isa)
    lib.lgk_gemm_force_isa(lib.LGK_ISA_AUTO)
    return isas


def gelu_ref(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


ACTS = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": gelu_ref,
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


def run_qlinear(op: str, values: dict, out_dtype):
    """onnxruntime's com.microsoft `op` (QLinearAdd, QLinearMul, ...) on `values` (input
    name -> array, in the op's input order), one thread; the callers skip without onnx."""
    import onnxruntime as ort
    from onnx import helper
    tensor = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [helper.make_node(op, list(values), ["y"], domain="com.microsoft")], "g",
        [helper.make_tensor_value_info(n, tensor(np.asarray(v).dtype), np.shape(v))
         for n, v in values.items()],
        [helper.make_tensor_value_info("y", tensor(np.dtype(out_dtype)), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {k: np.asarray(v) for k, v in values.items()})[0]


def two_conv_onnx(rng, size, second_strides):
    """An ONNX model of Conv 3x3 (32 -> 48) + Relu + Conv 3x3 (48 -> 64, `second_strides`),
    pads 1, on a (1, 32, size, size) input, and such an input."""
    from onnx import TensorProto, helper, numpy_helper
    w1, b1 = 0.1 * f32(rng, 48, 32, 3, 3), f32(rng, 48)
    w2, b2 = 0.1 * f32(rng, 64, 48, 3, 3), f32(rng, 64)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"),
                                                        (b2, "b2"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1],
                              strides=list(second_strides))]
    out = (size - 1) // second_strides[0] + 1
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       [1, 32, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, out, out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, f32(rng, 1, 32, size, size)
