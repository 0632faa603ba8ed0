"""legato show: the picture's content (every call, its decision, clusters by origin) and
its three formats (DOT parsed by a small DOT grammar below; SVG and HTML parsed as XML)."""
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import legato
from legato.cli.commands import main
from legato.show import COLOURS, dot_text, graph, write

SVG = "{http://www.w3.org/2000/svg}"


# --- a DOT syntax check (the grammar of graphviz.org/doc/info/lang.html, without ports) --

TOKEN = re.compile(r'\s*(?:(->|--|[{}\[\];,=])|("(?:[^"\\]|\\.)*")|([A-Za-z_\x80-\uffff]'
                   r'[\w\x80-\uffff]*|-?(?:\.\d+|\d+(?:\.\d*)?))|(/\*.*?\*/|//[^\n]*))', re.S)


def tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        match = TOKEN.match(text, pos)
        assert match, f"DOT: cannot read {text[pos:pos + 40]!r}"
        pos = match.end()
        if not match.group(4):  # comments
            out.append(match.group(1) or match.group(2) or match.group(3))
    return out


class DotParser:
    """Parses a digraph; collects node ids (declared or used in edges) and edges."""

    def __init__(self, text: str):
        self.toks, self.i = tokens(text), 0
        self.nodes, self.edges, self.attrs = set(), [], {}

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want=None):
        tok = self.peek()
        assert tok is not None and (want is None or tok == want), \
            f"DOT: expected {want!r} at token {self.i}, got {tok!r}"
        self.i += 1
        return tok

    def is_id(self, tok):
        return tok is not None and tok not in "{}[];,=" and tok not in ("->", "--")

    def graph(self):
        self.take("digraph")
        if self.is_id(self.peek()):
            self.take()
        self.block()
        assert self.peek() is None, "DOT: text after the graph"
        return self

    def block(self):
        self.take("{")
        while self.peek() != "}":
            self.statement()
            if self.peek() == ";":
                self.take()
        self.take("}")

    def statement(self):
        tok = self.peek()
        if tok in ("graph", "node", "edge"):
            self.take()
            self.attr_list()
        elif tok in ("subgraph", "{"):
            self.subgraph()
        else:
            first = self.take()
            assert self.is_id(first), f"DOT: statement starts with {first!r}"
            if self.peek() == "=":
                self.take()
                assert self.is_id(self.take())
                return
            ends = [first]
            while self.peek() == "->":
                self.take()
                ends.append(self.take())
                assert self.is_id(ends[-1]), f"DOT: an edge ends in {ends[-1]!r}"
            self.nodes.update(ends)
            self.edges.extend(zip(ends, ends[1:]))
            attrs = self.attr_list() if self.peek() == "[" else {}
            if len(ends) == 1:
                self.attrs[first] = attrs

    def subgraph(self):
        if self.peek() == "subgraph":
            self.take()
            if self.is_id(self.peek()):
                self.take()
        self.block()

    def attr_list(self) -> dict:
        attrs = {}
        while self.peek() == "[":
            self.take()
            while self.peek() != "]":
                key = self.take()
                self.take("=")
                attrs[key] = self.take()
                if self.peek() in (",", ";"):
                    self.take()
            self.take("]")
        return attrs


def test_the_dot_check_refuses_broken_dot():
    DotParser('digraph g { a -> b [label="x\\"y"]; subgraph cluster_1 { c; } }').graph()
    for broken in ('digraph g { a -> ; }', 'digraph g { a [label="x"; }', 'digraph { a'):
        with pytest.raises(AssertionError):
            DotParser(broken).graph()


# --- the picture ---------------------------------------------------------------------------

def calls(module):
    return [c for fn in module.functions.values() for c in fn.calls]


def test_every_call_is_a_node_coloured_by_its_decision():
    config = {"backends": {"c_kernels": {"decompose": ["nn.gelu", "nn.softmax"]}}}
    picture = graph("example:transformer", "c_kernels", config)
    source = legato.load_model("example:transformer")
    before = [n for n in picture.before.nodes if n.kind != "value"]
    assert [n.label for n in before] == [c.op for c in source.main.calls]
    assert {n.label: n.kind for n in before if n.kind == "decomposed"} == \
        {"nn.gelu": "decomposed", "nn.softmax": "decomposed"}
    low = legato.compile(source, "c_kernels", config).module
    after = [n for n in picture.after.nodes if n.kind != "value"]
    assert [n.label for n in after] == [c.op for c in low.main.calls]
    assert set(picture.after.clusters.values()) == {
        "nn.softmax (main#12), decomposed", "nn.gelu (main#20), decomposed"}
    erf = next(n for n in after if n.label == "erf")
    assert picture.after.clusters[erf.cluster].startswith("nn.gelu")
    assert "part of nn.gelu at main#20 via decompose:nn.gelu" in erf.tooltip
    assert "erf(float32[1, 32, 256]) -> float32[1, 32, 256]" in erf.tooltip and "legal: c_kernels supports it" in erf.tooltip


def test_fallback_custom_and_failed_calls(backend_factory):
    backend_factory({"backend": "tiny", "fallback": "cpu_ref", "custom_ops": True,
                     "legal": {"exp": {}}}, kernels={"exp": np.exp})
    b = legato.GraphBuilder()
    x = b.input("x", (3,))
    module = b.build(b.call("nn.gelu", b.call("exp", x)), b.call("abs", x))
    picture = graph(module, "tiny", {"backends": {"tiny": {"keep": ["nn.gelu"]}}})
    kinds = {n.label: n.kind for n in picture.after.nodes}
    assert kinds["exp"] == "legal" and kinds["abs"] == "fallback"
    assert kinds["custom\nnn.gelu"] == "custom"
    backend_factory({"backend": "alone", "legal": {"exp": {}}}, kernels={"exp": np.exp})
    failed = graph(module, "alone")  # abs: no kernel, no fallback, a primitive
    node = next(n for n in failed.after.nodes if n.label == "abs")
    assert node.kind == "failed" and "failed: alone does not list abs as legal" in node.tooltip


def test_partitioned_functions_are_boxes_with_their_backend():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 3))
    module = b.build(b.call("nn.relu", b.call("exp", x)))
    parted = legato.partition(module, ["c_kernels"])
    picture = graph(parted, "cpu_ref")
    boxes = [n for n in picture.after.nodes if n.kind == "external"]
    assert boxes and all("on c_kernels" in n.label for n in boxes)


@pytest.mark.parametrize("suffix", [".dot", ".svg", ".html"])
def test_each_format_parses_and_has_every_call(tmp_path, suffix):
    picture = graph("example:cnn", "cpu_ref")
    path = tmp_path / f"cnn{suffix}"
    write(picture, path, use_dot=False)
    text = path.read_text()
    ids = {n.id for g in (picture.before, picture.after) for n in g.nodes}
    if suffix == ".dot":
        parsed = DotParser(text).graph()
        assert ids <= parsed.nodes
        assert set(picture.after.edges) <= set(parsed.edges)
        some = picture.after.nodes[3]
        assert parsed.attrs[some.id]["fillcolor"] == f'"{COLOURS[some.kind]}"'
        return
    root = ET.fromstring(text)
    svg = root if suffix == ".svg" else root.find(".//" + SVG + "svg")
    assert svg is not None and svg.tag == SVG + "svg"
    drawn = {g.get("id") for g in svg.iter(SVG + "g") if "node" in (g.get("class") or "")}
    assert drawn == ids
    tooltips = [g.find(SVG + "title").text for g in svg.iter(SVG + "g")
                if "node" in (g.get("class") or "")]
    assert sum("decomposed" in t for t in tooltips) >= 2  # the convs, with their reasons
    if suffix == ".html":
        assert "<script" not in text and "http://" not in text.replace(
            "http://www.w3.org/", "")  # self-contained: nothing fetched


def test_dot_text_is_what_graphviz_reads():
    dot = dot_text(graph("example:mlp", "cpu_ref"))
    parsed = DotParser(dot).graph()
    assert any(a.startswith("b") for a, _ in parsed.edges)
    assert 'tooltip="' in dot and "cluster_after" in dot


def test_the_command(tmp_path, capsys):
    out = tmp_path / "t.html"
    assert main(["show", "example:transformer", "-b", "c_kernels", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and ET.parse(out)
    assert main(["show", "example:mlp", "-o", str(tmp_path / "x.png")]) == 1
    assert "must end in .dot, .svg, .html" in capsys.readouterr().err
    assert main(["show", "example:mlp", "-b", "c_kernels,cpu_ref", "-o", str(out)]) == 1
    assert "one backend at a time" in capsys.readouterr().err


def test_the_picture_recomposes_as_compile_does():
    b = legato.GraphBuilder()
    x = b.input("x", (2, 5, 16), "float32")
    ms = b.mean(b.power(x, 2.0), axes=[-1], keepdims=True)
    module = b.build(b.multiply(x, b.divide(1.0, b.sqrt(b.add(ms, 1e-6)))))
    picture = graph(module, "c_kernels")
    assert "recomposed first: nn.rms_norm x1" in picture.after.title
    assert [n.label for n in picture.after.nodes if n.kind != "value"] == \
        [c.op for c in legato.compile(module, "c_kernels").module.main.calls]
