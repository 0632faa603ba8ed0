"""Recomposition: find the high-level ops an exporter wrote out as primitives and put
them back, so a backend can keep them.

    module, modified = legato.recompose(module)                 # every composite op
    module, modified = legato.recompose(module, ops=["nn.gelu", "nn.rms_norm"])
    print(legato.recompose.explain(module).text())              # what fired, what did not

The patterns are the op definitions themselves (legato.passes.patterns): each composite's
decomposition and its `patterns` (other forms exporters write), traced on the op's
examples. A match is found in two steps: the template (structure only: ops and edges,
any constants, any attributes) proposes a region and its inputs; then attribute values
are proposed from the region (its scalar constants, their reciprocals, squares and roots,
its axes, the op's defaults and the template's enumerated choices), the form is traced
again with those values on the inputs' real types, and the region must equal that trace
(constants within a relative 1e-5). So a recovered call computes what the region did, by
the op's own definition. The region's interior values must not be used outside it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from typing import Sequence

from ..ir import Call, Function, Module
from ..ir.errors import ConfigError, quote
from ..plugins.context import context
from .manager import FunctionPass, PassResult
from .matching import (LONE_ALONE, LONE_FAILS, Matcher, lone_answer, lone_root, operand_kinds,
                       plausible, root_need)
from .paths import Look, paths_of
from .patterns import Template, build_view
from .recovery import Recovers
from .templates import (MAX_SETUPS, _setup, default_ops, primitives_of,  # noqa: F401
                        templates_of)

MAX_PLANS = 64  # sets of ops present a setup keeps the plan of


# --- the pass -----------------------------------------------------------------------------

@dataclass
class Recovery:
    """What a recomposition found: calls recovered per op, and why the others did not
    fire (reasons counted per op)."""

    recovered: Counter = field(default_factory=Counter)
    misses: dict = field(default_factory=dict)
    derived: dict = field(default_factory=dict)  # op -> number of templates

    where: dict = field(default_factory=dict)  # (op, reason) -> the first call it was at

    def miss(self, op: str, reason: str, times: int = 1, at=None) -> None:
        """Count a miss (`times` over); `at` names the first call it was at."""
        reasons = self.misses.get(op)
        if reasons is None:
            reasons = self.misses[op] = {}
        reasons[reason] = reasons.get(reason, 0) + times
        if at is not None and (op, reason) not in self.where:
            self.where[op, reason] = at

    def miss_at(self, op: str, reason: str, owners: tuple, calls) -> None:
        """`miss` once, at the input calls `owners` (indices into `calls`; the first is
        named where the reason is new): the hot path, with no function made per miss."""
        at = None
        if owners and (op, reason) not in self.where:
            first = min(owners)
            at = f"call {first} ({calls[first].op})"
        self.miss(op, reason, 1, at)

    def text(self) -> str:
        lines = []
        for op in sorted(self.derived):
            got = self.recovered.get(op, 0)
            lines.append(f"{op}: {got} recovered ({self.derived[op]} template(s))")
            for reason, n in Counter(self.misses.get(op, {})).most_common(4):
                at = self.where.get((op, reason))
                lines.append(f"  not recovered x{n}: {reason}" + (f" (first at {at})"
                                                                  if at else ""))
        return "\n".join(lines)



class Recomposer(Recovers):
    """Finds the templates of the ops asked for in a function and rewrites each region
    that recovers into one call (the recovery: legato.passes.recovery)."""

    def __init__(self, registry, ops: Sequence[str] | None = None):
        self.registry = registry
        explicit = ops is not None
        names = tuple(ops) if explicit else tuple(default_ops(registry))
        key = (names, explicit)  # the registry empties its setups when a definition changes
        setups = registry.derived("recompose.setups")
        setup = setups.get(key)
        if setup is None:
            if len(setups) >= MAX_SETUPS:
                setups.clear()
            setup = setups[key] = _setup(registry, names, explicit)
        self.report = Recovery()
        self.report.derived.update(setup.derived)
        for name, why in setup.missing.items():
            self.report.miss(name, why)
        self.templates: list[Template] = setup.templates  # shared: never changed
        self._setup_templates, self._plans = setup.templates, setup.plans
        self.prims, self.whole = setup.prims, setup.whole
        self._expandable: dict[str, bool] = {}
        self.verifications: Counter = Counter()  # candidate attribute sets tried, per op
        # (template, region_key) -> attributes, or why not: on the registry, so the next
        # pass over the same layers starts with them; here where the key holds a constant
        self._known: dict = {}
        self._shared_known = registry.derived("recompose.known")
        self._unverified = registry.derived("recompose.unverified")
        self._checked = registry.derived("recompose.checked")
        self._contents = registry.derived("recompose.contents")  # constant -> its bytes

    def expandable(self, op: str) -> bool:
        """Expand the input's composite calls whose primitives the patterns use."""
        hit = self._expandable.get(op)
        if hit is None and op in self.whole:
            hit = self._expandable[op] = False
        if hit is None:
            hit = primitives_of(self.registry, self.registry.get(op)) <= self.prims
            self._expandable[op] = hit
        return hit

    def run_function(self, fn: Function) -> tuple[Function, bool]:
        if not self.templates:
            return fn, False
        view = build_view(self.registry, list(fn.calls), fn.params, fn.results,
                          self.expandable)
        claimed: set[int] = set()
        rewrites: list[tuple[set[int], list[Call]]] = []
        search = _Search(self, view, claimed, fn, rewrites)
        for template, root_op, need in self.plan(view.by_op):
            search.template(template, view.by_op[root_op], need, root_op)
        if not rewrites:
            return fn, False
        return _apply(fn, rewrites, view.identities), True

    def plan(self, by_op: dict) -> list:
        """(template, root op, root need) of each template whose ops the view has, in the
        order tried; kept on the setup per set of ops present (a model's layers, and
        models alike, have one)."""
        present = by_op.keys()
        plans = self._plans if self.templates is self._setup_templates else {}
        key = frozenset(present)
        plan = plans.get(key)
        if plan is None:
            plan = [(t, t.root.op, root_need(t)) for t in self.templates
                    if t.ops <= present and t.root.op in present]
            if len(plans) >= MAX_PLANS:
                plans.clear()
            plans[key] = plan
        return plan

    def try_at(self, template, matcher, view, gi, claimed, fn):
        op = template.form.op
        lone = lone_root(template)
        if lone is not None:  # nn.linear's matmul(x, permute_dims(w)): told without a search
            told = lone_answer(lone, view, gi, claimed)
            if told == LONE_FAILS:
                self.report.miss_at(op, _differs(template), view.owners[gi], fn.calls)
                return None
            if told == LONE_ALONE and len(view.owners[gi]) == 1:
                # over a constant weight: the match is this call alone
                self._one_call(template, fn.calls[view.owners[gi][0]].op, view, gi, fn)
                return None
        found = matcher.find(gi, 1)  # most tries end here: the structure differs
        if not found:
            self.report.miss_at(op, _differs(template), view.owners[gi], fn.calls)
            return None
        env = found[0]
        owners = {o for i in env.region() for o in view.owners[i]}
        if len(owners) == 1:  # one call for another gains nothing (and a kept op is kept)
            self._one_call(template, fn.calls[next(iter(owners))].op, view, gi, fn)
            return None
        result = self.recover(template, view, gi, claimed, env, fn)
        if not isinstance(result, str):
            return result
        reason = result
        # the recovery refused the first match: up to 3 more, when the search left a choice
        for attempt in (matcher.find(gi, 4)[1:] if matcher.pending else ()):
            result = self.recover(template, view, gi, claimed, attempt, fn)
            if not isinstance(result, str):
                return result
            reason = result
        self.report.miss_at(op, f"{template.form.label}: {reason}", view.owners[gi], fn.calls)
        return None

    def _one_call(self, template, only: str, view, gi: int, fn: Function) -> None:
        """The miss of a match that is one input call (`only` its op): its text made once
        per template and op."""
        op = template.form.op
        reason = template.matching.get(("one call", only))
        if reason is None:
            reason = template.matching[("one call", only)] = \
                f"already a {op} call" if only == op else f"the region is one call ({only})"
        self.report.miss_at(op, reason, view.owners[gi], fn.calls)


def _differs(template) -> str:
    """The miss of a template whose structure is not at a call (its text made once)."""
    reason = template.matching.get("differs")
    if reason is None:
        reason = template.matching["differs"] = f"{template.form.label}: structure differs"
    return reason



class _Search:
    """One pass's search of a function's view, template by template, each at every call
    of its root's op that is not claimed yet. Before a full match, a quick look one
    level down (the ops making the root's operands, worked out once per call and root
    need) and one along the template's paths. Templates share the first look: once every
    call of a root op has been looked at for a need, later templates of that need visit
    only the calls that passed (a claimed call stays claimed; a look's answer stays)."""

    def __init__(self, recomposer, view, claimed: set, fn: Function, rewrites: list):
        self.r, self.view, self.claimed, self.fn, self.rewrites = \
            recomposer, view, claimed, fn, rewrites
        self.kinds: dict = {}  # graph call -> the kinds of its operands, from the first look
        self.look = Look(view, claimed)  # the second look: along the template's paths
        self.answers: dict = {}  # (need, operand kinds) -> plausible
        self.groups: dict = {}  # (need, root op) -> (calls that passed, calls that did not)

    def template(self, template, roots: list, need: tuple, root_op: str) -> None:
        group = self.groups.get((need, root_op))
        if group is None:
            passed, failed = [], []
            differs = self._first(template, roots, need, passed, failed)
            # every root is now looked at, or claimed (and stays so): the answers stand
            self.groups[need, root_op] = (passed, frozenset(failed))
        else:
            differs = self._again(template, roots, *group)
        if differs:
            self.r.report.miss(template.form.op, _differs(template), differs)

    def _first(self, template, roots, need, passed: list, failed: list) -> int:
        """Visit every root call not claimed whose operands fit the need (a group's
        roots are looked at here once: the group keeps the answers); the number whose
        operands differ. The roots looked at go to `passed` or `failed`, in order."""
        claimed, kinds, view, answers = self.claimed, self.kinds, self.view, self.answers
        state = [None, None, set()]  # the template's paths and matcher (made when first
        # needed), the operand kinds of the roots it recovered at
        for gi in roots:
            if gi in claimed:
                continue
            have = kinds.get(gi)
            if have is None:
                have = kinds[gi] = operand_kinds(view, gi, claimed)
            ok = answers.get((need, have))
            if ok is None:  # layers ask alike
                ok = answers[need, have] = plausible(need, have)
            if ok:
                passed.append(gi)
                self._visit(template, gi, state)
            else:
                failed.append(gi)
        return len(failed)

    def _again(self, template, roots, passed: list, failed: frozenset) -> int:
        """As `_first`, once the roots are all looked at: only the calls that passed are
        visited; the others count as differing where not claimed when their turn came."""
        claimed = self.claimed
        state = [None, None, set()]  # as in _first
        claims = []  # (index in roots, the calls a rewrite there claimed)
        for gi in passed:
            if gi in claimed:
                continue
            before = len(claimed)
            kept = claimed.copy() if failed else None
            self._visit(template, gi, state)
            if len(claimed) != before and kept is not None:
                claims.append((roots.index(gi), claimed - kept))
        if not failed:
            return 0
        if not claims:  # claimed did not change while the roots were visited
            return len(failed) - len(failed & claimed)
        seen = claimed.copy()  # as it was at the start, then as each rewrite left it
        for _, added in claims:
            seen -= added
        differs, at = 0, 0
        for pos, gi in enumerate(roots):
            while at < len(claims) and claims[at][0] < pos:
                seen |= claims[at][1]
                at += 1
            if gi in failed and gi not in seen:
                differs += 1
        return differs

    def _visit(self, template, gi: int, state: list) -> None:
        """The look along the template's paths, then the full match at `gi`. Once the
        template recovered at a root, the look is skipped at roots whose operands are
        made by the same ops (the next layers' blocks: the look would pass), until a
        search there misses (a look that would have refused gives the same miss)."""
        r, view = self.r, self.view
        paths = state[0]
        if paths is None:
            paths = state[0] = paths_of(r.registry, template)
        have = self.kinds.get(gi) if paths else None
        skipped = paths and have in state[2]
        if paths and not skipped and not self.look.may_match(paths, gi, template.matching):
            r.report.miss_at(template.form.op, _differs(template), view.owners[gi],
                             self.fn.calls)
            return
        matcher = state[1]
        if matcher is None:
            matcher = state[1] = Matcher(template, view, self.claimed, concrete=False)
        done = r.try_at(template, matcher, view, gi, self.claimed, self.fn)
        if done is not None:
            self.rewrites.append(done)
            if paths:
                state[2].add(have)
        elif skipped:
            state[2].discard(have)


def _apply(fn: Function, rewrites, identities=frozenset()) -> Function:
    at: dict[int, list[Call]] = {}
    removed: set[int] = set()
    for owners, calls in rewrites:
        removed |= owners
        at[max(owners)] = calls
    out = []
    for index, call in enumerate(fn.calls):
        if index in at:
            out.extend(at[index])
        elif index not in removed:
            out.append(call)
    if identities:  # a `x * 1` whose users became one call is left unused: drop it
        out = _without_dead(out, {id(fn.calls[i]) for i in identities}, fn.results)
    return fn.with_calls(out)


def _without_dead(calls: list[Call], dead: set[int], results) -> list[Call]:
    """`calls` less the identities (ids in `dead`) whose results nothing reads, swept
    from the end: a chain `(s + 0) + 0` feeding a recovered call goes whole (a forward
    pass kept the first link, reading a value the rewrite removed)."""
    # reads of each value by the calls and the results; a call's readers come after it,
    # so deciding the identities last first sees each one's readers decided
    reads = Counter(map(id, chain.from_iterable([call.inputs for call in calls])))
    reads.update(map(id, results))
    gone = set()
    for call in reversed([call for call in calls if id(call) in dead]):
        if not any(reads[id(o)] for o in call.outputs):
            gone.add(id(call))
            reads.subtract(map(id, call.inputs))  # (None's id is no output's)
    return [call for call in calls if id(call) not in gone] if gone else calls


class RecomposePass(FunctionPass):
    """The recomposition as a pass (see `recompose`); `.report` sums what it found."""

    name = "recompose"

    def __init__(self, ops: Sequence[str] | None = None, registry=None):
        if registry is None:
            registry = context().registry
        self.recomposer = Recomposer(registry, ops)

    @property
    def report(self) -> Recovery:
        return self.recomposer.report

    def run_function(self, name, fn, module):
        return self.recomposer.run_function(fn)


def recompose(module: Module, ops: Sequence[str] | None = None, registry=None) -> PassResult:
    """Replace each region of `module` equal to a composite op's decomposition (or one of
    its `patterns`) by one call of the op, with the attributes that reproduce it; `ops`
    limits the ops looked for (default: `default_ops`). Returns (module, modified)."""
    return RecomposePass(ops, registry)(module)


def explain(module: Module, ops: Sequence[str] | None = None, registry=None) -> Recovery:
    """What `recompose` recovers in `module`, and why each op's other candidates did
    not fire (`.text()` for a readable summary)."""
    p = RecomposePass(ops, registry)
    p(module)
    return p.report


recompose.explain = explain  # legato.recompose(...) is the function; its report helper


# --- what `compile` and the command line call ---------------------------------------------

def ops_for_backend(backend, registry, keep=()) -> list[str]:
    """The ops `compile` recomposes for `backend` by default: the composite ops with
    patterns that it lists as legal or the config keeps (recovering an op the backend
    would decompose again gains nothing)."""
    return default_ops(registry, among=set(backend.legal) | set(keep))


def resolve_setting(setting, backend, registry, keep=()) -> list[str]:
    """The ops a config's `recompose:` value asks for: true (the backend's, see
    ops_for_backend), false (none) or a list of op names (each a composite op)."""
    if setting is True or setting is None:
        return ops_for_backend(backend, registry, keep) if backend is not None \
            else default_ops(registry)
    if setting is False:
        return []
    if isinstance(setting, str) or not all(isinstance(op, str) for op in setting):
        raise ConfigError(f"recompose: expected true, false or a list of op names, got "
                          f"{quote(setting)}")
    for op in setting:
        opdef = registry.get(op)  # OpError names an unknown op, with a suggestion
        if opdef.decompose is None:
            raise ConfigError(f"recompose: {op} is a primitive op; only composite ops "
                              "(with a decomposition) can be recomposed")
    return list(setting)


def recompose_for(module: Module, backend=None, setting=True, keep=(), registry=None
                  ) -> tuple[Module, Recovery]:
    """Recomposition as `compile` runs it before legalization: the ops `setting` selects
    for `backend` (see resolve_setting); returns the module and what was recovered
    (`Recovery.recovered` counts calls per op, for the report)."""
    if registry is None:
        registry = context().registry
    ops = resolve_setting(setting, backend, registry, keep)
    if not ops:
        return module, Recovery()
    p = RecomposePass(ops, registry)
    module, _ = p(module)
    return module, p.report


def summary(report: Recovery) -> str:
    """One line for a compile report: `recovered nn.gelu x2, nn.rms_norm x5`."""
    found = ", ".join(f"{op} x{n}" for op, n in sorted(report.recovered.items()))
    return f"recovered {found}" if found else "recovered nothing"
