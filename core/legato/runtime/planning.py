"""Liveness and memory planning, shared by the executors.

A plan works on a flat sequence of steps that each read some values and write others
(`Call`s of one function, or `flatten`'s calls of a whole module with the functions
that main calls inlined). `last_uses` says where each value is read for the last time,
`frees` which values die after each step (what the reference interpreter drops, what
a buffer-planning executor may reuse), and `Arena` hands out buffers, reusing the ones
given back. Values may be aliases of others (`roots`: a reshape that is a view of its
input's buffer): liveness then counts the reads of every alias against the owner.
Constants never die.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

import numpy as np

from ..ir import CALL_OP, Call, Const, Function, Module, Value


# ---------------------------------------------------------------------------------
# liveness


def view_roots(steps: Sequence[Any], is_view: Callable[[Any], bool]) -> dict:
    """value -> the value owning its buffer, for the outputs of steps that are views of
    their first input (chains of views resolve to the first owner)."""
    roots: dict = {}
    for step in steps:
        if is_view(step):
            source = step.inputs[0]
            roots[step.outputs[0]] = roots.get(source, source)
    return roots


def last_uses(steps: Sequence[Any], roots: dict | None = None) -> dict:
    """Index of the last step reading each value (through any of its views); constants
    and absent inputs (None) are left out."""
    roots = roots or {}
    last: dict = {}
    for index, step in enumerate(steps):
        for value in step.inputs:
            if value is not None and not isinstance(value, Const):
                last[roots.get(value, value)] = index
    return last


def frees(steps: Sequence[Any], keep: Iterable, roots: dict | None = None
          ) -> list[tuple]:
    """Per step, the values (buffer owners) no later step reads, except those in `keep`
    (a function's parameters and results)."""
    roots = roots or {}
    kept = {roots.get(v, v) for v in keep}
    dying: list[list] = [[] for _ in steps]
    for value, index in last_uses(steps, roots).items():
        if value not in kept:
            dying[index].append(value)
    return [tuple(values) for values in dying]


BUFFER_ALIGN = 64  # bytes: a cache line, and one AVX-512 vector


def aligned_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """np.zeros whose data starts on a BUFFER_ALIGN-byte boundary. numpy's own start 16
    bytes past one as often as not, and a kernel's vector loads and stores then split
    cache lines (a max pool's in registers ran 16% slower on such buffers)."""
    kind = np.dtype(dtype)
    if kind.hasobject:
        return np.zeros(shape, kind)
    nbytes = math.prod(shape) * kind.itemsize
    raw = np.zeros(nbytes + BUFFER_ALIGN, np.uint8)
    start = -raw.ctypes.data % BUFFER_ALIGN
    return raw[start:start + nbytes].view(kind).reshape(shape)


class Arena:
    """Buffers for a plan's values: a value takes the block given back most recently that
    holds it, whatever its dtype or shape was, and no more than SLACK times larger (so a
    small value does not tie up a large block), else a new block. `allocated` counts the
    bytes of the blocks it had to make.

    The most recent block is the memory the steps before just read, still in the caches:
    a result written there does not wait, store by store, on reads of lines from memory.
    Buffers kept by exact size put each result into the block its size had last, often
    untouched since the previous run (MobileNetV2 at 224^2, 1 thread: 1.02-1.04 -> 0.99-
    1.02x onnxruntime's time, with 10 MB of blocks instead of 16.5; ResNet-50 -0.5%)."""

    SLACK = 16

    def __init__(self):
        self.allocated = 0
        self._free: list[np.ndarray] = []  # raw blocks given back, the latest last
        self._blocks: dict[int, np.ndarray] = {}  # a block's data address -> the block

    def take(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        kind = np.dtype(dtype)
        need = math.prod(shape) * kind.itemsize  # (np.prod costs several times more)
        if kind.hasobject:  # object references cannot live in raw bytes; never reused
            self.allocated += need
            return aligned_zeros(shape, kind)
        limit = self.SLACK * max(need, BUFFER_ALIGN)
        for i in range(len(self._free) - 1, -1, -1):
            block = self._free[i]
            if need <= block.size <= limit:
                del self._free[i]
                return block[:need].view(kind).reshape(shape)
        self.allocated += need
        block = aligned_zeros((max(need, 1),), np.uint8)  # zeros: nothing uninitialised
        self._blocks[block.ctypes.data] = block  # is ever read
        return block[:need].view(kind).reshape(shape)

    def give(self, buffer: np.ndarray) -> None:
        """Give back a buffer `take` returned (or a view of it from its start); others,
        and a block already given back, are ignored."""
        block = self._blocks.get(buffer.ctypes.data)
        if block is not None and not any(free is block for free in self._free):
            self._free.append(block)


# ---------------------------------------------------------------------------------
# whole modules as one flat sequence


class FlatCall:
    """One call of a flattened module: the original call (op, attrs, origin), its
    inputs and outputs as flat values (main's own Values, fresh copies of an inlined
    function's values, Consts, None) and where it is (`@fn call i`)."""

    __slots__ = ("call", "inputs", "outputs", "where")

    def __init__(self, call: Call, inputs: tuple, outputs: tuple, where: str):
        self.call, self.inputs, self.outputs, self.where = call, inputs, outputs, where

    @property
    def op(self) -> str:
        return self.call.op

    @property
    def attrs(self):
        return self.call.attrs

    @property
    def output(self) -> Hashable:
        return self.outputs[0]


@dataclass(frozen=True)
class Flat:
    """A module as one sequence of calls: main's params, the calls (every `call` of a
    module function replaced by that function's calls) and main's results."""

    params: tuple
    calls: tuple
    results: tuple


def flatten(module: Module, opaque: Callable[[Function], bool] | None = None) -> Flat:
    """Inline every function main calls (recursively; the values of each inlined copy
    are fresh Values of the same types, so two call sites never share one). A call of a
    function for which `opaque(function)` holds stays one step (its op is `call`): an
    executor runs such a function whole (a fused GEMM epilogue)."""
    calls: list[FlatCall] = []

    def inline(name: str, env: dict, main: bool) -> None:
        fn = module.functions[name]
        for index, call in enumerate(fn.calls):
            inputs = tuple(None if v is None else env.get(v, v) for v in call.inputs)
            if call.op == CALL_OP and not (
                    opaque is not None and opaque(module.functions[call.attrs["callee"]])):
                callee = module.functions[call.attrs["callee"]]
                inner_env = dict(zip(callee.params, inputs))
                inline(call.attrs["callee"], inner_env, False)
                for out, result in zip(call.outputs, callee.results):
                    env[out] = inner_env.get(result, result)
                continue
            outputs = tuple(out if main else env.setdefault(out, Value(out.type, out.name))
                            for out in call.outputs)
            calls.append(FlatCall(call, inputs, outputs, f"@{name} call {index}"))

    main_env: dict = {}
    inline("main", main_env, True)
    main = module.main
    results = tuple(main_env.get(r, r) for r in main.results)
    return Flat(tuple(main.params), tuple(calls), results)
