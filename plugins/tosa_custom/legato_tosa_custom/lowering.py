"""What tosa_custom does with each legato op, in one place: the backend's `legal` and
`rules` (plugin.py) and the emitter's dispatch (emitter.py) are derived from these tables.

- TOSA: op -> Lowering: the legato call, in the form its `check` accepts, is one TOSA
  operator; `form` says how the emitter spells the operands and properties that operator
  takes besides the call's tensors (emitter.FORMS); `rule` rewrites the other forms.
  An elementwise op with a 1:1 TOSA operator is one row here.
- RULES: ops that are not one TOSA operator but a lowering rule rewrites into rows above.
- INTEGER_RULES: rules for the integer forms of ops whose float forms are NOT_LOWERED.
- NOT_LOWERED: ops with neither, and why (a config can still keep them as tosa.custom).
Ops in none of them are left to their generic decomposition (composites).

int64 is printed as int32 (narrowing.py), so it goes wherever int32 does: ARITH rows take
it, and the `via_float` rules run the integer forms pro_fp lacks (compares, select,
min/max, reductions, data movement) on float32 copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from . import int_casts, int_conv, int_matmul, int_native, integers, qadd_table, quantize_cast, \
    quantized, quantized_softmax, rules, scatter, sorting, trig
from .limits import INT_DTYPES, checked
from .profiles import DEFAULT

FLOAT = ("float32", "float16")
ARITH = FLOAT + ("int32", "int64")  # int64: narrowed to int32
DATA = FLOAT + ("bool",)
LOGIC = ("bool",)


@dataclass(frozen=True)
class Lowering:
    """One legato op as one TOSA operator: when (dtypes, ranks, attrs, check) and how
    (form); `rule` rewrites calls the conditions refuse, or declines (None)."""

    tosa: str
    form: str = "operands"
    dtypes: tuple | None = FLOAT
    check: Callable = rules.tosa_tensors
    rule: Callable | None = None
    attrs: Mapping = field(default_factory=dict)
    ranks: tuple | None = None

    def condition(self) -> dict:
        """The capability condition (keys of a `legal:` entry)."""
        cond = {"check": self.check}
        if self.dtypes is not None:
            cond["dtypes"] = list(self.dtypes)
        if self.ranks is not None:
            cond["ranks"] = list(self.ranks)
        if self.attrs:
            cond["attrs"] = dict(self.attrs)
        return cond


def unary(tosa: str, dtypes=FLOAT, form: str = "operands", rule=None) -> Lowering:
    return Lowering(tosa, form, dtypes, rule=rule)


def binary(tosa: str, dtypes=FLOAT, form: str = "operands") -> Lowering:
    """Operands of equal rank; lower ranks are reshaped up (TOSA broadcasts size-1 dims);
    integer operands of a float-only row go through float32."""
    rule = integers.via_float(rules.broadcast_ranks) if dtypes == FLOAT else \
        rules.broadcast_ranks
    return Lowering(tosa, form, dtypes, rules.same_rank, rule)


def reduction(tosa: str) -> Lowering:
    """One axis, kept; other axes and keepdims=False: one reduction per axis + reshape."""
    return Lowering(tosa, "reduce", FLOAT, rules.single_axis,
                    integers.via_float(rules.reduce_axes), {"keepdims": True})


def movement(tosa: str, form: str, check=rules.tosa_tensors, rule=None, attrs=None) -> Lowering:
    """Data movement of floats and bools; integers move as float32 (pro_int has them)."""
    rule = integers.via_float(rule, bools=False)
    return Lowering(tosa, form, DATA, check, rule, attrs or {})


POOL = {"data_layout": "NHWC", "dilation": [1, 1], "ceil_mode": False}

TOSA: dict[str, Lowering] = {
    # elementwise
    "add": binary("tosa.add", ARITH),
    "subtract": binary("tosa.sub", ARITH),
    "multiply": binary("tosa.mul", ARITH, form="mul"),
    "maximum": binary("tosa.maximum"),
    "minimum": binary("tosa.minimum"),
    "tosa.pow": binary("tosa.pow"),  # legato's power is rewritten into it (RULES)
    "equal": binary("tosa.equal"),
    "greater": binary("tosa.greater"),
    "logical_and": binary("tosa.logical_and", LOGIC),
    "logical_or": binary("tosa.logical_or", LOGIC),
    "logical_not": unary("tosa.logical_not", LOGIC),
    "where": Lowering("tosa.select", dtypes=("bool",) + FLOAT, check=rules.select_form,
                      rule=integers.via_float(rules.broadcast_ranks)),
    "negative": unary("tosa.negate", form="negate", rule=integers.via_float()),
    "abs": unary("tosa.abs", rule=integers.via_float()),
    "exp": unary("tosa.exp"),
    "log": unary("tosa.log"),
    "rsqrt": unary("tosa.rsqrt"),
    "tanh": unary("tosa.tanh"),
    "sigmoid": unary("tosa.sigmoid"),
    "erf": unary("tosa.erf"),
    "sin": unary("tosa.sin"),
    "cos": unary("tosa.cos"),
    "floor": unary("tosa.floor"),
    "ceil": unary("tosa.ceil"),
    "tosa.reciprocal": unary("tosa.reciprocal"),
    # integers: clipped as floats, then truncated (the bounds may have fractions)
    "clip": Lowering("tosa.clamp", "clip", check=rules.clamp_bounds,
                     rule=integers.via_float(truncate=True)),
    "nn.relu": unary("tosa.clamp", form="relu"),  # CLAMP [0, inf]
    # int64 <-> int32: one type in the module, nothing printed (form "cast")
    "cast": Lowering("tosa.cast", "cast", None, rules.cast_supported, rules.cast),
    "tosa.cast": Lowering("tosa.cast", check=rules.tosa_cast_mode, rule=rules.tosa_cast),
    # reductions
    "sum": reduction("tosa.reduce_sum"),
    "max": reduction("tosa.reduce_max"),
    "min": reduction("tosa.reduce_min"),
    "prod": reduction("tosa.reduce_product"),
    "argmax": Lowering("tosa.argmax", "argmax", check=rules.argmax_form,
                       rule=integers.via_float(rules.argmax)),
    "matmul": Lowering("tosa.matmul", "matmul", check=rules.same_batch, rule=rules.matmul,
                       ranks=(3,)),
    # data movement
    "reshape": movement("tosa.reshape", "reshape"),
    "permute_dims": movement("tosa.transpose", "transpose", rules.transpose_form,
                             rules.permute_dims),
    "concat": movement("tosa.concat", "concat", rules.concat_form, rules.concat),
    "pad": movement("tosa.pad", "pad", rules.pad_form, rules.pad, {"mode": "constant"}),
    "broadcast_to": movement("tosa.tile", "tile", rules.full_rank_shape, rules.broadcast_to),
    "tile": movement("tosa.tile", "tile", rules.tile_form),
    "strided_slice": movement("tosa.slice", "slice", rules.unit_strides, rules.strided_slice),
    "tosa.gather": Lowering("tosa.gather", dtypes=FLOAT + ("int32",),  # int32: the indices
                            check=rules.gather_form),
    # windows: NHWC data, OHWI weights, windows that divide the input exactly
    "nn.conv2d": Lowering("tosa.conv2d", "conv2d", check=rules.conv2d_fits, rule=rules.conv2d,
                          attrs={"data_layout": "NHWC", "kernel_layout": "OHWI", "groups": 1}),
    "nn.max_pool2d": Lowering("tosa.max_pool2d", "max_pool2d", check=rules.pool2d_fits,
                              rule=rules.pool2d, attrs=POOL),
    "nn.avg_pool2d": Lowering("tosa.avg_pool2d", "avg_pool2d", check=rules.pool2d_fits,
                              rule=rules.pool2d, attrs={**POOL, "count_include_pad": False}),
}

# ops without a TOSA operator of their own, rewritten into the rows above
RULES: dict[str, Callable] = {
    "power": rules.power,            # small integer powers as products, else tosa.pow
    "less": rules.less,              # greater with the operands swapped
    "divide": rules.divide,          # x * tosa.reciprocal(y): TOSA has no float divide
    "sqrt": rules.sqrt,              # tosa.reciprocal(rsqrt(x))
    "round": rules.round_half_even,  # CAST to int32 and back (ties to even)
    "take": rules.take,              # tosa.gather on [outer, axis, inner]
    "split": rules.split,            # one slice per part
    "scatter_elements": scatter.scatter_elements,  # one-hot compare, reduce, select
    "topk": sorting.topk,            # ranks from a pairwise comparison
    "asin": trig.asin,               # Cephes' range reductions and polynomials
    "acos": trig.acos,
    "atan": trig.atan,               # (and atan2 through its decomposition)
}

# ops lowered for integer tensors only; their float forms are in NOT_LOWERED, with the reason
INTEGER_RULES: dict[str, Callable] = {
    "fmod": integers.integer_fmod,      # in float32, exact for quotients below 2**22
}

# ops tosa_custom cannot lower, and why (a config may keep them: they become tosa.custom)
NOT_LOWERED: dict[str, str] = {
    "fmod": "floats: TOSA 1.0 has no remainder operator, and a - trunc(a / b) * b in float32 "
            "is not exact (integers: INTEGER_RULES)",
    "remainder": "floats: its decomposition needs fmod, which TOSA 1.0 has no exact form of "
                 "(integers: through the integer fmod)",
    **{op: "TOSA 1.0 has bitwise operators in profile pro_int only (tosa_custom_int: "
           "INT_TOSA)"
       for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")},
    # pro_fp: compile() leaves the QDQ regions of these float (dequantize, op, quantize),
    # so only a qnn call built by hand reaches here; pro_int lowers them (quantized.py)
    **{op: "its integer form accumulates int8 products in int32, which TOSA 1.0 has in "
           "profile pro_int only (quantized.py lowers it there)"
       for op in ("qnn.conv2d", "qnn.linear", "qnn.matmul")},
    "qnn.add": "it rounds as onnxruntime does through float64 steps, and TOSA 1.0 has no "
               "float64 (pro_int: RESCALEs to a common int32 scale, quantized.py)",
    "qnn.softmax": "its exponential table is float64, which TOSA 1.0 has no form of, and "
                   "it divides by a float sum (pro_fp+pro_int: the table as a float32 "
                   "constant, quantized_softmax.py)",
}


# --- profile pro_int ---------------------------------------------------------------------------

int_tensors = checked(name="int_tensors", dtypes=INT_DTYPES)  # uint8 as RESCALE's i8 bits
QINT = ("int8", "uint8", "int16", "int32")
I32 = ("int32", "int64")  # int64: narrowed to int32
SMALL = ("int8", "int16")
# the integer operators pro_int adds (ops.py; quantized.py produces them)
INT_TOSA: dict[str, Lowering] = {
    "tosa.rescale": Lowering("tosa.rescale", "rescale", QINT, int_tensors),
    "tosa.qconv2d": Lowering("tosa.conv2d", "qconv2d", ("int8", "int32"), rules.tosa_tensors),
    "tosa.qdepthwise_conv2d": Lowering("tosa.depthwise_conv2d", "qconv2d", ("int8", "int32"),
                                       rules.tosa_tensors),
    "tosa.qmatmul": Lowering("tosa.matmul", "operands", ("int8",)),
    "tosa.table": Lowering("tosa.table", "operands", ("int8",)),
    **{op: Lowering(f"tosa.{op}", "operands", ("int8", "int16", "int32", "int64"),
                    rules.same_rank, rules.broadcast_ranks)
       for op in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    "tosa.intdiv": Lowering("tosa.intdiv", "operands", I32, rules.same_rank,
                            rules.broadcast_ranks),
    "bitwise_not": Lowering("tosa.bitwise_not", "operands", ("int8", "int16", "int32",
                                                              "int64")),
}
MOVED = ("int8", "uint8", "int16") + I32  # data movement moves any integer's bits
# integer forms pro_int has of the rows above (checked against tosa-opt --tosa-validate):
# these run natively instead of on float32 copies; their rules, if any, stay integer
NATIVE: dict[str, tuple] = {
    **{op: I32 for op in ("maximum", "minimum", "equal", "greater", "abs", "sum", "max",
                          "min")},
    "negative": SMALL + I32, "argmax": SMALL, "where": SMALL + I32,
    "nn.max_pool2d": ("int8",),  # uint8 through int8 (int_native.max_pool2d)
    "tosa.gather": ("uint8",) + SMALL + I32,  # moves bits: uint8 as its i8 bits
    **{op: MOVED for op in ("reshape", "permute_dims", "concat", "pad", "broadcast_to",
                            "tile", "strided_slice")},
}
# checks that refuse integers only because pro_fp has no integer form
PRO_FP_ONLY_CHECKS = {"where": rules.same_rank, "tosa.gather": rules.tosa_tensors}


def _native(op: str, row: Lowering) -> Lowering:
    """The row with pro_int's integer dtypes, limits that take uint8 where it moves, and
    the integer rule in place of the float32 detour."""
    ints = NATIVE[op]
    check = PRO_FP_ONLY_CHECKS.get(op, row.check)
    if "uint8" in ints:  # the row's own condition, under limits that take uint8
        check = checked(getattr(check, "__wrapped__", None), check.__name__, INT_DTYPES)
    rule = int_native.RULES.get(op, getattr(row.rule, "then", row.rule))
    return replace(row, dtypes=tuple(row.dtypes) + tuple(d for d in ints
                                                         if d not in row.dtypes),
                   check=check, rule=rule)


def rows(profile=DEFAULT) -> dict[str, Lowering]:
    """The TOSA rows of a profile (a set of 'pro_fp', 'pro_int')."""
    if "pro_int" not in profile:
        return TOSA
    native = {op: _native(op, row) if op in NATIVE else row for op, row in TOSA.items()}
    native["cast"] = replace(TOSA["cast"], check=int_casts.int_cast_supported,
                             rule=int_casts.int_cast)
    native["clip"] = replace(TOSA["clip"], rule=int_native.clip)  # CLAMP: floats here
    table = {**native, **INT_TOSA}
    if "pro_fp" not in profile:  # integers only
        table = {op: _integers_only(row) for op, row in table.items()
                 if row.dtypes is None or set(row.dtypes) - set(FLOAT)}
    return table


def _integers_only(row: Lowering) -> Lowering:
    """A row of profile pro_int alone: no float operand or result."""
    check = row.check

    def no_floats(call):
        tensors = [v for v in call.inputs if v is not None] + list(call.outputs)
        floats = sorted({v.dtype for v in tensors if v.dtype in FLOAT})
        if floats:
            return f"{', '.join(floats)} tensors (profile pro_int alone has no floats)"
        return check(call)
    no_floats.__name__ = no_floats.__qualname__ = f"{check.__name__}_integers_only"
    dtypes = None if row.dtypes is None else tuple(d for d in row.dtypes if d not in FLOAT)
    return replace(row, dtypes=dtypes, check=no_floats)


def capability_tables(profile=DEFAULT, output_stage: str = "rescale") -> dict:
    """The `legal` and `rules` keys of the tosa_custom capability for `profile` (and the
    quantized products' output stage, quantized.rules_for)."""
    table = rows(profile)
    rule_table = {op: row.rule for op, row in table.items() if row.rule is not None}
    rule_table.update(RULES)
    rule_table.update(INTEGER_RULES)
    if "pro_int" in profile:
        rule_table.update(quantized.rules_for(output_stage))
        if output_stage == "float":  # onnxruntime's QLinearAdd exactly: a table
            rule_table["qnn.add"] = qadd_table.qadd
        rule_table.update(quantized_softmax.RULES)
        rule_table.update(quantize_cast.RULES)
        rule_table.update(int_native.RULES)
        rule_table["matmul"] = int_matmul.matmul  # int32: int8 MATMULs of its bytes
        rule_table["nn.conv2d"] = int_conv.conv2d  # int32: int8 convolutions of its bytes
    return {"legal": {op: row.condition() for op, row in table.items()}, "rules": rule_table}


def disposition(op: str) -> str | None:
    """How tosa_custom handles a primitive op: 'tosa', 'rule', 'not lowered' or None."""
    return "tosa" if op in TOSA else "rule" if op in RULES else \
        "not lowered" if op in NOT_LOWERED else None


def table() -> str:
    """Markdown: each legato op tosa_custom takes and what it becomes."""
    lines = ["| legato | TOSA 1.0 | form | dtypes |", "| --- | --- | --- | --- |"]
    lines += [f"| `{op}` | `{row.tosa}` | {row.form} | {', '.join(row.dtypes or ['any'])} |"
              for op, row in sorted(TOSA.items())]
    lines += [f"| `{op}` | rule `{fn.__name__}` | | |" for op, fn in sorted(RULES.items())]
    lines += [f"| `{op}` | none: {why} | | |" for op, why in sorted(NOT_LOWERED.items())]
    lines += [f"| `{op}` (integers) | rule `{fn.__name__}` | | |"
              for op, fn in sorted(INTEGER_RULES.items())]
    lines += [f"| `{op}` (pro_int) | `{row.tosa}` | {row.form} | {', '.join(row.dtypes)} |"
              for op, row in sorted(INT_TOSA.items())]
    lines += [f"| `{op}` (pro_int) | rule `{fn.__name__}` | | |"
              for op, fn in sorted({**quantized.RULES, **quantized_softmax.RULES,
                                    **quantize_cast.RULES, **int_native.RULES}.items())]
    return "\n".join(lines)
