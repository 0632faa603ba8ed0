"""Figures of a fuzz run: outcomes per target and in total, and each distinct problem with
its count, seeds and the command that reproduces it."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .cases import OUTCOMES, PROBLEMS, signature

COLUMNS = [("cases", None), ("ok", "ok"), ("refused", "refused"), ("skipped", "skipped"),
           ("crashes", "crash"), ("hangs", "hang"), ("memory", "memory"),
           ("raw exc.", "raw"), ("mismatches", "mismatch"), ("invalid", "invalid")]
SEEDS_SHOWN = 5


@dataclass
class Problem:
    target: str
    outcome: str
    message: str
    seeds: list = field(default_factory=list)
    count: int = 0


@dataclass
class Summary:
    counts: dict = field(default_factory=dict)     # target -> Counter of outcomes
    seconds: dict = field(default_factory=dict)    # target -> seconds spent in cases
    problems: dict = field(default_factory=dict)   # (target, signature) -> Problem

    def add(self, finished) -> None:
        target, result = finished.case.target, finished.result
        self.counts.setdefault(target, Counter())[result.outcome] += 1
        self.seconds[target] = self.seconds.get(target, 0.0) + finished.seconds
        if result.outcome in PROBLEMS:
            key = (target, signature(result.outcome, result.message))
            problem = self.problems.setdefault(key, Problem(target, result.outcome,
                                                            result.message))
            problem.count += 1
            problem.seeds.append(finished.case.seed)

    def total(self) -> Counter:
        out = Counter()
        for counts in self.counts.values():
            out.update(counts)
        return out

    def problem_count(self) -> int:
        return sum(self.total()[o] for o in PROBLEMS)

    def as_json(self) -> dict:
        return {"targets": {t: {o: c[o] for o in OUTCOMES} | {"cases": sum(c.values())}
                            for t, c in self.counts.items()},
                "problems": [{"target": p.target, "outcome": p.outcome, "message": p.message,
                              "count": p.count, "seeds": sorted(p.seeds)}
                             for p in self.problems.values()]}


def _row(name: str, counts: Counter, seconds: float) -> str:
    cells = [str(sum(counts.values()) if key is None else counts[key]) for _, key in COLUMNS]
    return f"{name:<16}" + "".join(f"{c:>11}" for c in cells) + f"{seconds:>9.0f}s"


def format_summary(summary: Summary, repro_options: str = "") -> str:
    lines = [f"{'target':<16}" + "".join(f"{label:>11}" for label, _ in COLUMNS)
             + f"{'time':>10}"]
    for target in sorted(summary.counts):
        lines.append(_row(target, summary.counts[target], summary.seconds[target]))
    lines.append(_row("TOTAL", summary.total(), sum(summary.seconds.values())))
    problems = sorted(summary.problems.values(), key=lambda p: (p.target, p.outcome, -p.count))
    if problems:
        lines.append("")
        lines.append(f"{len(problems)} distinct problem(s):")
    for p in problems:
        seeds = sorted(p.seeds)
        shown = ", ".join(map(str, seeds[:SEEDS_SHOWN])) + (", ..." if len(seeds) > SEEDS_SHOWN
                                                            else "")
        lines.append(f"  [{p.target}] {p.outcome} x{p.count}: {p.message}")
        lines.append(f"      seeds {shown}; reproduce: python -m tests.fuzz "
                     f"{repro_options}--target {p.target} --seed {seeds[0]}")
    return "\n".join(lines)
