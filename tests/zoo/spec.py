"""How a zoo architecture is written down: `ZooModel` and the helpers models.py and wide.py
build their entries with."""
from __future__ import annotations

from dataclasses import dataclass, field

SEED = 0
SEQ = 16        # tokens per text example
VOCAB = 128
INIT = 0.1      # initializer_range of the transformer configs


@dataclass(frozen=True)
class ZooModel:
    """One architecture: its transformers config and model class names, the config's
    arguments, and the example input (`tokens`, an image of `image` pixels square, or
    `features`: a float tensor of that shape). `onnx_attention`: the attention implementation
    for the ONNX export when the default (sdpa) cannot be exported: torch.onnx's
    decomposition of sdpa gives a result the model's next `view` rejects. `output`: the
    field of the model's output that is compared; `decoder_ids`: an encoder-decoder that
    also takes the token ids as its decoder's input; `defaults`: the model is called with
    its defaults (defaults.py), and its key/value cache is among the results; `routes`:
    the routes it is checked by."""
    name: str
    config: str
    model: str
    kwargs: dict = field(default_factory=dict)
    tokens: int = 0
    image: int = 0
    features: tuple = ()
    channels: int = 3
    onnx_attention: str = ""
    output: str = "last_hidden_state"
    decoder_ids: bool = False
    defaults: bool = False
    routes: tuple = ("torch", "onnx")

    @property
    def kind(self) -> str:
        return "text" if self.tokens else "vision" if self.image else "audio"


def text(name, config, model, onnx_attention="", decoder_ids=False, **kwargs) -> ZooModel:
    kwargs.setdefault("vocab_size", VOCAB)
    kwargs.setdefault("initializer_range", INIT)
    return ZooModel(name, config, model, kwargs, tokens=SEQ, onnx_attention=onnx_attention,
                    decoder_ids=decoder_ids)


def vision(name, config, model, image=32, onnx_attention="", output="last_hidden_state",
           **kwargs) -> ZooModel:
    return ZooModel(name, config, model, kwargs, image=image, onnx_attention=onnx_attention,
                    output=output)


DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=64, use_cache=False)
