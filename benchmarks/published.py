"""What the benchmarks of models at their published sizes share: where exports are cached,
and transformers models built from configs (random weights, He-normal convolutions)
returning their last hidden state alone."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

CACHE = Path(os.environ.get("LEGATO_BENCH_CACHE", Path.home() / ".cache" / "legato-bench"))
SEED = 0


def transformers_model(config_name: str, model_name: str, kwargs: dict, seed: int = SEED):
    """transformers' `model_name` (a dotted path under transformers for classes it does
    not export at the top, e.g. models.whisper.modeling_whisper.WhisperEncoder) built from
    `config_name(**kwargs)`, in eval mode, returning its last hidden state."""
    import torch
    import transformers

    from tests.zoo.models import _he_init
    head, _, last = model_name.rpartition(".")
    owner = importlib.import_module(f"transformers.{head}") if head else transformers
    torch.manual_seed(seed)
    model = getattr(owner, last)(getattr(transformers, config_name)(**kwargs))
    _he_init(torch, model)  # touches convolutions and batch norms only
    return last_hidden_state(model)


def last_hidden_state(model):
    """`model` wrapped to return `model(x).last_hidden_state`, in eval mode."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x).last_hidden_state
    return Hidden().eval()


def export_onnx(model, example: dict, path: Path, dynamic_axes=None) -> Path:
    """`model` exported to `path` on the numpy inputs `example` (opset 17, the TorchScript
    exporter), written under a temporary name first so an interrupted export is not
    taken for a cached one."""
    import torch
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with torch.no_grad():
        torch.onnx.export(model, tuple(torch.from_numpy(a) for a in example.values()),
                          str(tmp), input_names=list(example), output_names=["y"],
                          opset_version=17, dynamo=False, dynamic_axes=dynamic_axes)
    tmp.rename(path)
    return path
