"""What the launcher runs beside the job: a function in a thread of lower priority, so that the
caller's next step is ready when the job ends without taking cores from the job's ranks or nsys."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

# the niceness a thread beside the job takes (nice_this_thread): it uses the cores the job leaves
# idle, and the job's ranks and nsys go first
BESIDE_NICE = 10


def nice_this_thread(nice: int = BESIDE_NICE) -> None:
    """Lower the calling thread's priority alone (Linux: a thread has its own niceness), never
    raising it: a launcher already run at a higher niceness keeps it. What the thread starts
    afterwards inherits it, so a process that must run at full speed is started before."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
    except (AttributeError, OSError):
        pass


class Beside:
    """A function run in a daemon thread while the job runs. Its errors are its own: what it
    prepares is done again, and reported, by the step that needs it."""

    def __init__(self, fn: Callable[[], object] | None) -> None:
        self._thread: threading.Thread | None = None
        self.started = time.perf_counter()
        self.ended: float | None = None
        self.error: str | None = None
        if fn is not None:
            self._thread = threading.Thread(target=self._run, args=(fn,), name="nsyscomm-beside-job", daemon=True)
            self._thread.start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - a head start only
            self.error = f"{type(e).__name__}: {e}"
        self.ended = time.perf_counter()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def summary(self, job_end: float) -> str | None:
        """The run log's line: how long it took, and whether the job was still running then."""
        if self._thread is None or self.ended is None:
            return None
        when = "before" if self.ended <= job_end else f"{self.ended - job_end:.2f} s after"
        status = f"failed ({self.error})" if self.error else "ok"
        return f"beside the job: done {self.ended - self.started:.2f} s after its start, {when} its exit, {status}"
