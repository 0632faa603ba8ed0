"""A recovered nn.linear reads its weight through a transposed view of the model's
constant: no copy of the weight per call (0.4 ms for a 768-wide one), and every backend
computes what the model computed."""
import numpy as np
import pytest

import legato
from legato.ir import Const
from legato.passes.recompose import recompose


@pytest.fixture(scope="module")
def linear_module():
    rng = np.random.default_rng(3)
    w_t = rng.standard_normal((8, 16)).astype(np.float32)  # (in, out): the exporter's
    bias = rng.standard_normal(16).astype(np.float32)
    b = legato.GraphBuilder()
    x = b.input("x", (4, 8))
    module = b.build(b.add(b.matmul(x, b.const(w_t)), b.const(bias)))
    feeds = [rng.standard_normal((4, 8)).astype(np.float32)]
    return module, feeds, feeds[0] @ w_t + bias


def test_the_recovered_weight_is_a_view_of_the_constant(linear_module):
    module, feeds, want = linear_module
    back, modified = recompose(module, ops=["nn.linear"])
    (call,) = back.main.calls
    assert modified and call.op == "nn.linear"
    weight = call.inputs[1]
    source = next(v for c in module.main.calls for v in c.inputs
                  if isinstance(v, Const) and v.shape == (8, 16))
    assert isinstance(weight, Const) and weight.shape == (16, 8)
    assert np.shares_memory(weight.data, source.data) and not weight.data.flags.writeable
    np.testing.assert_allclose(legato.reference(back)(*feeds), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_backends_run_the_viewed_weight(linear_module, backend):
    module, feeds, want = linear_module
    back, _ = recompose(module, ops=["nn.linear"])
    compiled = legato.compile(back, backend)
    np.testing.assert_allclose(compiled(*feeds), want, rtol=1e-5, atol=1e-5)


def test_the_text_form_writes_the_viewed_weight_in_its_own_order(linear_module):
    module, feeds, want = linear_module
    back, _ = recompose(module, ops=["nn.linear"])
    again = legato.parse(str(back))
    np.testing.assert_allclose(legato.reference(again)(*feeds), want, rtol=1e-5, atol=1e-5)
