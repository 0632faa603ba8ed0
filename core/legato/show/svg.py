"""legato's own drawing of a picture: a layered layout (every node one row
below its lowest input), SVG with a native tooltip per node, and a self-contained HTML page
around it. Used when Graphviz is not installed; nothing is fetched from the network."""
from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from .picture import COLOURS, LEGEND, Graph, Picture

ROW = 74          # vertical distance of layers
GAP = 18          # horizontal gap between nodes
CHAR = 7.0        # width of a character of the 12px font
PAD = 10          # cluster padding
MARGIN = 30
TITLE = 30        # height of a drawing's title line


@dataclass
class _Box:
    x: float  # centre
    y: float  # centre
    w: float
    h: float


def layout(g: Graph) -> tuple[dict[str, _Box], float, float]:
    """Boxes by node id, and the drawing's width and height."""
    preds: dict[str, list[str]] = {n.id: [] for n in g.nodes}
    for a, b in g.edges:
        preds[b].append(a)
    layer: dict[str, int] = {}
    # program order (inputs come before their users). The calls of one cluster are
    # consecutive in it; each run of calls in or out of a cluster starts below everything
    # placed before, so cluster boxes never share a row with other nodes.
    floor, segment, deepest = 0, "", 0
    for n in g.nodes:
        if n.cluster != segment:
            floor, segment = deepest + 1, n.cluster
        layer[n.id] = max(floor, 1 + max((layer[p] for p in preds[n.id]), default=-1))
        deepest = max(deepest, layer[n.id])
    rows: dict[int, list] = {}
    for n in g.nodes:
        rows.setdefault(layer[n.id], []).append(n)
    boxes: dict[str, _Box] = {}
    for depth in sorted(rows):
        row = rows[depth]
        for index, n in enumerate(row):
            lines = n.label.split("\n")
            w = max(64.0, max(len(line) for line in lines) * CHAR + 20)
            h = 22.0 + 14 * len(lines)
            want = [boxes[p].x for p in preds[n.id]]
            x = sum(want) / len(want) if want else index * 120.0
            boxes[n.id] = _Box(x, MARGIN + TITLE + depth * ROW + h / 2, w, h)
        _order(row, boxes)
    return boxes, *_normalise(boxes)


def _order(row, boxes: dict[str, _Box]) -> None:
    """Sort a layer by where its inputs are (a cluster's nodes kept together), then push
    nodes apart left to right so none overlap."""
    groups: dict[str, list[float]] = {}
    for n in row:
        groups.setdefault(n.cluster, []).append(boxes[n.id].x)
    group_x = {c: sum(xs) / len(xs) for c, xs in groups.items()}
    row = sorted(row, key=lambda n: (group_x[n.cluster] if n.cluster else boxes[n.id].x,
                                     boxes[n.id].x))
    previous, previous_cluster = None, ""
    for n in row:
        box = boxes[n.id]
        if previous is not None:
            gap = GAP * (3 if n.cluster != previous_cluster else 1)
            box.x = max(box.x, previous.x + (previous.w + box.w) / 2 + gap)
        previous, previous_cluster = box, n.cluster


def _normalise(boxes: dict[str, _Box]) -> tuple[float, float]:
    left = min((b.x - b.w / 2 for b in boxes.values()), default=0.0)
    for b in boxes.values():
        b.x += MARGIN + PAD - left
    width = max((b.x + b.w / 2 for b in boxes.values()), default=0.0) + MARGIN + PAD
    height = max((b.y + b.h / 2 for b in boxes.values()), default=0.0) + MARGIN
    return width, height


def _drawing(g: Graph, dx: float) -> tuple[list[str], float, float]:
    """SVG elements of one graph shifted right by `dx`; its width and height."""
    boxes, width, height = layout(g)
    out = [f'<text x="{dx + MARGIN:.0f}" y="{MARGIN + 4}" class="title">'
           f'{escape(g.title)}</text>']
    for cluster, label in g.clusters.items():
        members = [boxes[n.id] for n in g.nodes if n.cluster == cluster]
        x0 = min(b.x - b.w / 2 for b in members) - PAD + dx
        y0 = min(b.y - b.h / 2 for b in members) - PAD - 12
        x1 = max(max(b.x + b.w / 2 for b in members) + PAD + dx,
                 x0 + len(label) * CHAR * 0.9 + 12)  # room for the label (11px font)
        y1 = max(b.y + b.h / 2 for b in members) + PAD
        out.append(f'<g class="cluster"><title>{escape(label)}</title>'
                   f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" '
                   f'height="{y1 - y0:.1f}" rx="8"/>'
                   f'<text x="{x0 + 6:.1f}" y="{y0 + 13:.1f}">{escape(label)}</text></g>')
    for a, b in g.edges:
        s, t = boxes[a], boxes[b]
        x0, y0, x1, y1 = s.x + dx, s.y + s.h / 2, t.x + dx, t.y - t.h / 2
        mid = (y0 + y1) / 2
        out.append(f'<path class="edge" d="M{x0:.1f},{y0:.1f} C{x0:.1f},{mid:.1f} '
                   f'{x1:.1f},{mid:.1f} {x1:.1f},{y1:.1f}" marker-end="url(#arrow)"/>')
    for n in g.nodes:
        b = boxes[n.id]
        shape = (f'<ellipse cx="{b.x + dx:.1f}" cy="{b.y:.1f}" rx="{b.w / 2:.1f}" '
                 f'ry="{b.h / 2:.1f}" fill="{COLOURS[n.kind]}"/>' if n.kind == "value" else
                 f'<rect x="{b.x - b.w / 2 + dx:.1f}" y="{b.y - b.h / 2:.1f}" '
                 f'width="{b.w:.1f}" height="{b.h:.1f}" rx="6" fill="{COLOURS[n.kind]}"/>')
        lines = n.label.split("\n")
        top = b.y - 7 * (len(lines) - 1) + 4
        text = "".join(f'<tspan x="{b.x + dx:.1f}" y="{top + 14 * i:.1f}">{escape(line)}'
                       f'</tspan>' for i, line in enumerate(lines))
        out.append(f'<g class="node {n.kind}" id={quoteattr(n.id)}><title>'
                   f'{escape(n.tooltip)}</title>{shape}<text>{text}</text></g>')
    return out, width, height


STYLE = """
  text { font: 12px Helvetica, Arial, sans-serif; text-anchor: middle; }
  .title { font-size: 14px; font-weight: bold; text-anchor: start; }
  .cluster rect { fill: #fff4e6; stroke: #e8a33d; }
  .cluster text { text-anchor: start; fill: #9a5b00; font-size: 11px; }
  .node rect, .node ellipse { stroke: #555; }
  .node:hover rect, .node:hover ellipse { stroke: #000; stroke-width: 2.5; }
  .edge { fill: none; stroke: #777; }
  .legend text { text-anchor: start; }
  .table rect { fill: #f7f7f7; stroke: #bbb; }
  .table text { font: 11px Courier, monospace; text-anchor: start; white-space: pre; }
"""


def svg_text(picture: Picture) -> str:
    """Both drawings side by side with a legend, as a standalone SVG document."""
    before, w0, h0 = _drawing(picture.before, 0)
    after, w1, h1 = _drawing(picture.after, w0 + 40)
    legend, x = [], MARGIN
    for kind in ("legal", "kept", "decomposed", "custom", "fallback", "failed", "external"):
        legend.append(f'<g><title>{escape(LEGEND[kind])}</title>'
                      f'<rect x="{x}" y="6" width="14" height="14" rx="3" '
                      f'fill="{COLOURS[kind]}" stroke="#555"/>'
                      f'<text x="{x + 20}" y="18">{kind}</text></g>')
        x += 40 + len(kind) * CHAR
    table, tw, th = _table(picture.table, w0 + 40 + w1 + 40)
    width, height = max(w0 + 40 + w1 + tw, x), max(h0, h1, th) + 24
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">',
        f"<style>{STYLE}</style>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#777"/>'
        '</marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<g class="legend">{"".join(legend)}</g>',
        '<g transform="translate(0, 24)">', *before, *after, *table, "</g>", "</svg>", ""])


MONO = 6.6  # width of a character of the 11px monospace font


def _table(lines: list[str], x: float) -> tuple[list[str], float, float]:
    """The placement report beside the drawings: SVG elements, width (with the gap before
    it) and height."""
    if not lines:
        return [], 0.0, 0.0
    y0 = MARGIN + TITLE
    rows = "".join(f'<tspan x="{x + 8:.0f}" y="{y0 + 14 * (i + 1):.0f}">{escape(line)}'
                   f'</tspan>' for i, line in enumerate(lines))
    w = max(len(line) for line in lines) * MONO + 16
    h = 14 * len(lines) + 12
    return ([f'<g class="table"><rect x="{x:.0f}" y="{y0:.0f}" width="{w:.0f}" '
             f'height="{h:.0f}" rx="6"/><text>{rows}</text></g>'], 40 + w + MARGIN,
            y0 + h + MARGIN)


def html_page(picture: Picture) -> str:
    """A self-contained page (inline SVG and CSS, no scripts or fetches)."""
    title = f"legato show: {picture.backend}"
    return "\n".join([
        "<!DOCTYPE html>", '<html xmlns="http://www.w3.org/1999/xhtml" lang="en">',
        f'<head><meta charset="utf-8"/><title>{escape(title)}</title>',
        "<style>body { font-family: Helvetica, Arial, sans-serif; margin: 1em; }"
        " .scroll { overflow: auto; border: 1px solid #ddd; }</style></head>",
        f"<body><h1>{escape(title)}</h1>",
        "<p>Each call is coloured by what legalization decided for it; calls produced by a "
        "decomposition are grouped in a box naming the op and the call they came from. "
        "Hover a node for its op, attributes, types and the reason.</p>",
        '<div class="scroll">', svg_text(picture), "</div>", "</body></html>", ""])
