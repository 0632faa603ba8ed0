"""Fold QDQ regions into quantized ops: `dequantize -> op -> quantize` becomes one `qnn`
call on the integer data, as onnxruntime fuses a QDQ model into its int8 kernels.

    module, modified = legato.fold_qdq(module)
    print(legato.fold_qdq.explain(module).text())      # what was folded, why not the rest

The rules come from the op definitions: each `qnn.X` op (other than quantize, dequantize
and requantize) quantizes the float op its name gives (`nn.X` or `X`; qnn.global_avg_pool2d
is a spatial `mean`), and its signature says which inputs are quantized operands (those
followed by `NAME_scale` and `NAME_zero_point`), which are the output's parameters
(`out_scale`, `out_zero_point`) and which pass through (an int32 bias, dequantized at scale
`data_scale * weight_scale` with zero point 0). The float op's attributes are the qnn op's
attributes of the same name. A relu or clip between the op and the quantize folds into the
output range: quantizing is monotonic and quantize(0) is the zero point, so
`quantize(relu(y)) = maximum(quantize(y), zero_point)` exactly. Whatever does not fold stays
float between its dequantize and quantize calls, and the report says why.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..ir import Call, Const, Function, Module
from ..ir.calls import make_call
from ..ir.errors import LegatoError
from ..ops.qnn import QUANT_RANGES
from ..plugins.context import context
from .manager import FunctionPass
from .recompose import recompose

NOT_FOLDED = ("qnn.quantize", "qnn.dequantize", "qnn.requantize")
# data movement (pattern kind "injective") commutes with quantization, as max pooling does
# (quantize is monotonic); these do not: pad and trilu write a float value, split has
# several results
MOVES_VALUES = ("nn.max_pool2d",)
NOT_MOVEMENT = {"trilu": "it writes float zeros", "split": "it has several results"}
SPATIAL_MEAN = {"qnn.global_avg_pool2d": "mean"}   # no nn.global_avg_pool2d: a mean over H, W
ACTIVATIONS = ("nn.relu", "clip")


@dataclass
class Rule:
    """How the float op `float_op` becomes `qnn_op`: its inputs are the quantized operands
    (`operands`, by qnn input index of the data) then the pass-through inputs (`extras`)."""
    qnn_op: str
    float_op: str
    operands: tuple[int, ...]
    extras: tuple[int, ...]
    out: int


def derive_rules(registry) -> dict[str, Rule]:
    """float op -> Rule, from every registered qnn op's name and signature."""
    rules = {}
    for name in registry.names():
        if not name.startswith("qnn.") or name in NOT_FOLDED:
            continue
        base = name[len("qnn."):]
        float_op = SPATIAL_MEAN.get(name) or next(
            (f for f in (f"nn.{base}", base) if registry.find(f) is not None), None)
        if float_op is None:
            continue
        names = [spec.name for spec in registry.get(name).inputs]
        operands = tuple(i for i, n in enumerate(names) if i + 2 < len(names) and
                         names[i + 1] == f"{n}_scale" and names[i + 2] == f"{n}_zero_point")
        params = {i + k for i in operands for k in (1, 2)} | set(operands)
        out = names.index("out_scale")
        extras = tuple(i for i in range(len(names)) if i not in params and i not in (out, out + 1))
        rules[float_op] = Rule(name, float_op, operands, extras, out)
    return rules


@dataclass
class FoldReport:
    """Calls folded per qnn op, and the float ops left between dequantize and quantize
    calls per reason."""
    folded: Counter = field(default_factory=Counter)
    not_folded: Counter = field(default_factory=Counter)   # (op, reason) -> calls

    def text(self) -> str:
        lines = [f"folded {op} x{n}" for op, n in sorted(self.folded.items())]
        lines += [f"kept float {op} x{n}: {why}" for (op, why), n in
                  sorted(self.not_folded.items())]
        return "\n".join(lines) or "no quantize call follows a foldable op"


class Refusal(Exception):
    """Why one region does not fold."""


def _const(value) -> np.ndarray:
    if not isinstance(value, Const):
        raise Refusal("a scale or zero point is computed, not a constant")
    return np.asarray(value.data)


class QDQFoldPass(FunctionPass):
    name = "fold-qdq"

    def __init__(self, registry=None, runnable=None):
        """`runnable(call) -> None | str`: None when the target can run the qnn call, else
        why not (a region then stays float, which every backend runs); None: fold all."""
        self.registry = registry if registry is not None else context().registry
        self.rules = derive_rules(self.registry)
        self.runnable = runnable
        self.report = FoldReport()

    def run(self, module: Module):
        """nn.linear is recovered first where an exporter spelled it as matmul and add (ONNX
        Gemm), so a dequantized weight and bias fold into qnn.linear."""
        quantizes = any(c.op == "qnn.quantize" for fn in module.functions.values()
                        for c in fn.calls)
        if not quantizes:
            return module, False
        recovered, _ = recompose(module, ops=["nn.linear"], registry=self.registry)
        folded, modified = super().run(recovered)
        return (folded, True) if modified else (module, False)   # nothing folded: as given

    def run_function(self, name, fn: Function, module: Module):
        producer = {id(out): call for call in fn.calls for out in call.outputs}
        users = Counter(id(v) for call in fn.calls for v in call.inputs if v is not None)
        users.update(id(r) for r in fn.results)
        replaced: dict[int, list[Call]] = {}
        for call in fn.calls:
            if call.op != "qnn.quantize":
                continue
            made = self._fold(call, producer, users)
            if made is not None:
                replaced[id(call)] = made
        if not replaced:
            return fn, False
        calls = [c for call in fn.calls for c in replaced.get(id(call), [call])]
        return fn.with_calls(_live(calls, fn.results)), True

    # --- one region ------------------------------------------------------------------------

    def _fold(self, quantize: Call, producer, users) -> list[Call] | None:
        value, activations = quantize.inputs[0], []
        op = producer.get(id(value))
        while op is not None and op.op in ACTIVATIONS and users[id(value)] == 1:
            activations.append(op)
            value = op.inputs[0]
            op = producer.get(id(value))
        if op is not None and op.op not in self.rules and not activations and \
                self._movement(op):
            return self._fold_movement(op, quantize, producer, users[id(value)])
        if op is None or op.op == "qnn.dequantize":
            return None
        if op.op not in self.rules:
            self.report.not_folded[op.op, "no qnn op computes it on integers"] += 1
            return None
        rule = self.rules[op.op]
        try:
            if users[id(value)] != 1:
                raise Refusal("its float result has other users")
            calls = self._qnn_calls(rule, op, quantize, activations, producer)
        except Refusal as why:
            self.report.not_folded[op.op, str(why)] += 1
            return None
        except LegatoError as err:   # the qnn op's type rule refuses these operands
            self.report.not_folded[op.op, f"{rule.qnn_op} refuses: {err}"] += 1
            return None
        unable = self.runnable and self.runnable(calls[0])
        if unable:
            self.report.not_folded[op.op, unable] += 1
            return None
        self.report.folded[rule.qnn_op] += 1
        return calls

    def _movement(self, op: Call) -> bool:
        opdef = self.registry.find(op.op)
        return op.op in MOVES_VALUES or opdef is not None and opdef.kind == "injective"

    def _fold_movement(self, op: Call, quantize: Call, producer, uses: int):
        """`quantize(move(dequantize(x)))` as `move(x)`: each dequantized operand brought
        to the output's scale and zero point first (as onnxruntime's QLinearConcat does:
        a dequantize and a quantize) unless it has them already."""
        try:
            if op.op in NOT_MOVEMENT:
                raise Refusal(NOT_MOVEMENT[op.op])
            if uses != 1:
                raise Refusal("its float result has other users")
            y_scale, y_zero = (_const(v) for v in quantize.inputs[1:])
            if y_scale.size != 1:
                raise Refusal("the quantize is per channel")
            calls, inputs = [], []
            for value in op.inputs:
                if value is None or value.dtype not in ("float32", "float16", "bfloat16"):
                    inputs.append(value)
                    continue
                dq = producer.get(id(value))
                if dq is None or dq.op != "qnn.dequantize":
                    raise Refusal("an operand is not dequantized")
                scale, zero = (_const(v) for v in dq.inputs[1:])
                if scale.size != 1:
                    raise Refusal("an operand is dequantized per channel")
                x = dq.inputs[0]
                if x.dtype != quantize.output.dtype or \
                        (scale.reshape(-1)[0], zero.reshape(-1)[0]) != \
                        (y_scale.reshape(-1)[0], y_zero.reshape(-1)[0]):
                    calls.append(make_call(self.registry, "qnn.dequantize", dq.inputs, {}))
                    calls.append(make_call(self.registry, "qnn.quantize",
                                           [calls[-1].output, *quantize.inputs[1:]],
                                           {"dtype": quantize.output.dtype}))
                    x = calls[-1].output
                inputs.append(x)
            attrs = dict(op.attrs)
            if op.op == "pad":   # the padding value, quantized as the padded cells are
                attrs["value"] = float(_quantized(attrs["value"], y_scale, y_zero,
                                                  quantize.output.dtype))
            moved = make_call(self.registry, op.op, inputs, attrs, op.origin)
        except Refusal as why:
            self.report.not_folded[op.op, str(why)] += 1
            return None
        except LegatoError as err:
            self.report.not_folded[op.op, f"on integers: {err}"] += 1
            return None
        self.report.folded[f"{op.op} (int8)"] += 1
        return calls + [Call(moved.op, moved.inputs, moved.attrs, quantize.outputs,
                             moved.origin)]

    def _qnn_calls(self, rule: Rule, op: Call, quantize: Call, activations, producer):
        opdef = self.registry.get(rule.qnn_op)
        inputs = [None] * len(opdef.inputs)
        float_inputs = list(op.inputs)
        quantized = float_inputs[:len(rule.operands)]
        scales = []
        for index, value in zip(rule.operands, quantized):
            dq = producer.get(id(value))
            if dq is None or dq.op != "qnn.dequantize":
                raise Refusal(f"input {opdef.inputs[index].name} is not dequantized")
            inputs[index:index + 3] = dq.inputs
            _const(dq.inputs[1])
            _const(dq.inputs[2])
            self._check_axis(rule, opdef, index, dq, op)
            scales.append(np.asarray(dq.inputs[1].data, np.float32))
        for index, value in zip(rule.extras, float_inputs[len(rule.operands):]):
            inputs[index] = None if value is None else self._bias(value, scales, producer)
        y_scale, y_zero = quantize.inputs[1], quantize.inputs[2]
        _const(y_scale)
        _const(y_zero)
        if rule.qnn_op == "qnn.softmax":
            _whole_reciprocal(y_scale)
        inputs[rule.out:rule.out + 2] = [y_scale, y_zero]
        attrs = {k: v for k, v in op.attrs.items() if k in opdef.attr_specs}
        if rule.qnn_op in SPATIAL_MEAN:
            attrs = self._spatial_mean(op)
        call = make_call(self.registry, rule.qnn_op, inputs, attrs, quantize.origin)
        return self._output_range(call, activations, quantize)

    def _check_axis(self, rule, opdef, index, dq, op):
        """A per-channel dequantize must be along the axis the qnn op reads it."""
        scale = dq.inputs[1]
        if scale.rank == 0 or scale.shape == (1,):
            return
        data = dq.inputs[0]
        axis = dq.attrs["axis"] % data.rank
        if rule.qnn_op == "qnn.matmul":
            want = data.rank - 1 if index > 0 else None
        elif rule.qnn_op == "qnn.conv2d":
            want = op.attrs["kernel_layout"].index("O") if index > 0 else None
        elif rule.qnn_op == "qnn.linear":
            want = 0 if index > 0 else None
        else:
            want = None
        if axis != want:
            raise Refusal(f"{opdef.inputs[index].name} is quantized per channel along axis "
                          f"{axis}, which {rule.qnn_op} does not take")

    def _bias(self, value, scales, producer):
        """An int32 bias dequantized at scale data_scale * weight_scale, zero point 0; or
        a constant float bias quantized to it here."""
        if isinstance(value, Const) and value.dtype == "float32":
            return _int32_bias(value, scales)
        dq = producer.get(id(value))
        if dq is None or dq.op != "qnn.dequantize" or dq.inputs[0].dtype != "int32":
            raise Refusal("its bias is float and computed, not a constant or an int32 "
                          "dequantized")
        want = (scales[0] * scales[1]).reshape(-1)
        got = _const(dq.inputs[1]).astype(np.float32).reshape(-1)
        if np.any(_const(dq.inputs[2]) != 0) or got.shape != want.shape and got.size != 1 \
                or not np.allclose(got, want, rtol=1e-6, atol=0):
            raise Refusal("its int32 bias is not at scale data_scale * weight_scale with "
                          "zero point 0")
        return dq.inputs[0]

    @staticmethod
    def _spatial_mean(op: Call) -> dict:
        axes = sorted(a % op.inputs[0].rank for a in (op.attrs.get("axes") or ()))
        if op.inputs[0].rank != 4 or not op.attrs.get("keepdims") or axes not in ([2, 3],
                                                                                  [1, 2]):
            raise Refusal("a mean over other than the spatial axes of a 4-D map")
        return {"data_layout": "NCHW" if axes == [2, 3] else "NHWC"}

    def _output_range(self, call: Call, activations, quantize: Call) -> list[Call]:
        """The qnn call, then relu and clip as bounds on its quantized result (quantize is
        monotonic); the last call gives the quantize's own result value."""
        calls, out, dtype = [call], call.output, call.output.dtype
        if activations and np.asarray(quantize.inputs[1].data).size != 1:
            raise Refusal("a relu or clip before a per-channel quantize")
        lo, hi = QUANT_RANGES[dtype]
        low, high = lo, hi
        if activations:
            scale, zero = (np.asarray(v.data) for v in quantize.inputs[1:])

            def quantized(x):
                return _quantized(x, scale, zero, dtype)
            zero = int(zero.reshape(-1)[0])
            for act in activations:
                low = max(low, zero if act.op == "nn.relu" else
                          quantized(act.attrs["min"]) if act.attrs.get("min") is not None
                          else lo)
                if act.op == "clip" and act.attrs.get("max") is not None:
                    high = min(high, quantized(act.attrs["max"]))
        for op, bound, trivial in (("maximum", low, lo), ("minimum", high, hi)):
            if bound != trivial:
                calls.append(make_call(self.registry, op, [out, Const.of(np.array(bound, dtype))],
                                       {}, quantize.origin))
                out = calls[-1].output
        last = calls[-1]
        calls[-1] = Call(last.op, last.inputs, last.attrs, quantize.outputs, last.origin)
        return calls


def _whole_reciprocal(scale: Const) -> None:
    """qnn.softmax (onnxruntime's QLinearSoftmax) scales probabilities by floor(1 /
    out_scale), made for the out_scale of 1/255 or 1/256 that onnxruntime's quantizer
    writes: it stands for the quantize of a float softmax only where out_scale is the
    reciprocal of a whole number. PT2E's observers pick any scale (1/816.8 would put each
    probability 0.1% low, a quarter of a step at the top of the range)."""
    inverse = 1 / float(np.asarray(scale.data, np.float32).reshape(-1)[0])
    if abs(inverse - round(inverse)) > 1e-4 * inverse:
        raise Refusal(f"qnn.softmax scales by floor(1 / out_scale), and 1 / out_scale is "
                      f"{inverse:.6g}, not a whole number")


def _int32_bias(bias: Const, scales) -> Const:
    """A float bias (onnxruntime's quantizer with QuantizeBias off) as onnxruntime's int8
    kernels take it: quantized to int32 at the float32 product data_scale * weight_scale
    (per channel where the weight is), zero point 0, half to even, saturated."""
    data = np.asarray(bias.data, np.float32)
    scale = (scales[0].reshape(-1)[0] * scales[1].reshape(-1)).astype(np.float32)
    if scale.size not in (1, data.size) or data.ndim > 1 or not np.all(scale > 0):
        raise Refusal(f"its float bias {list(data.shape)} does not match the weight's "
                      f"{scale.size} scales")
    with np.errstate(over="ignore"):
        ints = np.rint(data / scale)
    info = np.iinfo(np.int32)
    return Const.of(np.clip(np.nan_to_num(ints), info.min, info.max).astype(np.int32))


def _quantized(x: float, scale, zero, dtype: str) -> int:
    """One float quantized as qnn.quantize does (divided in float32, half to even)."""
    lo, hi = QUANT_RANGES[dtype]
    scale = np.float32(np.asarray(scale).reshape(-1)[0])
    q = np.rint(np.float32(x) / scale) + int(np.asarray(zero).reshape(-1)[0])
    return int(np.clip(q, lo, hi))


def _live(calls: list[Call], results) -> list[Call]:
    """The calls something still uses, in order (folded regions leave their float op and
    dequantize calls unused)."""
    needed = {id(r) for r in results}
    keep = []
    for call in reversed(calls):
        if any(id(o) in needed for o in call.outputs):
            keep.append(call)
            needed.update(id(v) for v in call.inputs if v is not None)
    return keep[::-1]


def fold_qdq(module: Module, registry=None):
    """Fold every `dequantize -> op -> quantize` region whose op has a qnn counterpart;
    returns (module, modified)."""
    return QDQFoldPass(registry)(module)


def explain(module: Module, registry=None) -> FoldReport:
    """What fold_qdq would fold in `module`, and why the rest does not fold."""
    p = QDQFoldPass(registry)
    p(module)
    return p.report


fold_qdq.explain = explain
