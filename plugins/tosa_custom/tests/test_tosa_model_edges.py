"""Shapes real models give tosa_custom that its own cases did not: concats wider than one
TOSA CONCAT takes (an LSTM unrolled over 75 frames), pooling windows larger than their
input (EfficientNet's pooler), float64 constant subgraphs (position tables)."""
from __future__ import annotations

import numpy as np
import pytest

import legato
from legato_tosa_custom.cases import KEEP, assert_matches
from legato_tosa_custom.limits import MAX_TENSOR_LIST


def wide_concat(count, dtype="float32", axis=1):
    b = legato.GraphBuilder()
    shapes = [(2, 1 + i % 3)[::1 if axis else -1] for i in range(count)]
    xs = [b.input(f"x{i}", shape, dtype) for i, shape in enumerate(shapes)]
    return b.build(b.concat(*xs, axis=axis))


@pytest.mark.parametrize("count", [75, 200])
def test_concat_of_more_operands_than_tosa_takes_is_a_tree(tools, count):
    module = wide_concat(count)
    text = legato.compile(module, backend=KEEP).artifact
    groups = -(-count // MAX_TENSOR_LIST)
    assert text.count('tosa.concat') == groups + 1
    rng = np.random.default_rng(count)
    feeds = [rng.standard_normal(p.shape).astype(np.float32) for p in module.main.params]
    (out,) = tools.run_reference(text, feeds, validate=True)
    np.testing.assert_array_equal(out, np.concatenate(feeds, axis=1))


def test_concat_tree_of_integers_and_of_thousands_of_operands():
    module = wide_concat(MAX_TENSOR_LIST**2 + 3, axis=0)
    text = legato.compile(module, backend=KEEP).artifact  # two levels of groups
    assert text.count('tosa.concat') == MAX_TENSOR_LIST + 2 + 1
    ints = wide_concat(70, "int32")
    feeds = [np.arange(np.prod(p.shape), dtype=np.int32).reshape(p.shape) + i
             for i, p in enumerate(ints.main.params)]
    from legato_tosa_custom.kernels import simulate
    compiled = legato.compile(ints, backend=KEEP)
    assert_matches(simulate(compiled.module)(*feeds), np.concatenate(feeds, axis=1))


def pool(op, shape, **attrs):
    b = legato.GraphBuilder()
    return b.build(b.call(op, b.input("x", shape), **attrs))


@pytest.mark.parametrize("op, reduce", [("nn.avg_pool2d", np.mean), ("nn.max_pool2d", np.max)])
def test_ceil_mode_window_larger_than_the_map_is_one_tosa_pool(tools, op, reduce):
    """EfficientNet's pooler: AvgPool2d(1280, ceil_mode=True) over a 7 x 7 map is one
    window over the whole map (as in PyTorch), one TOSA pool with a 7 x 7 kernel."""
    module = pool(op, (1, 3, 7, 7), pool_size=[1280, 1280], ceil_mode=True)
    text = legato.compile(module, backend=KEEP).artifact
    assert text.count(f"tosa.{op[3:]}") == 1 and "kernel = array<i64: 7, 7>" in text
    x = np.random.default_rng(0).standard_normal((1, 3, 7, 7)).astype(np.float32)
    (out,) = tools.run_reference(text, [x], validate=True)
    assert_matches(out, reduce(x, axis=(2, 3), keepdims=True))


def test_ceil_mode_window_larger_than_the_padded_map_with_padding_and_dilation(tools):
    module = pool("nn.max_pool2d", (1, 2, 7, 8), pool_size=[4, 10], strides=[9, 9],
                  padding=[1, 1, 1, 1], dilation=[3, 1], ceil_mode=True)
    text = legato.compile(module, backend=KEEP).artifact
    x = np.random.default_rng(1).standard_normal((1, 2, 7, 8)).astype(np.float32)
    (out,) = tools.run_reference(text, [x], validate=True)
    assert_matches(out, legato.reference(module)(x))
