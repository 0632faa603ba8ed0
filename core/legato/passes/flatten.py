"""A function's calls as recomposition compares them (legato.passes.patterns): composite
calls expanded to primitives, then put in canonical form (legato.passes.canonical), as a
`View` that knows, for each of its calls, which input calls it stands for.

A composite call is expanded once per op, attributes and inputs alike (the key of
`Recipes`: shapes, dtypes, which inputs are one value, small constants' contents) and the
flat calls recorded; the next layer's call replays them on its own inputs, ending at its
own results, without running the decomposition (nor the nested ones) again.
"""
from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Callable

from ..ir import Call, Const, Value
from ..ir.calls import Emitter, Recipes, new_call, new_value, run_decomposition
from .canonical import canonical


class View:
    """Calls in canonical primitive form, each knowing which input calls it stands for
    (`owners`), with producers and users by value."""

    def __init__(self, calls, owners, params=(), results=()):
        self.calls: list[Call] = calls
        self.owners: list[tuple[int, ...]] = owners
        self.params = {id(p) for p in params if p is not None}
        self.results = {id(r) for r in results}
        producer = {id(out): index for index, call in enumerate(calls)
                    for out in call.outputs}
        users: dict[int, list[int]] = {}
        by_op: dict[str, list[int]] = {}
        for index, call in enumerate(calls):
            by_op.setdefault(call.op, []).append(index)
            for value in call.inputs:
                if value is not None:
                    users.setdefault(id(value), []).append(index)
        self.producer, self.users, self.by_op = producer, users, by_op
        self.trees: dict = {}  # call -> its operand tree with nothing claimed (operands.tree_at)
        self.heads: dict = {}  # call -> its op, attributes and result types (region keys)

    def owner_counts(self) -> dict[int, int]:
        """How many view calls stand for each input call."""
        counts = getattr(self, "_owner_counts", None)
        if counts is None:
            counts = self._owner_counts = Counter(chain.from_iterable(self.owners))
        return counts

    def single_use(self, value: Value) -> bool:
        return len(self.users.get(id(value), ())) == 1 and id(value) not in self.results


def expand(registry, call: Call, expandable: Callable[[str], bool],
           recipes: Recipes | None = None) -> list[Call]:
    """`call` as primitive calls (composites that `expandable` accepts are decomposed,
    recursively, replaying `recipes` where given); the results are the call's own output
    values."""
    opdef = registry.find(call.op)
    if opdef is None or opdef.decompose is None or not expandable(call.op):
        return [call]
    emitter = Emitter(registry, call.origin)
    try:
        results = run_decomposition(emitter, opdef, call.inputs, call.attrs, recipes)
    except Exception:  # noqa: BLE001 - a decomposition that cannot run here stays opaque
        return [call]
    made = {id(out) for c in emitter.calls for out in c.outputs}
    rename = {id(new): old for new, old in zip(results, call.outputs) if id(new) in made}
    if len(rename) != len(call.outputs):  # a result is an input or a constant: keep the call
        return [call]
    out = []
    renamed = rename.keys()
    find = registry.find
    for inner in emitter.calls:
        inner_def = find(inner.op)
        # a primitive (most of them) is itself; a composite is expanded in turn
        flats = (inner,) if inner_def is None or inner_def.decompose is None else \
            expand(registry, inner, _always, recipes)
        for flat in flats:
            out.append(flat if renamed.isdisjoint(map(id, flat.outputs)) and
                       renamed.isdisjoint(map(id, flat.inputs)) else _renamed(flat, rename))
    return out


def _always(op: str) -> bool:
    return True


def _renamed(call: Call, rename: dict) -> Call:
    if not any(id(v) in rename for v in call.inputs if v is not None) and \
            not any(id(v) in rename for v in call.outputs):
        return call
    ins = tuple(rename.get(id(v), v) if v is not None else None for v in call.inputs)
    outs = tuple(rename.get(id(v), v) for v in call.outputs)
    return Call(call.op, ins, call.attrs, outs, call.origin)


class Flat:
    """The primitive calls a composite call expanded to, with inputs as positions in a list
    of values a replay fills (None, the call's inputs, the constants read, each flat call's
    outputs as made) and outputs either new or the call's own result `k`."""

    __slots__ = ("consts", "steps")

    def __init__(self, consts: tuple, steps: tuple):
        self.consts, self.steps = consts, steps

    @staticmethod
    def record(call: Call, flat: list[Call]) -> "Flat | None":
        """The flat calls of `call` as positions, or None where one reads a value that is
        neither an input, a constant nor an earlier flat call's result, or carries
        another origin."""
        where: dict[int, int] = {}
        for i, v in enumerate(call.inputs):
            if v is not None and id(v) not in where:
                where[id(v)] = 1 + i
        made = {id(out) for inner in flat for out in inner.outputs}
        consts: dict[int, Const] = {}
        for inner in flat:
            if inner.origin is not call.origin:
                return None
            for v in inner.inputs:
                if v is not None and id(v) not in where and id(v) not in made:
                    if not isinstance(v, Const):
                        return None
                    consts.setdefault(id(v), v)
        for n, key in enumerate(consts):
            where[key] = 1 + len(call.inputs) + n
        results = {id(out): k for k, out in enumerate(call.outputs)}
        steps, first = [], 1 + len(call.inputs) + len(consts)
        for inner in flat:
            at = []
            for v in inner.inputs:
                j = 0 if v is None else where.get(id(v))
                if j is None:  # read before it is made
                    return None
                at.append(j)
            for out in inner.outputs:
                where[id(out)] = first
                first += 1
            outs = tuple([(out.type, results.get(id(out), -1)) for out in inner.outputs])
            steps.append((inner.op, tuple(at), inner.attrs, outs))
        return Flat(tuple(consts.values()), tuple(steps))

    def replay(self, call: Call) -> list[Call]:
        """The recorded flat calls made again on `call`'s inputs, ending at its results."""
        values = [None, *call.inputs, *self.consts]
        own, origin = call.outputs, call.origin
        out = []
        for op, at, attrs, outs in self.steps:
            outputs = tuple([new_value(t) if k < 0 else own[k] for t, k in outs])
            out.append(new_call(op, tuple([values[i] for i in at]), attrs, outputs, origin))
            values.extend(outputs)
        return out


MAX_FLATS = 4096  # recorded expansions a registry keeps


def build_view(registry, calls, params, results, expandable) -> View:
    """The canonical view of a function's calls; owners are indices into `calls`."""
    flat, owners = [], []
    recipes = Recipes(registry)  # layers expand the same composites alike
    shared = registry.derived("recompose.flats")
    local: dict = {}  # expansions keyed by a large constant: kept by this view only
    expands = {}  # per op: whether `expand` may decompose it
    for op in {call.op for call in calls}:
        opdef = registry.find(op)
        expands[op] = opdef is not None and opdef.decompose is not None and expandable(op)
    done = 0  # the calls before this one are in `flat`: primitives (most) copied in runs
    for index in [index for index, call in enumerate(calls) if expands[call.op]]:
        flat.extend(calls[done:index])
        owners.extend([(k,) for k in range(done, index)])
        done = index + 1
        call = calls[index]
        opdef = registry.find(call.op)
        key, large = Recipes.key(opdef, call.inputs, call.attrs)
        table = local if large else shared
        entry = table.get(key)
        if entry is not None and entry[0] is opdef:
            inner_calls = [call] if entry[1] is None else entry[1].replay(call)
        else:
            inner_calls = expand(registry, call, expandable, recipes)
            kept = inner_calls[0] is call
            found = None if kept else Flat.record(call, inner_calls)
            if kept or found is not None:
                if len(table) >= MAX_FLATS:
                    table.clear()
                table[key] = (opdef, found)
        flat.extend(inner_calls)
        owners.extend([(index,)] * len(inner_calls))
    flat.extend(calls[done:])
    owners.extend([(k,) for k in range(done, len(calls))])
    identities: set[int] = set()
    flat, owners = canonical(registry, flat, owners, results, identities)
    view = View(flat, owners, params, results)
    view.identities = identities
    return view
