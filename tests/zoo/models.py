"""The public model zoo: Hugging Face `transformers` architectures built from configs written
here, with random weights (nothing is downloaded), at small sizes.

    module, inputs = build("llama")      # eval-mode torch module, example input tuple
    module(*inputs)                      # one tensor: last_hidden_state

Every model is deterministic (seeded weights and inputs). Conv weights are He-initialised and
batch-norm statistics randomised, so feature maps keep their scale through deep CNNs and a
comparison with eager means something; transformer weights use `initializer_range` 0.1 so
attention is not uniform. Each model is wrapped to return one tensor (and, called with its
defaults, its cache: defaults.py).
"""
from __future__ import annotations

import os

from .spec import DECODER as _DECODER, INIT, SEED, SEQ, VOCAB, ZooModel
from .spec import text as _text, vision as _vision

__all__ = ["CORE", "DEFAULTS", "NAMES", "SEED", "SEQ", "VOCAB", "WIDE", "ZOO", "ZooModel", "build",
           "example_inputs"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs are built in code: never the hub
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

ZOO: dict[str, ZooModel] = {m.name: m for m in (
    # encoders over tokens
    _text("distilbert", "DistilBertConfig", "DistilBertModel", dim=64, n_layers=2, n_heads=4,
          hidden_dim=128, max_position_embeddings=64),
    _text("roberta", "RobertaConfig", "RobertaModel", hidden_size=64, num_hidden_layers=2,
          num_attention_heads=4, intermediate_size=128, max_position_embeddings=64),
    _text("albert", "AlbertConfig", "AlbertModel", embedding_size=32, hidden_size=64,
          num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
          max_position_embeddings=64),
    _text("t5_encoder", "T5Config", "T5EncoderModel", d_model=64, d_kv=16, d_ff=128,
          num_layers=2, num_heads=4, initializer_factor=1.0, use_cache=False,
          onnx_attention="eager"),
    # decoders over tokens (causal masks, rotary embeddings)
    _text("gpt2", "GPT2Config", "GPT2Model", n_embd=64, n_layer=2, n_head=4, n_positions=64,
          bos_token_id=1, eos_token_id=2, use_cache=False),
    _text("opt", "OPTConfig", "OPTModel", hidden_size=64, ffn_dim=128, num_hidden_layers=2,
          num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64,
          use_cache=False),
    _text("llama", "LlamaConfig", "LlamaModel", num_key_value_heads=2, **_DECODER),
    _text("qwen2", "Qwen2Config", "Qwen2Model", num_key_value_heads=2, **_DECODER),
    _text("mistral", "MistralConfig", "MistralModel", num_key_value_heads=2, **_DECODER),
    _text("phi", "PhiConfig", "PhiModel", partial_rotary_factor=0.5, **_DECODER),
    # audio
    ZooModel("whisper_encoder", "WhisperConfig", "WhisperEncoder",
             dict(num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                  encoder_ffn_dim=128, max_source_positions=8, init_std=INIT,
                  vocab_size=VOCAB, pad_token_id=1, bos_token_id=2, eos_token_id=2,
                  decoder_start_token_id=3, begin_suppress_tokens=None),
             features=(1, 16, 16)),
    # vision transformers
    _vision("vit", "ViTConfig", "ViTModel", hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=4,
            initializer_range=INIT),
    _vision("deit", "DeiTConfig", "DeiTModel", hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=4,
            initializer_range=INIT),
    _vision("clip_vision", "CLIPVisionConfig", "CLIPVisionModel", hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=4, initializer_range=INIT),
    _vision("swin", "SwinConfig", "SwinModel", image_size=32, patch_size=2, embed_dim=32,
            depths=(2, 2), num_heads=(2, 4), window_size=4, initializer_range=INIT,
            onnx_attention="eager"),
    _vision("segformer", "SegformerConfig", "SegformerModel", image=64, num_encoder_blocks=2,
            depths=(1, 1), sr_ratios=(2, 1), hidden_sizes=(32, 64), patch_sizes=(7, 3),
            strides=(4, 2), num_attention_heads=(1, 2), mlp_ratios=(2, 2),
            initializer_range=INIT),
    _vision("mobilevit", "MobileViTConfig", "MobileViTModel", image=64, image_size=64,
            hidden_sizes=(32, 48, 64), neck_hidden_sizes=(8, 16, 24, 32, 40, 48, 96),
            num_attention_heads=2, expand_ratio=2.0, initializer_range=INIT),
    # CNNs
    _vision("resnet", "ResNetConfig", "ResNetModel", image=64, embedding_size=32,
            hidden_sizes=(32, 64, 128, 256), depths=(1, 1, 1, 1), layer_type="basic"),
    _vision("mobilenet_v2", "MobileNetV2Config", "MobileNetV2Model", image=64,
            image_size=64, depth_multiplier=0.35),
    _vision("convnext", "ConvNextConfig", "ConvNextModel", image=64, hidden_sizes=(32, 64),
            depths=(1, 1), num_stages=2),
    _vision("efficientnet", "EfficientNetConfig", "EfficientNetModel", image=64, image_size=64,
            width_coefficient=0.5, depth_coefficient=1.0, kernel_sizes=(3, 5),
            in_channels=(32, 16), out_channels=(16, 24), strides=(1, 2),
            num_block_repeats=(1, 1), expand_ratios=(1, 4),
            hidden_dim=640),  # the top conv's width: 1280 scaled by width_coefficient
    _vision("regnet", "RegNetConfig", "RegNetModel", image=64, embedding_size=16,
            hidden_sizes=(16, 32), depths=(1, 1), groups_width=8, layer_type="y"),
)}

CORE = tuple(ZOO)  # the architectures issue 11 names, and a few more
from .wide import WIDE  # noqa: E402  (more architectures, each with what it exercises)

ZOO.update((m.name, m) for m in WIDE)
from .defaults import defaults_of  # noqa: E402  (the decoders called with their defaults)

DEFAULTS = defaults_of(ZOO)
ZOO.update((m.name, m) for m in DEFAULTS)
NAMES = tuple(ZOO)


def _wrap(torch, model, spec: ZooModel):
    class Wrapped(torch.nn.Module):
        """The model returning one tensor: its `spec.output` (last_hidden_state); called
        with its defaults, that and its key/value cache."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x, decoder_input_ids=x) if spec.decoder_ids else self.model(x)
            if spec.defaults:  # the cache too, flattened as torch.export flattens it
                return getattr(out, spec.output), out.cache
            return getattr(out, spec.output)

    return Wrapped()


def _he_init(torch, model) -> None:
    """He-normal conv weights and random batch-norm statistics and affine parameters, so
    activations neither vanish nor blow up through the depth of a random CNN."""
    gen = torch.Generator().manual_seed(SEED + 1)
    nn = torch.nn
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
                fan_in = layer.weight[0].numel()
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen)
                                   * (2.0 / fan_in) ** 0.5)
                if layer.bias is not None:
                    layer.bias.copy_(0.1 * torch.randn(layer.bias.shape, generator=gen))
            elif isinstance(layer, (nn.BatchNorm1d, nn.BatchNorm2d)) and \
                    layer.running_mean is not None:
                shape = layer.running_mean.shape
                layer.running_mean.copy_(0.1 * torch.randn(shape, generator=gen))
                layer.running_var.copy_(0.5 + torch.rand(shape, generator=gen))
                layer.weight.copy_(1.0 + 0.1 * torch.randn(shape, generator=gen))
                layer.bias.copy_(0.1 * torch.randn(shape, generator=gen))


def example_inputs(spec: ZooModel):
    """The fixed example input of a model: int64 token ids (none of them special ids such as
    padding) or float32 pixel values / audio features."""
    import torch
    gen = torch.Generator().manual_seed(SEED + 2)
    if spec.tokens:
        return (torch.randint(4, VOCAB, (1, spec.tokens), generator=gen, dtype=torch.int64),)
    shape = spec.features or (1, spec.channels, spec.image, spec.image)
    return (torch.randn(shape, generator=gen, dtype=torch.float32),)


def build(name: str, attention: str | None = None):
    """(module, inputs): the eval-mode torch module of zoo model `name`, returning one
    tensor, and its example input tuple; `attention` overrides the attention
    implementation ("eager", "sdpa")."""
    import torch
    import transformers
    if name not in ZOO:
        raise KeyError(f"no zoo model {name!r}; the zoo has {', '.join(NAMES)}")
    spec = ZOO[name]
    if spec.defaults:  # transformers' own registration of its cache with torch's pytrees
        from transformers.integrations.executorch import register_dynamic_cache_export_support
        register_dynamic_cache_export_support()
    config = getattr(transformers, spec.config)(**spec.kwargs)
    if attention:
        config._attn_implementation = attention
    model_class = getattr(transformers, spec.model, None)
    if model_class is None:  # e.g. WhisperEncoder lives only in its modeling module
        import importlib
        kind = config.model_type
        model_class = getattr(importlib.import_module(
            f"transformers.models.{kind}.modeling_{kind}"), spec.model)
    torch.manual_seed(SEED)
    model = model_class(config)
    _he_init(torch, model)
    return _wrap(torch, model, spec).eval(), example_inputs(spec)
