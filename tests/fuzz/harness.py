"""The fuzz harness: worker processes fed (target, seed) cases, time-sliced across targets.

Each worker is a long-lived `python -m tests.fuzz.worker` under an address-space limit. A
case that outlives its target's CASE_TIMEOUT is a hang (the worker is killed); a worker
that dies is a crash (or a memory finding when it was killed without a signal of its own,
as the kernel's OOM killer does). Either way the worker is replaced and the run goes on.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cases import CaseResult, DEFAULT_CASE_TIMEOUT

REPO = Path(__file__).resolve().parents[2]
LOAD_TIMEOUT = 300.0          # importing a target (legato, plugins, onnx) may be slow
DEFAULT_MEMORY = 4 << 30      # RLIMIT_AS of a worker
STDERR_TAIL = 4000
GUESS = 1e-3                  # seconds charged to a target when one of its cases starts


@dataclass
class Case:
    target: str
    seed: int


@dataclass
class Finished:
    case: Case
    result: CaseResult
    seconds: float


class Worker:
    """One worker process and the case it is running."""

    def __init__(self, target_dir: Path, memory: int):
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        # one BLAS thread per worker: the workers themselves are the parallelism
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker", str(target_dir), str(memory)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=REPO,
            env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""
        self.case: Case | None = None
        self.started = 0.0
        self.ready_at = time.monotonic()  # since when the current case has had this worker
        self.deadline = float("inf")
        self.log_offset = 0
        self.killed = False

    @property
    def fd(self) -> int:
        return self.proc.stdout.fileno()

    def submit(self, case: Case) -> None:
        self.case = case
        self.started = time.monotonic()
        self.deadline = self.started + LOAD_TIMEOUT
        self.log_offset = self.log.seek(0, os.SEEK_END)
        self.proc.stdin.write((json.dumps({"target": case.target, "seed": case.seed})
                               + "\n").encode())
        self.proc.stdin.flush()

    def read_messages(self) -> list[dict] | None:
        """Complete answer lines now available; None at end of file (the worker died)."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def last_words(self) -> str:
        """What the worker wrote to stderr during the current case (bounded)."""
        self.log.seek(self.log_offset)
        text = self.log.read().decode(errors="replace")
        return text[-STDERR_TAIL:]

    def kill(self) -> None:
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


def death_result(worker: Worker) -> CaseResult:
    """Why a worker ended in the middle of a case."""
    code = worker.proc.wait()
    words = worker.last_words()
    last = _cause(words)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ \
            else f"signal {-code}"
        if -code == signal.SIGKILL:  # not us (hangs are handled apart): the OOM killer
            return CaseResult("memory", "worker killed (SIGKILL), out of memory?", words)
        return CaseResult("crash", f"worker died with {name}" + (f": {last}" if last else ""),
                          words)
    return CaseResult("crash", f"worker exited with status {code} in the middle of a case"
                      + (f": {last}" if last else ""), words)


_FAULT_LINES = ("Fatal Python error", "ERROR: AddressSanitizer", "runtime error:")
_NOISE_LINES = ("Extension modules", "Current thread", "Thread 0x", "File ", "---", "<")


def _cause(words: str) -> str:
    """The line of a dying worker's stderr that says why: faulthandler's or a sanitizer's
    verdict when there is one, else the last line that is not a stack frame."""
    lines = [line.strip() for line in words.splitlines() if line.strip()]
    verdict = next((line for line in lines if line.startswith(_FAULT_LINES)
                    or _FAULT_LINES[2] in line), None)
    if verdict is None:
        verdict = next((line for line in reversed(lines) if not line.startswith(_NOISE_LINES)),
                       "")
    return verdict[:200]


@dataclass
class Plan:
    targets: list[str]
    seeds: dict[str, list[int]] | None = None  # fixed seeds per target, or
    seed_start: int = 0                         # open-ended from here until the deadline
    deadline: float = float("inf")


@dataclass
class Scheduler:
    """Hands out cases: the target that has had the least time so far goes next."""
    plan: Plan
    elapsed: dict = field(default_factory=dict)
    issued: dict = field(default_factory=dict)

    def __post_init__(self):
        for target in self.plan.targets:
            self.elapsed.setdefault(target, 0.0)
            self.issued.setdefault(target, 0)

    def _remaining(self, target: str) -> bool:
        if self.plan.seeds is not None:
            return self.issued[target] < len(self.plan.seeds[target])
        return time.monotonic() < self.plan.deadline

    def next_case(self) -> Case | None:
        open_targets = [t for t in self.plan.targets if self._remaining(t)]
        if not open_targets:
            return None
        target = min(open_targets, key=lambda t: (self.elapsed[t], self.issued[t]))
        n = self.issued[target]
        self.issued[target] += 1
        seed = self.plan.seeds[target][n] if self.plan.seeds is not None \
            else self.plan.seed_start + n
        # charge a guess now (so two idle workers do not both pick this target for free),
        # the real time when the case ends
        self.elapsed[target] += GUESS
        return Case(target, seed)

    def charge(self, target: str, seconds: float) -> None:
        self.elapsed[target] += seconds - GUESS


def run_plan(plan: Plan, target_dir: Path, jobs: int = 2, memory: int = DEFAULT_MEMORY,
             on_result=None) -> list[Finished]:
    """Run every case of `plan` on `jobs` workers; returns each case's result."""
    scheduler, results = Scheduler(plan), []
    selector = selectors.DefaultSelector()
    workers: list[Worker] = []

    def spawn():
        worker = Worker(target_dir, memory)
        workers.append(worker)
        selector.register(worker.fd, selectors.EVENT_READ, worker)
        return worker

    def retire(worker):
        selector.unregister(worker.fd)
        workers.remove(worker)
        worker.close()

    def finish(worker, result):
        # the worker's wall time since its last case, the harness's own work included:
        # cheap cases must pay their overhead too, or a target of sub-millisecond cases
        # would take the workers over
        now = time.monotonic()
        seconds, worker.ready_at = now - worker.ready_at, now
        scheduler.charge(worker.case.target, seconds)
        done = Finished(worker.case, result, seconds)
        results.append(done)
        worker.case = None
        if on_result is not None:
            on_result(done)

    try:
        for _ in range(max(1, jobs)):
            spawn()
        while True:
            for worker in list(workers):
                if worker.case is None:
                    case = scheduler.next_case()
                    if case is not None:
                        worker.submit(case)
            busy = [w for w in workers if w.case is not None]
            if not busy:
                break
            timeout = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            for key, _ in selector.select(timeout=min(timeout, 5.0)):
                _on_readable(key.data, finish, retire, spawn)
            now = time.monotonic()
            for worker in [w for w in workers if w.case is not None and now > w.deadline]:
                limit = worker.deadline - worker.started
                worker.kill()
                finish(worker, CaseResult("hang", f"no result after {limit:.0f} s",
                                          worker.last_words()))
                retire(worker)
                spawn()
    finally:
        for worker in list(workers):
            if worker.case is not None:
                worker.kill()
            retire(worker)
        selector.close()
    return results


def _on_readable(worker: Worker, finish, retire, spawn) -> None:
    messages = worker.read_messages()
    if messages is None:  # end of file: the worker is gone
        if worker.case is not None:
            finish(worker, death_result(worker))
        retire(worker)
        spawn()
        return
    for message in messages:
        if message["event"] == "start":
            timeout = float(message.get("timeout") or DEFAULT_CASE_TIMEOUT)
            worker.deadline = time.monotonic() + timeout
            worker.started = time.monotonic()
        elif message["event"] == "done" and worker.case is not None:
            finish(worker, CaseResult(message["outcome"], message["message"],
                                      message.get("details", "")))
