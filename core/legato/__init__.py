"""legato: a pluggable operator-legalization compiler for tensor programs.

    import legato
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8), "float32")
    y = b.call("nn.layer_norm", x, None, None)
    c = legato.compile(b.build(y), backend="cpu_ref")
"""
import sys as _sys

from .api import (Compiled, compile, get_backend, get_op, legalize, list_backends, list_ops,
                  load_model, plugin_problems, reference, register_backend, unregister_backend)
from .ir import CALL_OP, Attrs, Call, Const, Function, Module, Origin, TensorType, Value
from .ir.builder import GraphBuilder
from .ir.errors import (ConfigError, ExecutionError, IRError, LegalizationError, LegatoError,
                        LegatoWarning, OpError, ParseError, PluginError, RegistrationError, ShapeError)
from .ir.text import parse
from .ir.verify import structural_equal, verify
from .legalization.custom_ops import decode_custom, encode_custom
from .passes.fuse import FusePass, function_pattern, fuse, group_by_origin, op_info
from .passes.layout import convert_layout, register_layout_rule
from .passes.manager import FunctionPass, ModulePass, PassManager, PassResult
from .passes.partition import PartitionPass, partition
from .passes.qdq_fold import QDQFoldPass, fold_qdq  # legato.fold_qdq(module), .explain(module)
from .passes.recompose import RecomposePass, recompose  # the function: legato.recompose(module)
from .plugins.context import Context, context
from .plugins.hookspecs import hookimpl

from .ir import shapes

# `legato.shapes` is a documented name (the shape rules plugins and importers share);
# `import legato.shapes` keeps working now that the module lives in legato.ir
_sys.modules.setdefault(__name__ + ".shapes", shapes)

__version__ = "0.1.0"

__all__ = [
    "Attrs", "CALL_OP", "Call", "Compiled", "ConfigError", "Const", "Context", "ExecutionError",
    "Function", "FunctionPass", "FusePass", "ModulePass", "PassManager", "PassResult",
    "context", "convert_layout", "register_layout_rule", "partition", "fuse", "op_info",
    "function_pattern", "group_by_origin", "GraphBuilder", "IRError", "LegalizationError",
    "LegatoError", "LegatoWarning", "Module", "OpError", "PartitionPass",
    "Origin", "ParseError", "PluginError", "RegistrationError", "ShapeError", "TensorType",
    "Value", "compile", "decode_custom", "encode_custom", "get_backend", "get_op",
    "hookimpl", "legalize", "list_backends", "list_ops", "load_model", "parse",
    "plugin_problems", "QDQFoldPass", "fold_qdq", "RecomposePass", "recompose", "reference", "register_backend",
    "structural_equal",
    "unregister_backend", "verify",
]
