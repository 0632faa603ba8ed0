"""ONNX tensors: their metadata checked against their data, external data read safely.

A model file can lie about its sizes: dims that promise 16 GiB over a few bytes of data,
external data that points outside the model's directory or past the end of its file. Every
size is compared with the data actually present before anything is allocated or decoded.
Declared sizes and shapes (check_size, check_shape) and element types (onnx_dtype) are
checked here too, for the graph checks, the importer and the converters.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
from pathlib import Path

import numpy as np

from ...ir.errors import LegatoError, quote
from ...ir import DTYPES

EXTERNAL = 1   # TensorProto.EXTERNAL
MAX_RANK = 64
MAX_DIM = 2 ** 40
MAX_ELEMENTS = 2 ** 48   # per declared tensor shape: far beyond any real tensor


def check_size(size, where: str) -> int:
    """A dimension given by the user or the model: an int in [0, MAX_DIM]."""
    if isinstance(size, bool) or not isinstance(size, numbers.Integral):
        raise LegatoError(f"{where}: size {quote(size)} is not an integer")
    size = int(size)
    if size < 0:
        raise LegatoError(f"{where}: size {size} is negative")
    if size > MAX_DIM:
        raise LegatoError(f"{where}: size {size} exceeds the limit of {MAX_DIM}")
    return size


def check_shape(shape, where: str) -> tuple[int, ...]:
    """A whole shape: a sequence of at most MAX_RANK sizes with a bounded element count."""
    if not isinstance(shape, (list, tuple, np.ndarray)):
        raise LegatoError(f"{where}: shape {quote(shape)} is not a sequence of sizes")
    if len(shape) <= MAX_RANK and all(type(d) is int and 0 <= d <= MAX_DIM for d in shape):
        dims = tuple(shape)  # every size plain and in range: the checks below would pass
        if math.prod(dims) <= MAX_ELEMENTS:
            return dims
    if len(shape) > MAX_RANK:
        raise LegatoError(f"{where}: rank {len(shape)} exceeds the limit of {MAX_RANK}")
    dims = tuple(check_size(d, f"{where} dimension {i}") for i, d in enumerate(shape))
    elements = math.prod(dims)
    if elements > MAX_ELEMENTS:
        raise LegatoError(f"{where}: shape {list(dims)} has {elements} elements, more than "
                          f"the limit of {MAX_ELEMENTS}")
    return dims


def onnx_dtype(elem_type: int, where: str) -> str:
    """The legato dtype of an ONNX TensorProto element type, or a LegatoError."""
    known = _ELEMENT_TYPES.get(elem_type)
    if known is not None:
        return known[0]
    from onnx import TensorProto, helper
    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - onnx raises various errors for unknown enums
        name = None
    if name not in DTYPES:
        label = TensorProto.DataType.Name(elem_type) if elem_type in \
            TensorProto.DataType.values() else str(elem_type)
        raise LegatoError(f"{where}: ONNX element type {label} is not supported by legato "
                          f"(supported: {', '.join(DTYPES)})")
    _ELEMENT_TYPES[elem_type] = name, np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    return name


# element type -> (legato dtype, numpy dtype), of the supported types seen: onnx's lookup
# and numpy's dtype names cost microseconds, paid per tensor and value of a model
_ELEMENT_TYPES: dict[int, tuple[str, np.dtype]] = {}


def element_type(tensor, where: str):
    """(legato dtype, numpy dtype) of a tensor's element type, or a LegatoError."""
    onnx_dtype(tensor.data_type, where)
    return _ELEMENT_TYPES[tensor.data_type]


def check_tensor(tensor, where: str) -> None:
    """Dims non-negative and bounded, and the data present exactly what they declare."""
    dims = check_shape(list(tensor.dims), where)
    dtype, np_dtype = element_type(tensor, where)
    count = math.prod(dims)
    if tensor.HasField("segment"):
        raise LegatoError(f"{where}: segmented tensors are not supported")
    if tensor.data_location == EXTERNAL:
        external_info(tensor, where)  # validated here, read by load_external_data
        return
    if tensor.HasField("raw_data"):
        have, want, unit = len(tensor.raw_data), count * np_dtype.itemsize, "bytes"
    else:
        from onnx import helper
        have = len(getattr(tensor, helper.tensor_dtype_to_field(tensor.data_type)))
        want, unit = count, "values"
    if have != want:
        raise LegatoError(f"{where}: declares shape {list(dims)} of {dtype} ({want} {unit}) "
                          f"but holds {have} {unit}")


# element types whose raw data is the array's bytes as they are (what onnx's to_array reads
# with np.frombuffer on a little-endian machine): float, (u)int8-64, bool, float16, double
_FLAT_RAW = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13}
_LITTLE_ENDIAN = sys.byteorder == "little"


def tensor_array(tensor, where: str, checked: bool = False) -> np.ndarray:
    """The data of a tensor (external data already loaded) as a numpy array, its metadata
    checked first unless `checked` says check_tensor passed on it already."""
    if not checked:
        check_tensor(tensor, where)
    if tensor.data_location == EXTERNAL:
        raise LegatoError(f"{where}: external data was not loaded")
    if _LITTLE_ENDIAN and tensor.data_type in _FLAT_RAW and tensor.HasField("raw_data"):
        # as onnx's to_array reads it, without its per-call dtype and field lookups
        return np.frombuffer(tensor.raw_data, element_type(tensor, where)[1]) \
            .reshape(tuple(tensor.dims))
    from onnx import numpy_helper
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # noqa: BLE001 - numpy/protobuf errors on malformed data
        raise LegatoError(f"{where}: data does not decode as shape {list(tensor.dims)}: "
                          f"{quote(str(err))}") from None


# --- external data ---------------------------------------------------------------------------

def external_info(tensor, where: str) -> tuple[str, int, int]:
    """(location, offset, byte length) of an external tensor, with the length its dims need."""
    entries: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key in entries:
            raise LegatoError(f"{where}: external data key {quote(entry.key)} is given twice")
        entries[entry.key] = entry.value
    location = entries.get("location")
    if not location:
        raise LegatoError(f"{where}: external data has no location")
    offset = _external_int(entries, "offset", where)
    _, np_dtype = element_type(tensor, where)
    want = math.prod(tensor.dims) * np_dtype.itemsize
    length = _external_int(entries, "length", where, want)
    if length != want:
        raise LegatoError(f"{where}: external data length {length} does not match the "
                          f"declared shape {list(tensor.dims)} ({want} bytes)")
    return location, offset, length


def _external_int(entries, key: str, where: str, default: int = 0) -> int:
    text = entries.get(key)
    if text is None:
        return default
    if not text.isdigit() or len(text) > 19:
        raise LegatoError(f"{where}: external data {key} {quote(text)} is not a "
                          "non-negative integer")
    return int(text)


def external_tensors(model, nodes=None):
    """Every tensor of the model (initializers and Constant values) stored externally.
    `nodes`: the graph's nodes.node_fields, where the caller has them."""
    tensors = list(model.graph.initializer)
    for attributes in (n.attribute for n in model.graph.node) if nodes is None else \
            (n.attributes for n in nodes):
        tensors += [a.t for a in attributes if a.type == 4]   # TENSOR
    return [t for t in tensors if t.data_location == EXTERNAL]


def load_external_data(model, base_dir, weights=None) -> None:
    """Read every external tensor's bytes into it, but for those `weights` (a MappedWeights)
    maps from the model file. Locations must be relative paths that stay inside `base_dir`
    (after resolving "..", and symlinks); sizes must match the file."""
    tensors = [t for t in external_tensors(model) if weights is None or not weights.owns(t)]
    if not tensors:
        return
    if base_dir is None:
        raise LegatoError("the model keeps tensor data in external files: pass "
                          "base_dir=<the directory they are in> to load it")
    base = Path(base_dir).resolve()
    for tensor in tensors:
        where = f"tensor {quote(tensor.name)}"
        location, offset, length = external_info(tensor, where)
        tensor.raw_data = _read_inside(base, location, offset, length, where)
        tensor.data_location = 0
        del tensor.external_data[:]


def _read_inside(base: Path, location: str, offset: int, length: int, where: str) -> bytes:
    if os.path.isabs(location) or location.startswith(("/", "\\")) or "\x00" in location:
        raise LegatoError(f"{where}: external data location {quote(location)} must be a "
                          "relative path inside the model's directory")
    path = (base / location).resolve()
    if not path.is_relative_to(base):
        raise LegatoError(f"{where}: external data location {quote(location)} resolves "
                          f"outside the model's directory {str(base)!r}")
    try:
        if path.exists() and not path.is_file():  # a FIFO or device would block or never end
            raise LegatoError(f"{where}: external data {quote(location)} is not a "
                              "regular file")
        with open(path, "rb") as data_file:
            size = os.fstat(data_file.fileno()).st_size
            if offset + length > size:
                raise LegatoError(f"{where}: external data needs bytes {offset} to "
                                  f"{offset + length} of {quote(location)}, which has {size}")
            data_file.seek(offset)
            return data_file.read(length)
    except OSError as err:
        raise LegatoError(f"{where}: cannot read external data {quote(location)}: "
                          f"{err.strerror or err}") from None
