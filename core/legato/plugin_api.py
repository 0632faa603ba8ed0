"""The supported surface for legato plugins: a plugin imports `legato` and this module only.

What a plugin may rely on is named in `__all__` below, grouped as:

- IR: the value types a kernel, emitter or decomposition sees (`Call`, `Const`, `Function`,
  `Module`, `TensorType`, `Value`), `make_call` to build a call, `CUSTOM_OP` and
  `decode_custom` for custom ops carried through a model.
- Errors: the `LegatoError` family a plugin raises, `clip` / `quote` to keep messages short.
- Op definitions: `OpDef` and `REQUIRED` (what `legato_register_ops`' register takes),
  `is_float`, `fail`, `float_unary_infer` for infer functions, `REGISTRY` / `default_registry`
  to read the core ops' definitions.
- Shapes: the axis, broadcast, slice, split, window and reshape rules core ops use, so a
  kernel agrees with the op's inference (`norm_axis`, `window`, ...), and op helpers that
  kernels share with the core (`dft_axis`, `dft_sizes`, `window_counts`).
- Backends: `Backend`, `parse_capability`, the `Interpreter` an executor can fall back to
  (with `as_tuple`, `bind_inputs`, `describe_call`), memory planning (`flatten`, `Flat`,
  `Arena`, `aligned_zeros`, `last_uses`, `view_roots`), `ToolsMissing` for validators.
- Testing: `Sample` (what a `samples` generator yields), `samples` and `difference`.

Stability: these names keep their meaning and signatures across minor versions; a change
is announced by a deprecation warning first. Everything else under `legato.*` is internal
and may move without notice (the plugin packages' own test, tests/test_plugin_api.py,
fails on any other import).
"""
from legato.ir import CALL_OP, CUSTOM_OP, Attrs, Call, Const, Function, Module, TensorType, Value
from legato.ir.builder import GraphBuilder, default_registry
from legato.ir.calls import make_call
from legato.ir.errors import (ConfigError, ExecutionError, LegalizationError, LegatoError,
                              ShapeError, clip, quote)
from legato.ir.shapes import (Window, broadcast_shapes, channel_view, norm_axes, norm_axis,
                              resolve_reshape, slice_params, split_sizes, window)
from legato.legalization.backend import Backend
from legato.legalization.capability import parse_capability
from legato.legalization.custom_ops import decode_custom
from legato.ops.base import REGISTRY, fail, float_unary_infer, is_float
from legato.ops.conv import _window_counts as window_counts
from legato.ops.registry import REQUIRED, OpDef
from legato.ops.spectral import dft_axis, dft_sizes
from legato.passes.manager import ModulePass, PassResult
from legato.passes.pipeline import Lowering
from legato.passes.regions import lift_regions
from legato.plugins.validators import ToolsMissing
from legato.runtime.interpreter import Interpreter, as_tuple, bind_inputs, describe_call
from legato.runtime.planning import (Arena, Flat, FlatCall, aligned_zeros, flatten, last_uses,
                                     view_roots)
from legato.testing import Sample, difference, samples

__all__ = [
    # IR
    "CALL_OP", "CUSTOM_OP", "Attrs", "Call", "Const", "Function", "GraphBuilder", "Module",
    "TensorType", "Value",
    "decode_custom", "make_call",
    # errors
    "ConfigError", "ExecutionError", "LegalizationError", "LegatoError", "ShapeError", "clip",
    "quote",
    # op definitions
    "OpDef", "REGISTRY", "REQUIRED", "default_registry", "fail", "float_unary_infer", "is_float",
    # shapes and shared op helpers
    "Window", "broadcast_shapes", "channel_view", "dft_axis", "dft_sizes", "norm_axes",
    "norm_axis", "resolve_reshape", "slice_params", "split_sizes", "window", "window_counts",
    # backends
    "Arena", "Backend", "Flat", "FlatCall", "Interpreter", "ToolsMissing", "aligned_zeros", "as_tuple",
    "bind_inputs",
    "describe_call", "flatten", "last_uses", "parse_capability", "view_roots",
    # a backend's own passes (register(..., passes=[factory])): factory(Lowering) -> pass
    "Lowering", "ModulePass", "PassResult", "lift_regions",
    # testing
    "Sample", "difference", "samples",
]
