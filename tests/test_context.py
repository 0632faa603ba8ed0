"""The explicit context: one way to reach the registry and the backends, plugin ops as
first-class as core ops, config sections for missing backends, passes' results."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import legato
from legato.cli.commands import main as cli
from legato.ir import TensorType

SWIGLU_PLUGIN = '''
import legato
from legato.ir import TensorType


def infer(types, attrs):
    t = types[0]
    return TensorType(t.shape[:-1] + (t.shape[-1] // 2,), t.dtype)


def swiglu(b, x):
    half = x.shape[-1] // 2
    gate = b.strided_slice(x, begin=[0], end=[half], axes=[-1])
    up = b.strided_slice(x, begin=[half], end=[2 * half], axes=[-1])
    return b.multiply(b.multiply(gate, b.sigmoid(gate)), up)


@legato.hookimpl
def legato_register_ops(register):
    register("my.swiglu", "data", infer, "opaque", level=1, decompose=swiglu,
             examples=[([TensorType((2, 8), "float32")], {})])
'''


def swiglu_reference(x):
    gate, up = np.split(x.astype(np.float64), 2, axis=-1)
    return gate / (1 + np.exp(-gate)) * up


@pytest.fixture
def swiglu_plugin(install_plugins):
    module = types.ModuleType("swiglu_plugin")
    exec(compile(SWIGLU_PLUGIN, "swiglu_plugin", "exec"), module.__dict__)
    host = install_plugins({"swiglu": module})
    assert "my.swiglu" in host.registry, host.problems
    return host


def test_the_context_is_one_object_for_registry_and_backends():
    ctx = legato.context()
    assert ctx is legato.context() and isinstance(ctx, legato.Context)
    assert legato.GraphBuilder().registry is ctx.registry
    assert legato.list_ops() == ctx.registry.names()
    assert legato.get_backend("cpu_ref") is ctx.backend("cpu_ref")


def test_an_explicit_context_is_used_instead_of_the_global_one(monkeypatch):
    ctx = legato.context()
    b = legato.GraphBuilder()
    y = b.call("nn.relu", b.input("x", (2, 3)))
    module = b.build(y)
    # an empty process-wide context: only the explicit one knows cpu_ref
    empty = legato.Context(ctx.registry)
    monkeypatch.setattr(legato.plugins.host, "_HOST", empty)
    with pytest.raises(legato.PluginError, match="no backend named 'cpu_ref'"):
        legato.compile(module, "cpu_ref")
    out = legato.compile(module, "cpu_ref", context=ctx)(-np.ones((2, 3), np.float32))
    assert out.tolist() == np.zeros((2, 3)).tolist()
    assert legato.legalize(module, "cpu_ref", context=ctx).report.summary()


def test_plugin_ops_resolve_in_a_fresh_process(tmp_path):
    """Builder, parser and `legato run` load plugins before they resolve an op name; the
    reference check legalizes the plugin op (cpu_ref has no kernel for it)."""
    (tmp_path / "swiglu_plugin.py").write_text(SWIGLU_PLUGIN)
    info = tmp_path / "swiglu_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: swiglu-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[legato]\nswiglu = swiglu_plugin\n")
    script = textwrap.dedent(f"""
        import sys, legato
        b = legato.GraphBuilder()
        y = b.call("my.swiglu", b.input("x", (2, 8)))
        text = str(b.build(y))
        assert legato.structural_equal(legato.parse(text), b.build(y))
        open({str(tmp_path / "m.txt")!r}, "w").write(text)
        from legato.cli.commands import main
        sys.exit(main(["run", {str(tmp_path / "m.txt")!r}, "--backend", "cpu_ref"]))
    """)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "decomposed: my.swiglu x1" in done.stdout and " ok" in done.stdout


def test_plugin_ops_are_first_class_in_builder_parser_and_run(swiglu_plugin, tmp_path,
                                                              capsys):
    b = legato.GraphBuilder()
    y = b.call("my.swiglu", b.input("x", (2, 8)))
    module = b.build(y)
    assert legato.structural_equal(legato.parse(str(module)), module)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(legato.reference(module)(x), swiglu_reference(x), rtol=1e-5)
    path = tmp_path / "m.txt"
    path.write_text(str(module))
    assert cli(["run", str(path), "--backend", "cpu_ref"]) == 0
    assert "max rel. error" in capsys.readouterr().out


def test_an_unknown_op_names_the_plugins_that_failed_to_load(install_plugins):
    install_plugins({"vendor_ops": None})  # its module does not import
    b = legato.GraphBuilder()
    with pytest.raises(legato.OpError, match=r"unknown op 'my.swiglu'.*plugins that failed to "
                                             r"load: vendor_ops \(`legato backends` shows why\)"):
        b.call("my.swiglu", b.input("x", (2, 8)))
    text = "func @main(%x: float32[2, 8]) -> (float32[2, 4]) {\n" \
           "  %1 = my.swiglu(%x) : float32[2, 4]\n  return %1\n}\n"
    with pytest.raises(legato.IRError, match="plugins that failed to load: vendor_ops"):
        legato.parse(text)


def test_a_config_section_for_a_missing_backend_is_a_warning(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text("backends:\n  cpu_reff:\n    keep: [vendor.op]\n"
                    "  cpu_ref:\n    keep: [nn.relu]\n")
    with pytest.warns(legato.LegatoWarning,
                      match=r"shared.yaml: no backend of that name is installed for section "
                            r"backends.cpu_reff \(did you mean 'cpu_ref'\?\); ignored"):
        result = legato.legalize("example:mlp", backend="cpu_ref", config=str(path))
    assert result.report.ops("kept") == {"nn.relu": 2}


def test_many_missing_backends_give_one_warning():
    config = {"backends": {f"npu{i}": {"keep": ["vendor.op"]} for i in range(50)}}
    with pytest.warns(legato.LegatoWarning) as caught:
        legato.legalize("example:mlp", backend="cpu_ref", config=config)
    assert len(caught) == 1
    assert "sections backends.npu0, backends.npu1, backends.npu2 and 47 more" in \
        str(caught[0].message)


def test_an_installed_backends_section_is_still_validated(tmp_path):
    path = tmp_path / "my.yaml"
    path.write_text("backends:\n  cpu_ref:\n    keep: [nn.layer_nrom]\n")
    with pytest.raises(legato.ConfigError, match="unknown op 'nn.layer_nrom'"):
        legato.legalize("example:mlp", backend="cpu_ref", config=str(path))


def test_passes_return_a_result_and_fusion_is_a_pass():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    module = b.build(b.call("tanh", b.call("exp", x)))
    result = legato.FusePass()(module)
    assert isinstance(result, legato.PassResult) and result.modified
    assert [f.kind for f in result.module.functions.values()] == ["default", "primitive"]
    again, modified = legato.FusePass()(result.module)  # nothing left to fuse
    assert again is result.module and not modified
    nested = legato.PassManager([legato.PassManager([legato.FusePass()])])
    assert nested(module).modified and isinstance(nested(module), legato.PassResult)


def test_partition_is_a_pass_in_a_pipeline_with_fusion():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    module = b.build(b.call("tanh", b.call("exp", x)))
    pipeline = legato.PassManager([legato.PartitionPass(["c_kernels"]), legato.FusePass()])
    parted, modified = pipeline(module)
    kinds = {name: fn.kind for name, fn in parted.functions.items()}
    assert modified and kinds == {"main": "default", "c_kernels_0": "external"}
    assert parted.functions["c_kernels_0"].attrs["codegen"] == "c_kernels"
    assert [c.op for c in parted.functions["c_kernels_0"].calls] == ["exp", "tanh"]


def test_call_op_lives_in_the_ir():
    from legato.ir.verify import CALL_OP
    assert legato.CALL_OP is CALL_OP
    b = legato.GraphBuilder()
    y = b.call("nn.gelu", b.input("x", (2, 3)))
    fused = legato.fuse(legato.legalize(b.build(y), max_level=0).module)
    assert {c.op for c in fused.main.calls} == {legato.CALL_OP}
    assert TensorType((1,), "float32").rank == 1


def import_graph() -> dict[str, set[str]]:
    """legato module -> the legato modules it imports, at the top or inside functions."""
    root = Path(legato.__file__).parent
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                    if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                # `from . import x` imports the submodule x, not the package's names
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in names else module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
                    graph[name].update(_packages_entered(target, name, names))
    return graph


def _packages_entered(target: str, importer: str, names) -> set[str]:
    """The packages whose __init__ runs first when `importer` imports `target` (those
    `importer` is not already inside): `from legato.cli.model import x` runs legato.cli."""
    entered, parent = set(), target.rpartition(".")[0]
    while parent.count("."):
        if parent in names and not importer.startswith(parent + ".") and parent != importer:
            entered.add(parent)
        parent = parent.rpartition(".")[0]
    return entered


def test_the_core_has_no_import_cycles():
    """No module imports (even inside a function) a module that imports it back."""
    graph = import_graph()
    assert {"legato.ir", "legato.ir.text", "legato.api", "legato.frontends.onnx"} <= set(graph)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name, path):
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def is_op_name(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "op") or \
        (isinstance(node, ast.Name) and node.id == "op")


def test_call_and_custom_ops_are_named_only_by_their_constants():
    """Code compares op names with legato.CALL_OP and CUSTOM_OP, never with the literals
    ("custom" is also a legalization action, so only comparisons with an op count)."""
    roots = [Path(legato.__file__).parent] + \
        sorted((Path(legato.__file__).parents[2] / "plugins").glob("*/legato_*"))
    literals = []
    for root in roots:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Compare):
                    continue
                operands = (node.left, *node.comparators)
                with_op = any(is_op_name(operand) for operand in operands)
                literals += [f"{path.name}:{node.lineno}" for operand in operands
                             if isinstance(operand, ast.Constant) and (
                                 operand.value == "call" or
                                 operand.value == "custom" and with_op)]
    assert len(roots) > 1 and not literals
