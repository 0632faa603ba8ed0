"""The core API on arguments an outside fuzzer passes: each is refused by a LegatoError
naming the argument, never a failure deep inside legalization."""
from __future__ import annotations

import numpy as np
import pytest

import legato


def relu_module():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3), "float32")
    return b.build(b.call("nn.relu", x))


@pytest.mark.parametrize("entry", ["compile", "legalize"])
@pytest.mark.parametrize("level", [-1, -100])
def test_a_negative_max_level_is_refused_up_front(entry, level):
    """(it used to reach the primitives, which have no decomposition: a TypeError
    wrapped in a rule failure)"""
    with pytest.raises(legato.LegatoError, match="max_level must be an int >= 0"):
        if entry == "compile":
            legato.compile(relu_module(), "cpu_ref", max_level=level)
        else:
            legato.legalize(relu_module(), max_level=level)


def test_max_level_zero_lowers_to_primitives_that_still_compute():
    compiled = legato.compile(relu_module(), "cpu_ref", max_level=0)
    x = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    np.testing.assert_array_equal(compiled(x), np.maximum(x, 0))


@pytest.mark.parametrize("backend", ["c_kernels", ["c_kernels", "cpu_ref"]])
def test_a_recomposed_clip_keeps_its_bounds_bit_for_bit(backend):
    """maximum/minimum with constants are recomposed into clip for backends that have
    it; the bound came back as its 7-digit decimal (-0.9036096 for the float32
    -0.90360963), one ulp off, and clipped values came out one ulp off (fuzz: attrs)."""
    low = np.float32(-0.9036096334457397)
    b = legato.GraphBuilder()
    x = b.input("x", (3,), "float32")
    y = b.call("minimum", b.call("maximum", x, b.const(low)), b.const(np.float32(0.7)))
    data = np.array([-1.0, -0.5, 2.0], np.float32)
    got = legato.compile(b.build(y), backend)(data)
    np.testing.assert_array_equal(got, np.minimum(np.maximum(data, low), np.float32(0.7)))
    assert got[0].tobytes() == low.tobytes()


@pytest.mark.parametrize("kwargs", [{"count": 0}, {"count": -1}, {"count": "3"},
                                    {"count": 2.5}, {"count": 10 ** 12}, {"seed": -1},
                                    {"seed": "x"}, {"seed": None}])
def test_the_sample_kit_refuses_counts_and_seeds_it_cannot_use(kwargs):
    """(a str or float count was a raw TypeError, a negative seed numpy's ValueError, and
    a count of 10**12 a run that did not end)"""
    from legato.testing import SampleError, check_backend, samples
    with pytest.raises(SampleError, match="count must be|seed must be"):
        samples("add", **kwargs)
    with pytest.raises(SampleError, match="count must be|seed must be"):
        check_backend("cpu_ref", ["add"], **kwargs)


def test_the_sample_kit_refuses_an_op_that_is_not_a_name():
    from legato.testing import SampleError, samples
    with pytest.raises(SampleError, match="named by a string"):
        samples(None)


def test_difference_reports_shapes_and_dtypes_numpy_would_broadcast_or_cast():
    from legato.testing import difference
    ones = np.ones(3, np.float32)
    assert "float32[3] where the reference is float32[1]" in \
        difference("add", ones, np.ones(1, np.float32))
    assert "int32" in difference("add", ones, np.ones(3, np.int32))
    assert difference("add", np.float32(1.0), np.float32(1.0)) is None  # scalars are fine
    assert difference("add", ones, ones.copy()) is None


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_celu_with_a_negative_alpha_computes_its_formula(backend):
    """alpha * expm1(x / alpha) below 0 for any sign of alpha (the decomposition clamped
    x / alpha, which zeroed every x < 0 when alpha < 0; fuzz: attrs)."""
    b = legato.GraphBuilder()
    x = b.input("x", (3,), "float32")
    module = b.build(b.call("nn.celu", x, alpha=-1.0))
    data = np.array([-2.0, -0.5, 1.0], np.float32)
    want = np.where(data > 0, data, -np.expm1(-data)).astype(np.float32)
    np.testing.assert_allclose(legato.compile(module, backend)(data), want, rtol=1e-5)
