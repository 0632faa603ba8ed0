"""`legato show MODEL --backend B -o graph.svg|.html|.dot`: the model before and after
legalization (legato.show draws it)."""
from __future__ import annotations

from ..ir.errors import LegatoError
from ..show import graph, write
from .model import add_model_arguments, backends_arg, load


def add_command(sub, parents=()) -> None:
    p = sub.add_parser("show", parents=list(parents),
                       help="draw MODEL before and after legalization (.svg, .html or .dot)")
    add_model_arguments(p)
    p.add_argument("-o", "--output", required=True,
                   help="graph.svg (Graphviz dot if installed, else legato's layout), "
                        "graph.html (self-contained, no network) or graph.dot")
    p.set_defaults(command=cmd_show)


def cmd_show(args) -> int:
    backend = backends_arg(args.backend)
    if not isinstance(backend, str):
        raise LegatoError("legato show draws one backend at a time; got "
                          f"{args.backend!r}")
    module, _ = load(args)
    picture = graph(module, backend, args.config, args.max_level)
    how = write(picture, args.output)
    kinds: dict[str, int] = {}
    for node in picture.after.nodes:
        if node.kind != "value":
            kinds[node.kind] = kinds.get(node.kind, 0) + 1
    print(f"wrote {args.output} ({how}): {len(picture.before.nodes)} nodes before, "
          f"{len(picture.after.nodes)} after; after: "
          + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    print("\n".join(picture.table))
    return 0
