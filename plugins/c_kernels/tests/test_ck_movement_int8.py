"""permute_dims of int8/uint8 (and the other non-float32 dtypes it takes: int16, int32,
int64, bool) through the C copy of raw elements (csrc/movement.c), against numpy:
ranks 2-5, every permutation of small ranks, empty and size-1 dims, tiles of 16 and
their edges, non-contiguous inputs, and the prepared call of a planned executor."""
import itertools

import numpy as np
import pytest

import legato
from legato.ir.errors import LegatoError
from legato_c_kernels import kernels as K

DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_]
SHAPES = [(33, 18), (16, 1, 35), (2, 0, 3), (1, 17, 40, 1), (3, 18, 2, 33), (2, 3, 1, 17, 16),
          (1, 1), (5, 32, 16)]


def _data(shape, dtype, seed=0):
    values = np.random.default_rng(seed).integers(-128, 128, size=shape)
    return (values > 0) if dtype == np.bool_ else values.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_permutations_match_numpy(dtype, shape):
    x = _data(shape, dtype)
    perms = list(itertools.permutations(range(x.ndim)))
    for perm in perms if len(perms) <= 24 else perms[::7]:
        got = K.permute_dims(x, axes=list(perm))
        assert got.dtype == x.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, np.transpose(x, perm))
    np.testing.assert_array_equal(K.permute_dims(x), np.transpose(x))  # axes=None reverses


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32], ids=lambda d: np.dtype(d).name)
def test_non_contiguous_inputs(dtype):
    """Strided views (every other column, a reversed axis, a transposed view) as numpy."""
    x = _data((6, 34, 40), dtype, seed=1)
    for view in (x[:, :, ::2], x[:, ::-1], x.transpose(2, 0, 1), x[1:5, 3:35:3, 7:]):
        for perm in [(0, 2, 1), (2, 1, 0), (1, 0, 2), (1, 2, 0)]:
            np.testing.assert_array_equal(K.permute_dims(view, axes=perm),
                                          np.transpose(view, perm))


def test_out_buffer_and_prepared_call():
    """The caller's out is filled; a bound call follows new input values."""
    x = _data((12, 64, 32), np.int8, seed=2)
    out = np.zeros((32, 12, 64), np.int8)
    assert K.permute_dims(x, axes=[2, 0, 1], out=out) is out
    np.testing.assert_array_equal(out, np.transpose(x, (2, 0, 1)))
    run = K.permute_dims.bind(x, out=out, axes=[2, 0, 1])
    x[...] = _data(x.shape, np.int8, seed=3)
    run()
    np.testing.assert_array_equal(out, np.transpose(x, (2, 0, 1)))
    assert getattr(run, "direct", False)  # one prepared C call, not numpy


def test_refusals():
    x = _data((2, 3), np.int8)
    with pytest.raises(LegatoError, match="permute_dims.*int8"):
        K.permute_dims(x, axes=[1, 0], out=np.empty((3, 2), np.uint8))
    with pytest.raises(LegatoError, match="permute_dims.*float64"):
        K.permute_dims(x.astype(np.float64), axes=[1, 0])
    with pytest.raises(LegatoError, match="permutation"):
        K.permute_dims(x, axes=[0, 0])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_a_compiled_model_runs_the_permute_in_c(dtype):
    """Declared legal for the dtype: the step is c_kernels' prepared C call, not the
    fallback's numpy kernel (quantized attention's head split and key transpose)."""
    b = legato.GraphBuilder()
    v = b.input("v", (1, 128, 12, 64), dtype)
    heads = b.call("permute_dims", v, axes=[0, 2, 1, 3])
    module = b.build(b.call("permute_dims", heads, axes=[0, 1, 3, 2]))
    compiled = legato.compile(module, "c_kernels")
    assert not compiled.report.ops("fallback")
    steps = compiled._runner.prototype.steps
    assert [s.call.op for s in steps] == ["permute_dims"] * 2
    assert all(getattr(s.run, "direct", False) for s in steps)
    x = _data((1, 128, 12, 64), np.dtype(dtype).type, seed=4)
    np.testing.assert_array_equal(compiled(x), np.transpose(x, (0, 2, 3, 1)))
