"""The data of a picture: nodes, edges and clusters of the two drawings."""
from __future__ import annotations

from dataclasses import dataclass, field

# decision -> fill colour (also the legend's order)
COLOURS = {"legal": "#b7e4c7", "kept": "#74c69d", "decomposed": "#ffd6a5",
           "custom": "#a0c4ff", "fallback": "#fdffb6", "failed": "#ffadad",
           "external": "#e0e0e0", "primitive": "#e0e0e0", "value": "#ffffff"}
LEGEND = {"legal": "the backend runs it natively",
          "kept": "kept by the config and run natively",
          "decomposed": "rewritten into lower-level ops (a box groups what it became)",
          "custom": "tunnelled to the backend as a custom op",
          "fallback": "runs on the fallback backend",
          "failed": "no route: the error names each route and why it failed",
          "external": "a call of a function another backend compiles (or a fused one)"}


@dataclass
class Node:
    id: str
    label: str
    kind: str           # a decision, "external"/"primitive" (function calls) or "value"
    tooltip: str = ""
    cluster: str = ""   # id of the cluster it is drawn in ("" for none)


@dataclass
class Graph:
    """One drawing: nodes in program order, edges (from id, to id), clusters id -> label."""

    title: str
    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    clusters: dict[str, str] = field(default_factory=dict)


@dataclass
class Picture:
    before: Graph
    after: Graph
    backend: str
    table: list[str] = field(default_factory=list)  # the placement and cost report, drawn aside
