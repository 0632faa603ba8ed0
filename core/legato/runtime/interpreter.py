"""The reference executor: plan once (kernels bound, slots numbered, buffers freed after
their last use), then a flat loop. Every error names the call that failed."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import CALL_OP, CUSTOM_OP, Call, Const, Function, Module, Value
from ..ir.errors import ExecutionError, LegatoError, clip
from ..legalization.custom_ops import decode_custom
from ..legalization.loop import call_text
from . import planning


def describe_call(call: Call, where: str) -> str:
    text = f"{where}: {call_text(call)}"
    if call.origin is not None:
        text += f" [part of {call.origin.op} at {call.origin.source}]"
    return text


class _Step:
    __slots__ = ("kernel", "inputs", "attrs", "outputs", "call", "where", "free")

    def __init__(self, kernel, inputs, attrs, outputs, call, where):
        self.kernel, self.inputs, self.attrs = kernel, inputs, attrs
        self.outputs, self.call, self.where = outputs, call, where
        self.free: tuple[int, ...] = ()


class Interpreter:
    """Runs a legalized module with a backend's kernels (and its fallback's). Per-run
    state lives in each call, so several threads may call one instance at once."""

    thread_safe = True

    def __init__(self, module: Module, backend, fallback=None, fallback_calls=(),
                 registry=None, check_outputs: bool = True, callees=None):
        self.module, self.backend, self.fallback = module, backend, fallback
        self.fallback_calls = set(fallback_calls)
        self.callees = dict(callees or {})  # function name -> runner (e.g. another backend)
        self.registry = registry
        self.check_outputs = check_outputs
        self._plans: dict[str, tuple] = {}
        self.main = self._plan("main")
        self._shared = _shared_results(self.main)

    def _kernel_for(self, call: Call):
        if call.op == CUSTOM_OP and not self.backend.has_kernel(CUSTOM_OP):
            original = decode_custom(call, self.registry)
            kernel = self._kernel_for(original)
            return lambda *inputs, **attrs: kernel(
                *_place(original, inputs), **original.attrs)
        for backend in ((self.fallback,) if call in self.fallback_calls else
                        (self.backend, self.fallback)):
            if backend is not None and backend.has_kernel(call.op):
                return backend.kernel(call.op)
        raise ExecutionError(f"no kernel for {call.op} on {self.backend.name}"
                             + (f" or its fallback {self.fallback.name}" if self.fallback else ""))

    def _plan(self, name: str):
        if name in self._plans:
            return self._plans[name]
        fn: Function = self.module.functions[name]
        slots: dict[Value, int] = {p: i for i, p in enumerate(fn.params)}
        consts: list[tuple[int, np.ndarray]] = []

        def slot(value):
            if value is None:
                return None
            if value not in slots:
                if not isinstance(value, Const):
                    raise ExecutionError(f"@{name}: {value!r} is used before it is defined")
                slots[value] = len(slots)
                consts.append((slots[value], value.data))
            return slots[value]

        steps = []
        for index, call in enumerate(fn.calls):
            where = f"@{name} call {index}"
            try:
                kernel = self._call_kernel(call) if call.op == CALL_OP else self._kernel_for(call)
            except LegatoError as err:
                raise ExecutionError(f"{describe_call(call, where)}: {err}") from None
            inputs = tuple(slot(v) for v in call.inputs)
            outputs = tuple(slots.setdefault(o, len(slots)) for o in call.outputs)
            attrs = {} if call.op == CALL_OP else dict(call.attrs)
            steps.append(_Step(kernel, inputs, attrs, outputs, call, where))
        results = tuple(slot(r) for r in fn.results)
        for step, dying in zip(steps, planning.frees(fn.calls, (*fn.params, *fn.results))):
            step.free = tuple(slots[v] for v in dying)  # big intermediates go early
        plan = (fn, len(slots), tuple(consts), tuple(steps), results)
        self._plans[name] = plan
        return plan

    def _call_kernel(self, call: Call):
        runner = self.callees.get(call.attrs["callee"])
        if runner is not None:
            return lambda *args: as_tuple(runner(*args))
        plan = self._plan(call.attrs["callee"])
        return lambda *args: self._run(plan, args)

    def __call__(self, *args, **kwargs):
        fn = self.main[0]
        arrays = bind_inputs(fn, args, kwargs)
        results = self._run(self.main, arrays)
        if self._shared:  # the caller owns every result: never its input or our constant
            results = tuple(np.array(r, copy=True) if i in self._shared else r
                            for i, r in enumerate(results))
        return results[0] if len(results) == 1 else results

    def _run(self, plan, args: Sequence[np.ndarray]):
        fn, n_slots, consts, steps, results = plan
        env: list = [None] * n_slots
        env[:len(args)] = args
        for index, data in consts:
            env[index] = data
        for step in steps:
            try:
                out = step.kernel(*[None if i is None else env[i] for i in step.inputs],
                                  **step.attrs)
            except Exception as err:
                raise ExecutionError(f"{describe_call(step.call, step.where)}: "
                                     f"{type(err).__name__}: {err}") from err
            outs = as_tuple(out)
            if self.check_outputs:
                _check_outputs(step, outs)
            for index, value in zip(step.outputs, outs):
                env[index] = value
            for index in step.free:
                env[index] = None
        return tuple(env[i] for i in results)


def as_tuple(value) -> tuple:
    """A kernel's or a compiled model's result as a tuple (one result is not one)."""
    return value if isinstance(value, tuple) else (value,)


def _place(call: Call, inputs):
    """Put the tensor inputs of a custom call back in their original positions."""
    tensors = iter(inputs)
    return [None if v is None else next(tensors) for v in call.inputs]


def _shared_results(plan) -> frozenset:
    """Positions of results that are not a kernel's fresh output: an input, a constant,
    or a value already returned at an earlier position."""
    fn, _, consts, _, results = plan
    shared = {s for s, _ in consts} | set(range(len(fn.params)))
    positions, seen = set(), set()
    for position, slot in enumerate(results):
        if slot in shared or slot in seen:
            positions.add(position)
        seen.add(slot)
    return frozenset(positions)


def _check_outputs(step: _Step, outs) -> None:
    expected = step.call.outputs
    if len(outs) != len(expected):
        raise ExecutionError(f"{describe_call(step.call, step.where)}: kernel returned "
                             f"{len(outs)} results, expected {len(expected)}")
    for out, value in zip(outs, expected):
        if not isinstance(out, np.ndarray) or out.shape != value.shape or \
                out.dtype.name != value.dtype:
            got = f"{out.dtype.name}{list(out.shape)}" if isinstance(out, np.ndarray) else \
                type(out).__name__
            raise ExecutionError(f"{describe_call(step.call, step.where)}: kernel returned "
                                 f"{got}, expected {value.type}")


_MISSING = object()


def bind_inputs(fn: Function, args, kwargs) -> list[np.ndarray]:
    """Match run-time inputs to parameters by position or name; check shapes and dtypes."""
    params = fn.params
    if len(args) + len(kwargs) != len(params):
        names = ", ".join(f"{p.name}: {p.type}" for p in params)
        raise ExecutionError(f"expected {len(params)} inputs ({names}), "
                             f"got {len(args) + len(kwargs)}")
    if kwargs:
        values = _by_name(params, args, kwargs)
    else:
        values = args
    arrays = []
    for param, value in zip(params, values):
        array = value if type(value) is np.ndarray else _as_array(param, value)
        if array.shape != param.shape or array.dtype != _np_dtype(param.dtype):
            array = _mismatched_input(param, array)
        arrays.append(array)
    return arrays


def _as_array(param: Value, value) -> np.ndarray:
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as err:  # ragged lists, objects numpy cannot read
        raise ExecutionError(f"input {param.name!r} ({param.type}) is not an array: "
                             f"{clip(str(err), 200)}") from None


def _mismatched_input(param: Value, array: np.ndarray) -> np.ndarray:
    """The input in native byte order if that is all that differs; else an error that
    says what differs."""
    want, native = _np_dtype(param.dtype), array.dtype.newbyteorder("=")
    if array.shape == param.shape and native == want:
        return array.astype(want)  # a big- (or little-) endian array of the right dtype
    differs = []
    if native != want:
        differs.append(f"dtype {array.dtype.name} is not {param.dtype}")
    if array.shape != param.shape:
        differs.append(f"shape {list(array.shape)} is not {list(param.shape)}")
    raise ExecutionError(f"input {param.name!r} must be {param.type}, got "
                         f"{array.dtype.name}{list(array.shape)}: {'; '.join(differs)}")


def _np_dtype(name: str):
    """numpy's dtype for a legato dtype name (the name itself where numpy has none)."""
    dtype = _NP_DTYPES.get(name)
    if dtype is None:
        try:
            dtype = np.dtype(name)
        except TypeError:  # bfloat16 without ml_dtypes: compare by name
            dtype = name
        _NP_DTYPES[name] = dtype
    return dtype


_NP_DTYPES: dict = {}


def _by_name(params, args, kwargs) -> list:
    by_name = {p.name: i for i, p in enumerate(params)}
    values = list(args) + [_MISSING] * (len(params) - len(args))
    for key, value in kwargs.items():
        if key not in by_name:
            raise ExecutionError(f"unknown input {key!r}; inputs are {list(by_name)}")
        if values[by_name[key]] is not _MISSING:
            raise ExecutionError(f"input {key!r} is given twice")
        values[by_name[key]] = value
    return values
