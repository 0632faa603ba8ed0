"""c_kernels executor reliability: results that alias each other or the inputs, inputs never
written, results never overwritten by a later call, zero-size tensors."""
import numpy as np
import pytest

import legato
from legato.frontends.examples import random_inputs

BACKENDS = ["c_kernels", ["c_kernels", "cpu_ref"]]


def _model(body, shapes=((2, 3),)):
    b = legato.GraphBuilder()
    xs = [b.input(f"x{i}", shape) for i, shape in enumerate(shapes)]
    return b.build(*body(b, *xs))


def _fallback(b, v):
    """An op c_kernels has no kernel for, so a partitioned build cuts the graph there."""
    return b.call("where", b.call("less", v, 0.0), v, 1.0)


# Each case returns results that share storage in a planned executor: a value with its
# views, a value twice, inputs and their views, views of views, views feeding later ops.
ALIASES = {
    "value and its reshape": lambda b, x: (
        s := b.call("sigmoid", x), b.call("reshape", s, shape=[6])),
    "reshape first": lambda b, x: (
        b.call("reshape", s := b.call("sigmoid", x), shape=[6]), s),
    "flatten": lambda b, x: (s := b.call("exp", x), b.call("flatten", s, axis=0)),
    "expand_dims": lambda b, x: (s := b.call("tanh", x), b.call("expand_dims", s, axes=[0])),
    "squeeze": lambda b, x: (
        s := b.call("expand_dims", b.call("exp", x), axes=[1]), b.call("squeeze", s, axes=[1]),
        s),
    "view chain": lambda b, x: (
        s := b.call("sigmoid", x),
        b.call("reshape", b.call("reshape", s, shape=[3, 2]), shape=[6]),
        b.call("reshape", s, shape=[1, 6])),
    "view read by a later op": lambda b, x: (
        s := b.call("sigmoid", x), b.call("exp", b.call("reshape", s, shape=[6]))),
    "same value twice": lambda b, x: (s := b.call("exp", x), s, s),
    "input and its reshape": lambda b, x: (x, b.call("reshape", x, shape=[3, 2])),
    "view of an input": lambda b, x: (b.call("reshape", x, shape=[6]), b.call("exp", x)),
    "input twice": lambda b, x: (x, b.call("negative", x), x),
    "in-place chain and its view": lambda b, x: (
        s := b.call("exp", b.call("negative", b.call("abs", x))),
        b.call("reshape", s, shape=[3, 2])),
    "gemm epilogue and its view": lambda b, x: (
        s := b.call("nn.relu", b.call("matmul", x, b.const(np.eye(3, 4, dtype=np.float32)))),
        b.call("reshape", s, shape=[8])),
    "fallback value and its view": lambda b, x: (
        s := _fallback(b, b.call("exp", x)), b.call("reshape", s, shape=[6]),
        b.call("sigmoid", s)),
    "view across a fallback": lambda b, x: (
        s := b.call("tanh", x), _fallback(b, b.call("reshape", s, shape=[3, 2])), s),
    "constant and its view": lambda b, x: (
        c := b.const(np.arange(6, dtype=np.float32).reshape(2, 3)),
        b.call("reshape", c, shape=[6]), b.call("add", x, c)),
    "linear constant weight": lambda b, x: (
        s := b.call("nn.linear", x, b.const(np.ones((5, 3), np.float32))),
        b.call("flatten", s, axis=0)),
}


def _check_against_reference(mod, backend, seeds=(1, 2, 3)):
    compiled = legato.compile(mod, backend)
    reference = legato.reference(mod)
    runs = []
    for seed in seeds:
        inputs = random_inputs(mod, seed)
        before = [a.copy() for a in inputs]
        got = legato.runtime.interpreter.as_tuple(compiled(*inputs))
        want = legato.runtime.interpreter.as_tuple(reference(*inputs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        for a, b in zip(inputs, before):  # the caller's inputs are never written
            np.testing.assert_array_equal(a, b)
        for g in got:  # the caller owns every result
            assert not any(np.shares_memory(g, a) for a in inputs)
            assert not any(np.shares_memory(g, h) for h in got if h is not g)
        runs.append((got, [g.copy() for g in got]))
    for got, kept in runs:  # later calls left earlier results alone
        for g, k in zip(got, kept):
            np.testing.assert_array_equal(g, k)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("case", sorted(ALIASES))
def test_aliased_results_match_the_reference(case, backend):
    _check_against_reference(_model(ALIASES[case]), backend)


def test_issue_repro_value_and_its_reshape():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    s = b.call("sigmoid", x)
    m = b.build(s, b.call("reshape", s, shape=[6]))
    got = legato.compile(m, backend="c_kernels")(np.full((2, 3), -.5, np.float32))
    np.testing.assert_allclose(got[1], np.full(6, 1 / (1 + np.exp(0.5))), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_inputs_that_die_early_are_not_reused_in_place(backend):
    """Elementwise ops write over a dying input's buffer; never over the caller's."""
    mod = _model(lambda b, x, y: (b.call("exp", b.call("add", x, y)),
                                  b.call("nn.softmax", b.call("multiply", y, y))),
                 shapes=((4, 5), (4, 5)))
    _check_against_reference(mod, backend)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_non_contiguous_and_read_only_inputs(backend):
    mod = _model(lambda b, x: (b.call("sigmoid", x), b.call("reshape", x, shape=[6])))
    compiled = legato.compile(mod, backend)
    base = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    strided = base[:2, :3]
    frozen = base[:2, :3].copy()
    frozen.flags.writeable = False
    for x in (strided, frozen, np.asfortranarray(frozen)):
        got = compiled(x)
        want = legato.reference(mod)(np.ascontiguousarray(x))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_array_equal(base, np.arange(12, dtype=np.float32).reshape(3, 4) / 10)


def _w(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)


def _conv(shape, weight, **attrs):
    return lambda b, x: (b.call("nn.conv2d", x, b.const(_w(*weight)),
                                b.const(_w(weight[0])), **attrs),)


def _pool(op, **attrs):
    return lambda b, x: (b.call(op, x, pool_size=[2, 2], strides=[1, 1], **attrs),)


# Zero-size tensors are valid everywhere: an empty output is an empty array of the
# inferred shape, and a non-empty output computed from empty inputs is what the
# reference computes (a sum over nothing: the bias).
ZERO_SIZE = {
    "linear, constant weight, no rows": ((0, 3), lambda b, x: (
        b.call("nn.linear", x, b.const(_w(4, 3)), b.const(_w(4))),)),
    "linear, no features": ((2, 0), lambda b, x: (
        b.call("nn.linear", x, b.const(_w(4, 0)), b.const(_w(4))),)),
    "matmul, constant weight, no rows": ((0, 3), lambda b, x: (
        b.call("nn.relu", b.call("matmul", x, b.const(_w(3, 4)))),)),
    "matmul epilogue, no inner dim": ((2, 0), lambda b, x: (
        b.call("nn.silu", b.call("add", b.call("matmul", x, b.const(_w(0, 3))),
                                 b.const(_w(3)))),)),
    "batched matmul, no batch": ((0, 2, 3), lambda b, x: (
        b.call("matmul", x, b.const(_w(3, 4))),)),
    "conv, no images": ((0, 2, 5, 5), _conv((0, 2, 5, 5), (3, 2, 3, 3))),
    "conv, no channels": ((1, 0, 5, 5), _conv((1, 0, 5, 5), (3, 0, 3, 3), padding=[1, 1, 1, 1])),
    "conv, no filters": ((1, 2, 5, 5), _conv((1, 2, 5, 5), (0, 2, 3, 3))),
    "conv, empty map, padded": ((1, 2, 0, 0), _conv((1, 2, 0, 0), (3, 2, 1, 1),
                                                    padding=[1, 1, 1, 1])),
    "conv, empty height, padded": ((1, 2, 0, 5), _conv((1, 2, 0, 5), (3, 2, 1, 1),
                                                       padding=[1, 1, 1, 1])),
    "conv, 1x1 map, larger kernel": ((1, 2, 1, 1), _conv((1, 2, 1, 1), (3, 2, 3, 3),
                                                         padding=[1, 1, 1, 1])),
    "max pool, no images": ((0, 2, 4, 4), _pool("nn.max_pool2d")),
    "max pool, no channels": ((1, 0, 4, 4), _pool("nn.max_pool2d", padding=[1, 1, 1, 1])),
    "avg pool, no images": ((0, 2, 4, 4), _pool("nn.avg_pool2d")),
    "avg pool, no channels": ((1, 0, 4, 4), _pool("nn.avg_pool2d")),
    "binary, broadcast to empty": ((2, 1), lambda b, x: (
        b.call("add", x, b.const(np.zeros(0, np.float32))),)),
    "softmax over an empty axis": ((2, 0), lambda b, x: (b.call("nn.softmax", x),)),
    "log_softmax, no rows": ((0, 3), lambda b, x: (b.call("nn.log_softmax", x, axis=0),)),
    "layer_norm, no rows": ((0, 3), lambda b, x: (b.call("nn.layer_norm", x, None, None),)),
    "rms_norm, no features": ((2, 0), lambda b, x: (
        b.call("nn.rms_norm", x, b.const(np.zeros(0, np.float32))),)),
    "sum, no rows": ((0, 3), lambda b, x: (b.call("sum", x, axes=[1]),)),
    "max, no rows": ((0, 3), lambda b, x: (b.call("max", x, axes=[1], keepdims=True),)),
    "permute, empty": ((0, 3, 2), lambda b, x: (b.call("permute_dims", x, axes=[2, 0, 1]),)),
    "reshape, empty": ((0, 3), lambda b, x: (b.call("exp", b.call("reshape", x, shape=[3, 0])),)),
}
UNARY = ["negative", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "nn.relu",
         "nn.gelu", "nn.silu"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power"]
ZERO_SIZE.update({f"{op}, empty": ((0, 3), lambda b, x, op=op: (b.call(op, x),))
                  for op in UNARY})
ZERO_SIZE.update({f"{op}, empty": ((0, 3), lambda b, x, op=op: (b.call(op, x, x),))
                  for op in BINARY})


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("case", sorted(ZERO_SIZE))
def test_zero_size_tensors_compute_like_the_reference(case, backend):
    shape, body = ZERO_SIZE[case]
    mod = _model(body, shapes=(shape,))
    assert legato.compile(mod, "c_kernels").report.ops("fallback") == {}  # C runs it all
    _check_against_reference(mod, backend, seeds=(1,))


@pytest.mark.parametrize("backend", BACKENDS + ["cpu_ref"], ids=str)
def test_non_native_byte_order_inputs_are_converted(backend):
    b = legato.GraphBuilder()
    x = b.input("x", (5, 6, 8))
    k = b.input("k", (5, 6, 8), "int64")
    mod = b.build(b.call("add", b.call("tanh", x), b.call("cast", k, dtype="float32")))
    compiled = legato.compile(mod, backend)
    data, ints = random_inputs(mod, 4)
    swapped = data.astype(data.dtype.newbyteorder())  # same values, other byte order
    swapped_ints = ints.astype(ints.dtype.newbyteorder())
    before = swapped.copy()
    want = compiled(data, ints)
    np.testing.assert_array_equal(compiled(swapped, swapped_ints), want)
    np.testing.assert_array_equal(compiled(k=swapped_ints, x=swapped), want)
    np.testing.assert_array_equal(swapped, before)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_refused_inputs_say_what_differs(backend):
    compiled = legato.compile("example:mlp", backend)
    x = np.zeros((8, 64), np.float32)
    cases = [(x.astype(">f8"), r"got float64\[8, 64\]: dtype float64 is not float32$"),
             (x[:, :63], r"got float32\[8, 63\]: shape \[8, 63\] is not \[8, 64\]$"),
             (x.astype(">f4")[:5], r"got float32\[5, 64\]: shape \[5, 64\] is not \[8, 64\]$"),
             ([[1, 2]], r"got int64\[1, 2\]: dtype int64 is not float32; shape \[1, 2\] is not")]
    for value, message in cases:
        with pytest.raises(legato.ExecutionError, match=r"input 'x' must be float32\[8, 64\], "
                                                        + message):
            compiled(value)
