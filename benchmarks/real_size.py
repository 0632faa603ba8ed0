"""Models at the size people deploy them: import, compile, memory and latency.

    .venv/bin/python benchmarks/real_size.py [--models bert,resnet50] [--threads 1,2,16]
                                              [--repeat 10] [--no-eager]
    .venv/bin/python benchmarks/real_size.py --profile resnet50 [--top 15] [--threads 1]
    .venv/bin/python benchmarks/real_size.py --realtime ...   (as root: see realtime())

Models (transformers configs at their published sizes, random weights, He-normal conv
weights, batch 1): BERT-base (sequence 128), GPT-2 small (128), TinyLlama-1.1B widths with 4
layers (128), ViT-base (224^2), the Whisper-tiny encoder (80 x 3000), ResNet-50, MobileNetV2
and ConvNeXt-tiny (224^2). Each is exported to ONNX once (opset 17) and cached under
$LEGATO_BENCH_CACHE (default ~/.cache/legato-bench), named by a key of its settings and the
torch / transformers versions.

Per model:
  import      legato's ONNX import (s) against onnxruntime's session creation (s), measured
              as benchmarks/import_speed.py measures them (medians of --import-rounds of its
              interleaved fresh processes, default 3: the call alone, after the setup)
  setup       that setup (s): legato's plugins, loaded once per process, and one full
              garbage collection of what the module imports left (see import_speed.py)
  compile     legato.compile(module, "c_kernels") (s), in a child process of its own (so
              its peak memory is its own)
  peak MB     that child's peak resident memory after import and compile, beside the
              weights' size on disk
Then latency, median ms of one forward pass in interleaved rounds (each runtime in turn, so
load from other processes falls on all alike) at each thread count (default 1, 2 and every
core): c_kernels, onnxruntime and torch eager, with c_kernels / onnxruntime per model and
their geometric mean. The figures are only as quiet as the machine: the load average is
printed first. `--profile MODEL` prints the model's c_kernels steps by time instead (at the
first of --threads).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":  # BLAS threads before numpy loads; c_kernels reads its own per call
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.published import CACHE, SEED, export_onnx, transformers_model  # noqa: E402
from benchmarks.zoo import compiled_profile_lines, interleaved_medians, ort_session  # noqa: E402

TOKENS, IMAGE, MEL_FRAMES = 128, 224, 3000
TINYLLAMA_4 = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32,
                   num_key_value_heads=4, num_hidden_layers=4, vocab_size=32000,
                   # the TorchScript exporter has no grouped-query sdpa
                   attn_implementation="eager")
# name -> (transformers config, model class, config kwargs, input kind)
MODELS = {
    "bert": ("BertConfig", "BertModel", {}, "tokens"),
    "gpt2": ("GPT2Config", "GPT2Model", {}, "tokens"),
    "tinyllama4": ("LlamaConfig", "LlamaModel", TINYLLAMA_4, "tokens"),
    "vit": ("ViTConfig", "ViTModel", {}, "image"),
    "whisper_enc": ("WhisperConfig", "models.whisper.modeling_whisper.WhisperEncoder",
                    dict(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                         encoder_ffn_dim=1536, num_mel_bins=80), "mel"),
    "resnet50": ("ResNetConfig", "ResNetModel", {}, "image"),
    "mobilenetv2": ("MobileNetV2Config", "MobileNetV2Model", {}, "image"),
    "convnext_tiny": ("ConvNextConfig", "ConvNextModel", {}, "image"),
}


def feeds(name: str, seed: int = 100) -> dict:
    """One input batch: token ids, standard-normal pixels or log-mel features."""
    rng = np.random.default_rng(seed)
    kind = MODELS[name][3]
    if kind == "tokens":
        return {"ids": rng.integers(4, 30000, (1, TOKENS)).astype(np.int64)}
    if kind == "mel":
        return {"x": rng.standard_normal((1, 80, MEL_FRAMES)).astype(np.float32)}
    return {"x": rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32)}


def torch_module(name: str):
    """The eager model, returning its last hidden state alone."""
    config_name, model_name, kwargs, _ = MODELS[name]
    return transformers_model(config_name, model_name, kwargs)


def _peak_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the
    parent that forked it)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _key(name: str) -> str:
    import torch
    import transformers
    text = f"{MODELS[name]} {TOKENS} {IMAGE} {MEL_FRAMES} {SEED} torch {torch.__version__} " \
           f"transformers {transformers.__version__}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def model_file(name: str) -> Path:
    """The float32 .onnx of `name`, exported now unless cached."""
    path = CACHE / f"real-{name}-{_key(name)}.onnx"
    return path if path.exists() else export_onnx(torch_module(name), feeds(name, 0), path)


def build_costs(name: str) -> dict:
    """Compile seconds and peak memory after import and compile, measured in this process
    (the child's half of `costs`)."""
    import legato
    from legato.frontends import onnx as onnx_frontend
    path = model_file(name)
    module = onnx_frontend.load(str(path))
    start = time.perf_counter()
    legato.compile(module, "c_kernels")
    return {"compile_s": time.perf_counter() - start, "peak_mb": _peak_mb(),
            "weights_mb": path.stat().st_size / 2**20}


def costs(name: str, import_rounds: int = 3) -> dict:
    """build_costs of `name` in a fresh process, so the peak memory is this model's alone,
    with the import and session figures of import_speed.py (`import_rounds` rounds)."""
    from benchmarks.import_speed import figures
    model_file(name)  # the export's memory is not the import's
    done = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "child failed")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    imported = figures(name, import_rounds)
    return {**found, "import_s": imported["import_s"], "ort_session_s": imported["ort_s"],
            "setup_s": imported["setup_s"]}


def latencies(name: str, thread_counts, repeat: int, eager: bool) -> dict:
    """{threads: {runtime: median ms}} and the largest |c_kernels - eager| / max |eager|."""
    import torch

    import legato
    from legato.frontends import onnx as onnx_frontend
    path, x = model_file(name), feeds(name)
    module = onnx_frontend.load(str(path))
    model = torch_module(name) if eager else None
    args = [torch.from_numpy(a) for a in x.values()]
    figures = {}
    for threads in thread_counts:
        # c_kernels binds the thread count into its prepared calls when it compiles
        os.environ["LEGATO_NUM_THREADS"] = str(threads)
        compiled = legato.compile(module, "c_kernels")
        torch.set_num_threads(threads)
        session = ort_session(path, threads)
        runs = {"c_kernels": (lambda: compiled(*x.values()),),
                "onnxruntime": (lambda s=session: s.run(None, x),)}
        if model is not None:
            runs["eager"] = (lambda: _eager(torch, model, args),)
        figures[threads] = interleaved_medians(runs, repeat)
    got = np.asarray(compiled(*x.values()))
    want = np.asarray(ort_session(path, 1).run(None, x)[0])
    return {"ms": figures, "err": float(np.abs(got - want).max() / np.abs(want).max())}


def _eager(torch, model, args):
    with torch.inference_mode():
        return model(*args)


def geomean(values) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def report(names, thread_counts, repeat, eager, import_rounds: int = 3) -> list[str]:
    head = (f"{'model':14}{'import s':>9}{'ORT s':>7}{'ratio':>7}{'setup s':>8}{'compile s':>10}"
            f"{'peak MB':>9}"
            f"{'weights':>9}" + "".join(f"{f'c/ORT {t}t':>10}" for t in thread_counts) +
            "".join(f"{f'c/eager {t}t':>12}" for t in thread_counts if eager) + f"{'err':>9}")
    lines = [head]
    print(head, flush=True)
    ratios: dict[int, list[float]] = {t: [] for t in thread_counts}
    for name in names:
        try:
            c, lat = costs(name, import_rounds), latencies(name, thread_counts, repeat, eager)
        except Exception as err:  # noqa: BLE001 - exporters, importers and runtimes raise many types
            lines.append(f"{name:14} error: {type(err).__name__}: {str(err)[:200]}")
            print(lines[-1], flush=True)
            continue
        ms = lat["ms"]
        for t in thread_counts:
            ratios[t].append(ms[t]["c_kernels"] / ms[t]["onnxruntime"])
        lines.append(
            f"{name:14}{c['import_s']:9.2f}{c['ort_session_s']:7.2f}"
            f"{c['import_s'] / c['ort_session_s']:7.2f}{c['setup_s']:8.2f}{c['compile_s']:10.2f}"
            f"{c['peak_mb']:9.0f}"
            f"{c['weights_mb']:9.0f}" +
            "".join(f"{ms[t]['c_kernels'] / ms[t]['onnxruntime']:10.3f}" for t in thread_counts) +
            "".join(f"{ms[t]['c_kernels'] / ms[t]['eager']:12.2f}"
                    for t in thread_counts if eager) + f"{lat['err']:9.1e}")
        lines.append(" " * 14 + "ms: " + "; ".join(
            f"{t}t c {ms[t]['c_kernels']:.2f} ORT {ms[t]['onnxruntime']:.2f}" +
            (f" eager {ms[t]['eager']:.1f}" if eager else "") for t in thread_counts))
        print("\n".join(lines[-2:]), flush=True)
    lines.append(f"{'geomean c/ORT':14}" + " " * 59 +
                 "".join(f"{geomean(ratios[t]):10.3f}" for t in thread_counts))
    print(lines[-1], flush=True)
    return lines


def profile_lines(name: str, threads: int, top: int, repeat: int) -> list[str]:
    """The model's c_kernels steps by median time (see zoo.compiled_profile_lines)."""
    import legato
    from legato.frontends import onnx as onnx_frontend
    os.environ["LEGATO_NUM_THREADS"] = str(threads)
    compiled = legato.compile(onnx_frontend.load(str(model_file(name))), "c_kernels")
    return compiled_profile_lines(f"{name} at {threads} thread(s)", compiled,
                                  list(feeds(name).values()), top, repeat)


def realtime(parser: argparse.ArgumentParser) -> None:
    """This process, the threads it starts (c_kernels' and onnxruntime's pools) and its
    child processes at SCHED_FIFO priority 50: on a shared machine, other processes then
    wait while a figure is taken rather than take its second core mid-run (2-thread
    figures otherwise wander by 2x). The runtimes' idle workers spin for a while and then
    sleep, so the machine is not held between calls."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    except (AttributeError, PermissionError, OSError) as err:
        parser.error(f"--realtime: cannot set SCHED_FIFO ({err}); run as root or with "
                     "CAP_SYS_NICE, or without --realtime")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", default=f"1,2,{os.cpu_count()}",
                        help="comma-separated thread counts (default 1, 2 and every core)")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per figure")
    parser.add_argument("--no-eager", action="store_true", help="skip torch eager")
    parser.add_argument("--import-rounds", type=int, default=3,
                        help="interleaved rounds of the import figures (import_speed.py's)")
    parser.add_argument("--profile", metavar="MODEL", choices=list(MODELS),
                        help="per-step c_kernels profile of one model")
    parser.add_argument("--top", type=int, default=15, help="steps shown by --profile")
    parser.add_argument("--realtime", action="store_true",
                        help="time at real-time priority (SCHED_FIFO; root or CAP_SYS_NICE), "
                             "so that other work on the machine does not take its cores")
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.realtime:
        realtime(parser)
    if args.child:
        print(json.dumps(build_costs(args.child)))
        return
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    threads = sorted({int(n) for n in args.threads.split(",") if n})
    if args.profile:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print("\n".join(profile_lines(args.profile, threads[0], args.top, max(args.repeat, 20))))
        return
    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
          + (", timed at SCHED_FIFO priority" if args.realtime else ""))
    report(names, threads, args.repeat, not args.no_eager, args.import_rounds)


if __name__ == "__main__":
    main()
