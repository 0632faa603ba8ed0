"""Grouping calls into convex regions and lifting regions into module-level functions.

Partitioning (by backend) and fusion (by pattern kind) both grow groups greedily in
program order. A call may join a producer's group only if that cannot create a cycle
between groups: no other group it reads from may depend on the group it joins.
"""
from __future__ import annotations

import heapq
from typing import Callable, Hashable

from ..ir import CALL_OP, Attrs, Call, Const, Function, Module, Value


class _Groups:
    """Groups with their transitive dependencies (kept exact as groups grow)."""

    def __init__(self):
        self.members: list[list[Call]] = []
        self.keys: list[Hashable] = []
        self.ancestors: list[set[int]] = []
        self.dependents: list[set[int]] = []

    def new(self, call: Call, key, producer_groups: set[int]) -> int:
        gid = len(self.members)
        self.members.append([call])
        self.keys.append(key)
        self.ancestors.append(set())
        self.dependents.append(set())
        self._add_deps(gid, producer_groups)
        return gid

    def join(self, gid: int, call: Call, producer_groups: set[int]) -> None:
        self.members[gid].append(call)
        self._add_deps(gid, producer_groups - {gid})

    def creates_cycle(self, gid: int, producer_groups: set[int]) -> bool:
        return any(gid in self.ancestors[h] for h in producer_groups if h != gid)

    def _add_deps(self, gid: int, producer_groups: set[int]) -> None:
        new = set()
        for h in producer_groups:
            new.add(h)
            new |= self.ancestors[h]
            self.dependents[h].add(gid)
        stack = [gid]
        while stack:  # everything that depends on gid now depends on `new` too
            g = stack.pop()
            missing = new - self.ancestors[g]
            if missing:
                self.ancestors[g] |= missing
                stack.extend(self.dependents[g])


def group_calls(calls: tuple[Call, ...], key_of: Callable[[Call], Hashable | None],
                can_join: Callable[[list[Call], Call], bool]) -> list[tuple[Hashable, list[Call]]]:
    """Partition `calls` into groups (in program order). Calls with key None stay alone
    (key None); a call joins the first producer group with its key that `can_join`
    accepts and that stays acyclic."""
    groups = _Groups()
    group_of: dict[Value, int] = {}
    for call in calls:
        key = key_of(call)
        producers = {group_of[v] for v in call.inputs if v is not None and v in group_of}
        target = None
        if key is not None:
            for gid in sorted(producers):
                if groups.keys[gid] == key and can_join(groups.members[gid], call) and \
                        not groups.creates_cycle(gid, producers):
                    target = gid
                    break
        if target is None:
            target = groups.new(call, key, producers)
        else:
            groups.join(target, call, producers)
        for out in call.outputs:
            group_of[out] = target
    return list(zip(groups.keys, groups.members))


def region_interface(members: list[Call], fn: Function, readers=None
                     ) -> tuple[list[Value], list[Value]]:
    """(inputs, outputs) of a region: values it reads but does not define (constants stay
    inside), and values it defines that are read outside or returned. `readers` (from
    `value_readers(fn)`) saves recomputing the uses of every value for each region."""
    defined = {o for c in members for o in c.outputs}
    inside = set(map(id, members))
    inputs: list[Value] = []
    seen: set[Value] = set()
    for c in members:
        for v in c.inputs:
            if v is not None and v not in defined and not isinstance(v, Const) and v not in seen:
                seen.add(v)
                inputs.append(v)
    readers = value_readers(fn) if readers is None else readers
    outputs = [o for c in members for o in c.outputs
               if any(r not in inside for r in readers.get(o, ()))]
    return inputs, outputs


def value_readers(fn: Function) -> dict[Value, set]:
    """For each value, the ids of the calls that read it; None stands for `return`."""
    readers: dict[Value, set] = {}
    for c in fn.calls:
        for v in c.inputs:
            if v is not None:
                readers.setdefault(v, set()).add(id(c))
    for r in fn.results:
        readers.setdefault(r, set()).add(None)
    return readers


def lift_regions(module: Module, fn_name: str, regions: list[tuple[str, str, Attrs,
                                                                   list[Call]]]) -> Module:
    """Replace each region (name, kind, attrs, calls) of function `fn_name` by a call of a
    new module-level function holding those calls; the rest keeps its order. A region
    none of whose values is used is dead code: it is dropped, as a call with no results
    would be meaningless."""
    fn = module.functions[fn_name]
    readers = value_readers(fn)
    new_functions, units = {}, []
    in_region = {}
    for name, kind, attrs, members in regions:
        inputs, outputs = region_interface(members, fn, readers)
        if not outputs:
            in_region.update((id(m), None) for m in members)
            continue
        params = tuple(Value(v.type, v.name) for v in inputs)
        body = _rebind(members, dict(zip(inputs, params)))
        results = tuple(body[1].get(o, o) for o in outputs)
        new_functions[name] = Function(params, tuple(body[0]), results, kind, attrs)
        call = Call(CALL_OP, tuple(inputs), Attrs({"callee": name}),
                    tuple(outputs))
        for m in members:
            in_region[id(m)] = call
    seen = set()
    for c in fn.calls:
        unit = in_region.get(id(c), c)
        if unit is not None and id(unit) not in seen:
            seen.add(id(unit))
            units.append(unit)
    main = Function(fn.params, tuple(_topological(units)), fn.results, fn.kind, fn.attrs)
    functions = dict(module.functions)
    functions[fn_name] = main
    functions.update(new_functions)
    return Module(functions)


def _rebind(calls: list[Call], mapping: dict[Value, Value]):
    """Copies of `calls` reading `mapping`'s values, with fresh result values."""
    out, renamed = [], dict(mapping)
    for c in calls:
        inputs = tuple(None if v is None else renamed.get(v, v) for v in c.inputs)
        outputs = tuple(Value(o.type, o.name) for o in c.outputs)
        renamed.update(zip(c.outputs, outputs))
        out.append(Call(c.op, inputs, c.attrs, outputs, c.origin))
    return out, renamed


def _topological(units: list[Call]) -> list[Call]:
    """Order units so each comes after its producers, otherwise keeping program order."""
    producer = {o: i for i, u in enumerate(units) for o in u.outputs}
    waiting = [0] * len(units)
    consumers: list[list[int]] = [[] for _ in units]
    for i, u in enumerate(units):
        deps = {producer[v] for v in u.inputs if v is not None and v in producer}
        waiting[i] = len(deps)
        for d in deps:
            consumers[d].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(units[i])
        for j in consumers[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order
