"""The compile pipeline: what `legato.compile` runs for one backend, as declared passes.

    QDQ folding -> recomposition -> pad folding -> layout -> (constant folding, emitters)
    -> legalization
    -> the backend's own passes (its fusions) -> placement -> plan or emit

Each pass says what must hold before it (`requires`) and what holds after it (`ensures`);
the pass manager checks both, so a pass wired in the wrong place fails at once, naming it.
The passes share one `Lowering` (the backend, its config, its fallback, and the report they
fill in); what comes out is one `Lowered` value, the thing executors and emitters are
handed. A backend contributes passes when it registers (`passes=`): each runs on the legal
module and must leave every call legal, which is checked after it.
"""
from __future__ import annotations

import copy
import functools
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..ir import CALL_OP, Call, Const, Module
from ..ir.builder import GraphBuilder
from ..ir.errors import ExecutionError, LegatoError, PluginError
from ..legalization.backend import Backend
from ..legalization.config import BackendConfig
from ..legalization.loop import call_text, legalize_module
from ..legalization.placement import place, recomposed_sources, runs_on
from ..legalization.report import Report
from ..runtime.buckets import emit_buckets, specialize_buckets
from ..runtime.interpreter import Interpreter
from ..runtime.specialize import ShapeSpecializing, is_symbolic
from .constfold import fold_constants
from .layout import convert_layout
from .manager import ModulePass, PassManager, PassResult
from .pad_fold import FoldPadsPass
from .partition import partition
from .qdq_fold import QDQFoldPass
from .recompose import recompose_for


@dataclass(frozen=True)
class Lowered:
    """A module legalized for a backend, with what running it needs: the report, the
    fallback backend and the calls that run there."""

    module: Module
    report: Report
    backend: Backend
    fallback: Backend | None
    fallback_calls: frozenset
    registry: Any

    def executor_args(self) -> tuple:
        """The arguments of a backend's executor factory, in its order."""
        return self.module, self.backend, self.fallback, self.fallback_calls, self.registry


class Lowering:
    """What the passes of one compile share and fill in."""

    def __init__(self, host, backend: Backend, config: BackendConfig, max_level=None,
                 mode: str = "full"):
        self.host, self.registry, self.backend, self.config = host, host.registry, backend, config
        # "partial" (legato show): calls that cannot be legalized stay, marked failed
        self.max_level, self.mode = max_level, mode
        self.fallback = host.fallback_of(backend) if backend.executes else None
        self.report: Report | None = None  # made by legalization
        self.fallback_calls: set = set()
        self.deferred: set = set()  # calls legalized per binding of the symbolic dims
        self.recovered: Counter = Counter()
        self.qdq = None
        # qnn call -> None when it can run, else why not (default: on `backend`)
        self.runnable = None
        self.before: Counter | None = None  # a partitioned build: main's ops before it
        self.sources = None  # recomposed call -> the calls it replaced
        self.trace: list[tuple[str, str]] = []  # (pass, what it did)
        self.notes: list[str] = []  # what a backend pass says it did
        self.runner = None  # the executor (Plan)
        self.artifact = None  # the emitted code (Emit)
        self.buckets: list = []  # the emitted shape buckets (Emit)

    def lowered(self, module: Module) -> Lowered:
        return Lowered(module, self.report, self.backend, self.fallback,
                       frozenset(self.fallback_calls), self.registry)

    def legalize(self, module: Module):
        """Legalize `module` for the backend (also at run time: deferred calls)."""
        return legalize_module(module, self.registry, self.backend, self.fallback, self.config,
                               self.max_level, self.mode)


class CompilePass(ModulePass):
    """A pass of the compile pipeline: built on the shared `Lowering`."""

    requires: tuple[str, ...] = ()
    ensures: tuple[str, ...] = ()

    def __init__(self, lowering: Lowering):
        self.lowering = lowering


class FoldQDQ(CompilePass):
    """dequantize -> op -> quantize regions become qnn calls on the integers (what
    onnxruntime's int8 kernels compute), where the backend can run them."""

    name, ensures = "qdq-fold", ("qdq-folded",)

    def run(self, module):
        low = self.lowering
        runnable = low.runnable or runnable_on(low.backend, low.config, low.host)
        folding = QDQFoldPass(low.registry, runnable=runnable)
        module, modified = folding(module)
        low.qdq = folding.report
        return PassResult(module, modified)


class Recompose(CompilePass):
    """Composite ops the model spells out in primitives are found again, so that the
    backend can keep those it runs (after QDQ folding: qnn regions are whole by then)."""

    name, requires, ensures = "recompose", ("qdq-folded",), ("recomposed",)

    def run(self, module):
        low = self.lowering
        out, recovery = recompose_for(module, low.backend, low.config.recompose,
                                      low.config.keep, low.registry)
        low.recovered.update(recovery.recovered)
        low.sources = recomposed_sources(module, out)
        return PassResult(out, out is not module)


class Partition(CompilePass):
    """A build over several backends: the regions each backend claims, in list order,
    become external functions with that backend as their codegen; main keeps the rest."""

    name, requires, ensures = "partition", ("recomposed",), ("partitioned",)

    def __init__(self, lowering: Lowering, backends: list[str], config):
        super().__init__(lowering)
        self.backends, self.config = backends, config

    def run(self, module):
        low = self.lowering
        low.before = Counter(c.op for c in module.main.calls)
        out = partition(module, self.backends, self.config, low.registry, context=low.host)
        return PassResult(out, out is not module)


class FoldPads(CompilePass):
    """Pads a convolution does in its own padding (an exporter's Pad before Conv)."""

    name, requires = "fold-pads", ("recomposed",)

    def run(self, module):
        return FoldPadsPass()(module)


class Layout(CompilePass):
    """The backend's data layout (NHWC, ...), after recomposition, so that kept ops reach
    the backend exactly as the user wrote them."""

    name, requires, ensures = "layout", ("recomposed",), ("layout",)

    def run(self, module):
        low = self.lowering
        if not low.backend.layout:
            return PassResult(module, False)
        out = convert_layout(module, low.backend.layout, low.registry, low.config.keep)
        return PassResult(out, out is not module)


class FoldConstants(CompilePass):
    """An emitted artifact holds what constants compute, in any dtype."""

    name, requires = "constant-fold", ("layout",)

    def run(self, module):
        out = fold_constants(module, self.lowering.host, self.lowering.config.keep)
        return PassResult(out, out is not module)


class Legalize(CompilePass):
    """Every call the backend does not run is rewritten, to a fixpoint."""

    name, requires, ensures = "legalize", ("recomposed", "layout"), ("legal",)

    def run(self, module):
        low = self.lowering
        result = low.legalize(module)
        low.report, low.fallback_calls, low.deferred = (result.report, result.fallback_calls,
                                                        result.deferred)
        result.report.recovered.update(low.recovered)
        result.report.qdq = low.qdq
        return PassResult(result.module, result.report.changed)


class BackendPass(CompilePass):
    """A backend's own pass (a fusion), run on the legal module; what it leaves must still
    be legal, which is checked here so that a plugin's mistake names the plugin's pass."""

    requires, ensures = ("legal",), ("legal",)

    def __init__(self, lowering: Lowering, factory):
        super().__init__(lowering)
        self.inner = factory(lowering)
        self.name = f"{lowering.backend.name}.{getattr(self.inner, 'name', type(self.inner).__name__)}"

    def run(self, module):
        try:
            out, modified = self.inner(module)
        except LegatoError:
            raise
        except Exception as err:
            raise PluginError(f"pass {self.name} raised {type(err).__name__}: {err}") from err
        if modified and self.lowering.mode == "full":  # (partial: failed calls stay)
            illegal_call(out, self.lowering, self.name)
        return PassResult(out, modified)


def illegal_call(module: Module, low: Lowering, where: str) -> None:
    """Raise naming the first call the backend does not run (nor its fallback)."""
    for fn in module.functions.values():
        if fn.kind == "external":
            continue
        for call in fn.calls:
            if call.op == CALL_OP or call in low.fallback_calls or call in low.deferred:
                continue  # (deferred: legalized per binding of the symbolic dims)
            why = low.backend.why_not(call)
            if why is not None:
                raise PluginError(f"pass {where} left a call its backend does not run: "
                                  f"{call_text(call)}: {why}")


class Place(CompilePass):
    """Counts per backend and the placement and cost report."""

    name, requires = "place", ("legal",)

    def run(self, module):
        low = self.lowering
        low.report.per_backend = count_per_backend(module, low.backend, low.fallback,
                                                   low.fallback_calls, low.registry)
        low.report.fallback = low.fallback.name if low.fallback is not None else None
        low.report.placement = place(module, low.backend, low.fallback, low.fallback_calls,
                                     low.registry, sources=low.sources)
        return PassResult(module, False)


class Plan(CompilePass):
    """An executing backend's executor, built on the lowered module: once, or, with
    symbolic dims, per binding of the symbols at call time (the weights packed once)."""

    name, requires, ensures = "plan", ("legal",), ("planned",)

    def run(self, module):
        low, be = self.lowering, self.lowering.backend
        factory = be.executor or Interpreter
        pack, shared = getattr(factory, "pack_constants", None), {}
        if pack is not None:  # one packing of each constant weight for every binding's plan
            factory = functools.partial(factory, shared=shared)
        deferred_ops = {c.op for c in low.deferred}

        def plan(module, fallback_calls):
            if low.deferred:  # calls whose decomposition needed the sizes: legalized now
                module = fold_constants(module, low.host, low.config.keep)
                # unless folding took them all (a position-table slice) and no call runs
                # on the fallback (folding may rewrite such calls): the rest is legal
                if fallback_calls or any(c.op in deferred_ops for fn in
                                         module.functions.values() for c in fn.calls):
                    bound = low.legalize(module)
                    module, fallback_calls = bound.module, bound.fallback_calls
                    module = run_backend_passes(module, low, fallback_calls)
            lowered = Lowered(module, low.report, be, low.fallback, frozenset(fallback_calls),
                              low.registry)
            return backend_step(be, "executor", factory, *lowered.executor_args())
        if is_symbolic(module):  # legalized once, planned per binding at call time
            if pack is not None:  # the weights packed now, not in the first call
                backend_step(be, "executor", pack, module, be, low.fallback_calls, shared)
            low.runner = ShapeSpecializing(module, low.fallback_calls, plan, low.registry)
        else:
            low.runner = plan(module, low.fallback_calls)
        return PassResult(module, False)


class Emit(CompilePass):
    """An emitting backend's artifact; with `buckets`, a function per binding of the
    symbolic dims, each legalized for its sizes."""

    name, requires, ensures = "emit", ("legal",), ("emitted",)

    def __init__(self, lowering: Lowering, buckets=None):
        super().__init__(lowering)
        self.buckets = buckets

    def run(self, module):
        low, be = self.lowering, self.lowering.backend
        if be.emitter is None:
            raise LegatoError(f"backend {be.name} neither executes nor emits")
        if self.buckets is None:
            low.artifact = backend_step(be, "emitter", be.emitter, module)
            return PassResult(module, False)

        def finish(module):  # what waited for the sizes
            module = low.legalize(fold_constants(module, low.host, low.config.keep)).module
            return run_backend_passes(module, low, ())
        low.buckets = specialize_buckets(module, self.buckets, low.registry, finish)
        low.notes.append(f"emitted {len(low.buckets)} shape buckets, legalized for their "
                         "sizes: " + ", ".join(b.name for b in low.buckets))
        low.artifact = backend_step(be, "emitter", emit_buckets, be, low.buckets)
        return PassResult(module, False)


def executor_for(lowered: Lowered, **options):
    """The backend's executor (or the reference interpreter) for a lowered module."""
    factory = lowered.backend.executor or Interpreter
    return backend_step(lowered.backend, "executor", factory, *lowered.executor_args(),
                        **options)


class Pipeline(PassManager):
    """The passes of one compile, timed, with what each did recorded in the report."""

    name = "compile"

    def __init__(self, lowering: Lowering, passes):
        super().__init__(passes)
        self.lowering = lowering

    def run(self, module):
        out, modified = super().run(module)
        report = self.lowering.report
        if report is not None:
            report.passes = list(self.lowering.trace)
            report.notes.extend(self.lowering.notes)
        return PassResult(out, modified)

    def run_pass(self, p, module):
        start = time.perf_counter()
        out, modified = p.run(module)
        ms = (time.perf_counter() - start) * 1e3
        self.lowering.trace.append((p.name, f"{'changed' if modified else 'no change'}, "
                                            f"{ms:.1f} ms"))
        return out, modified


def compile_pipeline(lowering: Lowering, buckets=None) -> Pipeline:
    """QDQ folding, recomposition, layout, legalization, the backend's passes, placement,
    and the plan (executing backends) or the artifact (emitting ones)."""
    final = Plan(lowering) if lowering.backend.executes else Emit(lowering, buckets)
    return Pipeline(lowering, [*lowering_passes(lowering), final])


def partition_pipeline(lowering: Lowering, backends: list[str], config) -> Pipeline:
    """A partitioned build's passes up to its regions: QDQ folding (where any of the
    backends runs the qnn call: `lowering.runnable`) and the first backend's recomposition,
    so that a kept composite is claimed whole, then the partition."""
    return Pipeline(lowering, [FoldQDQ(lowering), Recompose(lowering),
                               Partition(lowering, backends, config)])


def lowering_passes(lowering: Lowering) -> list[CompilePass]:
    """The passes up to a legal, placed module, the backend's own passes included."""
    be = lowering.backend
    passes = [FoldQDQ(lowering), Recompose(lowering), FoldPads(lowering), Layout(lowering)]
    if not be.executes:
        passes.append(FoldConstants(lowering))
    passes.append(Legalize(lowering))
    passes += [BackendPass(lowering, factory) for factory in be.passes]
    passes.append(Place(lowering))
    return passes


def run_backend_passes(module: Module, lowering: Lowering, fallback_calls) -> Module:
    """The backend's own passes on a module legalized again for one binding of its
    symbolic dims (calls whose decomposition needed the sizes)."""
    if not lowering.backend.passes:
        return module
    bound = copy.copy(lowering)
    bound.fallback_calls, bound.trace, bound.notes = set(fallback_calls), [], []
    for factory in lowering.backend.passes:
        module, _ = BackendPass(bound, factory)(module)
    return module


def count_per_backend(module: Module, backend: Backend, fallback: Backend | None,
                      fallback_calls, registry) -> dict[str, dict[str, int]]:
    """Backend name -> {op: calls it runs} for a legalized module (external functions,
    which run elsewhere, and calls of module functions are not counted). A custom call
    counts as "custom <op>" under the backend whose kernel for <op> runs it, when the
    backend executes custom calls by decoding them (it has no kernel for CUSTOM_OP)."""
    counts: dict[str, Counter] = {backend.name: Counter()}
    for fn in module.functions.values():
        if fn.kind == "external":
            continue
        for call in fn.calls:
            if call.op == CALL_OP:
                continue
            where, op = runs_on(call, backend, fallback, fallback_calls, registry)
            counts.setdefault(where.name, Counter())[op] += 1
    return {name: dict(c) for name, c in counts.items() if c}


def runnable_on(be: Backend, cfg: BackendConfig, host):
    """`runnable(call)` for the QDQ folding: None when `be` legalizes the qnn call (whole,
    by its integer decomposition or on its fallback), else why not, e.g. an emitter without
    integer convolutions; one trial legalization per op and operand types."""
    seen: dict = {}

    def runnable(call: Call) -> str | None:
        key = (call.op, tuple(None if v is None else (v.type, isinstance(v, Const))
                              for v in call.inputs), repr(sorted(call.attrs.items())))
        if key not in seen:
            b = GraphBuilder(host.registry)
            inputs = [v if v is None or isinstance(v, Const) else b.input(f"x{i}", v.shape,
                                                                         v.dtype)
                      for i, v in enumerate(call.inputs)]
            try:
                legalize_module(b.build(b.call(call.op, *inputs, **call.attrs)),
                                host.registry, be, host.fallback_of(be) if be.executes
                                else None, cfg)
                seen[key] = None
            except LegatoError as err:
                seen[key] = f"{be.name} cannot run {call.op}: {str(err).splitlines()[0]}"
        return seen[key]
    return runnable


def backend_step(be: Backend, what: str, fn, *args):
    """Run a backend's emitter or executor factory; what it raises names the backend."""
    try:
        return fn(*args)
    except LegatoError:
        raise
    except MemoryError as err:
        raise ExecutionError(f"backend {be.name}'s {what} ran out of memory: "
                             f"{first_line(err)}") from err
    except Exception as err:
        raise PluginError(f"backend {be.name}'s {what} raised {type(err).__name__}: "
                          f"{first_line(err)}") from err


def first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""
