"""No hidden global state in the core: what passes cache lives on the registry (and dies
with it), and nothing toggles the garbage collector."""
import ast
import gc
from pathlib import Path

import legato
from legato.ops import base
from legato.ops.base import f32, float_unary_infer
from legato.ops.registry import OpDef, Registry
from legato.passes.recompose import recompose

ROOT = Path(legato.__file__).resolve().parents[2]


def _made_at(cls, address: int | None):
    """An uninitialised instance of `cls`, at `address` (the id of a dead one) if the
    allocator hands that out within a few thousand tries."""
    obj, spares = cls.__new__(cls), []
    while address is not None and id(obj) != address and len(spares) < 10000:
        spares.append(obj)  # kept alive, so the next one takes another address
        obj = cls.__new__(cls)
    return obj


def _registry_with(form: str, at=(None, None)) -> Registry:
    """The core ops plus acme.f, whose decomposition is x / (1 + |x|) or x * (1 + |x|);
    the registry and the definition made, where they can be, at the addresses `at` of
    dead ones."""
    registry = _made_at(Registry, at[0])
    registry.__init__()
    for opdef in base.REGISTRY.ops():
        registry._ops[opdef.name] = opdef  # the core ops, shared read-only

    def f(b, x):
        """`x / (1 + |x|)` or `x * (1 + |x|)`"""
        return (b.divide if form == "divide" else b.multiply)(x, b.add(b.abs(x), 1.0))

    opdef = _made_at(OpDef, at[1])
    opdef.__init__("acme.f", "data", {}, float_unary_infer, "elemwise", 1, f,
                   [((f32(2, 3),), {})])
    registry.register(opdef)
    return registry


def _softsign_module():
    b = legato.GraphBuilder()
    x = b.input("x", (3, 4), "float32")
    return b.build(b.exp(b.divide(x, b.add(b.abs(x), 1.0))))


def test_a_registry_made_again_does_not_see_the_last_ones_templates():
    """Registries (and their definitions) made one after another often reuse the memory,
    and so the id(), of the last: recomposition must find each registry's own form."""
    module = _softsign_module()
    at = (None, None)
    for i in range(6):
        form = "divide" if i % 2 == 0 else "multiply"
        registry = _registry_with(form, at)
        reused = at == (id(registry), id(registry.get("acme.f")))
        back, modified = recompose(module, ops=["acme.f"], registry=registry)
        assert modified == (form == "divide"), (i, form, reused)
        assert ("acme.f" in {c.op for c in back.main.calls}) == (form == "divide")
        at = (id(registry), id(registry.get("acme.f")))
        del registry, back
        gc.collect()


def _module_level_containers(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        value = getattr(node, "value", None)
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("dict", "list", "set", "defaultdict", "OrderedDict"))
        if mutable:
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _calls_id(node, id_names: set) -> bool:
    return any((isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "id")
               or (isinstance(n, ast.Name) and n.id in id_names) for n in ast.walk(node))


def _id_keyed_uses(tree: ast.Module, containers: set[str]) -> list[int]:
    """Lines where a module-level container is indexed by a key built from id()."""
    lines = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        id_names = {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                    and _calls_id(node.value, set()) for t in node.targets
                    if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                    node.value.id in containers and _calls_id(node.slice, id_names):
                lines.append(node.lineno)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id in containers \
                    and node.args and _calls_id(node.args[0], id_names):
                lines.append(node.lineno)
            elif isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Name) and c.id in containers for c in node.comparators) \
                    and _calls_id(node.left, id_names):
                lines.append(node.lineno)
    return sorted(lines)


def test_no_module_level_cache_is_keyed_by_id():
    """An id() outlives its object: a module-level cache keyed by it can hand a new object
    the entry of a dead one."""
    found = []
    for path in sorted((ROOT / "core" / "legato").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        containers = _module_level_containers(tree)
        found += [f"{path.relative_to(ROOT)}:{line}"
                  for line in _id_keyed_uses(tree, containers)]
    assert not found, found


def test_the_scan_finds_an_id_keyed_cache():
    tree = ast.parse("_C: dict = {}\ndef f(r, o):\n    key = (id(r), o)\n"
                     "    if key in _C:\n        return _C[key]\n    _C[(id(r),)] = 1\n")
    assert _id_keyed_uses(tree, _module_level_containers(tree)) == [4, 5, 6]


def test_nothing_toggles_the_garbage_collector():
    offenders = [f"{path.relative_to(ROOT)}:{i + 1}"
                 for folder in ("core/legato", "plugins")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
                 if "gc.disable(" in line or "gc.freeze(" in line]
    assert not offenders, offenders


def test_error_bound_reads_the_registry_it_is_given():
    from legato.ops import tolerance
    registry = Registry()
    registry.register(OpDef("acme.noisy", "data", {}, float_unary_infer, "elemwise",
                            tolerance=0.25))
    assert tolerance.error_bound("acme.noisy", registry=registry) == 0.25
    assert tolerance.error_bound("acme.noisy") == tolerance.DEFAULT_ERROR  # not the context's
    assert tolerance.error_bound("exp", registry=registry) == tolerance.DEFAULT_ERROR
