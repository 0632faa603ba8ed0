"""The custom-op codec: a call a backend keeps but cannot lower travels as a `custom` call
that carries everything needed to rebuild it (docs/custom-ops.md).

    custom(%tensors...) {"operator_name": op, "domain_name": domain,
                         "implementation_attrs": '{"attrs": {...}, "inputs": [true, false]}',
                         "result_types": [[shape, dtype], ...]}

`inputs` marks which of the op's inputs were present, so absent optional inputs survive.
"""
from __future__ import annotations

import json

from ..ir import CUSTOM_OP, Call
from ..ir.calls import make_call
from ..ir.errors import LegalizationError, LegatoError
from ..plugins.context import context

__all__ = ["CUSTOM_OP", "decode_custom", "encode_custom"]


def encode_custom(call: Call, domain: str, registry) -> Call:
    """A custom call carrying everything needed to rebuild `call`."""
    opdef = registry.get(call.op)
    tensors = [v for v in call.inputs if v is not None]
    present = [v is not None for v in call.inputs]
    payload = {"attrs": call.attrs.to_json(), "inputs": present}
    attrs = {"operator_name": call.op, "domain_name": domain,
             "implementation_attrs": json.dumps(payload, sort_keys=True),
             "result_types": [[list(o.shape), o.dtype] for o in call.outputs]}
    if not tensors:
        raise LegalizationError(f"{opdef.name} has no tensor inputs to tunnel as a custom op")
    return make_call(registry, CUSTOM_OP, tensors, attrs)


def decode_custom(call: Call, registry=None) -> Call:
    """The original call that a custom call stands for (registry: the context's)."""
    if registry is None:
        registry = context().registry
    if call.op != CUSTOM_OP:
        raise LegatoError(f"decode_custom expects a custom call, got {call.op}")
    payload = _payload(call)
    if sum(payload["inputs"]) != len(call.inputs):
        raise LegatoError(f"custom call of {call.attrs['operator_name']}: implementation_attrs "
                          f"mark {sum(payload['inputs'])} inputs present, the call has "
                          f"{len(call.inputs)}")
    tensors = iter(call.inputs)
    inputs = [next(tensors) if present else None for present in payload["inputs"]]
    original = make_call(registry, call.attrs["operator_name"], inputs, payload["attrs"],
                         call.origin)
    return Call(original.op, original.inputs, original.attrs, call.outputs, call.origin)


def _payload(call: Call) -> dict:
    """implementation_attrs as written by encode_custom: {"attrs": {...}, "inputs": [bool]}."""
    what = f"custom call of {call.attrs['operator_name']}: implementation_attrs"
    try:
        payload = json.loads(call.attrs["implementation_attrs"])
    except ValueError as err:
        raise LegatoError(f"{what} is not JSON: {err}") from None
    if not (isinstance(payload, dict) and isinstance(payload.get("attrs"), dict)
            and isinstance(payload.get("inputs"), list)
            and all(isinstance(p, bool) for p in payload["inputs"])):
        raise LegatoError(f'{what} must be {{"attrs": {{...}}, "inputs": [true|false, ...]}}')
    return payload
