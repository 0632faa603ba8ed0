"""The op generators the fuzz programs draw calls from: legato.testing's, one per
registered op (its own, the generic elementwise one, or one from its examples).

`GENERATORS` maps every op that has one; tests/fuzz/test_quick.py checks that every op
has samples, which needs the same generators.
"""
from __future__ import annotations

from collections.abc import Mapping

import legato
from legato.testing.generators import generator_for


class _Generators(Mapping):
    """op -> generator, for the ops registered now (plugins included)."""

    def _table(self) -> dict:
        return {op: gen for op in legato.list_ops()
                if (gen := generator_for(legato.get_op(op))) is not None}

    def __getitem__(self, op):
        return self._table()[op]

    def __iter__(self):
        return iter(self._table())

    def __len__(self):
        return len(self._table())


GENERATORS = _Generators()
