"""The ATen ops Hugging Face models need (factories, asserts, indexing, scans, selection,
activations, padding, 1-d convolution, remainders, bitwise ops), each against torch eager
on cpu_ref and c_kernels."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def positions(x):  # RoBERTa: position ids from the padding mask
    mask = x.ne(1).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) + 0) * mask + 1


def causal_mask(x):  # Llama-style: arange compare, bitwise and of bool masks, full
    t = x.shape[-1]
    rows = torch.arange(t).view(t, 1)
    cols = torch.arange(t).view(1, t)
    allowed = (cols <= rows) & torch.full((), True)
    return torch.where(allowed, x, torch.full((t, t), -1e9))


def window_index(x):  # Swin: index arithmetic on constants, index with index tensors
    idx = torch.fmod(torch.arange(16) + 3, 4)
    return x[:, idx] + torch.scalar_tensor(2.0)


def advanced_index(x):
    i = torch.tensor([[0], [2]])
    j = torch.tensor([[1, -1, 0]])
    return x[i, j]


def put_around_none(x, v, w):  # index tensors after, and separated by, whole dims
    y = x.clone()
    y[:, torch.tensor([3, 0])] = v  # index_copy along dim 1 exports as this
    y = torch.ops.aten.index_put(y, [None, None, torch.tensor([1, 1, 0])], w, True)
    y[torch.tensor([1, 0]), :, torch.tensor([2, 0])] = w[:, :, 0]  # index dims first: (2, 4)
    return y


def put_by_mask(x, rows):  # index_put with a bool index, as torch's OpInfo calls it
    y = x.index_put((x[:, 0] > 0,), torch.tensor(-1.0))  # one value for every selected row
    y = y.index_put((torch.tensor([True, False, True, False]),), rows,
                    accumulate=True)  # row k to the k-th true position
    return torch.ops.aten.index_put(y, [None, x[0] < 0], torch.tensor(2.0), True)


def put_bool(x, i, u):
    return torch.ops.aten.index_put(x, [i], u, True) ^ x.index_put((i,), u)


CASES = {
    "index_put_around_none": (put_around_none, lambda: [
        torch.randn(2, 4, 3), torch.randn(2, 2, 3), torch.randn(2, 4, 3)]),
    "index_put_by_mask": (put_by_mask, lambda: [torch.randn(4, 3), torch.randn(2, 3)]),
    "index_put_bool_accumulates_by_or": (put_bool, lambda: [
        torch.tensor([[True, False], [False, False], [False, True]]), torch.tensor([1, 1, 2]),
        torch.tensor([[False, True], [True, False], [False, False]])]),
    # an integer Python scalar wraps into a narrower integer dtype, as in torch
    "negative_scalar_into_uint8": (lambda x: x * -1 + (x == -1) + (x < -3) + x.add(
        x, alpha=-2), lambda: [torch.tensor([0, 1, 255, 250], dtype=torch.uint8)]),
    "large_scalar_into_int8": (lambda x: x + 300 - x * 1000, lambda: [
        torch.tensor([-128, 1, 100], dtype=torch.int8)]),
    "round_decimals": (lambda x: torch.round(x, decimals=2) + torch.round(x, decimals=-1),
                       lambda: [torch.tensor([1.005, 2.675, -12.5, 15.0, 0.125, 1234.5678])]),
    "var_mean": (lambda x: torch.stack(torch.var_mean(x, 1, correction=0)) + torch.stack(
        torch.std_mean(x, [0, 1], keepdim=True)).sum(), lambda: [torch.randn(3, 4)]),
    # running extremes: a later equal value takes the index, a NaN stays once seen
    "cummax_ties_and_nan": (lambda x: torch.stack(torch.cummax(x, 1)).float().sum(0) + torch.
                            stack(torch.cummin(x, 0)).float().sum(0), lambda: [torch.tensor(
                                [[1.0, 3.0, 3.0, float("nan"), 5.0, float("nan")],
                                 [2.0, -1.0, 2.0, 0.0, -1.0, 7.0]])]),
    "cummax_ints_and_bools": (lambda x: torch.cummax(x, 0)[1] + torch.cummin(x > 0, 0)[1] +
                              torch.cummin(x, -1)[0], lambda: [torch.tensor(
                                  [3, -128, 3, 127, -128], dtype=torch.int8)]),
    # each position shifted by its own maximum: no underflow after a large early value
    "logcumsumexp": (lambda x: torch.logcumsumexp(x, 1), lambda: [torch.tensor(
        [[1000.0, 0.0, -1000.0, 3.0], [-float("inf"), -float("inf"), 2.0, float("inf")]])]),
    "instance_norm": (nn.InstanceNorm2d(3, affine=True), lambda: [torch.randn(2, 3, 4, 5)]),
    "instance_norm_plain_1d": (nn.InstanceNorm1d(3), lambda: [torch.randn(2, 3, 6) * 4 + 1]),
    # reductions over a dim of size 0: sum, prod, any, all, norms are their identities,
    # mean and var NaN
    "empty_reductions": (lambda x: torch.stack([
        x.sum(0), x.prod(0), x.mean(0), x.var(0), x.std(0, unbiased=False),
        x.any(0).float(), x.all(0).float(), torch.linalg.vector_norm(x, 2, 0),
        torch.linalg.vecdot(x.T, x.T)]) + x.sum(), lambda: [torch.randn(0, 3)]),
    "positions": (positions, lambda: [torch.tensor([[0, 5, 7, 1, 1], [4, 1, 2, 3, 9]])]),
    "causal_mask": (causal_mask, lambda: [torch.randn(2, 6, 6)]),
    "window_index": (window_index, lambda: [torch.randn(2, 16)]),
    "advanced_index": (advanced_index, lambda: [torch.randn(3, 4, 2)]),
    "gather": (lambda x, i: torch.gather(x, 1, i),
               lambda: [torch.randn(3, 5), torch.tensor([[0, 4], [1, 1], [3, 2]])]),
    "index_select": (lambda x, i: torch.index_select(x, 1, i),
                     lambda: [torch.randn(3, 5), torch.tensor([4, 0, 0])]),
    "ge_le_ne": (lambda a, b: (a >= b).int() + (a <= 0.5).int() + (a != b).int(),
                 lambda: [torch.randn(4, 5), torch.randn(5)]),
    "isnan_isinf": (lambda x: torch.isnan(x).int() + 2 * torch.isinf(x).int(),
                    lambda: [torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])]),
    "sign_trunc": (lambda x: torch.sign(x) + torch.trunc(x), lambda: [3 * torch.randn(4, 5)]),
    "remainder_fmod_float": (lambda a, b: torch.remainder(a, b) + 10 * torch.fmod(a, b),
                             lambda: [5 * torch.randn(4, 5), torch.tensor([-3.0, 2.0, 1.5,
                                                                           -0.5, 7.0])]),
    "remainder_fmod_int": (lambda a, b: torch.remainder(a, b) + 100 * torch.fmod(a, b),
                           lambda: [torch.arange(-10, 10).view(4, 5),
                                    torch.tensor([-3, 2, 4, -1, 7])]),
    "bitwise_int": (lambda a, b: (a & b) | (a ^ 3) | ~b,
                    lambda: [torch.arange(-6, 6).view(3, 4), torch.tensor([5, -2, 0, 9])]),
    "constant_pad_nd": (lambda x: F.pad(x, (1, 2, -1, 0), value=0.5),
                        lambda: [torch.randn(2, 3, 4)]),
    "conv1d": (nn.Conv1d(4, 6, 3, padding=1, stride=2), lambda: [torch.randn(2, 4, 9)]),
    "conv3d": (nn.Conv3d(2, 4, (2, 3, 3), padding=(1, 0, 1), stride=(2, 1, 1), groups=2),
               lambda: [torch.randn(1, 2, 5, 6, 6)]),
    "conv_transpose2d": (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                            groups=2), lambda: [torch.randn(1, 4, 5, 4)]),
    "conv_transpose1d": (nn.ConvTranspose1d(3, 2, 4, stride=3, dilation=2),
                         lambda: [torch.randn(2, 3, 5)]),
    "conv_transpose3d": (nn.ConvTranspose3d(2, 2, 2, stride=2), lambda: [torch.randn(1, 2, 2,
                                                                                    3, 3)]),
    "hardtanh_relu6": (lambda x: F.hardtanh(x, -0.5, 2.0) + F.relu6(3 * x),
                       lambda: [2 * torch.randn(3, 7)]),
    "activations": (lambda x: F.elu(x) + F.selu(x) + F.celu(x, 2.0) + F.softplus(x)
                    + F.mish(x) + F.hardswish(x) + F.hardsigmoid(x) + F.leaky_relu(x, 0.2)
                    + F.softsign(x) + F.hardshrink(x) + F.softshrink(x, 0.3)
                    + F.threshold(x, 0.1, -2.0), lambda: [3 * torch.randn(4, 6)]),
    "prelu": (nn.PReLU(3), lambda: [torch.randn(2, 3, 4)]),
    "flip_repeat_triu": (lambda x: torch.flip(x, [0, -1]).repeat(2, 1, 1) + torch.triu(
        x.repeat(2, 1, 1), 1) + torch.tril(x, -1), lambda: [torch.randn(3, 4)]),
    "argmin_argmax_prod": (lambda x: torch.argmin(x, 1) + torch.argmax(x) +
                           torch.prod(x, 1).round().long(), lambda: [torch.randn(3, 4)]),
    "topk_sort": (lambda x: torch.topk(x, 2, dim=1).values + torch.sort(x, dim=1,
                                                                           descending=True)[0][
        :, :2] + torch.topk(x, 2, largest=False).indices, lambda: [torch.randn(3, 5)]),
    "one_hot": (lambda i: F.one_hot(i, 5), lambda: [torch.tensor([[0, 4], [2, 1]])]),
    "scatter": (lambda x, i, u: x.scatter(1, i, u) + x.scatter_add(1, i, u) + x.scatter(
        1, i, 2.0), lambda: [torch.randn(3, 5), torch.tensor([[0, 1], [2, 3], [4, 0]]),
                             torch.randn(3, 2)]),
    "scatter_reduce": (lambda x, i, u: x.scatter_reduce(0, i, u, "amax"),
                       lambda: [torch.randn(3, 4), torch.tensor([[0, 1, 2, 0], [0, 1, 1, 2]]),
                                torch.randn(2, 4)]),
    # include_self=False reduces over the scattered values alone; mean floor-divides ints
    "scatter_reduce_without_self": (lambda x, i, u: x.scatter_reduce(
        1, i, u, "sum", include_self=False) + x.scatter_reduce(1, i, u, "amin",
                                                                include_self=False),
        lambda: [torch.randn(3, 4), torch.tensor([[0, 0], [2, 3], [1, 1]]), torch.randn(3, 2)]),
    "scatter_reduce_mean": (lambda x, i, u: x.scatter_reduce(0, i, u, "mean") * 10 + x.
                            scatter_reduce(0, i, u, "mean", include_self=False),
                            lambda: [torch.tensor([[5, -7], [3, 4]], dtype=torch.int32),
                                     torch.tensor([[0, 0], [0, 1]]),
                                     torch.tensor([[2, -3], [-4, 6]], dtype=torch.int32)]),
    "scatter_reduce_float_mean": (lambda x, i, u: x.scatter_reduce(
        0, i, u, "mean", include_self=False), lambda: [
        torch.randn(3, 2), torch.tensor([[0, 2], [0, 2]]), torch.randn(2, 2)]),
    "scatter_add_bool": (lambda x, i, u: x.scatter_add(0, i, u) ^ x.scatter_reduce(
        0, i, u, "prod", include_self=False), lambda: [
        torch.tensor([True, False, False]), torch.tensor([1, 1, 2]),
        torch.tensor([False, True, False])]),
    "scatter_scalar": (lambda x, i, u: x.scatter(0, i, u) + x.scatter_add(0, i, u),
                       lambda: [torch.tensor(2.0), torch.tensor(0), torch.tensor(5.0)]),
    "index_put": (lambda x, u: x.index_put((torch.tensor([0, -1]),), u, accumulate=True)
                  + x.index_put((torch.tensor([1, 2]), torch.tensor([0, 3])), u[:, 0]),
                  lambda: [torch.randn(3, 5), torch.randn(2, 5)]),
    "interpolate": (lambda x: F.interpolate(x, size=(5, 9), mode="nearest")[..., :2, :3]
                    + F.interpolate(x, scale_factor=1.7, mode="bilinear")[..., :2, :3]
                    + F.interpolate(x, size=(2, 3), mode="bilinear", align_corners=True)
                    + F.interpolate(x, size=(2, 3), mode="nearest-exact"),
                    lambda: [torch.randn(1, 2, 5, 7)]),
    "bilinear_align_corners_scale": (lambda x: F.interpolate(
        x, scale_factor=1.7, mode="bilinear", align_corners=True) + F.interpolate(
        x, scale_factor=0.6, mode="bilinear", align_corners=True).sum(),
        lambda: [torch.randn(1, 2, 4, 4)]),
    "adaptive_avg_pool": (lambda x: F.adaptive_avg_pool2d(x, (2, 3))[..., :1, :]
                          + F.adaptive_avg_pool2d(x, (3, 3))[..., :1, :],
                          lambda: [torch.randn(1, 2, 5, 6)]),
    # torch's type promotion: a float scalar makes an integer tensor float32, a 0-d tensor
    # does not widen a tensor of its category, true division and reciprocal give floats
    "int_times_float_scalar": (lambda x: x * 2.5 + (x + 1.5) - (x < 2.5).float(),
                               lambda: [torch.arange(-4, 4, dtype=torch.int8)]),
    "bool_plus_int_scalar": (lambda x: x * 3 + (x + True).long(),
                             lambda: [torch.tensor([True, False, True])]),
    "int_pow_float": (lambda x: x ** 2.0 + torch.pow(x, 2).float(),
                      lambda: [torch.arange(-3, 4, dtype=torch.int32)]),
    "reciprocal_int": (lambda x: torch.reciprocal(x), lambda: [torch.tensor([1, 2, -4, 8])]),
    "reciprocal_bool": (lambda x: torch.reciprocal(x), lambda: [torch.tensor([True, False])]),
    "zero_dim_keeps_dtype": (lambda x, s: x + s, lambda: [
        torch.tensor([100, 27], dtype=torch.int8), torch.tensor(300, dtype=torch.int64)]),
    "div_mixed_ints": (lambda a, b: torch.div(a, b, rounding_mode="floor") + torch.div(
        a, b, rounding_mode="trunc"), lambda: [torch.tensor([7, -7, 9], dtype=torch.int32),
                                               torch.tensor([2, 2, -4])]),
    # sums and products of small integers and bools are int64; any/all bool but for uint8
    "prod_small_ints": (lambda x: torch.prod(x) + torch.prod(x, 1).sum(),
                        lambda: [torch.tensor([[3, 5], [-7, 2]], dtype=torch.int8)]),
    "prod_bool": (lambda x: torch.prod(x, 0),
                  lambda: [torch.tensor([[True, False], [True, True]])]),
    "any_int8": (lambda x: torch.any(x, 1) | torch.all(x), lambda: [
        torch.tensor([[0, 2], [0, 0]], dtype=torch.int8)]),
    "any_uint8": (lambda x: torch.any(x, 1) + torch.all(x), lambda: [
        torch.tensor([[0, 2], [0, 0]], dtype=torch.uint8)]),
    "any_scalar": (lambda x: torch.any(x, 0), lambda: [torch.tensor(3)]),
    "max_min_dim_scalar": (lambda x: torch.max(x, 0)[0] + torch.min(x, -1, keepdim=True)[1],
                           lambda: [torch.tensor(1.5)]),
    "fold": (nn.Fold(output_size=(4, 5), kernel_size=(2, 3)), lambda: [torch.randn(1, 6, 9)]),
    "argmax_argmin_scalar": (lambda x: torch.argmax(x, 0, keepdim=True) + torch.argmin(x),
                             lambda: [torch.tensor(1.5)]),
    "index_select_scalar": (lambda x, i: torch.index_select(x, 0, i),
                            lambda: [torch.tensor(2.5), torch.tensor([0])]),
    "vector_norms": (lambda x: torch.linalg.vector_norm(x, -math.inf, 1) + torch.linalg.
                     vector_norm(x, 6, 1) + torch.linalg.vector_norm(x, 0, 1) + torch.linalg.
                     vector_norm(x, 3, 1) + torch.linalg.vector_norm(x[0, 0], 2.5),
                     lambda: [torch.tensor([[1.0, -3.0, 0.0], [0.5, 2.0, -0.25]])]),
    "attention_3d": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                     lambda: [torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 4)]),
    "attention_3d_q": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                       lambda: [torch.randn(2, 3, 8), torch.randn(4, 2, 5, 8),
                                torch.randn(4, 2, 5, 4)]),
    "attention_multi_query": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v) +
                              F.scaled_dot_product_attention(k, q, q)[:, :, :3, :4],
                              lambda: [torch.randn(2, 4, 3, 8), torch.randn(1, 1, 5, 8),
                                       torch.randn(2, 1, 5, 4)]),
    "attention_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                      lambda: [torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8),
                               torch.randn(1, 2, 5, 4)]),
    # pooling with torch's flat (H, W) indices; integer means truncate; divisor_override
    "max_pool2d_indices": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                  return_indices=True)[1],
                           lambda: [torch.randn(2, 3, 6, 7)]),
    "max_pool1d_indices": (lambda x: F.max_pool1d(x, 2, dilation=2, return_indices=True)[1],
                           lambda: [torch.randn(2, 9)]),
    "avg_pool_int": (lambda x: F.avg_pool2d(x, 2, ceil_mode=True) + F.avg_pool1d(x[0], 3, 2, 1),
                     lambda: [torch.tensor([[[-1, -2, 3, 4, 7], [5, 6, -9, 1, 2]]])]),
    "pools_unbatched": (lambda x: F.avg_pool2d(x, 2) + F.max_pool2d(x, 2),
                        lambda: [torch.randn(3, 4, 6)]),
    "avg_pool_divisor": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=4),
                         lambda: [torch.randn(1, 2, 6, 6)]),
    "factories": (lambda x: x + torch.zeros(3) + torch.ones_like(x) + torch.full_like(x, 2)
                  + torch.arange(0.5, 2.0, 0.5), lambda: [torch.randn(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", ["cpu_ref", "c_kernels"])
def test_aten_op_matches_eager(name, backend):
    fn, make = CASES[name]
    torch.manual_seed(0)
    inputs = make()
    module = fn if isinstance(fn, nn.Module) else Fn(fn)
    mod = torch_frontend.load(module.eval(), inputs)
    with torch.no_grad():
        want = module(*inputs).numpy()
    got = legato.compile(mod, backend)(*(t.numpy() for t in inputs))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_factories_and_asserts_leave_no_calls():
    """arange/full/zeros fold to constants; _assert_tensor_metadata disappears."""
    def fn(x):
        return x + torch.arange(3).float() + torch.full((3,), 2.0)
    mod = torch_frontend.load(Fn(fn), [torch.randn(2, 3)])
    assert [c.op for c in mod.main.calls] == ["add", "add"]


def test_results_nothing_reads_are_not_computed():
    """max.dim converts to max and argmax; only the max is read, so argmax is dropped."""
    mod = torch_frontend.load(Fn(lambda x: torch.max(x, 1).values * 2), [torch.randn(2, 3)])
    assert [c.op for c in mod.main.calls] == ["max", "multiply"]


def test_data_dependent_ops_are_refused_clearly():
    # torch.export itself refuses; a graph that still has one_hot(num_classes=-1) is refused
    # by the converter, naming num_classes
    with pytest.raises(legato.LegatoError, match="export|num_classes"):
        torch_frontend.load(Fn(lambda i: F.one_hot(i)), [torch.tensor([0, 2])])


def test_refused_ops_say_why():
    from legato.frontends.torch.ops import refusal
    assert "random" in refusal("aten.bernoulli.p")
    assert "depends on the data" in refusal("aten.nonzero.default")
    assert "backward" in refusal("aten.gelu_backward.default")
    assert refusal("aten.cummax.default") is None
    assert refusal("aten._fft_r2c.default") is None  # mapped on complex values (torch_fft)

    class Bernoulli(nn.Module):
        def forward(self, x):
            return torch.bernoulli(torch.sigmoid(x))
    with pytest.raises(legato.LegatoError, match=r"refused: a random op"):
        torch_frontend.load(Bernoulli(), [torch.randn(3)])
    with pytest.raises(legato.LegatoError, match=r"dropout_p=0.5 \(refused: a random op"):
        torch_frontend.load(Fn(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)),
                            [torch.randn(1, 2, 3, 4)])


def test_torch_conformance_runs_opinfo_samples():
    """The OpInfo harness on a few ops: every case passes or is excluded with a reason."""
    pytest.importorskip("expecttest")  # torch's OpInfo database needs it
    from legato.testing import torch_conformance
    outcomes = torch_conformance.run(["sign", "remainder", "topk", "tril"], ("cpu_ref",))
    assert {o.op for o in outcomes} == {"sign", "remainder", "topk", "tril"}
    assert not [o for o in outcomes if o.status == "failed"]
    assert all(o.reason for o in outcomes if o.status == "excluded")
    assert sum(o.status == "passed" for o in outcomes) >= 10
