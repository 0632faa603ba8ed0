"""Steps of the torch fuzz target (target_torch) for what depends on memory layout and on
optional arguments: as_strided over views, slices, pieces of splits, copies and channels-last tensors (it
addresses the storage, not the logical elements), activations with non-default optional
scalars, and scaled_dot_product_attention with every mask form, head sizes of v unlike
q's, is_causal, scale and grouped heads. Each step takes the target's Builder `b`."""
from __future__ import annotations

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the target skips every case without torch
    torch = None


# --- as_strided over views --------------------------------------------------------------------

def _storage_size(t) -> int:
    return t.untyped_storage().nbytes() // t.element_size()


def _channels_last(t):
    """A channels-last copy of t where it has the rank for one (4-d or 5-d)."""
    if t.dim() == 4:
        return t.to(memory_format=torch.channels_last)
    return t.to(memory_format=torch.channels_last_3d) if t.dim() == 5 else t.clone()


VIEWS = {  # a view or copy of t whose storage as_strided then reads
    "plain": lambda t: t,
    "t": lambda t: t.t() if t.dim() == 2 else t.transpose(0, -1) if t.dim() else t,
    "permute": lambda t: t.permute(list(reversed(range(t.dim())))),
    "movedim": lambda t: torch.movedim(t, 0, -1) if t.dim() else t,
    "slice": lambda t: t[1:] if t.dim() and t.shape[0] > 1 else t,
    "narrow_last": lambda t: t[..., 1:] if t.dim() and t.shape[-1] > 1 else t,
    "unfold": lambda t: t.unfold(-1, 2, 1) if t.dim() and t.shape[-1] >= 2 else t,
    "detach": lambda t: t.detach(),
    "alias": lambda t: torch.ops.aten.alias(t),
    "unsafe_view": lambda t: torch.ops.aten._unsafe_view(t.contiguous(), (-1,)),
    "channels_last": lambda t: _channels_last(t),
    "relu_channels_last": lambda t: torch.relu(_channels_last(t)),
    "expand": lambda t: t.expand(2, *t.shape),
    "split": lambda t: t.split(1)[-1] if t.dim() else t,
    "chunk": lambda t: t.chunk(2, -1)[-1] if t.dim() else t,
    "nested": lambda t: torch.as_strided(t, (max(_storage_size(t) - t.storage_offset()
                                                 - 1, 1),), (1,), t.storage_offset() + 1)
    if _storage_size(t) - t.storage_offset() > 1 else t,
}


def _strided_args(b, storage: int):
    """A size, stride and offset that stay inside a storage of `storage` elements."""
    for _ in range(8):
        rank = b.rng.randint(1, 3)
        size = [b.rng.randint(1, 3) for _ in range(rank)]
        stride = [b.rng.randint(0, 4) for _ in range(rank)]
        span = sum((n - 1) * s for n, s in zip(size, stride))
        if span < storage:
            offset = b.rng.randint(0, storage - 1 - span)
            return size, stride, None if b.chance(0.2) else offset
    return [1], [1], 0


def s_strided(b):
    """as_strided over a view of a value or of a fresh (sometimes channels-last) input."""
    if b.chance(0.3):
        shape = (b.rng.randint(1, 3), b.rng.randint(2, 3), b.rng.randint(1, 3),
                 b.rng.randint(2, 3))
        x = b.add_example(_channels_last(b.tensor(shape, torch.float32)))
    else:
        x = b.pick("fib", nonempty=True)
    name = b.rng.choice(sorted(VIEWS))
    view = VIEWS[name]
    try:
        seen = view(x.example)
    except (RuntimeError, IndexError, ValueError, TypeError):
        return None
    size, stride, offset = _strided_args(b, _storage_size(seen))
    if offset is None:  # the view's own offset
        return b.step(f"as_strided on {name}", lambda t: torch.as_strided(
            view(t), size, stride), x, exact=True)
    return b.step(f"as_strided on {name}", lambda t: torch.as_strided(
        view(t), size, stride, offset), x, exact=True)


# --- activations with non-default optional scalars ----------------------------------------------

def _activations(b):
    """The activations by name, their optional scalars drawn now (a step runs its function
    several times: eagerly, exported and in the check)."""
    r = b.rng
    alpha, scale, input_scale = r.choice([0.5, 2.0]), r.choice([1.0, 1.5]), r.choice([1.0, 3.0,
                                                                                       -0.5])
    low, high = sorted(r.sample([-2.0, -0.5, 0.25, 1.0, 3.0], 2))
    slope, beta, limit = r.choice([0.0, 0.3, -0.5, 2.0]), r.choice([0.5, 2.0, -1.0]), \
        r.choice([0.5, 5.0, 20.0])
    approximate, lambd = r.choice(["none", "tanh"]), r.choice([0.25, 1.0])
    cut, value = r.choice([-0.5, 0.5]), r.choice([-2.0, 7.0])
    nan, posinf, neginf = r.choice([0.0, 2.5]), r.choice([None, 100.0]), r.choice([None, -7.0])
    exponent = r.choice([0.5, -1.5, 3.0])
    return {
        "elu": lambda t: torch.ops.aten.elu(t, alpha, scale, input_scale),
        "F.elu": lambda t: F.elu(t, alpha),
        "celu": lambda t: F.celu(t, alpha),
        "selu": F.selu,
        "leaky_relu": lambda t: F.leaky_relu(t, slope),
        "hardtanh": lambda t: F.hardtanh(t, low, high),
        "relu6": F.relu6,
        "softplus": lambda t: F.softplus(t, beta=beta, threshold=limit),
        "gelu": lambda t: F.gelu(t, approximate=approximate),
        "hardshrink": lambda t: F.hardshrink(t, lambd),
        "softshrink": lambda t: F.softshrink(t, lambd),
        "threshold": lambda t: F.threshold(t, cut, value),
        "rrelu_eval": lambda t: F.rrelu(t, low / 4, high / 4, training=False),
        "hardsigmoid": F.hardsigmoid,
        "hardswish": F.hardswish,
        "logsigmoid": F.logsigmoid,
        "mish": F.mish,
        "tanhshrink": F.tanhshrink,
        "softsign": F.softsign,
        "glu": lambda t: F.glu(t, -1),
        "nan_to_num": lambda t: torch.nan_to_num(t / 0.0, nan=nan, posinf=posinf,
                                                 neginf=neginf),
        "clamp_min": lambda t: torch.clamp(t, min=low),
        "pow_scalar": lambda t: torch.pow(t.abs() + 0.5, exponent),
    }


def s_activation(b):
    x = b.pick("f")
    table = _activations(b)
    name = b.rng.choice(sorted(table))
    return b.step(name, table[name], x)


# --- attention: every mask form -----------------------------------------------------------------

def _mask(b, shape, boolean: bool, dead_rows: bool):
    keep = b.gen.random(shape) > 0.3
    if dead_rows and len(shape) >= 2 and shape[-2] > 1:
        keep[..., 0, :] = False  # a query row with no key: torch answers 0
    if boolean:
        return torch.from_numpy(keep)
    values = torch.from_numpy(b.gen.integers(-8, 9, shape) / 4.0).float()
    return torch.where(torch.from_numpy(keep), values, float("-inf"))


def _mask_shape(b, batch, heads, q_len, k_len, rank):
    full = [batch, heads, q_len, k_len][4 - rank:]
    return tuple(1 if b.chance(0.3) else d for d in full)


def s_attention(b):
    """q (batch, heads, L, E), k (.., S, E), v (.., S, Ev) or 3-d; a bool or float mask of
    rank 2 to 4 with size-1 dims, is_causal, scale, grouped or broadcast k/v heads."""
    r = b.rng
    batch, heads, q_len, k_len = r.randint(1, 2), r.choice([1, 2, 4]), r.randint(1, 5), \
        r.randint(1, 5)
    e, ev = r.choice([2, 4, 8]), r.choice([2, 3, 4, 8])
    rank = 3 if b.chance(0.2) else 4
    k_heads = heads if rank == 3 or b.chance(0.6) else r.choice([1, heads])
    lead = (batch, heads) if rank == 4 else (batch,)
    k_lead = (batch, k_heads) if rank == 4 else (batch,)
    q = b.add_input((*lead, q_len, e), torch.float32)
    k = b.add_input((*k_lead, k_len, e), torch.float32)
    v = b.add_input((*k_lead, k_len, ev), torch.float32)
    inputs = [q, k, v]
    form = r.choice(["none", "bool", "float"])
    if form != "none":
        shape = _mask_shape(b, batch, heads, q_len, k_len, r.randint(2, rank))
        inputs.append(b.add_example(_mask(b, shape, form == "bool", b.chance(0.5))))
    causal = b.chance(0.3)
    scale = r.choice([None, None, 0.5])
    gqa = k_heads != heads and b.chance(0.5)

    def attend(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              scale=scale, enable_gqa=gqa)
    return b.step(f"sdpa mask={form}{list(inputs[3].shape) if form != 'none' else ''} "
                  f"causal={causal} ev={ev} k_heads={k_heads}", attend, *inputs)


# --- out= into views of a buffer ------------------------------------------------------------------

def _buffer_view(name: str, buf):
    return {"slice": lambda: buf[1:4], "column": lambda: buf.t()[1] if buf.dim() == 2 else
            buf[::2], "every_other": lambda: buf[::2], "row": lambda: buf[0]}[name]()


def s_out_view(b):
    """An op writing with out= into a view of a fresh buffer, then the buffer used: the
    exported program scatters the result back (a view too small, which torch resizes in
    place, must be refused, never answered short)."""
    x = b.pick("f", lo=1, hi=1, nonempty=True)
    shape = b.rng.choice([(6,), (4, 4), (2, 6)])
    where = b.rng.choice(["slice", "column", "every_other", "row"])
    op = b.rng.choice(["arange", "linspace", "add", "mul", "sin"])
    fits = _buffer_view(where, torch.zeros(shape)).numel()
    count = fits if b.chance(0.85) else b.rng.randint(2, 4)  # else maybe a resize
    scale = b.rng.choice([2.0, -0.5])

    def write(t):
        buf = torch.zeros(shape)
        out = _buffer_view(where, buf)
        if op == "arange":
            torch.arange(count, out=out)
        elif op == "linspace":
            torch.linspace(0.0, 1.0, count, out=out)
        else:
            part = t[:out.numel()].reshape(out.shape)
            {"add": lambda: torch.add(part, scale, out=out),
             "mul": lambda: torch.mul(part, scale, out=out),
             "sin": lambda: torch.sin(part, out=out)}[op]()
        return buf * 1
    return b.step(f"{op} out= {where} of {list(shape)}", write, x)
