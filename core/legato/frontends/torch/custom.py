"""Custom ops (registered with `torch.library`, outside the aten namespace) in the PyTorch
importer. An exported program keeps such an op as one call
(`transformers.grouped_mm_fallback.default`); it is imported by the first of:

1. a converter registered for it, `fn(b, *args, **kwargs) -> Value | tuple` like an ATen
   converter: legato's own (registered by the converter modules) or a plugin's, through
   the `legato_register_torch_ops(register)` hook, `register("namespace::name", fn)` (every
   overload) or `register("namespace::name.overload", fn)`;
2. its implementation traced to ATen ops: a decomposition registered with torch._decomp, a
   CompositeImplicitAutograd kernel, or the Python function of a `torch.library.custom_op`,
   exported on tensors of the call's shapes and dtypes and imported in its place. The trace
   runs on fake tensors, so an implementation whose control flow reads the data
   (`offs.tolist()`) fails to trace rather than being specialised to one input;
3. otherwise it is refused, with an error naming the op and what a user can do.
"""
from __future__ import annotations

import functools
from typing import Callable

from ...ir.errors import LegatoError, quote
from .registry import CONVERTERS, register, unregister  # noqa: F401 - re-exported

_TRACED: dict = {}   # (op, argument kinds) -> the decomposed program, or why there is none


def is_custom(target) -> bool:
    """Whether an FX call target is an op of a torch.library namespace other than aten."""
    return hasattr(target, "_schema") and getattr(target, "namespace", "aten") != "aten"


def _names(target) -> tuple[str, str]:
    """("namespace::name.overload", "namespace::name") of an op overload."""
    name = target._schema.name
    return f"{name}.{target._overloadname}", name


def registered(target) -> tuple[Callable, str] | None:
    from ...plugins.host import get_host
    from . import converters  # noqa: F401 - legato's own converters register
    get_host()  # plugins register their converters when they load
    exact, every = _names(target)
    return CONVERTERS.get(exact) or CONVERTERS.get(every)


def converter(node, importer) -> Callable | None:
    """The converter of a custom op's call (`node`: an FX node), or None when it has
    neither a registered converter nor an implementation that traces (why() says why).
    `importer` is the torch importer's class, which exports and imports a traced
    implementation; it is passed in because the importer itself calls this module."""
    found = registered(node.target)
    if found is not None:
        return _guarded(node.target, *found)
    if _program(node.target, _kinds(node.args), _kinds(node.kwargs), importer) is None:
        return None
    return lambda b, *args, **kwargs: _inline(b, node.target, args, kwargs, importer)


def why(op: str) -> str | None:
    """Why the custom op `op` ("ns.name.overload") cannot be imported, when it was tried."""
    for (target, *_), program in _TRACED.items():
        if str(target) == op and isinstance(program, str):
            return program
    return None


def _guarded(target, fn, source):
    def convert(b, *args, **kwargs):
        try:
            return fn(b, *args, **kwargs)
        except LegatoError:
            raise
        except Exception as err:  # noqa: BLE001 - a plugin's converter may raise anything
            raise LegatoError(f"the converter {source} registered for {target} raised "
                              f"{type(err).__name__}: {err}") from None
    return convert


# --- tracing an implementation ------------------------------------------------------------

def _kinds(arg):
    """An argument with every tensor replaced by its (shape, dtype): FX nodes by their
    fake value, legato values by their type; other values as they are."""
    if isinstance(arg, (list, tuple)):
        return tuple(_kinds(a) for a in arg)
    if isinstance(arg, dict):
        return tuple((k, _kinds(v)) for k, v in arg.items())
    val = arg.meta.get("val") if hasattr(arg, "meta") else arg
    if hasattr(val, "shape") and hasattr(val, "dtype"):
        return _Tensor(tuple(val.shape), str(val.dtype).removeprefix("torch."))
    return val


class _Tensor(tuple):
    """(shape, dtype) of a tensor argument, told apart from a tuple argument."""

    def __new__(cls, shape, dtype):
        return super().__new__(cls, (shape, dtype))


def implementation(target) -> Callable | None:
    """A Python function computing `target` from ATen ops: its registered decomposition,
    its CompositeImplicitAutograd kernel, or a torch.library.custom_op's function."""
    import torch
    from torch._library.custom_ops import _maybe_get_opdef
    if target in torch._decomp.decomposition_table:
        return torch._decomp.decomposition_table[target]
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    if target.has_kernel_for_dispatch_key(composite):  # the kernel itself: decompose() would
        return functools.partial(target._op_dk, composite)  # call the table's entry again
    opdef = _maybe_get_opdef(target._schema.name)
    if opdef is not None:
        fns = opdef._backend_fns
        return fns.get("cpu") or fns.get(None)
    return None


def _program(target, args, kwargs, importer):
    """The decomposed program of `target`'s implementation on arguments of these kinds
    (cached), or None with the reason kept for why()."""
    key = (target, args, kwargs)
    if key not in _TRACED:
        _TRACED[key] = _trace(target, args, kwargs, importer)
    program = _TRACED[key]
    return None if isinstance(program, str) else program


def _trace(target, args, kwargs, importer):
    import torch
    fn = implementation(target)
    if fn is None:
        return ("a custom op with no converter and no implementation in Python to trace "
                "(register a converter from a plugin's legato_register_torch_ops hook, or "
                "give the op a CompositeImplicitAutograd implementation)")
    examples = [torch.zeros(shape, dtype=getattr(torch, dtype))
                for shape, dtype in _tensor_kinds((args, kwargs))]

    class Call(torch.nn.Module):
        def forward(self, *tensors):
            fill = iter(tensors)
            return fn(*_filled(args, fill), **dict(_filled(kwargs, fill)))

    try:  # the op itself decomposes by `fn` where the export keeps it (a composite kernel)
        program = importer.exported(Call(), examples, {target: fn})
        _inline_class(importer)(program).check()
        return program
    except LegatoError as err:
        return (f"a custom op with no converter, whose implementation did not trace to ATen "
                f"ops legato imports on fake tensors ({_brief(err)}); register a converter "
                "from a plugin's legato_register_torch_ops hook")


def _brief(err) -> str:
    return " ".join(str(err).split())[:300]


def _tensor_kinds(kinds):
    for kind in kinds:
        if isinstance(kind, _Tensor):
            yield kind
        elif isinstance(kind, tuple):
            yield from _tensor_kinds(kind)


def _filled(kinds, tensors):
    """The arguments again, each tensor kind replaced by the next of `tensors`."""
    out = []
    for kind in kinds:
        if isinstance(kind, _Tensor):
            out.append(next(tensors))
        elif isinstance(kind, tuple):
            out.append(type(kind)(_filled(kind, tensors)))
        else:
            out.append(kind)
    return out


def _inline(b, target, args, kwargs, importer):
    """The traced implementation of `target` imported into builder `b` on the call's
    arguments (legato values)."""
    program = _program(target, _kinds(args), _kinds(kwargs), importer)
    tensors = [a for a in _leaves([*args, *kwargs.values()]) if hasattr(a, "type")]
    results = _inline_class(importer)(program, b, tensors).results()
    returns = target._schema.returns
    single = len(returns) == 1 and not str(returns[0].type).endswith("[]")
    return results[0] if single else tuple(results)


def _leaves(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _leaves(item)
        else:
            yield item


@functools.cache
def _inline_class(importer):
    class Inline(importer):
        """An importer that builds into an existing builder, its inputs given."""

        def __init__(self, program, b=None, inputs=()):
            super().__init__(program, None if b is None else b.registry)
            self.b, self.inputs = self.b if b is None else b, iter(inputs)

        def check(self) -> None:
            self.dropped = self.assert_only()
            self.check_supported()

        def results(self) -> list:
            self.check()
            constants = self.constants()
            for node in self.graph.nodes:
                if node.op == "placeholder":
                    self.env[node] = constants[node.name] if node.name in constants \
                        else next(self.inputs)
                elif node.op == "call_function" and node not in self.dropped:
                    self.env[node] = self.convert(node)
                elif node.op == "output":
                    return [self.value(r) for r in self.user_outputs(node.args[0])]
            return []

    return Inline

