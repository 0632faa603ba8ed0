"""The per-(op, backend) table both conformance harnesses (ONNX node tests, PyTorch's
OpInfo samples) print: passed / failed / excluded counts and why excluded."""
from __future__ import annotations

from collections import Counter, defaultdict


def outcome_rows(outcomes, op_width: int, backend_width: int) -> list[str]:
    """A header and one line per (op, backend) of `outcomes` (objects with op, backend,
    status and reason), sorted."""
    counts: dict = defaultdict(Counter)
    reasons: dict = defaultdict(Counter)
    for o in outcomes:
        counts[(o.op, o.backend)][o.status] += 1
        if o.status == "excluded":
            reasons[(o.op, o.backend)][o.reason] += 1
    lines = [f"{'op':<{op_width}}{'backend':<{backend_width}}{'passed':>7}{'failed':>7}"
             f"{'excluded':>9}  why excluded"]
    for key in sorted(counts):
        c = counts[key]
        why = "; ".join(f"{r} (x{n})" for r, n in sorted(reasons[key].items()))
        lines.append(f"{key[0]:<{op_width}}{key[1]:<{backend_width}}{c['passed']:>7}"
                     f"{c['failed']:>7}{c['excluded']:>9}  {why}")
    return lines
