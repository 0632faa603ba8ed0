"""Pass infrastructure: module passes and function passes return a `PassResult`, a
(module, modified) pair, so `module, modified = p(module)` reads either way.

A pass may declare what must hold before it runs (`requires`) and what holds after it
(`ensures`), as names such as "legal"; a PassManager checks the order of its passes
against them when it is built, so a pass wired in the wrong place fails before anything
runs, naming the pass and what it lacks.

Function passes never see `external` functions (a backend has claimed them) and see
`primitive` functions (fusion results) only when they say so with
`enters_primitive = True`. The verifier and printer are not passes: they see everything.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from ..ir import Function, Module
from ..ir.errors import LegatoError


class PassResult(NamedTuple):
    """What a pass returns: the new module and whether it differs from the input."""

    module: Module
    modified: bool


class ModulePass:
    """A whole-module transformation. Subclasses implement `run`."""

    name = "module-pass"
    requires: tuple[str, ...] = ()  # properties that must hold before this pass runs
    ensures: tuple[str, ...] = ()  # properties that hold after it

    def run(self, module: Module) -> PassResult:
        raise NotImplementedError

    def __call__(self, module: Module) -> PassResult:
        return PassResult(*self.run(module))


class FunctionPass(ModulePass):
    """Applies `run_function` to each function it may enter; others are left as they are."""

    name = "function-pass"
    enters_primitive = False  # opt in to see fused (primitive) functions

    def enters(self, fn: Function) -> bool:
        return fn.kind == "default" or (fn.kind == "primitive" and self.enters_primitive)

    def run_function(self, name: str, fn: Function, module: Module) -> tuple[Function, bool]:
        raise NotImplementedError

    def run(self, module: Module) -> PassResult:
        changed = {}
        for name, fn in module.functions.items():
            if self.enters(fn):
                new_fn, modified = self.run_function(name, fn, module)
                if modified:
                    changed[name] = new_fn
        return PassResult(module.replace(**changed), True) if changed else \
            PassResult(module, False)


class LambdaFunctionPass(FunctionPass):
    """A function pass from a plain function `fn(name, function, module) -> (function, bool)`."""

    def __init__(self, name: str, fn: Callable, enters_primitive: bool = False):
        self.name, self._fn, self.enters_primitive = name, fn, enters_primitive

    def run_function(self, name, fn, module):
        return self._fn(name, fn, module)


class PassManager(ModulePass):
    """Runs passes in order; with `fixpoint=True`, repeats the sequence until nothing
    changes, and raises naming the passes still changing after `max_iterations`. It is a
    pass itself, so pipelines nest: it requires what its passes require that none of them
    ensures before, and ensures what they ensure. `given`: properties the input has."""

    name = "pass-manager"

    def __init__(self, passes: Sequence[ModulePass], fixpoint: bool = False,
                 max_iterations: int = 20, given: Sequence[str] = ()):
        self.passes, self.fixpoint, self.max_iterations = list(passes), fixpoint, max_iterations
        self.requires, self.ensures = self._check_order(set(given))

    def _check_order(self, established: set) -> tuple[tuple, tuple]:
        needed: list[str] = []
        for index, p in enumerate(self.passes):
            missing = [r for r in getattr(p, "requires", ()) if r not in established]
            if missing and index:
                before = ", ".join(q.name for q in self.passes[:index])
                raise LegatoError(f"pass {p.name} requires {', '.join(missing)}, which no pass "
                                  f"before it ensures (before it: {before})")
            needed += missing  # the first pass's needs are the pipeline's own
            established.update(getattr(p, "ensures", ()))
        return tuple(needed), tuple(sorted(established))

    def run_pass(self, p: ModulePass, module: Module) -> PassResult:
        """Run one pass (a subclass may time or trace it)."""
        return p.run(module)

    def run(self, module: Module) -> PassResult:
        any_change = False
        for _ in range(self.max_iterations if self.fixpoint else 1):
            changed_by = []
            for p in self.passes:
                module, modified = self.run_pass(p, module)
                if modified:
                    changed_by.append(p.name)
            any_change |= bool(changed_by)
            if not changed_by or not self.fixpoint:
                return PassResult(module, any_change)
        raise LegatoError(f"passes did not reach a fixpoint after {self.max_iterations} "
                          f"iterations; still changing: {', '.join(changed_by)}")
