"""The tosa_custom plugin: TOSA-only ops, then the backends with their MLIR emitter, and
the "tosa" validator (tosa-opt and the TOSA reference model, tools.py).

Two backends share the tables: `tosa_custom` targets the profile capability.yaml names
(`profile`, pro_fp as shipped), `tosa_custom_int` targets pro_fp+pro_int (int8 convolutions
and matmuls, RESCALE, native int32 arithmetic: quantized.py). `backend(profile)` builds one
for any profile, for `legato.compile(model, backend=...)`.
"""
from importlib.resources import files

import yaml

import legato
from legato.plugin_api import ConfigError, parse_capability

from . import ops
from .emitter import make_emitter
from .lowering import capability_tables
from .profiles import parse_profile, spelled
from .quantized import OUTPUT_STAGES
from .tools import run_text, validate_text

INT_BACKEND = "tosa_custom_int"
INT_PROFILE = frozenset({"pro_fp", "pro_int"})


def _settings() -> tuple[dict, frozenset]:
    """capability.yaml's backend-wide keys, and its profile (validated)."""
    data = yaml.safe_load((files("legato_tosa_custom") / "capability.yaml").read_text())
    profile = parse_profile(data.pop("profile", "pro_fp"), "tosa_custom capability.yaml: "
                                                           "profile")
    return data, profile


def capability(profile=None, output_stage: str = "rescale") -> dict:
    """capability.yaml's backend-wide keys plus `legal` and `rules` from lowering.py, for
    `profile` (a name, 'pro_fp+pro_int', a list or set; default: capability.yaml's)."""
    data, default = _settings()
    profile = default if profile is None else _profile(profile)
    return {**data, **capability_tables(profile, output_stage)}


def _profile(value) -> frozenset:
    return value if isinstance(value, frozenset) else parse_profile(value)


def backend(profile="pro_fp+pro_int", name: str | None = None, weights=None,
            output_stage: str = "rescale"):
    """A tosa_custom Backend for `profile` ('pro_fp', 'pro_int' or 'pro_fp+pro_int'),
    named `name` (default tosa_custom_<profile>); ConfigError for an unknown profile.
    `weights` places constants (resources.Weights, or 'auto' (default), 'inline' or
    'resources'): large ones of a large model out of line as dense_resource blobs.
    `output_stage` requantizes the int32 accumulators of quantized convolutions, matmuls
    and products: 'rescale' (RESCALE, integer-only hardware; within one step of cpu_ref)
    or 'float' (onnxruntime's float32 stage, and qnn.add as a table of its sums:
    bit-exact with cpu_ref; needs pro_fp)."""
    profile = _profile(profile)
    if output_stage not in OUTPUT_STAGES or (output_stage == "float" and
                                             "pro_fp" not in profile):
        raise ConfigError(f"tosa_custom output_stage {output_stage!r}: give "
                          f"{' or '.join(map(repr, OUTPUT_STAGES))} ('float' needs profile "
                          f"pro_fp, not {spelled(profile)})")
    name = name or "tosa_custom_" + spelled(profile).replace("+", "_") + \
        ("_float_stage" if output_stage == "float" else "")
    emitter = make_emitter(profile, name, weights)
    be = parse_capability({**capability(profile, output_stage), "backend": name},
                          legato.context().registry, emitter=emitter,
                          plugin="legato_tosa_custom")
    emitter.backend = be
    return be


@legato.hookimpl
def legato_register_ops(register):
    ops.register_all(register)


@legato.hookimpl
def legato_register_backends(register):
    _, profile = _settings()
    register(capability(profile), emitter=make_emitter(profile))
    register({**capability(INT_PROFILE), "backend": INT_BACKEND,
              "description": "TOSA 1.0 MLIR, profiles pro_fp and pro_int (int8 ops, "
                             "RESCALE); kept ops become tosa.custom"},
             emitter=make_emitter(INT_PROFILE, INT_BACKEND))


@legato.hookimpl
def legato_register_validators(register):
    register("tosa", validate_text, run=run_text, suffixes=[".mlir"],
             backends=["tosa_custom", INT_BACKEND])
