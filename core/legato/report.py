"""What legalization did, per op and why."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

ACTIONS = ("legal", "kept", "custom", "decomposed", "fallback", "failed")


@dataclass(frozen=True, slots=True)
class Decision:
    """The rule that applied to one (op, attributes, types) combination, and why."""

    action: str
    reason: str
    rule: str = ""


class Report:
    """Per op: what happened (action), why (reason) and how often; op counts before/after."""

    def __init__(self, backend: str | None, mode: str):
        self.backend, self.mode = backend, mode
        self._events: Counter = Counter()
        self.before: Counter = Counter()
        self.after: Counter = Counter()
        self.failures: list[str] = []
        self.changed = False
        self.per_backend: dict[str, dict[str, int]] = {}  # multi-backend compile: ops per backend

    def record(self, op: str, decision: Decision, source: bool) -> None:
        self._events[(op, decision.action, decision.reason, source)] += 1

    @property
    def entries(self) -> list[dict]:
        """One row per (op, action, reason): count, and whether the op was in the input."""
        return [{"op": op, "action": action, "reason": reason, "count": n, "source": source}
                for (op, action, reason, source), n in sorted(self._events.items())]

    def ops(self, action: str) -> dict[str, int]:
        """Op -> how many calls of it took `action` ('kept', 'decomposed', ...)."""
        counts: Counter = Counter()
        for (op, act, _, _), n in self._events.items():
            if act == action:
                counts[op] += n
        return dict(counts)

    def by_op(self) -> dict[str, list[tuple[str, str, int]]]:
        table: dict[str, list] = {}
        for (op, action, reason, _), n in sorted(self._events.items()):
            table.setdefault(op, []).append((action, reason, n))
        return table

    def summary(self) -> str:
        before, after = sum(self.before.values()), sum(self.after.values())
        parts = [f"{before} calls -> {after} calls"]
        for action in ("kept", "decomposed", "custom", "fallback", "failed"):
            ops = self.ops(action)
            if ops:
                parts.append(f"{action}: " + ", ".join(f"{op} x{n}" for op, n in
                                                       sorted(ops.items())))
        for name, counts in sorted(self.per_backend.items()):
            parts.append(f"on {name}: {sum(counts.values())} calls")
        return "; ".join(parts)

    def __str__(self) -> str:
        lines = [f"legalization for {self.backend or '(no backend)'} ({self.mode} mode): "
                 f"{sum(self.before.values())} calls -> {sum(self.after.values())} calls"]
        for op, rows in self.by_op().items():
            for action, reason, n in rows:
                lines.append(f"  {op:<22} {action:<10} x{n:<5} {reason}")
        if self.after:
            lines.append("  result ops: " + ", ".join(f"{op} x{n}" for op, n in
                                                      sorted(self.after.items())))
        for name, counts in sorted(self.per_backend.items()):
            lines.append(f"  on {name}: " + ", ".join(f"{op} x{n}" for op, n in
                                                    sorted(counts.items())))
        lines.extend(f"  FAILED: {f}" for f in self.failures)
        return "\n".join(lines)

    def __repr__(self):
        return f"Report({self.summary()})"
