"""Where legato's int8 results depart from onnxruntime's, tensor by tensor, at the published
sizes of benchmarks/quant.py (BERT-base seq 128, ResNet-50 and MobileNetV2 224x224).

    .venv/bin/python benchmarks/quant_accuracy.py [--models bert,resnet50,mobilenetv2]
        [--variants qdq-s8s8,qdq-u8s8,qdq-s8s8-fb,qoperator-u8s8,dynamic]
        [--backends cpu_ref,c_kernels] [--layers] [--alone] [--trained-stats]
    .venv/bin/python benchmarks/quant_accuracy.py --seeds 5 [--models ...] [--variants ..]

Every int8/uint8 tensor a node of the quantized file makes (QuantizeLinear, QLinear*,
DynamicQuantizeLinear outputs) is compared, on one input (quant.py's feeds(name, --seed)),
between:
  ort      onnxruntime as a user runs it (ORT_ENABLE_ALL: its QDQ fusions into int8 kernels
           where its x86 optimizer makes them, float ops where it does not); the optimized
           graph is saved and run as saved with the tensors exposed (exposing them in the
           file itself changes what onnxruntime fuses); a tensor it fused away is missing
  spec     onnxruntime with graph optimizations off (ORT_DISABLE_ALL): each QDQ region as
           the ONNX spec defines it (DequantizeLinear, the float op, QuantizeLinear)
  legato   each backend's compiled model run with every result exposed; a tensor is the last
           int8/uint8 result whose call came from that ONNX node (the folded qnn op carries
           its QuantizeLinear node as its origin)
Per model, variant and backend: the share of the model output's elements within one
quantization step of ort's and of spec's (and the most steps off), and ort against spec (how
far onnxruntime's two modes are apart); then the first tensor that differs at all and the
first more than one step off (integer steps of that tensor; the share within one step, the
share equal, the most off), each with its producing op; --alone runs the step making the
first tensor more than one step from spec alone, from onnxruntime's unfused inputs to it;
--layers prints the worst tensor per block (BERT's layer.N, ResNet's stages.S.layers.L,
MobileNetV2's layer.N; else groups of 8 tensors in node order); --trained-stats measures
the CNNs with batch-norm statistics taken from their calibration data instead of random
ones. --seeds N prints only the outputs' figures, lowest and mean over N inputs. Slow (a minute or more per
model on two cores): not a test.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":  # BLAS threads before numpy loads
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "LEGATO_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

FLOAT_BIAS = ("qdq-s8s8-fb", "qdq-u8s8-fb")   # QDQ, QuantizeBias off


def variant_file(name: str, variant: str, trained_stats: bool = False) -> Path:
    """The quantized file of model `name` in `variant`: tests/zoo/quant_published.py's
    variants (qdq-s8s8, qdq-u8s8, qoperator-u8s8, dynamic), or QDQ with float biases
    (quantize_static's QuantizeBias off); with `trained_stats`, of the CNN whose batch-norm
    statistics are those of its calibration data (see trained_statistics_file). Made once
    and cached beside benchmarks/quant.py's files."""
    from tests.zoo import quant_published
    if not trained_stats and variant not in FLOAT_BIAS:
        return quant_published.variant_file(name, variant)
    from benchmarks import quant as bench
    fp32, int8 = bench.model_files(name)
    if trained_stats:
        fp32 = trained_statistics_file(name, fp32)
        int8 = fp32.with_name(fp32.name.replace(".fp32.", ".int8."))
    target = int8.with_name(int8.name.replace(".int8.", f".{variant}."))
    if not target.exists():
        _quantize(name, fp32, target, "u8s8" in variant, variant not in FLOAT_BIAS,
                  variant.startswith("qoperator"))
    return target


def _quantize(name: str, fp32: Path, target: Path, u8: bool, quantize_bias: bool,
              qoperator: bool) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    from benchmarks import quant as bench
    batches = iter([bench.feeds(name, s) for s in range(1, 1 + bench.CALIBRATION_BATCHES)])
    reader = type("Reader", (CalibrationDataReader,),
                  {"get_next": lambda self: next(batches, None)})()
    quantize_static(str(fp32), str(target.with_suffix(".part")), reader,
                    quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8 if u8
                    else QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"QuantizeBias": quantize_bias})
    target.with_suffix(".part").rename(target)


def trained_statistics_file(name: str, fp32: Path) -> Path:
    """The float file of CNN `name` with the batch-norm statistics a trained network has:
    each BatchNorm's running mean and variance measured on the calibration batches (train
    mode, cumulative average), so every normalized activation is zero-mean, unit-variance
    as in training, where the random statistics of benchmarks/published.py let activations
    drift through the depth."""
    import torch

    from benchmarks import quant as bench
    from benchmarks.published import export_onnx
    target = fp32.with_name(fp32.name.replace(".fp32.", ".bnstats.fp32."))
    if target.exists():
        return target
    model = bench._torch_module(name)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not norms:
        raise SystemExit(f"{name} has no batch norms to measure")
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    model.train()
    with torch.no_grad():
        for seed in range(1, 1 + bench.CALIBRATION_BATCHES):
            model(*(torch.from_numpy(a) for a in bench.feeds(name, seed).values()))
    return export_onnx(model.eval(), bench.feeds(name, 0), target)


# --- the tensors compared --------------------------------------------------------------------

def quantized_tensors(model) -> list[tuple[str, str, str]]:
    """(node name, tensor, node op) of each int8/uint8 tensor a named node makes, in node
    order: by shape inference, and the first output of every QuantizeLinear, QLinear* and
    DynamicQuantizeLinear node (inference stops at com.microsoft ops)."""
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    kinds = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.output)}
    wanted = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    return [(n.name, out, n.op_type) for n in model.graph.node
            for i, out in enumerate(n.output) if out and n.name and
            (kinds.get(out) in wanted or i == 0 and _quantizing(n.op_type))]


def _quantizing(op: str) -> bool:
    return op.startswith("QLinear") or op in ("QuantizeLinear", "DynamicQuantizeLinear")


def onnxruntime_values(model, feeds, names, optimize: bool) -> dict:
    """{name: array} of the model's outputs and the tensors `names`, from onnxruntime (one
    thread) with its graph optimizations on or off."""
    import onnx
    import onnxruntime
    full = onnx.ModelProto()
    full.CopyFrom(model)
    known = {o.name for o in full.graph.output}
    full.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in known)
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    level = onnxruntime.GraphOptimizationLevel
    so.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(full.SerializeToString(), so,
                                           providers=["CPUExecutionProvider"])
    outs = [o.name for o in session.get_outputs()]
    return dict(zip(outs, session.run(None, feeds)))


def fused_values(model, feeds, tensors) -> dict:
    """{tensor: array} of onnxruntime's optimized run (ORT_ENABLE_ALL) for the `tensors`
    it still has, and the model's outputs. Exposing a tensor of the file itself changes
    what onnxruntime fuses (its x86 optimizer turns an int8 QuantizeLinear/DequantizeLinear
    pair into uint8 only where the quantized tensor has one reader and is no graph output),
    so the file is optimized first and its optimized graph run as saved, each tensor found
    there by _optimized_names (uint8 where it was int8: steps_off shifts it back by 128;
    NHWC where a kernel's layout changed: steps_off transposes it back)."""
    import tempfile

    import onnx
    import onnxruntime
    with tempfile.TemporaryDirectory() as tmp:
        so = onnxruntime.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        onnxruntime.InferenceSession(model.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
        optimized = onnx.load(so.optimized_model_filepath)
    found = _optimized_names(model, optimized, tensors)
    values = onnxruntime_values(optimized, feeds, sorted(set(found.values())), False)
    out = {o.name: values[o.name] for o in model.graph.output}
    for tensor, name in found.items():
        out[tensor] = values[name]
    return out


def _optimized_names(model, optimized, tensors) -> dict:
    """{tensor: its name in onnxruntime's optimized graph}: the output of the
    QuantizeLinear of the same name; else of the int8 kernel (QLinearConv, QLinearAdd, ...,
    named after the float op it replaced, plus a _token_N suffix where its layout pass
    renamed it) that took in the float op quantized by it (through a relu or clip); else
    the input of a DequantizeLinear that read it."""
    nodes = {n.name: n for n in optimized.graph.node}
    kernels = {re.sub(r"_token_\d+$", "", n.name): n for n in optimized.graph.node
               if "QLinear" in n.op_type}
    producer = {o: n for n in model.graph.node for o in n.output}
    readers = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            readers.setdefault(n.input[0], []).append(n.name)
    found = {}
    for node, tensor, op in tensors:
        same = nodes.get(node)
        source = producer[tensor].input[0] if producer[tensor].input else None
        float_op = producer.get(source)
        while float_op is not None and float_op.op_type in ("Relu", "Clip"):
            float_op = producer.get(float_op.input[0])
        if same is not None and same.op_type == op:
            found[tensor] = same.output[0]
        elif op == "QuantizeLinear" and float_op is not None and float_op.name in kernels:
            found[tensor] = kernels[float_op.name].output[0]
        else:
            found.update((tensor, nodes[r].input[0]) for r in readers.get(tensor, [])[:1]
                         if r in nodes)
    return found


def legato_values(module, backend: str, feeds, tensors, shapes) -> tuple[dict, object]:
    """({tensor: array} for `tensors` legato exposes, the model's first output) on
    `backend`: the last int8/uint8 result of the calls from each tensor's node that has
    the tensor's shape (`shapes`: {tensor: shape}, from onnxruntime's run)."""
    import legato
    compiled = legato.compile(module, backend)
    probe = legato.api.with_every_result(compiled)
    results = probe(*feeds.values())
    results = results if isinstance(results, (tuple, list)) else (results,)
    by_node, index = {}, 0
    for call in probe.module.main.calls:
        for out in call.outputs:
            if call.origin is not None and out.dtype in ("int8", "uint8"):
                by_node.setdefault(call.origin.source, []).append(results[index])
            index += 1
    values = {}
    for node, tensor, _ in tensors:
        made = [r for r in by_node.get(node, []) if np.shape(r) == shapes.get(tensor)]
        if made:
            values[tensor] = made[-1]
    out = compiled(*feeds.values())
    return values, out[0] if isinstance(out, (tuple, list)) else out


# --- figures ---------------------------------------------------------------------------------

def steps_off(got, want) -> np.ndarray:
    """|got - want| elementwise; a uint8 side against an int8 one is shifted by 128 (as
    onnxruntime's x86 optimizer turns int8 activations into uint8)."""
    got, want = _signed(got, want), _signed(want, got)
    got, want = np.asarray(got, np.float64), _nchw(np.asarray(want, np.float64), got.shape)
    got = _nchw(got, want.shape)
    if got.shape != want.shape:
        return np.full(1, np.inf)
    return np.abs(got - want)


def _signed(x, other):
    x = np.asarray(x)
    if x.dtype == np.uint8 and np.asarray(other).dtype == np.int8:
        return x.astype(np.int16) - 128
    return x


def _nchw(x, shape):
    """An NHWC map (onnxruntime's optimized layout for int8 convolutions) as NCHW."""
    if x.ndim == 4 and x.shape != tuple(shape) and x.transpose(0, 3, 1, 2).shape == tuple(shape):
        return x.transpose(0, 3, 1, 2)
    return x


def within_one(off: np.ndarray) -> float:
    return float((off <= 1.001).mean()) if off.size else 1.0


def output_step(model):
    """The step of the model's first output (its DequantizeLinear's scale), or None for an
    output a float op makes."""
    from tests.zoo.quant import output_step as step
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(model.graph.output[0].name)
    return step(model) if node is not None and node.op_type == "DequantizeLinear" else None


def output_cell(got, want, step) -> str:
    """Within one step of the output's grid (or, for a float output, max relative error)."""
    off = steps_off(got, want)
    if step is None:
        return f"rel {off.max() / max(np.abs(want).max(), 1e-30):.1e}"
    off = off / step
    return f"{within_one(off):8.3%} ({off.max():.3g})"


def layer_of(tensor: str, position: int) -> str:
    """The block a tensor belongs to, from its name (BERT's layer.N, ResNet's
    stages.S/layers.L, MobileNetV2's layer.N), else its position in groups of 8."""
    found = re.findall(r"(?:stages|layers|layer|blocks)[._](\d+)", tensor)
    return ".".join(found) if found else f"#{position // 8 * 8}"


def comparable(tensor: str, got: dict, want: dict) -> bool:
    """Both sides have `tensor`, of one shape (NHWC taken as NCHW)."""
    return tensor in got and tensor in want and np.isfinite(
        steps_off(got[tensor], want[tensor]).max(initial=0))


def first_off(tensors, got: dict, want: dict, steps: float = 1.001):
    """(tensor, op, share within one step, share equal, max steps) of the first tensor
    more than `steps` off."""
    for _, tensor, op in tensors:
        if comparable(tensor, got, want):
            off = steps_off(got[tensor], want[tensor])
            if off.max(initial=0) > steps:
                return tensor, op, within_one(off), float((off == 0).mean()), float(off.max())
    return None


def first_text(first) -> str:
    if first is None:
        return "none"
    tensor, op, within, equal, most = first
    return f"{tensor} ({op}) {within:.3%} within one, {equal:.4%} equal, {most:.3g} max"


def per_layer(tensors, got: dict, want: dict) -> dict:
    """{layer: (worst within-one share, most steps off, tensors compared)}."""
    rows = {}
    for position, (_, tensor, _) in enumerate(tensors):
        if not comparable(tensor, got, want):
            continue
        off = steps_off(got[tensor], want[tensor])
        share, worst, n = rows.get(layer_of(tensor, position), (1.0, 0.0, 0))
        rows[layer_of(tensor, position)] = (min(share, within_one(off)),
                                            max(worst, float(off.max(initial=0))), n + 1)
    return rows


def alone(model, feeds, tensor: str, backend: str) -> str:
    """Whether legato's run of the one step making `tensor`, from onnxruntime's unfused
    inputs to it, is within one step of onnxruntime's run of that step alone."""
    from legato.frontends import onnx as frontend
    from tests.fuzz.target_quant import every_value, onnxruntime_results, step_model
    import legato
    values = every_value(model, feeds)
    part, inputs, ops = step_model(model, tensor, values)
    want = onnxruntime_results(part, inputs)[0]
    got = legato.compile(frontend.load(part), backend)(**inputs)
    off = steps_off(got, want)
    return (f"alone ({', '.join(ops)}): {within_one(off):.3%} within one, "
            f"{off.max(initial=0):.3g} max")


# --- one model -------------------------------------------------------------------------------

def report(name: str, variant: str, backends, layers: bool, show_alone: bool,
           trained_stats: bool = False, seed: int = 100) -> list[str]:
    import onnx

    from benchmarks import quant as bench
    from legato.frontends import onnx as frontend
    path = variant_file(name, variant, trained_stats)
    model = onnx.load(str(path))
    feeds = bench.feeds(name, seed)
    tensors = quantized_tensors(model)
    names = [t for _, t, _ in tensors]
    out = model.graph.output[0].name
    ort = fused_values(model, feeds, tensors)
    spec = onnxruntime_values(model, feeds, names, False)
    plain = onnxruntime_values(model, feeds, [], True)[out]
    shapes = {t: np.shape(v) for t, v in spec.items()}
    step = output_step(model)
    label = f"{name} (trained statistics)" if trained_stats else name
    lines = [f"== {label} {variant}: {len(tensors)} int8/uint8 tensors; output step "
             f"{step if step is not None else 'none (float output)'}",
             f"  ort vs spec output: {output_cell(plain, spec[out], step)}; ort's optimized "
             f"graph run again gives its output: {not steps_off(ort[out], plain).max() > 0}; "
             f"{len(ort) - 1} tensors found in it"]
    lines.append("  ort vs spec first differing: " + first_text(first_off(tensors, ort, spec, 0)))
    lines.append("  ort vs spec first >1 step: " + first_text(first_off(tensors, ort, spec)))
    module = frontend.load(model)
    for backend in backends:
        got, result = legato_values(module, backend, feeds, tensors, shapes)
        lines.append(f"  {backend:10} output vs ort {output_cell(result, plain, step)}   vs "
                     f"spec {output_cell(result, spec[out], step)}   ({len(got)} of "
                     f"{len(tensors)} tensors exposed)")
        for label, want in (("ort", ort), ("spec", spec)):
            lines.append(f"    first differing from {label}: "
                         + first_text(first_off(tensors, got, want, 0)))
            first = first_off(tensors, got, want)
            text = first_text(first)
            if first is not None and show_alone and label == "spec":
                text += "; " + alone(model, feeds, first[0], backend)
            lines.append(f"    first >1 step from {label}: {text}")
        if layers:
            lines.append(f"    {'layer':9}{'vs ort: worst share, max':>28}"
                         f"{'vs spec: worst share, max':>28}")
            to_ort, to_spec = per_layer(tensors, got, ort), per_layer(tensors, got, spec)
            for key in to_ort:
                a, b = to_ort[key], to_spec.get(key, (float("nan"),) * 3)
                lines.append(f"    {key:9}{a[0]:20.3%}{a[1]:8.3g}{b[0]:20.3%}{b[1]:8.3g}")
    return lines


def outputs_table(name: str, variant: str, backends, seeds: int,
                  trained_stats: bool = False) -> str:
    """One Markdown row: per backend, the lowest and the mean share of output elements
    within one step of ort's and of spec's over `seeds` inputs (feeds(name, 100 + i)),
    and ort against spec."""
    import onnx

    import legato
    from benchmarks import quant as bench
    from legato.frontends import onnx as frontend
    model = onnx.load(str(variant_file(name, variant, trained_stats)))
    step, out = output_step(model), model.graph.output[0].name
    compiled = {b: legato.compile(frontend.load(model), b) for b in backends}
    shares = {}
    for seed in range(100, 100 + seeds):
        feeds = bench.feeds(name, seed)
        ort = onnxruntime_values(model, feeds, [], True)[out]
        spec = onnxruntime_values(model, feeds, [], False)[out]
        runs = {b: c(*feeds.values()) for b, c in compiled.items()}
        pairs = [("ort vs spec", ort, spec)] + [
            (f"{b} vs {label}", r[0] if isinstance(r, (tuple, list)) else r, want)
            for b, r in runs.items() for label, want in (("ort", ort), ("spec", spec))]
        for key, got, want in pairs:
            off = steps_off(got, want) / (step or 1.0)
            shares.setdefault(key, []).append(
                within_one(off) if step else float(off.max() / np.abs(want).max()))
    cells = [f"{key}: {min(v):.3%} min, {np.mean(v):.3%} mean" if step else
             f"{key}: max rel. error {max(v):.1e}" for key, v in shares.items()]
    label = f"{name} (trained statistics)" if trained_stats else name
    return f"| {label} | {variant} | " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,resnet50,mobilenetv2")
    parser.add_argument("--variants", default="qdq-s8s8,qdq-u8s8")
    parser.add_argument("--backends", default="cpu_ref,c_kernels")
    parser.add_argument("--layers", action="store_true", help="the worst tensor per layer")
    parser.add_argument("--trained-stats", action="store_true",
                        help="CNNs with batch-norm statistics measured on the calibration data")
    parser.add_argument("--seed", type=int, default=100, help="the input compared")
    parser.add_argument("--seeds", type=int, default=0,
                        help="only the outputs, over this many inputs (a table row each)")
    parser.add_argument("--alone", action="store_true",
                        help="run the first step more than one off from spec alone")
    args = parser.parse_args(argv)
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    for name in args.models.split(","):
        for variant in args.variants.split(","):
            if variant == "dynamic" and name != "bert":   # quantize_dynamic: matmuls only
                continue
            backends = args.backends.split(",")
            if args.seeds:
                print(outputs_table(name, variant, backends, args.seeds, args.trained_stats),
                      flush=True)
                continue
            for line in report(name, variant, backends, args.layers, args.alone,
                               args.trained_stats, args.seed):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
