"""`legato recompose MODEL`: find the composite ops an exporter wrote out as primitives.

    legato recompose model.onnx                  # every composite op; summary on stderr
    legato recompose model.onnx -b c_kernels     # the ops c_kernels keeps (as compile does)
    legato recompose model.onnx --ops nn.gelu,nn.rms_norm --explain --print-ir
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import api
from ..passes.recompose import Recovery, recompose_for, summary
from .model import load


def add_command(sub, parents) -> None:
    p = sub.add_parser("recompose", parents=parents,
                       help="recover composite ops (gelu, norms, attention, ...) that an "
                            "exporter wrote out as primitives")
    p.add_argument("model", help="text-form file, .onnx file, or example:NAME")
    p.add_argument("--shape", action="append", metavar="NAME=SIZE,...",
                   help="ONNX: bind symbolic dimensions (batch=1,seq=128) or whole inputs "
                        "(x=1x3x224x224); repeatable")
    p.add_argument("--backend", "-b", help="recompose the ops this backend keeps or lists "
                                           "as legal (default: every composite op)")
    p.add_argument("--ops", help="comma-separated ops to recompose (overrides --backend)")
    p.add_argument("--explain", action="store_true",
                   help="per op: how many were recovered and why the others were not")
    p.add_argument("--print-ir", action="store_true", help="print the recomposed module")
    p.add_argument("-o", "--output", help="write the recomposed module's text here")
    p.set_defaults(command=cmd_recompose)


def cmd_recompose(args: argparse.Namespace) -> int:
    host = api.current_context()
    module, _ = load(args)  # the ONNX importer's symbolic dimensions bound by --shape
    backend = host.backend(args.backend) if args.backend else None
    setting = [op.strip() for op in args.ops.split(",") if op.strip()] if args.ops else True
    result, report = recompose_for(module, backend, setting, registry=host.registry)
    print(f"{args.model}: {summary(report)}", file=sys.stderr)
    if args.explain:
        print(_explained(report), file=sys.stderr)
    if args.output:
        Path(args.output).write_text(str(result))
    if args.print_ir:
        print(result, end="")
    return 0


def _explained(report: Recovery) -> str:
    return report.text() or "no composite op to look for"
