"""Fuzz target: damaged ONNX models.

Each case takes one of a few valid models built with onnx.helper (an MLP, a conv net, an
attention block, models at opsets 6-12 that go through onnx's version converter, a
quantized model, a model whose initializers live in an external file) and damages it
deterministically from the seed: flipped or cut bytes of the serialized file, attributes
of another type or with extreme values, dims that are negative, zero or huge, inputs
removed or renamed, another opset, shuffled nodes, tensor data of the wrong length,
external data pointing elsewhere, and wrongly typed `input_shapes`.

`legato.frontends.onnx.load` must return a Module or raise a LegatoError; a Module is then
compiled for cpu_ref and, when its inputs are small, run; when onnxruntime is installed and
also accepts the model, the results must agree with its (a Mismatch otherwise). Anything
else is a raw exception, and a crash kills the worker (a crash with its seed).
"""
from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np

import legato
from tests.fuzz import Mismatch

QUICK_CASES = 300
CASE_TIMEOUT = 20.0
RUN_MAX_ELEMENTS = 1 << 16

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # the target skips every case without onnx
    onnx = None

F, I64 = 1, 7   # TensorProto.FLOAT, TensorProto.INT64


# --- the valid models -----------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _info(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(rng, name, shape, dtype=np.float32):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def mlp(rng):
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="add"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["g"], name="gemm", transB=1,
                              alpha=0.5),
             helper.make_node("Softmax", ["g"], ["y"], name="sm", axis=-1)]
    inits = [_init(rng, "w1", (8, 16)), _init(rng, "b1", (16,)), _init(rng, "w2", (4, 16)),
             _init(rng, "b2", (4,))]
    return _model(nodes, [_info("x", ["batch", 8])], [_info("y", ["batch", 4])], inits), \
        {"batch": 2}


def convnet(rng):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                              strides=[1, 1], kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"], name="bn",
                              epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["gap"], name="gap"),
             helper.make_node("Flatten", ["gap"], ["y"], name="flat", axis=1)]
    inits = [_init(rng, "w", (4, 3, 3, 3)), _init(rng, "b", (4,)), _init(rng, "s", (4,)),
             _init(rng, "o", (4,)), _init(rng, "m", (4,)),
             numpy_helper.from_array(np.ones(4, np.float32), "v")]
    return _model(nodes, [_info("x", [1, 3, 8, 8])], [_info("y", [1, 4])], inits, 13), {}


def attention(rng):
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]),
             helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Reshape", ["q", "heads"], ["qh"]),
             helper.make_node("Reshape", ["k", "heads"], ["kh"]),
             helper.make_node("Reshape", ["v", "heads"], ["vh"]),
             helper.make_node("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["qt", "kt"], ["s"]),
             helper.make_node("Div", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "vt"], ["o"]),
             helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["ot", "merged"], ["m"]),
             helper.make_node("Add", ["m", "x"], ["res"]),
             helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["ln"], axis=-1,
                              epsilon=1e-5),
             helper.make_node("Slice", ["ln", "starts", "ends", "axes"], ["y"]),
             helper.make_node("Split", ["ln"], ["y1", "y2"], axis=2, num_outputs=2)]
    inits = [_init(rng, n, (8, 8)) for n in ("wq", "wk", "wv")] + [
        _ints("heads", [1, 4, 2, 4]), _ints("merged", [1, 4, 8]),
        numpy_helper.from_array(np.array(2.0, np.float32), "scale"),
        _init(rng, "gamma", (8,)), _init(rng, "beta", (8,)),
        _ints("starts", [1]), _ints("ends", [3]), _ints("axes", [1])]
    outputs = [_info("y", None), _info("y1", None), _info("y2", None)]
    return _model(nodes, [_info("x", [1, 4, 8])], outputs, inits, 18), {}


def old_opset(rng):
    """Opset 6-12 nodes whose attributes became inputs at 13: the version converter runs."""
    opset = rng.choice([6, 7, 8, 9, 10, 11, 12])
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]),
             helper.make_node("Squeeze", ["u"], ["s"], axes=[0]),
             helper.make_node("ReduceSum", ["s"], ["r"], axes=[1], keepdims=1),
             helper.make_node("Softmax", ["s"], ["sm"], axis=1),
             helper.make_node("Relu", ["sm"], ["y"])]
    nodes.append(helper.make_node("Split", ["s"], ["a", "b"], axis=1, split=[2, 2]))
    if opset < 11:
        nodes.append(helper.make_node("Clip", ["a"], ["c"], min=-1.0, max=1.0))
    else:
        nodes.append(helper.make_node("Identity", ["a"], ["c"]))
    outputs = [_info(n, None) for n in ("r", "y", "c", "b")]
    return _model(nodes, [_info("x", [3, 4])], outputs, (), opset), {}


def old_opset_nn(rng):
    """A conv net at opsets 8-9, with Slice and Pad in their attribute forms."""
    node = helper.make_node
    nodes = [node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "s", "o", "m", "v"], ["bn"]),
             node("LeakyRelu", ["bn"], ["lr"], alpha=0.2),
             node("MaxPool", ["lr"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Pad", ["mp"], ["pd"], pads=[0, 0, 1, 0, 0, 0, 0, 1], value=0.5),
             node("Slice", ["pd"], ["sl"], starts=[0, 1], ends=[2, 4], axes=[1, 2]),
             node("Transpose", ["sl"], ["tr"], perm=[0, 2, 3, 1]),
             node("Flatten", ["tr"], ["fl"], axis=1),
             node("Gemm", ["fl", "gw", "gb"], ["g"], transB=1),
             node("Cast", ["g"], ["gc"], to=TensorProto.DOUBLE),
             node("Cast", ["gc"], ["gf"], to=TensorProto.FLOAT),
             node("Concat", ["gf", "gf"], ["cc"], axis=1),
             node("Gather", ["cc", "idx"], ["ga"], axis=1),
             node("ArgMax", ["ga"], ["am"], axis=1, keepdims=0),
             node("Constant", [], ["shape"], value=numpy_helper.from_array(
                 np.array([2, 1, 3], np.int64))),
             node("Expand", ["ga", "shape"], ["y"])]
    inits = [_init(rng, "w", (4, 2, 3, 3)), _init(rng, "s", (4,)), _init(rng, "o", (4,)),
             _init(rng, "m", (4,)), numpy_helper.from_array(np.ones(4, np.float32), "v"),
             _init(rng, "gw", (5, 24)), _init(rng, "gb", (5,)), _ints("idx", [0, 7, 2])]
    outputs = [_info("y", None), _info("am", None, I64)]
    return _model(nodes, [_info("x", [1, 2, 6, 6])], outputs, inits, rng.choice([8, 9])), {}


def quantized(rng):
    nodes = [helper.make_node("QuantizeLinear", ["x", "sc", "zp"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["d"], axis=1),
             helper.make_node("Pad", ["d", "pads", "pv"], ["p"], mode="constant"),
             helper.make_node("ReduceMean", ["p", "raxes"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["c"], to=TensorProto.FLOAT16),
             helper.make_node("Expand", ["zf", "eshape"], ["e"]),
             helper.make_node("Where", ["cond", "d", "e"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), "sc"),
             numpy_helper.from_array(np.array([0, 1, -1], np.int8), "zp"),
             _ints("pads", [0, 1, 0, 1]), numpy_helper.from_array(np.array(0.5, np.float32),
                                                                  "pv"),
             _ints("raxes", [1]), numpy_helper.from_array(np.zeros(1, np.float32), "zf"),
             _ints("eshape", [2, 3]),
             numpy_helper.from_array(np.array([[True, False, True]] * 2), "cond")]
    outputs = [_info("y", None), _info("c", None, TensorProto.FLOAT16)]
    return _model(nodes, [_info("x", [2, 3])], outputs, inits, 19), {}


def _scalar(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype), name)


def elementwise(rng):
    """Shape arithmetic folded at import, then most elementwise and logical converters."""
    node = helper.make_node
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "i0"], ["n"], axis=0),
             node("Unsqueeze", ["n", "a0"], ["n1"]), node("Concat", ["n1", "m1"], ["shp"], axis=0),
             node("Reshape", ["x", "shp"], ["f"]), node("Pow", ["f", "two"], ["sq"]),
             node("Clip", ["sq", "", "three"], ["cl"]), node("LessOrEqual", ["f", "zero"], ["le"]),
             node("Where", ["le", "cl", "f"], ["w"]), node("Not", ["le"], ["nle"]),
             node("And", ["le", "nle"], ["a"]), node("Or", ["a", "le"], ["o"]),
             node("GreaterOrEqual", ["f", "zero"], ["ge0"]), node("Equal", ["o", "ge0"], ["eq"]),
             node("Sum", ["w", "f", "sq"], ["su"]), node("Max", ["su", "f"], ["mx"]),
             node("Min", ["mx", "cl"], ["mn"]), node("Gelu", ["mn"], ["ge"]),
             node("LeakyRelu", ["ge"], ["lr"], alpha=0.1),
             node("LogSoftmax", ["lr"], ["ls"], axis=1),
             node("ArgMax", ["ls"], ["am"], axis=1, keepdims=1),
             node("Abs", ["ls"], ["ab"]), node("Sqrt", ["ab"], ["sr"]), node("Neg", ["sr"], ["ng"]),
             node("Exp", ["ng"], ["ex"]), node("Erf", ["ex"], ["er"]), node("Tanh", ["er"], ["th"]),
             node("Sigmoid", ["th"], ["sg"]), node("Mul", ["sg", "ten"], ["sg10"]),
             node("Round", ["sg10"], ["rd"]), node("Floor", ["rd"], ["fl"]),
             node("Ceil", ["fl"], ["ce"]), node("Sub", ["ce", "zero"], ["sb"]),
             node("Reciprocal", ["sb"], ["y"]), node("Size", ["x"], ["sz"]),
             node("Constant", [], ["c"], value_float=2.0), node("Log", ["c"], ["lc"]),
             node("Greater", ["f", "lc"], ["gt"]), node("Less", ["f", "lc"], ["lt"]),
             node("Equal", ["gt", "lt"], ["same"])]
    inits = [_ints("i0", 0), _ints("a0", [0]), _ints("m1", [-1]), _scalar("two", 2.0),
             _scalar("three", 3.0), _scalar("zero", 0.0), _scalar("ten", 10.0)]
    outputs = [_info("y", None), _info("am", None, I64), _info("eq", None, TensorProto.BOOL),
               _info("sz", None, I64), _info("same", None, TensorProto.BOOL)]
    return _model(nodes, [_info("x", [2, 4, 6])], outputs, inits, 20), {}


def normalizations(rng):
    node = helper.make_node
    nodes = [node("RMSNormalization", ["x", "g6"], ["rn"], axis=-1),
             node("GroupNormalization", ["rn", "g4", "b4"], ["gn"], num_groups=2),
             node("InstanceNormalization", ["gn", "g4", "b4"], ["inn"]),
             node("AveragePool", ["inn"], ["ap"], kernel_shape=[2], strides=[2]),
             node("GlobalMaxPool", ["ap"], ["gm"]),
             node("ReduceMax", ["ap", "a2"], ["rmx"], keepdims=0),
             node("ReduceMin", ["ap", "a1"], ["rmn"]),
             node("Attention", ["q", "k", "v"], ["att"], is_causal=1),
             node("Attention", ["q3", "k3", "v3"], ["att3"], q_num_heads=2, kv_num_heads=1,
                  softcap=2.0)]
    inits = [_init(rng, "g6", (6,)), _init(rng, "g4", (4,)), _init(rng, "b4", (4,)),
             _ints("a2", [2]), _ints("a1", [1]), _init(rng, "k", (1, 1, 5, 4)),
             _init(rng, "v", (1, 1, 5, 4)), _init(rng, "k3", (1, 5, 4)),
             _init(rng, "v3", (1, 5, 4))]
    inputs = [_info("x", [2, 4, 6]), _info("q", [1, 2, 3, 4]), _info("q3", [1, 3, 8])]
    outputs = [_info(n, None) for n in ("gm", "rmx", "rmn", "att", "att3")]
    return _model(nodes, inputs, outputs, inits, 23), {}


def qlinear_conv(rng):
    u8 = TensorProto.UINT8
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    nodes = [helper.make_node("QLinearConv", ins, ["y"], pads=[1, 1, 1, 1])]
    inits = [_scalar("xs", 0.05), _scalar("xz", 128, np.uint8),
             numpy_helper.from_array(rng.integers(0, 255, (2, 1, 3, 3)).astype(np.uint8), "w"),
             _scalar("ws", 0.02), _scalar("wz", 120, np.uint8), _scalar("ys", 0.1),
             _scalar("yz", 100, np.uint8)]
    return _model(nodes, [_info("x", [1, 1, 5, 5], u8)], [_info("y", None, u8)], inits, 13), {}


BASES = (mlp, convnet, attention, old_opset, old_opset_nn, quantized, elementwise,
         normalizations, qlinear_conv)


# --- mutations --------------------------------------------------------------------------------

HUGE = (2 ** 31, 2 ** 34, 2 ** 40, 2 ** 62, 2 ** 63 - 1)
ODD_INTS = (-(2 ** 63), -(2 ** 31), -7, -1, 0, 1, 3, 2 ** 31, 2 ** 62)


def odd_int(rng):
    return rng.choice(ODD_INTS + HUGE[:2])


def mutate_attribute_type(rng, model):
    attrs = [(n, a) for n in model.graph.node for a in n.attribute]
    if not attrs:
        return
    node, attr = rng.choice(attrs)
    choices = [1.0, 7, "abc", [1, 2], [1.5], ["x", "y"], np.ones(2, np.float32), [], b"\xff\xfe"]
    value = rng.choice(choices)
    if isinstance(value, bytes):
        new = helper.make_attribute(attr.name, "x")
        new.s = value
    elif isinstance(value, np.ndarray):
        new = helper.make_attribute(attr.name, numpy_helper.from_array(value))
    elif value == []:
        new = helper.make_attribute(attr.name, [], attr_type=rng.choice([6, 7, 8]))
    else:
        new = helper.make_attribute(attr.name, value)
    attr.CopyFrom(new)
    if rng.random() < 0.2:
        attr.type = rng.choice([0, 5, 11, 13])


def mutate_attribute_value(rng, model):
    attrs = [(n, a) for n in model.graph.node for a in n.attribute if a.type in (1, 2, 6, 7)]
    if not attrs:
        return
    _, attr = rng.choice(attrs)
    if attr.type == 2:
        attr.i = odd_int(rng)
    elif attr.type == 1:
        attr.f = rng.choice([float("nan"), float("inf"), -1e30, 0.0, -1.0])
    elif attr.type == 7:
        del attr.ints[:]
        attr.ints.extend(odd_int(rng) for _ in range(rng.randrange(0, 9)))
    else:
        del attr.floats[:]
        attr.floats.extend(rng.choice([float("nan"), -1.0, 1e38]) for _ in range(3))


def mutate_attribute_presence(rng, model):
    node = rng.choice(model.graph.node)
    if node.attribute and rng.random() < 0.5:
        del node.attribute[rng.randrange(len(node.attribute))]
    else:
        node.attribute.append(helper.make_attribute(rng.choice(["axis", "bogus", "perm"]),
                                                    rng.choice([1, [0, 1], 2.0])))


def mutate_dims(rng, model):
    size = rng.choice((-1, -5, 0, 1, 7) + HUGE)
    pools = [("input", [v for v in model.graph.input]), ("output", list(model.graph.output)),
             ("init", list(model.graph.initializer))]
    kind, values = rng.choice([p for p in pools if p[1]] or pools[:1])
    if kind == "init":
        tensor = rng.choice(values)
        if tensor.dims and rng.random() < 0.8:
            tensor.dims[rng.randrange(len(tensor.dims))] = size
        else:
            tensor.dims.append(size)
        return
    dims = rng.choice(values).type.tensor_type.shape.dim
    if dims:
        dim = dims[rng.randrange(len(dims))]
        if rng.random() < 0.2:
            dim.dim_param = rng.choice(["batch", "other", ""])
        else:
            dim.dim_value = size
    else:
        dims.add().dim_value = size


def mutate_rank(rng, model):
    values = list(model.graph.input) + list(model.graph.output)
    dims = rng.choice(values).type.tensor_type.shape.dim
    if dims and rng.random() < 0.5:
        del dims[rng.randrange(len(dims))]
    else:
        for _ in range(rng.choice([1, 2, 70])):
            dims.add().dim_value = 1


def mutate_inputs(rng, model):
    node = rng.choice(model.graph.node)
    names = [n for n in model.graph.node for n in n.output] + [i.name for i in model.graph.input]
    action = rng.randrange(5)
    if action == 0 and node.input:
        node.input[rng.randrange(len(node.input))] = ""
    elif action == 1 and node.input:
        del node.input[rng.randrange(len(node.input))]
    elif action == 2 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(names + ["nowhere"])
    elif action == 3:
        node.input.append(rng.choice(names + [""]))
    elif node.output:
        node.output[rng.randrange(len(node.output))] = rng.choice(names + ["", "fresh"])


def mutate_graph_io(rng, model):
    graph = model.graph
    action = rng.randrange(4)
    if action == 0 and graph.input:
        del graph.input[rng.randrange(len(graph.input))]
    elif action == 1 and graph.output:
        graph.output[rng.randrange(len(graph.output))].name = rng.choice(["nowhere", "x", ""])
    elif action == 2:
        graph.input.append(_info(rng.choice(["x", "extra"]), [2]))
    elif graph.input:
        graph.input[0].type.tensor_type.elem_type = rng.choice([0, 8, 16, 17, 23, 40, 10, 5])


def mutate_opset(rng, model):
    model.opset_import[0].version = rng.choice([0, -1, 1, 5, 6, 9, 11, 12, 13, 17, 21, 24, 99])
    if rng.random() < 0.2:
        model.ir_version = rng.choice([0, 1, 3, 99])


def mutate_order(rng, model):
    nodes = list(model.graph.node)
    rng.shuffle(nodes)
    if rng.random() < 0.3:
        nodes.append(rng.choice(nodes))
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def mutate_op_type(rng, model):
    node = rng.choice(model.graph.node)
    node.op_type = rng.choice(["Relu", "Add", "Concat", "Reshape", "LayerNormalization",
                               "Split", "Slice", "Pad", "MaxPool", "Conv", "Gather", "Squeeze",
                               "Unsqueeze", "Attention", "Gelu", "Clip", "ReduceSum", "Mod"])
    if rng.random() < 0.1:
        node.domain = rng.choice(["ai.onnx", "com.microsoft", "x"])


def mutate_tensor_data(rng, model):
    tensors = list(model.graph.initializer)
    if not tensors:
        return
    tensor = rng.choice(tensors)
    action = rng.randrange(4)
    if action == 0 and tensor.HasField("raw_data"):
        data = tensor.raw_data
        tensor.raw_data = data[:rng.randrange(len(data) + 1)] if rng.random() < 0.5 else \
            data + bytes(rng.randrange(1, 9))
    elif action == 1:
        tensor.data_type = rng.choice([0, 2, 3, 6, 8, 9, 10, 11, 16, 17, 21, 99])
    elif action == 2:
        tensor.ClearField("raw_data")
        tensor.float_data.extend([1.0] * rng.randrange(0, 4))
    else:
        tensor.data_location = 1
        tensor.external_data.add(key="location", value=rng.choice(["w.bin", "../w.bin"]))


def mutate_small_attribute(rng, model):
    """A plausible value of the right type: the converters' own checks, not the schema's."""
    attrs = [a for n in model.graph.node for a in n.attribute if a.type in (2, 7)]
    if not attrs:
        return
    attr = rng.choice(attrs)
    if attr.type == 2:
        attr.i = rng.randrange(-3, 4)
    else:
        count = max(0, len(attr.ints) + rng.choice([-1, 0, 0, 1]))
        del attr.ints[:]
        attr.ints.extend(rng.randrange(-2, 4) for _ in range(count))


def mutate_small_dims(rng, model):
    values = [v for v in model.graph.input if v.type.tensor_type.shape.dim]
    if values:
        dims = rng.choice(values).type.tensor_type.shape.dim
        dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 2, 3, 5])


def mutate_initializer_shape(rng, model):
    tensors = [t for t in model.graph.initializer if t.data_location != 1]
    if not tensors:
        return
    tensor = rng.choice(tensors)
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError):   # damaged by an earlier mutation
        return
    shape = [rng.choice([0, 1, 2, 3, 4]) for _ in range(rng.randrange(0, 4))]
    values = np.resize(array, shape) if array.size else np.zeros(shape, array.dtype)
    if array.dtype.kind == "i":
        values = np.random.default_rng(rng.randrange(1 << 30)).integers(-3, 5, shape)
    tensor.CopyFrom(numpy_helper.from_array(values.astype(array.dtype), tensor.name))


def mutate_newer_opset(rng, model):
    if model.opset_import[0].version >= 13:
        model.opset_import[0].version = rng.randrange(13, onnx.defs.onnx_opset_version() + 1)


GENTLE = (mutate_small_attribute, mutate_small_dims, mutate_initializer_shape,
          mutate_newer_opset)
MUTATIONS = (mutate_attribute_type, mutate_attribute_value, mutate_attribute_presence,
             mutate_dims, mutate_rank, mutate_inputs, mutate_graph_io, mutate_opset,
             mutate_order, mutate_op_type, mutate_tensor_data)


def mutate_shapes(rng, shapes: dict) -> dict:
    key = rng.choice(list(shapes) + ["x", "batch"])
    shapes = dict(shapes)
    shapes[key] = rng.choice([2.5, "3", True, None, -1, -(2 ** 40), 2 ** 62, [2, 8], (1.0, 8),
                              [-1, 8], [2, 8, 3], {}, np.int64(3), [None], 0, 1, 3, 2 ** 33])
    return shapes


def mutate_bytes(rng, data: bytes) -> bytes:
    data = bytearray(data)
    if rng.random() < 0.3:
        return bytes(data[:rng.randrange(len(data) + 1)])
    for _ in range(rng.randrange(1, 6)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


# --- external data ---------------------------------------------------------------------------

def externalize(model, directory: Path, rng) -> None:
    """Move every initializer's data into `w.bin` in `directory`, maybe pointing elsewhere."""
    blob = bytearray()
    for tensor in model.graph.initializer:
        raw = numpy_helper.to_array(tensor).tobytes()
        entries = {"location": "w.bin", "offset": str(len(blob)), "length": str(len(raw))}
        blob += raw
        tensor.ClearField("raw_data")
        for field in ("float_data", "int64_data", "int32_data", "double_data"):
            tensor.ClearField(field)
        tensor.data_location = 1
        for key, value in entries.items():
            tensor.external_data.add(key=key, value=value)
    (directory / "w.bin").write_bytes(bytes(blob))
    (directory.parent / "outside.bin").write_bytes(bytes(blob))
    os.symlink(directory.parent / "outside.bin", directory / "link.bin")
    if rng.random() < 0.6 and len(model.graph.initializer):
        tensor = rng.choice(model.graph.initializer)
        entry = rng.choice(tensor.external_data)
        entry.value = rng.choice({
            "location": ["../outside.bin", "/etc/hostname", "link.bin", "missing.bin",
                         "sub/../w.bin", "", "."],
            "offset": ["-1", "abc", "99999999999", "3", str(2 ** 70)],
            "length": ["0", "-4", "x", "1", str(2 ** 40)]}[entry.key])


# --- a case ---------------------------------------------------------------------------------

_scratch: list[Path] = []


def scratch() -> Path:
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="legato-fuzz-onnx-")))
        atexit.register(shutil.rmtree, _scratch[0], True)
    return _scratch[0]


def make_case(seed: int):
    """(model or path, input_shapes, base_dir) for `seed`, in a fresh case directory."""
    rng = random.Random(seed)
    model, shapes = rng.choice(BASES)(np.random.default_rng(seed))
    case_dir = scratch() / "case" / "model"
    shutil.rmtree(case_dir.parent, ignore_errors=True)
    case_dir.mkdir(parents=True)
    external = rng.random() < 0.2
    if external:
        externalize(model, case_dir, rng)
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        rng.choice(GENTLE if rng.random() < 0.5 else MUTATIONS)(rng, model)
    if rng.random() < 0.15:
        shapes = mutate_shapes(rng, shapes)
    if rng.random() < 0.2 or (external and rng.random() < 0.5):
        data = model.SerializeToString()
        if rng.random() < 0.5:
            data = mutate_bytes(rng, data)
        path = case_dir / "m.onnx"
        path.write_bytes(data)
        return path, shapes, None
    return model, shapes, case_dir if external else None


def run(seed: int) -> str:
    if onnx is None:
        return "skipped"
    from legato.frontends import onnx as lonnx
    model, shapes, base_dir = make_case(seed)
    try:
        module = lonnx.load(model, shapes, base_dir=base_dir)
        compiled = legato.compile(module, backend="cpu_ref")
    except legato.LegatoError:
        return "refused"
    params = module.main.params
    if sum(p.type.size for p in params) > RUN_MAX_ELEMENTS:
        return "ok"
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(p.type.shape).astype(p.type.dtype)
              if p.type.dtype != "bool" else rng.random(p.type.shape) < 0.5 for p in params]
    try:
        outputs = compiled(*inputs)
    except legato.LegatoError:
        return "refused"
    if isinstance(model, onnx.ModelProto) and base_dir is None:
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        compare_with_onnxruntime(model, {p.name: a for p, a in zip(params, inputs)}, outputs)
    return "ok"


INTEGER_TYPES = (2, 3, 4, 5, 6, 7, 9, 12, 13)   # TensorProto: uint8 ... int64, bool


def casts_to_integers(model) -> bool:
    """ONNX leaves float -> integer casts of out-of-range values undefined (onnxruntime
    wraps, legato saturates): such models have no single right answer."""
    return any(n.op_type == "Cast" and a.name == "to" and a.i in INTEGER_TYPES
               for n in model.graph.node for a in n.attribute)


def averages_nothing(model, feed: dict) -> bool:
    """ONNX leaves ReduceMean over an empty axis undefined (onnxruntime gives 0, legato
    NaN)."""
    if not any(n.op_type == "ReduceMean" for n in model.graph.node):
        return False
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    for value in bound.graph.input:
        if value.name in feed:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in feed[value.name].shape:
                dims.add().dim_value = size
    inferred = onnx.shape_inference.infer_shapes(bound).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.value_info, *inferred.input]}
    return any(n.op_type == "ReduceMean" and 0 in shapes.get(n.input[0], [0])
               for n in model.graph.node)


def compare_with_onnxruntime(model, feed: dict, outputs) -> None:
    """A model both legato and onnxruntime accept must give the same numbers."""
    if casts_to_integers(model) or averages_nothing(model, feed):
        return
    try:
        import onnxruntime
        options = onnxruntime.SessionOptions()
        # onnxruntime's graph optimizations have bugs of their own (a fused
        # LayerNormalization over two axes computes something else)
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        expected = session.run(None, feed)
    except ImportError:
        return
    except Exception:  # noqa: BLE001 - onnxruntime refusing a model is not legato's problem
        return
    for index, (got, want) in enumerate(zip(outputs, expected)):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            raise Mismatch(f"output {index}: shape {got.shape}, onnxruntime {want.shape}")
        # integers computed through float rounding (quantization) may land one step
        # apart: legato rounds the exact product of the scales, onnxruntime a float32 one
        exact_steps = 1.0 if want.dtype.kind in "iu" else 0.0
        got, want = got.astype(np.float64), want.astype(np.float64)
        scale = max(1.0, float(np.nanmax(np.abs(want), initial=0.0, where=np.isfinite(want))))
        if not np.allclose(got, want, rtol=1e-3, atol=max(1e-4 * scale, exact_steps),
                           equal_nan=True):
            worst = np.nanmax(np.abs(got - want), initial=0.0)
            raise Mismatch(f"output {index}: differs from onnxruntime by up to {worst:.3g}")
