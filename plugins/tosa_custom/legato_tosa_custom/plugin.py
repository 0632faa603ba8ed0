"""The tosa_custom plugin: TOSA-only ops, then the backend with its MLIR emitter."""
from importlib.resources import files

import yaml

import legato

from . import ops
from .emitter import emit_mlir
from .lowering import capability_tables


def capability() -> dict:
    """capability.yaml's backend-wide keys plus `legal` and `rules` from lowering.py."""
    data = yaml.safe_load((files("legato_tosa_custom") / "capability.yaml").read_text())
    return {**data, **capability_tables()}


@legato.hookimpl
def legato_register_ops(register):
    ops.register_all(register)


@legato.hookimpl
def legato_register_backends(register):
    register(capability(), emitter=emit_mlir)
