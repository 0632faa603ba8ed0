"""torch.compile backends on the same models: legato (c_kernels), inductor, onnxrt (where
torch's onnxruntime dynamo backend is registered) and eager.

    .venv/bin/python benchmarks/torch_compile.py [--threads 1] [--repeat 30]
        [--models mlp,bert,gpt2,resnet] [--backends legato,inductor,onnxrt]

Models: an MLP (512-2048-512, batch 32) and small BERT-, GPT-2- and ResNet-style
Hugging Face models of the public zoo (tests/zoo/models.py). Each backend compiles the
model once (compile time is printed, not timed), is checked against eager (max error
relative to eager's largest magnitude) and timed in interleaved rounds (each runtime in
turn, so load from other processes falls on all of them); figures are median
milliseconds of one forward pass under torch.inference_mode, and the ratios are each
backend's time over eager's. Every runtime gets --threads threads (torch's intra-op
threads, and LEGATO_NUM_THREADS, read when c_kernels loads).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("mlp", "bert", "gpt2", "resnet")


def _threads(argv) -> str:
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


if __name__ == "__main__":  # before torch or c_kernels load
    for _var in ("LEGATO_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_var] = _threads(sys.argv[1:])
    sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]


def build(name: str):
    """(eval-mode module, example inputs) of a benchmark model."""
    import torch
    if name == "mlp":
        torch.manual_seed(0)
        nn = torch.nn
        module = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512),
                               nn.LayerNorm(512)).eval()
        return module, (torch.randn(32, 512),)
    from tests.zoo import models
    return models.build(name)


def compiled(module, backend: str):
    import torch
    torch._dynamo.reset()
    if backend == "eager":
        return module
    if backend == "legato":
        return torch.compile(module, backend="legato", options={"backend": "c_kernels"})
    return torch.compile(module, backend=backend)


def measure(name: str, backends: list, repeat: int) -> list[str]:
    import torch
    from zoo import interleaved_medians  # benchmarks/zoo.py
    module, inputs = build(name)
    with torch.inference_mode():
        want = module(*inputs)
    runs, notes = {}, []
    for backend in ["eager", *backends]:
        fn = compiled(module, backend)
        start = time.perf_counter()
        try:
            with torch.inference_mode():
                got = fn(*inputs)
        except Exception as err:  # noqa: BLE001 - any backend may fail on any model
            notes.append(f"  {backend}: not run: {type(err).__name__}: "
                         f"{' '.join(str(err).split())[:160]}")
            continue
        error = float((got - want).abs().max() / want.abs().max())
        notes.append(f"  {backend}: compiled and first call {time.perf_counter() - start:.1f} s,"
                     f" max error vs eager {error:.1e} (relative to its largest value)")

        def run(fn=fn):
            with torch.inference_mode():
                fn(*inputs)
        runs[backend] = (run,)
    ms = interleaved_medians(runs, repeat)
    row = f"{name:<8}" + "".join(f" {ms[b]:>10.3f}" if b in ms else f" {'-':>10}"
                                 for b in ["eager", *backends])
    ratios = "".join(f" {ms[b] / ms['eager']:>8.2f}" if b in ms else f" {'-':>8}"
                     for b in backends)
    return [row + ratios, *notes]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for every runtime")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per figure")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default="legato,inductor,onnxrt",
                        help="torch.compile backends besides eager")
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    known = torch._dynamo.list_backends()
    backends = [b for b in args.backends.split(",") if b in known]
    for b in sorted(set(args.backends.split(",")) - set(backends)):
        print(f"{b}: not a registered torch.compile backend here, left out", file=sys.stderr)
    head = f"{'model':<8}" + "".join(f" {b + ' ms':>10}" for b in ["eager", *backends])
    head += "".join(f" {b[:6] + '/eag':>8}" for b in backends)
    print(f"threads: {args.threads}; median ms of one forward pass; ratio = backend / eager")
    print(head)
    for name in args.models.split(","):
        for line in measure(name, backends, args.repeat):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
