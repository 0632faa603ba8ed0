"""`torch.compile(model, backend="legato")` against eager: the dynamo backend
(legato.frontends.torch.dynamo), found through the `torch_dynamo_backends` entry point. Hugging
Face models through it: tests/zoo/test_zoo_torch_compile.py."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from legato import LegatoError  # noqa: E402
from legato.frontends.torch import dynamo  # noqa: E402

BACKENDS = ("cpu_ref", "c_kernels")


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8),
                         nn.BatchNorm1d(8)).eval()


def close(got, want):
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_matches_eager_and_new_shapes(backend, caplog):
    model, x = mlp(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="legato", options={"backend": backend})
    with caplog.at_level(logging.INFO, logger="legato.dynamo"):
        close(compiled(x), model(x))
        x6 = torch.randn(6, 16)
        close(compiled(x6), model(x6))
    assert f"runs on legato ({backend}) whole" in caplog.text
    # the second shape made dynamo pass symbolic sizes: specialised per call, said once
    assert caplog.text.count("dynamo passed symbolic sizes") == 1


def test_parameters_changed_in_place_are_seen():
    """Parameters are frozen as constants; an in-place write bumps their version, so the
    graph is imported again rather than returning results of the old weights."""
    model, x = mlp(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="legato", options={"backend": "cpu_ref"})
    close(compiled(x), model(x))
    with torch.no_grad():
        model[0].weight.mul_(-2.0)
        model[4].running_mean.add_(3.0)
    close(compiled(x), model(x))
    model[3].weight.data = torch.randn(8, 32)  # new memory, same Parameter
    close(compiled(x), model(x))
    model[3].bias = nn.Parameter(torch.randn(8))  # a new Parameter
    close(compiled(x), model(x))


@torch.library.custom_op("legato_test::numpy_cumsum", mutates_args=())
def numpy_cumsum(x: torch.Tensor) -> torch.Tensor:
    """A custom op legato cannot import: no converter, and its numpy body does not trace."""
    return torch.from_numpy(np.cumsum(x.numpy(), axis=-1))


@numpy_cumsum.register_fake
def _(x):
    return torch.empty_like(x)


class HalfRefused(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.b(torch.ops.legato_test.numpy_cumsum(h) * 0.5), h.sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_refused_op_runs_in_eager_and_is_named(backend, caplog, monkeypatch):
    torch.manual_seed(0)
    model, x = HalfRefused().eval(), torch.randn(3, 8)
    on_legato = []
    run = dynamo.Part.__call__
    monkeypatch.setattr(dynamo.Part, "__call__",
                        lambda self, t: on_legato.append(1) or run(self, t))
    compiled = torch.compile(model, backend="legato", options={"backend": backend})
    with caplog.at_level(logging.INFO, logger="legato.dynamo"):
        got = compiled(x)
        compiled(x)
    for g, w in zip(got, model(x)):
        close(g, w)
    assert len(on_legato) == 4  # two legato parts around the custom op, per call
    said = [r for r in caplog.records if "stay in PyTorch" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING  # once per graph
    assert "legato_test.numpy_cumsum.default x1" in said[0].getMessage()


def test_training_dropout_stays_in_pytorch(caplog):
    """A random op legato refuses (dropout in training) runs in PyTorch, the rest on
    legato: the result keeps dropout's randomness (zeros where it dropped)."""
    model = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5), nn.ReLU()).train()
    compiled = torch.compile(model, backend="legato", options={"backend": "cpu_ref"})
    with caplog.at_level(logging.WARNING, logger="legato.dynamo"):
        out = compiled(torch.randn(32, 8))
    assert "aten.native_dropout.default x1" in caplog.text and "random" in caplog.text
    assert 0.3 < (out == 0).float().mean().item() < 0.9  # relu's zeros and dropout's


class RefusedTwice(nn.Module):
    """A custom op legato has no converter for, then dropout in training, which the
    importer's converter refuses only when the part holding it is imported."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = self.b(torch.ops.legato_test.numpy_cumsum(torch.relu(self.a(x))))
        return self.c(nn.functional.dropout(torch.tanh(h), 0.25, training=True))


def test_refusing_converter_splits_its_part_again(caplog, monkeypatch):
    torch.manual_seed(0)
    model, x = RefusedTwice(), torch.randn(3, 8)
    on_legato = []
    run = dynamo.Part.__call__
    monkeypatch.setattr(dynamo.Part, "__call__",
                        lambda self, t: on_legato.append(1) or run(self, t))
    compiled = torch.compile(model, backend="legato", options={"backend": "cpu_ref"})
    with caplog.at_level(logging.WARNING, logger="legato.dynamo"):
        torch.manual_seed(1)
        got = compiled(x)
    torch.manual_seed(1)
    close(got, model(x))  # the same dropout mask: PyTorch drew it in both
    assert len(on_legato) == 3  # a; b, tanh; c: dropout split the second part again
    assert "legato_test.numpy_cumsum.default x1" in caplog.text
    assert "aten.native_dropout.default x1" in caplog.text
    assert "runs in eager" not in caplog.text


def test_in_place_graph_runs_in_eager(caplog):
    def bump(x):
        x.add_(1.0)
        return x * 2.0

    x, want = torch.zeros(3), torch.full((3,), 2.0)
    with caplog.at_level(logging.WARNING, logger="legato.dynamo"):
        got = torch.compile(bump, backend="legato")(x)
    close(got, want)
    close(x, torch.ones(3))
    assert "writes in place" in caplog.text


def test_options_are_legato_compiles():
    assert dynamo.compile_options({"backend": ["c_kernels", "cpu_ref"]})["backend"] == \
        ["c_kernels", "cpu_ref"]
    assert dynamo.compile_options(None)["backend"] == dynamo.default_backend() != "cpu_ref"
    with pytest.raises(LegatoError, match=r"\['threads'\] are not known"):
        dynamo.compile_options({"threads": 2})
    with pytest.raises(LegatoError, match="tosa_custom emits code and does not execute"):
        dynamo.compile_options({"backend": "tosa_custom"})


def test_partitioned_backends_and_max_level():
    model, x = mlp(), torch.randn(4, 16)
    for options in ({"backend": ["c_kernels", "cpu_ref"]},
                    {"backend": "cpu_ref", "max_level": 0}):
        torch._dynamo.reset()
        close(torch.compile(model, backend="legato", options=options)(x), model(x))


def test_backend_name_works_without_importing_legato():
    """The entry point alone makes the name known: the user's code never imports legato."""
    script = textwrap.dedent("""
        import sys, torch
        assert "legato" in torch._dynamo.list_backends()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()
        x = torch.randn(2, 8)
        got = torch.compile(model, backend="legato")(x)
        assert "legato.frontends.torch.dynamo" in sys.modules  # it ran through legato
        print(float((got - model(x)).abs().max()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 1e-5


def test_tensors_cross_without_copies():
    x = torch.randn(4, 5)
    assert np.shares_memory(dynamo.to_numpy(x), x.numpy())
    array = np.ones((2, 3), np.float32)
    assert np.shares_memory(dynamo.to_torch(array).numpy(), array)
    close(dynamo.to_torch(dynamo.to_numpy(x.t())), x.t())  # strided: a contiguous copy
