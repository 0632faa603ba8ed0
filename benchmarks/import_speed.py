"""legato's ONNX import against onnxruntime's session creation, at published model sizes.

    .venv/bin/python benchmarks/import_speed.py [--models mobilenetv2,resnet50] [--rounds 3]
    .venv/bin/python benchmarks/import_speed.py --profile mobilenetv2 [--top 30]
    .venv/bin/python benchmarks/import_speed.py --cpu --models mobilenetv2 [--rounds 10]

The models are benchmarks/real_size.py's (exported once and cached there). Each figure comes
from a fresh process that has already imported legato, onnx and onnxruntime, so it holds only
the call: `legato.frontends.onnx.load(path)` or `onnxruntime.InferenceSession(path)` (one
thread, as real_size.py's session). Before the timer both processes do their setup, timed
as the `setup s` column for legato: legato's plugins, loaded once per process
(`legato.context()`), and for both one full garbage collection (`gc.collect()`). That pass
walks every object the module imports left (about 200,000): Python runs it on whatever code
first allocates enough after the imports, so without it the first import is charged
0.1-0.3 s in proportion to what was imported, not to the model, and onnxruntime (whose
session allocates few Python objects) is not. `cold` is the import's ratio with the setup
counted. Rounds interleave the two, so load from other processes falls on both alike; the
medians and their ratio are printed with the load average.

Memory: `peak MB` is the most the process's resident memory rose above where it stood
before the call (the kernel's high-water mark, reset just before it), beside the weights'
size (the model file's). `--profile MODEL` runs cProfile over one import instead.

`--cpu`: CPU time instead of wall time, in this one process: rounds alternate legato's
import and onnxruntime's session of each model (a full garbage collection before each
call, outside the timer), and the best of the rounds is printed for each with their ratio.
legato's figure is this process's CPU time plus the CPU time its worker process (the one
that runs onnx's shape inference) spent on the import; the worker is already running and
the model's operator schemas are already fetched from it, as in every import after a
process's first. CPU time counts what the call costs whatever the load, which wall time
under load from other processes does not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, str(REPO))

from benchmarks.real_size import MODELS, model_file  # noqa: E402


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Reset the kernel's high-water mark of resident memory to what is resident now."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


def setup(what: str) -> float:
    """Seconds of the process's setup before a timed import or session (see the docstring):
    legato's plugins (for legato) and one full garbage collection (for both)."""
    import gc

    import legato
    start = time.perf_counter()
    if what == "legato":
        legato.context()
    gc.collect()
    return time.perf_counter() - start


def timed_import(what: str, path: str, threads: int = 1):
    """(result, seconds, peak MB rise) of legato's import or onnxruntime's session creation
    of `path`, after `setup(what)` was done."""
    from benchmarks.zoo import ort_session
    from legato.frontends import onnx as onnx_frontend
    call = (lambda: onnx_frontend.load(str(path))) if what == "legato" else \
        (lambda: ort_session(path, threads))
    before = _status_mb("VmRSS")
    _reset_peak()
    start = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - start
    return result, seconds, _status_mb("VmHWM") - before


def measure(what: str, path: str) -> dict:
    """Seconds and peak memory rise of one import or session creation (the child's half)."""
    import onnx  # noqa: F401  (imported up front, like onnxruntime)
    import onnxruntime

    import legato  # noqa: F401
    onnxruntime.set_default_logger_severity(3)
    setup_s = setup(what)
    result, seconds, peak = timed_import(what, path)
    del result
    return {"s": seconds, "setup_s": setup_s, "peak_mb": peak}


def child(what: str, name: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", what, str(model_file(name))],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def figures(name: str, rounds: int) -> dict:
    """Medians over `rounds` interleaved rounds of fresh processes: import and session
    seconds (`import_s`, `ort_s`), legato's setup seconds (`setup_s`), peak memory rises
    (`peak_mb`, `ort_mb`) and the weights' size (`weights_mb`). RuntimeError from a child
    that failed."""
    model_file(name)
    runs: dict[str, list[dict]] = {"legato": [], "ort": []}
    for _ in range(rounds):
        for what in runs:
            runs[what].append(child(what, name))

    def median(what, key):
        return statistics.median(r[key] for r in runs[what])
    return {"import_s": median("legato", "s"), "ort_s": median("ort", "s"),
            "setup_s": median("legato", "setup_s"), "peak_mb": median("legato", "peak_mb"),
            "ort_mb": median("ort", "peak_mb"),
            "weights_mb": model_file(name).stat().st_size / 2**20}


def report(names, rounds: int) -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of "
          f"{rounds} interleaved round(s), a fresh process per figure", flush=True)
    print(f"{'model':14}{'import s':>9}{'ORT s':>8}{'ratio':>7}{'setup s':>10}{'cold':>6}"
          f"{'peak MB':>9}{'ORT MB':>8}{'weights':>9}{'peak/w':>8}", flush=True)
    for name in names:
        try:
            f = figures(name, rounds)
        except RuntimeError as err:
            print(f"{name:14} error: {str(err)[:200]}", flush=True)
            continue
        print(f"{name:14}{f['import_s']:9.3f}{f['ort_s']:8.3f}{f['import_s'] / f['ort_s']:7.2f}"
              f"{f['setup_s']:10.2f}{(f['import_s'] + f['setup_s']) / f['ort_s']:6.2f}"
              f"{f['peak_mb']:9.0f}{f['ort_mb']:8.0f}{f['weights_mb']:9.0f}"
              f"{f['peak_mb'] / f['weights_mb']:8.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


def profile(name: str, top: int) -> None:
    import cProfile
    import pstats

    import onnx  # noqa: F401  (as measure() has it imported)

    from legato.frontends import onnx as onnx_frontend
    path = str(model_file(name))
    setup("legato")
    profiler = cProfile.Profile()
    profiler.runcall(onnx_frontend.load, path)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def _worker_cpu() -> float:
    """Seconds of CPU time the importer's worker process has run, 0 without one."""
    from legato.frontends.onnx import isolate
    process = isolate._WORKER.process
    if process is None:
        return 0.0
    try:
        with open(f"/proc/{process.pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_rounds(names, rounds: int) -> None:
    """Best CPU seconds over interleaved rounds in this process (see the docstring)."""
    import gc

    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    setup("legato")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; CPU time, best "
          f"of {rounds} interleaved rounds in one process", flush=True)
    print(f"{'model':14}{'import ms':>10}{'worker ms':>10}{'ORT ms':>9}{'ratio':>7}", flush=True)
    for name in names:
        path = model_file(name)
        timed_import("legato", path)    # the worker started, the schemas fetched
        timed_import("ort", path)
        legato, worker, ort = [], [], []
        for _ in range(rounds):
            gc.collect()
            start, start_worker = time.process_time(), _worker_cpu()
            result = timed_import("legato", path)
            legato.append(time.process_time() - start)
            worker.append(_worker_cpu() - start_worker)
            del result
            gc.collect()
            start = time.process_time()
            result = timed_import("ort", path)
            ort.append(time.process_time() - start)
            del result
        best = min(a + w for a, w in zip(legato, worker))
        print(f"{name:14}{1e3 * min(legato):10.1f}{1e3 * min(worker):10.1f}"
              f"{1e3 * min(ort):9.1f}{best / min(ort):7.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model")
    parser.add_argument("--profile", metavar="MODEL", choices=list(MODELS),
                        help="cProfile one import of MODEL")
    parser.add_argument("--top", type=int, default=30, help="rows shown by --profile")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU time of rounds in this process instead (see above)")
    parser.add_argument("--child", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(*args.child)))
        return
    if args.profile:
        profile(args.profile, args.top)
        return
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    if args.cpu:
        cpu_rounds(names, args.rounds)
        return
    report(names, args.rounds)


if __name__ == "__main__":
    main()
