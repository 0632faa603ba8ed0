"""Legalization replays a decomposition recorded on inputs alike (calls.Recipes): the
replay must compute what running the decomposition computes, also where a decomposition
reads a constant input's data or asks whether two inputs are one value."""
import numpy as np

import legato
from legato.ir import Const
from legato.ir.calls import SMALL_CONST
from legato.legalization.loop import legalize_module
from legato.ops import base
from legato.ops.base import f32, float_unary_infer
from legato.ops.registry import OpDef, Registry


def _first_infer(types, attrs):
    return float_unary_infer(types[:1], attrs)


def _scale_by(b, x, s):
    """x * 2s, with 2s folded into a constant when s is one"""
    if isinstance(s, Const):
        return b.multiply(x, b.const((s.data * 2).astype(s.data.dtype)))
    return b.multiply(x, b.add(s, s))


def _pair(b, x, y):
    """x + y, or 3x when both are one value (a test op: it tells replays apart)"""
    return b.multiply(x, 3.0) if x is y else b.add(x, y)


def _registry() -> Registry:
    registry = Registry()
    for opdef in base.REGISTRY.ops():
        registry._ops[opdef.name] = opdef  # the core ops, shared read-only
    registry.register(OpDef("acme.scale_by", "x, s", {}, _first_infer, "broadcast", 1,
                            _scale_by, [((f32(2, 3), f32(3)), {})]))
    registry.register(OpDef("acme.pair", "x, y", {}, _first_infer, "broadcast", 1, _pair,
                            [((f32(2, 3), f32(2, 3)), {})]))
    return registry


def _run(module, feeds):
    return [np.asarray(r) for r in legato.reference(module)(*feeds)]


def test_replays_follow_constant_data_and_aliasing():
    registry = _registry()
    rng = np.random.default_rng(0)
    n = SMALL_CONST + 4  # a constant keyed by itself, not its contents
    small = [rng.standard_normal(n).astype(np.float32)[:8] for _ in range(2)]
    large = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    b = legato.GraphBuilder(registry)
    x8, y8, s8 = b.input("x8", (8,)), b.input("y8", (8,)), b.input("s8", (8,))
    xn = b.input("xn", (n,))
    outs = [b.call("acme.scale_by", x8, b.const(c)) for c in small]
    outs += [b.call("acme.scale_by", xn, b.const(c)) for c in large]
    outs += [b.call("acme.scale_by", x8, s8)] * 2
    outs += [b.call("acme.pair", x8, x8), b.call("acme.pair", x8, y8),
             b.call("acme.pair", y8, y8), b.call("acme.pair", y8, x8)]
    module = b.build(*outs)
    feeds = [rng.standard_normal(v.shape).astype(np.float32) for v in module.main.params]
    x, y, s, big = feeds
    want = [x * 2 * small[0], x * 2 * small[1], big * 2 * large[0], big * 2 * large[1],
            x * (s + s), x * (s + s), 3 * x, x + y, 3 * y, y + x]
    for _ in range(2):  # the second legalization replays every decomposition
        flat = legalize_module(module, registry, max_level=0).module
        assert {c.op for c in flat.main.calls} <= {"multiply", "add"}
        for got, expected in zip(_run(flat, feeds), want):
            np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_replayed_transformer_is_the_decomposed_one():
    """Layers replay the first layer's decompositions: the numbers stay eager numpy's
    (the reference of the source module) and every call's origin names its source."""
    from legato.frontends.examples import random_inputs, transformer
    module = transformer(seq=8, d_model=16, heads=2, ffn=32, blocks=3)
    feeds = random_inputs(module)
    want = _run(module, feeds)
    for _ in range(2):
        result = legato.legalize(module, max_level=0)
        flat = result.module
        assert all(legato.get_op(c.op).level == 0 for c in flat.main.calls)
        for call in flat.main.calls:
            if call.origin is not None:
                index = int(call.origin.source.rpartition("#")[2])
                assert module.main.calls[index].op == call.origin.op, call
        for got, expected in zip(_run(flat, feeds), want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert result.report.after and sum(result.report.before.values()) == \
        len(module.main.calls)
