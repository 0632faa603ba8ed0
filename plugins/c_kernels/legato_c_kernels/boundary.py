"""The inputs and results of a planned instance, passed in place where the plan allows.

A prepared C call names the arguments that are the data pointers of its inputs and of
its result (`CCall.slots`). Where every step touching a parameter reads it through such
a slot, a run passes the caller's array itself there instead of copying it into the
planned buffer; where every step touching a result does (its writer included), the run
writes a fresh array the caller then owns instead of copying the planned buffer out.
Everything else is copied: parameters read by other steps (a fallback kernel, a call
that needs its own copies), results that are views, parameters, constants or returned
twice.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._lib import ffi
from .kernels.common import OUT, check_status

F32 = np.dtype(np.float32)


class Touch:
    """A step's use of a value: `role` is the kernel input position it is read as, OUT
    for the value it writes, or None when it is not passed through a slot (a bias in an
    epilogue, a fallback kernel's input)."""

    __slots__ = ("value", "role")

    def __init__(self, value, role):
        self.value, self.role = value, role


def _slot_positions(run: Callable) -> dict | None:
    """role -> argument positions of a prepared C call (None for other callables)."""
    call = getattr(run, "call", None)
    if call is None:
        return None
    positions: dict = {}
    for role, position in call.slots:
        positions.setdefault(role, []).append(position)
    return positions


def _substituted(run: Callable, subs: list[tuple[int, int]], pointers: list) -> Callable:
    """`run`'s C call with the pointers of this run's arrays at the given positions."""
    op, fn, template = run.call.op, run.call.fn, run.call.args

    def step() -> None:
        args = list(template)
        for position, index in subs:
            args[position] = pointers[index]
        status = fn(*args)
        if status:
            check_status(op, status)
    step.direct, step.call = True, run.call
    return step


class Boundary:
    """Decides which parameters and results a run passes in place, rewires the steps
    that touch them, and does the per-run part (`enter`, `results`)."""

    def __init__(self, steps: list, params: list, param_buffers: list, results: list,
                 result_buffers: list, roots: dict):
        self.param_buffers, self.result_buffers = param_buffers, result_buffers
        self.pointers: list = []  # this run's data pointers, read by rewired steps
        touches: dict[Any, list] = {}
        for index, step in enumerate(steps):
            for touch in step.touches:
                touches.setdefault(roots.get(touch.value, touch.value), []).append(
                    (index, touch.role))
        slots = [_slot_positions(step.run) for step in steps]

        def in_place(value) -> bool:
            return all(role is not None and slots[k] is not None and role in slots[k]
                       for k, role in touches.get(value, ()))

        runtime: list = []  # values passed in place, in pointer order
        self.direct_params = []
        for value in params:
            ok = value.dtype == "float32" and in_place(value) and value in touches
            self.direct_params.append(ok)
            if ok:
                runtime.append(value)
        self.fresh = []  # positions of results that are this run's fresh arrays
        seen = set()
        for position, value in enumerate(results):
            writers = [role for _, role in touches.get(value, ()) if role == OUT]
            ok = value.dtype == "float32" and value not in seen and value not in params \
                and roots.get(value, value) is value and writers == [OUT] and in_place(value)
            seen.add(value)
            if ok:
                self.fresh.append(position)
                runtime.append(value)
        index_of = {value: i for i, value in enumerate(runtime)}
        for k, step in enumerate(steps):
            subs = [(position, index_of[root]) for root, role in
                    ((roots.get(t.value, t.value), t.role) for t in step.touches)
                    if root in index_of for position in slots[k][role]]
            if subs:
                step.run = _substituted(step.run, subs, self.pointers)
        self._fresh_shapes = [results[j].shape for j in self.fresh]
        # per result: None (a fresh array), else (run-time index or None, planned buffer)
        self._copies = [None if j in self.fresh else
                        (index_of.get(roots.get(v, v)), result_buffers[j])
                        for j, v in enumerate(results)]
        self._all_fresh = len(self.fresh) == len(results)

    def enter(self, arrays: list) -> list:
        """Put this run's inputs in place (or into their buffers) and make its fresh
        result arrays; returns the arrays passed in place, in pointer order."""
        runtime = []
        for buffer, array, direct in zip(self.param_buffers, arrays, self.direct_params):
            if direct:
                flags = array.flags
                runtime.append(array if flags.c_contiguous and flags.aligned else
                               np.ascontiguousarray(array))
            else:
                np.copyto(buffer, array)
        runtime += [np.empty(shape, F32) for shape in self._fresh_shapes]
        self.pointers[:] = [ffi.from_buffer("float[]", a) for a in runtime]
        return runtime

    def planned(self) -> None:
        """Point the rewired steps at the planned buffers (for profiling)."""
        runtime = [b for b, d in zip(self.param_buffers, self.direct_params) if d]
        runtime += [self.result_buffers[j] for j in self.fresh]
        self.pointers[:] = [ffi.from_buffer("float[]", a) for a in runtime]

    def results(self, runtime: list) -> list:
        """The run's results, each an array the caller owns: the fresh arrays, and copies
        of the others (of this run's array where it was passed in place)."""
        if self._all_fresh:
            return runtime[len(runtime) - len(self.fresh):]
        fresh = iter(runtime[len(runtime) - len(self.fresh):])
        out = []
        for copy in self._copies:
            if copy is None:
                out.append(next(fresh))
                continue
            index, planned = copy
            source = planned if index is None else runtime[index].reshape(planned.shape)
            out.append(np.array(source, copy=True))
        return out
