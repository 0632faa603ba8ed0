"""Fuzz target: random small float ONNX programs quantized by onnxruntime's own tool.

Each case builds a float program of two to six nodes from conv (full, grouped and
depthwise), MatMul (by a weight, or of two activations, batched), Gemm, Add, Mul, Relu,
Clip, Sigmoid, AveragePool, GlobalAveragePool, Concat and Softmax with random shapes, and
quantizes it with `onnxruntime.quantization.quantize_static`, the seed choosing the format
(QDQ or QOperator), per-tensor or per-channel weights, s8s8 or u8s8 (uint8 activations,
int8 weights), QuantizeBias on or off and random calibration data. The quantized model goes
through legato's ONNX importer and runs on cpu_ref and c_kernels; onnxruntime's run of the
same file (its int8 kernels, graph optimizations on, one thread) is the reference.

A result dequantized from integers is compared in its quantization steps: at least
`WITHIN_SHARE` of its elements within one step of onnxruntime's. A float result (no
quantize before it) is compared with the other targets' 1e-4 tolerance plus one step of
the quantized values it is computed from. Below that, each quantized step of the model
(dequantize -> op -> quantize, or one QLinear op) is run alone from onnxruntime's integer
inputs to it, by legato and by onnxruntime, and must be within one step on WITHIN_SHARE of
its elements: onnxruntime's optimizer fuses some steps into its int8 kernels and leaves
others float, and the float32 rounding of requantize multipliers differs, so a step may be
one off, which a finer scale downstream makes several; several off at one step is a wrong
answer, named with its ops. A model onnxruntime cannot quantize or run is skipped; a
LegatoError is a refusal.
"""
from __future__ import annotations

import atexit
import logging
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np

import legato
from tests.fuzz import Mismatch

QUICK_CASES = 6
CASE_TIMEOUT = 60.0
BACKENDS = ("cpu_ref", "c_kernels")
WITHIN_SHARE = 0.999   # of elements within one quantization step of onnxruntime's
FLOAT_ATOL = 1e-4      # the other targets' tolerance, for results left float
QUANTIZED = (np.int8, np.uint8)   # the tensors between quantized steps (not int64 shapes)

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # every case is skipped without onnx
    onnx = None


class Program:
    """A float program under construction: its nodes, weights, and the values made so far
    as (name, shape) pairs, with the op of each node for messages."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.nodes, self.inits, self.ops = [], [], []
        self.values: list[tuple[str, tuple]] = []
        self.count = 0

    def name(self, prefix="v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def weight(self, shape, scale=None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        name = self.name("w")
        array = (self.np.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, value: float) -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def node(self, op: str, inputs, shape, **attrs) -> tuple[str, tuple]:
        out = self.name()
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        self.ops.append(op)
        self.values.append((out, tuple(shape)))
        return out, tuple(shape)

    def same_shape(self, shape):
        """Another value of `shape` made earlier, if any."""
        others = [v for v in self.values[:-1] if v[1] == shape]
        return self.rng.choice(others) if others else None


# --- ops on NCHW images ----------------------------------------------------------------------

def conv(p: Program, x):
    name, (n, c, h, w) = x
    kind = p.rng.choice(["full", "full", "depthwise", "grouped"])
    groups = c if kind == "depthwise" else (2 if kind == "grouped" and c % 2 == 0 else 1)
    out_c = c if kind == "depthwise" else p.rng.choice([2, 4, 6, 8]) * (groups if groups
                                                                         > 1 else 1)
    k = p.rng.choice([1, 3, 3])
    stride = p.rng.choice([1, 1, 2])
    pad = p.rng.choice([0, k // 2])
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if oh < 1 or ow < 1:
        return None
    inputs = [name, p.weight((out_c, c // groups, k, k))]
    if p.rng.random() < 0.8:
        inputs.append(p.weight((out_c,), 0.1))
    return p.node("Conv", inputs, (n, out_c, oh, ow), kernel_shape=[k, k],
                  strides=[stride, stride], pads=[pad] * 4, group=groups)


def avg_pool(p: Program, x):
    name, (n, c, h, w) = x
    if p.rng.random() < 0.5 and h >= 2 and w >= 2:
        return p.node("AveragePool", [name], (n, c, h // 2, w // 2), kernel_shape=[2, 2],
                      strides=[2, 2])
    return p.node("AveragePool", [name], (n, c, h, w), kernel_shape=[3, 3], strides=[1, 1],
                  pads=[1, 1, 1, 1], count_include_pad=p.rng.choice([0, 1]))


def global_pool(p: Program, x):
    name, (n, c, _, _) = x
    return p.node("GlobalAveragePool", [name], (n, c, 1, 1))


def concat_channels(p: Program, x):
    name, shape = x
    other = p.same_shape(shape)
    if other is None:
        other = conv(p, x)
        if other is None or other[1][2:] != shape[2:]:
            return None
    return p.node("Concat", [name, other[0]], (*shape[:1], shape[1] + other[1][1], *shape[2:]),
                  axis=1)


# --- ops on matrices (rank 2 or 3) ------------------------------------------------------------

def matmul(p: Program, x):
    name, shape = x
    if len(shape) == 3 and p.rng.random() < 0.3:   # of two activations, as attention's
        other = p.same_shape(shape)
        if other is not None:
            if p.rng.random() < 0.5:   # x @ other^T, [B, M, M]
                t, _ = p.node("Transpose", [other[0]], (shape[0], shape[2], shape[1]),
                              perm=[0, 2, 1])
                return p.node("MatMul", [name, t], (shape[0], shape[1], shape[1]))
    out = p.rng.choice([3, 4, 8, 16])
    return p.node("MatMul", [name, p.weight((shape[-1], out))], (*shape[:-1], out))


def gemm(p: Program, x):
    name, shape = x
    if len(shape) != 2:
        return None
    out = p.rng.choice([3, 5, 8, 12])
    trans_b = p.rng.choice([0, 1])
    w = p.weight((out, shape[1]) if trans_b else (shape[1], out))
    inputs = [name, w] + ([p.weight((out,), 0.1)] if p.rng.random() < 0.8 else [])
    return p.node("Gemm", inputs, (shape[0], out), transB=trans_b)


def softmax(p: Program, x):
    name, shape = x
    return p.node("Softmax", [name], shape, axis=p.rng.choice([-1, 1]) if len(shape) > 2
                  else -1)


def concat_last(p: Program, x):
    name, shape = x
    other = p.same_shape(shape)
    if other is None:
        return None
    return p.node("Concat", [name, other[0]], (*shape[:-1], 2 * shape[-1]), axis=-1)


# --- ops on either ---------------------------------------------------------------------------

def binary(p: Program, x):
    name, shape = x
    op = p.rng.choice(["Add", "Add", "Mul"])
    other = p.same_shape(shape) if p.rng.random() < 0.6 else None
    if other is not None:
        return p.node(op, [name, other[0]], shape)
    # a constant operand, broadcast along the channels or the last axis, or one value
    const_shape = (shape[1], 1, 1) if len(shape) == 4 else (shape[-1],)
    if p.rng.random() < 0.15:
        const_shape = ()
    operands = [name, p.weight(const_shape, 0.5 if op == "Add" else 1.0)]
    return p.node(op, operands[::-1] if p.rng.random() < 0.3 else operands, shape)


def relu(p: Program, x):
    return p.node("Relu", [x[0]], x[1])


def clip(p: Program, x):
    lo, hi = p.rng.choice([(0.0, 6.0), (-1.0, 1.0), (0.0, 1.0), (-0.5, 2.0)])
    return p.node("Clip", [x[0], p.const(lo), p.const(hi)], x[1])


def sigmoid(p: Program, x):
    return p.node("Sigmoid", [x[0]], x[1])


IMAGE_OPS = (conv, conv, conv, avg_pool, global_pool, concat_channels, binary, relu, clip,
             sigmoid, softmax)
MATRIX_OPS = (matmul, matmul, gemm, gemm, binary, relu, clip, sigmoid, softmax, concat_last)
ANY_OPS = (binary, relu, clip, sigmoid)


def flatten(p: Program, x):
    """An image into a matrix, so Gemm and MatMul can follow convolutions."""
    name, (n, c, h, w) = x
    return p.node("Flatten", [name], (n, c * h * w), axis=1)


def build(seed: int):
    """(float model, input shape, ops) of `seed`."""
    p = Program(seed)
    image = p.rng.random() < 0.55
    if image:
        shape = (p.rng.choice([1, 2]), p.rng.choice([1, 2, 3, 4]), p.rng.randint(3, 9),
                 p.rng.randint(3, 9))
    else:
        shape = (p.rng.randint(1, 6), p.rng.randint(2, 24)) if p.rng.random() < 0.6 else \
            (p.rng.randint(1, 3), p.rng.randint(2, 8), p.rng.randint(2, 24))
    x = ("x", shape)
    p.values.append(x)
    for _ in range(p.rng.randint(2, 6)):
        rank4 = len(x[1]) == 4
        if rank4 and p.rng.random() < 0.1 and x[1][1] * x[1][2] * x[1][3] <= 256:
            x = flatten(p, x)
            continue
        table = IMAGE_OPS if rank4 else MATRIX_OPS
        made = p.rng.choice(table)(p, x)
        if made is not None:
            x = made
    if not p.nodes:
        x = conv(p, x) if len(x[1]) == 4 else matmul(p, x)
    outputs = [x]
    if len(p.values) > 3 and p.rng.random() < 0.2:   # an intermediate result as well
        outputs.insert(0, p.rng.choice(p.values[1:-1]))
    graph = helper.make_graph(
        p.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=p.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    return model, shape, p.ops


# --- quantizing -------------------------------------------------------------------------------

_scratch: list[Path] = []


def scratch() -> Path:
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="legato-fuzz-quant-")))
        atexit.register(shutil.rmtree, _scratch[0], True)
    return _scratch[0]


def options(seed: int) -> dict:
    rng = random.Random(~seed)
    return {"format": rng.choice(["QDQ", "QOperator"]), "per_channel": rng.random() < 0.5,
            "activations": rng.choice(["s8", "u8"]), "quantize_bias": rng.random() < 0.7,
            "batches": rng.randint(1, 4), "spread": rng.choice([0.5, 1.0, 3.0])}


def quantize(model, shape, opts: dict, seed: int):
    """onnxruntime's quantize_static of `model` with `opts`, on random calibration data."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    rng = np.random.default_rng(seed + 1)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": (rng.standard_normal(shape) * opts["spread"]
                                        ).astype(np.float32)} for _ in range(opts["batches"])])

        def get_next(self):
            return next(self.batches, None)

    target = scratch() / "q.onnx"
    target.unlink(missing_ok=True)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)   # its advice to pre-process the model, on every call
    try:
            quantize_static(model, str(target), Reader(),
                        quant_format=getattr(QuantFormat, opts["format"]),
                        per_channel=opts["per_channel"],
                        activation_type=QuantType.QInt8 if opts["activations"] == "s8" else
                        QuantType.QUInt8, weight_type=QuantType.QInt8,
                        extra_options={"QuantizeBias": opts["quantize_bias"]})
    finally:
        root.setLevel(level)
    return onnx.load(str(target))


def onnxruntime_results(model, feeds):
    import onnxruntime
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    session = onnxruntime.InferenceSession(model.SerializeToString(), so,
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# --- comparing ---------------------------------------------------------------------------------

def _constant(model, name: str):
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(node.attribute[0].t)
    return None


def steps_of(model) -> dict:
    """{graph output: (the quantization step its values lie on, or None for a float result;
    the largest step of the dequantized values its producer reads)}."""
    producer = {o: n for n in model.graph.node for o in n.output}
    found = {}
    for out in model.graph.output:
        node = producer.get(out.name)
        if node is None:
            found[out.name] = (None, 0.0)
            continue
        own = None
        if node.op_type == "DequantizeLinear":
            scale = _constant(model, node.input[1])
            own = float(np.max(scale)) if scale is not None and scale.size == 1 else None
        read = [producer.get(i) for i in node.input]
        scales = [_constant(model, n.input[1]) for n in read
                  if n is not None and n.op_type == "DequantizeLinear"]
        found[out.name] = (own, max((float(np.max(s)) for s in scales if s is not None),
                                    default=0.0))
    return found


def check(got, want, own_step, input_step, where: str) -> None:
    """Raise a Mismatch unless `got` is within one quantization step of onnxruntime's
    `want` on WITHIN_SHARE of its elements (integers: one unit); a float result within
    FLOAT_ATOL plus one `input_step`."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise Mismatch(f"{where}: {got.dtype}{list(got.shape)}, onnxruntime "
                       f"{want.dtype}{list(want.shape)}")
    if not want.size:
        return
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if want.dtype.kind in "iu":
        own_step = 1.0
    if own_step:
        off = diff / own_step
        within = float((off <= 1.001).mean())
        if within < WITHIN_SHARE or not np.isfinite(off).all():
            raise Mismatch(f"{where}: {within:.2%} of {want.size} elements within one "
                           f"quantization step ({own_step:.3g}) of onnxruntime (< "
                           f"{WITHIN_SHARE:.1%}), up to {np.nanmax(off):.3g} steps off")
        return
    scale = max(1.0, float(np.abs(want).max()))
    bound = FLOAT_ATOL * scale + input_step * 1.001
    within = float((diff <= bound).mean())
    if within < WITHIN_SHARE or not np.isfinite(diff).all():
        raise Mismatch(f"{where}: float result, {within:.2%} of {want.size} elements within "
                       f"{bound:.3g} of onnxruntime (one input step {input_step:.3g}), up to "
                       f"{np.nanmax(diff):.3g} off")


# --- when a whole program is off: each quantized step on its own -----------------------------

def every_value(model, feeds) -> dict:
    """{name: array} of every node output, from onnxruntime running the file as written
    (no fusion)."""
    import onnxruntime
    full = onnx.ModelProto()
    full.CopyFrom(model)
    known = {o.name for o in full.graph.output}
    full.graph.output.extend(onnx.ValueInfoProto(name=o) for n in full.graph.node
                             for o in n.output if o and o not in known)
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    session = onnxruntime.InferenceSession(full.SerializeToString(), so,
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return {**feeds, **dict(zip(names, session.run(None, feeds)))}


def step_model(model, out: str, values: dict):
    """The nodes computing int8/uint8 tensor `out` from int8/uint8 tensors (or the float
    graph input): one quantized step (dequantize -> op -> quantize, or one QLinear op), as a
    model of its own whose inputs are those tensors."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: t for t in model.graph.initializer}
    kept, inputs, used, todo = set(), {}, set(), [out]
    while todo:
        name = todo.pop()
        if not name or name in inits:
            used.add(name)
            continue
        if name != out and (name not in producer or values[name].dtype in QUANTIZED):
            inputs[name] = values[name]
            continue
        node = producer[name]
        if id(node) not in kept:
            kept.add(id(node))
            todo.extend(node.input)
    nodes = [n for n in model.graph.node if id(n) in kept]
    graph = helper.make_graph(
        nodes, "step", [helper.make_tensor_value_info(
            k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(out, helper.np_dtype_to_tensor_dtype(
            values[out].dtype), values[out].shape)],
        initializer=[inits[k] for k in sorted(used) if k])
    part = helper.make_model(graph, opset_imports=model.opset_import,
                             ir_version=model.ir_version)
    return part, inputs, [n.op_type for n in nodes]


def check_each_step(model, feeds, backend: str, where: str) -> None:
    """Each integer tensor of the model computed by legato from onnxruntime's integer
    inputs to its step, against onnxruntime's own run of that step (fused where it fuses).
    One step off at one op may grow to several at a finer scale downstream; several
    steps off at one op is a wrong answer, named here with its ops."""
    from legato.frontends import onnx as lonnx
    values = every_value(model, feeds)
    for name, value in values.items():
        if value.dtype not in QUANTIZED or name in feeds:
            continue
        part, inputs, ops = step_model(model, name, values)
        want = onnxruntime_results(part, inputs)[0]
        got = legato.compile(lonnx.load(part), backend)(**inputs)
        check(got, want, 1.0, 0.0, f"{where}: the step computing {name} "
              f"({', '.join(ops)}) alone")


def describe(opts: dict, ops) -> str:
    act = "u8s8" if opts["activations"] == "u8" else "s8s8"
    return (f"{opts['format']} {'per-channel' if opts['per_channel'] else 'per-tensor'} {act}"
            f"{'' if opts['quantize_bias'] else ' float bias'}: {', '.join(ops)}")


def run(seed: int) -> str:
    if onnx is None:
        return "skipped"
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "skipped"
    from legato.frontends import onnx as lonnx
    model, shape, ops = build(seed)
    opts = options(seed)
    feeds = {"x": (np.random.default_rng(seed + 2).standard_normal(shape)
                   * opts["spread"]).astype(np.float32)}
    try:
        quantized = quantize(model, shape, opts, seed)
        expected = onnxruntime_results(quantized, feeds)
    except Exception:  # noqa: BLE001 - what onnxruntime cannot quantize or run says nothing
        return "skipped"  # about legato
    module = lonnx.load(quantized)
    steps = steps_of(quantized)
    for backend in BACKENDS:
        got = legato.compile(module, backend)(feeds["x"])
        got = got if isinstance(got, (tuple, list)) else (got,)
        where = f"{backend} ({describe(opts, ops)})"
        if len(got) != len(expected):
            raise Mismatch(f"{where}: {len(got)} results, onnxruntime {len(expected)}")
        try:
            for out, mine, want in zip(quantized.graph.output, got, expected):
                check(mine, want, *steps[out.name], f"{where} result {out.name}")
        except Mismatch as err:
            check_each_step(quantized, feeds, backend, str(err))
    return "ok"
