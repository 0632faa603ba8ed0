"""The core operator set. Importing this package registers every core op in REGISTRY.

Modules are imported in level order: a decomposition is traced at registration and may
only use ops that are already registered at a lower level.
"""
from . import primitives, composite, norms, conv, qnn  # noqa: F401  (registration)
from .base import REGISTRY, composite as define_composite, primitive as define_primitive

__all__ = ["REGISTRY", "define_composite", "define_primitive"]
