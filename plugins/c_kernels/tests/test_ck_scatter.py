"""c_kernels scatter_elements (no reduction): the numpy assignment against the reference
kernel, through the kernel, its prepared call and a compiled module."""
import numpy as np
import pytest

import legato
from legato.ir.errors import LegatoError
from legato_c_kernels import kernels as K
from legato_cpu_ref.indexing import scatter_elements as reference


@pytest.mark.parametrize("shape,ishape,axis", [((32, 64), (31, 64), 0), ((5, 7), (5, 3), 1),
                                                 ((4, 3, 6), (2, 3, 6), -3), ((3,), (2,), 0)])
def test_scatter_matches_the_reference(shape, ishape, axis):
    rng = np.random.default_rng(7)
    data = rng.standard_normal(shape).astype(np.float32)
    dim = shape[axis]
    indices = rng.integers(-dim, dim, ishape)  # negative ids and repeats included
    updates = rng.standard_normal(ishape).astype(np.float32)
    want = reference(data, indices, updates, axis=axis)
    assert np.array_equal(K.KERNELS["scatter_elements"](data, indices, updates, axis=axis), want)
    out = np.full(shape, np.nan, np.float32)
    run = K.KERNELS["scatter_elements"].bind(data, indices, updates, out=out, axis=axis)
    indices[...] = rng.integers(-dim, dim, ishape)  # a run reads the buffers as they are then
    run()
    assert np.array_equal(out, reference(data, indices, updates, axis=axis))


def test_scatter_refuses_ids_out_of_range():
    data = np.zeros((4, 2), np.float32)
    with pytest.raises(LegatoError, match="out of range"):
        K.KERNELS["scatter_elements"](data, np.array([[4, 0]]), np.ones((1, 2), np.float32))
    with pytest.raises(LegatoError, match="out of range"):
        K.KERNELS["scatter_elements"](data, np.array([[0, -5]]), np.ones((1, 2), np.float32))


def test_compiled_scatter_runs_natively_and_reductions_fall_back():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((6, 4)).astype(np.float32)
    indices = rng.integers(-6, 6, (5, 4))
    updates = rng.standard_normal((5, 4)).astype(np.float32)
    for reduction in ("none", "add"):
        b = legato.GraphBuilder()
        x = b.input("x", data.shape)
        i = b.input("i", indices.shape, "int64")
        u = b.input("u", updates.shape)
        module = b.build(b.call("scatter_elements", x, i, u, axis=0, reduction=reduction))
        compiled = legato.compile(module, "c_kernels")
        ops = {step.call.op for step in compiled._runner.prototype.steps
               if step.touches and step.touches[0].role is not None}
        assert ("scatter_elements" in ops) == (reduction == "none")  # native: inputs in kernel roles
        got = compiled(data, indices, updates)
        assert np.array_equal(got, legato.reference(module)(data, indices, updates))
