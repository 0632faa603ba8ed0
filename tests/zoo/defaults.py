"""The zoo's decoders called with their defaults, as their documentation calls them: entry
`<name>_defaults` is zoo model `<name>` without the arguments the zoo otherwise sets only to
turn a default off (`use_cache=False`, `experts_implementation="batched_mm"`).

So the decoder keeps its key/value cache, which is among its results: last_hidden_state,
then transformers' DynamicCache as torch.export flattens it (every layer's keys, then every
layer's values; the first step's cache grows from torch.tensor([]), which torch's `cat`
skips). A mixture of experts runs transformers' default experts path: `histc` counts the
tokens per expert and the custom op `transformers::grouped_mm_fallback` multiplies them.
torch.onnx.export has no ONNX function for that custom op, so these MoE entries are checked
through torch.export only.
"""
from __future__ import annotations

import dataclasses

from .spec import ZooModel

TURNED_OFF = ("use_cache", "experts_implementation")  # what the other entries set
# every decoder of the zoo whose cache is transformers' DynamicCache and on by default
# (MPT's config turns it off)
DECODERS = ("gpt2", "opt", "llama", "qwen2", "mistral", "phi", "gpt_neo", "gptj", "codegen",
            "bloom", "gpt_bigcode", "gemma", "gemma2", "stablelm", "starcoder2",
            "qwen3", "olmo", "phi3", "olmo2", "gemma3_text", "gpt_neox", "falcon",
            "mixtral", "qwen2_moe")


def with_defaults(spec: ZooModel) -> ZooModel:
    kwargs = {k: v for k, v in spec.kwargs.items() if k not in TURNED_OFF}
    routes = ("torch",) if "experts_implementation" in spec.kwargs else spec.routes
    return dataclasses.replace(spec, name=f"{spec.name}_defaults", kwargs=kwargs,
                               defaults=True, routes=routes)


def defaults_of(zoo: dict) -> tuple[ZooModel, ...]:
    return tuple(with_defaults(zoo[name]) for name in DECODERS)
