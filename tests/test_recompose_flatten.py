"""The canonical view of a function (legato.passes.flatten): a composite call met again
with inputs alike is expanded by replaying the flat calls recorded for the first, ending
at its own results; the view is the one a fresh expansion of every call gives, and
recomposition computes what the model did."""
import numpy as np

import legato
from legato.ir.calls import Recipes
from legato.ops.registry import Registry
from legato.ops import base
from legato.passes.flatten import build_view, expand
from legato.passes.recompose import recompose


def _layers(n: int):
    """n layer norms written with ReduceMean-style `mean` calls (composites the view
    expands), each on its own input."""
    b = legato.GraphBuilder()
    out = None
    for i in range(n):
        x = b.input(f"x{i}", (2, 5, 16))
        mu = b.mean(x, axes=[-1], keepdims=True)
        d = b.subtract(x, mu)
        var = b.mean(b.multiply(d, d), axes=[-1], keepdims=True)
        y = b.divide(d, b.sqrt(b.add(var, 1e-5)))
        out = y if out is None else b.add(out, y)
    return b.build(out)


def _fresh_registry() -> Registry:
    registry = Registry()
    for opdef in base.REGISTRY.ops():
        registry._ops[opdef.name] = opdef
    return registry


def _always(op):
    return True


def _shape_of(view):
    """The view as data: each call's op, attributes, result types and where its inputs
    come from (an earlier view call's result k, a parameter, a constant's contents)."""
    made, out = {}, []
    params = {id(p): i for i, p in enumerate(view.params_list)}
    for n, call in enumerate(view.calls):
        ins = []
        for v in call.inputs:
            if id(v) in made:
                ins.append(made[id(v)])
            elif id(v) in params:
                ins.append(("param", params[id(v)]))
            else:
                ins.append(("const", v.data.tobytes(), v.shape))
        out.append((call.op, call.attrs.key(), tuple(o.type for o in call.outputs), tuple(ins)))
        for k, o in enumerate(call.outputs):
            made[id(o)] = ("call", n, k)
    return out


def test_a_replayed_expansion_is_the_expansion():
    module = _layers(3)
    fn = module.main
    registry = _fresh_registry()
    view = build_view(registry, list(fn.calls), fn.params, fn.results, _always)
    flats = registry.derived("recompose.flats")
    assert len(flats) == 1  # the 6 means are alike: recorded once, replayed 5 times
    # every call expanded afresh, then put in canonical form the same way
    from legato.passes.canonical import canonical
    recipes = Recipes(registry)
    flat, owners = [], []
    for index, call in enumerate(fn.calls):
        for inner in expand(registry, call, _always, recipes):
            flat.append(inner)
            owners.append((index,))
    calls, owners_fresh = canonical(registry, flat, owners, fn.results, set())
    fresh = build_view(_fresh_registry(), list(fn.calls), fn.params, fn.results, _always)
    for v in (view, fresh):
        v.params_list = list(fn.params)
    assert _shape_of(view) == _shape_of(fresh)
    assert view.owners == owners_fresh and [c.op for c in view.calls] == [c.op for c in calls]
    # each replay ends at its own layer's results: the mean calls' outputs are in the view
    means = [c for c in fn.calls if c.op == "mean"]
    assert all(id(c.outputs[0]) in view.producer for c in means)


def test_recomposition_over_replayed_layers_computes_the_model():
    module = _layers(3)
    back, modified = recompose(module, ops=["nn.layer_norm"], registry=_fresh_registry())
    assert modified
    assert sum(c.op == "nn.layer_norm" for c in back.main.calls) == 3
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal((2, 5, 16)).astype(np.float32) for _ in range(3)]
    want = sum((x - x.mean(-1, keepdims=True)) /
               np.sqrt(x.var(-1, keepdims=True) + 1e-5) for x in feeds)
    np.testing.assert_allclose(legato.reference(back)(*feeds), want, rtol=1e-4, atol=1e-4)
