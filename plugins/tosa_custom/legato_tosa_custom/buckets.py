"""Modules of shape buckets (`legato.compile(..., shape_buckets=)`): one function per
binding of a model's symbolic dims, `main_seq64` for seq=64, each marked with its sizes
(`legato.shape_bindings = {seq = 64 : i64}`, emitter.emit_buckets).

tosa-opt validates such a module whole, but its serializer, and so the TOSA reference
model, takes a module of one function. `bucket_text` cuts out the function whose parameter
shapes the inputs have, as a module of its own with that function named main (where the
narrowed results' marks are read).
"""
from __future__ import annotations

import re

import numpy as np
from legato.plugin_api import LegatoError

from .mlir import parse_tensor_type
from .resources import replace_text, text_of

_HEAD = re.compile(r'^  "func\.func"\(\) <\{.*sym_name = "(?P<name>[^"]*)"\}> \(\{$')
_ARGS = re.compile(r'^\s*\^bb0\((?P<args>.*)\):$')


def functions(text: str) -> dict[str, list[str]]:
    """Each function of a module the emitter wrote, by name: its lines."""
    found: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = _HEAD.match(line)
        if head is not None:
            current = found.setdefault(head["name"], [])
        if current is not None:
            current.append(line)
            if line.startswith("  })"):
                current = None
    return found


def parameter_shapes(lines: list[str]) -> list[tuple[int, ...]]:
    args = _ARGS.match(lines[1]) if len(lines) > 1 else None
    if args is None:
        raise LegatoError(f"not a function the tosa_custom emitter wrote: {lines[0][:80]!r}")
    return [parse_tensor_type(arg.partition(": ")[2]).shape
            for arg in filter(None, args["args"].split(", %"))]


def bucket_text(artifact, inputs):
    """`artifact` when it holds one function; else a module of the one function whose
    parameters have the inputs' shapes, named main (LegatoError listing the buckets when
    none has), with the constants out of line the artifact has (resources.py)."""
    text = text_of(artifact)
    found = functions(text)
    if len(found) <= 1:
        return artifact
    shapes = [tuple(np.shape(x)) for x in inputs]
    for name, lines in found.items():
        if parameter_shapes(lines) == shapes:
            lines = [lines[0].replace(f'sym_name = "{name}"', 'sym_name = "main"'), *lines[1:]]
            module = text.splitlines()
            return replace_text(artifact, "\n".join([module[0], *lines, module[-1]]) + "\n")
    have = "; ".join(f"{name} {[list(s) for s in parameter_shapes(lines)]}"
                     for name, lines in found.items())
    raise LegatoError(f"no shape bucket of the module takes inputs of shapes "
                      f"{[list(s) for s in shapes]}; its functions: {have}")
