"""ONNX RNN, GRU and LSTM unrolled over their static sequence length into matmuls, adds and
activations: forward, reverse and bidirectional, layouts 0 and 1, constant sequence_lens
(steps past a sequence's end keep its state and output zeros)."""
from __future__ import annotations

import numpy as np

from ...ir import Const
from .convert import converter

# ONNX activation name -> (how many of activation_alpha/beta it takes, builder)
ACTIVATIONS = {
    "Tanh": (0, 0, lambda n, x: n.call("tanh", x)),
    "Sigmoid": (0, 0, lambda n, x: n.call("sigmoid", x)),
    "Relu": (0, 0, lambda n, x: n.call("nn.relu", x)),
    "Softsign": (0, 0, lambda n, x: n.call("nn.softsign", x)),
    "Softplus": (0, 0, lambda n, x: n.call("nn.softplus", x)),
    "LeakyRelu": (1, 0, lambda n, x, a=0.01: n.call("nn.leaky_relu", x, alpha=a)),
    "ThresholdedRelu": (1, 0, lambda n, x, a=1.0: n.call("nn.thresholded_relu", x, alpha=a)),
    "Elu": (1, 0, lambda n, x, a=1.0: n.call("nn.elu", x, alpha=a)),
    "HardSigmoid": (1, 1, lambda n, x, a=0.2, b=0.5: n.call("nn.hardsigmoid", x, alpha=a,
                                                             beta=b)),
    "Affine": (1, 1, lambda n, x, a=1.0, b=0.0: n.call("add", n.call("multiply", x, a), b)),
    "ScaledTanh": (1, 1, lambda n, x, a=1.0, b=1.0: n.call(
        "multiply", n.call("tanh", n.call("multiply", x, b)), a)),
}
# per layer type: gates, default activations per direction
LAYERS = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
          "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}


def _activations(node, directions: int):
    """Per direction, the list of activation functions (each x -> value)."""
    per_direction = LAYERS[node.op][1]
    names = node.attr("activations", per_direction * directions)
    node.require(len(names) == len(per_direction) * directions,
                 f"attribute 'activations' has {len(names)} entries, expected "
                 f"{len(per_direction) * directions}")
    alphas, betas = list(node.attr("activation_alpha", [])), list(node.attr("activation_beta", []))
    functions = []
    for name in names:
        key = next((k for k in ACTIVATIONS if k.lower() == name.lower()), None)
        node.require(key is not None, f"activation {name!r} is none of {', '.join(ACTIVATIONS)}")
        takes_alpha, takes_beta, build = ACTIVATIONS[key]
        params = []
        if takes_alpha and alphas:
            params.append(alphas.pop(0))
            if takes_beta and betas:
                params.append(betas.pop(0))
        functions.append(lambda x, build=build, params=tuple(params): build(node, x, *params))
    size = len(per_direction)
    return [functions[d * size:(d + 1) * size] for d in range(directions)]


def _step_lengths(node, batch: int, steps: int):
    """Per batch entry, how many steps it runs: sequence_lens if given (constant)."""
    if node.input(4) is None:
        return [steps] * batch
    value = node.input(4)
    if not isinstance(value, Const):
        node.refuse("sequence_lens (input 4) is computed at run time; legato unrolls "
                    "recurrent layers over lengths known at import time")
    lengths = [int(v) for v in np.ravel(value.data)]
    node.require(len(lengths) == batch and all(0 <= n <= steps for n in lengths),
                 f"sequence_lens {lengths[:8]} must give {batch} lengths of 0 to {steps}")
    return lengths


@converter("RNN", "GRU", "LSTM", const_inputs=(4,))
def recurrent(node):
    gates, _ = LAYERS[node.op]
    x, w, r = node.arg(0), node.arg(1), node.arg(2)
    layout = node.attr("layout", 0)
    node.require(layout in (0, 1), f"attribute 'layout' = {layout} must be 0 or 1")
    node.require(x.rank == 3, f"input X must be 3-D, got {x.type}")
    if layout:
        x = node.call("permute_dims", x, axes=[1, 0, 2])
    steps, batch, _ = x.shape
    direction = node.attr("direction", "forward")
    node.require(direction in ("forward", "reverse", "bidirectional"),
                 f"attribute 'direction' = {direction!r} is none of forward, reverse, "
                 "bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    hidden = node.attr("hidden_size", r.shape[-1])
    node.require(w.shape[0] == directions and w.shape[1] == gates * hidden and
                 r.shape == (directions, gates * hidden, hidden),
                 f"W {w.type} and R {r.type} do not fit {directions} direction(s) of "
                 f"{gates} gate(s) of hidden size {hidden}")
    lengths = _step_lengths(node, batch, steps)
    functions = _activations(node, directions)
    initial = [node.input(5), node.input(6) if node.op == "LSTM" else None]
    if layout:
        initial = [None if v is None else node.call("permute_dims", v, axes=[1, 0, 2])
                   for v in initial]
    results = []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        results.append(_direction(node, x, d, reverse, hidden, lengths, functions[d], initial))
    ys, hs, cs = zip(*results)
    y = node.call("concat", *ys, axis=1) if directions > 1 else ys[0]   # [T, D, B, H]
    y_h = node.call("concat", *hs, axis=0) if directions > 1 else hs[0]  # [D, B, H]
    y_c = (node.call("concat", *cs, axis=0) if directions > 1 else cs[0]) \
        if node.op == "LSTM" else None
    if layout:
        y = node.call("permute_dims", y, axes=[2, 0, 1, 3])
        y_h = node.call("permute_dims", y_h, axes=[1, 0, 2])
        y_c = None if y_c is None else node.call("permute_dims", y_c, axes=[1, 0, 2])
    return (y, y_h) if node.op != "LSTM" else (y, y_h, y_c)


def _pick(node, value, index: int):
    """value[index] along axis 0."""
    return node.call("take", value, Const.of(np.array(index, np.int64)), axis=0)


def _direction(node, x, d: int, reverse: bool, hidden: int, lengths, functions, initial):
    """(Y [T, 1, B, H], Y_h [1, B, H], Y_c [1, B, H] or None) of one direction."""
    gates, _ = LAYERS[node.op]
    steps, batch, _ = x.shape
    w_t = node.call("permute_dims", _pick(node, node.arg(1), d), axes=[1, 0])   # [I, G*H]
    r = _pick(node, node.arg(2), d)                                             # [G*H, H]
    r_parts = node.call("split", r, sections=[hidden] * gates, axis=0) if gates > 1 else (r,)
    r_parts = [node.call("permute_dims", p, axes=[1, 0]) for p in r_parts]      # [H, H] each
    projected = node.call("matmul", x, w_t)                                     # [T, B, G*H]
    rb = None
    if node.input(3) is not None:
        bias = _pick(node, node.arg(3), d)                                      # [2*G*H]
        wb, rb_all = node.call("split", bias, sections=[gates * hidden] * 2, axis=0)
        projected = node.call("add", projected, wb)
        rb = node.call("split", rb_all, sections=[hidden] * gates, axis=0) if gates > 1 \
            else (rb_all,)
    dtype = x.dtype
    zeros = Const.of(np.zeros((batch, hidden), dtype))
    h = zeros if initial[0] is None else _pick(node, initial[0], d)
    c = zeros if initial[1] is None else _pick(node, initial[1], d)
    peep = None
    if node.op == "LSTM" and node.input(7) is not None:
        peep = node.call("split", _pick(node, node.arg(7), d), sections=[hidden] * 3, axis=0)
    clip = node.attr("clip")
    outputs = [None] * steps
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        xw = _pick(node, projected, t)
        x_parts = node.call("split", xw, sections=[hidden] * gates, axis=1) if gates > 1 \
            else (xw,)

        def recur(g, state, x_parts=x_parts):
            value = node.call("matmul", state, r_parts[g])
            return value if rb is None else node.call("add", value, rb[g])

        def gate(g, state, extra=None, x_parts=x_parts):
            value = node.call("add", x_parts[g], recur(g, state))
            value = value if extra is None else node.call("add", value, extra)
            return value if clip is None else node.call("clip", value, min=-clip, max=clip)

        new_h, new_c = STEPS[node.op](node, gate, recur, x_parts, h, c, peep, functions, clip)
        live = [t < n for n in lengths]
        if not all(live):   # past a sequence's end: keep the state, output zeros
            mask = Const.of(np.array(live).reshape(batch, 1))
            out = node.call("where", mask, new_h, zeros)
            new_h = node.call("where", mask, new_h, h)
            new_c = None if new_c is None else node.call("where", mask, new_c, c)
        else:
            out = new_h
        h, c, outputs[t] = new_h, new_c, out
    y = node.call("concat", *[node.call("expand_dims", o, axes=[0, 1]) for o in outputs],
                  axis=0) if steps > 1 else node.call("expand_dims", outputs[0], axes=[0, 1])
    y_h = node.call("expand_dims", h, axes=[0])
    y_c = node.call("expand_dims", c, axes=[0]) if node.op == "LSTM" else None
    return y, y_h, y_c


def _rnn_step(node, gate, recur, x_parts, h, c, peep, functions, clip):
    return functions[0](gate(0, h)), None


def _gru_step(node, gate, recur, x_parts, h, c, peep, functions, clip):
    f, g = functions
    z, r = f(gate(0, h)), f(gate(1, h))
    if node.attr("linear_before_reset", 0):
        candidate = node.call("add", x_parts[2], node.call("multiply", r, recur(2, h)))
    else:
        candidate = node.call("add", x_parts[2], recur(2, node.call("multiply", r, h)))
    if clip is not None:
        candidate = node.call("clip", candidate, min=-clip, max=clip)
    candidate = g(candidate)
    # (1 - z) * candidate + z * h
    return node.call("add", candidate, node.call("multiply", z,
                                                 node.call("subtract", h, candidate))), None


def _lstm_step(node, gate, recur, x_parts, h, c, peep, functions, clip):
    f, g, act_h = functions
    i = f(gate(0, h, None if peep is None else node.call("multiply", peep[0], c)))
    if node.attr("input_forget", 0):
        forget = node.call("subtract", 1.0, i)
    else:
        forget = f(gate(2, h, None if peep is None else node.call("multiply", peep[2], c)))
    cell = g(gate(3, h))
    new_c = node.call("add", node.call("multiply", forget, c), node.call("multiply", i, cell))
    o = f(gate(1, h, None if peep is None else node.call("multiply", peep[1], new_c)))
    return node.call("multiply", o, act_h(new_c)), new_c


STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}
