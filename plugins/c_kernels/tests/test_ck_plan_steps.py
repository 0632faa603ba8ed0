"""What the planned executor turns into steps: views of constants are no steps, and
nothing writes into a constant through them."""
import numpy as np

import legato


def test_a_reshaped_constant_is_a_view_of_its_data_not_a_step():
    weights = np.arange(12, dtype=np.float32)
    b = legato.GraphBuilder()
    x = b.input("x", (3, 4))
    w = b.call("reshape", b.const(weights.copy()), shape=[3, 4])
    y = b.call("exp", b.call("add", w, 1.0))  # elementwise: may run in place on a dying input
    mod = b.build(b.call("multiply", y, x))
    c = legato.compile(mod, "c_kernels")
    ops = [step.call.op for step in c._runner.prototype.steps]
    assert "reshape" not in ops and ops[0] == "add", ops
    x_in = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = legato.reference(mod)(x_in)
    for _ in range(3):  # a run that wrote into the constant would change the next one
        np.testing.assert_allclose(c(x_in), want, rtol=1e-6)
    const = next(v for call in c.module.main.calls for v in call.inputs
                 if isinstance(v, legato.ir.Const))
    np.testing.assert_array_equal(const.data.reshape(-1), weights)
