"""Checks at backend registration, not at run time: every legal op has a kernel, an
emitter entry or a fallback with a kernel; kernels take the op's inputs and attributes;
condition values have the attribute's type; misnamed or undecorated hook functions of a
plugin module are reported. Each message names the plugin, the backend and the op."""
from __future__ import annotations

import types

import pytest

import legato
from legato.legalization.backend_checks import HOOKS, hook_problems


def exp(data):
    return data


def add(a, b):
    return a


def softmax(data, *, axis):
    return data


def layer_norm(data, gamma=None, beta=None, **attrs):
    return data


def concat(*data, axis):
    return data[0]


def emitter_printing(*ops):
    def emit(module):
        return "code"
    emit.ops = frozenset(ops)
    return emit


def register_error(capability, match, **kwargs):
    with pytest.raises(legato.RegistrationError, match=match):
        legato.register_backend(capability, **kwargs)
    assert capability["backend"] not in legato.list_backends()


# --- legal ops: a kernel, an emitter entry or a fallback ---------------------------------

def test_an_executing_backend_needs_a_kernel_for_every_legal_op(backend_factory):
    register_error({"backend": "npu", "legal": {"exp": {}, "tanh": {}, "add": {}}},
                   r"plugin in-process, backend npu: legal ops add, tanh without a kernel "
                   r"and no fallback backend", kernels={"exp": exp})
    backend_factory({"backend": "npu", "legal": {"exp": {}}}, kernels={"exp": exp})


def test_a_fallback_with_the_kernel_covers_a_legal_op_that_says_so(backend_factory):
    register_error({"backend": "npu", "fallback": "cpu_ref", "legal": {"exp": {}, "tanh": {}}},
                   r"backend npu: legal op tanh without a kernel: add a kernel, or write "
                   r"`kernel: fallback` under legal.tanh", kernels={"exp": exp})
    backend = backend_factory({"backend": "npu", "fallback": "cpu_ref", "legal": {
        "exp": {}, "tanh": {"kernel": "fallback"}}}, kernels={"exp": exp})
    assert backend.supports(_call("tanh"))
    register_error({"backend": "npu2", "fallback": "cpu_ref",
                    "legal": {"exp": {}, "tosa.pow": {"kernel": "fallback"}}},
                   r"backend npu2: legal op tosa.pow without a kernel, here or on fallback "
                   r"cpu_ref", kernels={"exp": exp})


@pytest.mark.parametrize("fallback, match", [
    ("not_installed", r"backend leans: fallback 'not_installed' is not installed"),
    ("tosa_custom", r"backend leans: fallback tosa_custom does not execute \(it emits "
                    r"code\)"),
])
def test_a_fallback_that_cannot_run_anything_is_refused(fallback, match):
    register_error({"backend": "leans", "fallback": fallback, "legal": {"exp": {}}}, match,
                   kernels={"exp": exp})


def test_an_emitting_backend_needs_an_emitter_entry_when_its_emitter_lists_ops(
        backend_factory):
    register_error({"backend": "emits", "executes": False, "legal": {"exp": {}, "add": {}}},
                   r"plugin in-process, backend emits: its emitter's ops lack op add, which "
                   r"it would have to print$", emitter=emitter_printing("exp"))
    backend_factory({"backend": "emits", "executes": False, "legal": {"exp": {}, "add": {}}},
                    emitter=emitter_printing("exp", "add"))


def test_an_emitter_that_tunnels_custom_ops_prints_the_custom_op(backend_factory):
    register_error({"backend": "tunnels", "executes": False, "custom_ops": True,
                    "legal": {"exp": {}}},
                   r"backend tunnels: its emitter's ops lack op custom",
                   emitter=emitter_printing("exp"))
    backend_factory({"backend": "tunnels", "executes": False, "custom_ops": True,
                     "legal": {"exp": {}}}, emitter=emitter_printing("exp", "custom"))


def test_an_emitter_without_ops_and_an_own_executor_without_kernels_are_not_checked(
        backend_factory):
    backend_factory({"backend": "emits", "executes": False, "legal_levels": [0]},
                    emitter=lambda module: "code")
    backend_factory({"backend": "runs", "legal_levels": [0]}, executor=lambda *a: None)


def test_legal_levels_of_an_executing_backend_stop_at_its_kernel_table(backend_factory):
    backend = backend_factory({"backend": "npu", "legal_levels": [0]},
                              kernels={"exp": exp, "add": add, "nn.softmax": softmax})
    assert set(backend.legal) == {"exp", "add"}
    cpu_ref = legato.get_backend("cpu_ref")
    assert "tosa.pow" in legato.list_ops() and "tosa.pow" not in cpu_ref.legal
    assert "add" in cpu_ref.legal


# --- kernel signatures -------------------------------------------------------------------

@pytest.mark.parametrize("op, kernel, match", [
    ("exp", add, r"kernel add\(a, b\) for exp cannot be called as exp\(a\) with 1 inputs "
                 r"and the attributes as keywords: missing a required argument: 'b'"),
    ("add", exp, r"kernel exp\(data\) for add cannot be called as add\(a, b\) with 2 inputs"),
    ("nn.softmax", exp, r"kernel exp\(data\) for nn.softmax .*unexpected keyword argument "
                        r"'axis'"),
    ("concat", softmax, r"kernel softmax.*for concat .*with 3 inputs.*too many positional "
                        r"arguments"),
    ("concat", lambda a, b, *, axis: a, r"kernel .*for concat .*with 1 inputs.*missing a required "
                                        r"argument: 'b'"),
    ("nn.layer_norm", lambda data, *, axes, epsilon: data, r"kernel .*for nn.layer_norm .*with 3 "
                                                           r"inputs"),
])
def test_a_kernel_that_cannot_take_the_ops_inputs_and_attributes_is_refused(op, kernel,
                                                                            match):
    register_error({"backend": "sig", "executes": False, "legal": {op: {}}},
                   r"plugin in-process, backend sig: " + match, kernels={op: kernel})


def test_kernels_taking_the_inputs_positionally_and_attributes_by_keyword_pass(
        backend_factory):
    kernels = {"exp": exp, "add": add, "nn.softmax": softmax, "nn.layer_norm": layer_norm,
               "concat": concat, "negative": "operator:neg", "abs": abs,
               "tanh": lambda *a, **k: a[0]}
    backend = backend_factory({"backend": "sig", "legal_from_kernels": {}}, kernels=kernels)
    assert set(backend.legal) == set(kernels)


def test_a_kernel_reference_that_does_not_import_is_a_config_error_at_registration():
    with pytest.raises(legato.ConfigError, match=r"sig kernel for exp: cannot import "
                                                 r"'no_such_module:exp'"):
        legato.register_backend({"backend": "sig", "legal": {"exp": {}},
                                 "kernels": {"exp": "no_such_module:exp"}})
    assert "sig" not in legato.list_backends()


def test_installed_backends_pass_the_registration_checks():
    assert legato.plugin_problems() == []
    assert {"cpu_ref", "c_kernels", "tosa_custom"} <= set(legato.list_backends())


# --- condition values --------------------------------------------------------------------

@pytest.mark.parametrize("attrs, match", [
    ({"keepdims": 1}, r"legal.sum.attrs.keepdims: sum: attribute keepdims=1 must be of "
                      r"type bool"),
    ({"axes": "0"}, r"legal.sum.attrs.axes: sum: attribute axes='0' must be of type ints\?"),
    ({"keepdim": True}, r"legal.sum.attrs: sum has no attribute 'keepdim' \(did you mean "
                        r"'keepdims'\?\)"),
])
def test_condition_values_have_the_attributes_type(attrs, match):
    with pytest.raises(legato.ConfigError, match=r"<capability file dict>: " + match):
        legato.register_backend({"backend": "cond", "executes": False,
                                 "legal": {"sum": {"attrs": attrs}}})


# --- plugins -----------------------------------------------------------------------------

def module_with(**functions) -> types.ModuleType:
    module = types.ModuleType("fake_plugin")
    for name, fn in functions.items():
        setattr(module, name, fn)
    return module


def register_exp_backend(register):
    register({"backend": "plug_npu", "fallback": "plug_ref",
              "legal": {"exp": {}, "tanh": {"kernel": "fallback"}}}, kernels={"exp": exp})


def register_ref_backend(register):
    register({"backend": "plug_ref", "legal": {"tanh": {}}}, kernels={"tanh": exp})


def test_misnamed_and_undecorated_hook_functions_are_problems_naming_them(install_plugins):
    def legato_register_backends(register):
        pytest.fail("an undecorated hook must not run")

    def legato_register_op(register):
        pytest.fail("a misspelt hook must not run")

    plugin = module_with(legato_register_backends=legato_register_backends,
                         legato_register_op=legato.hookimpl(legato_register_op),
                         legato_version="1.0", helper=len)
    host = install_plugins({"typos": plugin})
    assert sorted(m for p, m in host.problems if p == "typos") == [
        "function legato_register_backends is not marked @legato.hookimpl, so it is never "
        "called",
        "function legato_register_op is not a legato hook (did you mean "
        "'legato_register_ops'?), so it is never called"]


def test_hook_problems_read_specname_and_ignore_other_attributes():
    def anything(register):
        pass

    plugin = module_with(register=legato.hookimpl(specname="legato_register_ops")(anything),
                         legato_helper_class=type("X", (), {}), legato_table={})
    assert hook_problems(plugin) == []
    assert {"legato_register_ops", "legato_register_backends", "legato_register_torch_ops"} <= HOOKS


def test_plugin_fallbacks_are_checked_after_every_plugin_has_registered(install_plugins):
    # plug_npu's plugin loads first; its fallback comes from the next one
    host = install_plugins({
        "a_npu": module_with(legato_register_backends=legato.hookimpl(register_exp_backend)),
        "b_ref": module_with(legato_register_backends=legato.hookimpl(register_ref_backend))})
    assert [m for p, m in host.problems if p in ("a_npu", "b_ref")] == []
    assert {"plug_npu", "plug_ref"} <= set(legato.list_backends())


def test_a_plugin_fallback_that_lacks_a_kernel_is_a_problem_naming_plugin_backend_op(
        install_plugins):
    def ref_without_tanh(register):
        register({"backend": "plug_ref", "legal": {"exp": {}}}, kernels={"exp": exp})

    host = install_plugins({
        "a_npu": module_with(legato_register_backends=legato.hookimpl(register_exp_backend)),
        "b_ref": module_with(legato_register_backends=legato.hookimpl(ref_without_tanh))})
    assert [(p, m) for p, m in host.problems if p in ("a_npu", "b_ref")] == [
        ("a_npu", "plugin a_npu, backend plug_npu: legal op tanh without a kernel, here or "
                  "on fallback plug_ref")]


def test_a_plugin_backend_with_a_bad_kernel_is_a_problem_and_not_registered(install_plugins):
    def bad(register):
        register({"backend": "plug_bad", "legal": {"exp": {}}}, kernels={"exp": add})

    host = install_plugins({"bad": module_with(legato_register_backends=legato.hookimpl(bad))})
    (message,) = [m for p, m in host.problems if p == "bad"]
    assert message.startswith("legato_register_backends: plugin bad, backend plug_bad: "
                              "kernel add(a, b) for exp cannot be called")
    assert "plug_bad" not in legato.list_backends()
    assert "cpu_ref" in legato.list_backends()


def _call(op):
    b = legato.GraphBuilder()
    return b.build(b.call(op, b.input("x", (2,)))).main.calls[0]


def test_plugin_ops_carry_their_facts_and_plugin(install_plugins):
    def ops(register):
        register("acme_rc.twice", "data", lambda types, attrs: types[0], "elemwise",
                 doc="Twice the input.", onnx=("AcmeTwice",), tolerance=1e-3)
        register("acme_rc.bad_doc", "data", lambda types, attrs: types[0], "elemwise",
                 doc=["not", "a", "string"])

    host = install_plugins({"acme_rc": module_with(legato_register_ops=legato.hookimpl(ops))})
    (problem,) = [m for p, m in host.problems if p == "acme_rc"]
    assert "op acme_rc.bad_doc: doc must be a string (one line)" in problem
    assert "acme_rc.twice" not in legato.list_ops()  # the hook failed: nothing half-registered

    def good(register):
        register("acme_rc.twice", "data", lambda types, attrs: types[0], "elemwise",
                 doc="Twice the input.", onnx=("AcmeTwice",), tolerance=1e-3)

    install_plugins({"acme_rc": module_with(legato_register_ops=legato.hookimpl(good))})
    opdef = legato.get_op("acme_rc.twice")
    assert (opdef.doc, opdef.onnx, opdef.tolerance, opdef.plugin) == \
        ("Twice the input.", ("AcmeTwice",), 1e-3, "acme_rc")
