"""Every converter module of the torch.export importer, imported here and nowhere else for
its converters: importing a module registers them in `ops.ATEN` (ATen ops), `fft.COMPLEX`
(ops on complex values) or `registry.CONVERTERS` (custom ops). A new converter module must
be added to MODULES (tests/test_layout.py checks that each one is)."""
from __future__ import annotations

from . import (bits, experts, fft, index, layers, linalg, nn, ops, pool, quant, scans,
               statistics, symbolic, tensors, views)

MODULES = (ops, tensors, nn, layers, pool, views, statistics, index, linalg, scans, bits,
           symbolic, fft, experts, quant)
