"""A pool of independent runners, so that one compiled model can be called from several
threads at once.

A planned runner owns its buffers, so two calls on one runner at the same time would
write each other's data. The pool hands every call a runner no other call is using: a
free one, or a new one built for it (the C kernels release the GIL, so calls on different
runners really run in parallel). At most `limit` runners are built; a call beyond that
waits for one to come free.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Callable

DEFAULT_LIMIT = max(4, 2 * (os.cpu_count() or 1))


class RunnerPool:
    """Calls go to a free runner (`runner.run(args, kwargs)`); `build()` makes another
    when none is free."""

    thread_safe = True  # each call has a runner of its own

    def __init__(self, build: Callable[[], Any], first: Any = None, limit: int = DEFAULT_LIMIT):
        self._build, self.limit = build, max(1, int(limit))
        self.prototype = first if first is not None else build()
        self._free = [self.prototype]  # list.pop/append are atomic: the fast path takes no lock
        self._count = 1
        self._waiting = 0
        self._cond = threading.Condition()

    @property
    def size(self) -> int:
        """How many runners exist (each call in flight holds one)."""
        return self._count

    def __call__(self, *args, **kwargs):
        try:
            runner = self._free.pop()
        except IndexError:
            runner = self._acquire()
        try:
            return runner.run(args, kwargs)
        finally:
            self._free.append(runner)  # _release, inlined: this is every call's path
            if self._waiting:
                self._notify()

    @contextmanager
    def borrow(self):
        """A runner for the caller's exclusive use while the block runs."""
        try:
            runner = self._free.pop()
        except IndexError:
            runner = self._acquire()
        try:
            yield runner
        finally:
            self._release(runner)

    def _acquire(self):
        """No free runner: build one while under the limit, else wait for one."""
        with self._cond:
            self._waiting += 1  # before looking again: a release after this will notify
            try:
                while True:
                    try:
                        return self._free.pop()
                    except IndexError:
                        pass
                    if self._count < self.limit:
                        self._count += 1
                        break
                    self._cond.wait()
            finally:
                self._waiting -= 1
        try:
            return self._build()  # outside the lock: other calls go on meanwhile
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, runner) -> None:
        self._free.append(runner)
        if self._waiting:
            self._notify()

    def _notify(self) -> None:
        """Wake a call waiting for a runner (after one was put back)."""
        with self._cond:
            self._cond.notify()
