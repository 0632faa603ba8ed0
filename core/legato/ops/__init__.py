"""The core operator set. Importing this package registers every core op in REGISTRY.

The op modules register in any order; the decompositions are checked once all are in.
"""
from . import composite, conv, elementwise, norms, primitives, qnn  # noqa: F401  (registration)
from .base import REGISTRY, composite as define_composite, primitive as define_primitive

REGISTRY.validate()

__all__ = ["REGISTRY", "define_composite", "define_primitive"]
