"""Models end to end: ONNX versions of the example models, imported into legato, compiled
for every executing backend and compared with onnxruntime on the same inputs.

    .venv/bin/python benchmarks/models.py [--seed N]

Each model is a function returning (ONNX ModelProto, inputs); latency benchmarks can run
the same models (`MODELS`). Prints, per model and backend, the max relative error against
onnxruntime and the time of one run of each.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import legato
from legato.frontends import onnx as onnx_frontend

OPSET = 20  # the first with Gelu
F32 = TensorProto.FLOAT


class _Graph:
    """A tiny ONNX graph builder: nodes with fresh names, random float32 initializers."""

    def __init__(self, seed: int):
        self.rng, self.nodes, self.inits, self.count = np.random.default_rng(seed), [], [], 0

    def weight(self, *shape, scale=None, offset=0.0, dtype=np.float32):
        scale = 1 / np.sqrt(shape[-1]) if scale is None else scale
        return self.const((self.rng.standard_normal(shape) * scale + offset).astype(dtype))

    def const(self, array) -> str:
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def __call__(self, op, *inputs, outputs=1, **attrs) -> str | list[str]:
        self.count += 1
        names = [f"{op.lower()}{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, name=names[0], **attrs))
        return names[0] if outputs == 1 else names

    def model(self, inputs, output: str):
        graph = helper.make_graph(self.nodes, "model",
                                  [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
                                  [helper.make_tensor_value_info(output, F32, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                 ir_version=9)  # what opset 20 needs; onnxruntime reads it


def transformer(seed=0, batch=1, seq=32, d=64, heads=4, ffn=256):
    """A pre-LN encoder block, as example:transformer."""
    g, dh = _Graph(seed), d // heads
    x = "x"

    def norm(h):
        return g("LayerNormalization", h, g.weight(d, scale=0.1, offset=1.0),
                 g.weight(d, scale=0.1), axis=-1)

    def heads_of(h, perm):
        h = g("Reshape", g("MatMul", h, g.weight(d, d)), g.const(np.array([batch, seq, heads, dh])))
        return g("Transpose", h, perm=perm)

    h = norm(x)
    q, k, v = heads_of(h, [0, 2, 1, 3]), heads_of(h, [0, 2, 3, 1]), heads_of(h, [0, 2, 1, 3])
    scores = g("Mul", g("MatMul", q, k), g.const(np.float32(1 / np.sqrt(dh))))
    attn = g("MatMul", g("Softmax", scores, axis=-1), v)
    attn = g("Reshape", g("Transpose", attn, perm=[0, 2, 1, 3]),
             g.const(np.array([batch, seq, d])))
    x = g("Add", x, g("MatMul", attn, g.weight(d, d)))
    h = g("Gelu", g("Add", g("MatMul", norm(x), g.weight(d, ffn)), g.weight(ffn, scale=0.02)))
    out = g("Add", x, g("MatMul", h, g.weight(ffn, d)))
    return g.model([("x", [batch, seq, d])], out), [_normal(seed, (batch, seq, d))]


def cnn(seed=0, batch=1, size=32):
    """Conv-BN-ReLU, pooling and a classifier head, as example:cnn."""
    g = _Graph(seed)
    h = "x"
    for c_in, c_out in ((3, 16), (16, 32)):
        h = g("Conv", h, g.weight(c_out, c_in, 3, 3, scale=0.2), g.weight(c_out, scale=0.1),
              pads=[1, 1, 1, 1])
        h = g("BatchNormalization", h, g.weight(c_out, scale=0.1, offset=1.0),
              g.weight(c_out, scale=0.1), g.weight(c_out, scale=0.1),
              g.const(np.abs(g.rng.standard_normal(c_out)).astype(np.float32) + 0.5))
        h = g("MaxPool", g("Relu", h), kernel_shape=[2, 2], strides=[2, 2])
    h = g("Flatten", g("GlobalAveragePool", h))
    out = g("Softmax", g("Gemm", h, g.weight(10, 32), g.weight(10, scale=0.1), transB=1))
    return g.model([("x", [batch, 3, size, size])], out), [_normal(seed, (batch, 3, size, size))]


def mlp(seed=0, batch=8, sizes=(64, 128, 128, 10)):
    """Gemm + ReLU layers and a softmax, as example:mlp."""
    g = _Graph(seed)
    h = "x"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        h = g("Gemm", h, g.weight(n_in, n_out), g.weight(n_out, scale=0.1))
        h = g("Relu", h) if i < len(sizes) - 2 else g("Softmax", h, axis=-1)
    return g.model([("x", [batch, sizes[0]])], h), [_normal(seed, (batch, sizes[0]))]


def _normal(seed, shape):
    return np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32)


MODELS = {"transformer": transformer, "cnn": cnn, "mlp": mlp}


def _timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - start) * 1e3


def compare_with_onnxruntime(name: str, seed: int = 0) -> list[tuple[str, float, float, float]]:
    """(backend, max relative error vs onnxruntime, legato ms, onnxruntime ms) per backend."""
    import onnxruntime as ort
    model, inputs = MODELS[name](seed)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), inputs)}
    session.run(None, feeds)  # warm up
    (want,), ort_ms = _timed(session.run, None, feeds)
    module = onnx_frontend.load(model)
    rows = []
    for backend in legato.list_backends():
        if not legato.get_backend(backend).executes:
            continue
        compiled = legato.compile(module, backend)
        compiled(*inputs)
        got, ms = _timed(compiled, *inputs)
        scale = max(float(np.max(np.abs(want))), 1e-30)
        rows.append((backend, float(np.max(np.abs(got - want))) / scale, ms, ort_ms))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    print(f"{'model':<12} {'backend':<12} {'max rel err':>12} {'legato ms':>10} "
          f"{'ort ms':>8} {'ratio':>7}")
    failed = 0
    for name in MODELS:
        for backend, err, ms, ort_ms in compare_with_onnxruntime(name, args.seed):
            failed += err > args.tolerance
            print(f"{name:<12} {backend:<12} {err:>12.2e} {ms:>10.2f} {ort_ms:>8.3f} "
                  f"{ms / ort_ms:>7.1f}  {'ok' if err <= args.tolerance else 'MISMATCH'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
