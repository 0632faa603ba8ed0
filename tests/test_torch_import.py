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
            return torch.i0(x) + torch.polygamma(2, x)

    with pytest.raises(legato.LegatoError, match=r"ATen op\(s\) legato cannot import"):
        torch_frontend.load(Sorts(), (torch.randn(4),))


@pytest.mark.skipif("tosa_custom" not in legato.list_backends(),
                    reason="the tosa_custom backend is not installed")
def test_kept_layer_norm_becomes_one_tosa_custom():
    mod = torch_frontend.load(LayerNormMLP().eval(), (torch.randn(4, 16),))
    config = {"backends": {"tosa_custom": {"keep": ["nn.layer_norm"]}}}
    artifact = legato.compile(mod, "tosa_custom", config=config).artifact
    assert artifact.count('"tosa.custom"') == 1


class TrainingBatchNorm(nn.Module):
    """batch_norm on batch statistics, updating the running ones in place (an input
    mutation the exported program returns besides the user's results)."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, mean, var, weight, bias):
        return self.op(x, mean, var, weight, bias)


@pytest.mark.parametrize("op, count", [
    (lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=True, momentum=0.3), 1),
    (lambda x, m, v, w, b: torch.native_batch_norm(x, w, b, m, v, True, 0.3, 1e-5), 3)])
def test_training_batch_norm_has_eagers_results_not_its_mutations(op, count):
    inputs = (torch.randn(3, 4, 5), torch.randn(4), torch.rand(4) + 0.5, torch.randn(4),
              torch.randn(4))
    mod = torch_frontend.load(TrainingBatchNorm(op), inputs)
    got = legato.compile(mod, "cpu_ref")(*(t.numpy() for t in inputs))
    with torch.no_grad():
        want = op(*(t.clone() for t in inputs))
    got, want = (list(r) if isinstance(r, (tuple, list)) else [r] for r in (got, want))
    assert len(mod.main.results) == len(got) == len(want) == count
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_functional_batch_norm_converter_updates_the_running_statistics():
    # the converter's running-statistics results against eager's in-place updates
    from legato.frontends.torch.ops import ATEN
    x, mean, var = torch.randn(6, 3, 2), torch.randn(3), torch.rand(3) + 0.5
    b = legato.GraphBuilder()
    values = [b.input(n, tuple(t.shape)) for n, t in (("x", x), ("m", mean), ("v", var))]
    convert = ATEN["aten._native_batch_norm_legit_functional.default"]
    results = convert(b, values[0], None, None, values[1], values[2], True, 0.2, 1e-5)
    got = legato.compile(b.build(*results), "cpu_ref")(x.numpy(), mean.numpy(), var.numpy())
    eager_mean, eager_var = mean.clone(), var.clone()
    F.batch_norm(x, eager_mean, eager_var, training=True, momentum=0.2, eps=1e-5)
    np.testing.assert_allclose(got[3], eager_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[4], eager_var.numpy(), rtol=1e-5, atol=1e-6)


def test_a_failing_pytorch_decomposition_is_a_legato_error_naming_the_node():
    class HalfAddcmul(nn.Module):  # eager runs it; torch's int addcmul ref refuses value=0.5
        def forward(self, x, y):
            z = x.clone()
            z.addcmul_(y, y, value=0.5)
            return z
    x = torch.ones(3, dtype=torch.int64)
    with pytest.raises(legato.LegatoError, match=r"decompositions .* failed: .*addcmul"):
        torch_frontend.load(HalfAddcmul(), (x, x))


def test_decomposition_table_is_built_once_without_the_kept_ops():
    from legato.frontends.torch.ops import KEEP
    table = torch_frontend.decomposition_table()
    assert table is torch_frontend.decomposition_table()
    assert torch.ops.aten.gelu.default not in table and len(KEEP) > 5
    assert all(torch_frontend._aten_overload(torch, name) not in table for name in KEEP)
    assert torch.ops.aten.addcmul.default in table  # decomposed: legato has no addcmul


def test_a_bfloat16_buffer_imports_as_a_bfloat16_constant():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor(3.0, dtype=torch.bfloat16))

        def forward(self, x):
            return x * self.scale.to(x.dtype)
    x = torch.randn(4)
    mod = torch_frontend.load(Scaled(), (x,))
    np.testing.assert_allclose(legato.compile(mod, "cpu_ref")(x.numpy()), x.numpy() * 3.0)


def test_values_only_asserts_read_are_not_imported():
    class CheckedLengths(nn.Module):  # XLM: assert lengths.max().item() <= slen
        def forward(self, x, lengths):
            torch._check(lengths.max().item() <= x.shape[1])
            return x * 2
    x, lengths = torch.randn(2, 5), torch.tensor([3, 5])
    mod = torch_frontend.load(CheckedLengths(), (x, lengths))
    assert [c.op for c in mod.main.calls] == ["multiply"]
    np.testing.assert_allclose(legato.compile(mod, "cpu_ref")(x.numpy(), lengths.numpy()),
                               x.numpy() * 2)
