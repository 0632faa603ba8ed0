"""int64 in real models (token ids, position ids, masks, shape tensors) on tosa_custom:
narrowed to int32 (narrowing.py). Each program models a piece of an exported transformer;
its TOSA validates with tosa-opt, runs on the TOSA reference model and matches cpu_ref;
values that do not fit int32 are refused with the constant or input and the value."""
from __future__ import annotations

import re

import numpy as np
import pytest

import legato
from legato.ir.errors import LegalizationError
from legato_tosa_custom import emit_mlir, narrow_inputs
from legato_tosa_custom.cases import KEEP, assert_matches
from legato_tosa_custom.kernels import simulate
from legato_tosa_custom.narrowing import result_dtypes, widen_results

RNG = np.random.default_rng(0)


def embedding_lookup():
    """The issue's `take(float32[1000, 256], int64[1, 64])`: token ids into a table."""
    b = legato.GraphBuilder()
    ids = b.input("input_ids", (1, 64), "int64")
    table = b.const(RNG.standard_normal((1000, 256)).astype(np.float32), name="wte")
    module = b.build(b.take(table, ids, axis=0))
    return module, [RNG.integers(0, 1000, (1, 64))]


def position_ids():
    """position_ids = arange(past, past + seq) + offset, added to token ids' embeddings."""
    b = legato.GraphBuilder()
    ids = b.input("input_ids", (2, 8), "int64")
    past = b.input("past_length", (1, 1), "int64")
    arange = b.const(np.arange(8, dtype=np.int64).reshape(1, 8), name="arange")
    positions = b.add(b.add(arange, past), b.const(np.array(2, np.int64)))  # OPT's offset 2
    wte = b.const(RNG.standard_normal((50, 16)).astype(np.float32), name="wte")
    wpe = b.const(RNG.standard_normal((20, 16)).astype(np.float32), name="wpe")
    hidden = b.add(b.take(wte, ids, axis=0), b.take(wpe, positions, axis=0))
    scaled = b.multiply(positions, b.const(np.array(3, np.int64)))
    clipped = b.clip(ids, min=-2.5, max=31.5)  # clipped, then truncated: 31 (rounding: 32)
    return b.build(hidden, b.subtract(scaled, ids), clipped), \
        [RNG.integers(0, 50, (2, 8)), np.array([[5]], np.int64)]


def attention_mask():
    """HF's extended mask from an int64 attention_mask: compare, cast, where, reshape."""
    b = legato.GraphBuilder()
    mask = b.input("attention_mask", (2, 8), "int64")
    scores = b.input("scores", (2, 2, 8, 8))
    wide = b.reshape(mask, shape=[2, 1, 1, 8])
    additive = b.multiply(b.cast(b.subtract(b.const(np.array(1, np.int64)), wide),
                                 dtype="float32"), b.scalar(-1e9, "float32"))
    padded = b.equal(wide, b.const(np.array(0, np.int64)))
    causal = b.greater(b.const(np.arange(8, dtype=np.int64).reshape(1, 1, 1, 8)),
                       b.const(np.arange(8, dtype=np.int64).reshape(1, 1, 8, 1)))
    hidden = b.logical_or(padded, causal)
    masked = b.where(hidden, b.scalar(-1e4, "float32"), b.add(scores, additive))
    lengths = b.sum(mask, axes=[1], keepdims=False)
    kept = b.where(padded, b.const(np.array(-1, np.int64)), wide)
    mask_rows = np.ones((2, 8), np.int64)
    mask_rows[0, 5:] = 0
    return b.build(masked, lengths, kept, hidden), \
        [mask_rows, RNG.standard_normal((2, 2, 8, 8)).astype(np.float32)]


def shape_tensor():
    """A shape-like int64 tensor: reshaped, concatenated, sliced, transposed, gathered."""
    b = legato.GraphBuilder()
    shape = b.input("shape", (4,), "int64")
    grid = b.reshape(shape, shape=[2, 2])
    grown = b.concat(grid, b.const(np.array([[7, 8]], np.int64)), axis=0)
    rows = b.strided_slice(grown, begin=[1], end=[3], axes=[0])
    picked = b.take(shape, b.const(np.array([3, 0], np.int64)), axis=0)
    return b.build(rows, b.permute_dims(grown, axes=[1, 0]), picked,
                   b.cast(picked, dtype="int32")), [np.array([1, 12, 64, 64], np.int64)]


def predicted_ids():
    """argmax: int64 in legato, TOSA ARGMAX's int32 in the module."""
    b = legato.GraphBuilder()
    logits = b.input("logits", (2, 3, 10))
    return b.build(b.argmax(logits, axis=-1, keepdims=False),
                   b.argmax(logits, axis=1, keepdims=True, select_last_index=True)), \
        [RNG.integers(-3, 4, (2, 3, 10)).astype(np.float32)]


def bool_masks():
    """bool masks: combined, gathered, selected between."""
    b = legato.GraphBuilder()
    a, c = b.input("a", (4, 6), "bool"), b.input("c", (4, 6), "bool")
    x = b.input("x", (4, 6))
    both = b.logical_and(a, b.logical_not(c))
    rows = b.take(both, b.const(np.array([2, 0], np.int64)), axis=0)
    return b.build(b.where(both, x, b.scalar(0.0, "float32")), rows,
                   b.equal(a, c)), \
        [RNG.random((4, 6)) < 0.5, RNG.random((4, 6)) < 0.5,
         RNG.standard_normal((4, 6)).astype(np.float32)]


def widened_ints():
    """int8 / int16 widened to int32 / int64 (through float32, exact for them)."""
    b = legato.GraphBuilder()
    x, y = b.input("x", (4,), "int8"), b.input("y", (4,), "int16")
    return b.build(b.cast(x, dtype="int64"), b.cast(y, dtype="int32"),
                   b.cast(x, dtype="int16")), \
        [np.array([-128, 127, 0, -5], np.int8), np.array([-32768, 32767, 1, -2], np.int16)]


def integer_division():
    """Swin's window indices: fmod and remainder of int64 ids (torch.fmod, %), and `//`.
    Every sign combination, zero divisors (0 by definition), quotients up to 2**21."""
    b = legato.GraphBuilder()
    x, y = b.input("x", (4, 8), "int64"), b.input("y", (4, 8), "int64")
    three = b.const(np.array(3, np.int64))
    return b.build(b.fmod(x, y), b.remainder(x, y), b.divide(x, y), b.fmod(x, three),
                   b.divide(b.cast(x, dtype="int32"), b.cast(y, dtype="int32"))), \
        [np.array([[7, -7, 7, -7, 0, 5, -5, 9]] * 2 + [[2**21 * 3 + 1, -(2**21) * 5, 6, -6,
                                                         2**22 - 1, 2**22 - 3, 1, -1]] * 2),
         np.array([[3, 3, -3, -3, 3, 0, 0, 3], [1, -1, 2, -2, 7, 5, 5, -5],
                   [3, 5, -3, 3, 1, 2, -1, 1], [-3, 7, 4, 5, 3, 3, 2, -2]])]


def scatter_updates():
    """scatter_elements with int64 indices: a cache write at run-time positions (distinct:
    with `none`, a position written twice keeps either update), counts added at repeated
    ids, a max over a block smaller than the data, negative indices."""
    b = legato.GraphBuilder()
    cache, rows = b.input("cache", (2, 8, 4)), b.input("rows", (2, 3, 4))
    where = b.input("where", (2, 3, 4), "int64")
    counts = b.const(np.zeros((1, 6), np.int64))
    ids = b.input("ids", (1, 10), "int64")
    block = b.input("block", (3, 5))
    return b.build(
        b.call("scatter_elements", cache, where, rows, axis=1),
        b.call("scatter_elements", counts, ids, b.const(np.ones((1, 10), np.int64)), axis=-1,
               reduction="add"),
        b.call("scatter_elements", block, b.const(np.array([[-1, 0], [2, 2]], np.int64)),
               b.const(np.array([[9.0, -9.0], [0.5, 7.0]], np.float32)), axis=0,
               reduction="max")), \
        [RNG.standard_normal((2, 8, 4)).astype(np.float32),
         RNG.standard_normal((2, 3, 4)).astype(np.float32),
         np.broadcast_to(np.array([5, -1, 0]).reshape(1, 3, 1), (2, 3, 4)).copy(),
         RNG.integers(-6, 6, (1, 10)), RNG.standard_normal((3, 5)).astype(np.float32)]


def router_topk():
    """A mixture-of-experts router: the top 2 experts per token (int64 indices, ties in
    index order, NaN largest), their weights looked up by those indices; a full sort."""
    b = legato.GraphBuilder()
    logits = b.input("logits", (6, 8))
    weights, experts = b.call("topk", logits, k=2, axis=-1)
    scale = b.const(RNG.standard_normal((8, 3)).astype(np.float32))
    ranked, order = b.call("topk", logits, k=8, axis=-1, largest=False)
    scores = RNG.integers(-3, 4, (6, 8)).astype(np.float32)  # ties
    scores[1, 3], scores[2, :2] = np.nan, np.inf
    return b.build(weights, experts, b.take(scale, experts, axis=0), ranked, order), [scores]


PROGRAMS = {f.__name__: f for f in (embedding_lookup, position_ids, attention_mask,
                                    shape_tensor, predicted_ids, bool_masks, widened_ints,
                                    integer_division, scatter_updates, router_topk)}


def compile_tosa(module):
    return legato.compile(module, backend=KEEP)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_legalizes_without_int64_and_simulates_as_cpu_ref(name):
    module, feeds = PROGRAMS[name]()
    compiled = compile_tosa(module)
    assert "i64" not in compiled.artifact
    assert_matches(simulate(compiled.module)(*feeds), legato.reference(module)(*feeds))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_validates_and_runs_on_the_reference_model(tools, name):
    module, feeds = PROGRAMS[name]()
    compiled = compile_tosa(module)
    outputs = tools.run_reference(compiled.artifact, feeds, validate=True)
    assert_matches(outputs, legato.reference(module)(*feeds))


def test_the_embedding_is_one_gather_of_the_i32_ids():
    module, _ = embedding_lookup()
    text = compile_tosa(module).artifact
    assert "function_type = (tensor<1x64xi32>) -> tensor<1x64x256xf32>" in text
    assert text.count('"tosa.gather"') == 1
    assert re.search(r'"tosa.gather"\(%\d+, %\d+\) : \(tensor<1x1000x256xf32>, '
                     r'tensor<1x64xi32>\) -> tensor<1x64x256xf32>', text)


def test_int64_parameters_and_results_are_i32_marked_in_the_signature():
    """The artifact says which i32 values stand for int64 ones (arg_attrs / res_attrs);
    int64 <-> int32 casts print nothing; the tools narrow inputs and widen results."""
    b = legato.GraphBuilder()
    x, scale = b.input("x", (3,), "int64"), b.input("scale", (3,))
    y = b.cast(b.add(x, b.const(np.array(1, np.int64))), dtype="int32")
    module = b.build(b.cast(y, dtype="int64"), y, scale)
    text = compile_tosa(module).artifact
    assert '"func.func"() <{arg_attrs = [{legato.dtype = "int64"}, {}], function_type = ' \
           '(tensor<3xi32>, tensor<3xf32>) -> (tensor<3xi32>, tensor<3xi32>, tensor<3xf32>), ' \
           'res_attrs = [{legato.dtype = "int64"}, {}, {}], sym_name = "main"}>' in text
    assert '"tosa.cast"' not in text and text.count('"tosa.add"') == 1
    assert result_dtypes(text) == ["int64", None, None]
    outputs = widen_results(text, [np.array([1, 2, 3], np.int32)] * 2 + [np.ones(3, np.float32)])
    assert [o.dtype for o in outputs] == [np.int64, np.int32, np.float32]


def test_the_tools_narrow_inputs_and_widen_results(tools):
    module, feeds = position_ids()
    outputs = tools.run_reference(compile_tosa(module).artifact, feeds, validate=True)
    assert [o.dtype for o in outputs] == [np.float32, np.int64, np.int64]


def test_an_int64_constant_outside_int32_is_refused_naming_it():
    b = legato.GraphBuilder()
    ids = b.input("ids", (3,), "int64")
    offsets = b.const(np.array([1, 3_000_000_000, 2], np.int64), name="offsets")
    with pytest.raises(LegalizationError, match=r"int64 constant offsets \(an operand of add\) "
                                                r"holds 3000000000 at index \[1\], outside int32"):
        compile_tosa(b.build(b.add(ids, offsets)))


def test_an_index_constant_outside_int32_is_refused():
    b = legato.GraphBuilder()
    data = b.input("x", (4,))
    index = b.const(np.array([0, -2**33], np.int64), name="picked")
    with pytest.raises(LegalizationError, match=r"picked.*holds -8589934592 at index \[1\]"):
        emit_mlir(legato.legalize(b.build(b.take(data, index, axis=0)), KEEP).module)


def test_integer_constants_computed_in_float32_must_be_exact_there():
    """pro_fp compares integers as float32, which holds integers exactly up to 2**24."""
    b = legato.GraphBuilder()
    ids = b.input("ids", (2,), "int64")
    big = b.const(np.array([5, 2**24 + 1], np.int64), name="limit")
    with pytest.raises(LegalizationError, match=r"limit holds 16777217 at index \[1\].*2\*\*24"):
        compile_tosa(b.build(b.greater(ids, big)))


def test_inputs_are_narrowed_for_the_caller_and_checked():
    narrowed = narrow_inputs([np.array([1, -7], np.int64), np.ones(2, np.float32)])
    assert [a.dtype for a in narrowed] == [np.int32, np.float32]
    np.testing.assert_array_equal(narrowed[0], [1, -7])
    with pytest.raises(LegalizationError, match=r"input 0 .*holds 2147483648 at index \[1\]"):
        narrow_inputs([np.array([0, 2**31], np.int64)])
