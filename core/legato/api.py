"""The public API: legalize, compile, and the registry and backend look-ups.

Each function works on a context (the registry and the backends): the one passed as
`context=`, else the process-wide `legato.context()`."""
from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from .frontends.examples import example
from .frontends.onnx import load as load_onnx
from .ir import CALL_OP, CUSTOM_OP, Call, Function, Module
from .ir.errors import ExecutionError, LegatoError, PluginError, quote
from .ir.symbols import symbolic_dims
from .ir.text import parse
from .ir.verify import verify
from .legalization.backend import Backend
from .legalization.capability import parse_capability
from .legalization.config import BackendConfig, load_config
from .legalization.loop import LegalizeResult, legalize_module
from .legalization.placement import place
from .legalization.report import Report
from .passes.constfold import fold_constants
from .passes.pipeline import (Lowered, Lowering, compile_pipeline, count_per_backend,
                              executor_for, first_line, partition_pipeline, runnable_on)
from .plugins.context import Context, context as current_context
from .runtime.buckets import guarded, plan_buckets
from .runtime.interpreter import Interpreter
from .runtime.specialize import ShapeSpecializing, is_symbolic


def list_backends() -> list[str]:
    """Names of the installed (and in-process registered) backends."""
    return sorted(current_context().backends)


def get_backend(name: str) -> Backend:
    return current_context().backend(name)


def plugin_problems() -> list[tuple[str, str]]:
    """(plugin, message) for every plugin that failed to load or register."""
    return list(current_context().problems)


def list_ops() -> list[str]:
    return current_context().registry.names()


def get_op(name: str):
    """The OpDef of `name`: .level, .kind, .inputs, .attr_specs, .decompose, .signature()."""
    return current_context().registry.get(name)


def register_backend(capability, kernels=None, executor=None, emitter=None,
                     replace: bool = False, passes=()) -> Backend:
    """Register a backend in-process from a capability dict or YAML path; errors raise.
    `passes`: the backend's own passes (factories `lowering -> pass`), run on the legal
    module by compile."""
    host = current_context()
    backend = parse_capability(capability, host.registry, kernels=kernels, executor=executor,
                               emitter=emitter, passes=passes, plugin="in-process")
    return host.add_backend(backend, replace=replace)


def unregister_backend(name: str) -> None:
    if not isinstance(name, str):
        raise PluginError(f"a backend name is a string, got {quote(name)}")
    current_context().backends.pop(name, None)


def load_model(model, *, context: Context | None = None,
               input_shapes: Mapping | None = None) -> Module:
    """A Module from a Module, `example:<name>`, a text-form file or an .onnx file.
    `input_shapes` binds an ONNX file's symbolic dimensions (`{"batch": 1}`, or a whole
    input's shape by its name), as `legato.frontends.onnx.load` takes them."""
    if input_shapes and not (isinstance(model, (str, Path)) and Path(model).suffix == ".onnx"):
        raise LegatoError("input_shapes binds the symbolic dimensions of an .onnx file; "
                          f"{_model_label(model)} has none to bind")
    if isinstance(model, Module):
        return model
    if not isinstance(model, (str, Path)):
        raise LegatoError(f"a model is a legato.Module, 'example:<name>' or a file path, "
                          f"got {type(model).__name__}")
    if isinstance(model, str) and model.startswith("example:"):
        return example(model)
    path = Path(model)
    if path.suffix == ".onnx":
        return load_onnx(path, input_shapes, registry=(context or current_context()).registry)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise LegatoError(f"cannot read model {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise LegatoError(f"model {path} is not UTF-8 text (byte {err.start}); the text form "
                          "is UTF-8 and ONNX files end in .onnx") from None
    try:
        return parse(text, (context or current_context()).registry)
    except LegatoError as err:
        raise type(err)(f"{path}: {err}") from None


def _require_concrete(module: Module, what: str) -> None:
    """Symbolic dims run on executing backends, planned per binding; elsewhere they must be
    bound first."""
    if is_symbolic(module):
        free = symbolic_dims(module.main.params)
        raise LegatoError(f"{what} needs concrete shapes, and the model's dimensions "
                          f"{', '.join(free)} are symbolic: bind them with input_shapes="
                          f"{{{', '.join(repr(f) + ': ...' for f in free)}}} (--shape "
                          f"{free[0]}=SIZE), or emit a function per size with "
                          f"shape_buckets={{{free[0]!r}: [...]}} (--shape {free[0]}=SIZE,SIZE)")


def _model_label(model) -> str:
    if isinstance(model, Module):
        return "a legato.Module"
    return f"model {str(model)[:80]!r}" if isinstance(model, (str, Path)) else type(model).__name__


def legalize(module, backend: str | Backend | None = None, config=None,
             max_level: int | None = None, mode: str = "full", *,
             context: Context | None = None) -> LegalizeResult:
    """Rewrite `module` until `backend` runs every call; returns (module, report). With
    no backend, decompose only ops above `max_level`."""
    host = context or current_context()
    module = load_model(module, context=host)
    _check_max_level(max_level)
    be = _backend(host, backend) if backend is not None else None
    cfg = load_config(config, be.name if be else None, host.registry, host.backends)
    fallback = host.fallback_of(be) if be is not None and be.executes else None
    return legalize_module(module, host.registry, be, fallback, cfg, max_level, mode)


class Compiled:
    """A compiled model: call it to run (executing backends), or read `artifact`."""

    def __init__(self, module: Module, report: Report, backend: Backend, runner=None,
                 artifact: Any = None, source: Module | None = None, fallback_calls=()):
        self.module, self.report, self.backend = module, report, backend
        self.artifact, self.source = artifact, source
        self.fallback_calls = frozenset(fallback_calls)  # calls that run on the fallback
        self.callees: dict = {}  # partitioned: external function name -> its Compiled
        self.targets = (backend.name,)  # the backends asked for, first choice first
        self.buckets: list = []  # shape buckets: the emitted functions (legato.runtime.buckets)
        self.fallback: Backend | None = None  # where fallback_calls run
        self._runner = runner
        # a plugin's executor that does not say it is thread-safe gets one call at a time
        self._lock = None if getattr(runner, "thread_safe", False) else threading.Lock()

    def __call__(self, *inputs, **named):
        if self._runner is None:
            raise LegatoError(f"backend {self.backend.name} emits code and does not execute; "
                              "read .artifact")
        try:
            if self._lock is None:
                return self._runner(*inputs, **named)
            with self._lock:
                return self._runner(*inputs, **named)
        except LegatoError:
            raise
        except Exception as err:  # e.g. inputs numpy cannot turn into arrays
            raise ExecutionError(f"running the model compiled for {self.backend.name} "
                                 f"failed: {type(err).__name__}: {first_line(err)}") from err

    @property
    def plan_stats(self) -> dict | None:
        """A model with symbolic dims on an executing backend is planned per binding of
        its symbols at call time: its plan cache's hits, misses and seconds spent planning
        (`plan_s`). None for a model of fixed sizes (planned once, at compile time)."""
        if not isinstance(self._runner, ShapeSpecializing):
            return None
        return dict(self._runner.stats)

    def __repr__(self):
        return f"Compiled({self.backend.name}: {self.report.summary()})"


def compile(model, backend: str | Backend | Sequence = "cpu_ref", config=None,
            max_level: int | None = None, *, context: Context | None = None,
            input_shapes: Mapping | None = None,
            shape_buckets: Mapping | None = None) -> Compiled:
    """Legalize `model` for `backend` and build its executor (or emit its artifact).

    With a list of backends the model is partitioned first (`legato.partition`): each
    region runs on its backend, and the report counts ops per backend. `input_shapes`
    binds the symbolic dimensions of an .onnx file (`{"batch": 1, "seq": 128}`).
    `shape_buckets` (emitting backends) writes one function per binding of the symbolic
    dims, every combination of the sizes given (`{"seq": [64, 128, 256]}`: `main_seq64`,
    ...; legato.runtime.buckets)."""
    host = context or current_context()
    source = verify(load_model(model, context=host, input_shapes=input_shapes), host.registry)
    _check_max_level(max_level)
    if isinstance(backend, (list, tuple)):
        if shape_buckets is not None:
            raise LegatoError("shape_buckets are functions of one emitting backend's artifact, "
                              "not of a partitioned build")
        _require_concrete(source, "a partitioned build")
        if not backend:
            raise LegatoError("compile needs at least one backend, got an empty list")
        for item in backend:
            _backend(host, item)
        return _compile_multi(host, source, list(backend), config, max_level)
    be = _backend(host, backend)
    if shape_buckets is not None:
        if be.executes:
            raise LegatoError(f"shape_buckets are functions of an emitted artifact; backend "
                              f"{be.name} executes, and runs any size the inputs have")
        plans = plan_buckets(source, shape_buckets)
        with guarded(plans):
            return _compile_one(host, source, be, config, max_level, plans)
    if not be.executes:
        _require_concrete(source, f"backend {be.name}, which emits code,")
    if is_symbolic(source):
        try:
            return _compile_one(host, source, be, config, max_level)
        except LegatoError as err:  # some rule needs sizes: legalize per binding instead
            return _compile_per_binding(host, source, be, config, max_level, err)
    return _compile_one(host, source, be, config, max_level)


def _compile_per_binding(host: Context, source: Module, be: Backend, config, max_level,
                         why: LegatoError) -> Compiled:
    """A model with symbolic dims whose compile needs sizes somewhere (a decomposition
    that builds constants of the input's size): each binding of the symbols met at run
    time is compiled whole, from the source made concrete, and kept."""
    keep = load_config(config, be.name, host.registry, host.backends).keep

    def plan(module, _fallback_calls):
        # what the import could not fold while the sizes were symbols (a slice of a
        # position table by the sequence length) is constant once they are bound
        module = fold_constants(module, host, keep)
        return _compile_one(host, module, be, config, max_level)._runner
    report = Report(be.name, "full")
    report.notes.append(f"compiled per binding of the symbolic dims at run time, since "
                        f"compiling over them failed: {first_line(why)}")
    return Compiled(source, report, be, ShapeSpecializing(source, (), plan, host.registry),
                    None, source)


def _compile_one(host: Context, source: Module, be: Backend, config, max_level,
                 buckets=None) -> Compiled:
    """compile() for one backend, through its pass pipeline; `buckets`: the bindings an
    emitter writes a function for."""
    lowering = Lowering(host, be, load_config(config, be.name, host.registry, host.backends),
                        max_level)
    module, _ = compile_pipeline(lowering, buckets)(source)
    compiled = Compiled(module, lowering.report, be, lowering.runner, lowering.artifact,
                        source, lowering.fallback_calls)
    compiled.fallback, compiled.buckets = lowering.fallback, lowering.buckets
    return compiled


def with_every_result(compiled: Compiled, *, context: Context | None = None) -> Compiled:
    """`compiled` rebuilt so that main returns every call's outputs, in call order: for locating where a backend's results first differ from the reference.
    The legalized calls are reused as they are (same decisions, same fallback calls)."""
    host = context or current_context()
    main = compiled.module.main
    produced = tuple(v for call in main.calls for v in call.outputs)
    module = Module({**compiled.module.functions,
                     "main": Function(main.params, main.calls, produced, main.kind,
                                      main.attrs)})
    be = compiled.backend
    if not be.executes:
        raise LegatoError(f"backend {be.name} emits code; there is nothing to run")
    if compiled.callees:  # partitioned: main calls the regions compiled for their backends
        runner = Interpreter(module, be, host.fallback_of(be), compiled.fallback_calls,
                             host.registry, callees=compiled.callees)
    else:
        runner = executor_for(Lowered(module, compiled.report, be, host.fallback_of(be),
                                      compiled.fallback_calls, host.registry))
    probe = Compiled(module, compiled.report, be, runner, None, compiled.source,
                     compiled.fallback_calls)
    probe.callees = compiled.callees
    return probe


def _compile_multi(host: Context, source: Module, backends: list, config,
                   max_level) -> Compiled:
    """Partition, compile each external function on its backend, and run main (what no
    backend claimed, legalized for the last backend) with those as callees.

    The flow is the single-backend one: QDQ regions fold where some backend runs the qnn
    call, and the first backend's recomposition (its legal composite ops and its config's
    `keep`) runs before partitioning, so a kept attention is claimed whole; each region
    then compiles as `compile(region, backend)` does, recomposing what that backend takes
    within the region (a later backend never takes over calls an earlier one runs)."""
    members = [host.backend(name) for name in backends]
    backends = [be.name for be in members]  # (Backend objects may be passed)
    configs = [load_config(config, be.name, host.registry, host.backends) for be in members]
    lowering = Lowering(host, members[0], configs[0], max_level)
    lowering.runnable = _runnable_on_any(members, configs, host)
    parted, _ = partition_pipeline(lowering, backends, config)(source)
    callees, per_backend = {}, {}
    for name, fn in parted.functions.items():
        if fn.kind != "external":
            continue
        codegen = fn.attrs["codegen"]
        region = Module({"main": Function(fn.params, fn.calls, fn.results)})
        callees[name] = compile(region, codegen, config, max_level, context=host)
        for where, counts in callees[name].report.per_backend.items():
            per_backend.setdefault(where, Counter()).update(counts)
    main_backend = members[-1]
    rest = legalize(parted, main_backend, config=config, max_level=max_level, context=host)
    report = rest.report
    report.drop(CALL_OP)  # the region calls: their calls are counted from their reports
    report.before = lowering.before
    for callee in callees.values():
        report.merge(callee.report)
    report.targets = tuple(backends)
    report.recovered.update(lowering.recovered)
    report.qdq = lowering.qdq
    report.passes = lowering.trace + report.passes
    fallback = host.fallback_of(main_backend)
    rest_counts = count_per_backend(rest.module, main_backend, fallback,
                                    rest.fallback_calls, host.registry)
    for name, counts in rest_counts.items():
        per_backend.setdefault(name, Counter()).update(counts)
    report.per_backend = {name: dict(c) for name, c in per_backend.items()}
    report.fallback = fallback.name if fallback is not None else None
    try:
        runner = Interpreter(rest.module, main_backend, fallback,
                             rest.fallback_calls, host.registry, callees=callees)
    except ExecutionError as err:
        if main_backend.executes:
            raise
        leftover = sorted({c.op for c in rest.module.main.calls if c.op != CALL_OP})
        raise LegatoError(
            f"a partitioned build runs the calls no region claims ({', '.join(leftover)}) "
            f"on its last backend, and {main_backend.name} emits code: end the list with "
            "an executing backend, e.g. " + ",".join(backends + ["cpu_ref"])) from err
    compiled = Compiled(rest.module, report, main_backend, runner, None, source,
                        rest.fallback_calls)
    compiled.callees, compiled.fallback = callees, fallback
    compiled.targets = tuple(backends)
    report.placement = place(rest.module, main_backend, fallback, rest.fallback_calls,
                             host.registry, callees, compiled.targets, lowering.sources)
    return compiled


def _runnable_on_any(members: list[Backend], configs: list[BackendConfig], host: Context):
    """`runnable(call)` for the QDQ folding of a partitioned build: None when one of the
    backends legalizes the qnn call, else each backend's reason."""
    trials = [runnable_on(be, cfg, host) for be, cfg in zip(members, configs)]

    def runnable(call: Call) -> str | None:
        reasons = []
        for trial in trials:
            reason = trial(call)
            if reason is None:
                return None
            reasons.append(reason)
        return "; ".join(reasons)
    return runnable


def _backend(host, backend) -> Backend:
    if not isinstance(backend, (str, Backend)):
        raise LegatoError(f"a backend is a name or a legato Backend, got "
                          f"{type(backend).__name__}")
    return host.backend(backend)


def _check_max_level(max_level) -> None:
    if max_level is not None and (isinstance(max_level, bool) or
                                  not isinstance(max_level, int) or max_level < 0):
        # (below 0 even the primitives would have to decompose, and they cannot)
        raise LegatoError(f"max_level must be an int >= 0 or None, got {max_level!r:.40}")


def reference(model, *, context: Context | None = None) -> Interpreter:
    """Run a module with cpu_ref's kernel for every op it has one for (the ground truth);
    the ops it has none for (a plugin's) are legalized for it first."""
    host = context or current_context()
    be = host.backend("cpu_ref")
    module = load_model(model, context=host)
    missing = {c.op for fn in module.functions.values() for c in fn.calls
               if c.op not in (CALL_OP, CUSTOM_OP) and not be.has_kernel(c.op)}
    if not missing:
        return Interpreter(module, be, None, (), host.registry)
    keep = frozenset(op for op in host.registry.names() if be.has_kernel(op))
    result = legalize_module(module, host.registry, be, None,
                             BackendConfig(keep=keep, source="reference"))
    return Interpreter(result.module, be, None, result.fallback_calls, host.registry)
