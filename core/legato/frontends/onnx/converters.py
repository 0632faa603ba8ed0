"""Every converter module of the ONNX importer, imported here and nowhere else for its
converters: importing a module registers them in `convert.CONVERTERS`. A new converter
module must be added to MODULES (tests/test_layout.py checks that each one is)."""
from __future__ import annotations

from . import (attention, contrib, contrib_attention, control, index, layers, math, nn, ops,
               qoperator, quant, rnn, roi, signal)

MODULES = (ops, math, index, nn, quant, layers, attention, control, rnn, roi, signal,
           contrib, contrib_attention, qoperator)
