"""ONNX control flow where it is static: If with a condition known at import time, Loop
with a constant trip count and a condition that folds, and Scan (its length is a static
dimension). The chosen branch or every iteration is converted inline; what depends on
run-time data is refused with the reason."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from .convert import converter

MAX_UNROLL = 4096  # iterations a Loop or Scan may unroll into


def _known(node, index: int, what: str):
    """The value of constant input `index`, or a refusal: legato has no run-time branching."""
    value = node.input(index)
    if not isinstance(value, Const):
        node.refuse(f"the {what} (input {index}) is computed at run time; legato unrolls "
                    "control flow only when it is known at import time (dynamic control "
                    "flow is not supported)")
    node.require(value.data.size == 1, f"the {what} must hold one value, not "
                                       f"{value.data.size}")
    return np.ravel(value.data)[0].item()


def _body(node, graph, values):
    """Convert `graph` inline with its inputs bound to `values`, in order."""
    node.require(len(graph.input) == len(values), f"its body takes {len(graph.input)} "
                                                  f"inputs, expected {len(values)}")
    return node.scope.subgraph(graph, {v.name: x for v, x in zip(graph.input, values)})


@converter("If", const_inputs=(0,))
def if_(node):
    branch = node.attr("then_branch") if _known(node, 0, "condition") \
        else node.attr("else_branch")
    outputs = _body(node, branch, [])
    node.require(len(outputs) == len(node.outputs), f"the chosen branch has {len(outputs)} "
                                                    f"outputs, the node {len(node.outputs)}")
    return tuple(outputs)


def _stack(node, elements, axis: int, what: str):
    """Per-iteration values stacked along a new `axis`."""
    node.require(elements, f"{what} of zero iterations would have an unknown shape")
    rank = elements[0].rank + 1
    node.require(-rank <= axis < rank, f"{what} axis {axis} is out of range for rank {rank}")
    parts = [node.call("expand_dims", e, axes=[axis % rank]) for e in elements]
    return parts[0] if len(parts) == 1 else node.call("concat", *parts, axis=axis % rank)


@converter("Loop", const_inputs=(0, 1))
def loop(node):
    body = node.attr("body")
    trips = _known(node, 0, "trip count") if node.input(0) is not None else None
    go = bool(_known(node, 1, "condition")) if node.input(1) is not None else True
    node.require(trips is not None or node.input(1) is not None,
                 "a Loop without a trip count or condition never ends")
    carried = [node.arg(i) for i in range(2, len(node.inputs))]
    scans: list[list] = []
    limit = MAX_UNROLL if trips is None else trips
    node.require(limit <= MAX_UNROLL, f"a trip count of {trips} is more than the "
                                      f"{MAX_UNROLL} iterations legato unrolls")
    i = 0
    while go and i < limit:
        outputs = _body(node, body, [Const.of(np.array(i, np.int64)),
                                     Const.of(np.array(go))] + carried)
        cond, carried = outputs[0], outputs[1:1 + len(carried)]
        scans.append(outputs[1 + len(carried):])
        if not isinstance(cond, Const):
            node.refuse(f"the condition computed by iteration {i} depends on run-time data; "
                        "legato unrolls loops only when their end is known at import time "
                        "(dynamic control flow is not supported)")
        go, i = bool(np.ravel(cond.data)[0]), i + 1
    node.require(not go or trips is not None, f"the loop runs past the {MAX_UNROLL} "
                                              "iterations legato unrolls")
    stacked = [_stack(node, [s[k] for s in scans], 0, f"scan output {k}")
               for k in range(len(node.outputs) - len(carried))]
    return tuple(carried + stacked)


@converter("Scan")
def scan(node):
    body, count = node.attr("body"), node.positive("num_scan_inputs", 1)
    states, inputs = node.args()[:-count], node.args()[-count:]
    in_axes = node.attr("scan_input_axes", [0] * count)
    in_dirs = node.attr("scan_input_directions", [0] * count)
    n_out = len(node.outputs) - len(states)
    out_axes = node.attr("scan_output_axes", [0] * n_out)
    out_dirs = node.attr("scan_output_directions", [0] * n_out)
    node.require(len(in_axes) == len(in_dirs) == count and len(out_axes) == len(out_dirs)
                 == n_out, "scan axes and directions must have one entry per scan input "
                               "and output")
    node.require(all(-x.rank <= a < x.rank for a, x in zip(in_axes, inputs)),
                 f"attribute 'scan_input_axes' = {in_axes} does not fit the scan inputs")
    axes = [a % x.rank for a, x in zip(in_axes, inputs)]
    lengths = {x.shape[a] for a, x in zip(axes, inputs)}
    node.require(len(lengths) == 1, f"scan inputs differ in length along their axes: "
                                    f"{sorted(lengths)}")
    steps = lengths.pop()
    node.require(steps <= MAX_UNROLL, f"a scan of {steps} steps is more than the "
                                      f"{MAX_UNROLL} iterations legato unrolls")
    scans: list[list] = []
    for t in range(steps):
        slices = [node.call("take", x, Const.of(np.array(steps - 1 - t if d else t, np.int64)),
                            axis=a) for x, a, d in zip(inputs, axes, in_dirs)]
        outputs = _body(node, body, states + slices)
        states, elements = outputs[:len(states)], outputs[len(states):]
        scans.append(elements)
    stacked = []
    for k, (axis, direction) in enumerate(zip(out_axes, out_dirs)):
        elements = [s[k] for s in scans]
        stacked.append(_stack(node, elements[::-1] if direction else elements, axis,
                              f"scan output {k}"))
    return tuple(states + stacked)
