"""Fuzz target: ONNX models with symbolic dims, compiled once and run at several sizes.

Each case builds a small ONNX model whose inputs have symbolic dims (dim_params such as
batch and seq, sometimes an unnamed dynamic dim, sometimes two inputs sharing a symbol)
and a short random chain of shape-polymorphic ops: elementwise and broadcast ops,
MatMul/Gemm against constant weights, attention-like x @ x^T and softmax(x @ k^T) @ k
against an input of another length, Transpose, Softmax,
LayerNormalization, ReduceMean/ReduceSum (keepdims either way), Concat along a symbolic
axis, Slice with constant ends or ends read from Shape, the exporters' Shape -> Gather ->
Mul -> Concat -> Reshape to [batch*seq, -1] and back, Expand to a Shape, Where,
Range(0, Shape[i]) and Range(past, past + seq), sizes cast to floats in arithmetic, Gather
of a table by symbolic index tensors and of the last position by Shape - 1,
ConstantOfShape, Unsqueeze/Squeeze, Flatten and Pad.

The model is saved to a file and `legato.compile(path, backend)` runs ONCE per backend
(cpu_ref, c_kernels; no input_shapes), then each compiled model runs at 3-4 bindings of
the symbols (one with every symbol 1, sometimes one with a symbol 0, then the first again
with other values) against onnxruntime.
A LegatoError at compile or run (a guard broken, a size legato cannot express) is an
answer: the case is "refused" when any binding was refused, though every other binding is
still checked. A raw exception or a different number is a problem.
"""
from __future__ import annotations

import os
import random
import tempfile

import numpy as np

import legato
from tests.fuzz import Mismatch
from tests.fuzz.program_checks import compare_outputs

QUICK_CASES = 12
CASE_TIMEOUT = 60.0
BACKENDS = ("cpu_ref", "c_kernels")
NAMES = ("batch", "seq", "past", "n")
INT_MAX = 2 ** 63 - 1

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # every case is skipped without onnx
    onnx = None


def symbolic(dim) -> bool:
    return isinstance(dim, str)


def plain(dim) -> bool:
    """A dim a fresh input may repeat: a size or a named symbol (not a product, not an
    unnamed dim, which only its own input carries)."""
    return isinstance(dim, int) or (symbolic(dim) and dim.isidentifier())


class NoValue(Exception):
    """No value of the pool fits a generator."""


class Graph:
    """The model under construction; values are (name, dims), dims ints or symbol names
    (products of symbols as text such as 'batch*seq')."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.nodes, self.inputs, self.inits = [], [], []
        self.input_dims: dict[str, tuple] = {}
        self.index_inputs: dict[str, int] = {}   # int64 inputs: their exclusive upper bound
        self.pool: list[tuple[str, tuple]] = []
        self.count = 0
        self.ops: list[str] = []
        self.symbols: list[str] = []
        self.unnamed = 0

    def name(self, prefix="v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def symbol(self) -> str:
        if self.symbols and self.chance(0.6):
            return self.rng.choice(self.symbols)
        fresh = [n for n in NAMES if n not in self.symbols]
        if not fresh or self.chance(0.1):
            self.unnamed += 1
            return f"?{self.unnamed}"
        self.symbols.append(fresh[0])
        return fresh[0]

    def dims(self, rank: int) -> tuple:
        dims = [self.symbol() if self.chance(0.5) else self.rng.randint(1, 5)
                for _ in range(rank)]
        if not any(symbolic(d) for d in dims):
            dims[self.rng.randrange(rank)] = self.symbol()
        return tuple(dims)

    def input(self, dims, dtype=TensorProto.FLOAT if onnx else None, bound=None) -> str:
        name = self.name("in")
        onnx_dims = [None if symbolic(d) and d.startswith("?") else d for d in dims]
        self.inputs.append(helper.make_tensor_value_info(name, dtype, onnx_dims))
        self.input_dims[name] = tuple(dims)
        if bound is not None:
            self.index_inputs[name] = bound
        return name

    def const(self, array) -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, values) -> str:
        return self.const(np.array(values, np.int64))

    def floats(self, shape) -> str:
        return self.const(self.np.standard_normal(shape).astype(np.float32))

    def node(self, op, inputs, **attrs) -> str:
        out = self.name()
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.ops.append(op)
        return out

    def value(self, min_rank=0):
        """A float value of the pool (the newest more often)."""
        fit = [v for v in self.pool if len(v[1]) >= min_rank]
        if not fit:
            raise NoValue
        return fit[-1] if self.chance(0.5) else self.rng.choice(fit)

    def add(self, name, dims):
        self.pool.append((name, tuple(dims)))
        return name, tuple(dims)

    def size_of(self, x: str, axis: int, scalar=False) -> str:
        """Shape(x)[axis] as int64[1] (or a scalar)."""
        shape = self.node("Shape", [x])
        index = self.ints(axis if scalar else [axis])
        return self.node("Gather", [shape, index], axis=0)

    def model(self, outputs):
        graph = helper.make_graph(self.nodes, "symbolic", self.inputs,
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                   for o in outputs], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                 ir_version=8)


def partner(g: Graph, dims) -> str:
    """A value that broadcasts with `dims`: a fresh input repeating its plain dims (1 for
    the rest), or a constant with 1 at every symbolic dim; sometimes a suffix only."""
    keep = len(dims) if g.chance(0.7) else g.rng.randint(0, len(dims))
    dims = dims[len(dims) - keep:]
    if g.chance(0.1) and dims:  # another symbol where `dims` has one: a binding where
        # they differ and neither is 1 is refused by onnxruntime (and skipped)
        return g.input(tuple(g.symbol() if symbolic(d) or g.chance(0.3) else d
                             for d in dims))
    if g.chance(0.5) and any(symbolic(d) and plain(d) for d in dims):
        return g.input(tuple(d if plain(d) and not g.chance(0.2) else 1 for d in dims))
    return g.floats(tuple(1 if symbolic(d) or g.chance(0.2) else d for d in dims))


# --- generators: each adds nodes and returns the new (name, dims), or None -----------

def gen_binary(g: Graph):
    x, dims = g.value()
    op = g.rng.choice(["Add", "Sub", "Mul", "Max", "Add"])
    other = partner(g, dims)
    inputs = [x, other] if g.chance(0.6) else [other, x]
    return g.add(g.node(op, inputs), dims)


def gen_unary(g: Graph):
    x, dims = g.value()
    op = g.rng.choice(["Tanh", "Relu", "Sigmoid", "Neg", "Abs"])
    return g.add(g.node(op, [x]), dims)


def gen_matmul(g: Graph):
    x, dims = g.value(min_rank=1)
    if symbolic(dims[-1]) or g.chance(0.3):
        if len(dims) < 2 or not isinstance(dims[-1], int):
            return None
        # attention scores: x @ x^T over the last two dims
        perm = list(range(len(dims)))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        xt = g.node("Transpose", [x], perm=perm)
        return g.add(g.node("MatMul", [x, xt]), dims[:-1] + (dims[-2],))
    n = g.rng.randint(1, 6)
    w = g.floats((dims[-1], n))
    out = g.node("MatMul", [x, w])
    if g.chance(0.5):
        out = g.node("Add", [out, g.floats((n,))])
    return g.add(out, dims[:-1] + (n,))


def gen_gemm(g: Graph):
    x, dims = g.value(min_rank=1)
    if symbolic(dims[-1]) or len(dims) < 1:
        return None
    if len(dims) != 2:
        x = g.node("Flatten", [x], axis=len(dims) - 1)
        dims = (join(dims[:-1]), dims[-1])
    k, n = dims[1], g.rng.randint(1, 6)
    trans = g.rng.choice([0, 1])
    w = g.floats((n, k) if trans else (k, n))
    inputs = [x, w] + ([g.floats((n,))] if g.chance(0.6) else [])
    return g.add(g.node("Gemm", inputs, transB=trans, alpha=g.rng.choice([1.0, 0.5])),
                 (dims[0], n))


def gen_transpose(g: Graph):
    x, dims = g.value(min_rank=2)
    perm = list(range(len(dims)))
    g.rng.shuffle(perm)
    return g.add(g.node("Transpose", [x], perm=perm), tuple(dims[p] for p in perm))


def gen_softmax(g: Graph):
    x, dims = g.value(min_rank=1)
    axis = g.rng.randrange(-len(dims), len(dims))
    return g.add(g.node(g.rng.choice(["Softmax", "LogSoftmax"]), [x], axis=axis), dims)


def gen_layernorm(g: Graph):
    x, dims = g.value(min_rank=1)
    axis = len(dims)
    while axis > 0 and isinstance(dims[axis - 1], int) and g.chance(0.7):
        axis -= 1
    if axis == len(dims):
        return None
    normalized = dims[axis:]
    inputs = [x, g.floats(normalized)] + ([g.floats(normalized)] if g.chance(0.5) else [])
    return g.add(g.node("LayerNormalization", inputs, axis=axis - len(dims) if g.chance(0.5)
                        else axis, epsilon=1e-5), dims)


def gen_reduce(g: Graph):
    x, dims = g.value(min_rank=1)
    axes = sorted(g.rng.sample(range(len(dims)), g.rng.randint(1, len(dims))))
    keep = g.rng.choice([0, 1])
    # (the mean of nothing is undefined in ONNX: onnxruntime says 0, legato NaN; so a mean
    # only over sizes and symbols, which are 0 at no binding but the one that avoids it)
    nonempty = all(plain(dims[a]) and dims[a] != 0 for a in axes)
    op = g.rng.choice(["ReduceMean", "ReduceSum"]) if nonempty else "ReduceSum"
    out = g.node(op, [x, g.ints(axes)], keepdims=keep)
    left = tuple(1 if i in axes else d for i, d in enumerate(dims)) if keep else \
        tuple(d for i, d in enumerate(dims) if i not in axes)
    return g.add(out, left)


def gen_concat(g: Graph):
    x, dims = g.value(min_rank=1)
    axes = [i for i, d in enumerate(dims) if symbolic(d)] or list(range(len(dims)))
    axis = g.rng.choice(axes)
    if g.chance(0.4) or not all(plain(d) or i == axis for i, d in enumerate(dims)):
        other, size = g.node("Tanh", [x]), dims[axis]
    else:
        size = g.symbol() if g.chance(0.5) else g.rng.randint(1, 3)
        if symbolic(size) and size.startswith("?") and g.chance(0.5):
            size = 2
        other = g.input(dims[:axis] + (size,) + dims[axis + 1:])
    total = f"{dims[axis]}+{size}"
    return g.add(g.node("Concat", [x, other], axis=axis - len(dims) if g.chance(0.3) else axis),
                 dims[:axis] + (total,) + dims[axis + 1:])


def join(dims) -> int | str:
    """The product of `dims`: an int when every dim is one, else its text."""
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims, dtype=np.int64))
    return "*".join(map(str, dims))


def gen_slice(g: Graph):
    x, dims = g.value(min_rank=1)
    axis = g.rng.randrange(len(dims))
    start, step = g.rng.choice([0, 0, 1]), g.rng.choice([1, 1, 2])
    kind = g.rng.choice(["const", "shape", "shape-1", "half"])
    if kind == "const":
        end = g.rng.choice([INT_MAX, -1, 2, 3])
        ends = g.ints([end])
    else:
        ends = g.size_of(x, axis)
        if kind != "shape":
            ends = g.node("Sub" if kind == "shape-1" else "Div", [ends, g.ints([1 + (kind == "half")])])
    out = g.node("Slice", [x, g.ints([start]), ends, g.ints([axis]), g.ints([step])])
    size = dims[axis]
    if isinstance(size, int):
        if kind != "const":
            end = {"shape": size, "shape-1": size - 1, "half": size // 2}[kind]
        size = len(range(size)[start:end:step])
    else:
        size = f"slice({size})"
    return g.add(out, dims[:axis] + (size,) + dims[axis + 1:])


def gen_merge_reshape(g: Graph):
    """The exporters' head merge: reshape to [d0*d1, -1] from Shape, and sometimes back."""
    x, dims = g.value(min_rank=2)
    shape = g.node("Shape", [x])
    d0 = g.node("Gather", [shape, g.ints([0])], axis=0)
    d1 = g.node("Gather", [shape, g.ints([1])], axis=0)
    merged = g.node("Mul", [d0, d1])
    if g.chance(0.7):
        rest, tail = g.ints([-1]), (join(dims[2:]),)
    else:
        rest, tail = g.node("Slice", [shape, g.ints([2]), g.ints([INT_MAX])]), dims[2:]
    flat = g.node("Reshape", [x, g.node("Concat", [merged, rest], axis=0)])
    if g.chance(0.6):
        back = g.node("Concat", [d0, d1, g.ints([-1])], axis=0)
        return g.add(g.node("Reshape", [flat, back]), dims[:2] + (join(dims[2:]),))
    return g.add(flat, (join(dims[:2]),) + tail)


def gen_expand(g: Graph):
    x, dims = g.value(min_rank=1)
    small = g.floats(tuple(1 if symbolic(d) or g.chance(0.3) else d for d in dims))
    out = g.node("Expand", [small, g.node("Shape", [x])])
    if g.chance(0.5):
        out = g.node("Mul", [out, x])
    return g.add(out, dims)


def gen_where(g: Graph):
    x, dims = g.value()
    cond = g.node("Greater", [x, g.const(np.float32(g.rng.choice([0.0, 0.5])))])
    other = partner(g, dims)
    inputs = [cond, x, other] if g.chance(0.5) else [cond, other, x]
    return g.add(g.node("Where", inputs), dims)


def gen_range(g: Graph):
    """Range(0, Shape[axis]) cast to float, broadcast along that axis; or a size cast to
    float as a scale."""
    x, dims = g.value(min_rank=1)
    axis = g.rng.randrange(len(dims))
    n = g.size_of(x, axis, scalar=True)
    if g.chance(0.4):
        scale = g.node("Cast", [g.node("Add", [n, g.ints(1)])], to=TensorProto.FLOAT)
        return g.add(g.node(g.rng.choice(["Div", "Mul"]), [x, scale]), dims)
    r = g.node("Cast", [g.node("Range", [g.ints(0), n, g.ints(1)])], to=TensorProto.FLOAT)
    trailing = len(dims) - axis - 1
    if trailing:
        r = g.node("Unsqueeze", [r, g.ints(list(range(1, trailing + 1)))])
    return g.add(g.node("Add", [x, r]), dims)


def gen_embedding(g: Graph):
    """A table gathered by a fresh int64 input of symbolic dims (a token embedding)."""
    rows, width = g.rng.randint(2, 9), g.rng.randint(1, 6)
    ids = g.input(g.dims(g.rng.randint(1, 2)), TensorProto.INT64, bound=rows)
    out = g.node("Gather", [g.floats((rows, width)), ids], axis=0)
    return g.add(out, g.input_dims[ids] + (width,))


def gen_unsqueeze(g: Graph):
    x, dims = g.value()
    axis = g.rng.randint(0, len(dims))
    out = g.node("Unsqueeze", [x, g.ints([axis])])
    if g.chance(0.4):
        return g.add(g.node("Squeeze", [out, g.ints([axis])]), dims)
    return g.add(out, dims[:axis] + (1,) + dims[axis:])


def gen_flatten(g: Graph):
    x, dims = g.value(min_rank=1)
    axis = g.rng.randint(0, len(dims))
    return g.add(g.node("Flatten", [x], axis=axis), (join(dims[:axis]), join(dims[axis:])))


def gen_pad(g: Graph):
    x, dims = g.value(min_rank=1)
    rank = len(dims)
    pads = [g.rng.choice([0, 0, 1, 2]) for _ in range(2 * rank)]
    inputs = [x, g.ints(pads), g.const(np.float32(g.rng.choice([0.0, 1.5])))]
    out = g.node("Pad", inputs, mode="constant")
    grown = [pads[i] + pads[i + rank] for i in range(rank)]
    return g.add(out, tuple(d + more if isinstance(d, int) else (f"{d}+{more}" if more else d)
                            for d, more in zip(dims, grown)))


def gen_constant_of_shape(g: Graph):
    """ConstantOfShape(Shape(x)) as exporters build masks, mixed back into x."""
    x, dims = g.value(min_rank=1)
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [g.rng.choice([0.5, 2.0])])
    ones = g.node("ConstantOfShape", [g.node("Shape", [x])], value=fill)
    return g.add(g.node(g.rng.choice(["Mul", "Add"]), [x, ones]), dims)


def gen_last(g: Graph):
    """x[..., -1, ...] along a symbolic axis by the index Shape[axis] - 1 (a decoder's
    last token), or a negative constant."""
    x, dims = g.value(min_rank=1)
    axes = [i for i, d in enumerate(dims) if symbolic(d)] or list(range(len(dims)))
    axis = g.rng.choice(axes)
    if g.chance(0.5):
        index = g.node("Sub", [g.size_of(x, axis, scalar=True), g.ints(1)])
    else:
        index = g.ints(-1)
    return g.add(g.node("Gather", [x, index], axis=axis), dims[:axis] + dims[axis + 1:])


def gen_shifted_range(g: Graph):
    """Range(a, a + b) over two sizes (a decoder's positions past .. past + seq), cast to
    float and added along the last axis of the second."""
    x, dims = g.value(min_rank=1)
    other, other_dims = g.value(min_rank=1)
    start = g.size_of(other, g.rng.randrange(len(other_dims)), scalar=True)
    count = g.size_of(x, len(dims) - 1, scalar=True)
    positions = g.node("Range", [start, g.node("Add", [start, count]), g.ints(1)])
    return g.add(g.node("Add", [x, g.node("Cast", [positions], to=TensorProto.FLOAT)]), dims)


def gen_expand_built(g: Graph):
    """x with a new axis expanded to a shape concatenated from Shape gathers and a
    constant: [d0, k, d1, ...] (exporters' repeat_kv)."""
    x, dims = g.value(min_rank=1)
    k = g.rng.randint(1, 3)
    shape = g.node("Shape", [x])
    parts = [g.node("Gather", [shape, g.ints([i])], axis=0) for i in range(len(dims))]
    target = g.node("Concat", parts[:1] + [g.ints([k])] + parts[1:], axis=0)
    out = g.node("Expand", [g.node("Unsqueeze", [x, g.ints([1])]), target])
    return g.add(out, dims[:1] + (k,) + dims[1:])


def gen_cross_attention(g: Graph):
    """softmax(x @ k^T) @ k against a fresh input k whose length is another symbol (a
    cache's past), sharing x's batch dims."""
    x, dims = g.value(min_rank=2)
    if not isinstance(dims[-1], int) or not all(plain(d) for d in dims[:-2]):
        return None
    k = g.input(dims[:-2] + (g.symbol(), dims[-1]))
    perm = list(range(len(dims)))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scores = g.node("MatMul", [x, g.node("Transpose", [k], perm=perm)])
    return g.add(g.node("MatMul", [g.node("Softmax", [scores], axis=-1), k]), dims)


GENERATORS = [gen_binary, gen_unary, gen_matmul, gen_gemm, gen_transpose, gen_softmax,
              gen_layernorm, gen_reduce, gen_concat, gen_slice, gen_merge_reshape, gen_expand,
              gen_where, gen_range, gen_embedding, gen_unsqueeze, gen_flatten, gen_pad,
              gen_constant_of_shape, gen_last, gen_shifted_range, gen_expand_built,
              gen_cross_attention]


def build(seed: int):
    g = Graph(seed)
    for _ in range(1 if g.chance(0.7) else 2):
        dims = g.dims(g.rng.randint(1, 4))
        g.add(g.input(dims), dims)
    wanted = g.rng.randint(2, 6)
    for _ in range(4 * wanted):
        if len(g.ops) >= wanted * 3 or len(g.pool) > wanted + len(g.inputs):
            break
        try:
            g.rng.choice(GENERATORS)(g)
        except NoValue:
            pass
    outputs = [g.pool[-1][0]]
    if len(g.pool) > 2 and g.chance(0.3):
        extra = g.rng.choice(g.pool[:-1])[0]
        if extra not in g.input_dims and extra not in outputs:
            outputs.append(extra)
    return g, g.model(outputs)


def bindings(g: Graph) -> list[dict]:
    """3-4 bindings of the symbols (and each unnamed dim): sizes 2-6, all 1, 1-7, and
    sometimes one symbol 0."""
    names = list(g.symbols) + [f"?{i}" for i in range(1, g.unnamed + 1)]
    chosen = [{s: g.rng.randint(2, 6) for s in names}, {s: 1 for s in names},
              {s: g.rng.randint(1, 7) for s in names}]
    if names and g.chance(0.3) and "ReduceMean" not in g.ops:
        zero = {s: g.rng.randint(1, 4) for s in names}
        zero[g.rng.choice(names)] = 0
        chosen.append(zero)
    return chosen + [chosen[0]]  # a size seen before, with other values: the plan kept


def feeds_for(g: Graph, binding: dict) -> dict:
    feeds = {}
    for name, dims in g.input_dims.items():
        shape = tuple(binding[d] if symbolic(d) else d for d in dims)
        if name in g.index_inputs:
            feeds[name] = g.np.integers(0, g.index_inputs[name], shape).astype(np.int64)
        else:
            feeds[name] = g.np.standard_normal(shape).astype(np.float32)
    return feeds


def reference(model, feed_sets):
    """onnxruntime's results per binding (None where it refuses that binding)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4  # (its refusals are answered by skipping that binding)
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    results = []
    for feeds in feed_sets:
        try:
            results.append(session.run(None, feeds))
        except Exception:  # noqa: BLE001 - a size onnxruntime refuses is not compared
            results.append(None)
    return results


def run(seed: int) -> str:
    if seed % TORCH_EVERY == TORCH_EVERY - 1:
        return run_torch(seed)
    if onnx is None:
        return "skipped"
    g, model = build(seed)
    chosen = bindings(g)
    feed_sets = [feeds_for(g, b) for b in chosen]
    try:
        expected = reference(model, feed_sets)
    except Exception:  # noqa: BLE001 - a model onnxruntime refuses says nothing about legato
        return "skipped"
    if all(e is None for e in expected):
        return "skipped"
    refused = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
        for backend in BACKENDS:
            try:
                compiled = legato.compile(path, backend)
            except legato.LegatoError as err:
                refused.append(f"{backend} compile: {err}")
                continue
            for binding, feeds, want in zip(chosen, feed_sets, expected):
                if want is None:
                    continue
                try:
                    got = compiled(**feeds)
                except legato.LegatoError as err:
                    refused.append(f"{backend} at {binding}: {err}")
                    continue
                got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                where = f"{backend} at {binding} ({', '.join(g.ops)})"
                compare_outputs(got, want, where, "onnxruntime", rtol=1e-3, atol=1e-4)
    return answer(refused)


def answer(refused: list[str]) -> str:
    """"refused" when anything was (LEGATO_FUZZ_VERBOSE=1 prints what), else "ok"."""
    if refused and os.environ.get("LEGATO_FUZZ_VERBOSE"):
        print("\n".join(refused))
    return "refused" if refused else "ok"


# --- the torch.export flavour (rare: an export takes a second or more) -------------------

TORCH_EVERY = 16   # seeds with seed % TORCH_EVERY == TORCH_EVERY - 1


def torch_steps(torch, rng: random.Random, width: int) -> list:
    """A random chain of steps over x [batch, seq, width], each (name, module maker or None,
    fn) with fn(x, module) keeping x rank 3 and its last dim `width`."""
    F = torch.nn.functional
    heads = rng.choice([w for w in (1, 2, 4) if width % w == 0])

    def split_heads(x):
        b, n, d = x.shape
        h = x.view(b, n, heads, d // heads).transpose(1, 2)
        mixed = torch.softmax(h @ h.transpose(-1, -2) / 2.0, dim=-1) @ h
        return mixed.transpose(1, 2).reshape(b, n, d)

    table = [
        ("linear", lambda: torch.nn.Linear(width, width), lambda x, m: m(x)),
        ("layernorm", lambda: torch.nn.LayerNorm(width), lambda x, m: m(x)),
        ("attention", None, lambda x, m: split_heads(x)),
        ("softmax", None, lambda x, m: torch.softmax(x, dim=rng_dim)),
        ("positions", None, lambda x, m: x + torch.arange(x.shape[1])[:, None] * 0.1),
        ("tail", None, lambda x, m: torch.cat([x[:, 1:], x[:, :1]], dim=1)),
        ("mean", None, lambda x, m: x - x.mean(dim=1, keepdim=True)),
        ("pad", None, lambda x, m: F.pad(x, (0, 0, 1, 1))[:, 1:-1] + 1.0),
        ("repeat", None, lambda x, m: x.unsqueeze(1).expand(-1, 2, -1, -1).sum(dim=1)),
        ("last", None, lambda x, m: x * x[:, -1:]),
    ]
    rng_dim = rng.choice([1, 2, -1])
    return [rng.choice(table) for _ in range(rng.randint(2, 5))]


def run_torch(seed: int) -> str:
    try:
        import torch
    except ImportError:
        return "skipped"
    from legato.frontends import torch as torch_frontend
    rng = random.Random(seed)
    width = rng.choice([4, 8])
    steps = torch_steps(torch, rng, width)
    torch.manual_seed(seed)

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.parts = torch.nn.ModuleList(
                make() if make else torch.nn.Identity() for _, make, _ in steps)

        def forward(self, x):
            for (_, _, fn), part in zip(steps, self.parts):
                x = fn(x, part)
            return x

    model = Chain().eval()
    # (torch.export guards seq != 2 for a cat of x[:, 1:]: a Dim whose range allows that
    # fails to export; a view of x.flatten(0, 1) back to [batch, seq, width] fails at any
    # range, so the chain has none)
    low = 3 if "tail" in {name for name, _, _ in steps} else 0
    dims = {0: torch.export.Dim("batch", max=16), 1: torch.export.Dim("seq", min=low, max=64)}
    try:
        module = torch_frontend.load(model, (torch.randn(2, 5, width),), dynamic_shapes=(dims,))
    except legato.LegatoError as err:
        if "torch.export could not export" in str(err):  # (its guards on the chain's sizes)
            return "skipped"
        return answer([f"import: {err}"])
    except Exception:  # noqa: BLE001 - torch.export refusing the chain says nothing of legato
        return "skipped"
    names = ", ".join(name for name, _, _ in steps)
    refused = []
    for backend in BACKENDS:
        try:
            compiled = legato.compile(module, backend)
        except legato.LegatoError as err:
            refused.append(f"{backend} compile: {err}")
            continue
        for shape in [(2, 5), (1, max(1, low)), (rng.randint(1, 4), rng.randint(max(1, low), 9))]:
            x = torch.randn(*shape, width)
            with torch.no_grad():
                want = model(x).numpy()
            try:
                got = compiled(x.numpy())
            except legato.LegatoError as err:
                refused.append(f"{backend} at {shape} ({names}): {err}")
                continue
            compare_outputs((got,), (want,), f"{backend} at {shape} ({names})", "eager torch",
                            rtol=1e-4, atol=1e-4)
    return answer(refused)
