"""What legalization did, per op and why."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

ACTIONS = ("legal", "kept", "custom", "decomposed", "fallback", "failed")
IN_MODEL = "in the model"  # where a call came from when no decomposition produced it


@dataclass(frozen=True, slots=True)
class Decision:
    """The rule that applied to one (op, attributes, types) combination, and why."""

    action: str
    reason: str
    rule: str = ""


class Report:
    """Per op: what happened (action), why (reason) and how often; op counts before/after;
    after a compile, how many calls each backend runs (`per_backend`)."""

    def __init__(self, backend: str | None, mode: str):
        self.backend, self.mode = backend, mode
        self._events: Counter = Counter()
        self.before: Counter = Counter()
        self.after: Counter = Counter()
        self.failures: list[str] = []
        self.changed = False
        # after compile: backend name -> {op: calls it runs}; custom calls are counted as
        # "custom <op>" under the backend whose kernel runs them
        self.per_backend: dict[str, dict[str, int]] = {}
        self.fallback: str | None = None  # the fallback backend's name, if calls run there
        self.recovered: Counter = Counter()  # op -> calls recomposed before legalization
        self.qdq = None  # after compile: the QDQ folding's FoldReport (legato.passes.qdq_fold)
        # op -> [condition text, calls seen, calls meeting it, Counter of the values missed]
        self.conditions: dict[str, list] = {}
        self.targets: tuple[str, ...] = ()  # partitioned: the backends, first choice first
        self.placement = None  # after compile: legato.legalization.placement.Placement (calls, cost)
        self.notes: list[str] = []  # how the model was compiled, when that is not the usual
        self.passes: list[tuple[str, str]] = []  # after compile: (pass, what it did), in order

    def drop(self, op: str) -> None:
        """Forget the calls of `op` (a partitioned build's calls of its regions)."""
        for event in [e for e in self._events if e[0] == op]:
            del self._events[event]
        self.after.pop(op, None)

    def merge(self, other: "Report") -> None:
        """Add `other`'s decisions, op counts and conditions (a partitioned build's region
        reports into the whole build's)."""
        self._events.update(other._events)
        self.after.update(other.after)
        self.failures.extend(other.failures)
        self.recovered.update(other.recovered)
        for op, (text, seen, met, values) in other.conditions.items():
            row = self.conditions.setdefault(op, [text, 0, 0, Counter()])
            row[1] += seen
            row[2] += met
            row[3].update(values)

    def condition(self, op: str, cond, call) -> None:
        """Count one call of `op` against the attribute part of its legal condition."""
        row = self.conditions.get(op)
        if row is None:
            row = self.conditions[op] = [condition_text(op, cond.attrs), 0, 0, Counter()]
        row[1] += 1
        miss = cond.attr_miss(call)
        if miss is None:
            row[2] += 1
        else:
            row[3][f"{miss[0]}: {_attr_text(miss[1])}"] += 1

    def unmatched(self) -> list[str]:
        """The attribute conditions no call met, with the values the calls had."""
        return [f"condition {text} matched 0 of {seen} calls (their {_values(values)})"
                for text, seen, met, values in self.conditions.values() if seen and not met]

    def record(self, op: str, decision: Decision, source: bool, origin: str | None = None
               ) -> None:
        """Count one call of `op` and its decision; `source`: the call was in the input
        module; `origin`: the op whose decomposition produced it (None: unknown)."""
        self._events[event_key(op, decision, source, origin)] += 1

    def count(self, events: list, after: list) -> None:
        """Count many calls at once: `events` made by event_key, in the order the calls
        were decided, and `after` the ops of the result's calls."""
        self._events.update(events)
        self.after.update(after)

    @property
    def entries(self) -> list[dict]:
        """One row per (op, action, reason, whether the op was in the input): count, and
        `origins` (where the calls came from -> count: IN_MODEL or the decomposed op)."""
        rows: dict[tuple, dict] = {}
        for (op, action, reason, source, origin), n in sorted(self._events.items(),
                                                              key=_event_order):
            row = rows.setdefault((op, action, reason, source), {
                "op": op, "action": action, "reason": reason, "count": 0, "source": source,
                "origins": {}})
            row["count"] += n
            where = _where(source, origin)
            row["origins"][where] = row["origins"].get(where, 0) + n
        return list(rows.values())

    def ops(self, action: str) -> dict[str, int]:
        """Op -> how many calls of it took `action` ('kept', 'decomposed', ...)."""
        counts: Counter = Counter()
        for (op, act, *_), n in self._events.items():
            if act == action:
                counts[op] += n
        return dict(counts)

    def by_op(self) -> dict[str, list[tuple[str, str, int]]]:
        """Op -> [(action, reason, count)], one row per distinct (action, reason)."""
        return {op: [(action, reason, n) for (action, reason), (n, _) in rows.items()]
                for op, rows in self._rows().items()}

    def _rows(self) -> dict[str, dict[tuple[str, str], tuple[int, Counter]]]:
        table: dict[str, dict] = {}
        for (op, action, reason, source, origin), n in sorted(self._events.items(),
                                                              key=_event_order):
            rows = table.setdefault(op, {})
            count, origins = rows.get((action, reason), (0, Counter()))
            origins[_where(source, origin)] += n
            rows[(action, reason)] = (count + n, origins)
        return table

    def summary(self) -> str:
        before, after = sum(self.before.values()), sum(self.after.values())
        parts = [f"{before} calls -> {after} calls"]
        for action in ("kept", "decomposed", "custom", "fallback", "failed"):
            ops = self.ops(action)
            if ops:
                parts.append(f"{action}: " + ", ".join(f"{op} x{n}" for op, n in
                                                       sorted(ops.items())))
        for name, counts in self._backends():
            parts.append(f"on {self._label(name)}: {sum(counts.values())} calls")
        if self.placement is not None and len(self.per_backend) > 1:
            parts.append(self.placement.summary())
        if self.recovered:
            parts.append("recovered " + _counts(self.recovered))
        if self.qdq is not None and self.qdq.folded:
            parts.append("folded QDQ into " + _counts(self.qdq.folded))
        parts += self.notes
        parts.extend(self.unmatched())
        return "; ".join(parts)

    def __str__(self) -> str:
        target = " + ".join(self.targets) or self.backend or "(no backend)"
        lines = [f"legalization for {target} ({self.mode} mode): "
                 f"{sum(self.before.values())} calls -> {sum(self.after.values())} calls"]
        if self.passes:
            lines.append("  passes: " + ", ".join(f"{name} ({did})" for name, did in self.passes))
        if self.recovered:
            lines.append("  recomposed before legalization: " + _counts(self.recovered))
        if self.qdq is not None and (self.qdq.folded or self.qdq.not_folded):
            lines.append("  QDQ regions before legalization (legato.fold_qdq):")
            lines += ["    " + line for line in self.qdq.text().splitlines()]
        for op, rows in self._rows().items():
            for (action, reason), (n, origins) in rows.items():
                lines.append(f"  {op:<22} {action:<10} x{n:<5} {_one_line(reason)}"
                             + _origins_text(origins))
        if self.after:
            lines.append("  result ops: " + ", ".join(f"{op} x{n}" for op, n in
                                                      sorted(self.after.items())))
        for name, counts in self._backends():
            lines.append(f"  on {self._label(name)}: " + ", ".join(
                f"{op} x{n}" for op, n in sorted(counts.items())))
            custom = sorted(op for op in counts if op.startswith("custom "))
            if custom and name == self.fallback:
                lines.append(f"    ({', '.join(custom)}: custom calls that run on the "
                             f"fallback {name}, as {self.backend} has no kernel for them)")
        if self.placement is not None:
            lines += ["  " + line for line in self.placement.text().splitlines()]
        lines.extend(f"  {line}" for line in self.unmatched() + self.notes)
        lines.extend(f"  FAILED: {f}" for f in self.failures)
        return "\n".join(lines)

    def _backends(self) -> list[tuple[str, dict]]:
        """per_backend in print order: the compiled-for backend, the others, the fallback."""
        first = self.targets or (self.backend,)

        def order(item):
            name = item[0]
            rank = first.index(name) if name in first else len(first)
            return (name == self.fallback and rank == len(first), rank, name)
        return sorted(((n, c) for n, c in self.per_backend.items() if c), key=order)

    def _label(self, name: str) -> str:
        return f"{name} (fallback)" if name == self.fallback else name

    def __repr__(self):
        return f"Report({self.summary()})"


def event_key(op: str, decision: Decision, source: bool, origin: str | None) -> tuple:
    """What Report.record counts: op, action, reason, whether the call was in the input
    and, if not, the op whose decomposition produced it."""
    return (op, decision.action, decision.reason, source, None if source else origin)


def condition_text(op: str, attrs) -> str:
    """'nn.layer_norm attrs {axes: [-1]}': a legal condition's attribute part as written."""
    said = ", ".join(f"{key}: " + (_attr_text(allowed[0]) if len(allowed) == 1 else
                                   "[" + ", ".join(map(_attr_text, allowed)) + "]")
                     for key, allowed in attrs.items())
    return f"{op} attrs {{{said}}}"


def _values(values: Counter, shown: int = 4) -> str:
    """The commonest attribute values calls had, then how many others."""
    common = [value for value, _ in values.most_common(shown)]
    more = len(values) - len(common)
    return ", ".join(common) + (f" and {more} other values" if more else "")


def _attr_text(value) -> str:
    """An attribute value as YAML writes it: [2], -1, NCHW, null."""
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(_attr_text, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _counts(counts) -> str:
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items()))


def _event_order(item):
    (op, action, reason, source, origin), _ = item
    return (op, action, reason, not source, origin or "")


def _where(source: bool, origin: str | None) -> str:
    if source:
        return IN_MODEL
    return f"from {origin}" if origin else "from decompositions"


def _origins_text(origins: Counter) -> str:
    """Where a row's calls came from, when they did not all come from the same place."""
    if len(origins) < 2 and IN_MODEL in origins:
        return ""
    return "  [" + ", ".join(f"{n} {where}" for where, n in origins.items()) + "]"


def _one_line(reason: str) -> str:
    """A failure's routes are one per line; in a table row they follow each other."""
    return sentence(reason).replace("\n  - ", "; ").replace("\n", " ")


# a backend's condition reasons in their terse form -> as a reader says them
_SENTENCES = (
    (re.compile(r"\bdtype ([\w, ]+?) not in \[([^\]]*)\]"),
     lambda m: f"{m[1]} is not among {_plain(m[2])}"),
    (re.compile(r"\brank ([\d, ]+?) not in \[([^\]]*)\]"),
     lambda m: f"rank {m[1]} is not among ranks {_plain(m[2])}"),
    (re.compile(r"\b(\w+)=(\S+) not in \[([^\]]*)\]"),
     lambda m: f"{m[1]}={m[2]} is not among {_plain(m[3])}"),
    (re.compile(r" as legal but not for "), lambda m: " as legal, but "),
    (re.compile(r" takes custom ops but not for "), lambda m: " takes custom ops, but "),
)


def _plain(items: str) -> str:
    return items.replace("'", "")


def sentence(reason: str) -> str:
    """A decision's reason as the report prints it: "npu lists exp as legal, but float16
    is not among float32" for "npu lists exp as legal but not for dtype float16 not in
    ['float32']"."""
    for pattern, say in _SENTENCES:
        reason = pattern.sub(say, reason)
    return reason
