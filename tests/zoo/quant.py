"""The quantized slice of the zoo: zoo models' ONNX exports quantized with onnxruntime's own
tool (`quantize_static`, in the QDQ and QOperator formats), imported by legato, run on
cpu_ref and c_kernels and compared with onnxruntime's int8 run of the same file (its fused
int8 kernels, one thread).

    row = run("resnet", QUANT["resnet-qdq"])         # a QuantRow: the figures per backend
    python -m tests.zoo.quant [tests/zoo/QUANT_STATUS.md]   # the table of every pair

The measure: the fraction of output elements within one quantization step of
onnxruntime's (the step of the DequantizeLinear that produces the output, or for an output
left float, of the last QuantizeLinear before it) and the most steps any element is off;
a pair passes with at least WITHIN_SHARE within one step, or else with every quantized
step of the model, run alone from onnxruntime's integer inputs, within one step of
onnxruntime's run of that step (onnxruntime's optimizer leaves some steps float, as it
does the softmax of an s8s8 QDQ BERT after rewriting its int8 activations to uint8, where
legato runs its QLinearSoftmax; a step off at the coarse 1/255 of probabilities is four
at the finer scale after it). Quantized files are cached next to the exports
(`.cache/zoo/`), named by the export's key and the quantization's.
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import export, models

BACKENDS = ("cpu_ref", "c_kernels")
WITHIN_SHARE = 0.999
CALIBRATION = 4   # batches of random inputs, the example input not among them
QUANTIZE = ("qnn.quantize", "qnn.dequantize", "qnn.requantize")


@dataclass(frozen=True)
class Quantization:
    """One quantize_static configuration of a zoo model."""
    model: str
    fmt: str                 # "QDQ" or "QOperator"
    per_channel: bool = True
    activations: str = "s8"  # "s8" (int8) or "u8" (uint8); weights are int8
    quantize_bias: bool = True

    @property
    def name(self) -> str:
        act = "u8s8" if self.activations == "u8" else "s8s8"
        return (f"{self.model}-{self.fmt.lower()}-{act}"
                f"{'-pc' if self.per_channel else ''}{'' if self.quantize_bias else '-fb'}")


def _pairs():
    out = []
    for model in ("bert", "distilbert", "resnet", "mobilenet_v2", "efficientnet", "vit",
                  "convnext"):
        out.append(Quantization(model, "QDQ"))
        out.append(Quantization(model, "QOperator", activations="u8"))
    out += [Quantization("bert", "QDQ", per_channel=False, activations="u8"),
            Quantization("distilbert", "QDQ", activations="u8"),
            Quantization("vit", "QDQ", activations="u8"),
            Quantization("resnet", "QDQ", activations="u8", quantize_bias=False)]
    return {q.name: q for q in out}


QUANT = _pairs()


@dataclass
class QuantRow:
    name: str
    within: dict = field(default_factory=dict)    # backend -> share within one step
    worst: dict = field(default_factory=dict)     # backend -> most steps off
    qnn_calls: int = 0     # integer ops after folding (qnn.* but quantize/dequantize)
    stepwise: list = field(default_factory=list)  # backends below WITHIN_SHARE whose
    failure: str = ""                             # every step alone is within one step

    @property
    def ok(self) -> bool:
        return not self.failure


def _key(q: Quantization) -> str:
    text = f"{export.cache_key(q.model)} {q} {CALIBRATION} {export._versions()}"
    import onnxruntime
    return hashlib.sha256((text + onnxruntime.__version__).encode()).hexdigest()[:12]


def _random_like(arrays, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for a in arrays:
        if a.dtype.kind in "iu":   # token ids: none of the special ids
            out.append(rng.integers(4, models.VOCAB, a.shape).astype(a.dtype))
        else:
            out.append(rng.standard_normal(a.shape).astype(a.dtype))
    return out


def quantized_file(q: Quantization) -> Path:
    """The zoo model's export quantized as `q` says (made now unless cached)."""
    path = export.CACHE / f"{q.name}-{_key(q)}.onnx"
    if path.exists():
        return path
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    source = export.onnx_file(q.model)
    inputs, _ = export.eager(q.model)
    names = [i.name for i in onnx.load(str(source), load_external_data=False).graph.input]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([dict(zip(names, _random_like(inputs, seed)))
                                 for seed in range(1, CALIBRATION + 1)])

        def get_next(self):
            return next(self.batches, None)

    partial = path.with_suffix(".part.onnx")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)   # its advice to pre-process the model, on every call
    try:
        quantize_static(str(source), str(partial), Reader(),
                        quant_format=getattr(QuantFormat, q.fmt), per_channel=q.per_channel,
                        activation_type=QuantType.QInt8 if q.activations == "s8" else
                        QuantType.QUInt8, weight_type=QuantType.QInt8,
                        extra_options={"QuantizeBias": q.quantize_bias})
    finally:
        root.setLevel(level)
    partial.replace(path)
    for stale in export.CACHE.glob(f"{q.name}-*.onnx"):
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def onnxruntime_int8(path: Path, feeds: dict):
    import onnxruntime
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def output_step(model) -> float:
    """The quantization step the model's first output lies on: its DequantizeLinear's
    scale, or for an output left float, the last QuantizeLinear's."""
    from onnx import numpy_helper
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(model.graph.output[0].name)
    if node is not None and node.op_type == "DequantizeLinear":
        return float(np.max(init[node.input[1]]))
    last = [n for n in model.graph.node if n.op_type == "QuantizeLinear"][-1]
    return float(np.max(init[last.input[1]]))


def figures(got, want, step: float) -> tuple[float, float]:
    """(share of elements within one step, most steps off)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return 0.0, float("inf")
    off = np.abs(got - want) / step
    off = np.where(np.isfinite(off), off, np.inf)
    return float((off <= 1.001).mean()), float(off.max(initial=0.0))


def run(q: Quantization) -> QuantRow:
    """Quantize, import, fold and run `q` on each backend against onnxruntime."""
    import onnx

    import legato
    from legato.frontends import onnx as frontend
    row = QuantRow(q.name)
    try:
        path = quantized_file(q)
        model = onnx.load(str(path))
        inputs, _ = export.eager(q.model)
        feeds = dict(zip([i.name for i in model.graph.input], inputs))
        want = onnxruntime_int8(path, feeds)[0]
        module = frontend.load(model)
        folded, _ = legato.fold_qdq(module)
        row.qnn_calls = sum(c.op.startswith("qnn.") and c.op not in QUANTIZE
                            for c in folded.main.calls)
    except Exception as err:  # noqa: BLE001 - quantizer, onnxruntime and importer errors
        row.failure = f"import: {export.first_line(err)}"
        return row
    step = output_step(model)
    for backend in BACKENDS:
        try:
            got = legato.compile(module, backend)(*inputs)
        except Exception as err:  # noqa: BLE001
            row.failure = row.failure or f"{backend}: {export.first_line(err)}"
            continue
        got = got[0] if isinstance(got, (tuple, list)) else got
        row.within[backend], row.worst[backend] = figures(got, want, step)
        if not row.within[backend] >= WITHIN_SHARE:
            steps_alone(row, model, feeds, backend)
    return row


def steps_alone(row: QuantRow, model, feeds, backend: str) -> None:
    """Below WITHIN_SHARE on the whole output: each quantized step alone must be within
    one step of onnxruntime's run of it (a step off at a coarse scale is several at a finer
    one downstream, and onnxruntime's optimizer fuses some steps into its int8 kernels and
    leaves others float, by its own rules); otherwise the pair fails on that step."""
    from tests.fuzz import Mismatch
    from tests.fuzz.target_quant import check_each_step
    try:
        check_each_step(model, feeds, backend, backend)
    except Mismatch as err:
        row.failure = row.failure or str(err)
    else:
        row.stepwise.append(backend)


HEADER = ("quantized model", *(f"{b} within 1 step, max off" for b in BACKENDS),
          "qnn calls", "result")


def table(rows) -> list[str]:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for r in rows:
        cells = [r.name, *(f"{r.within[b]:.3%}, {r.worst[b]:.3g}" if b in r.within else "-"
                           for b in BACKENDS), str(r.qnn_calls), r.failure or ("ok, each step within one (" + ", ".join(r.stepwise)
                                            + " below on the whole)" if r.stepwise else "ok")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", help="Markdown file to write (default: print)")
    parser.add_argument("--only", help="comma-separated pair names (default: all)")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(QUANT)
    start, rows = time.perf_counter(), []
    for name in names:
        rows.append(run(QUANT[name]))
        print(f"{name:32} {rows[-1].failure or 'ok'}", file=sys.stderr, flush=True)
    import onnxruntime
    text = "\n".join([
        "# Quantized model zoo status", "",
        "Generated by `python -m tests.zoo.quant`; do not edit by hand.",
        f"{sum(r.ok for r in rows)} of {len(rows)} quantized models pass: onnxruntime "
        f"{onnxruntime.__version__}'s quantize_static, legato against onnxruntime's int8 run "
        f"(one thread): at least {WITHIN_SHARE:.1%} of output elements within one "
        "quantization step, or else every quantized step alone within one step of "
        "onnxruntime's run of that step. Names: model-format-activations/weights, pc "
        f"per-channel, fb float bias (QuantizeBias off). {time.perf_counter() - start:.0f} s.",
        "",
        *table(rows)]) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        print(text)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
