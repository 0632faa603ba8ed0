"""Recomposition on the public zoo's ONNX exports: what comes back, how fast, what it buys.

    .venv/bin/python benchmarks/recompose.py [--models gpt2,llama] [--repeat 5] [--no-run]

Each zoo model (tests/zoo) is exported to ONNX and imported; the zoo's own cached export
(torch.onnx dynamo, sdpa attention) is used when legato imports it, else the model is
exported again with eager attention (cached in .cache/recompose/). Per model:

- `expected`: the blocks of the PyTorch source model, counted from its module classes
  (attention, layer/RMS norms, gelu/silu activations);
- `after`: calls of each kind after recomposition (recovered + already imported as the op);
- `recovered`: calls `legato.recompose` put back, by op;
- `us/call`: best recomposition time over --repeat runs per call of the imported module
  (target <= 25 like legalize);
- `ms plain` / `ms recomposed`: median c_kernels latency of one forward pass, compiled from
  the imported module and from the recomposed one (results compared: `max diff`);
- `power`: `power` calls left in the compiled module, without and with recomposition.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import logging
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

import legato  # noqa: E402
from legato.recompose import RecomposePass  # noqa: E402

KINDS = {"nn.attention": "attention", "nn.layer_norm": "layer_norm", "nn.rms_norm": "rms_norm",
         "nn.gelu": "gelu", "nn.silu": "silu", "nn.softmax": "softmax", "nn.linear": "linear"}
# PyTorch module classes that are one of the kinds (matched on the class name)
SOURCE_KINDS = (("RMSNorm", "rms_norm"), ("LayerNorm", "layer_norm"), ("GELU", "gelu"),
                ("Gelu", "gelu"), ("SiLU", "silu"), ("NewGELU", "gelu"))
CACHE = REPO / ".cache" / "recompose"


def source_counts(torch_module) -> Counter:
    """Blocks of the PyTorch model by kind: norms and activations by class name, and the
    innermost modules named *Attention (one attention block each)."""
    counts = Counter()
    for module in torch_module.modules():
        name = type(module).__name__
        kind = next((k for pattern, k in SOURCE_KINDS if pattern in name), None)
        if kind:
            counts[kind] += 1
        elif name.endswith("Attention") and not any(
                type(m).__name__.endswith("Attention") for m in module.children()):
            counts["attention"] += 1
        elif name == "ACT2FN" or name in ("GELUActivation", "NewGELUActivation"):
            counts["gelu"] += 1
    return counts


def load(name: str):
    """(legato module, inputs as numpy, torch module, route) of zoo model `name`."""
    from tests.zoo import export, models
    from legato.frontends import onnx as frontend
    torch_module, inputs = models.build(name)
    feeds = [t.numpy() for t in inputs]
    try:
        return frontend.load(export.onnx_file(name)), feeds, torch_module, "zoo export"
    except Exception as err:  # noqa: BLE001 - e.g. an op the importer lacks
        first = str(err).splitlines()[0][:80]
    import onnx
    import torch
    key = hashlib.sha256((export.cache_key(name) + "eager").encode()).hexdigest()[:12]
    path = CACHE / f"{name}-{key}.onnx"
    if not path.exists():
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        module, inputs = models.build(name, "eager")
        CACHE.mkdir(parents=True, exist_ok=True)
        program = torch.onnx.export(module, inputs, dynamo=True, verbose=False)
        buffer = io.BytesIO()
        onnx.save(program.model_proto, buffer)
        path.write_bytes(buffer.getvalue())
    return frontend.load(path), feeds, torch_module, f"eager export ({first})"


def median_ms(fn, feeds, repeat: int) -> float:
    fn(*feeds)
    times = []
    for _ in range(max(repeat, 5)):
        start = time.perf_counter()
        fn(*feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def kinds_of(module) -> Counter:
    return Counter(KINDS[c.op] for fn in module.functions.values() for c in fn.calls
                   if c.op in KINDS)


def power_calls(compiled) -> int:
    return sum(c.op == "power" for fn in compiled.module.functions.values() for c in fn.calls)


def measure(name: str, repeat: int, run: bool) -> dict:
    module, feeds, torch_module, route = load(name)
    calls = sum(len(fn.calls) for fn in module.functions.values())
    RecomposePass()(module)  # warm: templates and traces
    best = float("inf")
    for _ in range(repeat):
        p = RecomposePass()
        start = time.perf_counter()
        recomposed, _ = p(module)
        best = min(best, time.perf_counter() - start)
    row = {"model": name, "route": route, "calls": calls,
           "expected": source_counts(torch_module), "after": kinds_of(recomposed),
           "recovered": Counter({KINDS.get(op, op): n for op, n in p.report.recovered.items()}),
           "us_per_call": best / calls * 1e6}
    if run:
        plain = legato.compile(module, backend="c_kernels")
        again = legato.compile(recomposed, backend="c_kernels")
        a, b = np.asarray(plain(*feeds)), np.asarray(again(*feeds))
        row.update(ms_plain=median_ms(plain, feeds, repeat * 4),
                   ms_recomposed=median_ms(again, feeds, repeat * 4),
                   max_diff=float(np.max(np.abs(a - b))) if a.size else 0.0,
                   power=(power_calls(plain), power_calls(again)))
    return row


def show(counts: Counter) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "-"


def main() -> None:
    from tests.zoo import models
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(models.NAMES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-run", action="store_true", help="skip the c_kernels timing")
    args = parser.parse_args()
    rows, missed = [], []
    for name in args.models.split(","):
        try:
            row = measure(name, args.repeat, not args.no_run)
        except Exception as err:  # noqa: BLE001 - a model that fails is a row, not a stop
            print(f"{name}: failed: {' '.join(str(err).split())[:160]}")
            continue
        rows.append(row)
        timing = "" if args.no_run else (
            f" | c_kernels {row['ms_plain']:.2f} -> {row['ms_recomposed']:.2f} ms"
            f" (max diff {row['max_diff']:.1e}, power {row['power'][0]} -> {row['power'][1]})")
        print(f"{name} [{row['route']}] {row['calls']} calls, {row['us_per_call']:.1f} us/call"
              f"{timing}\n  expected  {show(row['expected'])}\n  after     {show(row['after'])}"
              f"\n  recovered {show(row['recovered'])}", flush=True)
        for kind, n in row["expected"].items():
            if row["after"][kind] < n:
                missed.append(f"{name}: {kind} {row['after'][kind]}/{n}")
    if rows:
        worst = max(r["us_per_call"] for r in rows)
        print(f"\nworst recomposition us per call: {worst:.1f} (target <= 25) "
              f"{'MEETS' if worst <= 25 else 'MISSES'}")
        print("every expected block found" if not missed else
              "blocks not found: " + "; ".join(missed))


if __name__ == "__main__":
    main()
