"""The ``nsyscomm`` program (its console script, and ``python -m nsyscomm``): Ctrl-C ends it with
one line and status 130 from its first instruction on.

Until a command starts (while click, rich and the command's modules load, before anything runs
that needs undoing), Ctrl-C ends the process at once: a KeyboardInterrupt raised in the middle of
those imports would surface as an ImportError of a C extension ("initialization failed"), a
DuckDB RuntimeError, or a traceback, none of them the one line. ``nsyscomm.cli.main`` hands
Ctrl-C back to Python's KeyboardInterrupt when a command starts, and each command's guards take
it from there."""

import os
import signal
import sys

INTERRUPTED = b"nsyscomm: interrupted\n"


def _interrupted_at_start(signum: int, frame: object) -> None:
    # nothing to stop or remove yet: no thread, no file, no child process
    os.write(2, INTERRUPTED)
    os._exit(130)


def entry() -> None:
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not where the caller ignores it (nohup, a batch job)
        signal.signal(signal.SIGINT, _interrupted_at_start)
    try:
        from nsyscomm import cli

        cli.ctrl_c_before_start.append(previous)
        cli.entry()
    except KeyboardInterrupt:  # one that escaped every command's guard (at the very end of a run)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stderr.write(INTERRUPTED.decode())
        sys.exit(130)


if __name__ == "__main__":
    entry()
