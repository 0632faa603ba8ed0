"""Import PyTorch modules into legato through torch.export.

    mod = legato.frontends.torch.load(model, (torch.randn(2, 8),))

The module is exported (`torch.export.export`), then decomposed with PyTorch's default
table minus the ops legato has whole (layer_norm, gelu, softmax, scaled_dot_product_attention,
linear, conv2d, ...), so those stay high-level for backends to keep; every remaining ATen op
is mapped by a small converter. Parameters, buffers and lifted constants become constants.
Shapes are those of `example_inputs` (legato has static shapes).

The module's results are the program's outputs flattened in torch's pytree order (the
leaves of nested tuples, lists and dicts). A legato module returns tensors only, so:
- a Python scalar output (`True`, `3`, `2.5`; shapes are static, so `x.shape[0]` is one)
  becomes a 0-d constant tensor in its place, of the dtype `torch.as_tensor` gives it
  (bool, int64, the default float dtype): compare it with eager's scalar as that number;
- a `None` output has no tensor to stand for it and is left out, and the module, a
  `TorchModule`, lists where it was (`none_results`, positions among the flat outputs)
  so that no result silently moves: `mod.with_nones(results)` puts each None back.
Other outputs (strings, dtypes) are refused, naming their position.
"""
from __future__ import annotations

import operator
import os
import re

from ...ir import Call, Const, Module, Origin
from ...ir.builder import GraphBuilder
from ...ir.errors import LegatoError
from ...ir.symbols import GUARDS, collecting_guards
from ...ir.verify import verify
from ..common.fold import fold_calls, foldable
from . import converters  # noqa: F401  (every converter registers)
from . import custom, fft, quant, symbolic, views
from .ops import ATEN, KEEP, refusal


class TorchModule(Module):
    """A Module imported from a torch program, with the positions of the program's None
    outputs (`none_results`), which its results leave out."""

    __slots__ = ("none_results",)

    def __init__(self, functions, none_results=()):
        super().__init__(functions)
        object.__setattr__(self, "none_results", tuple(none_results))

    def with_nones(self, results) -> list:
        """A compiled call's results (a tuple, or one array) as the program's flat outputs:
        None back at each of `none_results`."""
        rest = iter(results if isinstance(results, (tuple, list)) else (results,))
        count = len(self.main.results) + len(self.none_results)
        return [None if i in self.none_results else next(rest) for i in range(count)]


def _torch():
    try:
        import torch
    except ImportError:
        raise LegatoError("the PyTorch importer needs torch (a CPU wheel is enough)") from None
    return torch


def load(module, example_inputs, *, registry=None, dynamic_shapes=None) -> Module:
    """A legato Module computing `module(*example_inputs)` for inputs of those shapes
    (`registry`: the context's when not given). `dynamic_shapes` (torch.export's, with
    `torch.export.Dim`s) keeps those sizes symbolic: the module runs at every size in
    their ranges."""
    program = exported(module, example_inputs, dynamic_shapes=dynamic_shapes)
    names = symbolic.dim_names(program, module, example_inputs, dynamic_shapes) \
        if dynamic_shapes else {}
    return _Importer(program, registry, names).run()


def exported(module, example_inputs, decompositions=None, dynamic_shapes=None):
    """`module` exported on `example_inputs` and decomposed for import (`decompositions`:
    more of them, {op: function}, over the default table)."""
    torch = _torch()
    if isinstance(module, torch.nn.Module):
        try:
            module = module.eval()
        except NotImplementedError:   # an exported graph (PT2E's) keeps the mode it had
            pass
    try:
        program = torch.export.export(module, tuple(example_inputs),
                                      dynamic_shapes=dynamic_shapes)
    except Exception as err:  # noqa: BLE001 - export raises many error types
        raise LegatoError(f"torch.export could not export the module: "
                          f"{' '.join(str(err).split())[:400]}") from None
    flat_outputs(torch, program)
    try:
        table = {**decomposition_table(), **decompositions} if decompositions else \
            decomposition_table()
        program = program.run_decompositions(quant.kept_whole(program, table))
    except Exception as err:  # noqa: BLE001 - PyTorch's decompositions raise many types
        raise LegatoError(f"PyTorch's decompositions of the exported module failed: "
                          f"{type(err).__name__}: {' '.join(str(err).split())[:400]}") \
            from None
    return program


def flat_outputs(torch, program) -> None:
    """Make the program return its results as one flat tuple, the order legato returns them
    in: decomposing a program whose results rebuild a container of the model's own
    (a decoder's DynamicCache) fails in torch (SpecViolationError on lifted constants)."""
    signature = program.module_call_graph[0].signature
    if signature is not None:
        count = signature.out_spec.num_leaves
        signature.out_spec = torch.utils._pytree.tree_structure(tuple(range(count)))


# checks of what torch.export assumed about the inputs: legato's shapes are static
ASSERTS = ("aten._assert_scalar.default", "aten._assert_async.msg",
           "aten._assert_async.default", "aten.sym_constrain_range_for_size.default",
           "aten._functional_assert_async.msg", "aten._assert_tensor_metadata.default")
_TABLE: dict = {}


def decomposition_table() -> dict:
    """PyTorch's default decompositions minus the ops legato keeps whole (KEEP), built once
    per process: building it walks every registered op, about a third of a second."""
    if not _TABLE:
        torch = _torch()
        table = torch.export.default_decompositions()
        for name in KEEP:
            table.pop(_aten_overload(torch, name), None)
        _TABLE.update(table.materialize())
    return _TABLE


def _aten_overload(torch, name: str):
    _, op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)


def _why(op: str) -> str:
    reason = refusal(op) or custom.why(op)
    return f" (refused: {reason})" if reason else ""


def _all_constant(args, kwargs) -> bool:
    """Whether every tensor among a node's arguments is a constant (and there is one)."""
    tensors = [a for a in flat_items([*args, *kwargs.values()]) if hasattr(a, "type")]
    return bool(tensors) and all(isinstance(t, Const) for t in tensors)


def flat_items(items):
    """The leaves of nested lists and tuples, in order."""
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from flat_items(item)
        else:
            yield item


def live_calls(calls, results) -> list:
    """The calls some result depends on, in order: an ATen op's results that the graph
    never reads (max.dim's indices, native_layer_norm's statistics) are not computed."""
    needed, live = {id(v) for v in results}, []
    for call in reversed(calls):
        if any(id(v) in needed for v in call.outputs):
            live.append(call)
            needed.update(id(v) for v in call.inputs if v is not None)
    return live[::-1]


def _const(tensor) -> Const:
    """A parameter or buffer as a constant; bfloat16 through float32 (numpy has none)."""
    if tensor.is_complex():
        tensor = fft.as_pairs(tensor)
    if str(tensor.dtype) == "torch.bfloat16":
        import ml_dtypes
        return Const.of(tensor.float().numpy().astype(ml_dtypes.bfloat16))
    return Const.of(tensor.numpy())


def torch_dtype(dtype) -> str:
    return str(dtype).removeprefix("torch.")


_FRAME = re.compile(r'\s*File "(.*?)", line (\d+)')


def source_location(node) -> str:
    """The graph node's name and the line of the model's code that made it (the innermost
    frame of torch.export's stack trace outside torch itself, e.g. modeling_bert.py:251),
    so reports can point at the model's source."""
    frames = [m for m in map(_FRAME.match, (node.meta.get("stack_trace") or "").splitlines())
              if m and f"{os.sep}torch{os.sep}" not in m[1]]
    return f"{node.name} ({os.path.basename(frames[-1][1])}:{frames[-1][2]})" if frames \
        else node.name


class _Importer:
    exported = staticmethod(exported)  # custom ops' implementations are traced with it

    def __init__(self, program, registry=None, names=None):
        self.program = program
        self.names = names or {}  # torch's symbols -> the names of the user's Dims
        self.graph = program.graph_module.graph
        self.b = GraphBuilder(registry)
        self.env: dict = {}

    def run(self) -> Module:
        self.dropped = self.assert_only()
        self.check_supported()
        constants = self.constants()
        with collecting_guards() as inferred:  # what symbolic shape rules assumed
            outputs = self.convert_nodes(constants)
        nones = [i for i, out in enumerate(outputs) if out is None]
        results = [self.result(i, out) for i, out in enumerate(outputs) if out is not None]
        if not results:
            raise LegatoError("the program returns no tensor (only None): a legato module "
                              "needs at least one result")
        self.b.calls[:] = live_calls(self.b.calls, results)
        symbols = {name for p in self.b.params for d in p.shape if not isinstance(d, int)
                   for name in d.symbols()}
        assumed = [*symbolic.guards(self.program, symbols, self.names), *inferred] \
            if symbols else []
        if not assumed:
            return TorchModule(self.b.build(*results).functions, nones)
        main = self.b.function(*results, attrs={GUARDS: list(dict.fromkeys(assumed))})
        return TorchModule(verify(Module({"main": main}), self.b.registry).functions, nones)

    def dim(self, size):
        return symbolic.dim(size, self.names)

    def convert_nodes(self, constants):
        """Each node converted in order; the output node's arguments."""
        outputs = ()
        for node in self.graph.nodes:
            if node.op == "placeholder" and node.name in constants:
                self.env[node] = constants[node.name]
            elif node.op == "placeholder":
                shape, dtype = fft.value_type(node.meta["val"])
                self.env[node] = self.b.input(node.name, tuple(map(self.dim, shape)), dtype)
            elif node.op == "call_function" and node not in self.dropped:
                self.env[node] = self.convert(node)
            elif node.op == "output":
                outputs = self.user_outputs(node.args[0])
        return outputs

    def result(self, position: int, out):
        """An output as a module result: a Python scalar as the 0-d constant tensor torch
        makes of it."""
        if hasattr(out, "op") and hasattr(out, "target"):
            return self.env[out]
        if not isinstance(out, (bool, int, float)):
            raise LegatoError(f"result {position} of the program is a {type(out).__name__} "
                              f"({out!r}): a legato module returns tensors (and Python "
                              "scalars, as 0-d tensors)")
        try:
            tensor = _torch().as_tensor(out)
        except RuntimeError as err:  # an int beyond int64
            raise LegatoError(f"result {position} of the program, {out!r}, has no torch "
                              f"dtype: {err}") from None
        return _const(tensor)

    def assert_only(self) -> set:
        """The calls only asserts read (XLM's `lengths.max().item() <= slen`): shapes are
        static, so neither the asserts nor the scalars they check are imported."""
        dropped: set = set()
        for node in reversed(list(self.graph.nodes)):
            if node.op == "call_function" and (str(node.target) in ASSERTS or node.users and
                                               all(u in dropped for u in node.users)):
                dropped.add(node)
        return dropped

    def check_supported(self) -> None:
        missing: dict[str, list[str]] = {}
        for node in self.graph.nodes:
            if node in self.dropped:
                continue
            if custom.is_custom(node.target) and custom.converter(node, _Importer):
                continue
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            on_complex = fft.touches_complex(node)  # complex operands: their own table
            if str(node.target) not in (fft.COMPLEX if on_complex else ATEN):
                op = f"{node.target} on complex values" if on_complex else str(node.target)
                missing.setdefault(op, []).append(node.name)
        if missing:
            raise LegatoError(f"the exported program uses {len(missing)} ATen op(s) legato "
                              "cannot import:\n" + "\n".join(
                                  f"  {op}: {', '.join(names)}" + _why(op)
                                  for op, names in sorted(missing.items())))

    def user_outputs(self, outputs) -> list:
        """The output node's arguments the caller sees: the program also returns the new
        values of the buffers and inputs it mutates in place (a training-mode batch_norm's
        running statistics), which a legato module has no place for."""
        from torch.export.graph_signature import OutputKind
        specs = self.program.graph_signature.output_specs
        return [out for out, spec in zip(outputs, specs) if spec.kind == OutputKind.USER_OUTPUT]

    def constants(self) -> dict[str, Const]:
        """Parameters, buffers and lifted constants by placeholder name."""
        from torch.export.graph_signature import InputKind
        sig, out = self.program.graph_signature, {}
        stores = {**self.program.state_dict, **self.program.constants}
        for spec in sig.input_specs:
            if spec.kind != InputKind.USER_INPUT:
                tensor = stores[spec.target].detach().cpu()
                out[spec.arg.name] = _const(tensor)
        return out

    def value(self, arg):
        """An FX argument as legato sees it: nodes become values, lists stay lists."""
        if isinstance(arg, (list, tuple)):
            return [self.value(a) for a in arg]
        if hasattr(arg, "op") and hasattr(arg, "target"):
            return self.env[arg]
        return arg

    def convert(self, node):
        args, kwargs = self.value(list(node.args)), {k: self.value(v)
                                                     for k, v in node.kwargs.items()}
        if node.target is operator.getitem:
            return args[0][args[1]]
        if getattr(ATEN.get(str(node.target)), "reads_site", False):  # torch's strides
            kwargs["site"] = views.Site(node, self.env)
        start = len(self.b.calls)
        try:
            if fft.touches_complex(node):
                result = fft.convert(self.b, node, args, kwargs)
            else:
                result = self.converter(node)(self.b, *args, **kwargs)
        except LegatoError as err:
            raise type(err)(f"{node.target} ({node.name}): {err}") from None
        if _all_constant(args, kwargs):
            result = self.fold(start, result)
        self.check_type(node, result)
        where = source_location(node)
        self.b.calls[start:] = [c if c.origin is not None else
                                Call(c.op, c.inputs, c.attrs, c.outputs,
                                     Origin(c.op, c.attrs, where))
                                for c in self.b.calls[start:]]
        return result

    def converter(self, node):
        return ATEN.get(str(node.target)) or custom.converter(node, _Importer)

    def fold(self, start: int, result):
        """Index arithmetic on folded factories (arange, full, ...) becomes constants too,
        so backends never see it (TOSA has no integer remainder, for one)."""
        results = result if isinstance(result, tuple) else (result,)
        values = [v for v in results if v is not None]
        if not foldable(values) or all(isinstance(v, Const) for v in values):
            return result
        arrays = fold_calls(self.b.calls[start:], values, self.b.registry)
        if arrays is None:
            return result
        del self.b.calls[start:]
        consts = iter(Const.of(a) for a in arrays)
        folded = tuple(None if v is None else next(consts) for v in results)
        return folded if isinstance(result, tuple) else folded[0]

    def check_type(self, node, result) -> None:
        """Every converted value must have the shape and dtype torch says it has."""
        val = node.meta.get("val")
        if val is None or not hasattr(val, "shape") or isinstance(result, (tuple, list)):
            return
        shape, dtype = fft.value_type(val)
        want = tuple(self.dim(d) for d in shape), dtype
        if (tuple(result.shape), result.dtype) != want:
            raise LegatoError(f"{node.target} ({node.name}) converted to {result.type}, torch "
                              f"says {want[1]}{list(want[0])}")

