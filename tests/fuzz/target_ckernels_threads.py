"""Random programs called concurrently from several threads give the serial results.

A case builds a random program (the generator of target_programs: every op, shapes with
size-0 and size-1 dims, results that alias each other or the inputs), compiles it for
c_kernels or for the partitioned c_kernels+cpu_ref, runs it serially on several input
sets, then again from THREADS threads at once, each thread taking the input sets in its
own order, and requires bit-identical results (NaN equals NaN): one compiled model
gives one answer per input whatever else is running. It also checks that no call wrote
into its inputs and that results handed out earlier are not overwritten later.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import legato
from legato import LegatoError

from . import Mismatch
from .program_checks import as_tuple, check_untouched, copies
from .target_programs import build, results_of

QUICK_CASES = 24
CASE_TIMEOUT = 60.0
THREADS, INPUT_SETS = 4, 3
BACKENDS = ("c_kernels", ["c_kernels", "cpu_ref"])


def run(seed: int) -> str:
    ctx = build(seed)
    if ctx is None:
        return "skipped"
    module = ctx.b.build(*results_of(ctx))
    try:
        compiled = legato.compile(module, BACKENDS[seed % len(BACKENDS)])
        feed_sets = [ctx.feeds] + [ctx.other_feeds() for _ in range(INPUT_SETS - 1)]
        originals = [copies(feeds) for feeds in feed_sets]
        serial = [as_tuple(compiled(*feeds)) for feeds in feed_sets]
    except LegatoError:
        return "refused"
    kept = [copies(results) for results in serial]
    concurrent = _concurrent(compiled, feed_sets, np.random.default_rng(seed))
    for index, runs in concurrent.items():
        for got in runs:
            _same(got, serial[index], f"input set {index}, concurrent call")
    for index, (before, feeds) in enumerate(zip(originals, feed_sets)):
        check_untouched(before, feeds, f"a call on input set {index}")
    for index, (results, before) in enumerate(zip(serial, kept)):
        _same(results, before, f"input set {index}: results of the serial call, after more calls")
    return "ok"


def _concurrent(compiled, feed_sets, rng) -> dict[int, list]:
    """Every thread runs every input set once, in its own random order."""
    start = threading.Barrier(THREADS)
    orders = [rng.permutation(len(feed_sets)) for _ in range(THREADS)]

    def worker(order):
        start.wait(timeout=CASE_TIMEOUT)
        return [(int(i), as_tuple(compiled(*feed_sets[i]))) for i in order]

    runs: dict[int, list] = {}
    with ThreadPoolExecutor(THREADS) as pool:
        for part in pool.map(worker, orders):
            for index, results in part:
                runs.setdefault(index, []).append(results)
    return runs


def _same(got, want, where: str) -> None:
    if len(got) != len(want):
        raise Mismatch(f"{where}: {len(got)} results, serial gave {len(want)}")
    for position, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            raise Mismatch(f"{where}: result {position} is {g.dtype}{list(g.shape)}, serial "
                           f"gave {w.dtype}{list(w.shape)}")
        if not np.array_equal(g, w, equal_nan=g.dtype.kind in "fc"):
            raise Mismatch(f"{where}: result {position} differs from the serial run")
