"""Partitioning by capability (like ONNX Runtime's GetCapability or TVM's BYOC).

Each call of `main` goes to the first backend that takes it (`Backend.decide` under that
backend's config: the same answer legalization gets), after decomposing what none of
them takes. Connected calls of one backend become maximal acyclic regions, each lifted
into a module-level `external` function whose `attrs["codegen"]` names the backend.
Calls no backend takes stay in `main`; later passes and legalization never enter the
external functions.
"""
from __future__ import annotations

from ..ir import CALL_OP, Attrs, Call, Module
from ..legalization.backend import DECLINED, TAKEN, Backend
from ..legalization.config import EMPTY_CONFIG, BackendConfig, load_config
from ..legalization.loop import legalize_module
from ..legalization.report import Decision
from ..plugins.context import Context, context as current_context
from .manager import ModulePass, PassResult
from .regions import group_calls, lift_regions


class _AnyOf(Backend):
    """The union of several backends (with their configs), for the decomposition step: it
    takes a call when one of them does, and never rewrites it into one member's form."""

    def __init__(self, members: list[tuple[Backend, BackendConfig]]):
        super().__init__("+".join(b.name for b, _ in members), {}, executes=False)
        self.members = members
        self.reads_values = any(b.reads_values for b, _ in members)

    def decide(self, call: Call, config: BackendConfig = EMPTY_CONFIG, level: int = 0,
               use_rules: bool = True) -> Decision:
        reasons = []
        for backend, own_config in self.members:
            decision = backend.decide(call, own_config, level, use_rules=False)
            if decision.action in TAKEN:  # its own compile tunnels or keeps it, not this pass
                return Decision("legal", f"{backend.name}: {decision.reason}")
            reasons.append(decision.reason)
        return Decision("failed", "; ".join(reasons), DECLINED)


def owner(members: list[tuple[Backend, BackendConfig]], call: Call, registry) -> str | None:
    """The name of the first backend that takes `call` under its config, or None."""
    if call.op == CALL_OP:
        return None
    level = registry.get(call.op).level
    for backend, config in members:
        if backend.decide(call, config, level, use_rules=False).action in TAKEN:
            return backend.name
    return None


def partition(module: Module, backends, config=None, registry=None, *,
              context: Context | None = None) -> Module:
    """Assign calls of `main` to `backends` (first that takes a call wins) and lift each
    backend's regions into external functions named `<backend>_<n>`."""
    host = context or current_context()
    registry = registry or host.registry
    members = []
    for name in backends:
        backend = host.backend(name)
        members.append((backend, load_config(config, backend.name, registry, host.backends)))
    union = _AnyOf(members)
    lowered = legalize_module(module, registry, union, None, EMPTY_CONFIG, None, "partial").module
    groups = group_calls(lowered.main.calls, lambda call: owner(members, call, registry),
                         lambda group, call: True)
    regions, counts = [], {}
    for key, calls in groups:
        if key is None:
            continue
        counts[key] = counts.get(key, 0) + 1
        name = f"{key}_{counts[key] - 1}"
        while name in lowered.functions:
            name += "_"
        regions.append((name, "external", Attrs({"codegen": key}), calls))
    return lift_regions(lowered, "main", regions) if regions else lowered


class PartitionPass(ModulePass):
    """`partition` as a pass: (module, modified)."""

    name = "partition"

    def __init__(self, backends, config=None, context: Context | None = None):
        self.backends, self.config, self.context = list(backends), config, context

    def run(self, module: Module) -> PassResult:
        new = partition(module, self.backends, self.config, context=self.context)
        return PassResult(new, new is not module)
