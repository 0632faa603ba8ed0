"""A matmul whose only reader is a softmax over the last axis runs as one C call (the
softmax applied to each strip of rows while it is in cache), equal bit for bit to the
matmul and then the softmax; the cases where it must not fire stay two calls."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato_c_kernels import kernels as K
from legato_c_kernels.fusion import FUSION

NO_RECOMPOSE = {"backends": {"c_kernels": {"recompose": False}}}


def _attention(a_shape, b_shape, *, axis=-1, second_reader=False, returned=False,
               const_b=False):
    b = legato.GraphBuilder()
    q = b.input("q", a_shape)
    if const_b:
        k = b.const(np.random.default_rng(9).standard_normal(b_shape).astype(np.float32))
        inputs = (q,)
    else:
        k = b.input("k", b_shape)
        inputs = (q, k)
    scores = b.call("matmul", q, k)
    y = b.call("nn.softmax", scores, axis=axis)
    if second_reader:
        y = b.call("add", y, scores)
    outs = (y, scores) if returned else (y,)
    return b.build(*outs), len(inputs)


def _fused(module) -> list:
    return [fn for fn in module.functions.values()
            if fn.kind == "primitive" and fn.attrs.get("fusion") == FUSION
            and fn.attrs.get("softmax")]


def _args(mod, n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(p.shape) * 3).astype(np.float32) for p in mod.main.params[:n]]


SHAPES = [((1, 6, 37, 64), (1, 6, 64, 150)),   # attention, M/N off the tile
          ((2, 3, 50, 16), (3, 16, 29)),       # batch broadcast
          ((4, 1, 9, 8), (1, 3, 8, 4)),        # both sides broadcast
          ((3, 5), (5, 7)),                    # 2-D
          ((1, 2), (2, 1)), ((4, 3), (3, 2)),  # tiny
          ((2, 130, 70), (2, 70, 2049))]       # N past a column panel


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
def test_fused_equals_matmul_then_softmax(monkeypatch, threads, a_shape, b_shape):
    monkeypatch.setenv("LEGATO_NUM_THREADS", threads)
    for axis in (-1, max(len(a_shape), len(b_shape)) - 1):
        mod, n = _attention(a_shape, b_shape, axis=axis)
        c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
        assert len(_fused(c.module)) == 1
        assert [call.op for _, call, _ in c._runner.steps] == ["matmul"]  # one C call
        args = _args(mod, n)
        got = c(*args)
        # the same two C calls unfused: bit for bit
        np.testing.assert_array_equal(got, K.nn_softmax(K.matmul(*args), axis=-1))
        ref = legato.compile(mod, "cpu_ref")(*args)
        # scores of ~|50|: float32 sums in another order move them by ~1e-5, their exps
        # by as much relatively
        np.testing.assert_allclose(got, ref, rtol=5e-4, atol=1e-6)
        s = np.matmul(*[x.astype(np.float64) for x in args])
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=5e-4,
                                   atol=1e-6)


@pytest.mark.parametrize("why,kwargs", [
    ("another axis", {"axis": -2}),
    ("the scores read again", {"second_reader": True}),
    ("the scores a graph output", {"returned": True}),
    ("a constant (packed) B", {"const_b": True}),
])
def test_not_fused(why, kwargs):
    mod, n = _attention((2, 9, 8), (2, 8, 11), **kwargs)
    c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
    assert not _fused(c.module), why
    args = _args(mod, n, seed=1)
    got, ref = c(*args), legato.compile(mod, "cpu_ref")(*args)
    for g, r in zip(got if isinstance(got, tuple) else (got,),
                    ref if isinstance(ref, tuple) else (ref,)):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=1e-5)


def test_int_matmul_not_fused():
    b = legato.GraphBuilder()
    q, k = b.input("q", (3, 4), "int32"), b.input("k", (4, 5), "int32")
    y = b.call("nn.softmax", b.call("cast", b.call("matmul", q, k), dtype="float32"))
    c = legato.compile(b.build(y), "c_kernels", config=NO_RECOMPOSE)
    assert not _fused(c.module)


def test_symbolic_batch():
    mod, n = _attention((5, 12, 8), (5, 8, 13))
    text = str(mod).replace("[5, 12, 8]", "[b, 12, 8]").replace("[5, 8, 13]", "[b, 8, 13]") \
        .replace("[5, 12, 13]", "[b, 12, 13]")
    mod = legato.parse(text)
    c = legato.compile(mod, "c_kernels", config=NO_RECOMPOSE)
    assert len(_fused(c.module)) == 1
    ref = legato.compile(mod, "cpu_ref")
    rng = np.random.default_rng(5)
    for batch in (1, 3, 7):
        args = [rng.standard_normal((batch, 12, 8)).astype(np.float32),
                rng.standard_normal((batch, 8, 13)).astype(np.float32)]
        np.testing.assert_allclose(c(*args), ref(*args), rtol=2e-5, atol=1e-6)
