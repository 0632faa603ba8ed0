"""Recovering a matched region's attributes, and the rewrite (legato.passes.recompose).

Attribute values are proposed from the region (its scalar constants, their reciprocals,
squares and roots, its axes, the op's defaults and the template's enumerated choices);
the form is traced again with those values on the inputs' real types, and the region must
equal that trace (constants within a relative 1e-5). What a region recovers is kept on
the registry by the region as data (`region_key`): repeated layers recover alike.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..ir import Attrs, Call, Const, Origin, TensorType, attr_key
from ..ir.calls import make_call, new_call
from ..ir.errors import LegatoError
from .canonical import scalar_value
from .matching import RTOL, Env, Matcher, same_value
from .patterns import Template, View, trace
from .rearranged import Rearranged

MAX_TRACES = 4096  # traced forms (and recovered regions) a registry keeps
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



class Recovers:
    """The recovery and the rewrite, as methods of the Recomposer (legato.passes.recompose):
    they read its registry, report and caches."""

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
        key = region_key(view, region, values, self._contents)
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
        new = new_call(opdef.name, inputs, attrs, (root_value,), origin)
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
MAX_CONTENTS = 1024  # small constants' contents a registry keeps


def region_key(view, region: list[int], values, contents: dict | None = None) -> tuple | None:
    """The region as data: each call's op, attributes, result types and where its inputs
    come from (the region, an op input, a constant's contents), plus the op inputs'
    types, and whether it holds a constant (one too large to key by its contents). Two
    regions with one key recover the same attributes (layers repeat); None if an input
    comes from elsewhere. `contents` keeps each small constant's contents (see
    `const_item`)."""
    if contents is None:
        contents = {}
    bound = {}
    for i, v in enumerate(values):
        if v is not None:
            if isinstance(v, Rearranged):
                bound[id(v.base)] = ("input", i, v.shape, v.axes)
            else:
                bound[id(v)] = ("input", i, None, None)
    # where a value comes from: an op input (above), then each result of the region as
    # it is made (an op input is never made inside the region: region_problem says so)
    made = bound
    items, holds = [], False
    calls, heads = view.calls, view.heads
    # types as (shape, dtype): equal when the types are, and hashed without a call
    for k, i in enumerate(region):
        call = calls[i]
        ins = []
        for v in call.inputs:
            if v is None:
                ins.append(None)
                continue
            found = made.get(id(v))
            if found is not None:
                ins.append(found)
            elif isinstance(v, Const):
                if v.data.size <= SMALL_CONST:
                    ins.append(const_item(contents, v))
                else:  # a large one by itself (held by the key: compared by identity)
                    holds = True
                    ins.append((v.type.dtype, v.type.shape, v))
            else:
                return None
        head = heads.get(i)  # the call's own part: op, attributes, result types
        if head is None:
            head = heads[i] = (call.op, call.attrs.key(),
                               tuple([(o.type.shape, o.type.dtype) for o in call.outputs]))
        items.append((head, tuple(ins)))
        for j, out in enumerate(call.outputs):
            made[id(out)] = ("call", k, j)
    types = tuple([None if v is None else v.type_key if isinstance(v, Rearranged) else
                   ((t := v.type).shape, t.dtype) for v in values])
    return tuple(items), types, holds


def const_item(contents: dict, const: Const) -> tuple:
    """A small constant as a region key holds it, (dtype, shape, its data as bytes), made
    once per constant and kept in `contents` with the constant itself (so the id stays its
    own while the entry lives): a bytes object hashes once, and each region key read a
    16 KB weight's contents again, copying and hashing them (nn.linear is tried at every
    matmul with a constant weight)."""
    found = contents.get(id(const))
    if found is None:
        if len(contents) >= MAX_CONTENTS:
            contents.clear()
        found = contents[id(const)] = (const, (const.type.dtype, const.type.shape,
                                               const.data.tobytes()))
    return found[1]


def opdef_attrs(registry, template, attrs):
    return registry.get(template.form.op).normalize_attrs(attrs)


def _transposed(const: Const, axes: tuple) -> Const:
    """A constant transposed: a view of its data, not a copy (a 768-wide weight took
    0.4 ms per recovered nn.linear to copy; a backend that packs the weight reads the
    original layout through the view, and kernels copy what they cannot walk)."""
    data = np.transpose(const.data, axes)
    data.setflags(write=False)
    return Const(TensorType(data.shape, const.dtype), None, data)


def region_problem(view: View, gi: int, env: Env, values) -> str | None:
    """Why the region of `env` (rooted at view call `gi`) cannot become one call, or None:
    an interior value is used outside it, it covers part of an input call, or an input
    of the op is computed inside it."""
    region = env.region()
    calls, owners = view.calls, view.owners
    root_value = calls[gi].outputs[0]
    users, results = view.users, view.results
    made, covered = set(), {}  # the region's results; input call -> view calls it covers
    for i in region:
        for out in calls[i].outputs:
            key = id(out)
            made.add(key)
            if out is not root_value and (key in results or
                                          not region.issuperset(users.get(key, ()))):
                return "an interior value is used outside the region"
        for o in owners[i]:
            covered[o] = covered.get(o, 0) + 1
    counts = view.owner_counts()
    for o, n in covered.items():
        if counts[o] != n:
            return "the region covers part of an input call"
    for v in values:
        base = v.base if isinstance(v, Rearranged) else v
        if base is not None and id(base) in made:
            return "an input of the op is computed inside the region"
    return None
