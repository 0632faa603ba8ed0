"""Which core ATen ops (those tagged `torch.Tag.core`) the PyTorch importer maps, refuses on
purpose (with the reason) or lacks; with `--harness OUT.json` also the unmapped ATen ops
behind the torch conformance harness's exclusions, most excluded samples first.

    .venv/bin/python scripts/aten_coverage.py [--missing] [--harness /tmp/all.json]
"""
from __future__ import annotations

import argparse
import json
import re

import torch

# through the importer, so that every converter module has joined the table
from legato.frontends.torch import ATEN, refusal


def core_aten_ops() -> list[str]:
    names = set()
    for packet in dir(torch.ops.aten):
        try:
            op = getattr(torch.ops.aten, packet)
            overloads = op.overloads()
        except (AttributeError, RuntimeError):
            continue
        for overload in overloads:
            if torch.Tag.core in getattr(op, overload).tags:
                names.add(f"aten.{packet}.{overload}")
    return sorted(names)


def classify(names):
    mapped, refused, missing = [], {}, []
    for name in names:
        if name in ATEN:
            mapped.append(name)
        elif refusal(name):
            refused[name] = refusal(name)
        else:
            missing.append(name)
    return mapped, refused, missing


def harness_unmapped(path: str) -> dict[str, tuple[int, set]]:
    """Per unmapped ATen op named in the harness's exclusion reasons: the excluded samples
    (an op excluded as a whole counts once) and the OpInfo ops concerned."""
    with open(path) as f:
        outcomes = json.load(f)
    seen, found = set(), {}
    for o in outcomes:
        if o["status"] != "excluded" or (o["op"], o["case"]) in seen:
            continue
        seen.add((o["op"], o["case"]))
        for op in set(re.findall(r"aten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+", o["reason"])):
            if op not in ATEN and not refusal(op):
                samples, infos = found.get(op, (0, set()))
                found[op] = (samples + 1, infos | {o["op"]})
    return dict(sorted(found.items(), key=lambda kv: -kv[1][0]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="list the missing ops")
    parser.add_argument("--refused", action="store_true", help="list the refused ops")
    parser.add_argument("--harness", help="a torch_conformance --json output")
    args = parser.parse_args()
    names = core_aten_ops()
    mapped, refused, missing = classify(names)
    print(f"core ATen overloads: {len(names)}; mapped {len(mapped)}, refused with a reason "
          f"{len(refused)}, missing {len(missing)}")
    if args.refused:
        for name, why in refused.items():
            print(f"  refused {name}: {why}")
    if args.missing:
        for name in missing:
            print(f"  missing {name}")
    if args.harness:
        print("unmapped ATen ops in the harness's exclusions (samples, OpInfo ops):")
        for op, (samples, infos) in harness_unmapped(args.harness).items():
            print(f"  {samples:5d} {op}: {', '.join(sorted(infos))}")


if __name__ == "__main__":
    main()
