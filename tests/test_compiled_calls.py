"""Calling a compiled model: thread-safety for any executor, and bad run-time inputs."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import legato
from legato.runtime.interpreter import Interpreter


class _Counting:
    """An executor that records how many calls are inside it at once."""

    def __init__(self, inner, thread_safe):
        self.inner, self.inside, self.most = inner, 0, 0
        self.guard = threading.Lock()
        if thread_safe:
            self.thread_safe = True

    def __call__(self, *args, **kwargs):
        with self.guard:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.01)  # long enough for the other threads to arrive
        try:
            return self.inner(*args, **kwargs)
        finally:
            with self.guard:
                self.inside -= 1


def _compile_with(backend_factory, name, thread_safe):
    made = []

    def factory(*args):
        made.append(_Counting(Interpreter(*args), thread_safe))
        return made[-1]

    backend_factory({"backend": name, "executes": True,
                     "legal": {"tanh": {"dtypes": ["float32"]}}},
                    kernels={"tanh": np.tanh}, executor=factory)
    b = legato.GraphBuilder()
    mod = b.build(b.call("tanh", b.input("x", (3,))))
    return legato.compile(mod, name), made[0]


@pytest.mark.parametrize("thread_safe", [False, True])
def test_executors_run_concurrently_only_when_they_say_they_are_thread_safe(
        backend_factory, thread_safe):
    compiled, executor = _compile_with(backend_factory, f"counting_{thread_safe}", thread_safe)
    inputs = [np.full(3, v, np.float32) for v in np.linspace(-2, 2, 8)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(compiled, inputs))
    for x, y in zip(inputs, got):
        np.testing.assert_allclose(y, np.tanh(x), rtol=1e-6)
    if thread_safe:
        assert executor.most > 1
    else:
        assert executor.most == 1


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_inputs_numpy_cannot_read_are_an_execution_error_naming_the_input(backend):
    b = legato.GraphBuilder()
    mod = b.build(b.call("tanh", b.input("x", (2, 2))))
    compiled = legato.compile(mod, backend)
    with pytest.raises(legato.ExecutionError, match="input 'x'"):
        compiled([[1.0, 2.0], [3.0]])


@pytest.mark.parametrize("name", [[1], {"a": 1}, 3])
def test_unregistering_by_a_non_string_name_is_a_plugin_error(name):
    with pytest.raises(legato.PluginError, match="a backend name is a string"):
        legato.unregister_backend(name)


def test_compile_recomposes_what_the_backend_keeps():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 5, 16), "float32")
    ms = b.mean(b.power(x, 2.0), axes=[-1], keepdims=True)
    module = b.build(b.multiply(x, b.divide(1.0, b.sqrt(b.add(ms, 1e-6)))))
    c = legato.compile(module, backend="c_kernels")
    assert c.report.recovered == {"nn.rms_norm": 1}
    assert "power" not in {k.op for k in c.module.main.calls}
    assert "recovered nn.rms_norm x1" in c.report.summary()
    assert "recomposed before legalization: nn.rms_norm x1" in str(c.report)
    off = legato.compile(module, backend="c_kernels",
                         config={"backends": {"c_kernels": {"recompose": False}}})
    assert not off.report.recovered and "power" in {k.op for k in off.module.main.calls}
    x_ = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(c(x_), off(x_), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("setting, names", [
    (["nn.gelux"], "unknown op .nn.gelux."), ("nn.gelu", "true, false or a list of op names")])
def test_the_recompose_setting_is_checked(setting, names):
    with pytest.raises(legato.ConfigError, match=names):
        legato.compile("example:mlp", "c_kernels",
                       {"backends": {"c_kernels": {"recompose": setting}}})
