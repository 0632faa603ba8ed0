"""Hooks of the acme3p plugin: its ops (composites, so every backend can run them) and
its backend."""
from importlib.resources import files

import numpy as np

import legato
from legato.ir import TensorType
from legato.testing import Sample


def _same(types, attrs):
    return types[0]


def _softsign(b, x):
    """x / (1 + |x|)."""
    one = b.const(np.ones((), x.dtype))
    return b.divide(x, b.add(one, b.abs(x)))


def _scaled_tanh(b, x, scale):
    """tanh(x * scale) / scale."""
    s = b.const(np.asarray(scale, x.dtype))
    return b.divide(b.tanh(b.multiply(x, s)), s)


def _scaled_tanh_samples(rng):
    """A samples hook: the scale must not be zero."""
    return [Sample("acme3p.scaled_tanh", (rng.standard_normal(shape).astype("float32"),),
                   {"scale": scale})
            for shape, scale in (((3, 4), 0.5), ((), 2.0), ((0, 2), 1.0), ((2, 1, 3), -1.5))]


@legato.hookimpl
def legato_register_ops(register):
    example = [((TensorType((2, 3), "float32"),), {})]
    register("acme3p.softsign", "data", _same, "elemwise", level=1, decompose=_softsign,
             examples=example, doc="x / (1 + |x|)")
    register("acme3p.scaled_tanh", "data", _same, "elemwise", level=1,
             decompose=_scaled_tanh, examples=[((TensorType((2, 3), "float32"),),
                                                {"scale": 2.0})],
             attrs={"scale": ("float", 1.0)}, doc="tanh(x * scale) / scale",
             samples=_scaled_tanh_samples)


@legato.hookimpl
def legato_register_backends(register):
    register(str(files("legato_acme3p") / "capability.yaml"))
