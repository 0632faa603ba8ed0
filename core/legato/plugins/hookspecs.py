"""The hooks a legato plugin implements. Each takes a `register` callback; the core
validates what is registered and owns the error messages."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from ..ops.registry import OpDef

hookspec = pluggy.HookspecMarker("legato")
hookimpl = pluggy.HookimplMarker("legato")


@hookspec
def legato_register_ops(register: Callable[[OpDef], None]) -> None:
    """Register ops: register(OpDef(...)); OpDef's fields and checks are the contract."""


@hookspec
def legato_register_backends(register):
    """Register backends: register(capability_path_or_dict, kernels=None, executor=None, emitter=None, passes=()), passes: factories lowering -> ModulePass run on the legal module (legato.plugin_api.Lowering)."""


@hookspec
def legato_register_torch_ops(register):
    """Register torch importer converters for custom ops (torch.library): register(op_name, converter), op_name "namespace::name" (every overload) or "namespace::name.overload", converter(b, *args, **kwargs) -> value or tuple, like an ATen converter."""


@hookspec
def legato_register_validators(register):
    """Register validators of emitted artifacts (`legato validate`, `legato compile --validate`): register(name, validate, run=None, suffixes=(), backends=()), validate(text, name) -> None or raises (legato.validators), run(text, inputs) -> results."""
