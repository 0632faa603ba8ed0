"""ATen op converters for the rest of core ATen's inference ops (special functions, views
such as diagonal/unfold/as_strided, copies and factories), joined to the importer's table."""
from __future__ import annotations

from .torch_ops import aten  # noqa: F401
