"""How fast is `legato.parse`? Texts of 1, 4 and 10 MB in four shapes: many ordinary
lines (printed transformer blocks), one function header with very many parameters, one
call line with very many results, and one long line of constant data.

Prints MB/s per shape and size; linear parsing shows the same MB/s at every size
(target: 10 MB in a few seconds, i.e. >= 2 MB/s on every shape).

    python benchmarks/parse.py [--sizes 1 4 10]
"""
from __future__ import annotations

import argparse
import json
import time

import legato
from legato.frontends.examples import transformer

MB = 1_000_000


def ordinary(size: int) -> str:
    block = str(transformer(seq=8, d_model=32, heads=2, ffn=64, weights_as_inputs=True))
    blocks = max(1, size // len(block))
    return str(transformer(seq=8, d_model=32, heads=2, ffn=64, blocks=blocks,
                           weights_as_inputs=True))


def wide_header(size: int) -> str:
    param = "%p{}: float32[1, 2, 3], "
    count = size // len(param.format(10 ** 6))
    args = ", ".join(f"%p{i}: float32[1, 2, 3]" for i in range(count))
    return f"func @main({args}) -> (float32[1, 2, 3]) {{\n  return %p0\n}}\n"


def many_results(size: int) -> str:
    count = size // len("%100000, float32[1, 1], ")
    outs = ", ".join(f"%{i + 1}" for i in range(count))
    types = ", ".join(["float32[1, 1]"] * count)
    return (f"func @main(%x: float32[1, {count}]) -> (float32[1, 1]) {{\n"
            f"  {outs} = split(%x) {{\"sections\": {count}, \"axis\": 1}} : {types}\n"
            f"  return %1\n}}\n")


def long_constant(size: int) -> str:
    count = size // len("0.123456789, ")
    data = json.dumps([0.123456789] * count)
    return (f"func @main(%x: float32[{count}]) -> (float32[{count}]) {{\n"
            f"  %c = const float32[{count}] {data}\n"
            f"  %0 = add(%x, %c) : float32[{count}]\n  return %0\n}}\n")


SHAPES = {"ordinary": ordinary, "wide header": wide_header, "many results": many_results,
          "long constant": long_constant}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 4, 10],
                        help="text sizes in MB")
    args = parser.parse_args()
    print(f"{'shape':<14} {'MB':>6} {'seconds':>8} {'MB/s':>7}")
    for name, make in SHAPES.items():
        for size_mb in args.sizes:
            text = make(int(size_mb * MB))
            start = time.perf_counter()
            legato.parse(text)
            seconds = time.perf_counter() - start
            print(f"{name:<14} {len(text) / MB:6.1f} {seconds:8.2f} "
                  f"{len(text) / MB / seconds:7.2f}", flush=True)


if __name__ == "__main__":
    main()
