"""Pictures of what legalization did: `legato show MODEL --backend B -o graph.svg`.

The model is drawn twice, before and after legalization for the backend. Every call is a
node coloured by its decision (legal, kept, decomposed, custom, fallback, failed); the
calls a decomposition produced are grouped in a cluster labelled with the op and source
call they came from; calls of external and primitive functions are boxes naming their
backend or pattern. Hovering a node shows op, attributes, types and the reason. Beside the
drawings, a table gives the placement and cost report (legato.legalization.placement).

`graph(...)` builds the picture as plain data (`Picture`); `dot_text` writes Graphviz DOT;
legato.show.svg lays it out as SVG itself (so no Graphviz install is needed) and wraps
that in a self-contained HTML page.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from .. import api
from ..ir import CALL_OP, CUSTOM_OP, Call, Const, Module
from ..ir.errors import LegatoError
from ..legalization.backend import BACKEND_RULE, DECLINED, TAKEN
from ..legalization.config import load_config
from ..legalization.report import sentence
from ..passes.manager import PassManager
from ..passes.pipeline import Lowering, lowering_passes
from ..plugins.context import Context, context as current_context
from .dot import dot_text
from .picture import COLOURS, Graph, Node, Picture
from .svg import html_page, svg_text

MAX_TOOLTIP = 600


def graph(model, backend: str, config=None, max_level: int | None = None, *,
          context: Context | None = None) -> Picture:
    """The model before and after legalization for `backend` (partial mode: calls that
    cannot be legalized are drawn as failed instead of stopping the picture)."""
    host = context or current_context()
    source = api.load_model(model, context=host)
    be = host.backend(backend)
    cfg = load_config(config, be.name, host.registry, host.backends)
    # compile's own passes up to a placed module, the backend's fusions included
    lowering = Lowering(host, be, cfg, max_level, mode="partial")
    module, _ = PassManager(lowering_passes(lowering))(source)
    if max_level is not None:
        cfg = replace(cfg, max_level=max_level)
    judge = _Judge(host.registry, be, cfg, lowering.fallback, lowering.fallback_calls)
    before = _draw(source, "b", f"before: {_count(source)} calls", judge, grouped=False)
    title = f"after, for {be.name}: {_count(module)} calls"
    if lowering.recovered:
        title += " (recomposed first: " + ", ".join(
            f"{op} x{n}" for op, n in sorted(lowering.recovered.items())) + ")"
    if lowering.qdq is not None and lowering.qdq.folded:
        title += " (QDQ folded into " + ", ".join(
            f"{op} x{n}" for op, n in sorted(lowering.qdq.folded.items())) + ")"
    after = _draw(module, "a", title, judge, grouped=True)
    placement = lowering.report.placement
    return Picture(before, after, be.name, placement.text().splitlines())


def _count(module: Module) -> int:
    return sum(len(fn.calls) for fn in module.functions.values() if fn.kind != "external")


class _Judge:
    """What legalization decides for one call, and why (the backend's own decision, with
    the legalizer's routes for calls it declines)."""

    def __init__(self, registry, backend, config, fallback, fallback_calls):
        self.registry, self.backend, self.config = registry, backend, config
        self.fallback, self.fallback_calls = fallback, fallback_calls

    def __call__(self, call: Call) -> tuple[str, str]:
        if call in self.fallback_calls:
            return "fallback", f"runs on the fallback {self.fallback.name}"
        if call.op == CUSTOM_OP:
            return "custom", f"tunnelled to {self.backend.name} as a custom op"
        opdef = self.registry.get(call.op)
        decision = self.backend.decide(call, self.config, opdef.level)
        if decision.action in TAKEN:
            return decision.action, decision.reason
        if decision.rule == BACKEND_RULE or decision.action == "decomposed":
            return "decomposed", decision.reason
        if decision.rule == DECLINED and opdef.decompose is not None:
            return "decomposed", decision.reason
        if decision.rule == DECLINED and self.fallback is not None and \
                self.fallback.why_not(call) is None:
            return "fallback", f"{decision.reason}; runs on the fallback {self.fallback.name}"
        return "failed", decision.reason


def _draw(module: Module, prefix: str, title: str, judge: _Judge, grouped: bool) -> Graph:
    g = Graph(title)
    fn = module.main
    producer: dict = {}
    for i, param in enumerate(fn.params):
        node = Node(f"{prefix}p{i}", param.name or f"input {i}", "value",
                    f"input {param.name or i}: {param.type}")
        g.nodes.append(node)
        producer[param] = node.id
    last = (None, None)  # (origin key, cluster) of the previous call
    for i, call in enumerate(fn.calls):
        node = _call_node(module, call, f"{prefix}{i}", judge)
        key = _cluster_key(call) if grouped else None
        if key is not None:
            # one box per run of calls from one source call: recomposed calls of several
            # layers share a source text, and must not share a box
            if key != last[0]:
                last = (key, f"{prefix}c_{len(g.clusters)}")
                g.clusters[last[1]] = _cluster(key)
            node.cluster = last[1]
        else:
            last = (None, None)
        g.nodes.append(node)
        for value in call.inputs:
            if value is not None and value in producer:
                g.edges.append((producer[value], node.id))
        for value in call.outputs:
            producer[value] = node.id
    for i, value in enumerate(fn.results):
        node = Node(f"{prefix}r{i}", f"result {i}", "value", f"result {i}: {value.type}")
        g.nodes.append(node)
        if value in producer:
            g.edges.append((producer[value], node.id))
    return g


def _cluster_key(call: Call) -> tuple[str, str, str] | None:
    """(source, op, what was done) of the box `call` belongs in; None for a call that is
    whole: from the model, or recomposed and then taken as it is."""
    origin = call.origin
    if origin is None:
        return None
    done = [r for r in origin.rules if r.startswith(("decompose:", "lower:"))]
    if not done:  # recomposed, or tunnelled as a custom op: one call, taken whole
        return None
    return origin.source, origin.op, "lowered" if done[0].startswith("lower:") else \
        "decomposed"


def _cluster(key: tuple[str, str, str]) -> str:
    source, op, done = key
    return f"{op} ({source}), {done}"


def _call_node(module: Module, call: Call, node_id: str, judge: _Judge) -> Node:
    types = ", ".join("None" if v is None else
                      (f"const {v.type}" if isinstance(v, Const) else str(v.type))
                      for v in call.inputs)
    results = ", ".join(str(v.type) for v in call.outputs)
    attrs = json.dumps(call.attrs.to_json())
    if call.op == CALL_OP:
        name = call.attrs["callee"]
        fn = module.functions[name]
        where = fn.attrs.get("codegen") or fn.attrs.get("fusion") or fn.attrs.get("pattern") \
            or fn.kind
        ops = ", ".join(c.op for c in fn.calls)
        return Node(node_id, f"@{name}\non {where}" if fn.kind == "external" else
                    f"@{name}\n{where}", fn.kind if fn.kind in COLOURS else "external",
                    _clip(f"@{name} ({fn.kind}, {where}): {ops}\n({types}) -> {results}"))
    kind, reason = judge(call)
    label = call.op
    if call.op == CUSTOM_OP:
        label = f"custom\n{call.attrs.get('operator_name', '')}".rstrip()
    lines = [f"{call.op}({types}) -> {results}"]
    if call.attrs:
        lines.append(f"attributes: {attrs}")
    lines.append(f"{kind}: {sentence(reason)}")
    if call.origin is not None and call.origin.rules[:1] == ("recompose",) and \
            _cluster_key(call) is None:
        lines.append(f"recomposed from {', '.join(call.origin.rules[1:])}")
    elif call.origin is not None and not call.origin.rules:  # as imported
        lines.append(f"from {call.origin.source}")
    elif call.origin is not None:
        lines.append(f"part of {call.origin.op} at {call.origin.source} via "
                     f"{' > '.join(call.origin.rules)}")
    return Node(node_id, label, kind, _clip("\n".join(lines)))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TOOLTIP else text[:MAX_TOOLTIP - 3] + "..."


# --- writing ------------------------------------------------------------------------------

FORMATS = (".dot", ".svg", ".html")


def write(picture: Picture, path, use_dot: bool | None = None) -> str:
    """Write `picture` to `path` (.dot, .svg or .html); returns how it was drawn. An .svg
    comes from Graphviz's `dot` when it is on PATH (unless `use_dot` is False), else from
    legato's own layout."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise LegatoError(f"cannot draw {path}: the file name must end in "
                          f"{', '.join(FORMATS)}")
    how = "DOT"
    if suffix == ".dot":
        data = dot_text(picture)
    elif suffix == ".html":
        data, how = html_page(picture), "HTML (legato's layout)"
    else:
        data = _graphviz_svg(picture) if use_dot is not False else None
        how = "SVG (Graphviz dot)"
        if data is None:
            data, how = svg_text(picture), "SVG (legato's layout)"
    try:
        path.write_text(data, encoding="utf-8")
    except OSError as err:
        raise LegatoError(f"cannot write {path}: {err.strerror}") from None
    return how


def _graphviz_svg(picture: Picture) -> str | None:
    dot = shutil.which("dot")
    if dot is None:
        return None
    try:
        done = subprocess.run([dot, "-Tsvg"], input=dot_text(picture), capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and "<svg" in done.stdout else None
