"""A harness worker: `python -m tests.fuzz.worker TARGET_DIR MEMORY_BYTES`.

Reads one JSON request per line on stdin ({"target": name, "seed": n}) and answers on the
stdout it was started with: {"event": "start", "timeout": seconds} once the target is
imported, then {"event": "done", "outcome": ..., "message": ..., "details": ...}. Anything
the code under test prints goes to stderr, so it cannot corrupt the answers.
"""
from __future__ import annotations

import faulthandler
import json
import os
import resource
import sys
import traceback
from pathlib import Path

from .cases import DEFAULT_CASE_TIMEOUT, CaseResult, discover, load_target, one_line, run_case


def limit_memory(max_bytes: int) -> None:
    """An address-space bound, so a blow-up is a MemoryError (or a death) in this worker,
    not the machine swapping."""
    if max_bytes <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        max_bytes = min(max_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, hard))


def _answer_channel():
    """The original stdout for answers; fd 1 then points at stderr (C code prints too)."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def serve(target_dir: Path, channel) -> None:
    paths, modules = discover(target_dir), {}
    for line in sys.stdin:
        request = json.loads(line)
        name, seed = request["target"], int(request["seed"])
        print(f"--- case {name} seed {seed}", file=sys.stderr, flush=True)
        try:
            if name not in modules:
                modules[name] = load_target(paths[name])
            module = modules[name]
        except Exception as err:  # noqa: BLE001 - a broken target is a finding
            channel.write(json.dumps({"event": "start", "timeout": DEFAULT_CASE_TIMEOUT}) + "\n")
            result = CaseResult("raw", f"cannot load target {name}: {one_line(err)}",
                                traceback.format_exc())
        else:
            timeout = float(getattr(module, "CASE_TIMEOUT", DEFAULT_CASE_TIMEOUT))
            channel.write(json.dumps({"event": "start", "timeout": timeout}) + "\n")
            result = run_case(module, seed)
        channel.write(json.dumps({"event": "done", "outcome": result.outcome,
                                  "message": result.message,
                                  "details": result.details[-20000:]}) + "\n")


def main(argv: list[str]) -> None:
    target_dir, max_bytes = Path(argv[0]), int(argv[1])
    channel = _answer_channel()
    faulthandler.enable()  # a native crash leaves its Python stack on stderr
    limit_memory(max_bytes)
    serve(target_dir, channel)


if __name__ == "__main__":
    main(sys.argv[1:])
