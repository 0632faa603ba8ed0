"""Shared cases for the tosa_custom tests: one module per op, with TOSA 1.0 types."""
from __future__ import annotations

import numpy as np

import legato

from .test_cpu_ref_kernels import samples

KEEP = "tosa_custom"

# ops that have no lowering to standard TOSA 1.0 pro_fp (they can still be kept as custom)
NOT_LOWERED = {"argmax": "its int64 result is not a TOSA 1.0 type (TOSA ARGMAX gives int32)"}

# the example models of the external checks, with the ops kept as tosa.custom
MODEL_KEEPS = {"transformer": ["nn.layer_norm", "nn.softmax", "nn.gelu"],
               "mlp": ["nn.linear"],
               "cnn": ["nn.batch_norm", "nn.softmax"],
               "layernorm": ["nn.layer_norm"]}


def op_samples() -> dict:
    """op -> (inputs, attrs): cpu_ref's typical call per op, with TOSA types where cpu_ref's
    uses types TOSA 1.0 lacks (int64 indices, uint8 quantized tensors)."""
    cases = {op: (inputs, attrs) for op, (inputs, attrs, _) in samples().items()}
    x23 = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    x234 = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    cases["take"] = ((x234, np.array([[0, -1], [2, 1]], np.int32)), {"axis": 1})
    cases["qnn.quantize"] = ((x23, np.float32(0.1), np.int8(3)), {"axis": 1, "dtype": "int8"})
    inputs, attrs = cases["qnn.conv2d"]
    x, xs, _, w, ws, wz, ys, _, bias = inputs
    cases["qnn.conv2d"] = ((x.astype(np.int8), xs, np.int8(3), w, ws, wz, ys, np.int8(-5),
                            bias), attrs)
    return cases


def op_module(op: str, inputs, attrs):
    """(module, feeds): arrays of rank >= 1 are inputs, scalars constants."""
    b = legato.GraphBuilder()
    values, feeds = [], []
    for i, array in enumerate(inputs):
        if array is None:
            values.append(None)
        elif np.ndim(array) == 0:
            values.append(b.const(np.asarray(array)))
        else:
            array = np.asarray(array)
            values.append(b.input(f"x{i}", array.shape, array.dtype.name))
            feeds.append(array)
    out = b.call(op, *values, **attrs)
    return b.build(*(out if isinstance(out, tuple) else (out,))), feeds


def keep(*ops) -> dict:
    return {"backends": {KEEP: {"keep": list(ops)}}}


def as_tuple(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def assert_matches(actual, expected, rtol=1e-5):
    """Within `rtol` relative to each result's scale (TOSA and numpy round differently)."""
    for a, e in zip(as_tuple(actual), as_tuple(expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        if e.dtype == np.bool_ or np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(a, e)
        else:
            scale = float(np.max(np.abs(e))) if e.size else 0.0
            np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * max(scale, 1e-30))
