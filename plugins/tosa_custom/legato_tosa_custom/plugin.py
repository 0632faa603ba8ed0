"""The tosa_custom plugin: TOSA-only ops, then the backend with its MLIR emitter."""
from importlib.resources import files

import legato

from . import ops
from .emitter import emit_mlir


@legato.hookimpl
def legato_register_ops(register):
    ops.register_all(register)


@legato.hookimpl
def legato_register_backends(register):
    register(str(files("legato_tosa_custom") / "capability.yaml"), emitter=emit_mlir)
