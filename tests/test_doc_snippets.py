"""Every snippet of README.md and docs/*.md runs, so the docs cannot drift from the code.

- ```python blocks run in order, one namespace per document (later blocks see what earlier
  ones defined), in a scratch directory;
- ```sh blocks: each `legato ...` line runs through the CLI entry point in-process and
  must exit 0 (`# exits 1` at the end of a line: must exit 1);
- ```yaml and ```toml blocks must parse;
- a block whose info string says `no-run: <reason>` (```python no-run: needs torch) is
  illustrative only and skipped, with the reason in the test id's listing; plain ``` and
  ```text blocks are output and not run.
"""
from __future__ import annotations

import shlex
import sys
import tomllib
import types
import warnings
from pathlib import Path

import pytest
import yaml

import legato
from legato.cli.commands import main as cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "sh", "yaml", "toml"}


def blocks(path: Path) -> list[tuple[int, str, str, str]]:
    """(line, language, info after the language, body) of every fenced block."""
    found, opened, body = [], None, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if opened is None and line.startswith("```"):
            opened, body = (number, line[3:].strip()), []
        elif opened is not None and line.strip() == "```":
            lang, _, info = opened[1].partition(" ")
            found.append((opened[0], lang, info.strip(), "\n".join(body) + "\n"))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"{path.name}:{opened[0]}: the block is never closed"
    return found


def test_every_snippet_is_run_or_says_why_not():
    for path in DOCS:
        for line, lang, info, _ in blocks(path):
            if info.startswith("no-run"):
                assert lang in RUN and info.partition(":")[2].strip(), \
                    f"{path.name}:{line}: a no-run block names its reason (no-run: why)"
            else:
                assert "`" not in info, f"{path.name}:{line}: an info string has no backticks"
                assert lang in RUN | {"", "text"}, f"{path.name}:{line}: ```{lang} is not " \
                    "run by this test; use python/sh/yaml/toml or mark it no-run: why"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch working directory that still sees the repository's configs/."""
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "docs" / "img").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def restored_context():
    """What the snippets add to the process-wide context (ops, backends, in-process
    plugins) is removed afterwards, so other tests see the installed plugins only."""
    host = legato.context()
    ops, backends = set(host.registry.names()), set(host.backends)
    plugins = {name for name, _ in host.pm.list_name_plugin()}
    yield
    for name in set(host.registry.names()) - ops:
        host.registry.unregister(name)
        if name in host._ops_added:
            host._ops_added.remove(name)
    for name in set(host.backends) - backends:
        del host.backends[name]
    for name, _ in host.pm.list_name_plugin():
        if name not in plugins:
            host.pm.unregister(name=name)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_snippets_run(path, scratch, restored_context, capsys):
    # a real module, so snippets can register themselves as a plugin
    module = types.ModuleType(f"doc_snippets_{path.stem.replace('-', '_')}")
    sys.modules[module.__name__] = module
    try:
        run_blocks(path, module.__dict__, capsys)
    finally:
        del sys.modules[module.__name__]


def run_blocks(path: Path, namespace: dict, capsys) -> None:
    for line, lang, info, body in blocks(path):
        if info.startswith("no-run") or lang not in RUN:
            continue
        where = f"{path.name}:{line}"
        if lang == "python":
            run_python(body, namespace, where)
        elif lang == "sh":
            run_shell(body, where, capsys)
        elif lang == "yaml":
            assert yaml.safe_load(body) is not None, where
        else:
            tomllib.loads(body)


def run_python(body: str, namespace: dict, where: str) -> None:
    code = compile(body, where, "exec")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", legato.LegatoWarning)
        exec(code, namespace)  # noqa: S102 - the docs' own examples


def run_shell(body: str, where: str, capsys) -> None:
    for number, text in enumerate(body.splitlines()):
        command, _, comment = text.partition(" #")
        command = command.strip()
        if not command:
            continue
        assert command.startswith("legato "), f"{where}+{number + 1}: {command!r} is not " \
            "a legato command; mark the block no-run: why"
        expected = 1 if "exits 1" in comment else 0
        code = cli(shlex.split(command)[1:])
        out, err = capsys.readouterr()
        assert code == expected, f"{where}+{number + 1}: `{command}` exited {code}:\n" \
                                 f"{out[-2000:]}\n{err[-2000:]}"
