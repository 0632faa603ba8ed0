"""The ONNX importer: `load(path_or_model_proto, input_shapes=None, *, base_dir=None)`.

    mod = legato.frontends.onnx.load("model.onnx", input_shapes={"batch": 1})

Modules: `importer` (checks a model whole, then converts node by node), `convert` (the
converter table and the node view converters see), `converters` (the one list of converter
modules: ops, math, index, nn, quant, layers, attention, control, rnn, roi, signal, and
onnxruntime's own ops in contrib, contrib_attention, qoperator), and what the importer
needs around them: `check` (schemas), `tensors` and `weights` (tensor data), `sizes`
(symbolic sizes as data), `isolate` and `worker` (onnx's C++ passes in a child process).
What the torch importer writes the same way is in legato.frontends.common.
"""
from .importer import (MIN_OPSET, REFUSED_BY_DESIGN, all_nodes, coverage, load,
                       load_with_nodes, read_model, unsupported_ops)

__all__ = ["MIN_OPSET", "REFUSED_BY_DESIGN", "all_nodes", "coverage", "load", "load_with_nodes",
           "read_model", "unsupported_ops"]
