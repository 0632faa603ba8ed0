"""Thread scaling: c_kernels against onnxruntime at 1, 2, 4, 8, ... threads.

    .venv/bin/python benchmarks/threads.py [--threads 1,2,4,8,16] [--repeat 10]
                                           [--files a.onnx b.onnx ...] [--models resnet50,...]

The models are ONNX files: `--files` names them, else `--models` picks from
benchmarks/real_size.py's float32 models and benchmarks/quant.py's int8 (QDQ) ones, spelt
`resnet50` and `resnet50:int8` (exported and cached as those scripts do). Inputs are drawn
from each file's declared inputs: standard-normal floats, integers in [0, 1000) (token ids
below every vocabulary used here), a symbolic dimension 1 if its name says batch, else 128.

Per model and thread count, median ms of one forward pass in interleaved rounds
(zoo.interleaved_medians: each runtime in turn): c_kernels (LEGATO_NUM_THREADS = N, read per
call) and onnxruntime (intra-op threads = N, sequential execution). Printed: both figures,
c_kernels / onnxruntime, and each runtime's speed-up over its own one-thread time; last, the
geometric mean of the ratio per thread count. The figures are only as quiet as the machine:
the load average is printed first.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":  # BLAS threads before numpy loads; c_kernels reads its own per call
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.real_size import geomean  # noqa: E402
from benchmarks.zoo import interleaved_medians, ort_session  # noqa: E402

DEFAULT_MODELS = "bert,resnet50,mobilenetv2,vit,resnet50:int8,mobilenetv2:int8,bert:int8"
NUMPY_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64,
                9: np.bool_, 10: np.float16, 11: np.float64}


def model_path(spec: str) -> Path:
    """The ONNX file of `name` (real_size.py) or `name:int8` (quant.py), made if not cached."""
    name, _, kind = spec.partition(":")
    if kind == "int8":
        from benchmarks import quant
        return Path(quant.model_files(name)[1])
    from benchmarks import real_size
    return real_size.model_file(name)


def feeds(path: Path, seed: int = 100) -> dict:
    """One input per graph input, from its declared element type and shape."""
    import onnx
    rng = np.random.default_rng(seed)
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    out = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else
                 (1 if "batch" in d.dim_param.lower() else 128) for d in tensor.shape.dim]
        dtype = NUMPY_DTYPES[tensor.elem_type]
        if np.issubdtype(dtype, np.floating):
            out[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            out[value.name] = rng.integers(0, 1000, shape).astype(dtype)
    return out


def scaling(path: Path, thread_counts, repeat: int) -> dict:
    """{threads: {"c_kernels": ms, "onnxruntime": ms}} and the largest relative difference."""
    import legato
    from legato.frontends import onnx as onnx_frontend
    x, module = feeds(path), onnx_frontend.load(str(path))
    figures = {}
    for threads in thread_counts:
        # c_kernels binds the thread count into its prepared calls when it compiles
        os.environ["LEGATO_NUM_THREADS"] = str(threads)
        compiled = legato.compile(module, "c_kernels")
        session = ort_session(path, threads)
        figures[threads] = interleaved_medians(
            {"c_kernels": (lambda: compiled(*x.values()),),
             "onnxruntime": (lambda s=session: s.run(None, x),)}, repeat)
    got = np.asarray(compiled(*x.values()), dtype=np.float64)
    want = np.asarray(ort_session(path, 1).run(None, x)[0], dtype=np.float64)
    return {"ms": figures, "err": float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))}


def report(named_paths: dict, thread_counts, repeat: int) -> None:
    print(f"{'model':18}{'thr':>4}{'c ms':>9}{'ORT ms':>9}{'c/ORT':>7}"
          f"{'c x1':>7}{'ORT x1':>8}", flush=True)
    ratios: dict[int, list[float]] = {t: [] for t in thread_counts}
    for name, path in named_paths.items():
        try:
            result = scaling(path, thread_counts, repeat)
        except Exception as err:  # noqa: BLE001 - importers and runtimes raise many types
            print(f"{name:18} error: {type(err).__name__}: {str(err)[:300]}", flush=True)
            continue
        ms, first = result["ms"], result["ms"][thread_counts[0]]
        for t in thread_counts:
            c, ort = ms[t]["c_kernels"], ms[t]["onnxruntime"]
            ratios[t].append(c / ort)
            print(f"{name:18}{t:>4}{c:9.2f}{ort:9.2f}{c / ort:7.2f}"
                  f"{first['c_kernels'] / c:7.2f}{first['onnxruntime'] / ort:8.2f}", flush=True)
        print(f"{'':18}max |c - ORT| / max |ORT| = {result['err']:.1e}", flush=True)
    print(f"{'geomean c/ORT':18}" +
          "  ".join(f"{t}t {geomean(ratios[t]):.2f}" for t in thread_counts), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help="real_size.py names, or NAME:int8 for quant.py's QDQ files")
    parser.add_argument("--files", nargs="*", default=[], help="ONNX files (replace --models)")
    parser.add_argument("--threads", default=f"1,2,4,8,{os.cpu_count()}",
                        help="comma-separated thread counts")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per figure")
    args = parser.parse_args(argv)
    thread_counts = sorted({int(n) for n in args.threads.split(",") if n})
    if args.files:
        named = {Path(f).stem: Path(f) for f in args.files}
    else:
        named = {spec: model_path(spec) for spec in args.models.split(",") if spec}
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"onnxruntime {onnxruntime.__version__}", flush=True)
    report(named, thread_counts, args.repeat)


if __name__ == "__main__":
    main()
