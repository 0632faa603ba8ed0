"""legato as a TorchDynamo backend: `torch.compile(model, backend="legato")`.

    compiled = torch.compile(model, backend="legato")                 # no `import legato`
    compiled = torch.compile(model, backend="legato",
                             options={"backend": ["c_kernels", "cpu_ref"], "config": cfg})

torch finds the name through the `torch_dynamo_backends` entry point of legato's
distribution. `options` takes what `legato.compile` takes: "backend" (a name or a list,
partitioned), "config" and "max_level"; the default backend is the first installed one
that executes and is not cpu_ref (cpu_ref when there is none).

The route from dynamo's graph to legato is the torch.export importer's, so there is one
torch path: the graph dynamo captured (torch-level calls: `F.linear`, methods, operators)
is exported with `torch.export` on the call's inputs, decomposed with the importer's table
(`legato.frontends.torch.exported`) and imported by its `_Importer`. Support is decided at that
ATen level, not on dynamo's torch-level calls: one torch call becomes several ATen calls,
and only at ATen level is the question "does legato convert this call" answered by the
importer's own table (`ops.ATEN`, the complex table, custom-op converters). When
some ATen calls have no converter, the ATen graph is split
(`CapabilityBasedPartitioner`): each connected run of supported calls becomes one legato
module, the rest runs in eager PyTorch between them, and the `legato.dynamo` logger says
once per compiled graph which ATen ops stayed in PyTorch and why (`.stayed` of the
compiled graph holds the same). A converter that refuses one call (dropout in training)
splits its part again around that call; a part whose import or legalization fails
otherwise runs in eager PyTorch, with a warning giving the error.

Parameters and buffers, which dynamo passes as graph inputs (inline_inbuilt_nn_modules),
become constants: legato folds and packs them once. Dynamo does not guard on their
values, so every call checks that each is still the same tensor, at the same version
(`Tensor._version`, bumped by every in-place write, `load_state_dict` included) and over
the same memory (`weight.data = ...`); when one changed, the graph is imported again with
the new values (logged).

Shapes are static: legato has no symbolic sizes yet, so each input shape gets its own
legato module (kept per shape, compiled on the first call with it). When dynamo passes
symbolic sizes (dynamic=True, or its automatic dynamic shapes after a second shape) this
is logged once and the graph is specialised to each concrete shape it is called with.
Inputs and outputs stay torch tensors: contiguous CPU tensors reach legato without a copy
(`Tensor.numpy()`), and results come back with `torch.from_numpy`. This is an inference
backend: results carry no autograd history, and a graph that writes into its inputs runs
in eager PyTorch.
"""
from __future__ import annotations

import logging
import operator
from collections import Counter

import numpy as np

from ...api import compile as legato_compile, get_backend, list_backends
from ...ir.errors import LegatoError
from . import custom, fft
from . import importer as torch_frontend
from .ops import ATEN, refusal

log = logging.getLogger("legato.dynamo")
OPTIONS = ("backend", "config", "max_level")


def backend(gm, example_inputs, options=None, **_):
    """The dynamo backend: a callable running dynamo's graph `gm` on legato (`mode` and
    other torch.compile arguments are ignored)."""
    return CompiledGraph(gm, example_inputs, compile_options(options))


def compile_options(options) -> dict:
    """`options` as legato.compile's keyword arguments, refusing unknown keys."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise LegatoError(f"torch.compile(backend='legato') options {unknown} are not "
                          f"known; the options are {list(OPTIONS)}")
    options.setdefault("backend", default_backend())
    names = options["backend"]
    for name in [names] if isinstance(names, str) else names:
        if isinstance(name, str) and not get_backend(name).executes:
            raise LegatoError(f"backend {name} emits code and does not execute: "
                              "torch.compile needs one that runs the graph")
    return options


def default_backend() -> str:
    """The first installed backend that executes and is not cpu_ref (cpu_ref if none)."""
    for name in list_backends():
        if name != "cpu_ref" and get_backend(name).executes:
            return name
    return "cpu_ref"


def _is_static(value) -> bool:
    """Whether a graph input is a parameter or buffer dynamo lifted (not a user input)."""
    import torch
    return isinstance(value, torch.nn.Parameter) or \
        getattr(value, "_dynamo_static_input_type", None) is not None


def _symbolic(value) -> bool:
    import torch
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return isinstance(value, torch.Tensor) and any(
        isinstance(s, torch.SymInt) for s in value.shape)


class CompiledGraph:
    """One graph dynamo captured: a legato build per input shape, made on its first call."""

    _count = 0

    def __init__(self, gm, example_inputs, options: dict):
        CompiledGraph._count += 1
        self.name = f"graph {CompiledGraph._count}"
        self.gm, self.options = gm, options
        self.static = [i for i, v in enumerate(example_inputs) if _is_static(v)]
        self.others = [i for i in range(len(example_inputs)) if i not in self.static]
        self.builds: dict = {}
        self.stayed: dict[str, tuple[int, str]] = {}  # ATen op -> (calls, why) in PyTorch
        self.said = False
        if any(_symbolic(v) for v in example_inputs):
            log.info("%s: dynamo passed symbolic sizes; legato has static shapes, so the "
                     "graph is compiled for each concrete shape it is called with "
                     "(torch.compile(dynamic=False) makes dynamo recompile instead)", self.name)

    def __call__(self, *args):
        key = self.key(args)
        build = self.builds.get(key)
        if build is None or not build.current(args):
            if build is not None:
                log.info("%s: a parameter or buffer changed since it was compiled; "
                         "importing the graph again", self.name)
            build = self.builds[key] = self.build(args)
        return build(args)

    def key(self, args) -> tuple:
        """What a build is specific to: the shapes, dtypes and devices of the inputs that
        are not parameters, and the values of the non-tensor ones."""
        return tuple((a.shape, a.dtype, a.device) if hasattr(a, "shape") else (type(a), a)
                     for a in map(args.__getitem__, self.others))

    def build(self, args) -> "Build":
        import torch
        frozen = {i: args[i] for i in self.static}
        with torch.no_grad():
            build = Build(self, args, frozen)
        self.stayed = stayed_ops(build.lowered.stays)
        if not self.said:
            self.said = True
            self.say(build)
        return build

    def say(self, build) -> None:
        if build.eager_reason:
            log.warning("%s runs in eager PyTorch: %s", self.name, build.eager_reason)
        elif self.stayed:
            log.warning("%s: %d ATen op(s) stay in PyTorch, the rest runs on legato (%d "
                        "part(s)):\n%s", self.name, len(self.stayed), build.lowered.parts,
                        "\n".join(f"  {op} x{n}: {why}"
                                  for op, (n, why) in sorted(self.stayed.items())))
        else:
            log.info("%s runs on legato (%s) whole", self.name, self.options["backend"])


def bound(gm, args, fixed):
    """The torch module computing `gm(*args)` from the tensors at positions not in `fixed`
    alone: fixed tensors (frozen parameters) are its buffers, which torch.export makes
    constants, and fixed non-tensors (sizes dynamo made symbolic) keep their values."""
    import torch

    class Bound(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = gm
            self.varying = [i for i in range(len(args)) if i not in fixed]
            self.frozen = [i for i in fixed if isinstance(args[i], torch.Tensor)]
            self.args = [None if isinstance(a, torch.Tensor) else a for a in args]
            for i in self.frozen:
                self.register_buffer(f"c{i}", args[i].detach())

        def forward(self, *tensors):
            merged = list(self.args)
            for i, tensor in zip(self.varying, tensors):
                merged[i] = tensor
            for i in self.frozen:
                merged[i] = getattr(self, f"c{i}")
            return tuple(self.gm(*merged))

    return Bound()


class Build:
    """dynamo's graph at one set of input shapes: the legato module(s) and, when some ATen
    ops stay in PyTorch, the split ATen graph that runs them between legato's parts."""

    def __init__(self, owner: CompiledGraph, args, frozen: dict):
        import torch
        self.frozen = {i: (t, t._version, t.data_ptr()) for i, t in frozen.items()}
        fixed = set(frozen) | {i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        self.varying = [i for i in range(len(args)) if i not in fixed]
        self.eager_reason, self.lowered = None, Lowered()
        try:
            self.run = self.on_legato(owner, args, fixed)
        except LegatoError as err:  # the whole graph in eager PyTorch
            self.eager_reason = str(err)
            self.run, self.varying = (lambda tensors: owner.gm(*tensors)), list(range(len(args)))

    def on_legato(self, owner: CompiledGraph, args, fixed: set):
        import torch
        devices = {a.device.type for a in args if isinstance(a, torch.Tensor)} - {"cpu"}
        if devices:
            raise LegatoError(f"legato runs on the CPU; the graph's inputs are on "
                              f"{', '.join(sorted(devices))}")
        program = torch_frontend.exported(bound(owner.gm, args, fixed),
                                          [args[i] for i in self.varying])
        self.check_functional(program)
        return lower(program, owner.options, self.lowered)

    @staticmethod
    def check_functional(program) -> None:
        from torch.export.graph_signature import OutputKind
        writes = [f"{s.kind.name.lower().replace('_mutation', '')} {s.target}"
                  for s in program.graph_signature.output_specs
                  if s.kind != OutputKind.USER_OUTPUT]
        if writes:
            raise LegatoError(f"the graph writes in place into {', '.join(writes)} (a legato "
                              "module has no side effects)")

    def current(self, args) -> bool:
        return all(args[i] is t and t._version == v and t.data_ptr() == p
                   for i, (t, v, p) in self.frozen.items())

    def __call__(self, args):
        return self.run([args[i] for i in self.varying])


def stayed_ops(stays: dict) -> dict:
    """{ATen op: (calls, why)} of the nodes that stay in PyTorch."""
    counts = Counter(str(n.target) for n in stays)
    reasons = {str(n.target): why for n, why in stays.items()}
    return {op: (counts[op], reasons[op]) for op in counts}


class Lowered:
    """What lowering a graph left in PyTorch ({node: why}, its parts' too) and how many
    legato parts it made."""

    def __init__(self):
        self.stays: dict = {}
        self.parts = 0


def lower(program, options: dict, into: Lowered):
    """A callable running the ExportedProgram `program` (torch tensors in, a tuple out):
    one legato Part, or, where some ATen calls stay in PyTorch, a Split whose parts are
    lowered the same way (a converter that refuses a call splits its part again)."""
    graph = program.graph_module.graph
    stays = unsupported(graph)
    if not stays:
        try:
            part = Part(program, options)
            into.parts += 1
            return part
        except LegatoError as err:
            stays = blame(graph, err)
            if not stays:
                raise
    into.stays.update(stays)
    return Split(program, stays, options, into)


def blame(graph, err: LegatoError) -> dict:
    """The node the importer's error names (it starts "target (node name): ..."), as the
    one op to leave in PyTorch, with the error as the reason."""
    for node in graph.nodes:
        if str(err).startswith(f"{node.target} ({node.name}): "):
            return {node: str(err).split(": ", 1)[1]}
    return {}


def unsupported(graph) -> dict:
    """{node: why} for every call of the ATen graph the importer cannot convert, decided
    as the importer decides (its tables, custom-op converters, complex operands)."""
    out = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if str(node.target) in torch_frontend.ASSERTS:
            continue
        if custom.is_custom(node.target):
            if custom.converter(node, torch_frontend._Importer) is None:
                out[node] = custom.why(str(node.target)) or \
                    "a custom op with no converter or traceable implementation"
            continue
        on_complex = fft.touches_complex(node)
        if str(node.target) not in (fft.COMPLEX if on_complex else ATEN):
            out[node] = refusal(str(node.target)) or (
                "no converter for it on complex values" if on_complex
                else "no converter for it in legato's torch importer")
    return out


class Part:
    """An ExportedProgram (or a part of one) imported and compiled by legato, called with
    torch tensors, returning a tuple of torch tensors."""

    def __init__(self, program, options: dict):
        self.module = torch_frontend._Importer(program).run()
        self.compiled = legato_compile(self.module, **options)
        outputs = program.graph_module.graph.output_node().args[0]
        self.complex = [fft.is_complex(getattr(out, "meta", {}).get("val"))
                        for out in outputs]

    def __call__(self, tensors):
        results = self.module.with_nones(self.compiled(*[to_numpy(t) for t in tensors]))
        return tuple(None if r is None else to_torch(r, pairs)
                     for r, pairs in zip(results, self.complex))


class Split:
    """The ATen graph split: each run of supported calls a legato Part, the calls legato
    cannot convert left in the graph, run by PyTorch."""

    def __init__(self, program, stays: dict, options: dict, into: Lowered):
        import torch
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupport
        from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

        class Supported(OperatorSupport):
            def is_node_supported(self, submodules, node) -> bool:
                if node.op != "call_function":
                    return False
                if node.target is operator.getitem:
                    return node.args[0] not in stays
                return node not in stays

        gm = program.graph_module
        partitions = CapabilityBasedPartitioner(
            gm, Supported(), allows_single_node_partition=True).propose_partitions()
        state = {**program.state_dict, **program.constants}
        # the graph's inputs in order: a stored tensor, or None for the caller's next one
        self.inputs = [None if s.kind.name == "USER_INPUT" else state[s.target]
                       for s in program.graph_signature.input_specs]
        constants = {n: t for n, t in zip(_placeholders(gm), self.inputs) if t is not None}
        fuse_by_partitions(gm, [p.nodes for p in partitions], always_return_tuple=True)
        for node in list(gm.graph.nodes):
            if node.op == "call_module" and node.target.startswith("fused_"):
                sub = getattr(gm, node.target)
                setattr(gm, node.target, part_module(torch, sub, node.args, constants,
                                                     options, into))
        gm.recompile()
        self.gm = gm

    def __call__(self, tensors):
        import torch
        given = iter(tensors)
        with torch.no_grad():  # the eager calls between legato's parts: inference only
            return tuple(self.gm(*[next(given) if t is None else t for t in self.inputs]))


def _placeholders(gm) -> list:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def part_module(torch, sub, inputs, constants: dict, options: dict, into: Lowered):
    """The fused submodule `sub` as a module running on legato: inputs that are the outer
    graph's parameters or buffers are frozen, the rest are example tensors of their
    recorded shapes. A part that fails to import or compile stays `sub` (eager)."""
    fixed = [i for i, n in enumerate(inputs) if n in constants]
    args = [constants[n] if n in constants else _example(torch, n.meta["val"])
            for n in inputs]
    try:
        program = torch_frontend.exported(bound(sub, args, fixed),
                                          [a for i, a in enumerate(args) if i not in fixed])
        part = lower(program, options, into)
    except LegatoError as err:
        log.warning("a part of %d ATen calls runs in eager PyTorch: %s",
                    sum(n.op == "call_function" for n in sub.graph.nodes), err)
        return sub

    class LegatoPart(torch.nn.Module):
        def forward(self, *values):
            return part([v for i, v in enumerate(values) if i not in fixed])

    return LegatoPart()


def _example(torch, val):
    """A real tensor of a fake tensor's shape and dtype: export traces shapes, not data."""
    return torch.zeros(tuple(val.shape), dtype=val.dtype)


def to_numpy(tensor):
    """A CPU torch tensor as a numpy array: the same memory when it is contiguous."""
    import torch
    tensor = tensor.detach()
    if tensor.is_complex():
        tensor = fft.as_pairs(tensor)
    if tensor.dtype is torch.bfloat16:  # numpy has none: ml_dtypes' through float32
        import ml_dtypes
        return tensor.float().numpy().astype(ml_dtypes.bfloat16)
    return (tensor if tensor.is_contiguous() else tensor.contiguous()).numpy()


def to_torch(array, complex_pairs: bool = False):
    """A result array as a torch tensor, sharing its memory (results are the caller's);
    `complex_pairs`: the array holds a complex tensor as (real, imag) pairs."""
    import torch
    if complex_pairs:
        return torch.view_as_complex(to_torch(np.ascontiguousarray(array)))
    array = np.asarray(array)
    if array.dtype.kind == "V":  # ml_dtypes' bfloat16
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    if not array.flags.writeable:
        array = np.array(array)
    try:
        return torch.from_numpy(array)
    except ValueError:  # negative strides
        return torch.from_numpy(np.ascontiguousarray(array))
