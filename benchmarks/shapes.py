"""One compile, every sequence length: a dynamic-axes BERT against static compiles and
onnxruntime.

    .venv/bin/python benchmarks/shapes.py [--seqs 8,16,33,64,128,256,512] [--repeat 10]
                                          [--layers 12 --hidden 768] [--backend c_kernels]

The model is BERT-base by default (transformers config, random weights, batch 1), exported
once with batch and sequence as dynamic axes (cached under $LEGATO_BENCH_CACHE, default
~/.cache/legato-bench). Printed per sequence length, in ms:
  first       the first call at that length on the one symbolic compile (it binds the
              symbols and plans, or compiles that binding whole when compiling over the
              symbols needed sizes: the report line says which), run included
  seen        the median call at a length already met
  static      the median call of a compile bound to that length (input_shapes=)
  ort         onnxruntime on the same file
  plan        the planning in `first` (the plan cache's time for that length: binding
              the symbols, the concrete types, the executor's plan)
(seen, static and ort timed in interleaved rounds; a static compile's time is the better
of two) and the ratios seen / static (the cost of being symbolic at run time), first /
static compile time (the run included, which at long lengths alone exceeds a compile),
first / (static compile + its first call: what a static compile takes to give the first
answer at that length), and plan / static compile (what a new length adds to a call, its
fresh buffers' first touch aside). Last, the plan cache's hits, misses and planning time.
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
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.published import CACHE, export_onnx, last_hidden_state  # noqa: E402
from benchmarks.zoo import interleaved_medians, ort_session  # noqa: E402



def bert_file(layers: int, hidden: int) -> Path:
    """BERT with `layers` layers `hidden` wide, batch and sequence dynamic."""
    import torch
    import transformers
    key = hashlib.sha256(f"{layers} {hidden} {torch.__version__} "
                         f"{transformers.__version__}".encode()).hexdigest()[:12]
    path = CACHE / f"bert-dynamic-{layers}x{hidden}-{key}.onnx"
    if path.exists():
        return path
    config = transformers.BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                                     num_attention_heads=max(1, hidden // 64),
                                     intermediate_size=4 * hidden,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    model = last_hidden_state(transformers.BertModel(config))
    ids = np.random.default_rng(0).integers(4, 1000, (1, 16)).astype(np.int64)
    return export_onnx(model, {"ids": ids}, path, {"ids": {0: "batch", 1: "seq"}})


def timed_s(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seqs", default="8,16,33,64,128,256,512")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--backend", default="c_kernels")
    args = parser.parse_args(argv)
    import onnxruntime

    import legato
    onnxruntime.set_default_logger_severity(3)
    path = bert_file(args.layers, args.hidden)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"BERT {args.layers}x{args.hidden}, {args.backend}")
    symbolic, compile_s = timed_s(lambda: legato.compile(str(path), args.backend))
    print(f"symbolic compile {compile_s:.2f} s: {symbolic.report.summary()[-160:]}")
    session = ort_session(path, 1)
    head = f"{'seq':>5}{'first':>9}{'seen':>9}{'static':>9}{'ort':>9}{'plan':>7}" \
           f"{'seen/static':>12}{'first/comp':>11}{'first/(c+1st)':>14}{'plan/comp':>10}" \
           f"{'err':>9}"
    print(head)
    for seq in [int(s) for s in args.seqs.split(",") if s]:
        row = measure(symbolic, lambda n: legato.compile(str(path), args.backend,
                                                         input_shapes={"batch": 1, "seq": n}),
                      session, seq, args.repeat)
        print(f"{seq:>5}{row['first']:9.1f}{row['seen']:9.2f}{row['static']:9.2f}"
              f"{row['ort']:9.2f}{row['plan']:7.1f}{row['seen'] / row['static']:12.2f}"
              f"{row['first'] / row['compile']:11.3f}"
              f"{row['first'] / (row['compile'] + row['static_first']):14.3f}"
              f"{row['plan'] / row['compile']:10.3f}{row['err']:9.1e}", flush=True)
    stats = symbolic.plan_stats
    per_miss = stats["plan_s"] / max(1, stats["misses"]) * 1e3
    print(f"plan cache: {stats['hits']} hits, {stats['misses']} misses, {stats['plan_s']:.2f} s "
          f"planning ({per_miss:.1f} ms a miss); load average {os.getloadavg()[0]:.1f} at the end")


def measure(symbolic, compile_at, session, seq: int, repeat: int) -> dict:
    """One row, in ms: the symbolic model's first call at `seq` and its planning, the
    better of two static compiles and that compile's first call, then seen, static and
    onnxruntime in interleaved rounds; `err` against onnxruntime."""
    ids = np.random.default_rng(seq).integers(4, 1000, (1, seq)).astype(np.int64)
    planned = symbolic.plan_stats["plan_s"]
    got, first_s = timed_s(lambda: symbolic(ids))
    plan_s = symbolic.plan_stats["plan_s"] - planned
    compiles = [timed_s(lambda: compile_at(seq)) for _ in range(2)]
    static, compile_s = min(compiles, key=lambda pair: pair[1])
    del compiles
    _, static_first_s = timed_s(lambda: static(ids))
    ms = interleaved_medians({"seen": (symbolic, ids), "static": (static, ids),
                              "ort": (session.run, None, {"ids": ids})}, repeat)
    err = float(np.abs(np.asarray(got) - session.run(None, {"ids": ids})[0]).max())
    return {**ms, "first": first_s * 1e3, "plan": plan_s * 1e3, "compile": compile_s * 1e3,
            "static_first": static_first_s * 1e3, "err": err}

if __name__ == "__main__":
    main()
