"""The tosa_custom plugin: TOSA-only ops, then the backend with its MLIR emitter, and
the "tosa" validator (tosa-opt and the TOSA reference model, tools.py)."""
from importlib.resources import files

import yaml

import legato

from . import ops
from .emitter import emit_mlir
from .lowering import capability_tables
from .tools import run_text, validate_text


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


@legato.hookimpl
def legato_register_validators(register):
    register("tosa", validate_text, run=run_text, suffixes=[".mlir"], backends=["tosa_custom"])
