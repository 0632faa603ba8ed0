"""Turn the tosa.custom ops of emitted MLIR back into the legato calls they stand for."""
from __future__ import annotations

import re

import legato
from legato.plugin_api import CUSTOM_OP, Call, LegatoError, Value, decode_custom, make_call

from . import mlir
from .narrowing import tosa_type

_CUSTOM = re.compile(r'=\s*"tosa\.custom"\((?P<operands>[^)]*)\)\s*<\{(?P<props>.*)\}>\s*:\s*'
                     r'\((?P<ins>[^)]*)\)\s*->\s*(?P<outs>.*)$')
_PROP = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _types(text: str):
    text = text.strip()
    if text.startswith("("):
        text = text[1:-1]
    return [mlir.parse_tensor_type(t) for t in text.split(",") if t.strip()]


def decode_tosa_custom(text: str, registry=None) -> list[Call]:
    """Every tosa.custom op in MLIR text (generic form), as the original legato call.

    The calls' inputs are fresh values of the operand types, in the original order with
    None for absent optional inputs; attributes and result types are the original ones.
    int64 tensors were printed as i32: a result the op infers as int64 is int64 again;
    an operand that was int64 comes back as int32.
    """
    if registry is None:
        registry = legato.context().registry
    calls = []
    for line in text.splitlines():
        match = _CUSTOM.search(line)
        if match is None:
            if '"tosa.custom"' in line:
                raise LegatoError(f"cannot read tosa.custom op: {line.strip()}")
            continue
        props = {k: mlir.unescape(v) for k, v in _PROP.findall(match["props"])}
        missing = {"operator_name", "implementation_attrs"} - set(props)
        if missing:
            raise LegatoError(f"tosa.custom op without {', '.join(sorted(missing))}: "
                              f"{line.strip()[:200]}")
        inputs = [Value(t) for t in _types(match["ins"])]
        outputs = _types(match["outs"])
        attrs = {"operator_name": props["operator_name"],
                 "domain_name": props.get("domain_name", "legato"),
                 "implementation_attrs": props["implementation_attrs"],
                 "result_types": [[list(t.shape), t.dtype] for t in outputs]}
        custom = make_call(registry, CUSTOM_OP, inputs, attrs)
        calls.append(_widened(decode_custom(custom, registry), registry))
    return calls


def _widened(call: Call, registry) -> Call:
    """`call` with the results its op infers as int64 (printed as int32) as int64 again."""
    inferred = make_call(registry, call.op, call.inputs, call.attrs).outputs
    if len(inferred) != len(call.outputs):
        return call
    outputs = tuple(new if new.type != old.type and tosa_type(new.type) == old.type else old
                    for old, new in zip(call.outputs, inferred))
    return Call(call.op, call.inputs, call.attrs, outputs, call.origin)
