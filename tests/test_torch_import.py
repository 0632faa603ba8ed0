"""The PyTorch importer against torch eager (needs the local torch CPU wheel)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402


class LayerNormMLP(nn.Module):
    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(d), nn.Linear(d, hidden)

    def forward(self, x):
        return F.gelu(self.fc(self.norm(x)))


class EncoderBlock(nn.Module):
    """A pre-LN transformer encoder block: attention and a GELU MLP, both residual."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = (z.reshape(n, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=-1))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(n, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def check_against_eager(module, *inputs, backend="cpu_ref", atol=1e-5):
    torch.manual_seed(0)
    mod = torch_frontend.load(module, inputs)
    with torch.no_grad():
        want = module(*inputs).numpy()
    got = legato.compile(mod, backend)(*(t.numpy() for t in inputs))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
    return mod


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_layernorm_linear_gelu_matches_eager():
    mod = check_against_eager(LayerNormMLP().eval(), torch.randn(4, 16))
    assert [c.op for c in mod.main.calls] == ["nn.layer_norm", "nn.linear", "nn.gelu"]


def test_transformer_encoder_block_matches_eager():
    mod = check_against_eager(EncoderBlock().eval(), torch.randn(2, 8, 32))
    ops = {c.op for c in mod.main.calls}
    assert {"nn.layer_norm", "nn.linear", "nn.attention", "nn.gelu"} <= ops


def test_torch_transformer_encoder_layer_matches_eager():
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    check_against_eager(layer, torch.randn(2, 6, 32))


def test_small_cnn_matches_eager():
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(8, 4, 3, stride=2), nn.SiLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5)).eval()
    check_against_eager(cnn, torch.randn(2, 3, 12, 12))


def test_unsupported_aten_ops_are_listed_with_node_names():
    class Sorts(nn.Module):
        def forward(self, x):
            return torch.cummax(x, 0).values + torch.logcumsumexp(x, 0)

    with pytest.raises(legato.LegatoError, match=r"ATen op\(s\) legato cannot import"):
        torch_frontend.load(Sorts(), (torch.randn(4),))


@pytest.mark.skipif("tosa_custom" not in legato.list_backends(),
                    reason="the tosa_custom backend is not installed")
def test_kept_layer_norm_becomes_one_tosa_custom():
    mod = torch_frontend.load(LayerNormMLP().eval(), (torch.randn(4, 16),))
    config = {"backends": {"tosa_custom": {"keep": ["nn.layer_norm"]}}}
    artifact = legato.compile(mod, "tosa_custom", config=config).artifact
    assert artifact.count('"tosa.custom"') == 1
