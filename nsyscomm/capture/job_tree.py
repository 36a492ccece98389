"""The processes of one ``nsyscomm run`` job, wherever they went, and their ending.

No process group or session holds a job: nsys starts the command in a session of its own,
torchrun starts each rank in another, nsys's agent is adopted by init, and a rank may leave a
daemon (a double fork and ``setsid``). What they all keep is the environment they were started
with, so the launcher marks the job's (``NSYSCOMM_RUN_MARK``, one value per run) and finds
its processes by reading ``/proc/PID/environ``: a process of the job's user can read it, and it
holds the environment the process was started with, whatever it changed since.

The launcher ends the job through this module when it stops for any reason it can see (a
second Ctrl-C, SIGTERM, a hangup, its own error), and ends what the job leaves behind once the
job's own processes have exited (a daemon would otherwise hold nsys, and so the run, until it
exits). For the case it cannot see (SIGKILL), it starts this file as a watchdog, with a pipe
from the launcher on its standard input: the pipe reaches its end when the launcher closes it
or the kernel does (the launcher died), and then whatever still runs of the job is stopped.

This module imports the standard library alone: the watchdog runs it as a script
(``python -I -S job_tree.py``) in a few milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

MARK_ENV = "NSYSCOMM_RUN_MARK"
# after SIGTERM, how long the job's processes have to exit before SIGKILL
TERM_GRACE_S = 5.0
# after SIGKILL, how long to wait for them to be gone (a process in the kernel finishes its call)
KILL_WAIT_S = 10.0
# the watchdog: how long nsys has to stop the application (SIGINT) and then to write its report
STOP_GRACE_S = 10.0
WRITE_GRACE_S = 60.0
_POLL_S = 0.05


def new_mark() -> str:
    """A value of the mark no other run has."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def _pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()  # the name, in parentheses, may hold spaces
    return int(fields[1]), fields[0].decode()


def _started(pid: int) -> int:
    """A process's start time (clock ticks after boot), or a large number when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        return int(text[text.rfind(b")") + 2 :].split()[19])
    except (OSError, IndexError, ValueError):
        return 1 << 62


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] not in ("Z", "X")  # a zombie has exited: only its parent's wait is left


def marked(mark: str) -> list[int]:
    """The live processes started with the mark (this one and its zombies excluded)."""
    needle = f"\0{MARK_ENV}={mark}\0".encode()
    me = os.getpid()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:  # gone, or another user's
            continue
        if needle in env + b"\0" and _alive(pid):
            found.append(pid)
    return found


def _exe(pid: int) -> str:
    try:
        return os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        return ""


def describe(pid: int) -> str:
    """'PID (its command line)', its middle cut out when long (the program's arguments end it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        args = "?"
    return f"{pid} ({args if len(args) <= 100 else args[:50] + ' ... ' + args[-45:]})"


class JobTree:
    """The processes of a job whose first process is root (nsys, or the command itself), marked
    with mark. tool_dir: the folder of nsys's own programs (nsys, its launcher, tee and agent),
    which write the report and are told apart from the application's processes."""

    def __init__(self, mark: str, root: int, tool_dir: str | None = None) -> None:
        self.mark = mark
        self.root = root
        self.tool_dir = tool_dir.rstrip("/") + "/" if tool_dir else None
        self.command: int | None = None

    def processes(self) -> list[int]:
        """Every live process of the job: the tools' and the application's."""
        return marked(self.mark)

    def _is_tool(self, pid: int) -> bool:
        return self.tool_dir is not None and _exe(pid).startswith(self.tool_dir)

    def application(self) -> list[int]:
        """The job's processes that are not nsys's own."""
        return [p for p in self.processes() if not self._is_tool(p)]

    def tools(self) -> list[int]:
        return [p for p in self.processes() if self._is_tool(p)]

    def _command(self, app: list[int]) -> int | None:
        """The command's first process: root itself, or under nsys the first started of the
        application's processes that one of nsys's started (a process adopted by nsys's launcher,
        which reaps orphans, was started later)."""
        if self.command is None:
            if not self._is_tool(self.root):
                self.command = self.root
            else:
                tools = set(self.tools())
                under = [p for p in app if (_stat(p) or (0, ""))[0] in tools]
                self.command = min(under, key=_started, default=None)
        return self.command

    def command_running(self) -> bool:
        """Whether the command's first process, once found, still runs: one read of /proc, where
        own_and_left reads every process's environment."""
        return self.command is not None and _alive(self.command)

    def own_and_left(self) -> tuple[list[int], list[int]]:
        """The application's processes while the command runs (its own); once the command has
        exited, those still running (left behind: a daemon, or a process it did not wait for)."""
        app = self.application()
        command = self._command(app)
        if command is None or command in app:
            return app, []
        return [], app


def send(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(find: Callable[[], list[int]], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    left = find()
    while left and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = find()
    return left


def end(find: Callable[[], list[int]], grace: float | None = None) -> list[int]:
    """SIGTERM to the processes find() names, SIGKILL to those still there after grace seconds
    (and to any they started meanwhile), until none is left or KILL_WAIT_S has passed: the
    processes that would not go (none, but for one stuck in the kernel). grace: TERM_GRACE_S by
    default."""
    send(find(), signal.SIGTERM)
    left = _wait_gone(find, TERM_GRACE_S if grace is None else grace)
    deadline = time.monotonic() + KILL_WAIT_S
    while left and time.monotonic() < deadline:
        send(left, signal.SIGKILL)
        time.sleep(_POLL_S)
        left = find()
    return left


class Watchdog:
    """This file run as a process of its own (its own session: a Ctrl-C or a signal to the
    launcher's group does not reach it), which stops the job when the launcher's end of its pipe
    closes before close() was called."""

    def __init__(
        self, tree: JobTree, log: str | None = None, drain: tuple[int, ...] = (), graces: tuple[float, float] = (-1, -1)
    ) -> None:
        """drain: the launcher's ends of the job's stdout and stderr pipes, which the watchdog
        forwards to its own stderr (the launcher's) once the launcher is gone: a write to a pipe
        that nobody reads would kill nsys (SIGPIPE) before it moved the report into the output
        folder.
        graces: STOP_GRACE_S and TERM_GRACE_S instead of this module's (shorter ones in tests)."""
        read, self._write = os.pipe()
        args = [sys.executable, "-I", "-S", os.path.abspath(__file__), tree.mark, str(tree.root)]
        args += [tree.tool_dir or "", log or "", ",".join(map(str, drain)) or "-", *map(str, graces)]
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                args,
                stdin=read,
                stdout=subprocess.DEVNULL,
                pass_fds=drain,
                start_new_session=True,
                env={k: v for k, v in os.environ.items() if k != MARK_ENV},
            )
        except OSError:  # no watchdog: the launcher's own handling still ends the job
            self._proc = None
        os.close(read)

    def close(self) -> None:
        """The job is over: the watchdog finds nothing of it and exits."""
        if self._write >= 0:
            with contextlib.suppress(OSError):  # no watchdog started: nobody reads the pipe
                os.write(self._write, b"done")
            os.close(self._write)
            self._write = -1
        if self._proc is not None:
            try:
                self._proc.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _log(path: str, text: str) -> None:
    if not path:
        return
    stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {text}\n")
    except OSError:
        pass


def _forward(fd: int) -> None:
    """Copy what the job writes to its stderr (fd) to this process's, while anything holds it."""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # a pseudo-terminal whose last writer closed it
            return
        if not data:
            return
        try:
            os.write(2, data)
        except OSError:  # the terminal is gone too: the data is dropped, the job goes on
            pass


def _watch(mark: str, root: int, tool_dir: str, log: str, drain: list[int]) -> None:
    """The watchdog's work once its pipe reached its end: nothing when the launcher said it is
    done; else nsys is asked to stop the application (one SIGINT, as for Ctrl-C) and has
    STOP_GRACE_S for it before the application is ended, then WRITE_GRACE_S more to write its
    report. (Not the kernel's parent-death signal: it comes again each time the child is passed
    to another of the dying launcher's threads, and a second SIGINT makes nsys drop the report.)"""
    told = sys.stdin.buffer.read()
    tree = JobTree(mark, root, tool_dir or None)
    if told == b"done" or not tree.processes():
        return
    import threading

    for fd in drain:
        threading.Thread(target=_forward, args=(fd,), daemon=True).start()
    _log(log, f"nsyscomm ended while the job ran; its watchdog stops the job ({len(tree.processes())} process(es))")
    send([root], signal.SIGINT)
    if _wait_gone(tree.application, STOP_GRACE_S):
        end(tree.application, TERM_GRACE_S)
    if _wait_gone(tree.tools, WRITE_GRACE_S):
        end(tree.tools, TERM_GRACE_S)
    stuck = tree.processes()
    _log(log, f"the watchdog ended the job{'; still there: ' + ', '.join(map(str, stuck)) if stuck else ''}")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if float(sys.argv[6]) >= 0:
        STOP_GRACE_S, TERM_GRACE_S = float(sys.argv[6]), float(sys.argv[7])
    _watch(
        sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], [int(f) for f in sys.argv[5].split(",") if f != "-"]
    )
