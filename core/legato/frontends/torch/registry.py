"""The converters of PyTorch custom ops (torch.library ops outside aten), by op name.

Kept apart from the importer so the plugin host can fill it (the
`legato_register_torch_ops` hook) without importing torch or the importer. The custom ops
legato converts itself are named here, so a plugin registering one of them is refused at
once, whether or not legato's converter module has been imported yet.
"""
from __future__ import annotations

import re
from typing import Callable

from ...ir.errors import RegistrationError, quote

OP_NAME = re.compile(r"(?P<ns>[A-Za-z_]\w*)::(?P<name>[A-Za-z_]\w*)(\.[A-Za-z_]\w*)?")
# the custom ops with a converter in legato itself (experts.py, quant.py)
OWN = frozenset({"transformers::grouped_mm_fallback",
                 *(f"quantized_decomposed::{op}" for op in (
                     "quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
                     "dequantize_per_channel", "choose_qparams", "choose_qparams_symmetric"))})
# "namespace::name[.overload]" -> (converter, who registered it)
CONVERTERS: dict[str, tuple[Callable, str]] = {}


def register(op_name: str, converter: Callable, source: str = "legato") -> None:
    """Register `converter` for the custom op `op_name`, refusing malformed names, ATen
    ops (they have legato's converters) and a second converter for the same op."""
    match = OP_NAME.fullmatch(op_name) if isinstance(op_name, str) else None
    if match is None:
        raise RegistrationError(f"torch op name {quote(op_name)} is not "
                                "'namespace::name' or 'namespace::name.overload'")
    if match["ns"] in ("aten", "prims"):
        raise RegistrationError(f"torch op {op_name}: ATen ops have legato's own converters; "
                                "only custom ops (torch.library) can be registered")
    if not callable(converter):
        raise RegistrationError(f"torch op {op_name}: the converter must be a function "
                                f"(b, *args, **kwargs) -> value(s), got {quote(converter)}")
    if (source == "legato") != (op_name in OWN):
        raise RegistrationError(
            f"torch op {op_name} already has a converter, registered by legato"
            if op_name in OWN else f"torch op {op_name}: legato's own converters must be "
            "named in legato.frontends.torch.registry.OWN")
    if op_name in CONVERTERS:
        raise RegistrationError(f"torch op {op_name} already has a converter, registered "
                                f"by {CONVERTERS[op_name][1]}")
    CONVERTERS[op_name] = (converter, source)


def unregister(op_name: str) -> None:
    CONVERTERS.pop(op_name, None)
