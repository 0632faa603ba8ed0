"""Compiled models called from several threads at once give the serial results."""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import legato
from legato.frontends.examples import cnn, mlp, random_inputs, transformer
from legato_c_kernels import kernels as K
from legato_c_kernels.executor import make_executor


def _aliases():
    b = legato.GraphBuilder()
    x = b.input("x", (3, 4))
    s = b.call("sigmoid", x)
    t = b.call("where", b.call("less", s, 0.5), s, b.call("exp", x))  # a cpu_ref region
    return b.build(s, b.call("reshape", s, shape=[12]), x, b.call("tanh", t))


MODELS = {
    "mlp": lambda: mlp(batch=5, sizes=(33, 65, 10)),
    "transformer": lambda: transformer(seq=9, d_model=32, heads=4, ffn=64, blocks=1),
    "cnn": lambda: cnn(batch=2, size=12),
    "aliases": _aliases,
}
BACKENDS = ["c_kernels", ["c_kernels", "cpu_ref"], "cpu_ref"]
THREADS, CALLS = 8, 6


def _serial_then_concurrent(compiled, mod):
    """(serial results, concurrent results) for THREADS x CALLS distinct inputs."""
    seeds = range(THREADS * CALLS)
    inputs = {seed: random_inputs(mod, seed) for seed in seeds}
    serial = {seed: legato.runtime.interpreter.as_tuple(compiled(*inputs[seed])) for seed in seeds}
    start = threading.Barrier(THREADS)

    def worker(first):
        start.wait(timeout=60)
        return {seed: legato.runtime.interpreter.as_tuple(compiled(*inputs[seed]))
                for seed in range(first, first + CALLS)}

    concurrent = {}
    with ThreadPoolExecutor(THREADS) as pool:
        for part in pool.map(worker, range(0, THREADS * CALLS, CALLS)):
            concurrent.update(part)
    return serial, concurrent


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_concurrent_calls_match_serial_calls(name, backend):
    mod = MODELS[name]()
    compiled = legato.compile(mod, backend)
    serial, concurrent = _serial_then_concurrent(compiled, mod)
    assert serial.keys() == concurrent.keys()
    for seed, want in serial.items():
        for got, expected in zip(concurrent[seed], want):
            np.testing.assert_array_equal(got, expected, err_msg=f"input seed {seed}")


def test_calls_really_run_in_parallel(backend_factory):
    """Two calls are inside one model at the same moment: each waits for the other in a
    kernel, which would time out if calls were serialized (a lock) instead of each
    getting its own planned instance."""
    met = threading.Barrier(2)
    armed, seen = threading.Event(), threading.local()

    def meeting_tanh(data, *, out=None):
        if armed.is_set() and not getattr(seen, "met", False):
            seen.met = True
            met.wait(timeout=30)
        out = np.empty_like(data) if out is None else out
        np.tanh(data, out=out)
        return out

    backend_factory({"backend": "meeting", "executes": True, "fallback": "cpu_ref",
                     "legal": {"tanh": {"dtypes": ["float32"]}, "exp": {"dtypes": ["float32"]}}},
                    kernels={"tanh": meeting_tanh, "exp": K.exp},
                    executor=make_executor)
    b = legato.GraphBuilder()
    x = b.input("x", (4, 4))
    mod = b.build(b.call("exp", b.call("tanh", x)))
    compiled = legato.compile(mod, "meeting")
    inputs = [np.full((4, 4), v, np.float32) for v in (0.5, -1.0)]
    armed.set()
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda a: compiled(a), inputs))
    for a, g in zip(inputs, got):
        np.testing.assert_allclose(g, np.exp(np.tanh(a)), rtol=1e-6)
    assert compiled._runner.stats()["instances"] == 2


class _Runner:
    def __init__(self, fn):
        self.run = lambda args, kwargs: fn(*args, **kwargs)


def test_pool_waits_at_its_limit_and_recovers_from_a_failed_build():
    from legato_c_kernels.pool import RunnerPool

    inside, release = threading.Event(), threading.Event()
    builds = []

    def build():
        builds.append(1)
        if len(builds) == 2:
            raise RuntimeError("no memory for another runner")

        def runner(value):
            if value == "block":
                inside.set()
                assert release.wait(timeout=30)
            return value
        return _Runner(runner)

    pool = RunnerPool(build, limit=2)
    with ThreadPoolExecutor(3) as threads:
        first = threads.submit(pool, "block")
        assert inside.wait(timeout=30)
        with pytest.raises(RuntimeError, match="no memory"):  # the second build fails...
            pool("x")
        assert pool.size == 1                                 # ...and is not counted
        waiting = threads.submit(pool, "y")  # builds the second runner (limit 2)
        assert waiting.result(timeout=30) == "y"
        third = threads.submit(pool, "z")    # both runners exist: reuses a free one
        assert third.result(timeout=30) == "z"
        release.set()
        assert first.result(timeout=30) == "block"
    assert pool.size == 2


def test_pool_at_its_limit_makes_calls_wait_for_a_free_runner():
    from legato_c_kernels.pool import RunnerPool

    active, most = [0], [0]
    lock = threading.Lock()

    def runner(value):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        threading.Event().wait(0.01)
        with lock:
            active[0] -= 1
        return value * 2

    pool = RunnerPool(lambda: _Runner(runner), limit=2)
    with ThreadPoolExecutor(6) as threads:
        assert list(threads.map(pool, range(30))) == [2 * v for v in range(30)]
    assert pool.size <= 2 and most[0] <= 2


def test_prepared_calls_read_their_buffers_at_each_call_from_any_thread():
    """bind() has no shared state: calls prepared on different buffers run concurrently,
    each reading its buffers' contents at the time of the call."""
    x, y = np.zeros(64, np.float32), np.zeros(64, np.float32)
    out_x, out_y = np.empty_like(x), np.empty_like(y)
    exp_x, tanh_y = K.exp.bind(x, out=out_x), K.tanh.bind(y, out=out_y)
    assert exp_x.direct and tanh_y.direct  # one C call each, nothing checked per call
    for step in range(20):
        x[:], y[:] = step / 10, -step / 10
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda run: run(), [exp_x, tanh_y]))
        np.testing.assert_allclose(out_x, np.exp(x), rtol=1e-6)
        np.testing.assert_allclose(out_y, np.tanh(y), rtol=1e-6)
    strided = np.zeros((8, 16), np.float32)[:, ::2]  # needs a copy per call: no C call bound
    out = np.empty(strided.shape, np.float32)
    run = K.exp.bind(strided, out=out)
    assert not getattr(run, "direct", False)
    strided[:] = 1.0
    run()
    np.testing.assert_allclose(out, np.e, rtol=1e-6)
