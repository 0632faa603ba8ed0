"""README's "Generation with a KV cache" recipe as code, for tests/test_decoder_cache.py
and benchmarks/generate.py: its python blocks (the first defines the export wrapper and
the greedy loop, the second runs them on a GPT-2), and Hugging Face decoders of the two
styles from small configs with random weights."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Generation with a KV cache"


def blocks() -> list[str]:
    """The python blocks of the README's section, in order."""
    section = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python[^\n]*\n(.*?)\n```", section, re.S)


def definitions() -> dict:
    """The names the recipe defines (Step, cache_shape, export, generate)."""
    namespace: dict = {"__name__": "readme_recipe"}
    exec(compile(blocks()[0], str(README), "exec"), namespace)
    return namespace


def decoder(style: str, layers: int = 2, hidden: int = 32, heads: int = 4,
            vocab: int = 128, seed: int = 0):
    """A GPT-2 or a Llama (grouped-query attention with half the heads, rotary positions,
    RMSNorm, SiLU gates) in eval mode, with weights large enough (initializer_range 0.5)
    that greedy tokens vary, eager attention, and no end-of-sequence token (generate
    always gives every token asked for)."""
    import torch
    import transformers
    common = dict(vocab_size=vocab, initializer_range=0.5, attn_implementation="eager",
                  eos_token_id=None)
    if style == "gpt2":
        config = transformers.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads,
                                         **common)
        make = transformers.GPT2LMHeadModel
    elif style == "llama":
        config = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=4 * hidden,
                                          num_hidden_layers=layers, num_attention_heads=heads,
                                          num_key_value_heads=max(1, heads // 2), **common)
        make = transformers.LlamaForCausalLM
    else:
        raise ValueError(f"decoder style {style!r} is not gpt2 or llama")
    torch.manual_seed(seed)
    return make(config).eval()
