"""PyTorch's PT2E quantization (torchao's prepare_pt2e / convert_pt2e) through torch.export:
the `quantized_decomposed` quantize and dequantize calls import as qnn.quantize and
qnn.dequantize, legato.compile folds the dequantize -> op -> quantize regions into qnn ops,
and the result matches the converted model run eagerly (which computes every op in float
between its dequantize and quantize calls) within one quantization step."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402
from legato.ir.errors import LegatoError  # noqa: E402

BACKENDS = ["cpu_ref", "c_kernels"]
QD = torch.ops.quantized_decomposed


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(self.conv2(x), 2)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


class Block(torch.nn.Module):
    """A transformer block: attention by matmuls, then a relu MLP, each with a residual."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.up, self.down = torch.nn.Linear(dim, 2 * dim), torch.nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        y = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(b, t, d)
        x = self.norm(x + self.out(y))
        return x + self.down(torch.relu(self.up(x)))


SHAPES = {"cnn": (4, 3, 16, 16), "block": (8, 8, 32)}


def x86(dynamic=False):
    """The X86 Inductor recipe: uint8 activations, int8 weights per channel."""
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86q
    config = x86q.get_default_x86_inductor_quantization_config(is_dynamic=dynamic)
    return x86q.X86InductorQuantizer().set_global(config)


def xnnpack(matmul=False):
    """XNNPACK's symmetric int8 recipe (weights in [-127, 127]); `matmul`: with matmul's
    operands and result quantized too, as a backend running int8 attention asks for (the
    shipped recipes leave a matmul's operands, X86, or its result, XNNPACK, float)."""
    from torchao.quantization.pt2e.quantizer import ComposableQuantizer, Quantizer
    from torchao.quantization.pt2e.quantizer.quantizer import QuantizationAnnotation
    from torchao.testing.pt2e._xnnpack_quantizer import (XNNPACKQuantizer,
                                                         get_symmetric_quantization_config)
    config = get_symmetric_quantization_config(is_per_channel=True)
    quantizer = XNNPACKQuantizer().set_global(config)

    class Matmul(Quantizer):
        def annotate(self, model):
            spec = config.input_activation
            for node in model.graph.nodes:
                if node.target == torch.ops.aten.matmul.default:
                    node.meta["quantization_annotation"] = QuantizationAnnotation(
                        input_qspec_map={a: spec for a in node.args}, output_qspec=spec,
                        _annotated=True)
            return model

        def validate(self, model):
            pass
    return ComposableQuantizer([quantizer, Matmul()]) if matmul else quantizer


def quantized(model_class, shape, quantizer):
    """A `model_class` through PT2E: exported, observed on two calibration batches,
    converted."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    torch.manual_seed(0)
    model = model_class().eval()
    example = (torch.randn(shape),)
    prepared = prepare_pt2e(torch.export.export(model, example).module(), quantizer)
    for _ in range(2):
        prepared(torch.randn(shape))
    return convert_pt2e(prepared), example


def output_step(converted, want: np.ndarray) -> float:
    """One quantization step of the output: the scale of the dequantize that gives it, or,
    where the model returns a float op's result, the step a uint8 observer would take
    over eager's output range."""
    out = next(n for n in converted.graph.nodes if n.op == "output").args[0][0]
    if out.target in (QD.dequantize_per_tensor.default, QD.dequantize_per_tensor.tensor):
        return float(out.args[1])
    return float(want.max() - want.min()) / 255


# name -> (model, quantizer, qnn ops folded, float ops left between dequantize and quantize)
FLOWS = {
    # X86 (uint8 activations) quantizes no linear result here: the classifier stays float
    "cnn-x86": (CNN, x86, {"qnn.conv2d": 2, "qnn.global_avg_pool2d": 1,
                           "nn.max_pool2d (int8)": 1, "reshape (int8)": 1}, set()),
    "cnn-xnnpack": (CNN, xnnpack, {"qnn.conv2d": 2, "qnn.global_avg_pool2d": 1,
                                   "qnn.linear": 1, "nn.max_pool2d (int8)": 1,
                                   "reshape (int8)": 1}, set()),
    # the softmax stays float: its PT2E output scale is not 1/n, which qnn.softmax needs;
    # the heads are split by reshape, permute_dims, strided_slice and squeeze, data
    # movement that folds one op at a time only
    "block-xnnpack": (Block, lambda: xnnpack(matmul=True),
                      {"qnn.linear": 4, "qnn.matmul": 2, "qnn.add": 2, "qnn.multiply": 1},
                      {"nn.layer_norm", "nn.softmax", "squeeze", "permute_dims", "reshape"}),
}


@pytest.fixture(scope="module", params=sorted(FLOWS))
def flow(request):
    model, quantizer, folded, floats = FLOWS[request.param]
    converted, example = quantized(model, SHAPES[request.param.split("-")[0]], quantizer())
    module = torch_frontend.load(converted, example)
    return request.param, converted, example, module, folded, floats


def test_pt2e_models_fold_and_match_eager(flow):
    name, converted, example, module, folded, floats = flow
    inputs = [torch.randn(example[0].shape, generator=torch.Generator().manual_seed(s))
              for s in (1, 2)]
    report = legato.fold_qdq.explain(module)
    assert dict(report.folded) == folded, report.text()
    assert {op for op, _ in report.not_folded} == floats, report.text()
    for backend in BACKENDS:
        compiled = legato.compile(module, backend)
        assert dict(compiled.report.qdq.folded) == dict(report.folded), backend
        for x in inputs:
            want = converted(x).detach().numpy()
            got = compiled(x.numpy())
            step = output_step(converted, want)
            share = np.mean(np.abs(got - want) <= step * 1.001)
            # measured on six inputs: the CNNs 100% (the largest error 1 step); the block
            # 100%, once 99.95% (1 of 2048 elements 2 steps off: float rounding flips
            # single steps in two layers, as it does without folding)
            assert share >= 0.999, (name, backend, share, float(np.abs(got - want).max()))


def test_dynamic_quantization_matches_eager():
    """PT2E's dynamic recipe: choose_qparams computes the input's scale and zero point
    from its range on each call (nothing folds: the scale is not a constant)."""
    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    converted, example = quantized(MLP, (4, 16), x86(dynamic=True))
    module = torch_frontend.load(converted, example)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(5)) * 3
    want = converted(x).detach().numpy()
    for backend in BACKENDS:
        got = legato.compile(module, backend)(x.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=backend)


# --- the quantized_decomposed ops one at a time, against their eager kernels ----------------

SCALES = torch.tensor([0.02, 0.05, 0.1, 0.03])
ZEROS = torch.tensor([0, 3, -5, 1])
OPS = [
    # quant ranges narrower than the dtype clamp the integers
    lambda x: QD.quantize_per_tensor(x, 0.01, 2, -127, 127, torch.int8),
    lambda x: QD.quantize_per_tensor(x, 0.02, 100, 10, 200, torch.uint8),
    lambda x: QD.dequantize_per_tensor.tensor(   # scale and zero point as tensors
        QD.quantize_per_tensor.tensor(x, torch.tensor(0.03), torch.tensor(7), 0, 255,
                                      torch.uint8),
        torch.tensor(0.03), torch.tensor(7), 0, 255, torch.uint8),
    lambda x: QD.quantize_per_channel(x, SCALES, ZEROS, 1, -127, 127, torch.int8),
    lambda x: QD.dequantize_per_channel(
        QD.quantize_per_channel(x, SCALES, ZEROS, 0, -128, 127, torch.int8), SCALES, ZEROS,
        0, -128, 127, torch.int8, out_dtype=torch.float16),
    lambda x: QD.choose_qparams.tensor(x, 0, 255, 2 ** -12, torch.uint8),
    lambda x: QD.choose_qparams_symmetric.tensor(x, -128, 127, 1e-5, torch.int8),
]


class Ops(torch.nn.Module):
    def __init__(self, *fns):
        super().__init__()
        self.fns = fns

    def forward(self, x):
        return [fn(x) for fn in self.fns]


def test_quantized_decomposed_ops_match_their_eager_kernels():
    x = torch.randn(4, 4, 6, generator=torch.Generator().manual_seed(3)) * 2
    want = [t.numpy() for t in torch.utils._pytree.tree_leaves(Ops(*OPS)(x))]
    got = legato.reference(torch_frontend.load(Ops(*OPS), (x,)))(x.numpy())
    assert len(got) == len(want) == 9
    for index, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, index
        np.testing.assert_array_equal(g, w, err_msg=str(index))


@pytest.mark.parametrize("fn, message", [
    (lambda x: QD.quantize_per_tensor(x, 0.1, 0, -300, 300, torch.int16),
     "quantize_per_tensor to int16: qnn.quantize writes int8 and uint8 only"),
    (lambda x: QD.quantize_per_tensor(x, 0.1, 0, 0, 255, torch.int8),
     r"quant range \[0, 255\] is not within int8's \[-128, 127\]"),
])
def test_quantizations_legato_cannot_express_are_refused_by_name(fn, message):
    with pytest.raises(LegatoError, match=message):
        torch_frontend.load(Ops(fn), (torch.randn(2, 3),))
