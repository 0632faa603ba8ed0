"""int8 models at their published sizes: onnxruntime and c_kernels, float32 and int8.

    .venv/bin/python benchmarks/quant.py [--threads 1,2] [--repeat 10] [--models bert,resnet50]
    .venv/bin/python benchmarks/quant.py --profile resnet50 [--top 15]

Models (transformers configs, random weights, batch 1): BERT-base (12 layers, 768 wide,
sequence 128, int64 token ids), ResNet-50 and MobileNetV2 (224x224 RGB). Each is exported to
ONNX once (torch.onnx.export, opset 17) and quantized once with onnxruntime's
quantize_static (QDQ, per-channel, int8 activations and weights, random calibration data);
both files are cached under $LEGATO_BENCH_CACHE (default ~/.cache/legato-bench), named by a
key of this file's model settings and the torch / transformers / onnxruntime versions.

Per model and thread count, median ms of one forward pass, sampled in interleaved rounds
(zoo.interleaved_medians: each runtime in turn, so load from other processes falls on all):
  ort fp32 / ort int8   onnxruntime on the float and the QDQ file (intra-op threads = N)
  c fp32 / c int8       legato.compile(..., "c_kernels") of the same files
                        (LEGATO_NUM_THREADS = N; the QDQ file folded into qnn ops)
and the ratios c int8 / ort int8 (below 1: c_kernels faster), c fp32 / c int8 (above 1:
int8 faster than c_kernels' own float32). Accuracy, from the same inputs:
  int8 steps   the fraction of c int8's output elements within one quantization step of
               onnxruntime's int8 output (the step: the scale of the DequantizeLinear that
               makes the output; nan where a float op makes it, as BERT's LayerNorm)
  int8 err     max |c int8 - ort int8| / max |ort int8|
  fp32 err     max |c fp32 - ort fp32| / max |ort fp32|
`--profile MODEL` prints c_kernels' int8 steps of one model by time instead.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":  # BLAS threads before numpy loads; c_kernels reads its own per call
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.published import CACHE, SEED, export_onnx, transformers_model  # noqa: E402
from benchmarks.zoo import compiled_profile_lines, interleaved_medians, ort_session  # noqa: E402

CALIBRATION_BATCHES = 4
# name -> (transformers config, model class, config kwargs, input kind)
MODELS = {
    "bert": ("BertConfig", "BertModel", dict(attn_implementation="eager"), "tokens"),
    "resnet50": ("ResNetConfig", "ResNetModel", dict(), "image"),
    "mobilenetv2": ("MobileNetV2Config", "MobileNetV2Model", dict(), "image"),
}
TOKENS, IMAGE = 128, 224


def _key(name: str) -> str:
    import onnxruntime
    import torch
    import transformers
    text = f"{MODELS[name]} {TOKENS} {IMAGE} {SEED} {CALIBRATION_BATCHES} torch " \
           f"{torch.__version__} transformers {transformers.__version__} onnxruntime " \
           f"{onnxruntime.__version__}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def feeds(name: str, seed: int) -> dict:
    """One input batch: token ids (no special ids) or standard-normal pixels."""
    rng = np.random.default_rng(seed)
    if MODELS[name][3] == "tokens":
        return {"ids": rng.integers(4, 30000, (1, TOKENS)).astype(np.int64)}
    return {"x": rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32)}


def _torch_module(name: str):
    config_name, model_name, kwargs, _ = MODELS[name]
    return transformers_model(config_name, model_name, kwargs)


def model_files(name: str) -> tuple[Path, Path]:
    """(float32 .onnx, QDQ int8 .onnx) of `name`, made now unless cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    stem = CACHE / f"{name}-{_key(name)}"
    fp32, int8 = stem.with_suffix(".fp32.onnx"), stem.with_suffix(".int8.onnx")
    if not fp32.exists():
        export_onnx(_torch_module(name), feeds(name, 0), fp32)
    if not int8.exists():
        _quantize(name, fp32, int8)
    return fp32, int8


def _quantize(name: str, source: Path, target: Path) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([feeds(name, s) for s in range(1, 1 + CALIBRATION_BATCHES)])

        def get_next(self):
            return next(self.batches, None)
    tmp = target.with_suffix(".tmp")
    quantize_static(str(source), str(tmp), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    tmp.rename(target)


def output_step(path: Path) -> float | None:
    """The scale of the DequantizeLinear that makes the model's output (the grid its float
    output lies on), or None where a float op makes it (BERT's last LayerNormalization)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path), load_external_data=False)
    out = model.graph.output[0].name
    maker = next(n for n in model.graph.node if out in n.output)
    if maker.op_type != "DequantizeLinear":
        return None
    init = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(init[maker.input[1]]))


def c_kernels_model(path: Path):
    import legato
    from legato.frontends import onnx as onnx_frontend
    return legato.compile(onnx_frontend.load(str(path)), "c_kernels")


def measure(name: str, threads: int, repeat: int) -> dict:
    """Median ms per runtime and the accuracy figures of one model at one thread count."""
    os.environ["LEGATO_NUM_THREADS"] = str(threads)
    fp32, int8 = model_files(name)
    x = feeds(name, 100)
    sessions = {"ort fp32": ort_session(fp32, threads), "ort int8": ort_session(int8, threads)}
    compiled = {"c fp32": c_kernels_model(fp32), "c int8": c_kernels_model(int8)}
    runs = {k: (lambda s=s: s.run(None, x)) for k, s in sessions.items()}
    runs.update({k: (lambda c=c: c(*x.values())) for k, c in compiled.items()})
    out = {k: np.asarray(fn()[0] if k.startswith("ort") else fn()) for k, fn in runs.items()}
    times = interleaved_medians({k: (fn,) for k, fn in runs.items()}, repeat)
    step, diff = output_step(int8), np.abs(out["c int8"] - out["ort int8"])
    times["int8 steps"] = float((diff / step <= 1.001).mean()) if step else float("nan")
    times["int8 err"] = float(diff.max() / np.abs(out["ort int8"]).max())
    times["fp32 err"] = float(np.abs(out["c fp32"] - out["ort fp32"]).max()
                              / np.abs(out["ort fp32"]).max())
    return times


def table(models, thread_counts, repeat) -> list[str]:
    cols = ["ort fp32", "ort int8", "c fp32", "c int8"]
    head = f"{'model':12}{'thr':>4}" + "".join(f"{c:>10}" for c in cols) + \
        f"{'c8/ort8':>9}{'cf/c8':>7}{'ortf/ort8':>10}{'int8 steps':>12}{'int8 err':>10}" \
        f"{'fp32 err':>10}"
    lines = ["median ms of one forward pass, batch 1", head]
    print("\n".join(lines), flush=True)
    for name in models:
        for threads in thread_counts:
            try:
                t = measure(name, threads, repeat)
            except Exception as err:  # noqa: BLE001 - importers and runtimes raise many types
                lines.append(f"{name:12}{threads:>4}  error: {type(err).__name__}: "
                             f"{str(err).splitlines()[0][:200]}")
                continue
            lines.append(f"{name:12}{threads:>4}" + "".join(f"{t[c]:10.2f}" for c in cols) +
                         f"{t['c int8'] / t['ort int8']:9.2f}{t['c fp32'] / t['c int8']:7.2f}"
                         f"{t['ort fp32'] / t['ort int8']:10.2f}{t['int8 steps']:12.2%}"
                         f"{t['int8 err']:10.1e}{t['fp32 err']:10.1e}")
            print(lines[-1], flush=True)
    return lines


def profile_lines(name: str, top: int, repeat: int) -> list[str]:
    """c_kernels' int8 steps of `name` by median time: per op, then the `top` slowest."""
    compiled = c_kernels_model(model_files(name)[1])
    return compiled_profile_lines(f"{name} int8", compiled, list(feeds(name, 100).values()),
                                  top, repeat)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per figure")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--profile", metavar="MODEL", choices=list(MODELS))
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    threads = [int(n) for n in args.threads.split(",") if n]
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)  # not a line per unused initializer
    if args.profile:
        os.environ["LEGATO_NUM_THREADS"] = str(threads[0])
        print("\n".join(profile_lines(args.profile, args.top, args.repeat)))
        return
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    table(models, threads, args.repeat)


if __name__ == "__main__":
    main()
