"""Pickles read with bounded resources and no code: the Flight Recorder's dumps.

Two guarantees, whatever the bytes:

* no object of any class is constructed: ``find_class`` refuses every global, so only plain
  containers and scalars come out (a pickle runs code only through a global);
* memory follows the file's size, not what an attacker can make of it: a file past MAX_BYTES is
  refused before it is read, and a file past FAST_BYTES is read by the pure-Python unpickler
  with every opcode counted, refused past MAX_OBJECTS. Below FAST_BYTES the C unpickler reads it
  (about a hundred bytes of objects per byte at worst: an empty dict is one opcode of one byte),
  so a real dump of a few thousand entries loads at C speed.

The limits are read from the environment when a file is opened (docs/limits.md says how to
raise them for a real, huge dump).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from nsyscomm import settings

MAX_BYTES = 64 << 20  # a dump of torch's default 2000 entries with stack traces is a few MB
FAST_BYTES = 4 << 20  # read by the C unpickler, unbounded in objects per byte, below this
MAX_OBJECTS = 5_000_000  # opcodes (each builds at most one object) of a file past FAST_BYTES


class Refused(Exception):
    """The pickle is past a limit or holds a global; str(): why, in a few words."""


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # every class and function refused
        raise pickle.UnpicklingError(f"refused global {module[:40]}.{name[:40]}")


def _counted(op: Any) -> Any:
    def run(self: _Counted) -> None:
        self.ops -= 1
        if self.ops < 0:
            raise Refused(f"more than {self.max_ops} pickle objects (NSYSCOMM_FR_MAX_OBJECTS)")
        op(self)

    return run


class _Counted(pickle._Unpickler):  # the pure-Python unpickler: a hook per opcode
    """The pure-Python unpickler, each opcode counted against a budget as it is run."""

    dispatch = {k: _counted(f) for k, f in pickle._Unpickler.dispatch.items()}

    def __init__(self, file: io.BytesIO, max_ops: int) -> None:
        super().__init__(file)
        self.ops = self.max_ops = max_ops

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module[:40]}.{name[:40]}")


# what a damaged or crafted pickle raises from either unpickler
ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    MemoryError,
    RecursionError,
    OverflowError,
    AssertionError,
    UnicodeDecodeError,
)


def load(path: Path) -> Any:
    """The plain data of the pickle at path; Refused past a limit, one of ERRORS when damaged."""
    max_bytes = settings.fr_max_bytes() or MAX_BYTES
    size = Path(path).stat().st_size
    if size > max_bytes:
        raise Refused(f"{size} bytes, more than {max_bytes} (NSYSCOMM_FR_MAX_BYTES)")
    data = io.BytesIO(Path(path).read_bytes())
    if size <= FAST_BYTES:
        return _Plain(data).load()
    return _Counted(data, settings.fr_max_objects() or MAX_OBJECTS).load()
