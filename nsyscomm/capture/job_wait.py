"""The launcher's wait for the profiled job: interrupts, their escalation, and what the job leaves.

- The first Ctrl-C, SIGTERM or hangup sends one SIGINT to the job's first process (nsys, or the
  command under ``--profiler torch``), which stops the application and writes its output. The
  job runs in its own session (the launcher's Popen), so the terminal's Ctrl-C reaches nsyscomm
  alone and the job gets exactly that one SIGINT: a second one made nsys abandon the report.
- A second Ctrl-C ends the job: SIGTERM to all of its processes, SIGKILL after a grace period,
  and the wait returns only once none is left. After SIGTERM or a hangup no one is there to
  press Ctrl-C again: an application still running after STOP_GRACE_S is ended (nsys, whose
  application has ended, then writes the report), and the rest of the job after
  job_tree.WRITE_GRACE_S more.
- An interrupt's exit status is 130, whatever the job returned (torchrun returns 1 when its
  workers were stopped): a script can tell an interrupt from the job's own failure.
- Once the job's own processes have exited, what it left running (a daemon a rank started)
  would hold nsys until it exits: it is named and ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

from nsyscomm.capture import job_tree
from nsyscomm.capture.job_tree import JobTree

EXIT_INTERRUPTED = 130
# after a SIGTERM or a hangup, how long the job has to stop before it is ended
STOP_GRACE_S = 10.0
# how often the wait looks at the job's processes
POLL_S = 0.5
# how long the job's leftovers may outlive its own processes before they are ended
LEFT_GRACE_S = 1.0

_INTERRUPTED = {
    "nsys": (
        "interrupted: nsys was asked to stop the application and write the report",
        "nsys is stopping the application and writing the report (interrupt again to abort it; "
        "the report is then lost)",
    ),
    "torch": (
        "interrupted: the command was asked to stop; each rank writes its trace as it exits",
        "the command is stopping; each rank writes its trace as it exits (interrupt again to abort it; "
        "traces not yet written are then lost)",
    ),
}
_SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "a hangup (SIGHUP)"}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP while the job runs: an interrupt, as Ctrl-C is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Stopped in the main thread while the job runs (elsewhere a
    signal handler cannot be set: the caller's handling stays)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"nsyscomm: {text}", file=sys.stderr, flush=True)


def _detach_from_terminal() -> None:
    """After a hangup the terminal is gone: what is still written there (the summary, the job's
    output) goes nowhere instead of failing."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                os.dup2(null, fd)
    os.close(null)


class JobWait:
    """One wait for one job (proc, its first process; tree, all of its processes when known)."""

    def __init__(self, proc: subprocess.Popen, warnings_: list, profiler: str, on_interrupt, tree: JobTree | None):
        self.proc, self.warnings, self.profiler = proc, warnings_, profiler
        self.on_interrupt, self.tree = on_interrupt, tree
        self.interrupted_at: float | None = None
        self.by_signal = False
        self._left_since: float | None = None
        self._app_ended = False

    def run(self) -> int:
        with _signals_interrupt():
            rc = self._until_exit()
            if self.tree is not None:
                with _signals_held():
                    self.end_left(f"when {'nsys' if self.profiler == 'nsys' else 'the command'} exited")
        return EXIT_INTERRUPTED if self.interrupted_at is not None else rc

    def _until_exit(self) -> int:
        while True:
            try:
                try:
                    return self.proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    self._look()
            except KeyboardInterrupt as e:  # in the wait or in a look at the processes
                if self.interrupted_at is None:
                    self._first(e)
                else:
                    self.abort("interrupted again")

    def _first(self, e: KeyboardInterrupt) -> None:
        self.interrupted_at = time.monotonic()
        signum = getattr(e, "signum", signal.SIGINT)
        self.by_signal = signum != signal.SIGINT
        if signum == signal.SIGHUP:
            _detach_from_terminal()
        if self.on_interrupt is not None:
            self.on_interrupt()
        warning, message = _INTERRUPTED[self.profiler]
        if self.by_signal:
            warning += f" (nsyscomm got {_SIGNAL_NAMES[signum]})"
        self.warnings.append(warning)
        _say(f"interrupted: {message}")
        with contextlib.suppress(Exception):
            self.proc.send_signal(signal.SIGINT)

    def _look(self) -> None:
        """While the job runs: stop it when a signal's grace period has passed; end what it left
        once its own processes are gone."""
        if self.by_signal and self.interrupted_at is not None:
            self._stop_by_itself(time.monotonic() - self.interrupted_at)
            return
        if self.tree is None or self.tree.command_running():
            self._left_since = None
            return
        own, left = self.tree.own_and_left()
        if own or not left:
            self._left_since = None
            return
        if self._left_since is None:
            self._left_since = time.monotonic()
        elif time.monotonic() - self._left_since >= LEFT_GRACE_S:
            self.end_left("after its own processes exited, holding the run")

    def _stop_by_itself(self, since: float) -> None:
        """After SIGTERM or a hangup: the application ended once STOP_GRACE_S has passed (nsys then
        writes the report), and all of the job once nsys has had WRITE_GRACE_S more for that."""
        if since > STOP_GRACE_S + job_tree.WRITE_GRACE_S or (since > STOP_GRACE_S and self.tree is None):
            self.abort(f"it did not stop within {since:.0f} s")
        elif since > STOP_GRACE_S and self.tree is not None and not self._app_ended:
            self._app_ended = True
            tree = self.tree
            if tree.application():
                _say(f"ending the application (it did not stop within {STOP_GRACE_S:g} s): SIGTERM, then SIGKILL")
                self.warnings.append(f"the application did not stop within {STOP_GRACE_S:g} s and was ended")
                with _signals_held():
                    job_tree.end(tree.application)

    def end_left(self, when: str) -> None:
        """Name and end the processes the job left running (not under its first process)."""
        assert self.tree is not None
        tree = self.tree
        left = tree.own_and_left()[1]
        if not left:
            return
        names = ", ".join(job_tree.describe(p) for p in left[:3]) + (
            f" and {len(left) - 3} more" if len(left) > 3 else ""
        )
        self.warnings.append(f"the job left {len(left)} process(es) running {when}: {names}; they were ended")
        job_tree.end(lambda: tree.own_and_left()[1])

    def abort(self, why: str) -> None:
        """End every process of the job and wait until they are gone; signals meanwhile wait."""
        _say(f"ending the job ({why}): SIGTERM, then SIGKILL after {job_tree.TERM_GRACE_S:g} s")
        self.warnings.append(f"the job was ended ({why}); its report may be lost")
        if self.interrupted_at is None:
            self.interrupted_at = time.monotonic()
        with _signals_held():
            tree = self.tree
            if tree is None:
                job_tree.end(lambda: [self.proc.pid] if self.proc.poll() is None else [])
            else:
                job_tree.end(tree.processes)
            self.proc.wait()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP ignored while the job is being ended (a bounded wait): the end
    is not cut short by the user's next Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def wait(
    proc: subprocess.Popen,
    warnings_: list,
    profiler: str = "nsys",
    on_interrupt: Callable[[], object] | None = None,
    tree: JobTree | None = None,
) -> int:
    """Wait for the job; its exit status, or 130 when it was interrupted."""
    return JobWait(proc, warnings_, profiler, on_interrupt, tree).run()
