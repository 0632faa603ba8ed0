"""The public model zoo (tests/zoo) on c_kernels against onnxruntime and torch eager.

    .venv/bin/python benchmarks/zoo.py [--threads 2] [--repeat 30] [--models resnet,vit]
    .venv/bin/python benchmarks/zoo.py --profile resnet [--top 15]

Every zoo model is exported to ONNX (tests/zoo/export.py, cached) and imported into legato;
the same file runs on onnxruntime (intra-op threads = --threads, sequential execution), and
the torch module runs eagerly (torch.set_num_threads). Figures are median milliseconds of one
forward pass, sampled in interleaved rounds (each runtime in turn, so load from other
processes falls on all of them); c_kernels / onnxruntime per model and its geometric mean
are the headline, at either thread count.
c_kernels uses LEGATO_NUM_THREADS = --threads (read when its library loads, so set here
before anything imports legato). A model that fails to import or run is listed with its
error. `--profile MODEL` prints the model's top c_kernels steps by time instead.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _threads_from_argv(argv) -> int:
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 1


if __name__ == "__main__":  # thread counts before numpy, torch or c_kernels load
    _n = str(_threads_from_argv(sys.argv[1:]))
    for _var in ("LEGATO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ[_var] = _n
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

TOLERANCE = 1e-4
SETTLE_S = 0.3
ROUNDS = 3


def timed_ms(fn, *args, repeat: int = 30, min_s: float = 0.2) -> list[float]:
    """Wall times (ms) of `fn(*args)` after one warm-up call; at least `repeat` calls and
    at least `min_s` seconds of them, so sub-millisecond models get enough samples."""
    fn(*args)
    times, spent = [], 0.0
    while len(times) < repeat or spent < min_s:
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
        spent += times[-1]
        if len(times) >= 20 * repeat:
            break
    return [t * 1e3 for t in times]


def median_ms(fn, *args, repeat: int = 30) -> float:
    """Median wall time (ms) of `fn(*args)`, as timed_ms samples it."""
    return float(np.median(timed_ms(fn, *args, repeat=repeat)))


def interleaved_medians(runs: dict, repeat: int, rounds: int = ROUNDS) -> dict:
    """Median ms per runtime over `rounds` rounds, each timing every runtime in turn (the
    order rotating) for a share of the samples: load from other processes on a shared
    machine then falls on all runtimes alike instead of on whichever ran during it."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, *args = runs[name]
            # the previous runtime's idle workers spin-wait for a while (OpenMP's,
            # onnxruntime's, c_kernels') and would take the second core from the next one
            time.sleep(SETTLE_S)
            samples[name] += timed_ms(fn, *args, repeat=max(1, repeat // rounds),
                                      min_s=0.2 / rounds)
    return {name: float(np.median(times)) for name, times in samples.items()}


def ort_session(path, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def compiled_c_kernels(name: str):
    """(compiled model, inputs, eager result) of zoo model `name` through ONNX."""
    import legato
    from legato.frontends import onnx as onnx_frontend
    from tests.zoo import export
    inputs, want = export.eager(name)
    module = onnx_frontend.load(export.onnx_file(name))
    return legato.compile(module, "c_kernels"), inputs, want


def measure(name: str, threads: int, repeat: int) -> dict:
    """Median ms per runtime, or {"error": ...}."""
    import torch
    from tests.zoo import check, export, models
    try:
        compiled, inputs, want = compiled_c_kernels(name)
        got = compiled(*inputs)
    except Exception as err:  # noqa: BLE001 - exporters and importers raise many types
        return {"error": check.describe(err)}
    error = export.rel_error(got, want)
    try:
        session = ort_session(export.onnx_file(name), threads)
    except Exception as err:  # noqa: BLE001
        return {"error": f"onnxruntime: {check.describe(err)}"}
    feeds = {i.name: a for i, a in zip(session.get_inputs(), inputs)}
    module, torch_inputs = models.build(name)
    torch.set_num_threads(threads)

    def eager():
        with torch.inference_mode():
            module(*torch_inputs)

    runs = {"c_kernels": (compiled, *inputs), "onnxruntime": (session.run, None, feeds),
            "torch": (eager,)}
    return {"error_vs_eager": error, **interleaved_medians(runs, repeat)}


def zoo_table(names, threads: int, repeat: int) -> tuple[list[str], int]:
    """The table's lines and how many models ran but missed eager by more than TOLERANCE
    (models that do not import are listed, not counted: STATUS.md tracks them)."""
    lines = [f"threads: {threads} (c_kernels LEGATO_NUM_THREADS, onnxruntime intra-op, torch)",
             f"{'model':<16} {'c_kernels ms':>12} {'ort ms':>8} {'torch ms':>9} "
             f"{'c_k/ort':>8} {'err vs eager':>13}"]
    ratios, failed = [], 0
    for name in names:
        row = measure(name, threads, repeat)
        if "error" in row:
            lines.append(f"{name:<16} not run: {row['error']}")
            continue
        ratio = row["c_kernels"] / row["onnxruntime"]
        ratios.append(ratio)
        bad = row["error_vs_eager"] > TOLERANCE
        failed += bad
        lines.append(f"{name:<16} {row['c_kernels']:>12.3f} {row['onnxruntime']:>8.3f} "
                     f"{row['torch']:>9.3f} {ratio:>8.2f} {row['error_vs_eager']:>13.1e}"
                     + ("  MISMATCH" if bad else ""))
        print(lines[-1], file=sys.stderr, flush=True)
    if ratios:
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        lines.append(f"geometric mean c_kernels / onnxruntime over {len(ratios)} models: "
                     f"{geomean:.2f}")
    return lines, failed


def describe_step(call) -> str:
    """An op with its input types and the attributes that decide a kernel's speed."""
    types = ", ".join(str(v.type) for v in call.inputs if v is not None)
    keys = ("groups", "strides", "dilations", "kernel_shape", "axis", "axes")
    attrs = ", ".join(f"{k}={call.attrs[k]}" for k in keys if call.attrs.get(k) is not None)
    return f"{call.op}({types})" + (f" {{{attrs}}}" if attrs else "")


def profile_lines(name: str, top: int, repeat: int) -> list[str]:
    """The model's c_kernels steps by median time: per op (total, count, share) and the
    `top` slowest steps with their types."""
    compiled, inputs, _ = compiled_c_kernels(name)
    return compiled_profile_lines(name, compiled, inputs, top, repeat)


def compiled_profile_lines(title: str, compiled, inputs, top: int, repeat: int) -> list[str]:
    """`profile_lines` of a model compiled for c_kernels, run on `inputs`."""
    runner = compiled._runner  # the c_kernels PlannedExecutor: profile() and steps
    compiled(*inputs)
    timings = runner.profile(*inputs, repeat=repeat)
    calls = [call for _, call, _ in runner.steps]
    total = sum(us for _, us in timings) or 1.0
    by_op: dict[str, list[float]] = {}
    for op, us in timings:
        by_op.setdefault(op, []).append(us)
    lines = [f"{title} on c_kernels: {len(timings)} steps, {total / 1e3:.3f} ms summed "
             f"(median of {repeat} runs per step)", "",
             f"{'op':<28} {'us':>10} {'share':>7} {'steps':>6}"]
    for op, times in sorted(by_op.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{op:<28} {sum(times):>10.1f} {sum(times) / total:>6.1%} "
                     f"{len(times):>6}")
    lines += ["", f"top {top} steps:"]
    order = sorted(range(len(timings)), key=lambda i: -timings[i][1])[:top]
    for i in order:
        lines.append(f"{timings[i][1]:>10.1f} us {timings[i][1] / total:>6.1%}  "
                     f"{describe_step(calls[i])}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for every runtime (default 1)")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per figure")
    parser.add_argument("--models", help="comma-separated zoo models (default: all)")
    parser.add_argument("--profile", metavar="MODEL", help="per-op profile of one model")
    parser.add_argument("--top", type=int, default=15, help="steps shown by --profile")
    args = parser.parse_args(argv)
    os.environ.setdefault("LEGATO_NUM_THREADS", str(args.threads))
    from tests.zoo import models
    if args.profile:
        if args.profile not in models.ZOO:
            parser.error(f"no zoo model {args.profile!r}; choose from {', '.join(models.NAMES)}")
        print("\n".join(profile_lines(args.profile, args.top, args.repeat)))
        return 0
    names = args.models.split(",") if args.models else list(models.NAMES)
    unknown = [n for n in names if n not in models.ZOO]
    if unknown:
        parser.error(f"no zoo model {', '.join(unknown)}; choose from {', '.join(models.NAMES)}")
    lines, failed = zoo_table(names, args.threads, args.repeat)
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
