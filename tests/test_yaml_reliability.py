"""Hostile and malformed capability files and configs: every one a bounded ConfigError
naming the file and key, quickly, with a short message."""
from __future__ import annotations

import time

import pytest
import yaml

import legato
from legato.ir.errors import quote
from legato.legalization.yamlsource import MAX_BYTES

MAX_MESSAGE = 2000


def laughs(levels: int, width: int = 9) -> str:
    """A config of nested aliases ("billion laughs"): `levels` lines of 50 bytes make a
    keep list of width**levels op names."""
    lines = ["backends:", "  cpu_ref:", "    decompose:",
             f"      - &l0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"      - &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines + [f"    keep: *l{levels - 1}"]) + "\n"


def config_error(config, match: str = "") -> str:
    """The message of the ConfigError legalizing example:mlp with `config` raises."""
    start = time.perf_counter()
    with pytest.raises(legato.ConfigError, match=match) as info:
        legato.legalize("example:mlp", backend="cpu_ref", config=config)
    assert time.perf_counter() - start < 5, "a hostile config must be refused quickly"
    message = str(info.value)
    assert len(message) < MAX_MESSAGE, message[:300]
    return message


def capability_error(source, match: str = "") -> str:
    with pytest.raises(legato.ConfigError, match=match) as info:
        legato.register_backend(source)
    message = str(info.value)
    assert len(message) < MAX_MESSAGE, message[:300]
    return message


# --- alias expansion and size ------------------------------------------------------------

@pytest.mark.parametrize("levels", [7, 9, 12])
def test_billion_laughs_is_refused_quickly_with_a_short_message(tmp_path, levels):
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(levels))
    message = config_error(str(path), r"laughs.yaml: line \d+, column \d+: more than 100000 "
                                      r"values \(aliases counted at every use\)")
    assert len(message) < 200


def test_billion_laughs_given_as_a_dict_is_refused_too():
    data = yaml.safe_load(laughs(9))  # a DAG of shared lists: 9**9 values if walked
    config_error(data, r"<config dict>: more than 100000 values")
    with pytest.raises(legato.ConfigError, match="more than 100000 values"):
        legato.register_backend({"backend": "laughs", "legal": {"add": {"dtypes": data}}})


def test_aliases_below_the_bound_are_quoted_briefly(tmp_path):
    """8**5 op names in keep pass the size bound; the error about the first (a list of
    4096) quotes a bounded part of it (it used to repr the whole expansion)."""
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(5, width=8))
    message = config_error(str(path), r"backends.cpu_ref.keep: unknown op \[\[\[")
    assert len(message) < 200


@pytest.mark.parametrize("text", ["backends: &a [*a]\n", "backends: &a {cpu_ref: *a}\n",
                                  "backends:\n  cpu_ref: &s\n    keep: [nn.relu, {<<: *s}]\n"])
def test_an_alias_inside_its_own_anchor_is_refused(tmp_path, text):
    path = tmp_path / "self.yaml"
    path.write_text(text)
    config_error(str(path), r"self.yaml: line \d+, column \d+: alias \*\w+ inside its own "
                            r"anchor \(a structure that contains itself\)")


def test_self_containing_dict_is_refused():
    data = {"backends": {"cpu_ref": {}}}
    data["backends"]["cpu_ref"]["keep"] = [data]
    config_error(data, "nested deeper than 32 levels")


def test_capability_aliases_stay_legal(backend_factory):
    backend = backend_factory(yaml.safe_load(
        "backend: aliased\nexecutes: false\n"
        "legal:\n  add: &f {dtypes: [float32]}\n  subtract: *f\n  multiply: *f\n"))
    assert set(backend.legal) == {"add", "subtract", "multiply"}


def test_large_legit_config_loads_in_linear_time(tmp_path):
    sections = "".join(f"  npu{i}:\n    keep: [nn.layer_norm, nn.gelu]\n    max_level: 1\n"
                        for i in range(4000))
    path = tmp_path / "big.yaml"
    path.write_text("backends:\n" + sections + "  cpu_ref:\n    keep: [nn.relu]\n")
    assert 150_000 < path.stat().st_size < MAX_BYTES
    start = time.perf_counter()
    result = legato.legalize("example:mlp", backend="cpu_ref", config=str(path))
    assert time.perf_counter() - start < 20
    assert result.report.ops("kept") == {"nn.relu": 2}


def test_file_over_the_size_bound_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("backends:\n  cpu_ref:\n    keep: [" + "nn.relu, " * 60_000 + "]\n")
    message = config_error(str(path), r"huge.yaml: larger than 512 KiB")
    assert len(message) < 200


# --- unreadable sources ------------------------------------------------------------------

@pytest.mark.parametrize("text, match", [
    (b"backends:\n  cpu_ref:\n    keep: [\xff\xfe]\n",
     r"bad.yaml: line 3: not valid UTF-8 \(byte 0xff at offset 32\)"),
    (b"backends: " + b"[" * 5000 + b"]" * 5000 + b"\n",
     r"bad.yaml: line 1, column \d+: nested deeper than 32 levels"),
    (b"backends: " + b"{a: " * 3000 + b"1" + b"}" * 3000 + b"\n", "nested deeper than 32"),
    (b"backends:\n  cpu_ref:\n    max_level: " + b"9" * 5000 + b"\n",
     r"bad.yaml: line 3, column 16 malformed YAML: cannot read value"),
    (b"backends:\n  cpu_ref:\n    keep: [2001-02-30]\n", r"line 3, column \d+ .*cannot read"),
    (b"backends: \x00\n", r"line 1: malformed YAML: character #x0000 is not allowed"),
    (b"backends:\n  cpu_ref: !!python/object:os.system {}\n", "malformed YAML"),
])
def test_unreadable_yaml_is_a_config_error_with_its_line(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    config_error(str(path), match)


def test_utf16_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_bytes("backends:\n  cpu_ref:\n    keep: [nn.relu]\n".encode("utf-16"))
    result = legato.legalize("example:mlp", backend="cpu_ref", config=str(path))
    assert result.report.ops("kept") == {"nn.relu": 2}


@pytest.mark.parametrize("source, match", [
    ([1, 2], r"config: expected a path, a dict or None, got list \[1, 2\]"),
    (5, "got int 5"),
    (1.5, "got float 1.5"),
    (b"configs/demo.yaml", "got bytes"),
    ("x\0y", "cannot read: embedded null byte"),
    ("a" * 5000, "cannot read: File name too long"),
    ("/dev/null", "/dev/null: cannot read: not a regular file"),
    ("/", "cannot read: not a regular file"),
])
def test_config_sources_that_are_not_paths_or_dicts(source, match):
    config_error(source, match)


@pytest.mark.parametrize("source", [[1], 7, None, b"x", 2.5])
def test_capability_sources_that_are_not_paths_or_dicts(source):
    capability_error(source, "capability file: expected a path to a YAML file or a mapping")


# --- wrongly typed values: user configs --------------------------------------------------

@pytest.mark.parametrize("config, match", [
    ({"backends": [1]}, r"key 'backends' must map backend names to settings, got \[1\]"),
    ({"backends": 0}, "key 'backends' must map"),
    ({"backends": {1: {}}}, "backends: expected backend names"),
    ({"backends": {"cpu_ref": 5}}, r"backends.cpu_ref: expected a mapping .*got 5"),
    ({"backends": {"cpu_ref": {"keep": 0}}}, "backends.cpu_ref.keep: expected a list of op"),
    ({"backends": {"cpu_ref": {"keep": ""}}}, "backends.cpu_ref.keep: expected a list"),
    ({"backends": {"cpu_ref": {"keep": [5]}}}, "keep: unknown op 5"),
    ({"backends": {"cpu_ref": {"keep": [["nn.relu"]]}}}, r"keep: unknown op \['nn.relu'\]"),
    ({"backends": {"cpu_ref": {"decompose": {"nn.gelu": 1}}}}, "decompose: expected a list"),
    ({"backends": {"cpu_ref": {"max_level": 1.5}}}, "max_level: expected an int >= 0"),
    ({"backends": {"cpu_ref": {"max_level": True}}}, "max_level: expected an int >= 0"),
    ({"backends": {"cpu_ref": {"max_level": "1"}}}, "max_level: expected an int >= 0"),
    ({"backends": {"cpu_ref": {"x" * 100_000: 1}}}, "unknown key backends.cpu_ref.'xxx"),
    ({"backends": {"cpu_ref": {"keep": ["nn.relu" * 100_000]}}}, "unknown op 'nn.relu"),
])
def test_wrongly_typed_config_values_name_the_key(config, match):
    message = config_error(config, match)
    assert "<config dict>" in message and len(message) < 400


# --- wrongly typed values: capability files ----------------------------------------------

def cap(**entries) -> dict:
    return {"backend": "typed", "executes": False, **entries}


@pytest.mark.parametrize("capability, match", [
    (cap(legal_levels=1.5), r"legal_levels: expected a list of levels \(ints >= 0\), got 1.5"),
    (cap(legal_levels=0), "legal_levels: expected a list of levels"),
    (cap(legal_levels="0"), "legal_levels: expected a list of levels"),
    (cap(legal_levels=[1.5]), r"legal_levels: 1.5 is not a level"),
    (cap(legal_levels=[True]), r"legal_levels: True is not a level"),
    (cap(legal_levels=[-1]), r"legal_levels: -1 is not a level"),
    (cap(legal=["add"]), "key 'legal' must map op names"),
    (cap(legal={"add": 5}), r"legal.add: expected a mapping of conditions"),
    (cap(legal={"add": {"dtypes": 5}}), r"legal.add.dtypes: expected a list of dtypes, got 5"),
    (cap(legal={"add": {"dtypes": "float32"}}), "legal.add.dtypes: expected a list"),
    (cap(legal={"add": {"dtypes": None}}), "legal.add.dtypes: expected a list"),
    (cap(legal={"add": {"dtypes": [["float32"]]}}), r"unknown dtype \['float32'\]"),
    (cap(legal={"add": {"ranks": 3}}), r"legal.add.ranks: expected a list of ranks"),
    (cap(legal={"add": {"ranks": [1.5]}}), r"legal.add.ranks: expected a list of ranks"),
    (cap(legal={"add": {"ranks": [True]}}), r"legal.add.ranks: expected a list of ranks"),
    (cap(legal={"add": {"attrs": [1]}}), r"legal.add.attrs: expected a mapping"),
    (cap(legal={"sum": {"attrs": {"keepdims": 1}}}), r"legal.sum.attrs.keepdims: .*bool"),
    (cap(legal={"nn.softmax": {"attrs": {"axis": "x"}}}), r"legal.nn.softmax.attrs.axis"),
    (cap(legal={"nn.softmax": {"attrs": {"axis": {"a": 1}}}}), "legal.nn.softmax.attrs.axis"),
    (cap(legal={"nn.conv2d": {"attrs": {"data_layout": "NCWH"}}}), "must be one of"),
    (cap(legal={"nn.conv2d": {"attrs": {"strides": [1.5, 1]}}}), "attrs.strides: .*ints"),
    (cap(legal={"add": {"check": ":x"}}), r"legal.add.check: expected 'module:function'"),
    (cap(legal={"add": {"check": ["a:b"]}}), r"legal.add.check: expected 'module:function'"),
    (cap(kernels=5), "kernels must map op names"),
    (cap(kernels=["add"]), "kernels must map op names"),
    (cap(kernels={"add": 5}), r"kernels.add: expected 'module:function', got 5"),
    (cap(kernels={"add": None}), r"kernels.add: expected a function or 'module:function'"),
    (cap(kernels="no colon"), r"kernels: expected 'module:TABLE' or a mapping"),
    (cap(kernels="os:sep"), r"kernels: 'os:sep' is not a mapping"),
    (cap(rules={"add": 1}), r"rules.add: expected 'module:function'"),
    (cap(executes="yes"), r"key 'executes' must be true or false, got 'yes'"),
    (cap(custom_ops=None), r"key 'custom_ops' must be true or false"),
    (cap(fallback=5), r"key 'fallback': expected the name of another backend, got 5"),
    (cap(fallback="typed"), r"key 'fallback': expected the name of another backend"),
    (cap(fallback="x" * 100_000), r"key 'fallback': expected the name of another backend"),
    ({"backend": "y" * 65}, r"key 'backend' must name the backend \(an identifier of at most"),
    (cap(domain="a b"), r"key 'domain': expected a domain name"),
    (cap(layout="NCWH"), r"key 'layout': expected one of NCHW, NHWC, got 'NCWH'"),
    (cap(description=5), r"key 'description': expected a string"),
    ({"backend": ["x"]}, r"key 'backend' must name the backend .*, got \['x'\]"),
])
def test_wrongly_typed_capability_values_name_the_key(capability, match):
    message = capability_error(capability, match)
    assert message.startswith("<capability file dict>: ")


def test_register_backend_checks_its_python_arguments():
    with pytest.raises(legato.ConfigError, match="kernels argument must map op names"):
        legato.register_backend(cap(), kernels=[1])
    with pytest.raises(legato.ConfigError, match="kernels argument: unknown op 'nn.relux'"):
        legato.register_backend(cap(), kernels={"nn.relux": print})
    with pytest.raises(legato.ConfigError, match="executor argument: expected a callable"):
        legato.register_backend(cap(), executor=3)
    assert "typed" not in legato.list_backends()


def test_capability_file_with_wrong_types_names_the_file(tmp_path):
    path = tmp_path / "cap.yaml"
    path.write_text("backend: x\nlegal_levels: 1.5\n")
    capability_error(str(path), r"cap.yaml: legal_levels: expected a list of levels")


def test_quote_is_bounded_for_any_value():
    shared = ["x"] * 9
    for _ in range(9):
        shared = [shared] * 9
    cyclic: dict = {}
    cyclic["self"] = cyclic
    for value in (shared, cyclic, 10 ** 5000, "y" * 10 ** 6, b"z" * 10 ** 6):
        assert len(quote(value)) <= 80


def test_a_kernel_reference_to_something_not_callable_is_a_config_error_at_registration():
    with pytest.raises(legato.ConfigError, match="sep_kernels kernel for add: 'os:sep' is a "
                                                 "str, not a function"):
        legato.register_backend({"backend": "sep_kernels", "legal": {"add": {}},
                                 "kernels": {"add": "os:sep"}})
    assert "sep_kernels" not in legato.list_backends()
