"""Graphviz DOT text of a picture (a plain text format; no Graphviz needed to write it)."""
from __future__ import annotations

from .picture import COLOURS, LEGEND, Node, Picture

def _q(text: str) -> str:
    """A DOT quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot_text(picture: Picture) -> str:
    """Graphviz DOT for both drawings, side by side."""
    lines = ["digraph legato {", "  rankdir=TB; newrank=true; compound=true;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];',
             '  edge [color="#666666", arrowsize=0.6];']
    legend = [k for k in COLOURS if k not in ("primitive", "value")]
    lines.append('  subgraph cluster_legend { label="decisions"; color="#cccccc"; '
                 'fontname="Helvetica";')
    lines.extend(f"    legend_{k} [label={_q(k)}, fillcolor={_q(COLOURS[k])}, "
                 f"tooltip={_q(LEGEND[k])}];" for k in legend)
    lines.append("    " + " -> ".join(f"legend_{k}" for k in legend) + " [style=invis];")
    lines.append("  }")
    for name, g in (("before", picture.before), ("after", picture.after)):
        lines.append(f"  subgraph cluster_{name} {{")
        lines.append(f"    label={_q(g.title)}; fontname=\"Helvetica\"; color=\"#999999\";")
        for cluster, label in g.clusters.items():
            lines.append(f"    subgraph cluster_{cluster} {{")
            lines.append(f"      label={_q(label)}; style=\"rounded,filled\"; "
                         f"fillcolor=\"#fff4e6\"; color=\"#e8a33d\";")
            lines.extend("      " + _dot_node(n) for n in g.nodes if n.cluster == cluster)
            lines.append("    }")
        lines.extend("    " + _dot_node(n) for n in g.nodes if not n.cluster)
        lines.extend(f"    {a} -> {b};" for a, b in g.edges)
        lines.append("  }")
    if picture.table:  # left-justified lines (\l) in a plain box beside the drawings
        text = "".join(line.replace("\\", "\\\\").replace('"', '\\"') + "\\l"
                       for line in picture.table)
        lines.append(f'  placement [shape=box, style=filled, fillcolor="#f7f7f7", '
                     f'fontname="Courier", fontsize=10, label="{text}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_node(n: Node) -> str:
    shape = ', shape=ellipse' if n.kind == "value" else \
        ', shape=box3d' if n.kind in ("external", "primitive") else ""
    return (f"{n.id} [label={_q(n.label)}, fillcolor={_q(COLOURS[n.kind])}, "
            f"tooltip={_q(n.tooltip)}{shape}];")
