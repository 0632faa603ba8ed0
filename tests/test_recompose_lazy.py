"""Recomposition derives the templates of the composites it is asked for only: compile
asks for its backend's ops, so a first compile no longer traces every composite (all 73
took 1-3 s, nn.grid_sample most of it, for a model that holds none of them)."""
import legato
from legato.ops import base
from legato.ops.registry import Registry
from legato.passes.recompose import default_ops, ops_for_backend


def fresh_registry() -> Registry:
    """The core ops in a registry of their own: nothing derived yet."""
    registry = Registry()
    for opdef in base.REGISTRY.ops():
        registry._ops[opdef.name] = opdef  # the core ops, shared read-only
    return registry


def derived_ops(registry) -> set[str]:
    return set(registry.derived("recompose.templates"))


def test_a_backend_derives_only_the_templates_of_its_own_ops():
    c_kernels = legato.get_backend("c_kernels")
    registry = fresh_registry()
    ops = ops_for_backend(c_kernels, registry)
    assert derived_ops(registry) <= set(c_kernels.legal)
    assert "nn.grid_sample" not in derived_ops(registry)
    # the same ops, in the same order, as when every composite is derived first
    every = fresh_registry()
    assert ops == [op for op in default_ops(every) if op in set(c_kernels.legal)]
    assert "nn.grid_sample" in derived_ops(every)


def test_a_backend_that_keeps_no_composite_derives_nothing():
    cpu_ref = legato.get_backend("cpu_ref")
    registry = fresh_registry()
    assert ops_for_backend(cpu_ref, registry) == \
        [op for op in default_ops(fresh_registry()) if op in set(cpu_ref.legal)]
    kept = {op for op in cpu_ref.legal if registry.find(op) is not None and
            registry.get(op).decompose is not None}
    assert derived_ops(registry) <= kept


def test_keep_adds_an_op_and_its_templates_only():
    c_kernels = legato.get_backend("c_kernels")
    registry = fresh_registry()
    assert "nn.attention" in ops_for_backend(c_kernels, registry, keep={"nn.attention"})
    assert derived_ops(registry) <= set(c_kernels.legal) | {"nn.attention"}
