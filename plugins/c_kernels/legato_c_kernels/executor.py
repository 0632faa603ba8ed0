"""The planned executor of the c_kernels backend.

Planning happens once, on the whole module as one flat sequence of calls (functions
that main calls, e.g. fused or partitioned regions, are inlined: `legato.runtime.planning`).
Every value gets a buffer (reused by liveness, in place where the op is elementwise or
its kernel says it computes in place and the input dies there, a view where the kernel
says its result may be one: reshape);
a GEMM epilogue (a primitive function the backend's fusion pass made: fusion.py) is
one C call; a custom call runs the kernel of the op it carries; constant GEMM weights
are packed once. Every step is
then bound to its buffers (`kernel.bind(..., out=...)`, a prepared C call where the
buffers allow it). A run passes the caller's inputs and fresh result arrays in place
of the planned buffers where the prepared calls declare those pointers (boundary.py),
copies the other inputs in, makes the prepared calls in order (consecutive C calls with
fixed arguments as one call of a C program: program.py), and copies the other results
out.

A planned instance owns its buffers, so `PlannedExecutor` keeps a pool of them: each call
runs on an instance no other call is using, and concurrent calls from several threads run
in parallel (the C calls release the GIL). Constant weights are packed once for all.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

import legato
from legato.plugin_api import (CALL_OP, CUSTOM_OP, Arena, Const, ExecutionError, Flat,
                               FlatCall, LegatoError, aligned_zeros, as_tuple, bind_inputs,
                               decode_custom, describe_call, flatten, last_uses, view_roots)

from . import kernels as K
from . import program
from .boundary import Boundary, Touch
from .fusion import is_epilogue
from .kernels.common import OUT
from .pool import RunnerPool


def make_executor(module, backend, fallback, fallback_calls, registry, *, shared=None):
    """The backend's executor factory: the planned executor. `shared`: a dict the planned
    executors of one compiled model keep their packed constant weights in, so that a
    plan for another binding of its symbolic dims packs none of them again."""
    return PlannedExecutor(module, backend, fallback, fallback_calls, registry, shared=shared)


def packed_constant(kernel, call, packed: dict, constant_view=None) -> tuple[int, Any]:
    """(input index, packed form) of `call`'s constant weight, from `packed` (weight,
    transposed, op -> packed form), packed into it the first time (kernels that take one
    say which input: `packed_input = (index, transposed)`; a kernel with
    `pack(weight, **attrs)` packs it itself, or returns None); (-1, None) where there is
    nothing to pack. `constant_view(value)` gives the data of a value that is a view of a
    constant (a reshaped weight: a conv1d's, made a conv2d's by legalization), or None."""
    spec = getattr(kernel, "packed_input", None)
    if spec is None:
        return -1, None
    index, transposed = spec
    weight = call.inputs[index]
    if isinstance(weight, Const):
        data = weight.data
    else:
        data = constant_view(weight) if constant_view is not None and weight is not None \
            else None
    pack = getattr(kernel, "pack", None)
    if data is None or (pack is None and data.ndim != 2):
        return -1, None
    key = (weight, transposed, call.op)
    if key not in packed:
        packed[key] = pack(data, **call.attrs) if pack is not None else \
            K.pack_weight(data, transposed=transposed)
    return index, packed[key]


def pack_constants(module, backend, fallback_calls, shared: dict) -> None:
    """Pack into `shared` the constant weights the plans of `module` will take from it:
    a model with symbolic dims is planned per binding at call time, and this packs its
    weights at compile time, as a static compile does, rather than in its first call. A
    weight that does not pack is left for the plan to report."""
    for fn in module.functions.values():
        for call in fn.calls:
            if call in fallback_calls or not backend.has_kernel(call.op):
                continue
            try:
                packed_constant(backend.kernel(call.op), call, shared)
            except LegatoError:
                pass


# takes shared=, and fills it at compile time for a model with symbolic dims (legato.api)
make_executor.pack_constants = pack_constants


# The largest result (elements) of a step computed once from constants when the plan is
# made: as the core's constant folding bounds what it folds, so that a small table
# broadcast to a large mask is not kept alive between runs in full.
CONSTANT_STEP_MAX_ELEMENTS = 1 << 20


class _Step:
    """A bound step: `run()` computes it on the planned buffers; `touches` says which
    values it reads and writes, and how (see boundary.Touch)."""

    __slots__ = ("run", "call", "where", "touches")

    def __init__(self, run: Callable[[], None], call, where: str, touches: list):
        self.run, self.call, self.where, self.touches = run, call, where, touches


class _PlannedInstance:
    """One planned copy of a module: its own buffers and bound steps. Not for
    concurrent use (PlannedExecutor gives each call its own instance)."""

    def __init__(self, module, backend, fallback, fallback_calls, registry, packed: dict,
                 merge_steps: bool = True):
        self.backend, self.fallback, self.fallback_calls = backend, fallback, fallback_calls
        self.registry = registry
        self._packed = packed  # (weight, transposed) -> PackedWeight, shared by instances
        self._has_kernel: dict[str, bool] = {}  # op -> the backend has a kernel for it
        self._said: dict[tuple[str, str], bool] = {}  # (op, flag) -> its kernel's flag
        self.fn, self.module = module.main, module
        flat = flatten(module, opaque=is_epilogue)
        self.arena = Arena()
        self.buffers: dict[Any, np.ndarray] = {}
        self.params = [self._own(p) for p in flat.params]
        self.steps: list[_Step] = []
        roots = self._plan(flat)
        self.results = [self._buffer(r) for r in flat.results]
        self.boundary = Boundary(self.steps, list(flat.params), self.params,
                                 list(flat.results), self.results, roots)
        # what a run calls: the steps, stretches of prepared C calls merged into one
        self.runs = program.merge([step.run for step in self.steps], merge_steps)

    # --- buffers ----------------------------------------------------------------------

    def _own(self, value) -> np.ndarray:
        self.buffers[value] = aligned_zeros(value.shape, value.dtype)
        return self.buffers[value]

    def _buffer(self, value):
        if value is None:
            return None
        if isinstance(value, Const):
            return value.data
        return self.buffers[value]

    def _plan(self, flat: Flat) -> dict:
        """Plan buffers and bind every step; returns the view roots."""
        calls = flat.calls
        roots = self._roots = view_roots(calls, self._is_view)
        last_use = last_uses(calls, roots)
        results = set(flat.results)
        constant = self._constant_steps(calls, roots, results)
        pinned = {roots.get(v, v) for v in (*flat.params, *flat.results)}
        pinned.update(out for step in constant for out in step.outputs)
        self.computed_once = 0
        for index, step in enumerate(calls):
            if step in constant:
                self._compute_once(step)
                continue
            dying = [r for r in {roots.get(v, v) for v in step.inputs if v is not None}
                     if r in self.buffers and r not in pinned and last_use.get(r) == index]
            self._assign_outputs(step, dying, roots, results)
            self._bind(step)
            for root in dying:  # what was not reused in place goes back to the arena
                self.arena.give(self.buffers[root])
        return roots

    def _constant_steps(self, calls, roots, results) -> set:
        """The steps that compute from constants only (a causal mask, position ids and
        their embeddings: ops on constant tables that a model repeats per layer), each
        result at most CONSTANT_STEP_MAX_ELEMENTS: computed once, by the same kernels, when
        the plan is made. Views stay views; results, function calls and custom calls are
        left to every run."""
        known: set = set()  # values such steps compute, and views of them

        def constant(value) -> bool:
            root = roots.get(value, value)
            return value is None or isinstance(value, Const) or isinstance(root, Const) \
                or root in known

        steps = set()
        for step in calls:
            if step.op in (CALL_OP, CUSTOM_OP) or self._is_view(step) or \
                    any(out in results or out.type.size > CONSTANT_STEP_MAX_ELEMENTS
                        for out in step.outputs):
                continue
            if all(constant(v) for v in step.inputs):
                steps.add(step)
                known.update(step.outputs)
        return steps

    def _compute_once(self, step) -> None:
        """A constant step, run now into buffers of its own that nothing reuses."""
        for out in step.outputs:
            self.buffers[out] = aligned_zeros(out.shape, out.dtype)
        before = len(self.steps)
        self._bind(step)
        if len(self.steps) == before:
            return  # an empty result: nothing to compute
        bound = self.steps.pop()
        try:
            bound.run()
        except LegatoError as err:
            raise ExecutionError(f"{describe_call(step.call, step.where)}: {err}") from None
        self.computed_once += 1

    def _is_view(self, call) -> bool:
        """A call whose kernel says its result may be a view of its first input (reshape):
        a view of that input's buffer, or of a constant's data (never written: a value
        rooted in a constant is no planned buffer, so nothing reuses it), no step at all."""
        return self._native(call) and self._kernel_says(call.op, "view")

    def _kernel_says(self, op: str, flag: str) -> bool:
        """The backend kernel of `op` has `flag` set (asked once per op and flag: a plan
        asks for each of its calls several times)."""
        said = self._said.get((op, flag))
        if said is None:
            said = self._said[op, flag] = bool(getattr(self.backend.kernel(op), flag, False))
        return said

    def _in_place(self, call) -> bool:
        """May the result take the buffer of a same-sized input that dies here? Yes for
        elementwise ops (each element is read before it is written) and for kernels
        that say they compute in place."""
        if self._native(call) and self._kernel_says(call.op, "in_place"):
            return True
        registry = self.registry if self.registry is not None else legato.context().registry
        return call.op in registry and registry.get(call.op).elementwise

    def _assign_outputs(self, call, dying: list, roots, results) -> None:
        if self._is_view(call):
            self.buffers[call.output] = self._buffer(call.inputs[0]).reshape(call.output.shape)
            if roots[call.output] in dying:
                dying.remove(roots[call.output])  # the view keeps its owner's buffer alive
            return
        in_place = self._in_place(call)
        onto = self._dying_residual(call, dying, roots)
        for out in call.outputs:
            reuse = onto if onto is not None else \
                next((r for r in dying if in_place and r.type.size == out.type.size
                      and r.dtype == out.dtype), None)
            if reuse is not None:  # in place: the kernel may write over its dying input
                dying.remove(reuse)
                self.buffers[out] = self.buffers[reuse].reshape(out.shape)
            elif out in results:
                self.buffers[out] = np.zeros(out.shape, out.dtype)
            else:
                self.buffers[out] = self.arena.take(out.shape, out.dtype)

    def _dying_residual(self, step, dying: list, roots):
        """The buffer owner of a fused conv's residual when the residual dies at `step`
        and is no other input of it: the conv then writes its result over the residual,
        adding onto it (the C conv runs in place when the two are one buffer)."""
        gemm, _, _, residual = self._epilogue(step)
        if residual is None or isinstance(residual, Const):
            return None
        root, out = roots.get(residual, residual), step.outputs[0]
        read = {roots.get(v, v) for v in gemm.inputs if v is not None}  # conv(r) + r: no
        return root if root in dying and root not in read and \
            root.type.size == out.type.size and root.dtype == out.dtype else None

    def _epilogue(self, step) -> tuple[Any, Any, str | None, Any]:
        """(GEMM step, bias, activation, residual) of a fused epilogue's call: the GEMM
        reads the call's values and writes its result; Nones for any other step."""
        if step.op != CALL_OP:
            return None, None, None, None
        fn = self.module.functions[step.attrs["callee"]]
        env = dict(zip(fn.params, step.inputs))
        gemm = fn.calls[0]
        inputs = tuple(None if v is None else env.get(v, v) for v in gemm.inputs)
        added = None  # the other operand of the bias or residual add
        if fn.attrs["bias"] or fn.attrs.get("residual"):
            add = fn.calls[1]
            other = add.inputs[1] if add.inputs[0] is gemm.output else add.inputs[0]
            added = env.get(other, other)
        bias, residual = (None, added) if fn.attrs.get("residual") else (added, None)
        act = fn.attrs["activation"]
        return FlatCall(gemm, inputs, step.outputs, step.where), bias, act, residual

    # --- steps ------------------------------------------------------------------------

    def _native(self, call) -> bool:
        if call.call in self.fallback_calls:
            return False
        native = self._has_kernel.get(call.op)
        if native is None:
            native = self._has_kernel[call.op] = self.backend.has_kernel(call.op)
        return native

    def _bind(self, step) -> None:
        if self._is_view(step):
            return  # a view, planned in _assign_outputs
        gemm, bias, act, residual = self._epilogue(step)
        call = gemm or self._decoded(step)
        inputs = [self._buffer(v) for v in call.inputs]
        outs = [self.buffers[o] for o in step.outputs]
        if not any(out.size for out in outs):
            return  # an empty result has nothing to compute on any run
        attrs = dict(call.attrs)
        native = self._native(call)
        touches = [Touch(v, i if native else None) for i, v in enumerate(call.inputs)
                   if v is not None and not isinstance(v, Const)]
        touches += [Touch(o, OUT if native else None) for o in step.outputs]
        try:
            if native:
                kernel = self.backend.kernel(call.op)
                self._pack_constant_weight(kernel, call, inputs)
                callee = self.module.functions[step.attrs["callee"]] if gemm is not None \
                    else None
                if callee is not None and callee.attrs.get("softmax"):
                    kernel = kernel.softmax_epilogue  # softmax over the last axis: no more
                elif gemm is not None:  # a GEMM with its epilogue
                    kernel = kernel.epilogue
                    if bias is not None:
                        attrs["bias"] = self._buffer(bias).reshape(-1)
                        touches.append(Touch(bias, None))  # an attribute: no slot
                    if residual is not None:
                        attrs["residual"] = self._buffer(residual)
                        touches.append(Touch(residual, K.conv_pool.RESIDUAL_INPUT))
                    attrs["activation"] = act
                    layout = callee.attrs.get("layout")
                    if layout is not None:  # the conv writes its permuted result
                        attrs["out_layout"] = layout
            else:
                kernel = self._fallback_kernel(call)
            run = self._prepare(kernel, inputs, outs, attrs)
        except LegatoError as err:
            raise ExecutionError(f"{describe_call(step.call, step.where)}: {err}") from None
        # a fused epilogue is named by its GEMM (profiles, errors), as the C call is its
        self.steps.append(_Step(run, call.call, step.where, touches))

    def _decoded(self, step):
        """A custom call as the call it carries (its kernel runs it: this backend's, or
        the fallback's), with the tensor inputs back in their positions; any other step
        as it is."""
        if step.op != CUSTOM_OP:
            return step
        original = decode_custom(step.call, self.registry)
        tensors = iter(step.inputs)
        inputs = tuple(None if v is None else next(tensors) for v in original.inputs)
        return FlatCall(original, inputs, step.outputs, step.where)

    def _pack_constant_weight(self, kernel, call, inputs) -> None:
        """A constant weight is packed for the GEMM micro-kernel once, not every run."""
        index, packed = packed_constant(kernel, call, self._packed, self._constant_view)
        if packed is not None:
            inputs[index] = packed

    def _constant_view(self, value):
        """The data of a value that is a view of a constant (its buffer, planned as a
        reshape of the constant's data), or None."""
        return self._buffer(value) if isinstance(self._roots.get(value), Const) else None

    def _fallback_kernel(self, call):
        backend = self.fallback if self.fallback is not None else self.backend
        if not backend.has_kernel(call.op):
            raise ExecutionError(f"no kernel for {call.op} on {self.backend.name} or its "
                                 "fallback")
        return backend.kernel(call.op)

    @staticmethod
    def _prepare(kernel, inputs, outs, attrs) -> Callable[[], None]:
        if len(outs) == 1:
            return K.bind_generic(kernel, *inputs, out=outs[0], **attrs)
        if hasattr(kernel, "bind_outs"):  # several results, each into its buffer
            return kernel.bind_outs(*inputs, outs=outs, **attrs)

        def run() -> None:
            for out, value in zip(outs, as_tuple(kernel(*inputs, **attrs))):
                np.copyto(out, value)
        return run

    # --- running ----------------------------------------------------------------------

    def run(self, args: tuple, kwargs: dict):
        """One run on the caller's inputs (positional `args`, named `kwargs`)."""
        runtime = self.boundary.enter(bind_inputs(self.fn, args, kwargs))
        for run, indices in self.runs:
            try:
                run()
            except Exception as err:
                failed = getattr(run, "failed", -1)  # a program: which of its calls
                step = self.steps[indices[failed] if failed >= 0 else indices[0]]
                raise ExecutionError(f"{describe_call(step.call, step.where)}: "
                                     f"{type(err).__name__}: {err}") from err
        out = self.boundary.results(runtime)  # the caller owns every result
        return out[0] if len(out) == 1 else tuple(out)

    def profile(self, *args, repeat: int = 20) -> list[tuple[str, float]]:
        """Median microseconds of each step over `repeat` runs: (op, us) in plan order."""
        for buffer, array in zip(self.params, bind_inputs(self.fn, args, {})):
            np.copyto(buffer, array)
        self.boundary.planned()
        times = np.zeros((repeat, len(self.steps)))
        for r in range(repeat):
            for i, step in enumerate(self.steps):
                start = time.perf_counter()
                step.run()
                times[r, i] = time.perf_counter() - start
        medians = np.median(times, axis=0) * 1e6
        return [(step.call.op, float(t)) for step, t in zip(self.steps, medians)]

    def stats(self) -> dict:
        """How the plan came out: steps, steps that are one prepared C call, steps computed
        once at planning (from constants only), bytes of intermediate buffers, inputs read
        in place and results written in place."""
        direct = sum(getattr(step.run, "direct", False) for step in self.steps)
        return {"steps": len(self.steps), "replayed": direct, "computed_once": self.computed_once,
                "merged": sum(len(indices) for _, indices in self.runs if len(indices) > 1),
                "calls": len(self.runs),
                "arena_bytes": self.arena.allocated,
                "inputs_in_place": sum(self.boundary.direct_params),
                "results_in_place": len(self.boundary.fresh)}


class PlannedExecutor(RunnerPool):
    """Run a legalized module with preallocated buffers and prepared kernel calls; safe
    to call from several threads at once: each call runs on a planned instance no other
    call is using (a pool of them, grown on demand)."""

    def __init__(self, module, backend, fallback, fallback_calls, registry, *,
                 merge_steps: bool = True, shared: dict | None = None):
        packed: dict = {} if shared is None else shared
        calls = set(fallback_calls)
        super().__init__(lambda: _PlannedInstance(module, backend, fallback, calls, registry,
                                                  packed, merge_steps))
        self.module, self.backend, self.fallback, self.fn = module, backend, fallback, module.main

    @property
    def steps(self) -> list:
        """The plan's steps: (prepared call, call, where) in run order."""
        return [(step.run, step.call, step.where) for step in self.prototype.steps]

    def profile(self, *args, repeat: int = 20) -> list[tuple[str, float]]:
        """Median microseconds of each step over `repeat` runs: (op, us) in plan order."""
        with self.borrow() as instance:
            return instance.profile(*args, repeat=repeat)

    def stats(self) -> dict:
        """How the plan came out: steps, prepared C calls, bytes of intermediate buffers
        (per instance), and how many instances concurrent calls have needed."""
        return {**self.prototype.stats(), "instances": self.size}


__all__ = ["PlannedExecutor", "make_executor"]
