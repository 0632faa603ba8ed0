"""Reductions over axes that include size-1 dims (BiT's mean over [0, 2] of a batch of
one): the same values as the reference, and one prepared C call rather than a permuted
copy on every run."""
import numpy as np
import pytest

import legato
from legato_c_kernels import kernels as K


@pytest.mark.parametrize("shape,axes", [((1, 32, 288), [0, 2]), ((1, 8, 5, 5), [0, 2, 3]),
                                        ((1, 1, 7), [0, 1]), ((2, 1, 3), [1]),
                                        ((1, 4, 1, 6), [0, 2]), ((3, 1, 4), [0, 1, 2])])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_unit_axes_reduce_as_the_reference(shape, axes, op):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref = legato.context().backend("cpu_ref").kernel(op)
    for keepdims in (False, True):
        want = ref(x, axes=axes, keepdims=keepdims)
        got = K.KERNELS[op](x, axes=axes, keepdims=keepdims)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        out = np.zeros(want.shape, np.float32)
        run = K.KERNELS[op].bind(x, out=out, axes=axes, keepdims=keepdims)
        run()
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_a_batch_of_one_reduces_in_one_prepared_call():
    x = np.ones((1, 32, 288), np.float32)
    run = K.KERNELS["mean"].bind(x, out=np.zeros(32, np.float32), axes=[0, 2])
    assert getattr(run, "direct", False)
