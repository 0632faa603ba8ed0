"""How many high-level ops each zoo model computes, counted from the PyTorch model itself:
what a recomposition pass should find again in the model's ONNX export, where exporters
have written them out as elementwise ops.

    expected("gpt2")  ->  {"gelu": 2, "layer_norm": 5, "attention": 2, "linear": 8, ...}

Counted on the default build (sdpa attention): ATen ops of the unlowered torch.export graph
(aten.gelu, layer_norm, group_norm, softmax, silu, linear, scaled_dot_product_attention,
conv2d/conv1d), plus calls of the modules that write an op as a formula in Python (GPT-2's
tanh gelu, CLIP's quick gelu, every RMSNorm), which no ATen op names. `attention` counts
attention blocks whatever their implementation: sdpa calls, and softmaxes of a matmul's
result (models that write attention out, such as MobileViT); `softmax` counts the others.

    .venv/bin/python -m tests.zoo.composites [MODEL ...]   # prints the table
"""
from __future__ import annotations

import sys
from collections import Counter

from . import models

ATEN_KINDS = {
    "aten.gelu.default": "gelu",
    "aten.layer_norm.default": "layer_norm",
    "aten.group_norm.default": "group_norm",
    "aten.softmax.int": "softmax",
    "aten._softmax.default": "softmax",
    "aten.silu.default": "silu",
    "aten.silu_.default": "silu",
    "aten.linear.default": "linear",
    "aten.addmm.default": "linear",     # GPT-2's Conv1D: x @ W + b
    "aten.scaled_dot_product_attention.default": "attention",
    "aten.conv2d.default": "conv",
    "aten.conv2d.padding": "conv",
    "aten.conv1d.default": "conv",
    "aten.batch_norm.default": "batch_norm",
    "aten._native_batch_norm_legit_no_training.default": "batch_norm",
}
# modules that compute an op with elementwise torch calls rather than one ATen op
MODULE_KINDS = {
    "NewGELUActivation": "gelu",        # tanh form, with pow(x, 3)
    "FastGELUActivation": "gelu",       # tanh form, with x * x
    "AccurateGELUActivation": "gelu",
    "QuickGELUActivation": "quick_gelu",  # x * sigmoid(1.702 x)
    "T5LayerNorm": "rms_norm",          # an RMSNorm despite the name
}
KINDS = ("gelu", "quick_gelu", "layer_norm", "rms_norm", "group_norm", "batch_norm",
         "softmax", "silu", "attention", "linear", "conv")


def _module_kind(module) -> str | None:
    name = type(module).__name__
    return MODULE_KINDS.get(name) or ("rms_norm" if "RMSNorm" in name else None)


def expected(name: str) -> dict[str, int]:
    """{kind: count} of zoo model `name` (kinds with no occurrence left out)."""
    import torch
    module, inputs = models.build(name)
    counts: Counter = Counter()
    hooks = [m.register_forward_hook(lambda mod, args, out, kind=kind: counts.update([kind]))
             for m in module.modules() if (kind := _module_kind(m)) is not None]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for hook in hooks:
            hook.remove()
    program = torch.export.export(module, inputs)
    for node in program.graph.nodes:
        kind = ATEN_KINDS.get(str(node.target)) if node.op == "call_function" else None
        if kind == "softmax" and _scores_of_matmul(node):
            kind = "attention"
        if kind is not None:
            counts[kind] += 1
    return {kind: counts[kind] for kind in KINDS if counts[kind]}


SCORE_STEPS = ("aten.add", "aten.sub", "aten.mul", "aten.div", "aten.masked_fill",
               "aten.where", "aten.to", "aten._to_copy", "aten.contiguous")


def _scores_of_matmul(node, depth: int = 4) -> bool:
    """Whether a softmax's input is a matmul's result, through a few elementwise steps
    (scale, mask, bias): attention scores."""
    for _ in range(depth):
        source = node.args[0] if node.args else None
        if not hasattr(source, "target"):
            return False
        target = str(source.target)
        if target.startswith(("aten.matmul", "aten.bmm", "aten.einsum")):
            return True
        if not target.startswith(SCORE_STEPS):
            return False
        node = source
    return False


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(models.NAMES)
    print(f"{'model':<16}" + "".join(f"{k:>11}" for k in KINDS))
    for name in names:
        row = expected(name)
        print(f"{name:<16}" + "".join(f"{row.get(k, 0):>11}" for k in KINDS), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
