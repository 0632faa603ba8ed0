"""Fuzz target: attributes of the right type but a hostile value, on every op.

The op generators (legato.testing.generators) draw attributes within their documented
ranges; an outside fuzzer does not. A case builds a random program as target_programs
does, except that the first call of the program (its op cycles through every op as
seeds go up) gets one or two attributes replaced by a value of the attribute's own type
that the generators never draw: negative, zero, huge and out-of-range ints, axis lists
that are empty, repeated, too long or out of range, NaN, infinities, -0.0 and huge floats,
the other choices of a string, a flipped bool, None where it is allowed.

The call must be refused with a LegatoError when building, compiling or running, or
compute: cpu_ref, c_kernels and the partitioned c_kernels+cpu_ref give the unlegalized
reference's shapes and dtypes (and values, on ordinary results). A raw exception, crash,
hang or runaway allocation is a finding.
"""
from __future__ import annotations

import numpy as np

import legato
from legato import LegatoError
from legato.ops.registry import REQUIRED

from .op_generators import GENERATORS
from .program_builder import ProgramContext
from .program_checks import as_tuple, check_tosa, compare, ordinary, tolerance

QUICK_CASES = 80
CASE_TIMEOUT = 30.0
BACKENDS = ("cpu_ref", "c_kernels", ("c_kernels", "cpu_ref"))
TOSA_SHARE = 0.4

HOSTILE_INTS = (-(2 ** 63), -(2 ** 31), -100, -9, -5, -2, -1, 0, 1, 2, 5, 9, 100, 2 ** 31,
                2 ** 40, 2 ** 63 - 1)
HOSTILE_FLOATS = (float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-45, -1e30, 3e38,
                  1e300, -1.0, 0.5)


def hostile(rng: np.random.Generator, spec, current):
    """A value of `spec`'s type that the op's generator would not draw."""
    kind = spec.type
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if optional and rng.random() < 0.1:
        return None
    options = kind.split("|")
    kind = options[int(rng.integers(len(options)))]
    if kind.startswith("str:"):
        return str(rng.choice(kind[4:].split("|")))
    if kind == "bool":
        return not current if isinstance(current, bool) else bool(rng.random() < 0.5)
    if kind == "int":
        return int(rng.choice(HOSTILE_INTS))
    if kind == "float":
        return float(rng.choice(HOSTILE_FLOATS))
    if kind in ("ints", "floats"):
        base = list(current) if isinstance(current, (list, tuple)) else []
        action = int(rng.integers(5))
        if action == 0:
            return []
        if action == 1 and base:  # repeat one
            return base + [base[int(rng.integers(len(base)))]]
        if action == 2:  # longer
            return base + [int(rng.integers(-3, 4)) for _ in range(int(rng.integers(1, 9)))]
        if action == 3 and base:  # one entry hostile
            index = int(rng.integers(len(base)))
            pool = HOSTILE_INTS if kind == "ints" else HOSTILE_FLOATS
            base[index] = type(pool[0])(rng.choice(pool))
            return base
        pool = HOSTILE_INTS if kind == "ints" else HOSTILE_FLOATS
        return [type(pool[0])(rng.choice(pool)) for _ in range(int(rng.integers(1, 5)))]
    if kind == "dtype":
        return str(rng.choice(["float64", "float16", "bfloat16", "int8", "uint8", "bool",
                               "int64"]))
    return current


class HostileContext(ProgramContext):
    """Makes the first call with one or two attributes replaced (recorded in `mutated`)."""

    def __init__(self, rng, edge):
        super().__init__(rng, edge)
        self.mutated: tuple | None = None

    def call(self, op, *inputs, **attrs):
        if self.mutated is None:
            specs = self.registry.get(op).attr_specs
            if specs:
                names = list(specs)
                for _ in range(1 + int(self.chance(0.3))):
                    name = names[int(self.rng.integers(len(names)))]
                    current = attrs.get(name, specs[name].default)
                    current = None if current is REQUIRED else current
                    attrs[name] = hostile(self.rng, specs[name], current)
            self.mutated = (op, dict(attrs))
        return super().call(op, *inputs, **attrs)


def build(seed: int) -> HostileContext | None:
    rng = np.random.default_rng(seed)
    ctx = HostileContext(rng, edge=False)
    ops = [op for op in legato.list_ops() if op in GENERATORS and
           GENERATORS[op] is not None and ctx.registry.get(op).attr_specs]
    op = ops[seed % len(ops)]
    try:
        GENERATORS[op](ctx, op)
    except LegatoError:
        return None  # the hostile attribute was refused when building: the right answer
    drawn = [o for o in legato.list_ops()
             if o in GENERATORS and legato.get_backend("cpu_ref").has_kernel(o)]
    for _ in range(int(rng.integers(0, 3))):
        try:
            other = drawn[int(rng.integers(len(drawn)))]
            GENERATORS[other](ctx, other)
        except LegatoError:
            pass
    return ctx if ctx.computed() else None


def run(seed: int) -> str:
    ctx = build(seed)
    if ctx is None:
        return "refused"
    module = ctx.b.build(ctx.computed()[-1])
    where = f"{ctx.mutated[0]} with {_show(ctx.mutated[1])}" if ctx.mutated else "?"
    str(module)  # printing must work
    try:
        reference = legato.reference(module)
        want = as_tuple(reference(*ctx.feeds))
    except LegatoError:
        want = None
    for backend in BACKENDS:
        name = "+".join(backend) if isinstance(backend, tuple) else backend
        try:
            compiled = legato.compile(module, list(backend) if isinstance(backend, tuple)
                                      else backend)
            got = as_tuple(compiled(*ctx.feeds))
        except LegatoError:
            continue
        if want is None:
            continue
        values_too = (tolerance(ctx.ops) == 0 or (ordinary(want) and ordinary(got))) \
            and not _nan_parameters(ctx.mutated) and not _far_grid(ctx)
        compare(got, want, ctx.ops, f"{name}, {where}", values_too)
    if ctx.chance(TOSA_SHARE):  # emitted TOSA must pass tosa-opt whatever the attributes
        check_tosa(module, ctx.feeds, want, ctx.rng, lambda got: compare(
            got, want, ctx.ops, f"tosa_custom, {where}", False), run_share=0.0)
    return "ok" if want is not None else "refused"


def _nan_parameters(mutated) -> bool:
    """Float attributes that are NaN or infinite in float32 (an alpha of 1e300 is inf
    there, and inf * 0 is NaN) make the result a matter of evaluation order and
    precision: only shapes and dtypes are held to."""
    if mutated is None:
        return False
    floats = [v for v in _flat(mutated[1].values()) if isinstance(v, float)]
    # (and 1 / 3e38 is a float32 denormal: x * (1 / alpha) loses x entirely)
    return any(not np.isfinite(v) or abs(v) > 1e15 or 0 < abs(v) < 1e-15 for v in floats)


def _far_grid(ctx) -> bool:
    """grid_sample at coordinates in the hundreds: reflecting them in float32 leaves a
    fraction of 1e-4, which bicubic weights turn into errors past the op's tolerance."""
    return "nn.grid_sample" in ctx.ops and ctx.spread > 3


def _flat(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _show(attrs: dict) -> str:
    return "{" + ", ".join(f"{k}={v!r}" for k, v in attrs.items()) + "}"
