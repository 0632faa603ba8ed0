"""Partitioning by capability (like ONNX Runtime's GetCapability or TVM's BYOC).

Each call of `main` goes to the first backend that takes it (natively, or kept by that
backend's config), after decomposing what none of them takes. Connected calls of one
backend become maximal acyclic regions, each lifted into a module-level `external`
function whose `attrs["codegen"]` names the backend. Calls no backend takes stay in
`main`; later passes and legalization never enter the external functions.
"""
from __future__ import annotations

from .backend import Backend
from .config import EMPTY_CONFIG, BackendConfig, load_config
from .ir import Attrs, Call, Module
from .legalize import legalize_module
from .regions import group_calls, lift_regions


class _AnyOf(Backend):
    """The union of several backends (with their configs), for the decomposition step."""

    def __init__(self, members: list[tuple[Backend, BackendConfig]]):
        super().__init__("+".join(b.name for b, _ in members), {}, executes=False)
        self.members = members

    def why_not(self, call: Call) -> str | None:
        reasons = []
        for backend, config in self.members:
            reason = owner_reason(backend, config, call)
            if reason is None:
                return None
            reasons.append(reason)
        return "; ".join(reasons)


def owner_reason(backend: Backend, config: BackendConfig, call: Call) -> str | None:
    """None when `backend` takes `call` under `config`, else why not."""
    if call.op in config.keep and (backend.custom_ops or backend.has_kernel(call.op)
                                   or backend.supports(call)):
        return None
    if call.op in config.decompose:
        return f"{backend.name}'s config decomposes {call.op}"
    return backend.why_not(call)


def partition(module: Module, backends, config=None, registry=None) -> Module:
    """Assign calls of `main` to `backends` (first that takes a call wins) and lift each
    backend's regions into external functions named `<backend>_<n>`."""
    from .plugins import get_host
    host = get_host()
    registry = registry or host.registry
    members = []
    for name in backends:
        backend = host.backend(name)
        members.append((backend, load_config(config, backend.name, registry, host.backends)))
    union = _AnyOf(members)
    lowered = legalize_module(module, registry, union, None, EMPTY_CONFIG, None, "partial").module

    def owner(call: Call):
        if call.op == "call":
            return None
        for backend, cfg in members:
            if owner_reason(backend, cfg, call) is None:
                return backend.name
        return None

    groups = group_calls(lowered.main.calls, owner, lambda group, call: True)
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
