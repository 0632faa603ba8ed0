"""The core operator set. Importing this package registers every core op in REGISTRY.

The op modules register in any order; the decompositions are checked once all are in.
"""
from .base import REGISTRY, composite as define_composite, primitive as define_primitive

with REGISTRY.deferred():
    from . import (activations, composite, conv, derived, elementwise, indexing,  # noqa: F401
                   norms, primitives, qnn, qnn_elementwise, qnn_linear,
                   spectral)

CORE_OPS = frozenset(REGISTRY.names())  # what plugins and users register comes on top

__all__ = ["CORE_OPS", "REGISTRY", "define_composite", "define_primitive"]
