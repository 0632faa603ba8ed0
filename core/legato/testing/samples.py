"""Sample calls of every op, drawn from its definition: the one source of test inputs.

    from legato.testing import samples
    for s in samples("add"):             # deterministic: the same seed, the same samples
        out = my_kernel(*s.inputs, **s.attrs)

An op's samples come from, in order: its own `samples(rng)` hook (OpDef.samples, for
inputs whose values the kit cannot guess), a generator of `legato.testing.generators`
(ops that need structure: convolution, gather, quantization, ...), the generic
elementwise generator (any elemwise or broadcast op: a new float elementwise op gets
samples without an edit), or the op's examples. Elementwise ops also get the edge shapes
every kernel must handle: rank 0, a size-0 dim, size-1 dims and broadcasting variants.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from ..ir import CUSTOM_OP, Call, TensorType, Value
from ..ir.builder import make_call
from ..ir.errors import LegatoError, OpError, clip
from ..legalization.loop import encode_custom
from ..plugins.context import context
from . import generators_qnn  # noqa: F401 - registers the qnn products' generators
from .draw import Draw
from .generators import generator_for

DEFAULT_COUNT = 12
MAX_COUNT = 10_000
ATTEMPTS = 6   # draws per wanted sample: a generator may make a call the op refuses

# input shapes every elementwise kernel must handle (one tuple per edge case; for ops of
# more inputs the shapes repeat); broadcast ops also get the broadcasting ones
SAME_SHAPES = (((),), ((0, 3),), ((1, 1),), ((3, 1, 2),))
BROADCAST_SHAPES = (((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3)), ((0, 3), (1, 3)),
                    ((4, 1, 3), (2, 1)))


class SampleError(LegatoError):
    """An op has no way to draw samples, or its `samples` hook returned bad ones."""


@dataclass(frozen=True)
class Sample:
    """One call of `op`: input arrays (None for an omitted optional input), attributes
    (every one present once normalized) and the result types the op infers."""

    op: str
    inputs: tuple
    attrs: Mapping = field(default_factory=dict)
    outputs: tuple = ()
    note: str = ""

    def input_types(self) -> list:
        return [None if a is None else TensorType(a.shape, a.dtype.name) for a in self.inputs]

    def call(self, registry=None) -> Call:
        """The IR call of this sample (inputs are fresh values of the arrays' types)."""
        values = [None if t is None else Value(t) for t in self.input_types()]
        return make_call(registry or default_registry(), self.op, values, dict(self.attrs))

    def describe(self) -> str:
        types = ", ".join("None" if t is None else str(t) for t in self.input_types())
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        text = f"{self.op}({types}{', ' if attrs and types else ''}{attrs})"
        return clip(text, 300) + (f" [{self.note}]" if self.note else "")

    def read_only(self) -> tuple:
        """Copies of the inputs that raise on a write: a kernel must not change them."""
        out = []
        for a in self.inputs:
            if a is not None:
                a = np.array(a, copy=True)
                a.flags.writeable = False
            out.append(a)
        return tuple(out)


def default_registry():
    """The process-wide context's registry (plugins loaded: their ops have samples too)."""
    return context().registry


class ArrayValue:
    """An input drawn for a sample: an array with the look of an IR value."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = np.asarray(array)

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype.name)
    rank = property(lambda self: self.array.ndim)
    type = property(lambda self: TensorType(self.array.shape, self.array.dtype.name))


class SampleContext(Draw):
    """The context generators call on to make one sample: inputs are fresh arrays, and a
    call is checked by the op (arity, attributes, inference) and recorded."""

    def __init__(self, rng, registry, **draw):
        super().__init__(rng, **draw)
        self.registry = registry
        # the float dtype more often than any one integer dtype: backends mostly take it
        self.numeric = (self.float,) * 5 + self.numeric[1:]
        self.all = self.numeric + ("bool",)
        self.made: list[Sample] = []

    def value(self, dtypes=None, min_rank: int = 0, max_rank: int = 4, exact: bool = False,
              kind: str = "normal", nonempty: bool = False, reuse: float = 0.0) -> ArrayValue:
        dtypes = (dtypes or self.float,) if isinstance(dtypes, (str, type(None))) \
            else tuple(dtypes)
        return self.fresh(self.shape(min_rank, max_rank, nonzero=nonempty),
                          self.choice(dtypes), kind)

    def fresh(self, shape, dtype: str | None = None, kind: str = "normal",
              const: bool | None = None) -> ArrayValue:
        return ArrayValue(self.data(shape, dtype or self.float, kind))

    def feed(self, array) -> ArrayValue:
        return ArrayValue(array)

    const = feed

    def call(self, op: str, *inputs, **attrs):
        arrays = tuple(None if v is None else v.array for v in inputs)
        self.made.append(checked(Sample(op, arrays, attrs), self.registry))

    def custom(self, inner_op: str, data: ArrayValue):
        inner = make_call(self.registry, inner_op, [Value(data.type)], {})
        call = encode_custom(inner, "legato", self.registry)
        self.made.append(Sample(CUSTOM_OP, (data.array,), call.attrs, tuple(
            o.type for o in call.outputs), note=f"tunnels {inner_op}"))


def checked(sample: Sample, registry) -> Sample:
    """The sample with normalized attributes and inferred result types; a LegatoError
    when the op refuses it."""
    call = sample.call(registry)
    inputs = sample.inputs + (None,) * (len(call.inputs) - len(sample.inputs))
    return replace(sample, inputs=inputs, attrs=call.attrs,
                   outputs=tuple(o.type for o in call.outputs))


def has_samples(op: str, registry=None) -> bool:
    opdef = (registry or default_registry()).get(op)
    return getattr(opdef, "samples", None) is not None or generator_for(opdef) is not None


def check_draw_args(seed, count) -> None:
    """`seed` an int >= 0 (what numpy's generators take), `count` an int in [1,
    MAX_COUNT]: a count beyond it is not a test but a run that does not end."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SampleError(f"seed must be an int >= 0, got {clip(repr(seed), 60)}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or \
            not 1 <= count <= MAX_COUNT:
        raise SampleError(f"count must be an int from 1 to {MAX_COUNT}, got "
                          f"{clip(repr(count), 60)}")


def samples(op: str, seed: int = 0, count: int = DEFAULT_COUNT, registry=None,
            dtype: str | None = None) -> list[Sample]:
    """Sample calls of `op`: `count` drawn ones (most in float32, some in other dtypes,
    some with size-0 dims) plus, for elementwise ops, the edge shapes. Deterministic in
    (op, seed). With `dtype`, only calls with an input of that dtype, drawn with it as
    the main dtype (what generators use for float data), so a backend's declared float16
    or int8 is sampled as often as float32 is otherwise. Raises SampleError for an op the
    kit cannot sample."""
    check_draw_args(seed, count)
    if not isinstance(op, str):
        raise SampleError(f"an op is named by a string, got {clip(repr(op), 60)}")
    registry = registry or default_registry()
    opdef = registry.get(op)
    rng = np.random.default_rng([seed, zlib.crc32(op.encode())])
    hook = getattr(opdef, "samples", None)
    if hook is not None:
        return [s for s in _from_hook(op, hook, rng, registry) if has_dtype(s, dtype)]
    generator = generator_for(opdef)
    if generator is None:
        raise SampleError(f"op {op} has no samples: give it a samples(rng) hook (an "
                          f"elementwise op or one with examples gets them without one)")
    drawn = _draw(generator, op, rng, registry, count, dtype)
    if not drawn:
        raise SampleError(f"op {op}: its generator made no valid call"
                          f"{f' with {dtype} inputs' if dtype else ''} in "
                          f"{count * ATTEMPTS} attempts")
    if opdef.kind in ("elemwise", "broadcast") and op != CUSTOM_OP:
        drawn += edge_shapes(drawn, opdef, rng, registry)
    return drawn


def _draw(generator, op, rng, registry, count, dtype) -> list[Sample]:
    drawn: list[Sample] = []
    for attempt in range(count * ATTEMPTS):
        if len(drawn) >= count:
            break
        ctx = SampleContext(rng, registry, edge=attempt % 5 == 4, edge_values=False,
                            float_dtype=dtype or ("float32" if attempt % 3 else None))
        try:
            generator(ctx, op)
        except LegatoError:
            continue  # a call the generator could not make valid here
        except (TypeError, ValueError):
            if dtype is None:
                raise
            continue  # a main dtype the generator does not draw (bool data, say)
        drawn.extend(s for s in ctx.made if has_dtype(s, dtype))
    return drawn


def has_dtype(sample: Sample, dtype: str | None) -> bool:
    """Whether one of the sample's inputs is of `dtype` (None: any sample)."""
    return dtype is None or any(a is not None and a.dtype.name == dtype
                                for a in sample.inputs)


def _from_hook(op, hook, rng, registry) -> list[Sample]:
    try:
        made = list(hook(rng))
    except Exception as err:
        raise SampleError(f"op {op}: its samples hook raised {type(err).__name__}: "
                          f"{clip(str(err), 300)}") from err
    out = []
    for sample in made:
        if not isinstance(sample, Sample) or sample.op != op:
            raise SampleError(f"op {op}: its samples hook returned {clip(repr(sample), 200)}"
                              f"; expected legato.testing.Sample({op!r}, inputs, attrs)")
        try:
            out.append(checked(sample, registry))
        except LegatoError as err:
            raise SampleError(f"op {op}: its samples hook made an invalid call: {err}") from err
    if not out:
        raise SampleError(f"op {op}: its samples hook returned no samples")
    return out


def edge_shapes(drawn: list[Sample], opdef, rng, registry) -> list[Sample]:
    """The first float sample's inputs re-drawn (from its own values, which keeps their
    domain) at each edge shape; shapes the op refuses are left out."""
    base = next((s for s in drawn if all(a is None or a.dtype.kind == "f" for a in s.inputs)),
                drawn[0])
    table = BROADCAST_SHAPES + SAME_SHAPES if opdef.kind == "broadcast" else SAME_SHAPES
    out = []
    for shapes in table:
        inputs = tuple(None if a is None else _redraw(a, shapes[i % len(shapes)], rng)
                       for i, a in enumerate(base.inputs))
        try:
            out.append(checked(Sample(opdef.name, inputs, base.attrs, note="edge shape"),
                               registry))
        except (OpError, LegatoError):
            continue
    return out


def _redraw(array: np.ndarray, shape: tuple, rng) -> np.ndarray:
    if array.size == 0:
        return np.zeros(shape, array.dtype)
    return np.asarray(rng.choice(array.ravel(), size=shape)).astype(array.dtype)


def sample_table(ops=None, seed: int = 0, count: int = DEFAULT_COUNT, registry=None
                 ) -> dict[str, list[Sample]]:
    """op -> samples for `ops` (default: every registered op)."""
    registry = registry or default_registry()
    return {op: samples(op, seed, count, registry) for op in (ops or registry.names())}
