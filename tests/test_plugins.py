"""Plugin discovery, registration errors, capability files and user configs."""
import numpy as np
import pytest

import legato
from legato.ops.base import f32
from legato.testing.plugins import plugin_module

CPU_KERNELS = "legato_cpu_ref.kernels:KERNELS"


def relu_backend(register):
    register({"backend": "relu_only", "legal": {"nn.relu": {"dtypes": ["float32"]}},
              "fallback": "cpu_ref", "kernels": CPU_KERNELS})


def test_entry_point_plugins_are_discovered(install_plugins):
    host = install_plugins({"relu": plugin_module(legato_register_backends=relu_backend)})
    assert {"cpu_ref", "relu_only"} <= set(legato.list_backends())
    assert [name for name, _ in host.problems if name == "relu"] == []
    assert legato.get_backend("relu_only").source == "relu"


def test_broken_plugins_are_reported_by_name_and_others_still_load(install_plugins):
    def raises(register):
        raise RuntimeError("driver not found")

    def bad_capability(register):
        register({"backend": "typo", "legal": {"nn.layer_nrom": {}}})

    host = install_plugins({
        "good": plugin_module(legato_register_backends=relu_backend),
        "missing": None,  # its module cannot be imported
        "raiser": plugin_module(legato_register_backends=raises),
        "typo": plugin_module(legato_register_backends=bad_capability),
    })
    problems = dict(host.problems)
    assert "failed to load" in problems["missing"] and "ModuleNotFoundError" in problems["missing"]
    assert "RuntimeError: driver not found" in problems["raiser"]
    assert "unknown op 'nn.layer_nrom'" in problems["typo"]
    assert "did you mean 'nn.layer_norm'" in problems["typo"]
    assert "relu_only" in legato.list_backends() and "cpu_ref" in legato.list_backends()
    assert "typo" not in legato.list_backends()
    with pytest.raises(legato.PluginError, match="no backend named 'typo'"):
        legato.compile("example:mlp", backend="typo")


def _double_infer(types, attrs):
    return types[0]


def _double(b, x):
    return b.add(x, x)


def test_plugin_ops_are_registered_and_legalized(install_plugins):
    def ops(register):
        register("acme.double", "data", _double_infer, "elemwise", level=1,
                 decompose=_double, examples=[((f32(2),), {})])

    install_plugins({"acme": plugin_module(legato_register_ops=ops)})
    assert legato.get_op("acme.double").level == 1
    b = legato.GraphBuilder()
    x = b.input("x", (3,))
    c = legato.compile(b.build(b.call("acme.double", x)), "cpu_ref")
    assert [call.op for call in c.module.main.calls] == ["add"]
    np.testing.assert_array_equal(c(np.arange(3, dtype=np.float32)), [0, 2, 4])


def test_plugin_op_whose_decomposition_is_not_lower_level_is_refused(install_plugins):
    def ops(register):
        register("acme.loop", "data", _double_infer, "elemwise", level=1,
                 decompose=lambda b, x: b.nn_relu(x), examples=[((f32(2),), {})])
        register("acme.ok", "data", _double_infer, "elemwise", level=1,
                 decompose=_double, examples=[((f32(2),), {})])

    host = install_plugins({"loopy": plugin_module(legato_register_ops=ops)})
    (plugin, message), = [p for p in host.problems if p[0] == "loopy"]
    assert "acme.loop (level 1) decomposes into nn.relu (level 1)" in message
    assert "acme.loop" not in legato.list_ops()


def test_registry_refuses_duplicates_and_missing_examples():
    from legato.ops.base import REGISTRY, composite, primitive
    with pytest.raises(legato.RegistrationError, match="already registered"):
        primitive("add", "a, b", _double_infer, "broadcast")
    with pytest.raises(legato.RegistrationError, match="no examples"):
        composite("test.noexample", "data", _double_infer, "elemwise", 1, [])(_double)
    with pytest.raises(legato.RegistrationError, match="pattern kind"):
        primitive("test.kind", "a", _double_infer, "fancy")
    assert "test.noexample" not in REGISTRY


def test_register_backend_from_yaml_path(tmp_path, backend_factory):
    path = tmp_path / "cap.yaml"
    path.write_text("backend: yamlback\nlegal:\n  add: {dtypes: [float32]}\n"
                    "  nn.conv2d: {attrs: {data_layout: NHWC, strides: [[1, 1], [2, 2]]}}\n"
                    f"kernels: {CPU_KERNELS}\n")
    backend = backend_factory(str(path))
    b = legato.GraphBuilder()
    x = b.input("x", (1, 4, 4, 2))
    w = b.input("w", (3, 3, 2, 2))
    conv = b.call("nn.conv2d", x, w, None, data_layout="NHWC", kernel_layout="HWIO",
                  strides=[2, 2])
    assert backend.supports(b.calls[0])
    nchw = b.call("nn.conv2d", b.input("y", (1, 2, 4, 4)), b.input("v", (2, 2, 3, 3)))
    assert "data_layout='NCHW' not in ['NHWC']" in backend.why_not(b.calls[1])
    assert conv is not None and nchw is not None
    with pytest.raises(legato.RegistrationError, match="already registered"):
        legato.register_backend(str(path))


@pytest.mark.parametrize("text, message", [
    ("backend: x\nlegal: [add\n", r"cap.yaml: line \d+, column \d+ malformed YAML"),
    ("backend: x\nlegall: {}\n", r"cap.yaml: unknown key 'legall' \(did you mean 'legal'\?\)"),
    ("backend: x\nlegal:\n  nn.softmaks: {}\n", r"unknown op 'nn.softmaks'.*'nn.softmax'"),
    ("backend: x\nlegal:\n  add: {dtypes: [float23]}\n", r"legal.add.dtypes: unknown dtype "
                                                       r"'float23'.*'float32'"),
    ("backend: x\nlegal:\n  add: {dtype: [float32]}\n", r"unknown key legal.add.'dtype'.*'dtypes'"),
    ("backend: x\nlegal:\n  nn.softmax: {attrs: {axs: 1}}\n", r"no attribute 'axs'.*'axis'"),
    ("backend: x\nexecutes: maybe\n", "'executes' must be true or false"),
    ("legal: {}\n", "key 'backend' must name the backend"),
    ("- just\n- a list\n", "expected a mapping at the top level"),
    ("backend: x\nkernels: no_such_module:TABLE\n", "cannot import 'no_such_module:TABLE'"),
])
def test_capability_file_errors_name_file_and_key(tmp_path, text, message):
    path = tmp_path / "cap.yaml"
    path.write_text(text)
    with pytest.raises(legato.ConfigError, match=message):
        legato.register_backend(str(path))


@pytest.mark.parametrize("text, message", [
    ("backends:\n  cpu_ref:\n    keep: [nn.layer_nrom]\n",
     r"my.yaml: backends.cpu_ref.keep: unknown op 'nn.layer_nrom'.*'nn.layer_norm'"),
    ("backends:\n  cpu_ref:\n    kepp: [nn.gelu]\n", r"unknown key backends.cpu_ref.'kepp'.*'keep'"),
    ("backends:\n  cpu_ref:\n    decompose: [add]\n", "add is a primitive"),
    ("backends:\n  cpu_ref:\n    keep: [nn.gelu]\n    decompose: [nn.gelu]\n",
     "in both keep and decompose"),
    ("backends:\n  cpu_ref:\n    max_level: -1\n", r"max_level: expected an int >= 0"),
    ("backend:\n  cpu_ref: {}\n", r"unknown key 'backend' \(did you mean 'backends'\?\)"),
    ("backends: [\n", "malformed YAML"),
    ("backends:\n  cpu_ref:\n    keep: nn.gelu\n", "expected a list of op names"),
])
def test_user_config_errors_name_file_and_key(tmp_path, text, message):
    path = tmp_path / "my.yaml"
    path.write_text(text)
    with pytest.raises(legato.ConfigError, match=message):
        legato.legalize("example:mlp", backend="cpu_ref", config=str(path))


def test_config_for_a_backend_that_is_not_installed_is_allowed(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text("backends:\n  some_npu:\n    keep: [nn.gelu]\n  cpu_ref:\n    keep: [nn.relu]\n")
    with pytest.warns(legato.LegatoWarning, match="some_npu"):
        result = legato.legalize("example:mlp", backend="cpu_ref", config=str(path))
    assert result.report.ops("kept") == {"nn.relu": 2}


def test_missing_config_file_is_a_clear_error():
    with pytest.raises(legato.ConfigError, match="nope.yaml: cannot read"):
        legato.legalize("example:mlp", backend="cpu_ref", config="nope.yaml")


def test_repository_configs_are_valid():
    from pathlib import Path
    for path in sorted(Path(__file__).parents[1].joinpath("configs").glob("*.yaml")):
        legato.legalize("example:layernorm", backend="cpu_ref", config=str(path))


def test_a_hook_that_raises_midway_leaves_nothing_half_registered(install_plugins):
    def ops(register):
        register("acme.half", "data", _double_infer, "elemwise", level=1,
                 decompose=_double, examples=[((f32(2),), {})])
        raise RuntimeError("second op failed")

    def backends(register):
        register({"backend": "half_npu", "legal": {"add": {}}, "executes": False})
        raise SystemExit(1)  # a plugin's exit must not end the host

    host = install_plugins({"half": plugin_module(legato_register_ops=ops,
                                                  legato_register_backends=backends)})
    problems = [m for p, m in host.problems if p == "half"]
    assert problems == ["legato_register_ops raised RuntimeError: second op failed",
                        "legato_register_backends raised SystemExit: 1"]
    assert "acme.half" not in legato.list_ops()
    assert "half_npu" not in legato.list_backends()
    # the first failure's traceback is kept for `legato backends --verbose`
    assert "RuntimeError: second op failed" in host.tracebacks["half"]
    assert "in ops" in host.tracebacks["half"]


def test_a_plugin_that_exits_while_importing_is_a_problem(install_plugins, monkeypatch,
                                                         tmp_path):
    (tmp_path / "fake_legato_plugin_exiting.py").write_text("raise SystemExit('no device')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    host = install_plugins({"exiting": None})
    (message,) = [m for p, m in host.problems if p == "exiting"]
    assert "failed to load" in message and "SystemExit" in message
    assert "cpu_ref" in legato.list_backends()


@pytest.mark.parametrize("args, message", [
    ((5, "data", _double_infer, "elemwise"), "op name 5 is not a dotted identifier"),
    (("acme.x", ["data"], _double_infer, "elemwise"), r"op acme.x: inputs must be a string"),
    (("acme.x", "data", None, "elemwise"), "op acme.x: infer must be a function"),
    (("acme.x", "data", _double_infer, "elemwise", "1"), "op acme.x: level must be an int"),
    (("acme.x", "data", _double_infer, "elemwise", 0, None, (), [1]),
     "op acme.x: attrs must be a mapping"),
])
def test_bad_op_registration_arguments_are_registration_errors(install_plugins, args,
                                                               message):
    def ops(register):
        register(*args)

    host = install_plugins({"badops": plugin_module(legato_register_ops=ops)})
    (problem,) = [m for p, m in host.problems if p == "badops"]
    assert problem.startswith("legato_register_ops: ") and message in problem
    assert 5 not in legato.list_ops() and "acme.x" not in legato.list_ops()


def test_add_plugin_with_a_hook_of_the_wrong_signature_is_a_plugin_error():
    import types
    module = types.ModuleType("wrong_signature")
    module.legato_register_backends = legato.hookimpl(lambda reg: None)
    host = legato.plugins.host.PluginHost(legato.ops.REGISTRY)
    with pytest.raises(legato.PluginError, match=r"plugin 'wrong': PluginValidationError"):
        host.add_plugin(module, "wrong")


def test_a_fallback_that_only_emits_code_is_refused(backend_factory):
    with pytest.raises(legato.RegistrationError, match="fallback tosa_custom does not execute"):
        backend_factory({"backend": "leans_on_tosa", "legal": {"nn.relu": {}},
                         "fallback": "tosa_custom", "kernels": CPU_KERNELS})
    assert "leans_on_tosa" not in legato.list_backends()


@pytest.mark.parametrize("name, message", [
    (None, "a backend is a name or a Backend, got NoneType None"),
    (["cpu_ref"], r"got list \['cpu_ref'\]"),
    ("x" * 100_000, r"no backend named 'xxx.*\.\.\..*' \(installed: "),
])
def test_backend_lookup_by_a_bad_name_is_a_short_plugin_error(name, message):
    with pytest.raises(legato.PluginError, match=message) as info:
        legato.get_backend(name)
    assert len(str(info.value)) < 300
