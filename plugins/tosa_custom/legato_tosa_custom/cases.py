"""Cases for testing tosa_custom: its tests and fuzz targets share them.

One typical call per op in TOSA 1.0 types, picked from legato.testing's samples (drawn
from the op definitions, so a new op gets a case without an edit here), as a one-call
module; the configs that keep ops as tosa.custom; a comparison within a relative bound.
"""
from __future__ import annotations

import numpy as np

import legato
from legato.plugin_api import CUSTOM_OP, difference, samples

from . import ops
from .emitter import BACKEND
from .limits import CUSTOM_DTYPES, type_problem
from .narrowing import tosa_dtype
from .lowering import NOT_LOWERED

KEEP = BACKEND

# the example models of the external checks, with the ops kept as tosa.custom
MODEL_KEEPS = {"transformer": ["nn.layer_norm", "nn.softmax", "nn.gelu"],
               "mlp": ["nn.linear"],
               "cnn": ["nn.batch_norm", "nn.softmax"],
               "layernorm": ["nn.layer_norm"]}

# the element types a case may use, tried in order: floats with bool and int32 indices
# first, the quantized types only for the ops that need them
CASE_DTYPES = (("float32", "bool", "int32"), ("float32", "bool", "int32", "int8", "int16"))


def keep(*ops_kept) -> dict:
    """A config keeping these ops (tunnelled as tosa.custom when TOSA has no form)."""
    return {"backends": {KEEP: {"keep": list(ops_kept)}}}


def own_ops() -> set[str]:
    """The ops this plugin registers (TOSA semantics; cpu_ref has no kernels for them)."""
    names: set[str] = set()
    ops.register_all(lambda opdef: names.add(opdef.name))
    return names


def core_ops(registry=None) -> list[str]:
    """The ops the core defines (not a plugin's), the custom-op tunnel aside."""
    registry = registry or legato.context().registry
    own = own_ops()
    return [o.name for o in registry.ops() if getattr(o, "plugin", None) is None
            and o.name not in own and o.name != CUSTOM_OP]


def lowered_ops() -> list[str]:
    """The core ops tosa_custom lowers to standard TOSA (all but NOT_LOWERED)."""
    return [op for op in core_ops() if op not in NOT_LOWERED]


def tosa_sample(op: str):
    """The first sample of `op` whose inputs TOSA 1.0 pro_fp holds (non-empty, rank up
    to 6, in CASE_DTYPES) and whose results a tosa.custom can carry, with a first input of
    rank >= 1 (it becomes a module input)."""
    drawn = samples(op)
    for dtypes in CASE_DTYPES:
        for sample in drawn:
            inputs = [t for t in sample.input_types() if t is not None]
            if inputs[0].rank >= 1 and \
                    all(t.dtype in dtypes and type_problem(t) is None for t in inputs) and \
                    all(type_problem(t, CUSTOM_DTYPES) is None for t in sample.outputs):
                return sample
    raise LookupError(f"{op}: no sample in TOSA 1.0 types among {len(drawn)}")


def op_module(op: str, inputs, attrs):
    """(module, feeds): arrays of rank >= 1 are inputs, 0-d arrays constants."""
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


def sample_module(op: str):
    """(module, feeds) of `op`'s TOSA-typed sample."""
    sample = tosa_sample(op)
    return op_module(op, sample.inputs, dict(sample.attrs))


def assert_within_bound(op: str, actual, expected):
    """Each result of `op` within the op's error bound of the reference (NaN for NaN);
    the comparison of legato.testing's conformance kit."""
    actual, expected = as_tuple(actual), as_tuple(expected)
    assert len(actual) == len(expected), (len(actual), len(expected))
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = widened(a, e.dtype)
        assert a.shape == e.shape and a.dtype == e.dtype, (i, a.shape, a.dtype, e.shape, e.dtype)
        problem = difference(op, a, e)
        assert problem is None, f"{op} result {i}: {problem}"


def widened(array, dtype):
    """A result of the emitted module as the int64 it stands for, when it is one."""
    dtype = np.dtype(dtype)
    if array.dtype != dtype and tosa_dtype(dtype.name) == array.dtype.name:
        return array.astype(dtype)
    return array


def as_tuple(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def assert_matches(actual, expected, rtol=1e-5):
    """Within `rtol` relative to each result's scale (TOSA and numpy round differently);
    an int64 result is the int32 the module returns (narrowing.py)."""
    for a, e in zip(as_tuple(actual), as_tuple(expected), strict=True):
        assert a.shape == e.shape and tosa_dtype(a.dtype.name) == tosa_dtype(e.dtype.name), \
            (a.shape, a.dtype, e.shape, e.dtype)
        if e.dtype == np.bool_ or np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(a, e)
        else:
            finite = np.abs(e[np.isfinite(e)])  # NaN and infinities compare as themselves
            scale = float(np.max(finite)) if finite.size else 0.0
            np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * max(scale, 1e-30))
