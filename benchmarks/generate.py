"""Greedy generation with a KV cache, in tokens/s: one legato compile of a decoder exported
with its cache (README's "Generation with a KV cache" recipe) against onnxruntime running
the same file.

    .venv/bin/python benchmarks/generate.py [--styles gpt2,llama] [--layers 4 --hidden 256
                                            --heads 4 --vocab 8192] [--prompt 16]
                                            [--tokens 32] [--bucket 16] [--rounds 3]
                                            [--backend c_kernels]

The decoders are transformers configs with random weights (tests/decoder_recipe.py),
exported once by the recipe's `export` (cached under $LEGATO_BENCH_CACHE, default
~/.cache/legato-bench). A loop is the prompt (from an empty cache) then one step per new
token: `--tokens` calls, each at a cache length the loop has not met before. Both run on
one thread (LEGATO_NUM_THREADS=1, onnxruntime's intra-op pool of 1), in rounds that
alternate which goes first. Each style runs the loop as is and with
the cache padded in buckets (`--bucket`, the recipe's `bucket=`: masked slots in front,
so the cache's length changes once in that many tokens). Printed per style and bucket
(0: none), medians over the rounds:
  compile      seconds of the one legato.compile (the first in the process also loads
               legato and its plugins), and of onnxruntime's session creation
  first        legato's tokens/s in the first round (every length met is planned)
  legato       legato's tokens/s (a length is planned at its first call and kept, 16
               at a time: the plain loop meets a new one per token and plans each in
               every round, the bucketed one meets a few and plans them once)
  plan         the share of legato's loop spent planning
  ort          onnxruntime's tokens/s on the same loop
  legato/ort   the ratio of the two, from the same rounds
The two runtimes' tokens are checked equal.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    os.environ["LEGATO_NUM_THREADS"] = "1"
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.published import CACHE  # noqa: E402
from benchmarks.zoo import SETTLE_S, ort_session  # noqa: E402
from tests import decoder_recipe  # noqa: E402


def decoder_file(recipe: dict, style: str, args) -> tuple[object, Path]:
    """(the eager model, its export with the cache), exported once per configuration and
    recipe (the key hashes the README block that defines the export)."""
    import torch
    import transformers
    model = decoder_recipe.decoder(style, args.layers, args.hidden, args.heads, args.vocab)
    key = hashlib.sha256(f"{style} {args.layers} {args.hidden} {args.heads} {args.vocab} "
                         f"{torch.__version__} {transformers.__version__} "
                         f"{decoder_recipe.blocks()[0]}".encode()).hexdigest()[:12]
    path = CACHE / f"decoder-{style}-{args.layers}x{args.hidden}-{key}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with torch.no_grad():
            recipe["export"](model, str(tmp))
        tmp.rename(path)  # an interrupted export is not taken for a cached one
    return model, path


def timed_loop(recipe, run, config, prompt, tokens, bucket) -> tuple[list[int], float]:
    start = time.perf_counter()
    out = recipe["generate"](run, config, prompt, tokens, bucket=bucket)
    return out, time.perf_counter() - start


def bench(recipe, style: str, args) -> None:
    import onnxruntime

    import legato
    model, path = decoder_file(recipe, style, args)
    start = time.perf_counter()
    compiled = legato.compile(str(path), args.backend)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    session = ort_session(path, 1)
    session_s = time.perf_counter() - start
    names = [i.name for i in session.get_inputs()]
    onnxruntime.set_default_logger_severity(3)
    prompt = np.random.default_rng(0).integers(0, args.vocab, (1, args.prompt)).astype(np.int64)
    runs = {"legato": compiled, "ort": lambda *a: session.run(None, dict(zip(names, a)))}
    for bucket in (0, args.bucket):
        seconds: dict = {"legato": [], "ort": [], "plan": []}
        tokens = {}
        for r in range(args.rounds):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                time.sleep(SETTLE_S)
                planned = compiled._runner.stats["plan_s"]
                tokens[name], s = timed_loop(recipe, runs[name], model.config, prompt,
                                             args.tokens, bucket)
                seconds[name].append(s)
                if name == "legato":
                    seconds["plan"].append(compiled._runner.stats["plan_s"] - planned)
        if tokens["legato"] != tokens["ort"]:
            raise SystemExit(f"{style}: legato's tokens {tokens['legato']} differ from "
                             f"onnxruntime's {tokens['ort']}")
        rate = {name: args.tokens / float(np.median(s)) for name, s in seconds.items()
                if name != "plan"}
        first = args.tokens / seconds["legato"][0]
        plan_share = float(np.median(np.divide(seconds["plan"], seconds["legato"])))
        print(f"{style:>6}{bucket:>7}{compile_s:9.2f}{session_s:7.2f}{first:10.1f}"
              f"{rate['legato']:10.1f}{plan_share:7.0%}{rate['ort']:10.1f}"
              f"{rate['legato'] / rate['ort']:12.2f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--styles", default="gpt2,llama")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bucket", type=int, default=16)
    parser.add_argument("--backend", default="c_kernels")
    args = parser.parse_args(argv)
    recipe = decoder_recipe.definitions()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"{args.layers} layers x {args.hidden}, {args.heads} heads, vocab {args.vocab}; "
          f"prompt {args.prompt}, {args.tokens} tokens, {args.backend}, 1 thread")
    print(f"{'style':>6}{'bucket':>7}{'compile':>9}{'ort':>7}{'first':>10}{'legato':>10}"
          f"{'plan':>7}{'ort':>10}{'legato/ort':>12}   (seconds, then tokens/s)")
    for style in args.styles.split(","):
        bench(recipe, style, args)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
