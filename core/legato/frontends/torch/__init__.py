"""The torch.export importer: `load(module, example_inputs, *, dynamic_shapes=None)`.

    mod = legato.frontends.torch.load(model, (torch.randn(2, 8),))

Modules: `importer` (exports, decomposes and converts a program node by node), `ops` (the
ATen converter table, ATEN, and the one-to-one mappings), `converters` (the one list of
converter modules: ops, tensors, nn, layers, pool, views, statistics, index, linalg, scans,
bits, symbolic, fft, experts, quant), `fft` (complex values as (real, imag) pairs),
`symbolic` (SymInt sizes), `custom` and `registry` (torch.library ops, plugins' converters),
and `dynamo` (the `torch.compile(backend="legato")` backend). What the ONNX importer writes
the same way is in legato.frontends.common.

The importer's names (`load`, `exported`, `decomposition_table`, `TorchModule`, ATEN, ...)
are looked up on first use: the plugin host fills `registry` when legato starts, and that
must not import the importer and its converter modules.
"""
from __future__ import annotations

import importlib
from pathlib import Path

PUBLIC = ("load", "exported", "decomposition_table", "TorchModule", "flat_items", "ATEN",
          "refusal")
__all__ = list(PUBLIC)


def __getattr__(name: str):
    # `from . import registry` asks here before it imports the submodule: submodules and
    # dunders are not the importer's. import_module, not `from . import importer`, for the
    # same reason.
    if not name.startswith("__") and not Path(__file__).with_name(f"{name}.py").exists():
        importer = importlib.import_module(f"{__name__}.importer")
        if hasattr(importer, name):
            return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
