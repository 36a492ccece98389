"""``nsyscomm run --hang-timeout DURATION``: end a job that sits in a collective, keeping nsys's report.

A thread of the launcher reads the flight records (nsyscomm.capture.flight_record) twice a
second. The job is hung when some live rank is inside a collective (entered > finished) and no
collective finished on any rank for DURATION. Then it

1. writes "stopped" into the records of the ranks still running (so the diagnosis tells the
   ranks nsyscomm stopped from ranks that died on their own),
2. prints the diagnosis from the records (stderr: before nsys's own output at the end),
3. sends SIGTERM to the ranks (the processes that keep records), not to nsys nor to the
   launcher (torchrun): the ranks die, torchrun sees its workers fail and exits, and nsys,
   whose application has ended, writes its report as after any run. Signalling nsys itself
   was not tried, so it is not known to keep the report; SIGKILL follows after a grace period for a rank that
   ignores SIGTERM.

The run then exits with EXIT_HUNG (124, as timeout(1)).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from nsyscomm.capture import flight_record as fr
from nsyscomm.errors import InputError

EXIT_HUNG = 124
ENV_TIMEOUT = "NSYSCOMM_HANG_TIMEOUT"
POLL_S = 0.5
KILL_GRACE_S = 10.0
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float) -> float:
    """'90', '90s', '1.5m', '2h' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text or ""))
    if not m or float(m.group(1)) <= 0:
        raise InputError(
            f"--hang-timeout {text!r} is not a duration: give seconds or a number with s, m or h "
            f"(for example --hang-timeout 90s or {ENV_TIMEOUT}=5m)"
        )
    return float(m.group(1)) * _UNITS[m.group(2)]


def clear(directory: Path) -> None:
    """Remove a previous run's rings from the records folder (a re-used --output)."""
    for p in Path(directory).glob("*.ring"):
        try:
            p.unlink()
        except OSError:
            pass


def diagnosis_lines(directory: Path) -> list[str]:
    """The hang diagnosis from the records alone (no report yet)."""
    from nsyscomm import duck, schema
    from nsyscomm.analyses import hang

    con = duck.connect()
    try:
        con.execute(schema.create_sql())
        return hang.lines(hang.diagnose(con, [directory]))
    finally:
        con.close()


class Watcher:
    def __init__(self, directory: Path, timeout_s: float, out=None):
        self.directory = Path(directory)
        self.timeout_s = float(timeout_s)
        self.fired = False
        self.out = out if out is not None else sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nsyscomm-hang-watch", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _state(self) -> tuple[int, bool]:
        """(collectives finished on all ranks, some live rank is inside one)."""
        done, inside = 0, False
        for ring in fr.read_dir(self.directory):
            done += ring.finished
            if ring.state == "running" and ring.entered > ring.finished:
                inside = True
        return done, inside

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as e:  # noqa: BLE001 - a watcher that fails must say so, not hide in a thread
            print(
                f"nsyscomm: warning: --hang-timeout stopped watching ({type(e).__name__}: {e})",
                file=self.out,
                flush=True,
            )

    def _watch(self) -> None:
        last_done, since = -1, time.monotonic()
        while not self._stop.wait(POLL_S):
            done, inside = self._state()
            now = time.monotonic()
            if done != last_done or not inside:
                last_done, since = done, now
                continue
            if now - since >= self.timeout_s:
                self._fire(now - since)
                return

    def _fire(self, idle_s: float) -> None:
        self.fired = True
        pids = fr.mark_stopped(self.directory, f"stopped by --hang-timeout: no collective finished for {idle_s:.0f} s")
        try:
            lines = diagnosis_lines(self.directory)
        except Exception as e:  # noqa: BLE001 - the job must still be ended
            lines = [f"(no diagnosis from the records: {type(e).__name__}: {e})"]
        print(
            f"nsyscomm: HUNG: no collective finished for {idle_s:.0f} s while ranks waited in one; "
            f"stopping the ranks (nsys keeps its report)",
            file=self.out,
            flush=True,
        )
        for line in lines:
            print(f"nsyscomm: {line}", file=self.out, flush=True)
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(fr._alive(p) for p in pids):
            time.sleep(0.2)
        for pid in pids:
            if fr._alive(pid):
                _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
