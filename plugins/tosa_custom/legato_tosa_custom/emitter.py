"""Print a legalized module as TOSA 1.0 MLIR in the generic op form.

The generic form (`"tosa.add"(%a, %b) : (...) -> ...`) is the one tosa-opt, torch-mlir and
IREE all parse. Each legal call maps to one TOSA operator plus the operands TOSA spells
out (shapes as tosa.const_shape, zero points, mul's shift, a zero bias); the printer never
adapts ranks or layouts: legalization (rules.py) already did. A call the backend does not
take as it stands, or a tensor TOSA 1.0 has no type for, is refused (LegalizationError)
before anything is printed for it: the printer never writes a module tosa-opt rejects.

int64 tensors are printed as i32 (narrowing.py): parameters and results in the signature,
constants after a check that their values fit, casts between int64 and int32 as nothing.

Large constants of a large model go out of line as `dense_resource` blobs (resources.py):
the emitter then returns a TosaArtifact (the text and the arrays) instead of a str.
"""
from __future__ import annotations

import json

import numpy as np

import legato
from legato.plugin_api import (CUSTOM_OP, Const, Function, LegalizationError, LegatoError, Module,
                               TensorType, Value, clip, norm_axes, norm_axis, slice_params)

from . import mlir
from .limits import INT_DTYPES, custom_problem, type_problem, value_problem
from .lowering import rows
from .narrowing import narrow_array, signature_attrs, tosa_dtype, tosa_type
from .profiles import DEFAULT, module_attrs
from .resources import Placement, Resources, as_weights, finish, placement_of
from .rules import call_window

BACKEND = "tosa_custom"
BINDINGS_ATTR = "legato.shape_bindings"  # a shape bucket function's sizes of the symbols


class _Body:
    """The operations of one function: names values, materializes constants once (the
    large ones as handles of `resources`, when given)."""

    def __init__(self, resources: "Placement | None" = None):
        self.resources = resources
        self.lines: list[str] = []
        self.names: dict[Value, str] = {}
        self.types: dict[str, str] = {}
        self._consts: dict = {}
        self._count = 0

    def bind(self, value: Value, name: str) -> None:
        self.names[value] = name
        self.types[name] = _type_text(value.type)

    def value(self, value: Value) -> str:
        name = self.names.get(value)
        if name is None:
            if not isinstance(value, Const):
                raise LegatoError(f"tosa_custom emitter: {value!r} is used before it is defined")
            name = self.const(narrow_array(value.data, _const_text(value)), value.name)
            self.names[value] = name
        return name

    def op(self, op: str, operands, result_types, props: str = "") -> list[str]:
        """Append one generic-form operation; returns its result names. TOSA operators
        have no side effects: one that repeats an earlier one (the casts of integers the
        rules compute in float32, say) is that one (tosa.custom may have effects)."""
        if op == "tosa.custom":
            return self._append(op, operands, result_types, props)
        key = ("op", op, tuple(operands), tuple(result_types), props)
        return self._cached(key, lambda: self._append(op, operands, result_types, props))

    def _append(self, op: str, operands, result_types, props: str) -> list[str]:
        name = f"%{self._count}"
        self._count += 1
        n = len(result_types)
        results = [name] if n == 1 else [f"{name}#{i}" for i in range(n)]
        for result, type_ in zip(results, result_types):
            self.types[result] = type_
        outs = result_types[0] if n == 1 else f"({', '.join(result_types)})"
        head = name if n == 1 else f"{name}:{n}"
        props = f" <{{{props}}}>" if props else ""
        self.lines.append(f'{head} = "{op}"({", ".join(operands)}){props} : '
                          f'({", ".join(self.types[o] for o in operands)}) -> {outs}')
        return results

    def call_op(self, op: str, call, operands, props: str = "") -> list[str]:
        return self.op(op, operands, [_type_text(o.type) for o in call.outputs], props)

    def const(self, array: np.ndarray, hint: str | None = None) -> str:
        """A tosa.const of `array` (out of line when large: named after `hint`)."""
        array = narrow_array(array, "a constant")
        type_text = mlir.tensor_type(_type_of(array))
        if self.resources is not None and self.resources.weights.large(array):
            key = ("resource", *Resources.key(array))  # no copy of the bytes as a key
            return self._cached(key, lambda: self._const_op(
                f"dense_resource<{self.resources.table.handle(array, hint)}> : {type_text}",
                type_text))
        key = ("const", array.dtype.name, array.shape, array.tobytes())
        return self._cached(key, lambda: self._const_op(mlir.dense(array), type_text))

    def _const_op(self, values: str, type_text: str) -> str:
        return self._append("tosa.const", [], [type_text], f"values = {values}")[0]

    def shape(self, values) -> str:
        values = tuple(int(v) for v in values)
        return self._cached(("shape", values), lambda: self._append(
            "tosa.const_shape", [], [mlir.shape_type(len(values))],
            f"values = {mlir.index_dense(values)}")[0])

    def zero(self, dtype: str, value: float = 0) -> str:
        """A one-element tensor: zero points, pad values, a missing bias."""
        with np.errstate(over="ignore"):  # a pad value beyond float16's range is +-inf
            return self.const(np.full((1,), value, dtype=dtype))

    def _cached(self, key, make):
        if key not in self._consts:
            self._consts[key] = make()
        return self._consts[key]


def _type_of(array) -> TensorType:
    return TensorType(array.shape, array.dtype.name)


def _type_text(t: TensorType) -> str:
    """The MLIR type of a tensor of type `t` in the module: int64 is i32."""
    return mlir.tensor_type(tosa_type(t))


def _const_text(value: Const) -> str:
    return f"int64 constant {clip(value.name or str(value.type), 60)}"


# --- one printer per operand form (lowering.Lowering.form) --------------------------------
# A printer `print(body, call, tosa_op)` appends the TOSA operator with the call's tensors and
# whatever else that operator spells out; lowering.TOSA says which op uses which form.

def _inputs(body, call):
    return [body.value(v) for v in call.inputs if v is not None]


def _window_props(call, pool: bool) -> str:
    """TOSA pads are (top, bottom, left, right); legato's (top, left, bottom, right)."""
    win = call_window(call)
    (top, left), (bottom, right) = win.pads_begin, win.pads_end
    props = [f"kernel = {mlir.i64_array(win.kernel)}"] if pool else \
        [f"dilation = {mlir.i64_array(win.dilation)}"]
    props += [f"pad = {mlir.i64_array([top, bottom, left, right])}",
              f"stride = {mlir.i64_array(win.strides)}"]
    return ", ".join(props)


ACC = "acc_type = f32"  # f32 accumulators for f32 and f16 alike


def _operands(body, call, tosa_op):
    return body.call_op(tosa_op, call, _inputs(body, call))


def _mul(body, call, tosa_op):
    shift = body.const(np.zeros((1,), np.int8))  # TOSA MUL's shift: 0 for floats
    return body.call_op(tosa_op, call, _inputs(body, call) + [shift])


def _with_zero_points(body, call, tosa_op):
    """NEGATE, MATMUL: the operands, then an input and an output (or second input) zero
    point."""
    zp = body.zero(call.inputs[0].dtype)
    return body.call_op(tosa_op, call, _inputs(body, call) + [zp, zp])


def _clamp(body, call, tosa_op, low, high):
    dtype = call.inputs[0].dtype
    with np.errstate(over="ignore"):  # bounds beyond float16's range are +-inf there
        low = np.array(-np.inf if low is None else low, dtype)
        high = np.array(np.inf if high is None else high, dtype)
    # CLAMP needs min_val <= max_val. legato's clip bounds below first, then above, so
    # bounds out of order give max everywhere (NaN stays NaN): CLAMP to [max, max].
    low = min(low, high)
    return body.call_op(tosa_op, call, _inputs(body, call),
                        f"max_val = {mlir.float_attr(high, dtype)}, "
                        f"min_val = {mlir.float_attr(low, dtype)}")


def _clip(body, call, tosa_op):
    return _clamp(body, call, tosa_op, call.attrs["min"], call.attrs["max"])


def _relu(body, call, tosa_op):
    return _clamp(body, call, tosa_op, 0.0, None)


def _reduce(body, call, tosa_op):
    (axis,) = norm_axes(call.attrs["axes"], call.inputs[0].rank)
    return body.call_op(tosa_op, call, _inputs(body, call), f"axis = {axis} : i32")


def _reshape(body, call, tosa_op):
    return body.call_op(tosa_op, call, _inputs(body, call) +
                        [body.shape(call.outputs[0].shape)])


def _transpose(body, call, tosa_op):
    x, axes = call.inputs[0], call.attrs["axes"]
    perms = list(reversed(range(x.rank))) if axes is None else [norm_axis(a, x.rank)
                                                                 for a in axes]
    return body.call_op(tosa_op, call, _inputs(body, call), f"perms = {mlir.i32_array(perms)}")


def _tile(body, call, tosa_op):
    x, out = call.inputs[0], call.outputs[0]
    multiples = [o // i for o, i in zip(out.shape, x.shape)]
    return body.call_op(tosa_op, call, _inputs(body, call) + [body.shape(multiples)])


def _axis(body, call, tosa_op):
    """CONCAT, ARGMAX: the operands and the call's `axis`."""
    axis = norm_axis(call.attrs["axis"], call.inputs[0].rank)
    return body.call_op(tosa_op, call, _inputs(body, call), f"axis = {axis} : i32")


def _slice(body, call, tosa_op):
    params = slice_params(call.inputs[0].shape, call.attrs)
    return body.call_op(tosa_op, call, _inputs(body, call) + [
        body.shape([p.start for p in params]), body.shape([p.length for p in params])])


def _pad(body, call, tosa_op):
    x, pads = call.inputs[0], call.attrs["pads"]
    per_dim = [p for d in range(x.rank) for p in (pads[d], pads[d + x.rank])]
    value = body.zero(x.dtype, call.attrs["value"])
    return body.call_op(tosa_op, call, _inputs(body, call) + [body.shape(per_dim), value])


def _conv2d(body, call, tosa_op):
    x, w, bias = call.inputs
    dtype = x.dtype
    bias_name = body.value(bias) if bias is not None else body.zero(dtype)
    zp = body.zero(dtype)
    props = f"{ACC}, {_window_props(call, pool=False)}"
    return body.call_op(tosa_op, call, [body.value(x), body.value(w), bias_name, zp, zp], props)


def _cast(body, call, tosa_op):
    """Between int64 and int32 (one type in the module) nothing; else TOSA CAST."""
    x = call.inputs[0]
    if tosa_dtype(x.dtype) == tosa_dtype(call.outputs[0].dtype):
        return [body.value(x)]
    return body.call_op(tosa_op, call, _inputs(body, call))


def _max_pool(body, call, tosa_op):
    return body.call_op(tosa_op, call, _inputs(body, call), _window_props(call, pool=True))


def _avg_pool(body, call, tosa_op):
    zp = body.zero(call.inputs[0].dtype)
    props = f"{ACC}, {_window_props(call, pool=True)}"
    return body.call_op(tosa_op, call, _inputs(body, call) + [zp, zp], props)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _rescale(body, call, tosa_op):
    """RESCALE: scale32, single rounding (apply_scale_32 adds 2**(shift-1)), per channel
    when the multiplier has more than one; uint8 operands are the unsigned flags."""
    props = (f"input_unsigned = {_flag(call.inputs[0].dtype == 'uint8')}, "
             f"output_unsigned = {_flag(call.outputs[0].dtype == 'uint8')}, "
             f"per_channel = {_flag(call.inputs[1].shape != (1,))}, "
             "rounding_mode = #tosa<rounding_mode<SINGLE_ROUND>>, scale32 = true")
    return body.call_op(tosa_op, call, _inputs(body, call), props)


def _pads(padding) -> list:
    """TOSA pads are (top, bottom, left, right); legato's (top, left, bottom, right)."""
    top, left, bottom, right = padding
    return [top, bottom, left, right]


def _qconv2d(body, call, tosa_op):
    """CONV2D / DEPTHWISE_CONV2D on int8: int32 accumulators, the window the rule made."""
    a = call.attrs
    props = (f"acc_type = i32, dilation = {mlir.i64_array(a['dilation'])}, "
             f"pad = {mlir.i64_array(_pads(a['padding']))}, "
             f"stride = {mlir.i64_array(a['strides'])}")
    return body.call_op(tosa_op, call, _inputs(body, call), props)


FORMS = {"operands": _operands, "mul": _mul, "negate": _with_zero_points,
         "matmul": _with_zero_points, "clip": _clip, "relu": _relu, "reduce": _reduce,
         "reshape": _reshape, "transpose": _transpose, "tile": _tile, "concat": _axis,
         "slice": _slice, "pad": _pad, "conv2d": _conv2d, "max_pool2d": _max_pool,
         "avg_pool2d": _avg_pool, "cast": _cast, "argmax": _axis, "rescale": _rescale,
         "qconv2d": _qconv2d}


def _custom(body, call):
    """tosa.custom: the tunnelled op's name and its non-tensor arguments as JSON."""
    attrs = call.attrs
    try:
        payload = json.dumps(json.loads(attrs["implementation_attrs"]), sort_keys=True)
    except ValueError as err:
        raise LegatoError(f"tosa_custom emitter: custom op {attrs['operator_name']!r} has "
                          f"implementation_attrs that are not JSON: {err}") from None
    props = (f"domain_name = {mlir.string(attrs['domain_name'])}, "
             f"implementation_attrs = {mlir.string(payload)}, "
             f"operator_name = {mlir.string(attrs['operator_name'])}")
    return body.call_op("tosa.custom", call, _inputs(body, call), props)


def _print(body, call, table) -> list[str]:
    """The call as its row of lowering.TOSA says (or as tosa.custom); its result names."""
    if call.op == CUSTOM_OP:
        return _custom(body, call)
    row = table[call.op]
    try:
        form = FORMS[row.form]
    except KeyError:
        raise LegatoError(f"tosa_custom lowering.TOSA[{call.op!r}]: unknown form "
                          f"{row.form!r} (emitter.FORMS has {', '.join(sorted(FORMS))})") \
            from None
    return form(body, call, row.tosa)


# --- what may be printed ------------------------------------------------------------------

def _refuse(where: str, why: str):
    raise LegalizationError(f"tosa_custom emitter: {where}: {why}; it has no valid TOSA 1.0 "
                            "form (legalize the module for tosa_custom first)")


def _check_call(call, backend, table) -> None:
    """A custom call carries any TOSA tensors; any other call must be legal as it stands."""
    if call.op == CUSTOM_OP:
        problem = custom_problem(call)
        if problem is not None:
            _refuse(f"custom op {call.attrs['operator_name']}", problem)
        return
    if call.op not in table:
        _refuse(call.op, "no TOSA operator prints it")
    why = backend.why_not(call)
    if why is not None:
        _refuse(call.op, why)
    for value in call.inputs:  # checked here to name the op (decisions ignore the data)
        if isinstance(value, Const):
            narrow_array(value.data, f"{_const_text(value)} (an operand of {call.op})")


def _signature_dtypes(profile) -> tuple:
    return INT_DTYPES if "pro_fp" in profile else \
        tuple(d for d in INT_DTYPES if not d.startswith("float"))


def _check_signature(name: str, fn: Function, profile) -> None:
    """pro_int modules take and give uint8 (as i8, marked), the others pro_fp's types."""
    for kind, values in (("parameter", fn.params), ("result", fn.results)):
        for index, value in enumerate(values):
            problem = type_problem(value.type, _signature_dtypes(profile)) \
                if "pro_int" in profile else value_problem(value)
            if problem is not None:
                _refuse(f"function {name} {kind} {index}", problem)


def _backend(name: str = BACKEND):
    return legato.context().backend(name)  # at emission: plugins have registered


# --- functions and the module -------------------------------------------------------------

def emit_function(name: str, fn: Function, backend=None, profile=DEFAULT,
                  attrs: str = "", resources: "Placement | None" = None) -> list[str]:
    """The function's lines; `attrs`, an MLIR attribute dictionary's entries, is added to
    the func.func's discardable attributes (a shape bucket's bindings). With `resources`
    its large constants are out of line there."""
    backend = backend or _backend()
    table = rows(profile)
    for call in fn.calls:
        _check_call(call, backend, table)
    _check_signature(name, fn, profile)
    body = _Body(resources)
    args = []
    for index, param in enumerate(fn.params):
        body.bind(param, f"%arg{index}")
        args.append(f"%arg{index}: {body.types[f'%arg{index}']}")
    for call in fn.calls:
        for value, result in zip(call.outputs, _print(body, call, table)):
            body.names[value] = result
    results = [body.value(r) for r in fn.results]
    result_types = [_type_text(r.type) for r in fn.results]
    body.lines.append(f'"func.return"({", ".join(results)}) : ({", ".join(result_types)}) -> ()')
    signature = f"({', '.join(_type_text(p.type) for p in fn.params)}) -> " + (
        result_types[0] if len(result_types) == 1 else f"({', '.join(result_types)})")
    props = [f"function_type = {signature}", f"sym_name = {mlir.string(name)}"]
    for key, values in (("arg_attrs", fn.params), ("res_attrs", fn.results)):
        marks = signature_attrs(values)  # which i32 values stand for int64 ones
        if marks is not None:
            props.append(f"{key} = {marks}")
    head = f'"func.func"() <{{{", ".join(sorted(props))}}}> ({{'
    tail = f"}}) {{{attrs}}} : () -> ()" if attrs else "}) : () -> ()"
    return [head, f"^bb0({', '.join(args)}):", *("  " + line for line in body.lines), tail]


def emit_module(module: Module, backend, profile=DEFAULT, weights=None):
    """The module as TOSA 1.0 MLIR text (generic op form) for `profile`; main first. With
    `weights` (resources.Weights or a mode; default $LEGATO_TOSA_WEIGHTS, else auto) its
    large constants may go out of line: a TosaArtifact instead of a str."""
    names = ["main"] + [n for n in module.functions if n != "main"]
    placement = placement_of(module.functions.values(), weights)
    lines = ['"builtin.module"() ({']
    for name in names:
        fn = module.functions[name]
        if fn.kind == "external":
            raise LegatoError(f"tosa_custom emitter: function {name} is external "
                              f"(codegen {fn.attrs.get('codegen')!r}); it has no TOSA form")
        lines += ["  " + line for line in emit_function(name, fn, backend, profile,
                                                          resources=placement)]
    lines.append(f"}}){module_attrs(profile)} : () -> ()")
    return finish(lines, placement)


def emit_buckets(buckets, backend, profile=DEFAULT, weights=None):
    """One module with a function per shape bucket (legato.runtime.buckets.Bucket: `main_seq64`
    for seq=64), each carrying its symbols' sizes as `legato.shape_bindings = {seq = 64 :
    i64}`; tosa-opt validates them all, the reference model runs one at a time. A
    constant the buckets share is one blob when out of line."""
    placement = placement_of([b.module.main for b in buckets], weights)
    lines = ['"builtin.module"() ({']
    for bucket in buckets:
        extra = sorted(set(bucket.module.functions) - {"main"})
        if extra:
            raise LegatoError(f"tosa_custom emitter: shape bucket {bucket.name} has functions "
                              f"besides main ({', '.join(extra)}); a bucket is one function")
        bindings = ", ".join(f"{mlir.string(k) if not k.isidentifier() else k} = {v} : i64"
                             for k, v in sorted(bucket.bindings.items()))
        lines += ["  " + line for line in emit_function(
            bucket.name, bucket.module.main, backend, profile,
            f"{BINDINGS_ATTR} = {{{bindings}}}", resources=placement)]
    lines.append(f"}}){module_attrs(profile)} : () -> ()")
    return finish(lines, placement)


def make_emitter(profile=DEFAULT, backend_name: str = BACKEND, weights=None):
    """The emitter of the backend `backend_name`, which targets `profile` (it looks the
    backend up when it runs; `emitter.backend`, when set, is used instead) and places
    constants as `weights` says (resources.Weights or a mode; None: $LEGATO_TOSA_WEIGHTS
    when it emits, else auto)."""
    weights = None if weights is None else as_weights(weights)

    def emit(module: Module):
        return emit_module(module, emit.backend or _backend(backend_name), profile, weights)

    def buckets(entries):  # legato.runtime.buckets: a function per binding of the symbols
        return emit_buckets(entries, emit.backend or _backend(backend_name), profile,
                            weights)
    emit.backend, emit.buckets = None, buckets
    # the ops it prints: registration checks every legal op of the backend is among them
    emit.ops = frozenset(rows(profile)) | {CUSTOM_OP}
    emit.__name__ = emit.__qualname__ = "emit_mlir"
    return emit


emit_mlir = make_emitter()
