"""The capture's size while the job runs under nsys (``nsyscomm run``).

nsys writes its raw capture (``.qdstrm``) into its temporary folder, or the output folder, as
the job runs; nothing else shows that it grows. A watch thread looks at those files every
second. On a terminal it prints a line each time the capture doubles from 100 MB ("nsys: capture
400 MB, +38 MB/s"): whole lines between the job's own output, never a live display that the job's
writes would tear. Once the capture passes a limit it says, once and on any stderr, which preset
or option would keep it small, so that a user whose report is heading for gigabytes learns why
while the job still runs (nsys's own OS-runtime defaults fill gigabytes within a minute of a GPU
job: docs/performance.md, "The GPU path").
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from nsyscomm import settings
from nsyscomm.capture.post import size_text

# 1 GB: ten times what a default-preset GPU job of a few hundred steps writes (docs/performance.md,
# "The GPU path"); NSYSCOMM_CAPTURE_WARN_MB moves it
WARN_BYTES = 1_000_000_000
FIRST_MILESTONE = 100_000_000


def warn_bytes() -> int:
    mb = settings.capture_warn_mb()
    return WARN_BYTES if mb is None else max(1, int(mb * 1e6))


def advice(preset: str) -> str:
    """What keeps a capture small, after this preset."""
    if preset == "light":
        return "capture fewer steps with --steps A:B"
    if preset == "full":
        return "the default preset (no stack dumps, OS-runtime calls from 100 us) or --preset light keeps it small"
    return "--preset light (no OS-runtime trace) or --steps A:B keeps it small"


class CaptureWatch:
    """Poll the sizes of the capture files (globs over folders) in a daemon thread.

    ``files`` returns the files that belong to this capture now (the launcher gives the output
    folder's and the temporary folder's new ``.qdstrm`` / ``.nsys-rep`` files)."""

    def __init__(
        self,
        files: Callable[[], Iterable[Path]],
        preset: str,
        show: bool | None = None,
        limit: int | None = None,
        interval: float = 1.0,
    ):
        self._files = files
        self.preset = preset
        self.limit = warn_bytes() if limit is None else limit
        self.interval = interval
        self.peak = 0
        self.warning: str | None = None
        self._next_milestone = FIRST_MILESTONE
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if show is None:
            try:
                show = os.isatty(sys.stderr.fileno())
            except (AttributeError, OSError, ValueError):
                show = False
        self._show = show

    def size(self) -> int:
        total = 0
        for f in self._files():
            try:
                total += f.stat().st_size
            except OSError:
                pass  # moved or removed between the listing and the stat: nsys renames as it goes
        return total

    def poll(self, now: float, last: tuple[float, int]) -> tuple[float, int]:
        """One look: update the peak, the live line, and the warning past the limit."""
        n = self.size()
        self.peak = max(self.peak, n)
        dt = now - last[0]
        rate = (n - last[1]) / dt if dt > 0 else 0.0
        if self._show and n >= self._next_milestone:
            while self._next_milestone <= n:
                self._next_milestone *= 2
            self._say(f"nsyscomm: nsys capture {size_text(n)}, +{size_text(max(0, int(rate)))}/s")
        if self.warning is None and n >= self.limit:
            self.warning = (
                f"the capture is {size_text(n)} and growing {size_text(max(0, int(rate)))}/s "
                f"(preset {self.preset}): {advice(self.preset)}"
            )
            self._say(f"nsyscomm: warning: {self.warning}")
        return now, n

    def _say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def _loop(self) -> None:
        last = (time.monotonic(), 0)
        while not self._stop.wait(self.interval):
            last = self.poll(time.monotonic(), last)

    def start(self) -> CaptureWatch:
        self._thread = threading.Thread(target=self._loop, name="nsyscomm-capture-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
