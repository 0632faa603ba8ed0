#!/usr/bin/env python3
"""GEMM throughput of legato-c-kernels vs numpy's BLAS, in GFLOP/s (best of N runs).

    python bench_gemm.py [--repeat 20] [--sizes 512 1024]

Measures square float32 matmuls single-threaded and with 2 threads. The BLAS thread
count has to be fixed before numpy is imported, so the 2-thread numpy figures come
from a child process (``--numpy-only 2``); legato's count is LEGATO_NUM_THREADS, read
at every call.
"""

from __future__ import annotations

import os
import sys

_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _pin_blas_threads(argv: list[str]) -> None:
    """Must run before numpy is imported anywhere in this process."""
    threads = argv[argv.index("--numpy-only") + 1] if "--numpy-only" in argv else "1"
    for var in _BLAS_THREAD_VARS:
        os.environ[var] = threads


_pin_blas_threads(sys.argv)

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent


def _import_kernels():
    """The installed package, else the in-place build next to this script."""
    for extra in (HERE, HERE.parent.parent / "core"):
        if str(extra) not in sys.path:
            sys.path.append(str(extra))
    from legato_c_kernels import kernels

    return kernels


def best_seconds(fn, repeat: int) -> float:
    fn()  # warm-up: page in buffers, pick code paths
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def operands(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    return (rng.standard_normal((n, n), dtype=np.float32),
            rng.standard_normal((n, n), dtype=np.float32))


def gflops(n: int, seconds: float) -> float:
    return 2.0 * n**3 / seconds / 1e9


def numpy_gflops(sizes: list[int], repeat: int) -> dict[int, float]:
    result = {}
    for n in sizes:
        a, b = operands(n)
        result[n] = gflops(n, best_seconds(lambda: a @ b, repeat))
    return result


def legato_gflops(sizes: list[int], repeat: int, threads: int) -> dict[int, float]:
    kernels = _import_kernels()
    os.environ["LEGATO_NUM_THREADS"] = str(threads)
    result = {}
    for n in sizes:
        a, b = operands(n)
        out = np.empty((n, n), np.float32)
        np.testing.assert_allclose(kernels.matmul(a, b), a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(n))
        result[n] = gflops(n, best_seconds(lambda: kernels.matmul(a, b, out=out), repeat))
    return result


def numpy_gflops_in_child(sizes: list[int], repeat: int, threads: int) -> dict[int, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--numpy-only", str(threads),
           "--repeat", str(repeat), "--sizes", *map(str, sizes)]
    raw = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {int(k): v for k, v in raw.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--numpy-only", type=int, metavar="THREADS",
                        help="internal: print numpy GFLOP/s as JSON and exit")
    args = parser.parse_args()
    if args.numpy_only:
        print(json.dumps(numpy_gflops(args.sizes, args.repeat)))
        return
    _import_kernels()
    from legato_c_kernels._lib import lib  # importable now that _import_kernels set the path
    isa = {1: "generic", 2: "avx2+fma", 3: "avx512"}[lib.lgk_gemm_isa()]
    print(f"legato-c-kernels GEMM ({isa} micro-kernel) vs numpy {np.__version__}, "
          f"best of {args.repeat}")
    print(f"{'size':>6} {'threads':>7} {'legato GFLOP/s':>15} {'numpy GFLOP/s':>14} {'ratio':>6}")
    for threads in (1, 2):
        ref = (numpy_gflops(args.sizes, args.repeat) if threads == 1
               else numpy_gflops_in_child(args.sizes, args.repeat, threads))
        ours = legato_gflops(args.sizes, args.repeat, threads)
        for n in args.sizes:
            print(f"{n:>6} {threads:>7} {ours[n]:>15.1f} {ref[n]:>14.1f} {ours[n] / ref[n]:>6.2f}")


if __name__ == "__main__":
    main()
