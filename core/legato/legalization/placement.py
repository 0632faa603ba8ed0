"""Where each call of a compiled model runs, and what that costs.

Per backend: the calls, their FLOPs and the bytes they read and write. Between backends:
the transitions (a value made on one backend and read on another counts once per reading
backend; model inputs and results are not transitions) and the bytes crossing them. And a
ranked "implement next" list: the ops that run off the first-choice backend, with the
transitions and fallback FLOPs that running them there would remove.

FLOPs come from the calls' shapes. matmul, linear and conv2d (and their qnn forms) count 2
per multiply-add, plus one per output element for a bias: exact. nn.attention counts its
two matmuls exactly and 5 per score for scale, mask and softmax: an estimate. Elementwise
and broadcast ops count one per output element; data movement (injective ops: reshape,
transpose, take, ...; and broadcast_to) counts none. Reductions count their input
elements, pooling its window per output element, and the other composite ops a
per-element factor (`PER_ELEMENT`): estimates, counted apart in `flops_estimated`.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..ir import CALL_OP, CUSTOM_OP, Call, Const, Value
from ..ir.errors import LegatoError
from ..ir.errors import size_text as size
from ..ir.symbols import GUARDS, Expr, lone_symbol, parse_dim
from ..runtime.specialize import is_symbolic, specialize
from .custom_ops import decode_custom

SCHEMA = "legato.placement/1"
# estimated FLOPs per output element of composite ops without an exact formula
PER_ELEMENT = {"nn.layer_norm": 8, "nn.rms_norm": 6, "nn.softmax": 5, "nn.log_softmax": 6,
               "nn.gelu": 8, "nn.silu": 4, "nn.group_norm": 8, "nn.instance_norm": 8,
               "nn.batch_norm": 2}
SHOWN = 8  # rows of the "implement next" list the text form prints


@dataclass(slots=True)
class Placed:
    """One call as it runs: the backend, the op as counted, its cost, and value keys."""

    call: Call
    backend: str
    op: str
    flops: int
    estimated: int  # the part of `flops` that is an estimate
    bytes: int
    inputs: tuple = ()
    outputs: tuple = ()
    source: str | None = None  # where in the model it came from (see source_of)


class Placement:
    """The placed calls of a compiled model and what they add up to (`to_json`, `text`).
    Built when first read (`calls`), so a compile whose report nobody reads pays nothing."""

    def __init__(self, targets: tuple[str, ...], build=None):
        self.targets = targets
        self._build = build  # fills _calls and _producer on first use
        self._calls: list[Placed] = []
        self._producer: dict = {}  # value key -> index into calls
        self.bindings: dict[str, int] = {}  # a symbolic model's sizes the costs are at

    @property
    def calls(self) -> list[Placed]:
        if self._build is not None:
            build, self._build = self._build, None
            build(self)
        return self._calls

    @property
    def producer(self) -> dict:
        self.calls  # (built first)
        return self._producer

    # --- what the calls add up to ---------------------------------------------------------

    def per_backend(self) -> dict[str, dict]:
        rows: dict[str, dict] = {}
        for p in self.calls:
            row = rows.setdefault(p.backend, {"calls": 0, "flops": 0, "flops_estimated": 0,
                                              "bytes": 0, "ops": Counter()})
            row["calls"] += 1
            row["flops"] += p.flops
            row["flops_estimated"] += p.estimated
            row["bytes"] += p.bytes
            row["ops"][p.op] += 1
        order = {name: i for i, name in enumerate(self.targets)}
        return {name: {**row, "ops": dict(sorted(row["ops"].items()))}
                for name, row in sorted(rows.items(),
                                        key=lambda kv: (order.get(kv[0], len(order)), kv[0]))}

    def crossings(self, moved: dict[int, str] | None = None) -> list[dict]:
        """Each value read on a backend other than the one that made it, once per reading
        backend; `moved` places some calls (by index) elsewhere, to ask "what if"."""
        moved = moved or {}
        seen, out = set(), []
        for i, p in enumerate(self.calls):
            where = moved.get(i, p.backend)
            for key, value in p.inputs:
                j = self.producer.get(key)
                if j is None:
                    continue
                made = moved.get(j, self.calls[j].backend)
                if made != where and (key, where) not in seen:
                    seen.add((key, where))
                    maker = self.calls[j]
                    out.append({"from": made, "to": where, "bytes": nbytes(value),
                                "op": maker.op, "source": maker.source})
        return out

    def implement_next(self) -> list[dict]:
        """The ops that run off the first backend, as a plan: each row is the op whose
        calls, run there as well as those of the rows above, remove the most transitions
        (then the most FLOPs from the other backends); when no op removes any, the op with
        the most FLOPs. An op alone may add transitions (a reshape between two fallback
        adds); after the adds it removes them."""
        if not self.targets:
            return []
        first = self.targets[0]
        by_op: dict[str, list[int]] = {}
        for i, p in enumerate(self.calls):
            if p.backend != first:
                by_op.setdefault(p.op, []).append(i)
        moved: dict[int, str] = {}
        now = self.crossings()
        rows = []
        while by_op:
            options = []
            for op, indices in by_op.items():
                after = self.crossings({**moved, **dict.fromkeys(indices, first)})
                flops = sum(self.calls[i].flops for i in indices)
                options.append((len(now) - len(after), flops, op, after))
            # the most transitions removed; when no op alone removes any, the most FLOPs
            if max(o[0] for o in options) > 0:
                removed, flops, op, after = min(options, key=lambda o: (-o[0], -o[1], o[2]))
            else:
                removed, flops, op, after = min(options, key=lambda o: (-o[1], -o[0], o[2]))
            indices = by_op.pop(op)
            moved.update(dict.fromkeys(indices, first))
            calls = [self.calls[i] for i in indices]
            rows.append({
                "op": op, "calls": len(indices),
                "runs_on": dict(Counter(p.backend for p in calls)),
                "flops": flops, "transitions_removed": removed,
                "transitions_after": len(after),
                "bytes_removed": sum(c["bytes"] for c in now) - sum(c["bytes"] for c in after),
                "sources": _sources(calls), "decomposed_from": _decomposed_from(calls)})
            now = after
        return rows

    # --- output -------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The report for dashboards; the keys are documented in docs/plugins.md."""
        crossings = self.crossings()
        return {
            "schema": SCHEMA,
            "targets": list(self.targets),
            "bindings": dict(self.bindings),
            "backends": self.per_backend(),
            "totals": {"calls": len(self.calls), "flops": sum(p.flops for p in self.calls),
                       "flops_estimated": sum(p.estimated for p in self.calls),
                       "bytes": sum(p.bytes for p in self.calls)},
            "transitions": {"count": len(crossings),
                            "bytes": sum(c["bytes"] for c in crossings),
                            "edges": crossings},
            "implement_next": self.implement_next(),
            "calls": [{"op": p.op, "backend": p.backend, "flops": p.flops,
                       "flops_estimated": p.estimated, "bytes": p.bytes,
                       "source": p.source,
                       "origin": None if p.call.origin is None else p.call.origin.to_json()}
                      for p in self.calls]}

    def summary(self) -> str:
        crossings = self.crossings()
        return (f"{len(crossings)} backend transitions "
                f"({size(sum(c['bytes'] for c in crossings))} crossing)")

    def text(self, shown: int = SHOWN) -> str:
        self.calls  # (built first: that sets the bindings)
        at = ", ".join(f"{k}={v}" for k, v in sorted(self.bindings.items()))
        lines = [f"placement and cost{f' at {at}' if at else ''} (FLOPs from shapes; ~ marks "
                 "what includes estimates):",
                 f"  {'backend':<16} {'calls':>6} {'FLOPs':>12} {'share':>6} {'bytes':>10}"]
        rows = self.per_backend()
        total = sum(r["flops"] for r in rows.values()) or 1
        for name, r in rows.items():
            mark = "~" if r["flops_estimated"] else " "
            lines.append(f"  {name:<16} {r['calls']:>6} {mark}{count(r['flops']):>11} "
                         f"{100 * r['flops'] / total:>5.1f}% {size(r['bytes']):>10}")
        crossings = self.crossings()
        pairs = Counter((c["from"], c["to"]) for c in crossings)
        lines.append(f"  transitions: {len(crossings)}, "
                     f"{size(sum(c['bytes'] for c in crossings))} crossing"
                     + (" (" + ", ".join(f"{a} -> {b} x{n}" for (a, b), n in
                                         sorted(pairs.items())) + ")" if pairs else ""))
        ranked = self.implement_next()
        if ranked:
            lines.append(f"  implement next on {self.targets[0]} (each op with those above "
                         "it: transitions it removes, those left, its FLOPs):")
            for r in ranked[:shown]:
                where = ", ".join(f"{n} on {b}" for b, n in r["runs_on"].items())
                made = "".join(f" (from {op})" for op in r["decomposed_from"])
                lines.append(f"    {r['op']:<18} {where:<16} {-r['transitions_removed']:>+4} "
                             f"-> {r['transitions_after']:<4} {count(r['flops']):>7} FLOPs"
                             f"{made}  e.g. " + ", ".join(r["sources"][:2]))
            if len(ranked) > shown:
                lines.append(f"    ... {len(ranked) - shown} more ops (--report-json FILE "
                             "lists them all)")
        return "\n".join(lines)


# --- building it --------------------------------------------------------------------------

def place(module, backend, fallback, fallback_calls, registry, callees=None,
          targets: tuple[str, ...] = (), sources: dict | None = None) -> Placement:
    """The Placement of a legalized `module` compiled for `backend` (calls in
    `fallback_calls` or borrowed run on `fallback`); `callees`: a partitioned build's
    external functions, name -> Compiled, each placed on its own backends; `sources`:
    `recomposed_sources` of the recomposition before legalization."""
    def build(placement: Placement) -> None:
        concrete, calls = module, fallback_calls
        if is_symbolic(module):
            concrete, calls, placement.bindings = _at_nominal_sizes(module, fallback_calls,
                                                                     registry)
        _place_function(placement, concrete, concrete.main, {}, backend, fallback,
                        calls, registry, callees or {}, sources or {})
    return Placement(targets or (backend.name,), build)


NOMINAL_SIZE = 128  # a symbol's size for costs where no guard bounds it


def _at_nominal_sizes(module, fallback_calls, registry):
    """A model with symbolic dims costed at one binding: each symbol at the largest size
    its guards allow (or NOMINAL_SIZE), so FLOPs and bytes are numbers; every symbol at 1
    where the guards refuse that binding."""
    bounds = {}
    for text in module.main.attrs.get(GUARDS, ()):
        small, large = text.split("<=")
        name = lone_symbol(parse_dim(small))
        if large.strip().isdigit() and name is not None:
            bounds[name] = min(bounds.get(name, int(large)), int(large))
    names = sorted({s for p in module.main.params for d in p.shape if isinstance(d, Expr)
                    for s in d.symbols()})
    for bindings in ({n: bounds.get(n, NOMINAL_SIZE) for n in names}, dict.fromkeys(names, 1)):
        try:
            concrete, calls = specialize(module, bindings, registry)
        except LegatoError:
            continue
        return concrete, frozenset(calls[c] for c in fallback_calls), bindings
    raise LegatoError("the placement report could not bind the model's symbols "
                      f"{', '.join(names)} to any size")


def recomposed_sources(before, after) -> dict[int, tuple]:
    """id(origin) of each recomposed call of `after` -> (the origin, the source of the call
    in `before` whose result it computes (the last ONNX node of the region it replaced),
    with the recomposition: "/model/layer.0/attention/MatMul_1 (recompose of 9 calls)").
    The origin is held so that its id cannot name another one later."""
    made = {v: c.origin.source for fn in before.functions.values() for c in fn.calls
            if c.origin is not None for v in c.outputs}
    return {id(c.origin): (c.origin, f"{made[c.outputs[0]]} ({c.origin.source})")
            for fn in after.functions.values() for c in fn.calls
            if c.origin is not None and c.origin.rules[:1] == ("recompose",)
            and c.outputs and c.outputs[0] in made}


def _place_function(placement, module, fn, alias, backend, fallback, fallback_calls,
                    registry, callees, sources) -> None:
    def key(v: Value):
        return alias.get(v, v)

    for call in fn.calls:
        if call.op == CALL_OP:
            name = call.attrs["callee"]
            inner = callees.get(name)
            if inner is not None:  # a region another backend compiled
                sub_module, sub_fn = inner.module, inner.module.main
                sub = (inner.backend, inner.fallback, inner.fallback_calls,
                       getattr(inner, "callees", {}))
            else:
                sub_module, sub_fn = module, module.functions[name]
                sub = (backend, fallback, fallback_calls, callees)
            inner_alias = {p: key(v) for p, v in zip(sub_fn.params, call.inputs)}
            _place_function(placement, sub_module, sub_fn, inner_alias, sub[0], sub[1],
                            sub[2], registry, sub[3], sources)
            for out, res in zip(call.outputs, sub_fn.results):
                alias[out] = inner_alias.get(res, res)
            continue
        where, op = runs_on(call, backend, fallback, fallback_calls, registry)
        flops, estimated = call_flops(call, registry)
        inputs = tuple((key(v), v) for v in call.inputs
                       if v is not None and not isinstance(v, Const))
        moved = sum(nbytes(v) for v in call.inputs if v is not None) + \
            sum(nbytes(v) for v in call.outputs)
        index = len(placement._calls)
        known = sources.get(id(call.origin))
        source = known[1] if known is not None and known[0] is call.origin else \
            source_of(call)
        placement._calls.append(Placed(call, where.name, op, flops, estimated, moved, inputs,
                                      tuple(call.outputs), source))
        for out in call.outputs:
            placement._producer[key(out)] = index


def runs_on(call: Call, backend, fallback, fallback_calls, registry):
    """(the backend whose kernel runs `call`, the op as reports count it). A custom call
    counts as "custom <op>" under the backend whose kernel for <op> runs it, when the
    backend executes custom calls by decoding them (it has no kernel for CUSTOM_OP)."""
    where = fallback if fallback is not None and (
        call in fallback_calls or call.op in backend.borrowed) else backend
    op = call.op
    if op == CUSTOM_OP and backend.executes and not backend.has_kernel(CUSTOM_OP):
        op = decode_custom(call, registry).op
        if not backend.has_kernel(op) and fallback is not None:
            where = fallback
        op = f"{CUSTOM_OP} {op}"
    return where, op


# --- cost of one call ---------------------------------------------------------------------

COPIES = frozenset({"broadcast_to"})  # broadcast kind, but it only moves data
POOLS = frozenset({"nn.avg_pool2d", "nn.max_pool2d", "avg_pool2d"})


def call_flops(call: Call, registry) -> tuple[int, int]:
    """(FLOPs, the part of them that is an estimate) of one call, from its shapes."""
    op = call.op.removeprefix("qnn.") if call.op.startswith("qnn.") else call.op
    out = sum(v.type.size for v in call.outputs)
    if op == "matmul":
        return 2 * out * _dim(call.inputs[0], -1), 0
    if op in ("nn.linear", "linear"):
        data, bias = call.inputs[0], _bias(call)
        return 2 * out * _dim(data, -1) + (out if bias is not None else 0), 0
    if op == "nn.conv2d":
        return _conv_flops(call, out), 0
    if op == "nn.attention":
        return _attention_flops(call)
    if op in COPIES or call.op in (CUSTOM_OP, CALL_OP):
        return 0, 0
    if op in PER_ELEMENT:
        n = PER_ELEMENT[op] * out
        return n, n
    if op in POOLS:  # one step per window element
        n = out * math.prod(call.attrs.get("pool_size") or (1,))
        return n, n
    kind = registry.get(call.op).kind if call.op in registry else "opaque"
    if kind in ("elemwise", "broadcast"):
        return out, 0
    if kind == "injective":
        return 0, 0
    if kind == "reduce":
        n = sum(v.type.size for v in call.inputs[:1] if v is not None)
        return n, n
    return out, out


def _dim(v: Value, axis: int) -> int:
    return int(v.type.shape[axis]) if v.type.shape else 1


def _bias(call: Call):
    names = {"nn.linear": 2, "qnn.linear": 8, "nn.conv2d": 2, "qnn.conv2d": 8}
    i = names.get(call.op)
    return call.inputs[i] if i is not None and len(call.inputs) > i else None


def _conv_flops(call: Call, out: int) -> int:
    weight = call.inputs[3 if call.op.startswith("qnn.") else 1]
    layout = str(call.attrs.get("kernel_layout", "OIHW"))
    out_channels = weight.type.shape[layout.index("O")] if "O" in layout else 1
    per_output = weight.type.size // max(int(out_channels), 1)  # (C_in / groups) * kH * kW
    return 2 * out * per_output + (out if _bias(call) is not None else 0)


def _attention_flops(call: Call) -> tuple[int, int]:
    q, k, v = call.inputs[:3]
    *batch, lq, d = q.type.shape
    lk, dv = k.type.shape[-2], v.type.shape[-1]
    scores = math.prod(batch) * lq * lk
    softmax = 5 * scores  # scale, mask, max-subtract and exp, sum, divide
    return 2 * scores * d + 2 * scores * dv + softmax, softmax


def nbytes(v: Value) -> int:
    return v.type.size * itemsize(v.type.dtype)


def itemsize(dtype: str) -> int:
    if dtype == "bfloat16":
        return 2
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 4


def source_of(call: Call) -> str | None:
    """Where a call came from in the model: the ONNX node name for imported models (kept
    through decompositions), else the source call's position or the recomposition."""
    return None if call.origin is None else call.origin.source


def _sources(calls: list[Placed]) -> list[str]:
    seen: dict[str, None] = {}
    for p in calls:
        if p.source is not None:
            seen.setdefault(p.source)
    return list(seen)


def _decomposed_from(calls: list[Placed]) -> dict[str, int]:
    """The ops whose decompositions made these calls (op -> calls): keeping one of those
    whole may be the better thing to implement."""
    found: Counter = Counter()
    for p in calls:
        origin = p.call.origin
        if origin is not None and any(r.startswith("decompose:") for r in origin.rules):
            found[origin.op] += 1
    return dict(found)


def count(n: int) -> str:
    """FLOPs as people read them: 1.2 GFLOP style, without the unit."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)
