"""The planned executor of the c_kernels backend.

Planning happens once: every value gets a buffer (reused by liveness, in place for
elementwise ops whose input dies there, a view for reshape), kernels are bound to those
buffers, `nn.linear`/`matmul` absorb a following activation into the GEMM epilogue, and
each C kernel is run once under `kernels.recording()`: when that was a single C call on
the planned buffers, the step replays it directly. A run is then a copy of the inputs
into their buffers and a flat loop of prepared calls.

A planned instance owns its buffers, so `PlannedExecutor` keeps a pool of them: each call
runs on an instance no other call is using, and concurrent calls from several threads run
in parallel (the C calls release the GIL). Constant weights are packed once for all.
"""
from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from legato.errors import ExecutionError, LegatoError
from legato.executor import Interpreter, as_tuple, bind_inputs, describe_call
from legato.ir import Call, Const, Value
from legato.verify import CALL_OP

from . import kernels as K
from ._lib import ffi
from .pool import RunnerPool

INPLACE_OPS = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
               "negative", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
               "nn.relu", "nn.gelu", "nn.silu", "nn.softmax", "nn.log_softmax",
               "nn.layer_norm", "nn.rms_norm"}
EPILOGUES = {"nn.relu": "relu", "nn.silu": "silu"}


def make_executor(module, backend, fallback, fallback_calls, registry):
    """The backend's executor factory: planned for a flat main, else the interpreter."""
    if len(module.functions) > 1 or any(c.op == CALL_OP for c in module.main.calls):
        return Interpreter(module, backend, fallback, fallback_calls, registry)
    return PlannedExecutor(module, backend, fallback, fallback_calls, registry)


def _is_view(call: Call) -> bool:
    """reshape of a planned buffer: a view of that buffer, no step at all."""
    return call.op == "reshape" and not isinstance(call.inputs[0], Const)


def _epilogue(call: Call) -> str | None:
    if call.op == "nn.gelu":
        return "gelu" if call.attrs["approximate"] == "none" else "gelu_tanh"
    return EPILOGUES.get(call.op)


def _owner(array: np.ndarray) -> np.ndarray:
    """The array that owns a planned buffer's memory (planned views are whole-buffer
    reshapes, so the owner and the view cover the same bytes)."""
    return array if array.base is None else array.base


def _plain(array: Any) -> Any:
    """A packed weight as the array holding its floats; anything else unchanged."""
    return array.data if isinstance(array, K.PackedWeight) else array


class _Arena:
    """Buffers by liveness: a released buffer serves a later value of the same size."""

    def __init__(self):
        self.free: dict[tuple[int, str], list[np.ndarray]] = {}
        self.allocated = 0

    def take(self, value: Value) -> np.ndarray:
        key = (value.type.size, value.dtype)
        pool = self.free.get(key)
        if pool:
            return pool.pop().reshape(value.shape)
        self.allocated += value.type.size * np.dtype(value.dtype).itemsize
        return np.zeros(value.shape, value.dtype)  # zeros: planning runs kernels on them

    def give(self, buffer: np.ndarray) -> None:
        self.free.setdefault((buffer.size, buffer.dtype.name), []).append(buffer)


def _float_address(arg) -> int | None:
    """The address a cffi float pointer/array argument points at (None for others)."""
    if isinstance(arg, ffi.CData):
        ctype = ffi.typeof(arg)
        if ctype.kind in ("pointer", "array") and ctype.item.cname == "float":
            return int(ffi.cast("uintptr_t", arg))
    return None


class _Replay:
    """A recorded C call made again each run; pointers into the per-run input and result
    arrays are patched in (`find_patches`)."""

    __slots__ = ("fn", "args", "name", "patches")

    def __init__(self, fn, args, name: str):
        self.fn, self.args, self.name, self.patches = fn, tuple(args), name, ()

    def find_patches(self, dynamic: list[np.ndarray]) -> None:
        patches = []
        for position, arg in enumerate(self.args):
            address = _float_address(arg)
            for index, buffer in enumerate(dynamic):
                start = buffer.ctypes.data
                if address is not None and start <= address < start + max(buffer.nbytes, 1):
                    patches.append((position, index, (address - start) // 4))  # in floats
        self.patches = tuple(patches)

    def __call__(self, pointers) -> None:
        args = self.args
        if self.patches:
            args = list(args)
            for position, index, offset in self.patches:
                args[position] = pointers[index] + offset
        status = self.fn(*args)
        if status:
            K._check_status(self.name, status)


class _Closure:
    """A Python-level step (fallback kernels, calls that could not be recorded)."""

    __slots__ = ("run", "arrays")

    def __init__(self, run, arrays):
        self.run, self.arrays = run, [_plain(a) for a in arrays]

    def __call__(self, pointers) -> None:
        self.run()


class _PlannedInstance:
    """One planned copy of a flat module: its own buffers and prepared kernel calls.
    Not for concurrent use (PlannedExecutor gives each call its own instance)."""

    def __init__(self, module, backend, fallback, fallback_calls, packed: dict):
        self.module, self.backend, self.fallback = module, backend, fallback
        self.fallback_calls = fallback_calls
        self._packed = packed  # (weight, transposed) -> PackedWeight, shared by instances
        fn = module.main
        self.fn = fn
        self.arena = _Arena()
        self.buffers: dict[Value, np.ndarray] = {}
        self.params = [self._own(p) for p in fn.params]
        self.steps: list = []
        self._result_buffers: set[int] = set()  # buffers planned for results, written by steps
        self.replayed = 0
        self._plan(fn.calls)
        self.results = [self._buffer(r) for r in fn.results]
        self._spares: list = [None] * len(self.results)
        self._bind_io()

    # --- buffers ----------------------------------------------------------------------

    def _own(self, value: Value) -> np.ndarray:
        self.buffers[value] = np.zeros(value.shape, value.dtype)
        return self.buffers[value]

    def _buffer(self, value: Value | None):
        if value is None:
            return None
        if isinstance(value, Const):
            return value.data
        return self.buffers[value]

    def _plan(self, calls) -> None:
        roots = self._view_roots(calls)
        last_use = self._last_uses(calls, roots)
        pinned = {roots.get(v, v) for v in (*self.fn.params, *self.fn.results)}
        index = 0
        while index < len(calls):
            call = calls[index]
            bias, act, absorbed = self._epilogue_chain(calls, index, last_use)
            out_call = calls[index + absorbed]
            span = range(index, index + absorbed + 1)
            readers = [v for c in calls[index:index + absorbed + 1] for v in c.inputs]
            dying = [r for r in {roots.get(v, v) for v in readers if v is not None}
                     if r in self.buffers and r not in pinned and last_use.get(r) in span]
            self._assign_outputs(call, out_call, dying, roots)
            self._bind(call, out_call, bias, act, index)
            for root in dying:  # what was not reused in place goes back to the arena
                self.arena.give(self.buffers[root])
            index += absorbed + 1

    @staticmethod
    def _view_roots(calls) -> dict[Value, Value]:
        """reshape results are views: value -> the value that owns the buffer."""
        roots: dict[Value, Value] = {}
        for call in calls:
            if _is_view(call):
                roots[call.output] = roots.get(call.inputs[0], call.inputs[0])
        return roots

    @staticmethod
    def _last_uses(calls, roots) -> dict[Value, int]:
        """Index of the last call reading each buffer owner (through any of its views)."""
        last: dict[Value, int] = {}
        for index, call in enumerate(calls):
            for v in call.inputs:
                if v is not None and not isinstance(v, Const):
                    last[roots.get(v, v)] = index
        return last

    def _epilogue_chain(self, calls, index, last_use) -> tuple[Value | None, str | None, int]:
        """(bias, activation, calls absorbed) a linear/matmul can apply in its GEMM epilogue:
        a following add of a per-column bias, then an activation, each the only reader of
        the value before it."""
        call = calls[index]
        if call.op not in ("nn.linear", "matmul") or not self._native(call) or \
                (call.op == "matmul" and (call.inputs[1].rank != 2 or call.inputs[0].rank < 2)):
            return None, None, 0
        bias, act, product, used = None, None, call.output, 0

        def sole_reader(position):
            nxt = calls[position] if position < len(calls) else None
            ok = nxt is not None and self._native(nxt) and product not in self.fn.results \
                and last_use.get(product) == position
            return nxt if ok else None

        nxt = sole_reader(index + 1)
        if call.op == "matmul" and nxt is not None and nxt.op == "add":
            other = nxt.inputs[1] if nxt.inputs[0] is product else nxt.inputs[0]
            n = product.shape[-1]
            if product in nxt.inputs and other is not product and other.shape in ((n,), (1, n)) \
                    and nxt.output.type == product.type:
                bias, product, used = other, nxt.output, 1
                nxt = sole_reader(index + 2)
        if nxt is not None and nxt.inputs[0] is product and _epilogue(nxt) is not None:
            act, used = _epilogue(nxt), used + 1
        return bias, act, used

    def _assign_outputs(self, call: Call, out_call: Call, dying: list, roots) -> None:
        if _is_view(call):
            self.buffers[call.output] = self.buffers[call.inputs[0]].reshape(call.output.shape)
            if roots[call.output] in dying:
                dying.remove(roots[call.output])  # the view keeps its owner's buffer alive
            return
        for out in out_call.outputs:
            reuse = next((r for r in dying if call is out_call and call.op in INPLACE_OPS and
                          r.type.size == out.type.size and r.dtype == out.dtype), None)
            if reuse is not None:  # in place: the kernel may write over its dying input
                dying.remove(reuse)
                self.buffers[out] = self.buffers[reuse].reshape(out.shape)
            elif out in self.fn.results:
                self.buffers[out] = np.zeros(out.shape, out.dtype)
                self._result_buffers.add(id(self.buffers[out]))
            else:
                self.buffers[out] = self.arena.take(out)

    # --- steps ------------------------------------------------------------------------

    def _native(self, call: Call) -> bool:
        return call not in self.fallback_calls and self.backend.has_kernel(call.op) and \
            call.op != "reshape"

    def _bind(self, call: Call, out_call: Call, bias, act, index: int) -> None:
        where = f"@main call {index}"
        if _is_view(call):
            return  # a view, planned in _assign_outputs
        inputs = [self._buffer(v) for v in call.inputs]
        outs = [self.buffers[o] for o in out_call.outputs]
        attrs = dict(call.attrs)
        if self._native(call) and call.op in ("matmul", "nn.linear") and \
                isinstance(call.inputs[1], Const) and call.inputs[1].rank == 2:
            # a constant weight is packed for the GEMM micro-kernel once, not every run
            inputs[1] = self._pack(call.inputs[1], call.op == "nn.linear")
        if out_call is not call:  # a GEMM with its epilogue
            kernel = K.fused_linear if call.op == "nn.linear" else K.fused_matmul
            if bias is not None:
                attrs["bias"] = self._buffer(bias).reshape(-1)
            attrs["activation"] = act or "none"
        elif self._native(call):
            kernel = self.backend.kernel(call.op)
        else:
            if any(out.size for out in outs):
                self.steps.append((self._fallback_step(call, inputs, outs), call, where))
            return
        try:
            step = self._prepare(kernel, inputs, outs[0], attrs)
        except LegatoError as err:
            raise ExecutionError(f"{describe_call(call, where)}: {err}") from None
        if outs[0].size:  # an empty result has nothing to compute on any run
            self.steps.append((step, call, where))

    def _pack(self, weight: Const, transposed: bool) -> K.PackedWeight:
        key = (weight, transposed)
        packed = self._packed.get(key)
        if packed is None:
            packed = self._packed[key] = K.pack_weight(weight.data, transposed=transposed)
        return packed

    def _prepare(self, kernel, inputs, out, attrs):
        """A step: the recorded C call when that is safe to replay, else the kernel call."""
        with K.recording() as calls:
            kernel(*inputs, out=out, **attrs)
        arrays = [_plain(a) for a in inputs] + [out] + \
            [a for a in attrs.values() if isinstance(a, np.ndarray)]
        if len(calls) == 1 and self._static(calls[0][1], arrays):
            self.replayed += 1
            return _Replay(*calls[0], getattr(kernel, "__name__", "c_kernels"))
        return _Closure(lambda: kernel(*inputs, out=out, **attrs), inputs + [out])

    @staticmethod
    def _static(args, arrays) -> bool:
        """Every float pointer argument points into one of the planned arrays."""
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays if a is not None]
        for arg in args:
            address = _float_address(arg)
            if address is not None and not any(lo <= address < hi or lo == hi == address
                                               for lo, hi in spans):
                return False
        return True

    def _fallback_step(self, call: Call, inputs, outs):
        backend = self.fallback if self.fallback is not None else self.backend
        if not backend.has_kernel(call.op):
            raise ExecutionError(f"no kernel for {call.op} on {self.backend.name} or its "
                                 "fallback")
        kernel, attrs = backend.kernel(call.op), dict(call.attrs)

        def step():
            result = kernel(*inputs, **attrs)
            for out, value in zip(outs, as_tuple(result)):
                np.copyto(out, value)
        return _Closure(step, inputs + outs)

    # --- running ----------------------------------------------------------------------

    def _bind_io(self) -> None:
        """Decide which inputs and results bypass their planned buffers: a buffer only
        replayed C calls touch is re-pointed each run (to the caller's input array, or to
        a fresh result array) instead of copied. Every other result is copied out at the
        end of a run: from this run's array where its buffer was re-pointed (a reshape of
        a returned value, a value returned twice, a returned input), else from its
        planned buffer."""
        closures = [step for step, _, _ in self.steps if isinstance(step, _Closure)]
        touched = {id(_owner(a)) for c in closures for a in c.arrays if a is not None}

        def bindable(buffer):
            return buffer.base is None and id(buffer) not in touched

        self.direct_params = [bindable(b) for b in self.params]
        dynamic = [b for b, d in zip(self.params, self.direct_params) if d]
        self.direct_results = []
        for buffer in self.results:
            fresh = bindable(buffer) and id(buffer) in self._result_buffers and \
                not any(buffer is d for d in dynamic)  # one result array per buffer
            self.direct_results.append(fresh)
            if fresh:
                dynamic.append(buffer)
        self.copies = []  # per result: None (a fresh array), else (run-time index, planned)
        for buffer, fresh in zip(self.results, self.direct_results):
            owner = _owner(buffer)
            index = next((i for i, d in enumerate(dynamic) if d is owner), None)
            self.copies.append(None if fresh else (index, buffer))
        self._fresh_positions = tuple(j for j, d in enumerate(self.direct_results) if d)
        self._all_fresh = all(self.direct_results)
        for step, _, _ in self.steps:
            if isinstance(step, _Replay):
                step.find_patches(dynamic)

    def _fresh_result(self, index: int) -> np.ndarray:
        """A result array for this run: last run's, if the caller has let go of it (no
        page faults on a warm array), else a new one."""
        spare = self._spares[index]
        if spare is None or sys.getrefcount(spare) > 3:  # ours, the list's, the argument's
            spare = self._spares[index] = np.empty(self.results[index].shape,
                                                   self.results[index].dtype)
        return spare

    def run(self, args: tuple, kwargs: dict):
        """One run on the caller's inputs (positional `args`, named `kwargs`)."""
        bases = []
        for buffer, array, direct in zip(self.params, bind_inputs(self.fn, args, kwargs),
                                         self.direct_params):
            if direct:
                flags = array.flags
                bases.append(array if flags.c_contiguous and flags.aligned else
                             np.ascontiguousarray(array))
            else:
                np.copyto(buffer, array)
        fresh = [self._fresh_result(j) for j in self._fresh_positions]
        bases += fresh
        pointers = [ffi.from_buffer("float[]", b) for b in bases]  # keep bases alive
        for step, call, where in self.steps:
            try:
                step(pointers)
            except Exception as err:
                raise ExecutionError(f"{describe_call(call, where)}: {type(err).__name__}: "
                                     f"{err}") from err
        out = fresh if self._all_fresh else self._gather(fresh, bases)
        return out[0] if len(out) == 1 else tuple(out)

    def _gather(self, fresh: list, bases: list) -> list:
        """The results in order: this run's fresh arrays, and copies for the others."""
        arrays = iter(fresh)
        return [next(arrays) if copy is None else _copy_out(copy, bases)
                for copy in self.copies]

    def profile(self, *args, repeat: int = 20) -> list[tuple[str, float]]:
        """Median microseconds of each step over `repeat` runs: (op, us) in plan order."""
        for buffer, array in zip(self.params, bind_inputs(self.fn, args, {})):
            np.copyto(buffer, array)
        planned = [ffi.from_buffer("float[]", b) for b, d in
                   zip(self.params + self.results, self.direct_params + self.direct_results)
                   if d]
        times = np.zeros((repeat, len(self.steps)))
        for r in range(repeat):
            for i, (step, _, _) in enumerate(self.steps):
                start = time.perf_counter()
                step(planned)
                times[r, i] = time.perf_counter() - start
        medians = np.median(times, axis=0) * 1e6
        return [(call.op, float(t)) for (_, call, _), t in zip(self.steps, medians)]

    def stats(self) -> dict:
        """How the plan came out: steps, replayed C calls, bytes of intermediate buffers."""
        return {"steps": len(self.steps), "replayed": self.replayed,
                "arena_bytes": self.arena.allocated}


def _copy_out(copy: tuple, bases: list) -> np.ndarray:
    """A result the caller owns: a copy of this run's array (in the result's shape) or
    of the planned buffer."""
    index, planned = copy
    source = planned if index is None else bases[index].reshape(planned.shape)
    return np.array(source, copy=True)


class PlannedExecutor(RunnerPool):
    """Run a legalized flat module with preallocated buffers and prepared kernel calls;
    safe to call from several threads at once: each call runs on a planned instance no
    other call is using (a pool of them, grown on demand)."""

    def __init__(self, module, backend, fallback, fallback_calls, registry):
        packed: dict = {}
        calls = set(fallback_calls)
        super().__init__(lambda: _PlannedInstance(module, backend, fallback, calls, packed))
        self.module, self.backend, self.fallback, self.fn = module, backend, fallback, module.main

    @property
    def steps(self) -> list:
        """The plan's steps: (step, call, where) in run order."""
        return self.prototype.steps

    def profile(self, *args, repeat: int = 20) -> list[tuple[str, float]]:
        """Median microseconds of each step over `repeat` runs: (op, us) in plan order."""
        with self.borrow() as instance:
            return instance.profile(*args, repeat=repeat)

    def stats(self) -> dict:
        """How the plan came out: steps, replayed C calls, bytes of intermediate buffers
        (per instance), and how many instances concurrent calls have needed."""
        return {**self.prototype.stats(), "instances": self.size}


__all__ = ["PlannedExecutor", "make_executor"]
