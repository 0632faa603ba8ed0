"""Fuzz target: decode_tosa_custom on mutated tosa.custom lines.

The decoder reads MLIR that tools or people may have edited: every mutated line must give
the original calls back or a LegatoError, never another exception.
"""
from __future__ import annotations

import random

import numpy as np

import legato

QUICK_CASES = 300
ALPHABET = '\\"{}[]()<>:,=x0123456789?-#%abcfi \t\n\x00\u00e9'
_lines: list = []


def custom_lines() -> list:
    """tosa.custom lines of a module with a two-result op and an absent optional input."""
    if not _lines:
        b = legato.GraphBuilder()
        x = b.input("x", (2, 4))
        first, second = b.call("split", x, sections=[1, 1], axis=0)
        y = b.call("nn.layer_norm", first, None, b.const(np.zeros(4, np.float32)),
                   axes=[-1], epsilon=1e-3)
        config = {"backends": {"tosa_custom": {"keep": ["nn.layer_norm", "split"]}}}
        text = legato.compile(b.build(y, second), backend="tosa_custom", config=config).artifact
        _lines.extend(line for line in text.splitlines() if '"tosa.custom"' in line)
    return _lines


def mutate(rng: random.Random, line: str) -> str:
    chars = list(line)
    for _ in range(rng.randint(1, 4)):
        at, roll = rng.randrange(len(chars) + 1), rng.random()
        if roll < 0.4 and chars:
            del chars[min(at, len(chars) - 1)]
        elif roll < 0.8:
            chars.insert(at, rng.choice(ALPHABET))
        else:
            chars = chars[:at]
    return "".join(chars)


def run(seed: int) -> str:
    from legato_tosa_custom import decode_tosa_custom
    rng = random.Random(seed)
    line = mutate(rng, rng.choice(custom_lines()))
    try:
        decode_tosa_custom(line)
    except legato.LegatoError:
        return "refused"
    return "ok"
