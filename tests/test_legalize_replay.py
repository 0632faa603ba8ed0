"""Legalization replays a decomposition recorded on inputs alike (calls.Recipes): the
replay must compute what running the decomposition computes, also where a decomposition
reads a constant input's data or asks whether two inputs are one value."""
import numpy as np
import pytest

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


def _calls_and_counts(result):
    """The legalized calls as (op, attributes, input types, origin op and rules), and the
    report's rows and counts, keyed so that another model's can be compared with them."""
    main = result.module.main
    calls = [(c.op, c.attrs, [None if v is None else v.type for v in c.inputs],
              c.origin and (c.origin.op, c.origin.rules),
              c in result.fallback_calls) for c in main.calls]
    rows = {(e["op"], e["action"], e["reason"], e["source"]): (e["count"], e["origins"])
            for e in result.report.entries}
    return calls, rows, dict(result.report.before), dict(result.report.after)


def _times(rows: dict, n: int) -> dict:
    return {key: (count * n, {k: v * n for k, v in origins.items()})
            for key, (count, origins) in rows.items()}


def _float64_layers(blocks: int):
    b = legato.GraphBuilder()
    y = b.input("x", (4, 8), "float64")
    for _ in range(blocks):
        y = b.nn_softmax(b.erf(b.nn_layer_norm(y, axes=[-1])), axis=-1)
    return b.build(y)


@pytest.mark.parametrize("backend, config, mode", [
    ("cpu_ref", None, "full"),
    ("tosa_custom", None, "partial"),  # lowering rules, attribute conditions watched
    ("tosa_custom", {"backends": {"tosa_custom": {"keep": ["nn.softmax"]}}}, "full"),
    ("c_kernels", {"backends": {"c_kernels": {"decompose": ["nn.gelu"],
                                              "keep": ["nn.layer_norm"]}}}, "full")])
def test_each_repeated_layer_is_legalized_as_the_first(backend, config, mode):
    """Later layers take the short ways (a decision known for its key, a replay whose
    calls are all kept as they are): their calls, origins and report counts must be the
    first layer's, as the first layer is legalized the long way."""
    from legato.frontends.examples import transformer

    def legalize(blocks):
        module = transformer(seq=8, d_model=16, heads=2, ffn=32, blocks=blocks,
                             weights_as_inputs=True, use_linear=False)
        return _calls_and_counts(legato.legalize(module, backend=backend, config=config,
                                                 mode=mode))
    one, three = legalize(1), legalize(3)
    assert three[0] == one[0] * 3
    assert three[1] == _times(one[1], 3)
    assert three[2:] == tuple({op: n * 3 for op, n in c.items()} for c in one[2:])


@pytest.mark.parametrize("backend", ["c_kernels", "cpu_ref"])
def test_repeated_layers_on_the_fallback_are_legalized_as_the_first(backend):
    """float64 layers: c_kernels runs none of their calls, its fallback cpu_ref all."""
    config = {"backends": {backend: {"decompose": ["nn.layer_norm"]}}}
    one = _calls_and_counts(legato.legalize(_float64_layers(1), backend=backend,
                                            config=config))
    three = _calls_and_counts(legato.legalize(_float64_layers(3), backend=backend,
                                              config=config))
    assert three[0] == one[0] * 3
    assert three[1] == _times(one[1], 3)
    assert any(fallback for *_, fallback in one[0]) == (backend == "c_kernels")


def test_the_fast_constructors_set_every_field():
    """calls.new_call and new_value set the slots of Call and Value directly: they must
    set every field, and skip no __post_init__."""
    from dataclasses import fields

    from legato.ir import Call, Value
    from legato.ir.calls import new_call, new_value
    from legato.ir.graph import Attrs, Origin, TensorType
    assert [f.name for f in fields(Call)] == ["op", "inputs", "attrs", "outputs", "origin"]
    assert [f.name for f in fields(Value)] == ["type", "name"]
    assert not hasattr(Call, "__post_init__") and not hasattr(Value, "__post_init__")
    x = new_value(TensorType((2, 3), "float32"))
    assert (x.type, x.name, type(x)) == (TensorType((2, 3), "float32"), None, Value)
    parts = ("exp", (x,), Attrs({}), (new_value(x.type),), Origin("nn.gelu", Attrs({}), "m#0"))
    made = new_call(*parts)
    assert type(made) is Call and [getattr(made, f.name) for f in fields(Call)] == list(parts)


def test_a_failure_names_the_call_of_its_own_legalization(backend_factory):
    """Decisions are kept between legalizations for a backend and config, but not a
    failure: its text says where the failing call came from."""
    backend_factory({"backend": "tiny_keep", "executes": False,
                     "legal": {"add": {"dtypes": ["float32"]}}})
    texts = []
    for extra_adds in (1, 2):  # the softmax at main#1, then at main#2
        b = legato.GraphBuilder()
        y = b.input("x", (2, 3))
        for _ in range(extra_adds):
            y = b.call("add", y, y)
        with pytest.raises(legato.LegalizationError) as info:
            legato.legalize(b.build(b.call("nn.softmax", y, axis=0)), "tiny_keep")
        texts.append(str(info.value))
    assert "part of nn.softmax at main#1" in texts[0]
    assert "part of nn.softmax at main#2" in texts[1]


def test_kept_decisions_follow_the_backend_and_config():
    """A legalization after others of the same model with another config or backend
    decides as a first one would."""
    from legato.frontends.examples import transformer
    module = transformer(seq=8, d_model=16, heads=2, ffn=32, blocks=1)
    keep = {"backends": {"cpu_ref": {"keep": ["nn.softmax"]}}}
    runs = [("cpu_ref", None), ("cpu_ref", keep), ("c_kernels", None), ("cpu_ref", None),
            ("cpu_ref", keep)]
    reports = [legato.legalize(module, backend=be, config=cfg).report for be, cfg in runs]
    assert reports[1].ops("kept") == {"nn.softmax": 1} == reports[4].ops("kept")
    assert reports[0].ops("kept") == {} == reports[3].ops("kept")
    assert reports[2].ops("decomposed") == {}
    assert reports[0].entries == reports[3].entries
    assert reports[1].entries == reports[4].entries
