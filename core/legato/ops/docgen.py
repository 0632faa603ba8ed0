"""The operator tables of docs/ops.md, generated from the op definitions.

`python -m legato.ops.docgen docs/ops.md` rewrites the part of the file between the
BEGIN/END markers (the prose around them is written by hand); `--check` only reports
whether that part is current (exit status 1 when not), which the test suite runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import CORE_OPS, REGISTRY
from .registry import OpDef, Registry

BEGIN = "<!-- BEGIN generated op tables: python -m legato.ops.docgen docs/ops.md -->"
END = "<!-- END generated op tables -->"


def core_ops(registry: Registry = REGISTRY) -> list[OpDef]:
    """The core's op definitions (plugins document their own ops)."""
    return [d for d in registry.ops() if d.name in CORE_OPS]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _mappings(opdef: OpDef) -> str:
    names = [f"ONNX `{n}`" for n in opdef.onnx] + [f"ATen `{n}`" for n in opdef.aten]
    return ", ".join(names)


def ops_tables(ops: list[OpDef]) -> str:
    """Markdown: one table for the primitives, one for the composites (by level)."""
    lines = ["## Level 0 (primitive)", "",
             "| op | signature | kind | maps from | semantics |",
             "| --- | --- | --- | --- | --- |"]
    for d in sorted((d for d in ops if d.level == 0), key=lambda d: d.name):
        lines.append(f"| `{d.name}` | `{_cell(d.signature())}` | {d.kind} | "
                     f"{_mappings(d)} | {_cell(d.doc)} |")
    lines += ["", "## Level 1 and up (composite; each has a decomposition into lower "
                  "levels)", "",
              "| op | level | signature | kind | maps from | semantics |",
              "| --- | --- | --- | --- | --- | --- |"]
    for d in sorted((d for d in ops if d.level > 0), key=lambda d: (d.level, d.name)):
        lines.append(f"| `{d.name}` | {d.level} | `{_cell(d.signature())}` | {d.kind} | "
                     f"{_mappings(d)} | {_cell(d.doc)} |")
    return "\n".join(lines) + "\n"


def render(document: str, tables: str, where: str = "docs/ops.md") -> str:
    """`document` with the text between the markers replaced by `tables`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{where}: the markers {BEGIN!r} and {END!r} are missing")
    return document[:start + len(BEGIN)] + "\n\n" + tables + "\n" + document[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m legato.ops.docgen", description=__doc__)
    parser.add_argument("path", type=Path, help="the markdown file (docs/ops.md)")
    parser.add_argument("--check", action="store_true",
                        help="only check that the generated part is current")
    args = parser.parse_args(argv)
    current = args.path.read_text(encoding="utf-8")
    try:
        wanted = render(current, ops_tables(core_ops()), str(args.path))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        if wanted != current:
            print(f"{args.path} is out of date: run python -m legato.ops.docgen {args.path}",
                  file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        args.path.write_text(wanted, encoding="utf-8")
        print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
