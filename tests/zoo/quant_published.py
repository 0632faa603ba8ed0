"""The accuracy of legato's int8 runs at the models' published sizes (BERT-base seq 128,
ResNet-50 and MobileNetV2 224x224, the files benchmarks/quant.py builds and caches), in
each format onnxruntime's quantizer writes, against onnxruntime's int8 run (one thread).

    .venv/bin/python -m tests.zoo.quant_published [--models bert,resnet50] [--variants qdq-s8s8]

Per model and variant: the share of output elements within one quantization step of
onnxruntime's and the most steps off, on cpu_ref and c_kernels (tests/zoo/quant.py's
measure); a dynamically quantized model, whose float output lies on no grid, gives its
max |got - want| / max |want| instead; with --steps, a figure below 99.9% is followed by
whether every quantized step alone is within one step of onnxruntime's run of it. Slow
(minutes per model on two cores): not a test.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from . import quant

VARIANTS = {   # name -> quantize_static settings (QDQ s8s8 per-channel: the benchmark's file)
    "qdq-s8s8": None,
    "qdq-u8s8": dict(fmt="QDQ", activations="u8"),
    "qoperator-u8s8": dict(fmt="QOperator", activations="u8"),
    "dynamic": "dynamic",
}


def variant_file(name: str, variant: str):
    from benchmarks import quant as bench
    fp32, int8 = bench.model_files(name)
    spec = VARIANTS[variant]
    if spec is None:
        return int8
    target = int8.with_name(int8.name.replace(".int8.", f".{variant}."))
    if target.exists():
        return target
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    partial = target.with_suffix(".part")
    if spec == "dynamic":
        quantize_dynamic(str(fp32), str(partial), weight_type=QuantType.QInt8)
    else:
        class Reader(CalibrationDataReader):
            def __init__(self):
                self.batches = iter([bench.feeds(name, s)
                                     for s in range(1, 1 + bench.CALIBRATION_BATCHES)])

            def get_next(self):
                return next(self.batches, None)
        quantize_static(str(fp32), str(partial), Reader(),
                        quant_format=getattr(QuantFormat, spec["fmt"]), per_channel=True,
                        activation_type=QuantType.QUInt8 if spec["activations"] == "u8"
                        else QuantType.QInt8, weight_type=QuantType.QInt8)
    partial.rename(target)
    return target


def measure(name: str, variant: str, steps: bool = False) -> str:
    import onnx

    import legato
    from benchmarks import quant as bench
    from legato.frontends import onnx as frontend
    path = variant_file(name, variant)
    feeds = bench.feeds(name, 0)
    want = quant.onnxruntime_int8(path, feeds)[0]
    model = onnx.load(str(path))
    module = frontend.load(model)
    cells = []
    for backend in quant.BACKENDS:
        got = legato.compile(module, backend)(*feeds.values())
        got = got[0] if isinstance(got, (tuple, list)) else got
        if variant == "dynamic":
            err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            cells.append(f"max rel. error {err:.2e}")
            continue
        within, worst = quant.figures(got, want, quant.output_step(model))
        cells.append(f"{within:.3%} within one step, {worst:.3g} max")
        if steps and within < quant.WITHIN_SHARE:
            row = quant.QuantRow(f"{name}-{variant}")
            quant.steps_alone(row, model, feeds, backend)
            cells[-1] += f" ({row.failure or 'each step alone within one'})"
    return f"| {name} | {variant} | " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,resnet50,mobilenetv2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", action="store_true",
                        help="below 99.9%%: also check each quantized step alone")
    args = parser.parse_args(argv)
    print("| model | variant | " + " | ".join(quant.BACKENDS) + " |")
    print("|" + " --- |" * (2 + len(quant.BACKENDS)))
    for name in args.models.split(","):
        for variant in args.variants.split(","):
            if variant == "dynamic" and name != "bert":
                continue
            print(measure(name, variant, args.steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
