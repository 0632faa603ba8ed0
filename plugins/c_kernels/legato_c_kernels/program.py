"""Stretches of a plan run as one C call (lgk_run_program).

A prepared step is one Python -> C call costing a few hundred nanoseconds, more than
the work of many steps of a small model (an add of 16 x 64 floats, a layer norm of 16
rows). Consecutive steps whose prepared call has fixed arguments and whose function
the C library can run in a program are merged: their calls are encoded once, at plan
time, as 64-bit words (the C side's format: each call's code, then its arguments as
integers, addresses and float bits in prototype order), and a run makes one call for
the whole stretch. The C library lists the functions it can run (name and argument
signature); a function whose signature does not match its prototype is left out.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ._lib import ffi, lib
from .kernels.common import CCall, check_status

def _letter(ctype) -> str:
    if ctype.kind == "pointer":
        return "p"
    if ctype.kind == "primitive" and ctype.cname in ("float",):
        return "f"
    if ctype.kind == "primitive" and ctype.cname in ("int", "int64_t", "int32_t"):
        return "i"
    return "?"  # a type the program format has no word for


def _callable_functions() -> dict[str, tuple[int, str]]:
    """function name -> (program code, signature), for the entries whose signature
    matches the function's prototype."""
    found = {}
    for code in range(lib.lgk_program_call_count()):
        name = ffi.string(lib.lgk_program_call_name(code)).decode()
        signature = ffi.string(lib.lgk_program_call_signature(code)).decode()
        prototype = ffi.typeof(ffi.addressof(lib, name))
        if "".join(_letter(t) for t in prototype.args) == signature:
            found[name] = (code, signature)
    return found


FUNCTIONS = _callable_functions()


def _word(letter: str, value: Any) -> int:
    if letter == "p":
        return int(ffi.cast("intptr_t", value))
    if letter == "f":
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return int(value)


def encode(call: CCall) -> Optional[list[int]]:
    """The program words of one call, or None when a program cannot run it."""
    entry = FUNCTIONS.get(getattr(call.fn, "__name__", ""))
    if entry is None:
        return None
    code, signature = entry
    return [code] + [_word(letter, arg) for letter, arg in zip(signature, call.args)]


class Program:
    """Several prepared C calls made by one call; `failed` is the index of the call
    that returned an error status (after a run that raised)."""

    def __init__(self, calls: Sequence[CCall], words: list[int]):
        self.calls = list(calls)  # keeps every array and cdata the words point into
        self._words = ffi.new("int64_t[]", words)
        self._count, self._length = len(calls), len(words)
        self._failed = ffi.new("int64_t *")
        self.failed = -1

    def __call__(self) -> None:
        status = lib.lgk_run_program(self._count, self._words, self._length, self._failed)
        if status:
            self.failed = int(self._failed[0])
            check_status(self.calls[self.failed].op, status)


def merge(runs: Sequence[Callable[[], None]], enabled: bool = True
          ) -> list[tuple[Callable[[], None], list[int]]]:
    """The runs with every stretch of two or more mergeable ones (prepared calls with
    fixed arguments of functions a program can run) replaced by one Program: a list of
    (callable, indices of the runs it makes). With `enabled` false every run stays a
    step of its own (to compare the two)."""
    merged: list[tuple[Callable[[], None], list[int]]] = []
    stretch: list[tuple[int, CCall, list[int]]] = []

    def flush() -> None:
        if len(stretch) >= 2:
            words = [w for _, _, encoded in stretch for w in encoded]
            merged.append((Program([c for _, c, _ in stretch], words),
                           [i for i, _, _ in stretch]))
        else:
            merged.extend((runs[i], [i]) for i, _, _ in stretch)
        stretch.clear()

    for index, run in enumerate(runs):
        call = getattr(run, "call", None) if getattr(run, "fixed", False) else None
        encoded = encode(call) if enabled and call is not None else None
        if encoded is None:
            flush()
            merged.append((run, [index]))
        else:
            stretch.append((index, call, encoded))
    flush()
    return merged
