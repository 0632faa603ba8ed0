"""What the recomposition skips without searching (legato.passes.matching and .paths): a
search that saw every choice is not run again for more matches, an operand that cannot
take a graph value (a parameter bound to another value, a call matched to another call)
is not tried there, and a template with a path ending at no call of its op is not
searched at all. The matches found stay those of a full search."""
import itertools

import legato
from legato.ir import TensorType
from legato.passes.matching import Matcher
from legato.passes.paths import MIN_CALLS, Look, paths_of
from legato.passes.patterns import Form, build_view, trace

REGISTRY = legato.context().registry
T = TensorType((2, 3), "float32")


def view_of(module):
    fn = module.main
    return build_view(REGISTRY, list(fn.calls), fn.params, fn.results, lambda op: False), fn


def root_of(view):
    """The view call that makes the function's result."""
    return next(i for i, c in enumerate(view.calls) if id(c.outputs[0]) in view.results)


class Counting(Matcher):
    searches = 0

    def find(self, gi, limit, accept=None):
        self.searches += 1
        return super().find(gi, limit, accept)


def exp_times(b, x, y):
    return b.multiply(b.exp(x), y)


def test_a_match_with_no_choice_left_is_found_once_and_not_searched_again():
    template = trace(REGISTRY, Form("multiply", exp_times, "test"), (T, T), {})
    b = legato.GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    view, fn = view_of(b.build(b.multiply(y, b.exp(x))))
    matcher = Counting(template, view, set(), concrete=False)
    envs = list(matcher.at(root_of(view)))
    assert [tuple(e.binds[id(p)] for p in template.params) for e in envs] == [(x, y)]
    assert matcher.searches == 1  # the only way the operands go was the one tried


def square_times(b, x, y):
    return b.multiply(b.multiply(x, y), x)


def test_a_bound_parameter_takes_only_its_own_value():
    """x*y*x on a*b*a: x takes a at both places; the matches are the assignments a
    brute-force search over the product's operands accepts, in one order."""
    template = trace(REGISTRY, Form("multiply", square_times, "test"), (T, T), {})
    b = legato.GraphBuilder()
    a, c = b.input("a", (2, 3)), b.input("c", (2, 3))
    view, fn = view_of(b.build(b.exp(b.multiply(a, b.multiply(c, a)))))
    root = next(i for i, call in enumerate(view.calls) if call.op == "multiply" and
                view.users.get(id(call.outputs[0])) == [len(view.calls) - 1])
    matcher = Counting(template, view, set(), concrete=False)
    every = matcher.find(root, None)
    # brute force: the graph's leaves a, c, a in every order against x, y, x
    leaves = [a, c, a]
    expected = sum(1 for order in itertools.permutations(range(3))
                   if leaves[order[0]] is leaves[order[2]])
    assert len(every) == expected == 2
    assert {tuple(e.binds[id(p)] for p in template.params) for e in every} == {(a, c)}
    assert [tuple(e.binds[id(p)] for p in template.params) for e in matcher.at(root)] == \
        [(a, c), (a, c)]  # a choice was left after the first: the second is found too


def test_an_operand_that_cannot_match_is_skipped():
    """exp(x) * y on exp(a) * exp(b) where the template's exp must take the one exp whose
    input is also the other operand's: no match, none tried past the operands."""
    template = trace(REGISTRY, Form("multiply", lambda b, x: b.multiply(b.exp(x), x),
                                    "test"), (T,), {})
    b = legato.GraphBuilder()
    a, c = b.input("a", (2, 3)), b.input("c", (2, 3))
    view, _ = view_of(b.build(b.multiply(b.exp(a), c)))
    assert Matcher(template, view, set(), concrete=False).find(root_of(view), None) == []
    view, _ = view_of(b.build(b.multiply(a, b.exp(a))))
    (env,) = Matcher(template, view, set(), concrete=False).find(root_of(view), None)
    assert env.binds[id(template.params[0])] is a


def test_the_view_shares_the_constants_it_makes_and_keeps_the_sign_of_zero():
    """`x / 4` in two layers becomes `x * 0.25` with one constant for both (made once per
    registry); `y - 0.0` and `y - (-0.0)` become additions of -0.0 and 0.0, told apart."""
    import numpy as np
    from legato.ir import Const

    def scalar(v):
        return Const.of(np.array(v, dtype=np.float32))

    b = legato.GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    first = b.divide(b.exp(x), scalar(4.0))
    second = b.divide(b.exp(first), scalar(4.0))
    plus = b.subtract(y, scalar(0.0))
    minus = b.subtract(y, scalar(-0.0))
    view, _ = view_of(b.build(second, plus, minus))
    scales = [c.inputs[1] for c in view.calls if c.op == "multiply"]
    assert len(scales) == 2 and scales[0] is scales[1] and float(scales[0].data) == 0.25
    zeros = [c.inputs[1].data for c in view.calls if c.op == "add"]
    assert [bool(np.signbit(z)) for z in zeros] == [True, False]
    again, _ = view_of(b.build(second, plus, minus))  # the next pass: the same constant
    assert [c.inputs[1] for c in again.calls if c.op == "multiply"][0] is scales[0]


def test_a_recovered_ops_checked_types_are_remembered_per_input_types():
    """The recovered call's inputs and result type are checked once per op, input types
    and attributes: a second pass recovers as the first did, and layers of two widths
    each get their own result type (the types come from numpy's answer, not legato's)."""
    import numpy as np

    def norm(b, x, w, bias):
        mu = b.mean(x, axes=[1], keepdims=True)
        centred = b.subtract(x, mu)
        var = b.mean(b.multiply(centred, centred), axes=[1], keepdims=True)
        return b.add(b.multiply(b.divide(centred, b.sqrt(b.add(var, 1e-5))), w), bias)

    rng = np.random.default_rng(0)
    feed = rng.standard_normal((4, 8)).astype(np.float32)
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8))
    narrow = [b.const(rng.standard_normal(8).astype(np.float32)) for _ in range(2)]
    wide = [b.const(rng.standard_normal(16).astype(np.float32)) for _ in range(2)]
    first = norm(b, x, *narrow)
    second = norm(b, b.concat(b.exp(first), first, axis=1), *wide)
    module = b.build(second)
    expected = np.concatenate([np.exp(feed), feed], axis=1).shape
    for _ in range(2):  # the second pass meets what the first remembered
        back, _ = legato.recompose(module, ops=["nn.layer_norm"])
        norms = [c for c in back.main.calls if c.op == "nn.layer_norm"]
        assert [c.outputs[0].shape for c in norms] == [feed.shape, expected]


def _wave(b, x):
    return b.tanh(b.sin(b.cos(b.abs(b.sigmoid(b.negative(x))))))


def wave_times(b, x, y, head="exp"):
    """head(tanh(sin(cos(abs(sigmoid(-x)))))) * y: eight calls, enough for the path look
    (paths.MIN_CALLS)."""
    return b.multiply(b.call(head, _wave(b, x)), y)


def wave_shifted(b, x, y):
    """The same but for an add under the head: the templates differ past their start."""
    return b.multiply(b.exp(b.add(_wave(b, x), y)), y)


def test_the_path_look_passes_what_matches_and_skips_what_cannot():
    """The look along a template's paths (a call of the op at each path's end) passes a
    graph that matches, refuses one whose tree leaf is another op or a claimed call, and
    the full search agrees each time; templates that start alike share their paths."""
    template = trace(REGISTRY, Form("multiply", wave_times, "test"), (T, T), {})
    shifted = trace(REGISTRY, Form("multiply", wave_shifted, "test"), (T, T), {})
    small = trace(REGISTRY, Form("multiply", exp_times, "test"), (T, T), {})
    assert paths_of(REGISTRY, small) == ()  # two calls: searched without a look
    assert template.size >= MIN_CALLS > small.size
    for graph_op, expected in (("exp", True), ("log", False)):
        b = legato.GraphBuilder()
        x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
        view, _ = view_of(b.build(wave_times(b, x, y, graph_op)))
        root = root_of(view)
        found = bool(Matcher(template, view, set(), concrete=False).find(root, 1))
        assert Look(view, set()).may_match(paths_of(REGISTRY, template), root) is expected
        assert found is expected
        # the add under the exp is missing: refused on both graphs
        assert not Look(view, set()).may_match(paths_of(REGISTRY, shifted), root)
        assert not Matcher(shifted, view, set(), concrete=False).find(root, 1)
    # the root (a product of two leaves) and its exp leaf: one object per path
    first, second = paths_of(REGISTRY, template), paths_of(REGISTRY, shifted)
    assert first[0] is second[0] and first[1] is second[1]
    assert (first[1].op, first[2].op, second[2].op) == ("exp", "tanh", "add")


def test_a_claimed_call_on_a_path_refuses_the_template_as_the_search_does():
    template = trace(REGISTRY, Form("multiply", wave_times, "test"), (T, T), {})
    b = legato.GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    view, _ = view_of(b.build(wave_times(b, x, y)))
    root = root_of(view)
    sin_call = next(i for i, c in enumerate(view.calls) if c.op == "sin")
    look = Look(view, set())
    assert look.may_match(paths_of(REGISTRY, template), root)
    look.claimed.add(sin_call)  # a recovery claimed it: what the look knew is forgotten
    assert not look.may_match(paths_of(REGISTRY, template), root)
    assert not Matcher(template, view, {sin_call}, concrete=False).find(root, 1)


def _linear_templates():
    from legato.passes.templates import templates_of
    found, _ = templates_of(REGISTRY, REGISTRY.get("nn.linear"))
    return found


def test_a_lone_root_template_is_told_as_the_search_finds():
    """nn.linear's `matmul(x, permute_dims(w))` is its root over the op's inputs: where
    the transposed input is a constant of the rank, the search would find the matmul
    alone; where it is a value no reshape or transpose makes (or of another rank), the
    search would fail; both are told without searching, anything else is searched. Each
    quick answer agrees with the search, claimed calls included."""
    import numpy as np
    from legato.passes.matching import LONE_ALONE, LONE_FAILS, LONE_SEARCH, lone_answer, \
        lone_root
    template = next(t for t in _linear_templates() if t.root.op == "matmul")
    ranks = lone_root(template)
    assert ranks is not None and sorted(ranks) == [-1, 2]
    assert lone_root(trace(REGISTRY, Form("multiply", exp_times, "test"), (T, T), {})) is None
    w2 = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.input("y", (4, 3))
    z = b.input("z", (3, 4))
    forms = [b.matmul(x, b.const(w2)),                       # constant weight: one call
             b.matmul(x, b.permute_dims(y, axes=[1, 0])),    # a transposed input: searched
             b.matmul(x, b.const(w2.reshape(1, 3, 4))),      # a weight of another rank
             b.matmul(b.const(w2.T.copy()), b.const(w2)),    # constant both sides
             b.matmul(x, b.exp(z)),                          # made by another op: fails
             b.matmul(x, z)]                                 # an input of the function
    view, fn = view_of(b.build(*forms))
    roots = [i for i, c in enumerate(view.calls) if c.op == "matmul"]
    assert len(roots) == 6
    permute = next(i for i, c in enumerate(view.calls) if c.op == "permute_dims")
    told = []
    for claimed in (set(), {permute}):
        for gi in roots:
            envs = Matcher(template, view, claimed, concrete=False).find(gi, 1)
            answer = lone_answer(ranks, view, gi, claimed)
            told.append(answer)
            if answer == LONE_ALONE:  # the search finds the same: that call alone
                assert envs and envs[0].region() == {gi}
            elif answer == LONE_FAILS:
                assert not envs
    assert told == [LONE_ALONE, LONE_SEARCH, LONE_FAILS, LONE_ALONE, LONE_FAILS, LONE_FAILS,
                    LONE_ALONE, LONE_FAILS, LONE_FAILS, LONE_ALONE, LONE_FAILS, LONE_FAILS]


def test_the_one_call_miss_is_reported_alike_with_or_without_the_search(monkeypatch):
    import numpy as np
    from legato.passes import recompose as R
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    module = b.build(b.matmul(x, b.const(w)), b.matmul(x, b.const(w + 1)))
    quick = R.explain(module, ops=["nn.linear"]).text()
    assert "not recovered x2: the region is one call (matmul) (first at call 0 (matmul))" \
        in quick
    monkeypatch.setattr(R, "lone_root", lambda template: None)  # always search
    assert R.explain(module, ops=["nn.linear"]).text() == quick


def test_an_operand_tree_kept_on_the_view_is_the_walk_with_the_calls_claimed_or_taken():
    """tree_at keeps a call's operand tree with nothing claimed; it answers as the walk
    `_tree` does, with any set of claimed or taken calls (a claimed inner call is a leaf)."""
    from legato.passes.operands import _tree, tree_at
    b = legato.GraphBuilder()
    x, y, z, w = (b.input(n, (2, 3)) for n in "xyzw")
    view, fn = view_of(b.build(b.add(b.add(b.add(x, y), z), b.exp(w))))
    root = root_of(view)
    adds = [i for i, c in enumerate(view.calls) if c.op == "add" and i != root]
    assert len(adds) == 2
    for claimed, taken in itertools.product([set(), {adds[0]}, {adds[1]}, set(adds)],
                                            [(), {adds[0]}, {adds[1]}]):
        leaves, inner = [], []
        _tree(view, view.calls[root], leaves, inner, claimed, taken)
        assert tree_at(view, root, claimed, taken) == (leaves, inner)
    assert len(tree_at(view, root, set())[0]) == 4  # x, y, z and exp(w)


def test_the_look_tries_first_the_path_that_refused_last_and_answers_as_without_it():
    """With the template's hint the look starts at the path that refused the last root
    (layers fail a template at the same place); the answers are those of the look in path
    order, at a root that fits and at one that does not."""
    template = trace(REGISTRY, Form("multiply", wave_times, "test"), (T, T), {})
    paths = paths_of(REGISTRY, template)
    b = legato.GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    view, _ = view_of(b.build(wave_times(b, x, y, "log"), wave_times(b, y, x, "exp")))
    roots = [i for i, c in enumerate(view.calls) if c.op == "multiply"]
    hint: dict = {}
    look = Look(view, set())
    assert look.may_match(paths, roots[0], hint) is False  # log for exp: refused
    refused = hint["refused"]
    assert paths[refused].op == "exp"
    asked = []
    ends_of = look._ends_of
    look._ends_of = lambda p, gi: asked.append(p) or ends_of(p, gi)
    assert look.may_match(paths, roots[0], hint) is False and asked == []  # remembered
    fresh = Look(view, set())
    fresh._ends_of = lambda p, gi: asked.append(p) or ends_of.__func__(fresh, p, gi)
    assert fresh.may_match(paths, roots[0], hint) is False
    assert asked[0] is paths[refused]  # the remembered path, looked at first
    for root in roots:
        assert Look(view, set()).may_match(paths, root, dict(hint)) is \
            Look(view, set()).may_match(paths, root)
    assert Look(view, set()).may_match(paths, roots[1], hint) is True


def test_the_look_is_skipped_at_the_next_layers_once_a_template_recovered_alike(monkeypatch):
    """Three layer norms written out: once the template recovered at the first, the
    roots whose operands are made by the same ops are searched without the look (the
    look would pass); what is recovered and reported is what the look everywhere gives."""
    import numpy as np
    from legato.passes import recompose as R
    rng = np.random.default_rng(5)
    b = legato.GraphBuilder()
    y = b.input("x", (2, 4, 8), "float32")
    for _ in range(3):
        gamma, beta = (b.const(rng.uniform(0.5, 1.5, 8).astype(np.float32)) for _ in "gb")
        y = b.exp(b.call("nn.layer_norm", y, gamma, beta, epsilon=1e-5))
    low = legato.legalize(b.build(y), max_level=0).module
    looks = []
    original_look, original_visit = Look.may_match, R._Search._visit

    def counting(self, paths, gi, hint=None):
        looks.append(gi)
        return original_look(self, paths, gi, hint)

    monkeypatch.setattr(Look, "may_match", counting)
    skipping = R.explain(low, ops=["nn.layer_norm"])
    skipped_looks = len(looks)
    looks.clear()

    def always_look(self, template, gi, state):
        state[2].clear()
        return original_visit(self, template, gi, state)

    monkeypatch.setattr(R._Search, "_visit", always_look)
    everywhere = R.explain(low, ops=["nn.layer_norm"])
    assert skipping.recovered["nn.layer_norm"] == everywhere.recovered["nn.layer_norm"] == 3
    assert skipping.text() == everywhere.text()
    assert skipped_looks < len(looks)
