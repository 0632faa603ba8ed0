"""Programs from outside legato that the torch importer once answered wrongly: as_strided
over views and channels-last storage, elu's scale and input_scale, attention masks with
fully masked rows and a value head size unlike the query's, writes into views of an
`out=` buffer, and bfloat16 special values. Each is compared with torch eager; the
exports are shared per module (torch.export is the slow part)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import legato  # noqa: E402
from legato.frontends import torch as torch_frontend  # noqa: E402
from tests.test_torch_more import Fn  # noqa: E402

BACKENDS = ("cpu_ref", "c_kernels")


def _numpy(t):
    """A tensor as numpy (bfloat16 through float32, which numpy lacks)."""
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.detach().float().numpy().astype(ml_dtypes.bfloat16)
    return t.detach().contiguous().numpy()


class Case:
    """A module, its inputs, eager's results and its import, made once."""

    def __init__(self, module, inputs):
        self.module, self.inputs = module.eval(), inputs
        with torch.no_grad():
            want = self.module(*inputs)
        self.wants = [want] if isinstance(want, torch.Tensor) else list(want)
        self.mod = torch_frontend.load(self.module, inputs)

    def check(self, backend, rtol=1e-5, atol=1e-6):
        got = legato.compile(self.mod, backend)(*(_numpy(t) for t in self.inputs))
        gots = list(got) if isinstance(got, tuple) else [got]
        assert len(gots) == len(self.wants)
        for i, (g, w) in enumerate(zip(gots, self.wants)):
            w = _numpy(w)
            assert g.dtype == w.dtype and g.shape == w.shape, i
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                       rtol=rtol, atol=atol, err_msg=f"result {i}")


# --- as_strided addresses the storage, through any view ---------------------------------------

def _channels_last(t):
    return t.to(memory_format=torch.channels_last)


VIEWS = (  # as_strided over a view of x = [4, 3]: its storage is x's
    lambda x: torch.as_strided(x.t(), (3, 2), (1, 3), 1),
    lambda x: torch.as_strided(x.transpose(0, 1), (2, 3), (3, 1), 2),
    lambda x: torch.as_strided(x.permute(1, 0), (3, 2), (2, 1), 0),
    lambda x: torch.as_strided(x.movedim(0, 1), (2, 2), (4, 1), 3),
    lambda x: torch.as_strided(x.T, (3, 2), (2, 1), 2),
    lambda x: torch.as_strided(x.unfold(0, 2, 1), (2, 2), (1, 2), 1),
    lambda x: torch.as_strided(x[1:], (2, 2), (1, 2), 0),  # an absolute offset
    lambda x: torch.as_strided(x[1:], (2, 2), (1, 2)),  # the slice's own offset, 3
    lambda x: torch.as_strided(torch.ops.aten._unsafe_view(x[1:], (9,)), (2, 2), (1, 2), 0),
    lambda x: torch.as_strided(x.detach(), (2, 2), (1, 2), 5),
    lambda x: torch.as_strided(torch.ops.aten.alias(x), (2, 2), (1, 2), 3),
    lambda x: torch.as_strided(torch.as_strided(x, (3, 3), (1, 3), 1), (2, 2), (2, 1), 1),
    lambda x: torch.as_strided(_channels_last(x.reshape(1, 2, 2, 3)), (3, 2), (1, 3), 1),
    lambda x: torch.as_strided(x.expand(2, 4, 3), (2, 2), (1, 2), 0),
    lambda x: torch.as_strided(x.split(2)[1], (2, 2), (1, 3), 0),  # a piece of x
    lambda x: torch.as_strided(x.chunk(2, 1)[1], (2, 2), (1, 3), 1),
)


class ChannelsLast(nn.Module):
    """as_strided on a channels-last input, a channels-last parameter and results computed
    from them (which torch lays out channels-last too)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(_channels_last(torch.randn(1, 2, 2, 3)))

    def forward(self, x):
        return (torch.as_strided(x, (2, 2), (1, 2), 0),
                torch.as_strided(self.w, (3, 2), (1, 3), 1),
                torch.as_strided(torch.relu(x) + 1, (2, 3), (1, 2), 1),
                torch.as_strided(x.movedim(1, 3)[:, 1:], (2, 2), (1, 2)))


@pytest.fixture(scope="module")
def strided_views():
    torch.manual_seed(0)
    return (Case(Fn(lambda x: tuple(view(x) for view in VIEWS)), [torch.randn(4, 3)]),
            Case(ChannelsLast(), [_channels_last(torch.randn(1, 2, 2, 3))]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_as_strided_over_views_reads_the_storage(strided_views, backend):
    for case in strided_views:
        case.check(backend, rtol=0, atol=0)  # gathers: exact


def test_as_strided_reading_memory_legato_does_not_have_is_refused():
    # x views elements 2.. of a larger storage: position 0 is not among x's values
    x = torch.randn(10)[2:]
    with pytest.raises(legato.LegatoError, match=r"as_strided.*storage position 0.*x"):
        torch_frontend.load(Fn(lambda x: torch.as_strided(x[1:], (2, 2), (1, 2), 0)), (x,))


# --- elu's scale and input_scale ---------------------------------------------------------------

@pytest.fixture(scope="module")
def elu_case():
    torch.manual_seed(0)
    return Case(Fn(lambda x: (torch.ops.aten.elu(x, 2.0, 1.5, 3.0),
                              torch.ops.aten.elu(x, 0.5, 1.0, -2.0),
                              torch.ops.aten.elu(x, 1.0, 2.0, 1.0), F.selu(x), F.celu(x, 0.7))),
                [3 * torch.randn(5, 6)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_elu_scale_and_input_scale(elu_case, backend):
    elu_case.check(backend)


# --- attention: every mask form, a value head size unlike the query's --------------------------

B, H, L, S, E, EV = 2, 3, 8, 12, 16, 20
MASK_SHAPES = ((L, S), (1, S), (L, 1), (H, L, S), (1, L, S), (B, H, L, S), (B, 1, L, S),
               (1, H, 1, S), (B, 1, 1, S), (1, 1, 1, 1))


def _masks(generator):
    """A bool and a float mask of each shape; some rows of the full ones masked out
    entirely (torch answers 0 there)."""
    masks = []
    for shape in MASK_SHAPES:
        keep = torch.rand(*shape, generator=generator) > 0.3
        if len(shape) == 4 and shape[-2] > 1:
            keep[..., 0, :] = False
        masks += [keep, torch.where(keep, torch.randn(*shape, generator=generator),
                                    float("-inf"))]
    return masks


def _attend(q, k, v, *masks):
    sdpa = F.scaled_dot_product_attention
    return (*(sdpa(q, k, v, attn_mask=m) for m in masks), sdpa(q, k, v, attn_mask=masks[0],
                                                              scale=0.3),
            sdpa(q, k, v, is_causal=True), sdpa(q, k, v),
            sdpa(q[0], k[0], v[0], attn_mask=masks[-4][0]))  # 3-d q, k, v and mask


@pytest.fixture(scope="module")
def attention_case():
    g = torch.Generator().manual_seed(0)
    qkv = [torch.randn(B, H, n, d, generator=g) for n, d in ((L, E), (S, E), (S, EV))]
    return Case(Fn(_attend), qkv + _masks(g))


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_masks_and_value_head_size(attention_case, backend):
    attention_case.check(backend, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def causal_mask_case():
    """is_causal with a mask, where PyTorch takes both (its fused kernel): equal head sizes,
    a 2-d or 4-d mask; the mask and the causal one together leave some rows empty."""
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(B, H, n, E, generator=g) for n in (L, S))
    keep = torch.rand(B, 1, L, S, generator=g) > 0.3
    keep[:, :, 0, 0] = False  # row 0: causal keeps key 0 only
    masks = [keep, torch.where(keep, 0.5, float("-inf")), keep[0, 0]]
    return Case(Fn(lambda q, k, *ms: tuple(F.scaled_dot_product_attention(
        q, k, k, attn_mask=m, is_causal=True) for m in ms)), [q, k, *masks])


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_mask_with_is_causal(causal_mask_case, backend):
    causal_mask_case.check(backend, rtol=1e-4, atol=1e-5)


def test_attention_mask_with_is_causal_is_refused_where_torch_refuses():
    q, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 6)  # v's head size differs
    fn = Fn(lambda q, v, m: F.scaled_dot_product_attention(q, q, v, attn_mask=m,
                                                           is_causal=True))
    mask = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="attn_mask"):
        fn(q, v, mask)
    with pytest.raises(legato.LegatoError, match="attn_mask.*is_causal"):
        torch_frontend.load(fn, (q, v, mask))


# --- out= into views of a buffer: functionalized into scatters ----------------------------------

def _out_views(x):
    buf = torch.zeros(6)
    step = torch.arange(3, out=buf[1:4])  # an int64 arange into float32 cells
    grid = torch.zeros(4, 4)
    torch.mul(x[:4], 2, out=grid.t()[1])  # a column, through a transpose
    rows = torch.zeros(2, 6)
    torch.add(x.reshape(2, 3), 1, out=rows[:, 2:5])
    every_other = torch.zeros(6)
    torch.linspace(0, 1, 3, out=every_other[::2])
    own = x.clone()
    torch.sin(x[:3], out=own[3:])
    return buf + x, step * 2, grid, rows, every_other, own


@pytest.fixture(scope="module")
def out_views_case():
    torch.manual_seed(0)
    return Case(Fn(_out_views), [torch.randn(6)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_into_views_of_a_buffer(out_views_case, backend):
    out_views_case.check(backend)


def test_out_view_that_torch_resizes_is_refused():
    # arange(0, 1, 0.25) has 4 values for a view of 3: eager resizes the view in place and
    # writes buf[1:5]; the exported graph scatters 4 values into the 3-cell slice
    def fn(x):
        buf = torch.zeros(6)
        torch.arange(0, 1, 0.25, out=buf[1:4])
        return buf + x
    with pytest.raises(legato.LegatoError, match=r"slice_scatter.*does not fit the slice"):
        torch_frontend.load(Fn(fn), (torch.randn(6),))


# --- bfloat16 special values ---------------------------------------------------------------------

SPECIAL = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1.5, -3.0, 1e30, 1e-30]
UNARY = (torch.atan, torch.sin, torch.exp, torch.tanh, torch.sigmoid, torch.erf, torch.sqrt,
         torch.rsqrt, torch.abs, torch.neg, torch.reciprocal, torch.log1p, torch.expm1,
         torch.atanh, torch.round, torch.trunc, torch.log)


def _bf16_math(x):
    const = torch.tensor(SPECIAL, dtype=torch.bfloat16)  # a lifted constant
    return (*(f(x) for f in UNARY), torch.atan(const) + x, torch.atan2(x, const))


@pytest.fixture(scope="module")
def bf16_case():
    return Case(Fn(_bf16_math), [torch.tensor(SPECIAL, dtype=torch.bfloat16)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bfloat16_special_values(bf16_case, backend):
    bf16_case.check(backend, rtol=1e-2, atol=1e-6)


# --- float functions: their ends and 16-bit floats -----------------------------------------------

HALF_FUNCTIONS = (torch.exp2, torch.expm1, torch.log1p, torch.sinh, torch.cosh, torch.asinh,
                  torch.atanh, torch.log2, torch.digamma, torch.lgamma)


def _ends_and_halves(big, small, half, bf16):
    # asinh and acosh of values whose square overflows; sign of NaN (torch: 0); digamma
    # at +0 and -0 (-inf, +inf)
    ends = (torch.asinh(big), torch.acosh(big), torch.sign(small), torch.digamma(small))
    return (*ends, *(f(h) for f in HALF_FUNCTIONS for h in (half, bf16)))


@pytest.fixture(scope="module")
def ends_case():
    big = torch.tensor([1e30, -1e30, 3e38, 1e5, 3.0, 0.5, -2.0])
    small = torch.tensor([float("nan"), -1.5, 0.0, -0.0, 2.0])
    grid = torch.cat([torch.linspace(-0.9, 0.9, 19), torch.linspace(2.0, 12.0, 11)])
    return Case(Fn(_ends_and_halves), [big, small, grid.half(), grid.bfloat16()])


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_functions_at_their_ends_and_in_16_bits(ends_case, backend):
    # one rounding of the float32 result, as torch computes: within an ulp of 16 bits
    ends_case.check(backend, rtol=8e-3, atol=1e-3)


def test_bfloat16_scalars_do_not_depend_on_import_order():
    # a fresh process that has not imported ml_dtypes: numpy does not know 'bfloat16' yet
    import subprocess
    import sys
    code = ("import sys; from legato.ir import Const; assert 'ml_dtypes' not in sys.modules; "
            "print(Const.of(0.5, dtype='bfloat16').dtype)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "bfloat16", done.stderr[-500:]
