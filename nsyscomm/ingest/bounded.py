"""Readers whose cost is bounded by construction, for the formats parsed in Python, so that no file
makes a reader run out of memory or time:

* ``read_yaml``: a small YAML file (a what-if trace's meta) read by a SafeLoader that refuses
  aliases (a billion-laughs document expands a few hundred bytes into gigabytes), nesting past
  MAX_YAML_DEPTH and files past MAX_YAML_BYTES, so that neither time nor memory follows what the
  file claims to hold;
* ``open_text``: a JSON file, or a gzip file inflated as a stream, whose text stops at a limit
  relative to the file's size (a gzip bomb turns a kilobyte into gigabytes) and at an absolute
  one; the reader past it is told which file went over and how to raise the limit.

The limits are stated in docs/limits.md.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO, Any

from nsyscomm.errors import InputError
from nsyscomm.ingest import limits

MAX_YAML_BYTES = 1 << 20  # a meta file is a few lines; the artifact's are under 200 bytes
MAX_YAML_DEPTH = 16
# gzip: the text may be GZIP_RATIO times the file (real Kineto traces: 13x-18x), at least
# GZIP_FLOOR (a small file that compresses well), at most GZIP_CAP_BUDGETS times the budget
GZIP_RATIO = 100
GZIP_FLOOR = 64 << 20
GZIP_CAP_BUDGETS = 32


def read_yaml(path: Path, fix: str) -> Any:
    """The YAML document at path, safely loaded without aliases and with bounded nesting; an
    InputError naming the file and fix otherwise."""
    import yaml

    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise InputError(f"{path}: {size:,} bytes, over the {MAX_YAML_BYTES:,} a job description may have; {fix}")

    class Loader(yaml.SafeLoader):
        """SafeLoader without aliases, nested at most MAX_YAML_DEPTH deep."""

        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, "an alias (*name), which a job description needs not", mark
                )
            self.depth += 1
            if self.depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_YAML_DEPTH} deep", self.peek_event().start_mark
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    try:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not a readable job description ({first}); {fix}") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError(f"{path}: {str(e).splitlines()[0][:80]}; {fix}") from None


class _Capped(io.RawIOBase):
    """A byte stream that raises InputError once more than `cap` bytes were read from it."""

    def __init__(self, raw: Any, cap: int, path: Path, why: str) -> None:
        self.raw, self.cap, self.path, self.why, self.total = raw, cap, path, why, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.raw.readinto(b)
        self.total += n or 0
        if self.total > self.cap:
            raise InputError(
                f"{self.path}: inflates to more than {self.cap:,} bytes ({self.why}); if the file is "
                f"real, give a larger --memory-limit (NSYSCOMM_MEMORY_LIMIT; docs/limits.md)"
            )
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def text_cap(path: Path, gz: bool) -> tuple[int, str]:
    """The most bytes of text the file at path may give, and why."""
    cap = GZIP_CAP_BUDGETS * limits.budget()
    if not gz:
        return cap, f"{GZIP_CAP_BUDGETS} times the memory budget"
    rel = max(GZIP_RATIO * path.stat().st_size, GZIP_FLOOR)
    if rel < cap:
        return rel, f"{GZIP_RATIO} times the compressed file"
    return cap, f"{GZIP_CAP_BUDGETS} times the memory budget"


def open_text(path: Path) -> IO[str]:
    """A UTF-8 text stream of the file at path, inflated as it is read when it is gzip, that stops
    with an InputError past text_cap."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    cap, why = text_cap(path, gz)
    raw: Any = gzip.GzipFile(path, "rb") if gz else open(path, "rb")  # noqa: SIM115 - closed with the stream
    return io.TextIOWrapper(io.BufferedReader(_Capped(raw, cap, path, why)), encoding="utf-8")
