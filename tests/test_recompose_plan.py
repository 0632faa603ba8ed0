"""How a recomposition walks its templates (legato.passes.recompose): the templates to
try are worked out once per set of ops present and kept on the setup, and templates that
share a root op and need visit only the calls that passed the first look once every call
has been looked at. The report, misses counted included, is the one a pass that looks at
every call for every template gives."""
import pytest

import legato
from legato.frontends.examples import transformer
from legato.passes import recompose as recompose_module
from legato.passes.recompose import RecomposePass, _Search

REGISTRY = legato.context().registry


@pytest.fixture(scope="module")
def flat_transformer():
    module = transformer(batch=1, seq=8, d_model=16, heads=2, ffn=32, blocks=3,
                         use_linear=False)
    return legato.legalize(module, max_level=0).module


def _report(module):
    p = RecomposePass()
    back, _ = p(module)
    report = p.report
    return ([c.op for c in back.main.calls], dict(report.recovered),
            {op: dict(r) for op, r in report.misses.items()}, dict(report.where))


def test_the_shared_look_gives_what_looking_at_every_call_gives(flat_transformer, monkeypatch):
    fast = _report(flat_transformer)
    visited = []
    original = _Search._again

    def again(self, *args):
        visited.append(args[0])
        return original(self, *args)

    monkeypatch.setattr(_Search, "_again", again)
    assert _report(flat_transformer) == fast
    assert visited  # some templates took the shared look
    # every template looks at every root call itself (as before groups existed)

    def look_at_every_call(self, template, roots, need, root_op):
        differs = self._first(template, roots, need, [], [])
        if differs:
            self.r.report.miss(template.form.op, recompose_module._differs(template),
                               times=differs)

    monkeypatch.setattr(_Search, "template", look_at_every_call)
    assert _report(flat_transformer) == fast
    assert fast[1]  # the blocks were recovered: the comparison covers rewrites


def test_the_plan_is_kept_per_set_of_ops_present(flat_transformer):
    fn = flat_transformer.main
    first, second = RecomposePass().recomposer, RecomposePass().recomposer
    from legato.passes.patterns import build_view
    view = build_view(REGISTRY, list(fn.calls), fn.params, fn.results, first.expandable)
    plan = first.plan(view.by_op)
    assert second.plan(view.by_op) is plan  # kept on the registry's setup
    present = set(view.by_op)
    assert plan and all(t.ops <= present and op in present for t, op, _ in plan)
    assert [t for t, _, _ in plan] == [t for t in first.templates
                                      if t.ops <= present and t.root.op in present]
    fewer = {op: calls for op, calls in view.by_op.items() if op != "rsqrt"}
    other = first.plan(fewer)
    assert other is not plan and all("rsqrt" not in t.ops for t, _, _ in other)
