"""The c_kernels GEMM epilogue, as IR: a pass that puts a GEMM (matmul, nn.linear,
nn.conv2d), the bias add that follows it (or a 1x1 conv's residual add: ResNet's
shortcut), the activation after that and, after a depthwise conv, a permute of its result
to channels last, into one `primitive` function, which the planned executor runs as one
C call.

The pass runs on the legalized module (`legato.compile` runs a backend's passes after
legalization), so the fusion shows in `compiled.module`, `legato show` and the report
(`--explain`), and the executor only runs what the IR says. A call joins the epilogue
only when it is the sole reader of the value before it; the bias is a per-column add of
a vector (matmul only: nn.linear and conv have their own bias input); the activation is
one the C epilogue has; a residual is a same-typed tensor added to the output of a
1x1 conv (groups 1) with a constant weight, which the C GEMM convs add block by block
while the block is in cache, instead of a separate pass over memory for the add and
another for the activation.
"""
from __future__ import annotations

from collections import Counter

from legato.plugin_api import (CALL_OP, Attrs, Call, Const, Function, ModulePass,
                               PassResult, ShapeError, lift_regions)

from .kernels import elementwise
from .kernels.gemm import ACTIVATIONS, EPILOGUE_BIAS_OP

FUSION = "c_kernels.gemm_epilogue"  # the function attribute `fusion` marking one


def is_epilogue(fn: Function) -> bool:
    """Does `fn` hold a GEMM epilogue this backend runs as one call?"""
    return fn.kind == "primitive" and fn.attrs.get("fusion") == FUSION


def activation_name(call: Call) -> str | None:
    """The epilogue name of a unary call the C library applies there, if any."""
    if len(call.inputs) != 1:
        return None
    name = elementwise.variant_name(call.op, call.attrs)
    return name if name in ACTIVATIONS and ACTIVATIONS[name] else None


class GemmEpilogue(ModulePass):
    """Fuse GEMM + bias add + activation chains into primitive functions (see module)."""

    name = "gemm-epilogue"

    def __init__(self, lowering):
        self.backend, self.lowering = lowering.backend, lowering

    def run(self, module):
        fused: Counter = Counter()
        for fn_name in [n for n, f in module.functions.items() if f.kind == "default"]:
            regions = self._regions(module, fn_name, fused)
            if regions:
                module = lift_regions(module, fn_name, regions)
        if fused:
            self.lowering.notes.append(
                f"{self.backend.name} fused {sum(fused.values())} GEMM epilogues: " +
                ", ".join(f"{chain} x{n}" for chain, n in sorted(fused.items())))
        return PassResult(module, bool(fused))

    def _regions(self, module, fn_name: str, fused: Counter) -> list:
        fn = module.functions[fn_name]
        readers: Counter = Counter(v for c in fn.calls for v in c.inputs if v is not None)
        readers.update(fn.results)  # a returned value is read outside the function
        reader_of = {v: c for c in fn.calls for v in c.inputs if v is not None}
        taken: set = set()
        regions = []
        for call in fn.calls:
            if id(call) in taken or not self._native(call):
                continue
            members = self._chain(call, readers, reader_of, taken)
            if len(members) < 2:
                continue
            taken.update(map(id, members))
            act = next((name for name in map(activation_name, members[1:]) if name), None)
            residual = call.op == "nn.conv2d" and members[1].op == EPILOGUE_BIAS_OP
            has_bias = members[1].op == EPILOGUE_BIAS_OP and not residual
            name = f"{fn_name}_epilogue_{len(regions)}"
            while name in module.functions:
                name += "_"
            attrs = {"fusion": FUSION, "activation": act or "none", "bias": has_bias,
                     "ops": [m.op for m in members]}
            if residual:
                attrs["residual"] = True
            if members[-1].op == "permute_dims":
                attrs["layout"] = "NHWC"
            if members[-1].op == "nn.softmax":
                attrs["softmax"] = True
            regions.append((name, "primitive", Attrs(attrs), members))
            fused[" + ".join(m.op for m in members)] += 1
        return regions

    def _native(self, call: Call) -> bool:
        return call.op != CALL_OP and call not in self.lowering.fallback_calls and \
            self.backend.has_kernel(call.op)

    def _kernel(self, call: Call):
        return self.backend.kernel(call.op) if self._native(call) else None

    def _chain(self, call: Call, readers: Counter, reader_of: dict, taken: set) -> list[Call]:
        """[GEMM, bias or residual add?, activation?], or [matmul, last-axis softmax],
        starting at `call`: each next call
        the sole reader of the value before it, in no other chain (a residual add of two
        convs goes with the first)."""
        kernel = self._kernel(call)
        if getattr(kernel, "epilogue", None) is None or len(call.outputs) != 1:
            return [call]
        column_bias = getattr(kernel, "epilogue_bias", False)  # a GEMM (else: a conv)
        weight = call.inputs[1]
        members, product = [call], call.output

        def sole_reader():
            nxt = reader_of.get(product) if readers[product] == 1 else None
            return nxt if nxt is not None and self._native(nxt) and id(nxt) not in taken \
                else None
        nxt = sole_reader()
        if nxt is not None and self._is_row_softmax(call, nxt, kernel):
            return [call, nxt]  # a batched B too: the softmax needs no bias epilogue
        if column_bias and (weight is None or weight.rank != 2 or call.inputs[0].rank < 2):
            return [call]
        if column_bias and len(call.inputs) == 2 and nxt is not None and \
                nxt.op == EPILOGUE_BIAS_OP and self._is_column_bias(nxt, product):
            members.append(nxt)
            product = nxt.output
            nxt = sole_reader()
        elif nxt is not None and nxt.op == EPILOGUE_BIAS_OP and self._is_residual(call, nxt):
            members.append(nxt)
            product = nxt.output
            nxt = sole_reader()
        if nxt is not None and nxt.inputs[0] is product and activation_name(nxt):
            members.append(nxt)
            product = nxt.output
            nxt = sole_reader()
        if nxt is not None and self._is_to_channels_last(call, nxt, product):
            members.append(nxt)
        return members

    @staticmethod
    def _is_row_softmax(matmul: Call, softmax: Call, kernel) -> bool:
        """Is `softmax` nn.softmax over the last axis of a float32 matmul's result, the
        matmul's operands both computed tensors of 2 or more dims? Its C call then applies
        the softmax to each strip of rows while the strip is in cache (attention's scores).
        Not for a constant operand (the matmul packs it once; the fused call packs per run),
        nor for another axis (not along C's rows), nor int or quantized matmuls (no such
        C call)."""
        if getattr(kernel, "softmax_epilogue", None) is None or softmax.op != "nn.softmax" \
                or len(matmul.inputs) != 2 or softmax.inputs[0] is not matmul.output:
            return False
        a, b = matmul.inputs
        if a is None or b is None or isinstance(a, Const) or isinstance(b, Const):
            return False
        product = matmul.output
        axis = softmax.attrs.get("axis", -1)
        return a.rank >= 2 and b.rank >= 2 and a.dtype == b.dtype == "float32" and \
            product.dtype == softmax.output.dtype == "float32" and \
            isinstance(axis, int) and axis in (-1, product.rank - 1)

    @staticmethod
    def _is_to_channels_last(conv: Call, permute: Call, product) -> bool:
        """Is `permute` the NCHW -> NHWC permute of a float32 depthwise conv's result?
        Such convs compute pixel-major (16 channels a vector) and then transposed into
        planes: one C call writes channels last without either transpose (ConvNeXt's
        depthwise conv, then its layer norm over channels)."""
        if conv.op != "nn.conv2d" or permute.op != "permute_dims" or \
                permute.inputs[0] is not product or \
                list(permute.attrs.get("axes", ())) != [0, 2, 3, 1]:
            return False
        groups, channels = conv.attrs.get("groups", 1), conv.inputs[0].shape[1]
        return isinstance(channels, int) and groups > 1 and channels == groups and \
            product.dtype == "float32" and conv.attrs.get("data_layout", "NCHW") == "NCHW"

    @staticmethod
    def _is_residual(conv: Call, add: Call) -> bool:
        """Is `add` conv's output plus another tensor of its type, and conv one whose C
        kernel takes a residual (1x1, groups 1, a constant weight: the GEMM convs)?"""
        product, weight = conv.output, conv.inputs[1]
        if conv.op != "nn.conv2d" or conv.attrs.get("groups", 1) != 1 or len(add.inputs) != 2 \
                or not isinstance(weight, Const) or product not in add.inputs:
            return False
        other = add.inputs[1] if add.inputs[0] is product else add.inputs[0]
        try:
            return (other is not None and other is not product and weight.shape[2:] == (1, 1)
                    and other.type == product.type == add.output.type
                    and product.dtype == "float32")
        except ShapeError:
            return False

    @staticmethod
    def _is_column_bias(add: Call, product) -> bool:
        other = add.inputs[1] if add.inputs[0] is product else add.inputs[0]
        if product not in add.inputs or other is product or other is None:
            return False
        try:
            n = product.shape[-1]
            return other.shape in ((n,), (1, n)) and add.output.type == product.type
        except ShapeError:  # a symbolic width that may or may not be the bias's
            return False
