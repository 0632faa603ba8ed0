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

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..ir import Attrs, Call, Const, Function, Module, Origin, TensorType, attr_key
from ..ir.calls import make_call
from ..ir.errors import ConfigError, LegatoError, quote
from ..plugins.context import context
from .canonical import scalar_value
from .manager import FunctionPass, PassResult
from .matching import (RTOL, Matcher, Rearranged, operand_kinds, plausible, region_problem,
                       root_need, same_value)
from .paths import Look, paths_of
from .patterns import Form, Template, build_view, derive, trace

MAX_CANDIDATES = 256


# --- attribute candidates -----------------------------------------------------------------

# how an attribute may show as a constant of the trace: (forward, inverse)
TRANSFORMS = (
    (lambda a: a, lambda c: c),
    (lambda a: 1 / a, lambda c: 1 / c),
    (lambda a: a * a, lambda c: math.sqrt(c) if c > 0 else None),
    (lambda a: 1 / (a * a), lambda c: 1 / math.sqrt(c) if c > 0 else None),
    (lambda a: -a, lambda c: -c),
    (math.sqrt, lambda c: c * c if c > 0 else None),
    (lambda a: 1 / math.sqrt(a), lambda c: 1 / (c * c) if c > 0 else None),
)
PROBES = (0.37, 0.61)


def _tidy(x: float) -> float:
    """A float32-rounded constant back to its shortest decimal (1e-5, not 9.99999974e-06),
    one that rounds to the same float32: a bound or shift recovered from a constant must
    give that constant back exactly (a clip bound one ulp off is a wrong answer)."""
    if not math.isfinite(x) or float(np.float32(x)) != x:
        return x
    short = float(str(np.float32(x)))  # numpy prints the shortest round-tripping decimal
    return short if float(np.float32(short)) == x else x


def scalars(template: Template) -> list[float]:
    """The values of the template's constants whose elements are all equal."""
    found = getattr(template, "_scalars", None)
    if found is None:
        found = [x for call in template.view.calls for v in call.inputs
                 if isinstance(v, Const) and (x := scalar_value(v)) is not None]
        template._scalars = found
    return found


def _fits(needed, numbers) -> bool:
    return all(any(x == c or math.isclose(x, c, rel_tol=RTOL) for c in numbers)
               for x in needed)


def region_facts(region_calls: list[Call]):
    """The scalar constants, int lists and ints of a region (attribute values come from
    these)."""
    numbers, lists, ints = [], [], []
    for call in region_calls:
        for v in call.inputs:
            if isinstance(v, Const) and (x := scalar_value(v)) is not None:
                numbers.append(x)
        for value in call.attrs.values():
            if isinstance(value, tuple) and all(isinstance(x, int) for x in value):
                lists.append(value)
                ints.extend(value)
            elif isinstance(value, int) and not isinstance(value, bool):
                ints.append(value)
    return list(dict.fromkeys(numbers)), lists, ints


def _unique(values):
    seen = set()
    for v in values:
        key = (type(v), v)
        if key not in seen:
            seen.add(key)
            yield v


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
        """Count a miss; `at` names the first call it was at (or a function that names it:
        most misses repeat one already placed)."""
        reasons = self.misses.get(op)
        if reasons is None:
            reasons = self.misses[op] = {}
        reasons[reason] = reasons.get(reason, 0) + times
        if at is not None and (op, reason) not in self.where:
            self.where[op, reason] = at() if callable(at) else at

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


MAX_TRACES = 4096  # traced forms (and recovered regions) a registry keeps
MAX_SETUPS = 64  # op lists a registry keeps the templates of


def _per_op(registry, kind: str, opdef, compute):
    """What `compute(registry, opdef)` gives, cached on the registry per definition (an
    entry of a definition since replaced is computed again)."""
    cache = registry.derived(kind)
    entry = cache.get(opdef.name)
    if entry is None or entry[0] is not opdef:
        entry = cache[opdef.name] = (opdef, compute(registry, opdef))
    return entry[1]


def _primitives(registry, opdef) -> set[str]:
    if opdef.decompose is None or not opdef.examples:
        return {"?"}  # no decomposition: never expanded
    types, attrs = opdef.examples[0]
    try:
        return trace(registry, Form(opdef.name, opdef.decompose, "decomposition"),
                     types, attrs).ops
    except Exception:  # noqa: BLE001 - e.g. several results: never expanded
        return {"?"}


def primitives_of(registry, opdef) -> set[str]:
    """The primitive ops of an op's decomposition on its first example (cached)."""
    return _per_op(registry, "recompose.primitives", opdef, _primitives)


def templates_of(registry, opdef) -> tuple[list[Template], list[str]]:
    """The derived templates of an op (cached per definition)."""
    return _per_op(registry, "recompose.templates", opdef, derive)


def default_ops(registry, among=None) -> list[str]:
    """The composite ops recomposition looks for unless told: every op with a
    decomposition, except pure reshapes (squeeze, flatten, ...) and ops whose only form
    is a single call (nothing to gain). `among`: only ops of these names are looked at,
    and only their templates derived (a backend's ops: deriving all 73 composites took
    1-3 s, grid_sample's alone most of it)."""
    cache = registry.derived("recompose.default_ops")  # emptied when a definition changes
    if among is None and "*" in cache:
        return list(cache["*"])
    out = []
    for opdef in registry.ops():
        if among is not None and opdef.name not in among:
            continue
        fits = cache.get(opdef.name)
        if fits is None:
            fits = cache[opdef.name] = _recomposable(registry, opdef)
        if fits:
            out.append(opdef.name)
    if among is None:
        cache["*"] = out
    return list(out)


def _recomposable(registry, opdef) -> bool:
    if opdef.decompose is None or opdef.kind == "injective":
        return False
    templates, _ = templates_of(registry, opdef)
    return any(t.size >= 2 for t in templates)


@dataclass
class _Setup:
    """What a recomposition looks for, from the ops it was asked for: the templates,
    largest first, the primitives they use, the ops kept whole, and per op the number of
    templates (or why there is none)."""

    templates: list
    prims: set
    whole: set
    derived: dict
    missing: dict


def _setup(registry, names: tuple, explicit: bool) -> _Setup:
    templates, derived, missing = [], {}, {}
    for name in names:
        opdef = registry.get(name)
        found, problems = templates_of(registry, opdef)
        found = [t for t in found if explicit or t.size >= 2]
        derived[name] = len(found)
        if not found:
            missing[name] = "no pattern: " + ("; ".join(problems[:2]) or
                                              "the op has no decomposition")
        templates.extend(found)
    # larger patterns first: an attention block before the softmax inside it
    templates.sort(key=lambda t: -t.size)
    # an input call of an op looked for stays whole, unless another op's form uses it
    whole = set(names) - {op for t in templates for op in t.uses if op != t.form.op}
    return _Setup(templates, set().union(*(t.ops for t in templates)), whole, derived,
                  missing)


class Recomposer:
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
        self.prims, self.whole = setup.prims, setup.whole
        self._expandable: dict[str, bool] = {}
        self.verifications: Counter = Counter()  # candidate attribute sets tried, per op
        # (template, region_key) -> attributes, or why not: on the registry, so the next
        # pass over the same layers starts with them; here where the key holds a constant
        self._known: dict = {}
        self._shared_known = registry.derived("recompose.known")
        self._unverified = registry.derived("recompose.unverified")
        self._checked = registry.derived("recompose.checked")

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
        present = set(view.by_op)
        kinds: dict = {}  # graph call -> the kinds of its operands, from the first look
        look = Look(view, claimed)  # the second look: along the template's paths
        fits: dict = {}  # a template root's needs -> graph call -> plausible: templates share
        for template in self.templates:
            if not template.ops <= present:
                continue
            roots = view.by_op.get(template.root.op)
            if not roots:
                continue
            need = root_need(template)
            fits_need = fits.get(need)
            if fits_need is None:
                fits_need = fits[need] = {}
            matcher = paths = None
            differs = 0
            for gi in roots:
                if gi in claimed:
                    continue
                ok = fits_need.get(gi)
                if ok is None:
                    have = kinds.get(gi)
                    if have is None:
                        have = kinds[gi] = operand_kinds(view, gi, claimed)
                    ok = fits_need[gi] = plausible(need, have)
                if not ok:
                    differs += 1
                    continue
                if paths is None:
                    paths = paths_of(self.registry, template)
                if paths and not look.may_match(paths, gi):  # the search would fail
                    self.report.miss(template.form.op, _differs(template),
                                     at=_where(view, gi, fn))
                    continue
                if matcher is None:
                    matcher = Matcher(template, view, claimed, concrete=False)
                done = self.try_at(template, matcher, view, gi, claimed, fn)
                if done is not None:
                    rewrites.append(done)
            if differs:
                self.report.miss(template.form.op, _differs(template), differs)
        if not rewrites:
            return fn, False
        return _apply(fn, rewrites, view.identities), True

    def try_at(self, template, matcher, view, gi, claimed, fn):
        op = template.form.op
        found = matcher.find(gi, 1)  # most tries end here: the structure differs
        if not found:
            self.report.miss(op, _differs(template), at=_where(view, gi, fn))
            return None
        env = found[0]
        owners = {o for i in env.region() for o in view.owners[i]}
        if len(owners) == 1:  # one call for another gains nothing (and a kept op is kept)
            only = fn.calls[next(iter(owners))].op
            self.report.miss(op, f"already a {op} call" if only == op else
                             f"the region is one call ({only})", at=_where(view, gi, fn))
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
        self.report.miss(op, f"{template.form.label}: {reason}", at=_where(view, gi, fn))
        return None

    def recover(self, template, view, gi, claimed, env, fn):
        opdef = self.registry.get(template.form.op)
        values = []
        for p in template.params:
            if p is None:
                values.append(None)
            elif id(p) not in env.binds:
                return "an input of the op is not used by the form"
            else:
                values.append(env.binds[id(p)])
        problem = region_problem(view, gi, env, values)
        if problem:
            return problem
        region = sorted(env.region())
        key = region_key(view, region, values)
        known_at = None if key is None else self._known if key[2] else self._shared_known
        if known_at is not None:  # a repeated layer: the same region, the same answer
            known = known_at.get((template, key))
            if isinstance(known, str):
                return known
            if known is not None:  # (region_problem just passed on this very env)
                return self.rewrite(opdef, view, gi, claimed, values, known, env, fn,
                                    checked=True)
        result = self._recover(opdef, template, view, gi, claimed, env, fn, region, values)
        if known_at is not None:
            if len(known_at) >= MAX_TRACES:
                known_at.clear()
            known_at[(template, key)] = result if isinstance(result, str) else \
                result[1][-1].attrs
        return result

    def _recover(self, opdef, template, view, gi, claimed, env, fn, region, values):
        region_calls = [view.calls[i] for i in region]
        types = tuple(None if v is None else v.type for v in values)
        facts = region_facts(region_calls)
        numbers = facts[0]
        # the candidates and their traces follow from these alone: where none of them
        # came as far as a comparison with the region, the next region alike ends so too
        unverified = (template, types, tuple([attr_key(x) for x in numbers]),
                      tuple(facts[1]), tuple(facts[2]))
        known = self._unverified.get(unverified)
        if known is not None:
            return known
        found, refused, compared = None, None, False
        for attrs in self.candidates(opdef, template, facts, values, types):
            concrete = traced(self.registry, template.form, types, attrs)
            if isinstance(concrete, str):
                refused = refused or concrete  # the op refuses these inputs: say why
                continue
            if not _fits(scalars(concrete), numbers):
                continue
            self.verifications[opdef.name] += 1
            compared = True
            found = self.verify(concrete, view, gi, claimed, values, attrs)
            if not isinstance(found, str):
                break
        if found is None or isinstance(found, str):
            why = found or refused or "no attribute values reproduce the region's constants"
            if not compared:
                if len(self._unverified) >= MAX_TRACES:
                    self._unverified.clear()
                self._unverified[unverified] = why
            return why
        attrs, env = found
        return self.rewrite(opdef, view, gi, claimed, values, attrs, env, fn)

    def candidates(self, opdef, template, facts, inputs, types) -> list[dict]:
        """Attribute sets to try, most likely first: enumerable attributes as traced,
        floats solved from the region's constants, ints and int lists from its
        attributes (and every axis of the first input)."""
        numbers, lists, ints = facts
        first = next((v for v in inputs if v is not None), None)
        rank = first.type.rank if first is not None else 0
        ints = ints + list(range(rank)) + list(range(-rank, 0))  # an axis may show in shapes
        per_attr = []
        for key, spec in opdef.attr_specs.items():
            kind, optional = spec.type.rstrip("?"), spec.type.endswith("?")
            seen = [v[key] for v in template.variants]
            if kind.startswith("int"):
                values = seen + ([None] if optional else []) + \
                    (lists + [(i,) for i in ints] if "ints" in kind else ints)
            elif kind.startswith("float"):
                values = ([None] if optional else []) + seen
            else:
                values = seen
            per_attr.append((key, list(_unique(values))))
        base = {key: values[0] for key, values in per_attr}
        for index, (key, values) in enumerate(per_attr):
            if opdef.attr_specs[key].type.rstrip("?").startswith("float"):
                solved = self.solve_float(template, types, base, key, numbers)
                per_attr[index] = (key, list(_unique(values + solved)))
        return [{key: value for (key, _), value in zip(per_attr, combo)}
                for combo in itertools.islice(itertools.product(*(v for _, v in per_attr)),
                                              MAX_CANDIDATES)]

    def solve_float(self, template, types, base, key, numbers) -> list[float]:
        """Values of float attribute `key` that give the region's constants: trace the
        form with two probe values, see which constants move and how (a, 1/a, a^2,
        sqrt(a), ...), and invert that on each of the region's constants."""
        probes = [traced(self.registry, template.form, types, {**base, key: p})
                  for p in PROBES]
        if any(isinstance(t, str) for t in probes) or \
                len(scalars(probes[0])) != len(scalars(probes[1])):
            inverses = [inv for _, inv in TRANSFORMS]  # cannot tell: try them all
        else:
            inverses = []
            for a, b in zip(scalars(probes[0]), scalars(probes[1])):
                if a == b:
                    continue
                for forward, inverse in TRANSFORMS:
                    if math.isclose(forward(PROBES[0]), a, rel_tol=1e-6) and \
                            math.isclose(forward(PROBES[1]), b, rel_tol=1e-6):
                        inverses.append(inverse)
                        break
        out = []
        for c in numbers:
            for inverse in dict.fromkeys(inverses):
                try:
                    x = inverse(c)
                except (ZeroDivisionError, OverflowError, ValueError):
                    continue
                if x is not None and math.isfinite(x):
                    out.append(_tidy(x))
        return out

    def verify(self, concrete, view, gi, claimed, values, attrs):
        """The region equals `concrete` (the form traced with `attrs` on the inputs'
        types), matched afresh with constants, attributes and types compared."""
        def same_inputs(env) -> bool:
            binds = [None if p is None else env.binds.get(id(p)) for p in concrete.params]
            return all(same_value(a, b) or (isinstance(a, Const) and isinstance(b, Const) and
                                       np.array_equal(a.data, b.data))
                       for a, b in zip(binds, values))

        # the matches in order, up to the first with the region's inputs
        envs = Matcher(concrete, view, claimed, concrete=True).find(gi, None, same_inputs)
        if envs and same_inputs(envs[-1]):
            return opdef_attrs(self.registry, concrete, attrs), envs[-1]
        return "no attribute values reproduce the region's constants"

    def rewrite(self, opdef, view, gi, claimed, values, attrs, env, fn, checked=False):
        problem = None if checked else region_problem(view, gi, env, values)
        if problem:
            return problem
        region = env.region()
        root_value = view.calls[gi].outputs[0]
        owners = {o for i in region for o in view.owners[i]}
        prelude, inputs = [], []
        for v in values:
            if isinstance(v, Rearranged) and isinstance(v.base, Const) and v.shape is None:
                v = _transposed(v.base, v.axes)
            elif isinstance(v, Rearranged):
                base = v.base
                if v.shape is not None:
                    call = make_call(self.registry, "reshape", [base], {"shape": list(v.shape)})
                    prelude.append(call)
                    base = call.outputs[0]
                if v.axes is not None:
                    call = make_call(self.registry, "permute_dims", [base],
                                     {"axes": list(v.axes)})
                    prelude.append(call)
                    base = call.outputs[0]
                v = base
            inputs.append(v)
        replaced = tuple(fn.calls[o].op for o in sorted(owners))
        origin = Origin(opdef.name, attrs, f"recompose of {len(owners)} calls",
                        ("recompose",) + replaced)
        try:  # the form may broadcast what the op does not (k with fewer heads than q)
            inputs, type_ = self.checked(opdef, inputs, attrs)
        except LegatoError as err:
            return f"the op refuses the region's inputs: {err}"
        if type_ != root_value.type:
            return f"the op gives {type_}, the region {root_value.type}"
        new = Call(opdef.name, inputs, attrs, (root_value,), origin)
        claimed.update(region)
        self.report.recovered[opdef.name] += 1
        return owners, prelude + [new]


    def checked(self, opdef, inputs, attrs) -> tuple[tuple, TensorType]:
        """The inputs of a call of `opdef` (omitted optional inputs as None) and its first
        result's type, as make_call checks and infers them; remembered on the registry
        per op, input types and attributes (repeated layers recover alike), except for an
        op that looks at its constant inputs' values."""
        if opdef.const_check is not None or not isinstance(attrs, Attrs):
            new = make_call(self.registry, opdef.name, inputs, attrs)
            return new.inputs, new.outputs[0].type
        key = (opdef.name, attrs.key(), tuple([None if v is None else
                                               (v.type.shape, v.type.dtype) for v in inputs]))
        known = self._checked.get(key)
        if known is None or known[0] is not opdef:
            new = make_call(self.registry, opdef.name, inputs, attrs)  # raises if refused
            if len(self._checked) >= MAX_TRACES:
                self._checked.clear()
            known = self._checked[key] = (opdef, len(new.inputs), new.outputs[0].type)
        return tuple(inputs) + (None,) * (known[1] - len(inputs)), known[2]


def _differs(template) -> str:
    """The miss of a template whose structure is not at a call (its text made once)."""
    reason = template.matching.get("differs")
    if reason is None:
        reason = template.matching["differs"] = f"{template.form.label}: structure differs"
    return reason


def _where(view, gi: int, fn: Function):
    """A function naming the input call where view call `gi` starts (None: no such call)."""
    owners = view.owners[gi]
    if not owners:
        return None
    return lambda: f"call {min(owners)} ({fn.calls[min(owners)].op})"


def traced(registry, form, types, attrs):
    """`trace` cached on the registry by form, input types and attributes (repeated
    layers hit)."""
    try:
        key = (form, types, tuple([(k, attr_key(v)) for k, v in attrs.items()]))
    except TypeError:
        key = None
    cache = registry.derived("recompose.traces")
    found = cache.get(key) if key is not None else None
    if found is None:
        try:
            found = trace(registry, form, types, attrs)
        except Exception as err:  # noqa: BLE001 - attribute values the op refuses
            found = f"attributes {attrs} do not apply: {err}"
        if key is not None:
            if len(cache) >= MAX_TRACES:
                cache.clear()
            cache[key] = found
    return found


SMALL_CONST = 4096  # elements; a larger constant in a region is told apart by identity


def region_key(view, region: list[int], values) -> tuple | None:
    """The region as data: each call's op, attributes, result types and where its inputs
    come from (the region, an op input, a constant's contents), plus the op inputs'
    types, and whether it holds a constant (one too large to key by its contents). Two
    regions with one key recover the same attributes (layers repeat); None if an input
    comes from elsewhere."""
    bound = {}
    for i, v in enumerate(values):
        if v is not None:
            if isinstance(v, Rearranged):
                bound[id(v.base)] = ("input", i, v.shape, v.axes)
            else:
                bound[id(v)] = ("input", i, None, None)
    made: dict[int, tuple] = {}
    items, holds = [], False
    calls = view.calls
    # types as (shape, dtype): equal when the types are, and hashed without a call
    for k, i in enumerate(region):
        call = calls[i]
        ins = []
        for v in call.inputs:
            if v is None:
                ins.append(None)
                continue
            found = made.get(id(v)) or bound.get(id(v))
            if found is not None:
                ins.append(found)
            elif isinstance(v, Const):
                # a large one by itself (held by the key: compared by identity)
                data = v.data
                small = data.size <= SMALL_CONST
                holds = holds or not small
                ins.append((v.type.dtype, v.type.shape, data.tobytes() if small else v))
            else:
                return None
        outs = call.outputs
        items.append((call.op, call.attrs.key(),
                      tuple([(o.type.shape, o.type.dtype) for o in outs]), tuple(ins)))
        for j, out in enumerate(outs):
            made[id(out)] = ("call", k, j)
    types = tuple([None if v is None else ((t := v.type).shape, t.dtype) for v in values])
    return tuple(items), types, holds


def opdef_attrs(registry, template, attrs):
    return registry.get(template.form.op).normalize_attrs(attrs)


def _transposed(const: Const, axes: tuple) -> Const:
    """A constant transposed: a view of its data, not a copy (a 768-wide weight took
    0.4 ms per recovered nn.linear to copy; a backend that packs the weight reads the
    original layout through the view, and kernels copy what they cannot walk)."""
    data = np.transpose(const.data, axes)
    data.setflags(write=False)
    return Const(TensorType(data.shape, const.dtype), None, data)


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
    used = {id(r) for r in results}
    kept = []
    for call in reversed(calls):
        if id(call) in dead and not any(id(o) in used for o in call.outputs):
            continue
        kept.append(call)
        used.update(id(v) for v in call.inputs if v is not None)
    kept.reverse()
    return kept


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
