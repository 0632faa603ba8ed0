"""The quick, deterministic part of fuzzing, run by `make test`.

Every target's first QUICK_CASES seeds run in-process; a failure names the target and the
seeds, each reproducible with `python -m tests.fuzz --target T --seed S`. The harness
itself is checked on fake targets that crash, hang, raise or answer, run through worker
processes as `make fuzz` runs them.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

import legato
from legato.testing import SampleError, samples

from .cases import PROBLEMS, discover, load_target, run_case
from .harness import REPO

TARGETS = discover()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_quick_cases(name):
    target = load_target(TARGETS[name])
    if hasattr(target, "OPEN_BUGS"):  # cases of reported, unfixed bugs: the full run's
        target.OPEN_BUGS = False
    problems, answers = [], Counter()
    for seed in range(target.QUICK_CASES):
        result = run_case(target, seed)
        answers[result.outcome] += 1
        if result.outcome in PROBLEMS:
            problems.append(f"target {name} seed {seed}: {result.outcome}: {result.message}")
    assert not problems, "\n".join(problems)
    # a target whose every case is refused or skipped checks nothing (a broken set-up)
    assert answers["ok"] > 0, f"target {name}: no case ran to a checked result: {answers}"


def test_every_op_has_samples():
    """The fuzz programs and the conformance kit draw calls of every op from
    legato.testing: an op it cannot sample is named here."""
    missing = []
    for op in legato.list_ops():
        try:
            samples(op, count=2)
        except SampleError as err:
            missing.append(f"{op}: {err}")
    assert not missing, "ops without samples (legato.testing.samples):\n" + "\n".join(missing)


FAKE_TARGETS = {
    "crash": """
        import os
        def run(seed):
            if seed == 1:
                os.abort()
            return "ok"
    """,
    "hang": """
        import time
        CASE_TIMEOUT = 1.0
        def run(seed):
            if seed == 0:
                time.sleep(60)
            return "skipped"
    """,
    "mixed": """
        import legato
        from tests.fuzz import InvalidOutput, Mismatch
        def run(seed):
            if seed == 0:
                raise KeyError("raw")
            if seed == 1:
                raise Mismatch(f"result differs by {seed}")
            if seed == 2:
                raise InvalidOutput("tosa-opt rejects it")
            if seed == 3:
                raise legato.ShapeError("bad shape")  # a LegatoError is an answer
            if seed == 4:
                bytearray(2 << 30)  # over the worker's address-space limit of 1 GiB
            return "refused"
    """,
    "slow": """
        import time
        def run(seed):
            time.sleep(0.1)
            return "ok"
    """,
    "calm": """
        def run(seed):
            return ("ok", "refused", "skipped")[seed % 3]
    """,
}


def run_harness(target_dir, *args):
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz", "--target-dir", str(target_dir),
                           "--json", str(target_dir / "figures.json"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    return proc, json.loads((target_dir / "figures.json").read_text())


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fuzz_targets")
    for name, source in FAKE_TARGETS.items():
        (directory / f"target_{name}.py").write_text(textwrap.dedent(source))
    return directory


def test_harness_classifies_each_outcome(fake_dir):
    proc, figures = run_harness(fake_dir, "--cases", "5", "--jobs", "2", "--memory-gib", "1",
                                "--target", "crash", "--target", "hang", "--target", "mixed")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    targets = figures["targets"]
    assert (targets["crash"]["crash"], targets["crash"]["ok"]) == (1, 4)
    assert (targets["hang"]["hang"], targets["hang"]["skipped"]) == (1, 4)
    mixed = targets["mixed"]
    assert {o: mixed[o] for o in ("raw", "mismatch", "invalid", "refused", "memory")} == \
        {"raw": 1, "mismatch": 1, "invalid": 1, "refused": 1, "memory": 1}
    seeds = {(p["target"], p["outcome"]): p["seeds"] for p in figures["problems"]}
    assert seeds == {("crash", "crash"): [1], ("hang", "hang"): [0], ("mixed", "raw"): [0],
                     ("mixed", "mismatch"): [1], ("mixed", "invalid"): [2],
                     ("mixed", "memory"): [4]}
    assert "--target crash --seed 1" in proc.stdout  # the reproducing command


def test_harness_passes_when_every_case_answers(fake_dir):
    proc, figures = run_harness(fake_dir, "--cases", "6", "--target", "calm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calm = figures["targets"]["calm"]
    assert (calm["cases"], calm["ok"], calm["refused"], calm["skipped"]) == (6, 2, 2, 2)
    assert figures["problems"] == []


def test_harness_runs_for_a_time_budget(fake_dir):
    proc, figures = run_harness(fake_dir, "--minutes", "0.02", "--target", "calm",
                                "--target", "crash")
    assert figures["targets"]["calm"]["cases"] > 0 and figures["targets"]["crash"]["cases"] > 0
    assert proc.returncode == (1 if figures["problems"] else 0)


def test_harness_shares_time_between_fast_and_slow_targets(fake_dir):
    """Time-sliced: a target of 0.1 s cases still gets about half of a 3 s run (15
    cases) next to one whose cases take no time."""
    _, figures = run_harness(fake_dir, "--minutes", "0.05", "--jobs", "1",
                             "--target", "calm", "--target", "slow")
    assert figures["targets"]["slow"]["cases"] >= 5


def test_harness_deduplicates_problems_by_message_signature(tmp_path):
    (tmp_path / "target_numbers.py").write_text(textwrap.dedent("""
        from tests.fuzz import Mismatch
        def run(seed):
            raise Mismatch(f"result {seed} differs by {seed * 0.5}")
    """))
    proc, figures = run_harness(tmp_path, "--cases", "4", "--jobs", "1")
    assert [(p["count"], p["seeds"]) for p in figures["problems"]] == [(4, [0, 1, 2, 3])]
    assert "mismatch x4" in proc.stdout
