"""How fast is legalization? A transformer of N pre-LN blocks (B=1, S=128, H=768, 12 heads,
weights as inputs, 24 calls a block), fully legalized for cpu_ref.

Prints microseconds per source call and calls produced, for N = 1, 12, 48, and the ratio
of N=48's per-call cost to N=1's (target: <= 10 us per call, ratio <= 1.3), with the
machine's load average (timings on a shared machine are only comparable at like loads).

    python benchmarks/legalize.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import time
from collections import Counter

import legato
from legato.frontends.examples import transformer

TARGET_US = 10
EXPECTED_BLOCK = Counter({"matmul": 8, "reshape": 4, "permute_dims": 4, "add": 3,
                          "nn.layer_norm": 2, "multiply": 1, "nn.softmax": 1, "nn.gelu": 1})


def build(blocks: int) -> legato.Module:
    module = transformer(batch=1, seq=128, d_model=768, heads=12, ffn=3072, blocks=blocks,
                         weights_as_inputs=True, use_linear=False)
    counts = Counter(c.op for c in module.main.calls)
    assert counts == Counter({op: n * blocks for op, n in EXPECTED_BLOCK.items()}), counts
    return module


def time_legalize(module: legato.Module, repeat: int) -> tuple[float, int]:
    best, produced = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = legato.legalize(module, backend="cpu_ref")
        best = min(best, time.perf_counter() - start)
        produced = len(result.module.main.calls)
    return best, produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--blocks", type=int, nargs="*", default=[1, 12, 48])
    args = parser.parse_args()
    legato.legalize(build(1), backend="cpu_ref")  # warm: plugin discovery, imports
    per_call = {}
    print(f"{'blocks':>6} {'source calls':>13} {'produced':>9} {'total ms':>9} {'us/call':>8}")
    for n in args.blocks:
        module = build(n)
        seconds, produced = time_legalize(module, args.repeat)
        source = len(module.main.calls)
        per_call[n] = seconds / source * 1e6
        print(f"{n:>6} {source:>13} {produced:>9} {seconds * 1e3:>9.2f} {per_call[n]:>8.2f}")
    worst = max(per_call.values())
    print(f"worst us per source call: {worst:.2f} (target <= {TARGET_US})  "
          f"{'MEETS' if worst <= TARGET_US else 'MISSES'}  (load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    if 1 in per_call and max(per_call) != 1:
        ratio = per_call[max(per_call)] / per_call[1]
        print(f"per-call cost N={max(per_call)} / N=1: {ratio:.2f} (target <= 1.3)  "
              f"{'MEETS' if ratio <= 1.3 else 'MISSES'}")


if __name__ == "__main__":
    main()
