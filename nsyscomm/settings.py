"""Every ``NSYSCOMM_*`` environment variable nsyscomm reads, declared once with its kind and
default, and read through one typed accessor each (docs/configuration.md lists the same, and
tests/cli/test_configuration.py checks that the code reads no other).

Three kinds: a *user setting* is for people running nsyscomm; a *channel* carries what the
``nsyscomm run`` launcher tells the processes of the job it starts (set by the launcher, read in
the job); a *test switch* picks a slower or smaller path so that tests can reach it.

Standard library only: the capture side imports it inside the profiled job. Each accessor reads
the environment when called, so a value set after import (a test, the launcher) is seen.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

USER, CHANNEL, TEST = "user setting", "channel (launcher to job)", "test switch"


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str
    default: str  # in words: what nsyscomm does when it is not set
    what: str


VARIABLES: tuple[Variable, ...] = (
    # where and how the analysis runs
    Variable("NSYSCOMM_CACHE_DIR", USER, "$XDG_CACHE_HOME/nsyscomm, else ~/.cache/nsyscomm", "extract cache folder"),
    Variable("NSYSCOMM_MEMORY_LIMIT", USER, "DuckDB's default (80% of RAM)", "DuckDB memory per process"),
    Variable(
        "NSYSCOMM_TEMP_DIR",
        USER,
        "the system's temporary folder",
        "where DuckDB spills past the limit, and a large job's database",
    ),
    Variable("NSYSCOMM_STALL_TIMEOUT", USER, "600 (seconds)", "an extraction worker finishing nothing this long"),
    # limits on hostile input
    Variable(
        "NSYSCOMM_ARROW_MAX_BYTES",
        USER,
        "50 times the file's size, at least 1 GiB",
        "bytes one Arrow table may inflate to",
    ),
    Variable("NSYSCOMM_FR_MAX_BYTES", USER, "67108864 (64 MiB)", "size of a Flight Recorder dump"),
    Variable("NSYSCOMM_FR_MAX_OBJECTS", USER, "5000000", "pickle objects in a Flight Recorder dump"),
    Variable("NSYSCOMM_FR_MAX_GROUP", USER, "65536", "ranks one Flight Recorder group may list"),
    # capture
    Variable("NSYSCOMM_NSYS", USER, "nsys on PATH", "the nsys executable (`run`, and the export of an .nsys-rep read)"),
    Variable("NSYSCOMM_QDSTRM_IMPORTER", USER, "searched beside nsys, then on PATH", "QdstrmImporter executable"),
    Variable("NSYSCOMM_HANG_TIMEOUT", USER, "unset: no hang watch", "same as `run --hang-timeout`"),
    Variable("NSYSCOMM_CAPTURE_WARN_MB", USER, "1000 (MB)", "capture size that prints a warning"),
    Variable("NSYSCOMM_ANNOTATE", USER, "1 (annotate)", "0 turns the wrapper off in a job"),
    Variable(
        "NSYSCOMM_SKIP_MODULES",
        USER,
        "unset: the known communication layers only",
        "more modules whose frames the caller column skips (comma-separated); `run --skip-module`",
    ),
    Variable("NSYSCOMM_TORCH_SCOPES", USER, "user", "`run --profiler torch`: all records every torch op"),
    Variable("NSYSCOMM_TORCH_ACTIVITIES", USER, "cpu,cuda", "`run --profiler torch`: activities recorded"),
    Variable("NSYSCOMM_CAPTURE_STEPS", CHANNEL, "unset: every step", "`run --steps A:B`"),
    Variable("NSYSCOMM_PROFILER", CHANNEL, "unset: nsys", "`run --profiler torch`"),
    Variable("NSYSCOMM_TRACE_DIR", CHANNEL, "unset: no Kineto trace", "where each rank writes its Kineto trace"),
    Variable("NSYSCOMM_RECORD_DIR", CHANNEL, "unset: no flight record", "where each process writes its ring"),
    Variable("NSYSCOMM_RUN_MARK", CHANNEL, "unset: not in a run", "marks the processes of one run's job"),
    # slower paths, kept reachable for tests and comparisons
    Variable("NSYSCOMM_FASTPATH", TEST, "1 (the C wrappers when built)", "0: the Python wrappers"),
    Variable("NSYSCOMM_RING_PY", TEST, "unset (the C ring when built)", "1: the flight record's Python ring"),
    Variable("NSYSCOMM_REPLAY_PY", TEST, "unset (the C replay when built)", "any value: the numpy replay"),
)
BY_NAME = {v.name: v for v in VARIABLES}


def _text(name: str) -> str:
    assert name in BY_NAME, name  # a new variable is declared above first
    return os.environ.get(name, "").strip()


def _positive_int(name: str) -> int | None:
    v = _text(name)
    return int(v) if v.isdigit() and int(v) > 0 else None


@contextlib.contextmanager
def set_within(name: str, value: str) -> Iterator[None]:
    """``name`` set to ``value`` inside the block (for what runs there and the processes started
    there), restored afterwards."""
    assert name in BY_NAME, name
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def cache_dir() -> str:
    return _text("NSYSCOMM_CACHE_DIR")


def memory_limit() -> str:
    """DuckDB's memory limit for this process's databases ("" when none)."""
    return _text("NSYSCOMM_MEMORY_LIMIT")


def temp_dir() -> str:
    return _text("NSYSCOMM_TEMP_DIR")


def stall_timeout() -> str:
    """The raw text: nsyscomm.extract.workers parses it and names the variable when it is wrong."""
    return _text("NSYSCOMM_STALL_TIMEOUT")


def arrow_max_bytes() -> int | None:
    return _positive_int("NSYSCOMM_ARROW_MAX_BYTES")


def fr_max_bytes() -> int | None:
    return _positive_int("NSYSCOMM_FR_MAX_BYTES")


def fr_max_objects() -> int | None:
    return _positive_int("NSYSCOMM_FR_MAX_OBJECTS")


def fr_max_group() -> int | None:
    return _positive_int("NSYSCOMM_FR_MAX_GROUP")


def nsys() -> str:
    return _text("NSYSCOMM_NSYS")


def qdstrm_importer() -> str:
    return _text("NSYSCOMM_QDSTRM_IMPORTER")


def hang_timeout() -> str:
    return _text("NSYSCOMM_HANG_TIMEOUT")


def capture_warn_mb() -> float | None:
    try:
        return float(_text("NSYSCOMM_CAPTURE_WARN_MB"))
    except ValueError:
        return None


def annotate() -> bool:
    return _text("NSYSCOMM_ANNOTATE") != "0"


def skip_modules() -> tuple[str, ...]:
    return tuple(m.strip() for m in _text("NSYSCOMM_SKIP_MODULES").split(",") if m.strip())


def torch_scopes() -> str:
    return _text("NSYSCOMM_TORCH_SCOPES").lower() or "user"


def torch_activities() -> set[str]:
    text = _text("NSYSCOMM_TORCH_ACTIVITIES").lower() or "cpu,cuda"
    return {a.strip() for a in text.split(",")}


def capture_steps() -> str:
    return _text("NSYSCOMM_CAPTURE_STEPS")


def profiler() -> str:
    return _text("NSYSCOMM_PROFILER")


def trace_dir() -> str:
    return _text("NSYSCOMM_TRACE_DIR")


def record_dir() -> str:
    return _text("NSYSCOMM_RECORD_DIR")


def fastpath() -> bool:
    return _text("NSYSCOMM_FASTPATH") != "0"


def ring_py() -> bool:
    return _text("NSYSCOMM_RING_PY") == "1"


def replay_py() -> bool:
    return bool(_text("NSYSCOMM_REPLAY_PY"))
