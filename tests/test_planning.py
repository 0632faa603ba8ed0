"""legato.runtime.planning: liveness, buffer reuse and whole-module flattening shared by the
reference interpreter and planned executors."""
import numpy as np
import pytest

import legato
from legato.ir import CALL_OP
from legato.runtime import planning

TWO_CALLS = """
func @main(%x: float32[2, 3]) -> (float32[2, 3], float32[2, 3]) {
  %1 = call(%x) {"callee": "f"} : float32[2, 3]
  %2 = call(%1) {"callee": "f"} : float32[2, 3]
  return %2, %1
}

func @f(%a: float32[2, 3]) -> (float32[2, 3]) {
  %1 = exp(%a) : float32[2, 3]
  %2 = tanh(%1) : float32[2, 3]
  return %2
}
"""


def chain():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    e = b.call("exp", x)
    r = b.call("reshape", e, shape=[3, 2])
    t = b.call("tanh", r)
    return b.build(b.call("add", t, b.const(np.ones((3, 2), np.float32))))


def test_values_die_after_their_last_read_through_views():
    fn = chain().main
    calls = fn.calls
    exp, reshape, tanh, add = calls
    roots = planning.view_roots(calls, lambda c: c.op == "reshape")
    assert roots == {reshape.output: exp.output}
    assert planning.last_uses(calls, roots)[exp.output] == 2  # tanh reads the view
    dying = planning.frees(calls, keep=fn.params, roots=roots)
    assert dying == [(), (), (exp.output,), (tanh.output,)]
    plain = planning.frees(calls, keep=())  # without roots the view dies on its own
    assert plain[1] == (exp.output,) and plain[2] == (reshape.output,)


def test_arena_reuses_given_back_buffers_by_size_and_dtype():
    arena = planning.Arena()
    a = arena.take((2, 3), "float32")
    arena.give(a)
    b = arena.take((3, 2), "float32")
    assert np.shares_memory(a, b) and b.shape == (3, 2)
    c = arena.take((6,), "int32")
    assert not np.shares_memory(a, c)
    assert arena.allocated == 6 * 4 + 6 * 4


def test_arena_hands_out_the_latest_block_that_holds_a_value():
    """The block given back last (the memory just read, still in cache) serves the next
    value of any dtype that fits in it with at most SLACK times its size; a block is never
    handed out twice, and buffers it did not make are not taken back."""
    arena = planning.Arena()
    big, small, other = (arena.take((1024,), "float32"), arena.take((64,), "float32"),
                         arena.take((256,), "int8"))
    arena.give(small)
    arena.give(big)
    arena.give(big)  # twice: still one block
    half = arena.take((2, 256), "int16")  # 1 KB fits the latest (4 KB) block
    assert np.shares_memory(half, big) and half.dtype == np.int16 and half.shape == (2, 256)
    assert half.ctypes.data % planning.BUFFER_ALIGN == 0
    again = arena.take((16,), "float32")  # 64 B: big is taken, small (256 B) fits
    assert np.shares_memory(again, small) and not np.shares_memory(again, half)
    arena.give(half)
    tiny = arena.take((4,), "uint8")  # 4 KB is more than SLACK x 64 B: a new block
    assert not np.shares_memory(tiny, big)
    arena.give(np.zeros(8, np.float32))  # not its own: ignored
    fresh = arena.take((8,), "float32")
    assert all(not np.shares_memory(fresh, x) for x in (big, small, other, tiny))
    assert not fresh.any()


def test_flatten_inlines_a_fresh_copy_per_call_site():
    mod = legato.parse(TWO_CALLS)
    flat = planning.flatten(mod)
    assert [c.op for c in flat.calls] == ["exp", "tanh", "exp", "tanh"]
    assert all(c.op != CALL_OP for c in flat.calls)
    first, second = flat.calls[1].output, flat.calls[3].output
    assert first is not second and first.type == second.type
    assert flat.calls[2].inputs == (first,)        # the second call reads the first's result
    assert flat.results == (second, first)
    assert flat.calls[0].inputs == tuple(flat.params) and flat.calls[0].where == "@f call 0"


def test_interpreter_frees_intermediates_with_the_shared_liveness():
    mod = chain()
    runner = legato.compile(mod, "cpu_ref")._runner
    _, _, _, steps, _ = runner.main
    assert [len(step.free) for step in steps] == [len(d) for d in planning.frees(
        mod.main.calls, (*mod.main.params, *mod.main.results))]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int8", "bool"])
@pytest.mark.parametrize("shape", [(3, 5), (0, 4), (1,), (), (17, 3, 7)])
def test_arena_buffers_are_zeroed_and_start_on_a_cache_line(shape, dtype):
    arena = planning.Arena()
    buffers = [arena.take(shape, dtype) for _ in range(3)]  # several: numpy's own vary
    for buffer in buffers:
        assert buffer.shape == shape and buffer.dtype == np.dtype(dtype)
        assert buffer.size == 0 or buffer.ctypes.data % planning.BUFFER_ALIGN == 0
        assert not buffer.any()
        buffer[...] = 1  # writable, and its own memory
    assert all(b.all() for b in buffers if b.size)
    arena.give(buffers[0])
    assert arena.take(shape, dtype) is not None and arena.allocated == \
        3 * int(np.prod(shape)) * np.dtype(dtype).itemsize
