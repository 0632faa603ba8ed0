"""The bounded YAML loader on libyaml's parser (where PyYAML has it) and on PyYAML's
pure-Python one: the same data from every legitimate file, and the same bounded ConfigError,
naming the file, line and bound, from every hostile one."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import legato
from legato.legalization import yamlsource
from tests.test_yaml_reliability import laughs

LOADERS = [yamlsource._BoundedLoader] + \
    ([yamlsource._BoundedCLoader] if getattr(yaml, "__with_libyaml__", False) else [])
SHIPPED = sorted(Path(__file__).resolve().parents[1].glob("plugins/*/legato_*/*.yaml"))


def test_the_libyaml_loader_is_the_one_used_where_pyyaml_has_it():
    assert yamlsource.LOADER is LOADERS[-1]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.parent.name)
def test_shipped_capability_files_read_the_same_with_either_loader(path, monkeypatch):
    found = []
    for loader in LOADERS:
        monkeypatch.setattr(yamlsource, "LOADER", loader)
        found.append(yamlsource.load_yaml(path, "capability file")[0])
    assert all(data == found[0] for data in found)
    assert found[0] == yaml.safe_load(path.read_text())


HOSTILE = {
    "laughs": (laughs(9), r"line \d+, column \d+: more than 100000 values \(aliases counted "
                          r"at every use\)$"),
    "nested": ("backends: " + "[" * 40 + "]" * 40 + "\n",
               r"line 1, column \d+: nested deeper than 32 levels$"),
    "very_nested": ("backends: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
                    r"line 1, column \d+: nested deeper than 32 levels$"),
    "self": ("backends: &a\n  x: *a\n", r"line 2, column \d+: alias \*a inside its own anchor "
                                        r"\(a structure that contains itself\)$"),
    "unsafe": ("backends: !!python/object/apply:os.system [ls]\n",
               r"line 1, column \d+ malformed YAML: could not determine a constructor for the "
               r"tag 'tag:yaml.org,2002:python/object/apply:os.system'$"),
}


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("loader", LOADERS, ids=lambda loader: loader.__name__)
def test_hostile_files_are_refused_with_the_file_line_and_bound(name, loader, tmp_path,
                                                                monkeypatch):
    monkeypatch.setattr(yamlsource, "LOADER", loader)
    text, message = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with pytest.raises(legato.ConfigError, match=f"^{path}: {message}"):
        legato.legalize("example:mlp", backend="cpu_ref", config=str(path))
