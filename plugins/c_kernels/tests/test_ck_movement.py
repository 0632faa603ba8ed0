"""Data movement and comparison kernels (kernels/movement.py): every dtype the kit's
samples draw, as the reference kernels, through the kernel and its prepared `bind`."""
import numpy as np
import pytest

import legato
from legato.ir.errors import LegatoError
from legato.testing import samples
from legato_c_kernels import kernels as K
from legato_c_kernels.kernels import movement


def _reference(op):
    return legato.context().backend("cpu_ref").kernel(op)


def _cases(op):
    cases = [s for s in samples(op, count=24)
             if op != "pad" or s.attrs.get("mode", "constant") == "constant"]
    assert cases, op
    return cases


@pytest.mark.parametrize("op", sorted(movement.KERNELS))
def test_matches_reference_kernel(op):
    kernel, ref = K.KERNELS[op], _reference(op)
    for sample in _cases(op):
        inputs, attrs = tuple(sample.inputs), dict(sample.attrs)
        want = ref(*inputs, **attrs)
        got = kernel(*inputs, **attrs)
        for g, w in zip(want if isinstance(want, tuple) else (want,),
                        got if isinstance(got, tuple) else (got,)):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", sorted(movement.KERNELS))
def test_prepared_calls_follow_their_buffers(op):
    """bind fixes the buffers, not their values: a run after the inputs change
    computes from the new values."""
    kernel, ref = K.KERNELS[op], _reference(op)
    for sample in _cases(op)[:6]:
        inputs = [np.copy(x) for x in sample.inputs]
        attrs = dict(sample.attrs)
        want = ref(*inputs, **attrs)
        wants = want if isinstance(want, tuple) else (want,)
        outs = [np.empty(w.shape, w.dtype) for w in wants]
        if len(outs) == 1:
            run = kernel.bind(*inputs, out=outs[0], **attrs)
        else:
            run = kernel.bind_outs(*inputs, outs=outs, **attrs)
        data = inputs[0]
        if data.dtype.kind == "f" and data.size:  # new values in the bound buffer
            data[...] = np.arange(data.size, dtype=data.dtype).reshape(data.shape)
            wants = ref(*inputs, **attrs)
            wants = wants if isinstance(wants, tuple) else (wants,)
        run()
        for out, w in zip(outs, wants):
            np.testing.assert_array_equal(out, w)


def test_pad_refills_its_border_every_run():
    x = np.ones((2, 3), np.float32)
    out = np.empty((4, 4), np.float32)
    run = K.KERNELS["pad"].bind(x, out=out, pads=[1, 0, 1, 1], value=-2.0)
    run()
    out[...] = 99.0  # the arena may lend the buffer to another value in between
    run()
    np.testing.assert_array_equal(out, np.pad(x, ((1, 1), (0, 1)), constant_values=-2.0))


def test_take_ids_out_of_range_are_errors():
    table = np.zeros((5, 3), np.float32)
    ids = np.array([0, 5])
    with pytest.raises(LegatoError, match="take"):
        K.KERNELS["take"](table, ids)
    out = np.empty((2, 3), np.float32)
    run = K.KERNELS["take"].bind(table, np.array([0, 1]), out=out)
    run()
    with pytest.raises(LegatoError, match="float"):
        K.KERNELS["take"](table, np.array([0.0]))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_large_gathers_into_out_match_numpy_and_check_their_ids(axis):
    """Gathers of 64 KiB and more check the ids once and write straight into out."""
    rng = np.random.default_rng(3)
    table = rng.standard_normal((6, 40, 70)).astype(np.float32)
    n = table.shape[axis]
    ids = np.array([[0, -1, n - 1, 2], [-n, 1, 1, 0]] * 12, dtype=np.int64)
    want = np.take(table, ids, axis=axis)
    out = np.empty(want.shape, np.float32)
    assert out.nbytes >= movement._DIRECT_TAKE_BYTES
    run = K.KERNELS["take"].bind(table, ids, out=out, axis=axis)
    run()
    np.testing.assert_array_equal(out, want)
    for bad in (n, -n - 1):
        ids[-1, -1] = bad
        with pytest.raises(LegatoError, match=f"index {bad} is out of bounds"):
            run()
        with pytest.raises(LegatoError, match=f"index {bad}"):
            K.KERNELS["take"](table, ids, axis=axis, out=out)


def test_wrong_out_is_an_error():
    with pytest.raises(LegatoError, match="strided_slice"):
        K.KERNELS["strided_slice"](np.zeros((4, 4), np.float32), begin=[1], end=[3],
                                   out=np.empty((3, 4), np.float32))


def test_llama_rotary_halves_run_natively():
    """The rotary-embedding halves (strided_slice, concat) and the causal mask
    (comparisons, where) stay on c_kernels instead of falling back."""
    b = legato.GraphBuilder()
    x = b.input("x", (2, 4, 8))
    lo = b.call("strided_slice", x, begin=[0], end=[4], axes=[2])
    hi = b.call("strided_slice", x, begin=[4], end=[8], axes=[2])
    rot = b.call("concat", b.call("negative", hi), lo, axis=2)
    mask = b.call("less", x, 0.0)
    mod = b.build(b.call("where", mask, rot, x))
    c = legato.compile(mod, "c_kernels")
    assert not c.report.ops("fallback")
    x_in = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(c(x_in), legato.reference(mod)(x_in))


def test_where_in_place_over_its_else_operand():
    """A planned where may write over y (it dies there): x where cond holds, y elsewhere."""
    rng = np.random.default_rng(1)
    cond = rng.uniform(size=(4, 5)) < 0.5
    y = rng.standard_normal((4, 5)).astype(np.float32)
    want = np.where(cond, np.float32(-3.0), y)
    run = K.KERNELS["where"].bind(cond, np.array(-3.0, np.float32), y, out=y)
    run()
    np.testing.assert_array_equal(y, want)
    x = rng.standard_normal((4, 5)).astype(np.float32)  # over x: the plain kernel
    want = np.where(cond, x, np.float32(2.0))
    K.KERNELS["where"].bind(cond, x, np.array(2.0, np.float32), out=x)()
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
@pytest.mark.parametrize("shape, axes", [((6, 1500, 64), (1, 0, 2)), ((384, 1500), (1, 0)),
                                         ((1, 56, 56, 96), (0, 3, 1, 2))])
def test_permutes_split_over_threads_match_numpy(monkeypatch, dtype, shape, axes):
    """Copies past 256 KiB run in slabs of their outermost dim on every thread."""
    data = (np.arange(np.prod(shape)) % 251).astype(dtype).reshape(shape)
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
        np.testing.assert_array_equal(K.KERNELS["permute_dims"](data, axes=axes),
                                      np.transpose(data, axes))
