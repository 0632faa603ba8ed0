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
(seen, static and ort timed in interleaved rounds) and the ratios seen / static (the cost
of being symbolic at run time), first / static compile time, first / (static compile and
its first call: what a static compile takes to give the first answer, the first run of
either touching its fresh buffers), and new / static compile time, where new = first -
seen is what a new length adds to a call (binding, planning, touching new buffers).
Last, the plan cache's hits, misses and time spent planning.
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
    head = f"{'seq':>5}{'first':>10}{'seen':>10}{'static':>10}{'ort':>10}" \
           f"{'seen/static':>13}{'first/compile':>15}{'first/(c+1st)':>15}{'new/compile':>13}" \
           f"{'err':>10}"
    print(head)
    for seq in [int(s) for s in args.seqs.split(",") if s]:
        ids = np.random.default_rng(seq).integers(4, 1000, (1, seq)).astype(np.int64)
        got, first_s = timed_s(lambda: symbolic(ids))
        static, static_s = timed_s(lambda: legato.compile(
            str(path), args.backend, input_shapes={"batch": 1, "seq": seq}))
        _, static_first_s = timed_s(lambda: static(ids))
        ms = interleaved_medians({"seen": (symbolic, ids), "static": (static, ids),
                                  "ort": (session.run, None, {"ids": ids})}, args.repeat)
        want = session.run(None, {"ids": ids})[0]
        err = float(np.abs(np.asarray(got) - want).max())
        new_s = first_s - ms["seen"] / 1e3
        print(f"{seq:>5}{first_s * 1e3:10.1f}{ms['seen']:10.2f}{ms['static']:10.2f}"
              f"{ms['ort']:10.2f}{ms['seen'] / ms['static']:13.2f}"
              f"{first_s / static_s:15.3f}{first_s / (static_s + static_first_s):15.3f}"
              f"{new_s / static_s:13.3f}{err:10.1e}", flush=True)
        del static
    stats = symbolic._runner.stats
    per_miss = stats["plan_s"] / max(1, stats["misses"]) * 1e3
    print(f"plan cache: {stats['hits']} hits, {stats['misses']} misses, {stats['plan_s']:.2f} s "
          f"planning ({per_miss:.1f} ms a miss); load average {os.getloadavg()[0]:.1f} at the end")

if __name__ == "__main__":
    main()
