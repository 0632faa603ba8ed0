"""Built-in example models, named `example:<name>` on the command line."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..ir import Module
from ..ir.builder import GraphBuilder
from ..ir.errors import ExecutionError, LegatoError
from ..ir.symbols import symbolic_dims
from ..ops.registry import suggest


class _Weights:
    """Deterministic weights, as constants or as extra inputs of the model."""

    def __init__(self, b: GraphBuilder, seed: int, as_inputs: bool):
        self.b, self.rng, self.as_inputs = b, np.random.default_rng(seed), as_inputs
        self.count = 0

    def __call__(self, *shape, scale: float | None = None, offset: float = 0.0):
        scale = 1 / np.sqrt(shape[-1]) if scale is None else scale
        self.count += 1
        if self.as_inputs:
            return self.b.input(f"w{self.count}", shape, "float32")
        data = self.rng.standard_normal(shape) * scale + offset
        return self.b.const(data.astype(np.float32))


def transformer(batch: int = 1, seq: int = 32, d_model: int = 64, heads: int = 4,
                ffn: int = 256, blocks: int = 1, seed: int = 0,
                weights_as_inputs: bool = False, use_linear: bool = True) -> Module:
    """Pre-LN encoder blocks: x + attn(ln(x)), then x + ffn(ln(x)) with GELU.

    `use_linear=False` spells projections as matmuls (24 calls a block, no biases but the
    FFN's first), the form benchmarks/legalize.py times.
    """
    b = GraphBuilder()
    x = b.input("x", (batch, seq, d_model))
    w = _Weights(b, seed, weights_as_inputs)
    dh = d_model // heads

    def project(h, n_in, n_out, bias=use_linear):
        if use_linear:
            return b.call("nn.linear", h, w(n_out, n_in), w(n_out, scale=0.02) if bias else None)
        return b.matmul(h, w(n_in, n_out))

    for _ in range(blocks):
        h = b.call("nn.layer_norm", x, w(d_model, scale=0.1, offset=1.0), w(d_model, scale=0.1))
        q, k, v = (b.reshape(project(h, d_model, d_model), shape=[batch, seq, heads, dh])
                   for _ in range(3))
        q = b.permute_dims(q, axes=[0, 2, 1, 3])
        k = b.permute_dims(k, axes=[0, 2, 3, 1])
        v = b.permute_dims(v, axes=[0, 2, 1, 3])
        scores = b.multiply(b.matmul(q, k), b.scalar(1 / np.sqrt(dh), "float32"))
        attn = b.matmul(b.call("nn.softmax", scores, axis=-1), v)
        attn = b.reshape(b.permute_dims(attn, axes=[0, 2, 1, 3]), shape=[batch, seq, d_model])
        x = b.add(x, project(attn, d_model, d_model))
        h = b.call("nn.layer_norm", x, w(d_model, scale=0.1, offset=1.0), w(d_model, scale=0.1))
        h = project(h, d_model, ffn)
        if not use_linear:
            h = b.add(h, w(ffn, scale=0.02))
        h = project(b.call("nn.gelu", h), ffn, d_model)
        x = b.add(x, h)
    return b.build(x)


def cnn(batch: int = 1, size: int = 16, seed: int = 0) -> Module:
    """conv-bn-relu-maxpool, conv-relu, global average pool, linear, softmax (NCHW)."""
    b = GraphBuilder()
    w = _Weights(b, seed, False)
    x = b.input("x", (batch, 3, size, size))
    h = b.call("nn.conv2d", x, w(8, 3, 3, 3, scale=0.3), w(8, scale=0.1), padding=[1, 1, 1, 1])
    h = b.call("nn.batch_norm", h, w(8, scale=0.1, offset=1.0), w(8, scale=0.1),
               w(8, scale=0.1), w(8, scale=0.1, offset=1.0))
    h = b.call("nn.max_pool2d", b.call("nn.relu", h), pool_size=[2, 2])
    h = b.call("nn.conv2d", h, w(16, 8, 3, 3, scale=0.2), w(16, scale=0.1),
               padding=[1, 1, 1, 1], strides=[2, 2])
    h = b.call("nn.relu", h)
    h = b.call("nn.avg_pool2d", h, pool_size=list(h.shape[2:]))
    h = b.call("flatten", h, axis=1)
    h = b.call("nn.linear", h, w(10, 16), w(10, scale=0.1))
    return b.build(b.call("nn.softmax", h, axis=-1))


def mlp(batch: int = 8, sizes=(64, 128, 128, 10), seed: int = 0) -> Module:
    """Linear layers with ReLU between them."""
    b = GraphBuilder()
    w = _Weights(b, seed, False)
    h = b.input("x", (batch, sizes[0]))
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        h = b.call("nn.linear", h, w(n_out, n_in), w(n_out, scale=0.1))
        if i < len(sizes) - 2:
            h = b.call("nn.relu", h)
    return b.build(h)


def layernorm(seed: int = 0) -> Module:
    """torch.nn.LayerNorm(4) on a 4x4 input, as in torch-mlir's selective-decomposition RFC."""
    b = GraphBuilder()
    x = b.input("x", (4, 4))
    gamma, beta = b.const(np.ones(4, np.float32)), b.const(np.zeros(4, np.float32))
    return b.build(b.call("nn.layer_norm", x, gamma, beta, axes=[-1], epsilon=1e-5))


EXAMPLES: dict[str, Callable[[], Module]] = {
    "transformer": transformer, "cnn": cnn, "mlp": mlp, "layernorm": layernorm}


def example(name: str) -> Module:
    key = name.removeprefix("example:")
    if key not in EXAMPLES:
        raise LegatoError(f"unknown example {name!r}{suggest(key, EXAMPLES)}; "
                          f"examples: {', '.join('example:' + k for k in EXAMPLES)}")
    return EXAMPLES[key]()


RANDOM_INPUTS_LIMIT = 1 << 30  # bytes of random inputs `legato run` makes up
_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "float16": 2, "bfloat16": 2,
             "int32": 4, "float32": 4}


def random_inputs(module: Module, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for `main`: standard normal floats, small non-negative ints, bools."""
    rng = np.random.default_rng(seed)
    arrays = []
    total = 0
    for p in module.main.params:
        if p.type.symbolic:
            free = symbolic_dims([p])
            raise ExecutionError(
                f"input {p.name!r} ({p.type}) has symbolic dimensions ({', '.join(free)}): "
                f"random inputs need sizes, e.g. --shape {free[0]}=SIZE (input_shapes= in "
                "Python), or run the model with inputs of your own")
        nbytes = p.type.size * _ITEMSIZE.get(p.dtype, 8)
        total += nbytes
        if total > RANDOM_INPUTS_LIMIT:
            raise ExecutionError(
                f"input {p.name!r} ({p.type}, {nbytes:,} bytes) takes the random inputs past "
                f"{RANDOM_INPUTS_LIMIT >> 20} MiB; run the model with inputs of your own")
        if p.dtype == "bool":
            arrays.append(rng.random(p.shape) < 0.5)
        elif p.dtype.startswith(("int", "uint")):
            arrays.append(rng.integers(0, 8, p.shape).astype(p.dtype))
        else:
            if p.dtype == "bfloat16":
                _bfloat16()
            arrays.append(rng.standard_normal(p.shape).astype(p.dtype))
    return arrays


def _bfloat16() -> None:
    """numpy knows bfloat16 once ml_dtypes is imported."""
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        raise LegatoError("bfloat16 inputs need the ml_dtypes package") from None
