"""How the commands name a model and a backend: MODEL, --backend, --config, --max-level and
--shape (symbolic ONNX dimensions), and loading what they name."""
from __future__ import annotations

import argparse
import re

from .. import api
from ..frontends.examples import EXAMPLES
from ..frontends.onnx import load_with_nodes
from ..ir.errors import LegatoError, quote

DEFAULT_BACKEND = "cpu_ref"


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL, --backend, --config, --max-level, --shape: how commands name what to compile."""
    p.add_argument("model", help="text-form file, .onnx file, or example:" + "|".join(EXAMPLES))
    p.add_argument("--backend", "-b", default=DEFAULT_BACKEND,
                   help=f"backend name, or several comma-separated to partition the model "
                        f"(default: {DEFAULT_BACKEND}; see `legato backends`)")
    p.add_argument("--config", "-c", help="user config YAML (configs/*.yaml)")
    p.add_argument("--max-level", type=int, help="decompose every op above this level")
    p.add_argument("--shape", action="append", metavar="NAME=SIZE,...",
                   help="ONNX: bind symbolic dimensions (batch=1,seq=128) or whole inputs "
                        "(x=1x3x224x224); several sizes of one symbol (seq=64,128,256) "
                        "emit a function per size (shape buckets, emitting backends); "
                        "repeatable")


def parse_shapes(items) -> dict:
    """--shape values: {dim_param: size} and {input name: shape} for the ONNX importer,
    and {symbol: [size, ...]} where a symbol is given several sizes (`seq=64,128`: a bare
    size after NAME=SIZE is another size of NAME)."""
    shapes: dict = {}
    for item in items or ():
        name = None
        for part in filter(None, (p.strip() for p in item.split(","))):
            key, eq, value = part.partition("=")
            if not eq and name is not None and not isinstance(shapes[name], tuple) and \
                    re.fullmatch(r"\d+", part):  # another size of the symbol before it
                sizes = shapes[name] if isinstance(shapes[name], list) else [shapes[name]]
                shapes[name] = sizes + [int(part)]
                continue
            if not eq or not key.strip() or not re.fullmatch(r"\d+(x\d+)*", value.strip()):
                raise LegatoError(f"--shape {quote(part)}: expected NAME=SIZE (batch=1), "
                                  "NAME=SIZE,SIZE... (seq=64,128: shape buckets) or "
                                  "NAME=DIMxDIM... (x=1x3x224x224)")
            name = key.strip()
            dims = tuple(int(d) for d in value.strip().split("x"))
            shapes[name] = dims if "x" in value else dims[0]
    return shapes


def shape_buckets(args) -> dict | None:
    """The symbols --shape gives several sizes: legato.compile's shape_buckets."""
    buckets = {k: v for k, v in parse_shapes(getattr(args, "shape", None)).items()
               if isinstance(v, list)}
    return buckets or None


def load(args):
    """(module, ONNX nodes or None) for the model the command names, --shape applied (the
    symbols given one size are bound; those given several are shape buckets, left for
    compile)."""
    model = args.model
    shapes = {k: v for k, v in parse_shapes(getattr(args, "shape", None)).items()
              if not isinstance(v, list)}
    if not str(model).endswith(".onnx"):
        if shapes:
            raise LegatoError("--shape binds dimensions of ONNX models; "
                              f"{quote(model)} is not an .onnx file")
        return api.load_model(model), None
    try:  # loaded here to report per-ONNX-op coverage
        return load_with_nodes(model, shapes, registry=api.current_context().registry)
    except LegatoError as err:  # the importer speaks Python; say it the command line's way
        text = re.sub(r"bind it with input_shapes=\{'(.*?)': \((\.\.\.)\)\}",
                      r"bind it with --shape \1=DIMxDIM...", str(err))
        text = re.sub(r"bind it with input_shapes=\{'(.*?)': \.\.\.\}",
                      r"bind it with --shape \1=SIZE", text)
        if text == str(err):
            raise
        raise type(err)(text) from err


def backends_arg(arg: str):
    names = [n.strip() for n in arg.split(",") if n.strip()]
    if not names:
        raise LegatoError(f"--backend {arg!r} names no backend; see `legato backends`")
    return names if len(names) > 1 else names[0]
