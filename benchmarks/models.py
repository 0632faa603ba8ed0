"""Models end to end: latency of c_kernels against cpu_ref, plain numpy and onnxruntime on
the same computation, GEMM throughput, kept-versus-decomposed layer_norm, executor
overhead per op, and agreement of imported ONNX models with onnxruntime.

    .venv/bin/python benchmarks/models.py [--repeat 30] [--quick]

Everything runs single-threaded (LEGATO_NUM_THREADS=1, BLAS and onnxruntime one thread)
unless the environment says otherwise; every figure is a ratio against a reference
measured in the same run. The models are ONNX graphs built with onnx.helper (`MODELS`):
onnxruntime runs them directly, legato imports them, and the numpy baseline runs their
nodes one numpy call each.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __name__ == "__main__":  # single thread unless told otherwise, before numpy loads BLAS
    for _var in ("LEGATO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

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


# --- latency ------------------------------------------------------------------------------

BENCH_MODELS = {  # the sizes the c_kernels targets are stated for
    "mlp": lambda: mlp(0, batch=64, sizes=(784, 1024, 1024, 10)),
    "block": lambda: transformer(0, batch=1, seq=128, d=256, heads=4, ffn=1024),
}


def median_ms(fn, *args, repeat: int = 30) -> float:
    fn(*args)  # warm up: planning, caches, scratch buffers
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def numpy_runner(model):
    """Run an ONNX graph with one plain numpy call per node (the 'plain numpy' baseline)."""
    from math import sqrt
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def softmax(x, axis):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def layer_norm(x, g, b, axis=-1, epsilon=1e-5):
        mean = x.mean(axis=axis, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
        return (x - mean) / np.sqrt(var + epsilon) * g + b

    def gelu(x):  # erf through the Abramowitz-Stegun 7.1.26 form numpy can vectorize
        z = np.abs(x) / sqrt(2.0)
        t = 1 / (1 + 0.3275911 * z)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
            -1.453152027 + t * 1.061405429))))
        erf_abs = 1 - poly * np.exp(-z * z)
        return 0.5 * x * (1 + np.sign(x) * erf_abs)

    ops = {
        "MatMul": lambda n, a, b: a @ b, "Add": lambda n, a, b: a + b,
        "Mul": lambda n, a, b: a * b, "Relu": lambda n, a: np.maximum(a, 0),
        "Gelu": lambda n, a: gelu(a), "Transpose": lambda n, a: a.transpose(_attr(n, "perm")),
        "Reshape": lambda n, a, shape: a.reshape(shape),
        "Softmax": lambda n, a: softmax(a, _attr(n, "axis", -1)),
        "LayerNormalization": lambda n, x, g, b: layer_norm(x, g, b, _attr(n, "axis", -1)),
        "Gemm": lambda n, a, b, c: a @ (b.T if _attr(n, "transB", 0) else b) + c,
    }

    def run(*inputs):
        env = dict(consts)
        env.update(zip((i.name for i in model.graph.input), inputs))
        for node in model.graph.node:
            env[node.output[0]] = ops[node.op_type](node, *(env[i] for i in node.input))
        return env[model.graph.output[0].name]
    return run


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def latency_table(repeat: int) -> list[str]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    lines = [f"{'model':<6} {'c_kernels':>10} {'cpu_ref':>9} {'numpy':>8} {'ort':>8}   "
             f"{'c/ort':>6} {'cpu_ref/c':>9}   (median ms, single thread)"]
    for name, build in BENCH_MODELS.items():
        model, inputs = build()
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        feeds = {i.name: a for i, a in zip(session.get_inputs(), inputs)}
        module = onnx_frontend.load(model)
        ms = {"c_kernels": median_ms(legato.compile(module, "c_kernels"), *inputs, repeat=repeat),
              "cpu_ref": median_ms(legato.compile(module, "cpu_ref"), *inputs, repeat=repeat),
              "numpy": median_ms(numpy_runner(model), *inputs, repeat=repeat),
              "ort": median_ms(session.run, None, feeds, repeat=repeat)}
        c = ms["c_kernels"]
        lines.append(f"{name:<6} {c:>10.3f} {ms['cpu_ref']:>9.3f} {ms['numpy']:>8.3f} "
                     f"{ms['ort']:>8.3f}   {c / ms['ort']:>6.2f} {ms['cpu_ref'] / c:>9.1f}"
                     f"   target c/ort <= 1.3: {'MEETS' if c / ms['ort'] <= 1.3 else 'MISSES'},"
                     f" cpu_ref/c >= 2: {'MEETS' if ms['cpu_ref'] / c >= 2 else 'MISSES'}")
    return lines


def gemm_table(repeat: int) -> list[str]:
    from legato_c_kernels import kernels as ck
    lines = []
    for n in (512, 1024):
        rng = np.random.default_rng(n)
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        out = np.empty((n, n), np.float32)
        gflop = 2 * n ** 3 / 1e9
        ours = gflop / (median_ms(lambda: ck.matmul(a, b, out=out), repeat=repeat) / 1e3)
        blas = gflop / (median_ms(lambda: np.matmul(a, b, out=out), repeat=repeat) / 1e3)
        lines.append(f"GEMM {n}^3: c_kernels {ours:.1f} GFLOP/s, numpy BLAS {blas:.1f} GFLOP/s,"
                     f" ratio {ours / blas:.2f} (target >= 0.70: "
                     f"{'MEETS' if ours / blas >= 0.7 else 'MISSES'})")
    return lines


def layer_norm_table(repeat: int) -> list[str]:
    """Kept versus decomposed on the same backend, at BERT-base activation sizes: one
    sequence of 128 (fits in L2) and a batch of 8 (streams from memory)."""
    lines = []
    for batch in (1, 8):
        shape = (batch, 128, 768)
        b = legato.GraphBuilder()
        x = b.input("x", shape)
        rng = np.random.default_rng(0)
        gamma, beta = (b.const(rng.standard_normal(768).astype(np.float32)) for _ in range(2))
        module = b.build(b.call("nn.layer_norm", x, gamma, beta))
        data = rng.standard_normal(shape).astype(np.float32)
        kept = median_ms(legato.compile(module, "c_kernels"), data, repeat=repeat * 4)
        decomposed = median_ms(legato.compile(module, "c_kernels", config={"backends": {
            "c_kernels": {"decompose": ["nn.layer_norm"]}}}), data, repeat=repeat * 4)
        ratio = decomposed / kept
        lines.append(f"layer_norm {'x'.join(map(str, shape))} on c_kernels: kept {kept:.3f} ms, "
                     f"decomposed {decomposed:.3f} ms, {ratio:.1f}x (target >= 3: "
                     f"{'MEETS' if ratio >= 3 else 'MISSES'})")
    return lines


def overhead_line(repeat: int, chain: int = 10_000) -> str:
    b = legato.GraphBuilder()
    h = x = b.input("x", (4,))
    for _ in range(chain):
        h = b.call("add", h, x)
    module = b.build(h)
    data = np.ones(4, np.float32)
    per_op = median_ms(legato.compile(module, "c_kernels"), data, repeat=max(3, repeat // 5))
    per_op_ref = median_ms(legato.compile(module, "cpu_ref"), data, repeat=max(3, repeat // 5))
    per_op, per_op_ref = per_op * 1e3 / chain, per_op_ref * 1e3 / chain
    return (f"executor overhead, chain of {chain} adds of 4 floats: c_kernels {per_op:.2f} us "
            f"per op, reference interpreter {per_op_ref:.2f} us per op (target <= 3: "
            f"{'MEETS' if per_op <= 3 else 'MISSES'})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    print(f"threads: LEGATO_NUM_THREADS={os.environ.get('LEGATO_NUM_THREADS', '(default)')}")
    if "c_kernels" in legato.list_backends():
        for line in (*latency_table(args.repeat), *gemm_table(args.repeat),
                     *layer_norm_table(args.repeat), overhead_line(args.repeat)):
            print(line)
    else:
        print("c_kernels is not installed: latency figures skipped")
    print(f"\n{'model':<12} {'backend':<12} {'max rel err':>12} {'legato ms':>10} "
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
