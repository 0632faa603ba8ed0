"""The recomposition matcher (legato.passes.matching): the matches at a call come in one
order however they are asked for, a product's operands match as a multiset, and the
search leaves no partial match behind."""
import itertools

import legato
from legato.ir import TensorType
from legato.passes.matching import Matcher, operand_kinds, plausible, root_need
from legato.passes.patterns import Form, build_view, trace

REGISTRY = legato.context().registry


def product_of_three(b, x, y, z):
    return b.multiply(b.multiply(x, y), z)


def setup():
    """A template x*y*z and a graph that writes its product in another order."""
    t = TensorType((2, 3), "float32")
    template = trace(REGISTRY, Form("multiply", product_of_three, "test"), (t, t, t), {})
    b = legato.GraphBuilder()
    x, y, z = (b.input(name, (2, 3)) for name in "xyz")
    module = b.build(b.exp(b.multiply(z, b.multiply(y, x))))
    fn = module.main
    view = build_view(REGISTRY, list(fn.calls), fn.params, fn.results, lambda op: False)
    root = next(i for i, c in enumerate(view.calls) if c.op == "multiply" and
                view.users.get(id(c.outputs[0])) == [len(view.calls) - 1])
    return template, view, root, fn.params


def bound(template, env):
    return tuple(env.binds[id(p)] for p in template.params)


def test_every_assignment_of_a_products_operands_in_one_order():
    template, view, root, params = setup()
    matcher = Matcher(template, view, set(), concrete=False)
    every = matcher.find(root, None)
    got = {bound(template, e) for e in every}
    assert got == set(itertools.permutations(params))  # 3! assignments, each once
    assert len(every) == 6
    # lazily, or the first few: the same matches in the same order
    assert [bound(template, e) for e in matcher.at(root)] == [bound(template, e) for e in every]
    assert [bound(template, e) for e in matcher.find(root, 4)] == \
        [bound(template, e) for e in every[:4]]
    for env in every:  # the two multiplies of the graph, nothing else
        assert len(env.region()) == 2


def test_a_search_stops_at_the_match_it_accepts_and_leaves_no_partial_match():
    template, view, root, params = setup()
    matcher = Matcher(template, view, set(), concrete=False)
    wanted = (params[2], params[0], params[1])
    found = matcher.find(root, None, lambda env: bound(template, env) == wanted)
    assert bound(template, found[-1]) == wanted
    assert all(bound(template, e) != wanted for e in found[:-1])
    assert not (matcher._binds or matcher._calls or matcher._taken or matcher._extra)


def test_claimed_calls_are_not_matched_again():
    template, view, root, _ = setup()
    inner = next(i for i, c in enumerate(view.calls) if c.op == "multiply" and i != root)
    assert Matcher(template, view, {inner}, concrete=False).find(root, None) == []


def test_the_quick_look_needs_the_operand_count_of_the_root():
    template, view, root, _ = setup()
    need = root_need(template)
    assert need == (3, ())  # three operands, any values
    assert plausible(need, operand_kinds(view, root, set()))
    inner = next(i for i, c in enumerate(view.calls) if c.op == "multiply" and i != root)
    # with the inner product taken, the root has two operands: no match is tried
    assert not plausible(need, operand_kinds(view, root, {inner}))


def test_a_template_of_hundreds_of_calls_matches_itself():
    """The search recurses only at a choice: grid_sample's bicubic form (some 650 calls,
    a value for each) ran past Python's recursion limit when every matched value took a
    frame."""
    opdef = REGISTRY.get("nn.grid_sample")
    types, attrs = next((t, a) for t, a in opdef.examples if a.get("mode") == "bicubic")
    template = trace(REGISTRY, Form(opdef.name, opdef.decompose, "decomposition"), types,
                     attrs)
    assert template.size > 400
    root = template.view.producer[id(template.result)]
    (env,) = Matcher(template, template.view, set(), concrete=True).find(root, 1)
    assert len(env.region()) == template.size
