"""Shape rules: the one place that says how ops turn shapes and attributes into shapes.

Op inference, reference and C kernels, lowering rules and importers all ask these
functions, so an edge case (a ceil-mode window starting in the right padding, a slice
with a negative step past the start) is decided once. Geometry comes back as immutable
parameter objects (`Window`, `SliceAxis`) that carry every number a consumer needs, so
nobody re-derives an output size or a padding from the attributes.

Every refusal is a `ShapeError` naming the attribute and value at fault.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from .errors import ShapeError, quote
from .symbols import Expr, as_expr, assume_le

INDEX_LIMIT = 2**31  # window attributes stay below it: bounds every backend's index arithmetic
MAX_EMPTY_PARTS = 1 << 16  # a zero-size dim splits into any number of empty parts
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def fail(message: str):
    raise ShapeError(message)


# --- axes and broadcasting ----------------------------------------------------------------

def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [0, rank); negative counts from the end."""
    if not -rank <= axis < rank:
        fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes, rank: int, keep_order: bool = False) -> tuple[int, ...]:
    """Distinct axes, sorted unless `keep_order` (a permutation, pads per axis): None is
    every axis; negative counts from the end."""
    if axes is None:
        return tuple(range(rank))
    out = tuple(norm_axis(a, rank, "axis") for a in axes)
    if len(set(out)) != len(out):
        fail(f"axes {list(axes)} repeat an axis")
    return out if keep_order else tuple(sorted(out))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The numpy broadcast of `shapes` (right-aligned; size-1 dims stretch)."""
    first = shapes[0]
    if all(s == first for s in shapes[1:]):  # the common case, on every elementwise call
        return tuple(first)
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            fail(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """`shape` after reducing the (normalized) `axes`."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def channel_view(channels: int, rank: int, axis: int) -> tuple[int, ...]:
    """The shape that views a per-channel parameter of shape (channels,) so it broadcasts
    along `axis` of a rank-`rank` tensor: (1, channels, 1, 1) for axis 1 of rank 4."""
    axis = norm_axis(axis, rank, "channel axis")
    return (1,) * axis + (channels,) + (1,) * (rank - axis - 1)


# --- reshape and split --------------------------------------------------------------------

def resolve_reshape(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """The reshape target with its one -1 resolved (0 is a size, not ONNX's 'copy')."""
    if any(isinstance(d, Expr) for d in (*shape, *target)):
        return _resolve_symbolic_reshape(tuple(shape), tuple(target))
    size = math.prod(shape)
    if sum(1 for d in target if d == -1) > 1:
        fail(f"shape {list(target)} has more than one -1")
    if any(d < -1 for d in target) or 0 in target and size != 0:
        fail(f"shape {list(target)} has an invalid dimension (0 is not 'copy' in legato)")
    known = math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or size % known:
            fail(f"cannot reshape {list(shape)} ({size} elements) to {list(target)}")
        target = tuple(size // known if d == -1 else d for d in target)
    if math.prod(target) != size:
        fail(f"cannot reshape {list(shape)} ({size} elements) to {list(target)}")
    return tuple(target)


def _resolve_symbolic_reshape(shape: tuple, target: tuple) -> tuple:
    """resolve_reshape over symbolic dims: the -1 must divide out exactly (`batch*seq*768`
    over `12*64` is `batch*seq`), and the element counts must be the same expression."""
    size = math.prod(shape)
    concrete = [d for d in target if not isinstance(d, Expr)]
    if concrete.count(-1) > 1 or any(d < -1 for d in concrete):
        fail(f"shape {list(target)} has more than one -1 or a negative dimension")
    if -1 in concrete:
        known = math.prod(d for d in target if isinstance(d, Expr) or d != -1)
        rest = as_expr(size).exact_div(known) if known != 0 else None
        if rest is None:
            fail(f"cannot tell how {size} elements of {list(shape)} divide by {known} "
                 f"for the -1 of {list(target)}")
        target = tuple(rest if not isinstance(d, Expr) and d == -1 else d for d in target)
    if math.prod(target) != size:
        fail(f"cannot reshape {list(shape)} ({size} elements) to {list(target)}")
    return target


def split_sizes(dim: int, sections) -> tuple[int, ...]:
    """Part sizes of a split of `dim`: `sections` equal parts (an int) or the given sizes."""
    if isinstance(sections, numbers.Integral):
        sections = int(sections)
        if dim == 0 and sections > MAX_EMPTY_PARTS:
            fail(f"split of an empty dimension into {sections} parts: at most "
                 f"{MAX_EMPTY_PARTS} results")
        if sections <= 0 or dim % sections:
            fail(f"cannot split a dimension of {dim} into {sections} equal parts")
        return (dim // sections,) * sections
    sections = [int(s) for s in sections]
    if not sections or any(s < 0 for s in sections) or sum(sections) != dim:
        fail(f"split sizes {sections} do not sum to the dimension {dim}")
    return tuple(sections)


def chunk_sizes(dim: int, chunk: int) -> tuple[int, ...]:
    """Parts of `chunk` elements, the last one smaller (torch.split with an int); an empty
    dim is one empty part."""
    if chunk <= 0:
        fail(f"chunk size {chunk} must be positive")
    return tuple(min(chunk, dim - i) for i in range(0, dim, chunk)) or (0,)


# --- slices -------------------------------------------------------------------------------

class SliceAxis(NamedTuple):
    """One axis of an ONNX Slice after clamping: indices start, start + step, ... stopping
    before `stop` (-1 for a negative step running through index 0), `length` of them."""
    start: int
    stop: int
    step: int
    length: int

    def as_slice(self) -> slice:
        """The Python slice selecting the same elements."""
        return slice(self.start, None if self.stop < 0 else self.stop, self.step)


def slice_axis(dim: int, start: int, stop: int, step: int) -> SliceAxis:
    """ONNX Slice on an axis of length `dim`: negative bounds count from the end, then
    clamp to [0, dim] (step > 0) or [-1, dim - 1] (step < 0)."""
    if step == 0:
        fail("slice step cannot be 0")
    start = start + dim if start < 0 else start
    stop = stop + dim if stop < 0 else stop
    if step > 0:
        start, stop = min(max(start, 0), dim), min(max(stop, 0), dim)
    else:
        start, stop = min(max(start, 0), dim - 1), min(max(stop, -1), dim - 1)
    return SliceAxis(start, stop, step, max(0, -(-(stop - start) // step)))


def slice_params(shape: Sequence[int], attrs: Mapping) -> list[SliceAxis]:
    """Per axis of `shape` the clamped slice of a strided_slice call's attributes (begin,
    end, and optional axes and strides); axes not named keep everything."""
    begin, end = attrs["begin"], attrs["end"]
    axes = attrs.get("axes")
    axes = axes if axes is not None else tuple(range(len(begin)))
    steps = attrs.get("strides")
    steps = steps if steps is not None else (1,) * len(begin)
    if not len(begin) == len(end) == len(axes) == len(steps):
        fail("begin, end, axes and strides must have the same length")
    params = [SliceAxis(0, d, 1, d) for d in shape]
    seen = set()
    for b, e, a, s in zip(begin, end, axes, steps):
        a = norm_axis(a, len(shape))
        if a in seen:
            fail(f"axis {a} is sliced twice")
        seen.add(a)
        params[a] = _symbolic_slice_axis(shape[a], b, e, s) \
            if any(isinstance(v, Expr) for v in (shape[a], b, e)) \
            else slice_axis(shape[a], int(b), int(e), int(s))
    return params


def _symbolic_slice_axis(dim, begin, end, step) -> SliceAxis:
    """A forward slice where the dim, start or end is symbolic (`position_ids[:, :seq]`): the
    end clamps to the dim as ONNX and numpy do, which is recorded as a guard (the
    end within the dim) where it is not known; so does a start counted from the end."""
    if step < 1:
        fail(f"a slice of {dim} from {begin} to {end} by {step}: over symbolic sizes only "
             "forward slices (step >= 1) are supported")
    if isinstance(begin, int) and begin < 0:  # from the end (x[:, -1:]): within the dim
        assume_le(-begin, dim, f"a slice of {dim} from {begin}")
        begin = dim + begin
    assume_le(0, begin, f"a slice from {begin}")  # (not counted from the end, as -1 is)
    if isinstance(end, int) and end < 0:
        end = dim + end
    elif isinstance(end, int) and (not isinstance(dim, int) and end >= INDEX_LIMIT):
        end = dim  # "to the end", written as a huge end
    assume_le(end, dim, f"a slice ending at {end} of a dimension of {dim}")
    assume_le(begin, end, f"a slice from {begin} to {end}")
    return SliceAxis(begin, end, step, (end - begin + step - 1) // step)


# --- sliding windows ----------------------------------------------------------------------

def out_size(size: int, kernel: int, stride: int = 1, dilation: int = 1, pad_begin: int = 0,
             pad_end: int = 0, ceil_mode: bool = False) -> int:
    """Number of windows along one axis (ONNX and PyTorch rules).

    Floor mode counts the windows that fit the padded input. Ceil mode also counts a
    partial last window, then drops the last window if it starts in the end padding: once,
    as ONNX and PyTorch do, even when that window would fit in floor mode. So in ceil mode
    a window larger than the padded input is one window (EfficientNet's pooler: kernel 1280
    over 7 cells), where its stride is larger than the excess."""
    span = dilation * (kernel - 1) + 1
    room = size + pad_begin + pad_end - span
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1  # the last window must start inside the input or the begin padding
    if room < 0 and out < 1:  # ceil mode keeps one window larger than the padded input
        fail(f"window of {span} (kernel {kernel}, dilation {dilation}) does not fit input "
             f"{size} with padding {pad_begin}+{pad_end}"
             + (f" (in ceil mode only a stride above the {-room} cells it overhangs makes "
                "it one window)" if ceil_mode and size + pad_begin else ""))
    return out


@dataclass(frozen=True)
class Window:
    """The geometry of a sliding-window op (convolution, pooling) over N spatial axes.

    Per axis: input size, kernel, stride, dilation, begin and end padding, and the number
    of output positions `out`. Window o along axis i covers the padded-input cells
    o * strides[i] + t * dilation[i] for t < kernel[i]; cell pads_begin[i] is input 0.
    A ceil-mode kernel larger than the padded input is cut to the taps inside it (the one
    window it makes reads and counts nothing else), so `kernel` and `strides` may be
    smaller than the attributes they came from."""
    spatial_in: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    ceil_mode: bool
    out: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.spatial_in)

    @property
    def padding(self) -> tuple[int, ...]:
        """legato's padding attribute: every begin, then every end."""
        return self.pads_begin + self.pads_end

    @property
    def span(self) -> tuple[int, ...]:
        """The dilated kernel extent per axis."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilation))

    @property
    def padded_in(self) -> tuple[int, ...]:
        return tuple(b + s + e for b, s, e in
                     zip(self.pads_begin, self.spatial_in, self.pads_end))

    @property
    def reach(self) -> tuple[int, ...]:
        """Padded-input cells from the start to the end of the last window, per axis."""
        return tuple((o - 1) * s + sp if o else 0
                     for o, s, sp in zip(self.out, self.strides, self.span))

    @property
    def overhang(self) -> tuple[int, ...]:
        """Cells past the end padding that ceil mode's last window reaches, per axis."""
        return tuple(max(0, r - p) for r, p in zip(self.reach, self.padded_in))

    @property
    def unreached(self) -> tuple[int, ...]:
        """Trailing cells of the padded input that no window covers, per axis."""
        return tuple(max(0, p - r) for r, p in zip(self.reach, self.padded_in))

    @property
    def sweep_padding(self) -> tuple[int, ...]:
        """The padding (begins, then ends) that gives every window, ceil mode's last
        included, a full set of cells: the end padding grows by the overhang."""
        return self.pads_begin + tuple(e + h for e, h in zip(self.pads_end, self.overhang))

    def blind_axis(self) -> int | None:
        """The first axis along which some window covers only padding (no input cell),
        or None. Such a window has no defined pooled value (an average of nothing)."""
        for i in range(self.rank):
            if _misses_input(self.spatial_in[i], self.kernel[i], self.strides[i],
                             self.pads_begin[i], self.dilation[i], self.out[i]):
                return i
        return None


def _misses_input(size, kernel, stride, pad_begin, dilation, out) -> bool:
    span = dilation * (kernel - 1) + 1
    if span <= pad_begin or (out - 1) * stride >= pad_begin + size:  # first or last window
        return True
    if dilation <= size:  # a window reaching the input cannot step over it
        return False
    # Windows starting in the begin padding may step over an input narrower than the
    # dilation; where their first tap at or after pad_begin lands repeats with period
    # <= dilation, so that many windows (at most 2**20) decide it.
    count = min(-(-pad_begin // stride), out, dilation, 1 << 20)
    starts = np.arange(count, dtype=np.int64) * stride
    first_tap = starts - ((starts - pad_begin) // dilation) * dilation
    return bool(np.any(first_tap >= pad_begin + size))


def _window_ints(values, count: int, least: int, what: str, name) -> tuple[int, ...]:
    values = tuple(values)
    if len(values) != count or any(not least <= v < INDEX_LIMIT for v in values):
        kind = "non-negative" if least == 0 else "positive"
        name = name() if callable(name) else name
        fail(f"{what} {name} {quote(list(values))} must be {count} {kind} ints below 2**31")
    return tuple(int(v) for v in values)


def window(spatial_in: Sequence[int], kernel: Sequence[int], strides=None, dilation=None,
           padding=None, ceil_mode: bool = False, *, what: str = "window",
           kernel_name="kernel") -> Window:
    """Validate a sliding window's attributes and compute its geometry.

    strides default to the kernel (pooling's rule), dilation to 1, padding (every begin,
    then every end) to 0. `what` and `kernel_name` name the op and its kernel in errors
    (`kernel_name` may be a function that makes the name: called only for the error)."""
    n = len(spatial_in)
    kernel = _window_ints(kernel, n, 1, what, kernel_name)
    strides = kernel if strides is None else _window_ints(strides, n, 1, what, "strides")
    dilation = (1,) * n if dilation is None else _window_ints(dilation, n, 1, what, "dilation")
    padding = (0,) * 2 * n if padding is None else \
        _window_ints(padding, 2 * n, 0, what, "padding")
    spatial_in = tuple(int(s) for s in spatial_in)
    out = tuple(out_size(spatial_in[i], kernel[i], strides[i], dilation[i], padding[i],
                         padding[n + i], bool(ceil_mode)) for i in range(n))
    kernel, strides = _inside_padded_input(kernel, strides, dilation, spatial_in, padding)
    return Window(spatial_in, kernel, strides, dilation, padding[:n], padding[n:],
                  bool(ceil_mode), out)


def _inside_padded_input(kernel, strides, dilation, spatial_in, padding):
    """The kernel cut to the taps that land inside the padded input, and the strides.
    Only ceil mode's one window larger than the padded input loses taps: those cells are
    never read nor counted (PyTorch and onnxruntime divide by the cells inside input +
    padding), so no kernel, decomposition or emitter sweeps a 1280 x 1280 window over a
    7 x 7 map. Its stride, never taken, becomes the padded size, so the cut window still
    makes one window by the rule above, in ceil mode and floor mode alike."""
    n, cut, steps = len(kernel), list(kernel), list(strides)
    for i, (k, d) in enumerate(zip(kernel, dilation)):
        padded = padding[i] + spatial_in[i] + padding[n + i]
        if d * (k - 1) + 1 > padded:
            cut[i], steps[i] = (padded - 1) // d + 1, padded
    return tuple(cut), tuple(steps)


def auto_pads(auto_pad: str, spatial_in: Sequence[int], kernel: Sequence[int],
              strides: Sequence[int], dilation: Sequence[int],
              padding: Sequence[int] | None = None) -> tuple[int, ...]:
    """ONNX auto_pad as explicit padding (every begin, then every end).

    NOTSET keeps `padding` (default 0); VALID pads nothing; SAME_UPPER / SAME_LOWER pad so
    that there are ceil(size / stride) windows, the odd cell at the end (UPPER) or at the
    beginning (LOWER)."""
    n = len(spatial_in)
    if auto_pad not in AUTO_PADS:
        fail(f"auto_pad {quote(auto_pad)} must be one of {', '.join(AUTO_PADS)}")
    if auto_pad == "NOTSET":
        return tuple(padding) if padding is not None else (0,) * 2 * n
    if auto_pad == "VALID":
        return (0,) * 2 * n
    begins, ends = [], []
    for size, k, s, d in zip(spatial_in, kernel, strides, dilation):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begins + ends)
