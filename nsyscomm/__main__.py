"""The ``nsyscomm`` program (its console script, and ``python -m nsyscomm``): Ctrl-C ends it with
one line and status 130 from its first instruction to its last.

Until a command starts (while click, rich and the command's modules load, before anything runs
that needs undoing), Ctrl-C ends the process at once: a KeyboardInterrupt raised in the middle of
those imports would surface as an ImportError of a C extension ("initialization failed"), a
DuckDB RuntimeError, or a traceback, none of them the one line. ``nsyscomm.cli.main`` hands
Ctrl-C back to Python's KeyboardInterrupt when a command starts, and each command's guards take
it from there.

Once the command has returned, the program leaves without the interpreter's teardown (``_leave``):
its output flushed, its exit functions run (the job's database folder removed, child processes
ended), then ``os._exit``. The teardown would join every thread still running, and a Ctrl-C that
cut that join short let it go on while a DuckDB thread still ran: the thread, reaching for the
interpreter after it had gone, aborted the process ("FATAL: exception not rethrown"); a Ctrl-C
there could also end the process by the signal, with no line or a traceback. Nothing the
teardown does matters once the command is done: the memory and threads go with the process."""

import atexit
import os
import signal
import sys
from typing import NoReturn

INTERRUPTED = b"nsyscomm: interrupted\n"
TERMINATED = b"nsyscomm: terminated\n"


def _interrupted_at_start(signum: int, frame: object) -> None:
    # nothing to stop or remove yet: no thread, no file, no child process
    os.write(2, INTERRUPTED)
    os._exit(130)


def entry() -> None:
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not where the caller ignores it (nohup, a batch job)
        signal.signal(signal.SIGINT, _interrupted_at_start)
    try:
        try:
            from nsyscomm import cli

            cli.ctrl_c_before_start.append(previous)
            cli.entry()
            code = 0
        except SystemExit as e:
            code = _status(e)
    except KeyboardInterrupt:  # one that escaped every command's guard (at the very end of a run)
        code = _stopped(signal.SIGINT)
    _leave(code)


def _status(e: SystemExit) -> int:
    """The exit status Python would give SystemExit(e.code), its message written as Python would."""
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    sys.stderr.write(f"{e.code}\n")
    return 1


def _stopped(signum: int) -> int:
    """The line and status of a program stopped by Ctrl-C (130) or SIGTERM (143)."""
    term = signum == signal.SIGTERM
    os.write(2, TERMINATED if term else INTERRUPTED)
    return 143 if term else 130


def _leave(code: int) -> NoReturn:
    """Exit with code now, the output flushed and the exit functions run, without the
    interpreter's teardown (the module docstring). A Ctrl-C or SIGTERM meanwhile prints its
    line and sets the status; a second one ends the process at once."""
    stopped: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if stopped:
            os._exit(stopped[0])
        stopped.append(_stopped(signum))

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s, handler in before.items():
        if handler not in (signal.SIG_IGN, None):  # an ignored one stays ignored
            signal.signal(s, stop)
    if sys.getprofile() is not None or sys.gettrace() is not None:
        # under a profiler or a debugger, which report at the interpreter's exit: Python's own
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (`| head`), a stream closed
            pass
    atexit._run_exitfuncs()
    temp_folders = sys.modules.get("nsyscomm.temp_folders")
    if temp_folders is not None:  # DuckDB removes a spill folder when its database closes: not now
        temp_folders.remove_spill_folders()
    os._exit(stopped[0] if stopped else code)


if __name__ == "__main__":
    entry()
