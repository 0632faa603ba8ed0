"""Progress on long work for the command line: drawn on a terminal, silent otherwise (so
logs, pipes and tests see only results)."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

WIDTH = 24  # characters of the bar


def interactive(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class Progress:
    """`done/total` steps as a bar on one line of `stream` (stderr), redrawn in place."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = interactive(self.stream) if enabled is None else enabled
        self.total, self.label, self.done = max(total, 1), label, 0

    def step(self, what: str = "") -> None:
        self.done += 1
        if self.enabled:
            filled = WIDTH * self.done // self.total
            self._draw(f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] "
                       f"{self.done}/{self.total} {what}"[:100])

    def close(self) -> None:
        if self.enabled:
            self._draw("")

    def _draw(self, text: str) -> None:
        self.stream.write("\r\033[K" + text)
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextmanager
def timer(label: str, after: float = 1.0, stream=None, enabled: bool | None = None):
    """Around work of unknown length: after `after` seconds, `label... 2.3 s` ticking on
    a terminal until the work ends (then the line is cleared)."""
    stream = stream if stream is not None else sys.stderr
    if not (interactive(stream) if enabled is None else enabled):
        yield
        return
    stop, start = threading.Event(), time.perf_counter()

    def tick():
        if stop.wait(after):
            return
        while not stop.wait(0.2):
            stream.write(f"\r\033[K{label}... {time.perf_counter() - start:.1f} s")
            stream.flush()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if time.perf_counter() - start > after:
            stream.write("\r\033[K")
            stream.flush()

