"""The quantized models at their published sizes through TOSA 1.0's INT profile: emitted by
tosa_custom for pro_int (with pro_fp: the float ops a quantized model keeps, as BERT's
LayerNorm, softmax and GELU), validated by tosa-opt for that target, run on the TOSA
reference model and compared with cpu_ref.

    .venv/bin/python benchmarks/tosa_int.py [--models bert,resnet50,mobilenetv2]
        [--variants qdq-s8s8,qdq-u8s8,qoperator-u8s8,dynamic] [--layers N]
        [--profile pro_fp+pro_int] [--weights auto|inline|resources] [--no-run] [--int-io]
        [--output-stage rescale|float]

The files are benchmarks/quant.py's (BERT-base seq 128, ResNet-50 and MobileNetV2
224x224, random weights, onnxruntime's quantize_static with random calibration data, per
channel), in each format tests/zoo/quant_published.py makes and caches beside them:
QDQ s8s8 and u8s8, QOperator u8s8, quantize_dynamic. The reference model runs BERT-base
at full depth in 2-6 minutes on a busy core (134 s for QDQ s8s8 at load 4.7 on 2
cores); `--layers N` cuts BERT after its N-th encoder layer (published widths, fewer
layers) to see how far its output stays with cpu_ref's.

`--int-io` leaves out the QuantizeLinear of each input and the DequantizeLinear of each
output (the model an integer-only target runs: ResNet-50 and MobileNetV2 then emit for
`--profile pro_int` alone; their feeds are quantized in numpy), so the output compared is
the int8/uint8 tensor itself, and its steps are integers.

`--output-stage float` requantizes convolutions and matmuls in float32 as onnxruntime does,
and adds by a table of its sums (legato_tosa_custom.backend(output_stage="float")),
instead of by RESCALE.

One line per model and format:
  import s     legato's ONNX import
  emit s       legato.compile(module, tosa_custom for the profile): legalization, emission
  text MB      the module's MLIR operations; blobs MB: its constants out of line
  tosa-opt     seconds of strict validation for the module's profiles, or the error
  int8 ops     CONV2D / DEPTHWISE_CONV2D / MATMUL on i8 operands, of all of them
  refmodel s   tosa-opt serialization plus the TOSA reference model on one input
  max diff     max |TOSA - cpu_ref| of the output; steps: that in the output's
               quantization step (the last DequantizeLinear's scale; '-' where a float op
               makes the output); same: the share of equal elements; <=1 step: of
               elements within one step
Under the table, why any conv or matmul is not int8 (the QDQ fold's reasons from the
compile report), and the TOSA operators each module holds.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

VARIANTS = ("qdq-s8s8", "qdq-u8s8", "qoperator-u8s8", "dynamic")
PRODUCTS = ("tosa.conv2d", "tosa.depthwise_conv2d", "tosa.matmul")
# ops whose float form is a conv or matmul the QDQ fold may leave float
FLOAT_PRODUCTS = ("nn.conv2d", "nn.linear", "matmul", "nn.attention")


def model_file(name: str, variant: str) -> Path:
    from tests.zoo.quant_published import variant_file
    return Path(variant_file(name, variant))


def cut_bert(model, layers: int):
    """The ONNX graph of `model` up to the output of encoder layer `layers` (its last
    LayerNormalization, what the full model returns after the last layer)."""
    import onnx
    prefix = f"/model/encoder/layer.{layers - 1}/output/LayerNorm/"
    last = [n for n in model.graph.node if n.name.startswith(prefix) and
            n.op_type == "LayerNormalization"]
    if not last:
        raise SystemExit(f"the model has no encoder layer {layers}")
    inferred = onnx.shape_inference.infer_shapes(model)
    info = {v.name: v for v in inferred.graph.value_info}
    out = last[0].output[0]
    del model.graph.output[:]
    model.graph.output.append(info.get(out) or onnx.helper.make_tensor_value_info(
        out, onnx.TensorProto.FLOAT, None))
    return model


def int_io(model):
    """`model` without its float boundaries, as an integer-only target runs it: an input
    read only by a QuantizeLinear becomes that node's int8/uint8 output (read through a
    Pad of zeros: the quantized input, padded by the zero point), an output made by a
    DequantizeLinear becomes the node's input. Returns the model and, per input, how to
    quantize a float feed (scale, zero point), None where it stays as it is."""
    from onnx import helper, numpy_helper
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes, quantizers = list(model.graph.node), []
    for graph_input in model.graph.input:
        pad, q = _quantizer_of(nodes, graph_input.name, init)
        if q is None:
            quantizers.append(None)
            continue
        zero = init[q.input[2]]
        dims = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
        name = q.output[0] if pad is None else graph_input.name + "_quantized"
        graph_input.CopyFrom(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(zero.dtype), dims))
        if pad is not None:  # quantize(pad(x, 0)) == pad(quantize(x), zero point)
            model.graph.initializer.append(numpy_helper.from_array(zero.reshape(()),
                                                                   name + "_pad"))
            pad.input[0], pad.output[0] = name, q.output[0]
            del pad.input[2:]
            pad.input.append(name + "_pad")
        nodes.remove(q)
        quantizers.append((float(init[q.input[1]]), zero))
    for graph_output in model.graph.output:
        dq = next(n for n in nodes if graph_output.name in n.output)
        if dq.op_type == "DequantizeLinear" and dq.input[2] in init:
            graph_output.CopyFrom(helper.make_tensor_value_info(
                dq.input[0], helper.np_dtype_to_tensor_dtype(init[dq.input[2]].dtype), None))
            nodes.remove(dq)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model, quantizers


def _quantizer_of(nodes, name: str, init) -> tuple:
    """(pad, QuantizeLinear) when `name` is read only by a QuantizeLinear with constant
    parameters, or only by a Pad of zeros read only by one (MobileNetV2 QOperator pads
    its float input first); pad is None in the first case, both None otherwise."""
    readers = [n for n in nodes if name in n.input]
    first = readers[0] if len(readers) == 1 else None
    pad = first if first is not None and first.op_type == "Pad" and \
        _zero_pad(first, nodes, init) else None
    if pad is not None:
        readers = [n for n in nodes if pad.output[0] in n.input]
        first = readers[0] if len(readers) == 1 else None
    if first is None or first.op_type != "QuantizeLinear" or first.input[1] not in init \
            or len(first.input) < 3 or first.input[2] not in init:
        return None, None
    return pad, first


def _zero_pad(node, nodes, init) -> bool:
    """A constant-mode Pad whose value is absent or a constant 0."""
    from onnx import helper, numpy_helper
    modes = [helper.get_attribute_value(a) for a in node.attribute if a.name == "mode"]
    if modes and modes[0] != b"constant":
        return False
    if len(node.input) < 3 or not node.input[2]:
        return True
    value = init.get(node.input[2])
    maker = next((n for n in nodes if node.input[2] in n.output), None)
    if value is None and maker is not None and maker.op_type == "Constant":
        value = numpy_helper.to_array(maker.attribute[0].t)
    return value is not None and not np.asarray(value).any()


def quantized_feed(x, quantizer):
    if quantizer is None:
        return x
    scale, zero = quantizer
    info = np.iinfo(zero.dtype)
    return np.clip(np.rint(x / np.float32(scale)) + int(zero), info.min, info.max
                   ).astype(zero.dtype)


def products(text: str) -> tuple[int, int]:
    """(int8 convs and matmuls, all of them) in MLIR text."""
    lines = [line for line in text.splitlines() if any(f'"{op}"(' in line for op in PRODUCTS)]
    int8 = sum(line.split(": (tensor<", 1)[1].split(">", 1)[0].endswith("xi8") for line in lines)
    return int8, len(lines)


def operators(text: str) -> str:
    found = collections.Counter(re.findall(r'"(tosa\.\w+)"\(', text))
    return ", ".join(f"{op[5:]} {n}" for op, n in found.most_common())


def float_reasons(report) -> list[str]:
    """The QDQ fold's reasons for the convs and matmuls it left float."""
    fold = getattr(report, "qdq", None)
    if fold is None:
        return []
    return [f"{op}: {why} (x{n})" for (op, why), n in fold.not_folded.items()
            if op in FLOAT_PRODUCTS]


def output_step(model) -> float | None:
    """The scale of the DequantizeLinear making the output, None where another op does."""
    from onnx import numpy_helper
    out = model.graph.output[0].name
    maker = next(n for n in model.graph.node if out in n.output)
    if maker.op_type != "DequantizeLinear":
        return None
    init = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(init[maker.input[1]]).reshape(-1)[0])


def measure(name: str, variant: str, args) -> dict:
    import onnx

    import legato
    from benchmarks import quant as bench
    from legato.frontends import onnx as frontend
    from legato_tosa_custom import backend
    from legato_tosa_custom.resources import TosaArtifact, text_of
    from legato_tosa_custom.tools import find_tools
    model = onnx.load(str(model_file(name, variant)))
    if name == "bert" and args.layers:
        model = cut_bert(model, args.layers)
    row = {"step": output_step(model)}
    quantizers = [None] * len(model.graph.input)
    if args.int_io:
        model, quantizers = int_io(model)
        row["step"] = 1.0
    start = time.perf_counter()
    module = frontend.load(model)
    row["import s"] = time.perf_counter() - start
    target = backend(args.profile, weights=args.weights, output_stage=args.output_stage)
    start = time.perf_counter()
    compiled = legato.compile(module, target)
    row["emit s"] = time.perf_counter() - start
    artifact, text = compiled.artifact, text_of(compiled.artifact)
    row["text MB"] = len(text) / 2 ** 20
    row["blobs MB"] = sum(a.nbytes for a in artifact.resources.values()) / 2 ** 20 \
        if isinstance(artifact, TosaArtifact) else 0.0
    row["int8"], row["products"] = products(text)
    row["ops"], row["float why"] = operators(text), float_reasons(compiled.report)
    tools = find_tools()
    start = time.perf_counter()
    try:
        tools.validate(artifact, name=f"{name}-{variant}.mlir")
        row["tosa-opt"] = f"ok {time.perf_counter() - start:.1f}s"
    except legato.LegatoError as err:
        row["tosa-opt"] = "FAILED: " + str(err).splitlines()[1][:160]
        return row
    if args.no_run:
        return row
    inputs = [quantized_feed(x, q) for x, q in zip(bench.feeds(name, 100).values(), quantizers)]
    start = time.perf_counter()
    (got,) = tools.run_reference(artifact, inputs)
    row["refmodel s"] = time.perf_counter() - start
    want = np.asarray(legato.compile(module, "cpu_ref")(*inputs))
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    row["max diff"], row["max ref"] = float(diff.max()), float(np.abs(want).max())
    row["same"] = float((diff == 0).mean())
    if row["step"]:
        row["1 step"] = float((diff <= row["step"] * 1.001).mean())
    return row


def line(name: str, variant: str, row: dict) -> str:
    head = f"{name:12}{variant:16}"
    if "emit s" not in row:
        return head + row.get("error", "")
    cells = f"{row['import s']:8.1f}{row['emit s']:8.1f}{row['text MB']:9.2f}" \
            f"{row['blobs MB']:9.1f}  {row['tosa-opt']:10}" \
            f"{row['int8']:>5} of {row['products']:<4}"
    if "refmodel s" in row:
        steps = f"{row['max diff'] / row['step']:7.1f}" if row["step"] else f"{'-':>7}"
        within = f"{row['1 step']:9.2%}" if row["step"] else f"{'-':>9}"
        cells += f"{row['refmodel s']:10.1f}{row['max diff']:10.3g} of {row['max ref']:<8.3g}" \
                 f"{steps}{row['same']:8.2%}{within}"
    return head + cells


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert,resnet50,mobilenetv2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--layers", type=int, default=0, help="BERT: encoder layers kept")
    parser.add_argument("--profile", default="pro_fp+pro_int")
    parser.add_argument("--weights", default="auto", choices=("auto", "inline", "resources"))
    parser.add_argument("--no-run", action="store_true", help="emit and validate only")
    parser.add_argument("--output-stage", default="rescale", choices=("rescale", "float"),
                        help="requantize products by RESCALE or onnxruntime's float32 stage")
    parser.add_argument("--int-io", action="store_true",
                        help="int8/uint8 inputs and outputs: the model's quantize at its "
                             "inputs and dequantize at its outputs left out")
    args = parser.parse_args(argv)
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    print(f"profile {args.profile}, weights {args.weights}, output stage {args.output_stage}"
          + (", integer inputs and outputs" if args.int_io else "")
          + (f", BERT cut after {args.layers} layers" if args.layers else "")
          + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'model':12}{'format':16}{'import s':>8}{'emit s':>8}{'text MB':>9}{'blobs MB':>9}"
          f"  {'tosa-opt':10}{'int8 ops':>9}{'refmodel s':>12}{'max diff of max |ref|':>24}"
          f"{'steps':>6}{'same':>8}{'<=1 step':>9}", flush=True)
    notes = []
    for name in args.models.split(","):
        for variant in args.variants.split(","):
            try:
                row = measure(name, variant, args)
            except Exception as err:  # noqa: BLE001 - importers and tools raise many types
                row = {"error": f"error: {type(err).__name__}: "
                                f"{str(err).splitlines()[0][:300]}"}
            print(line(name, variant, row), flush=True)
            if row.get("float why"):
                notes += [f"{name} {variant} float: {why}" for why in row["float why"]]
            elif row.get("products", 0) > row.get("int8", 0):
                notes.append(f"{name} {variant}: {row['products'] - row['int8']} float convs/"
                             "matmuls the model itself computes in float (no quantize, "
                             "dequantize or integer op around them)")
            if row.get("ops"):
                notes.append(f"{name} {variant} operators: {row['ops']}")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
