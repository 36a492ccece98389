"""A PyTorch profiler (Kineto) trace read as a stream: ``traceEvents`` one event at a time from a
``.json`` or ``.json.gz`` file, so memory grows with the events kept, not with the file; numbers
kept as written (microseconds with fractions) and turned into integer nanoseconds exactly.

Bounded by construction, whatever the file holds: the text comes from nsyscomm.ingest.bounded.open_text (a
gzip file inflated as a stream, up to a limit relative to its size), and one value (an event,
or another top-level key's) may hold at most MAX_VALUE_CHARS: a value the decoder cannot finish
in the buffer is retried only once the buffer has doubled, so that reading it costs time in
proportion to its size, and a value past the limit is an InputError naming the file."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nsyscomm.errors import InputError
from nsyscomm.ingest import bounded

MAX_VALUE_CHARS = 16 << 20  # one event of a real trace is under a few kB
_WS = re.compile(r"[ \t\r\n]*")


class Num(float):
    """A JSON float that remembers its text, so µs timestamps convert to ns without rounding."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str):
        f = float.__new__(cls, text)
        f.text = text
        return f


def to_ns(us: int | float | None) -> int | None:
    """Kineto µs (int, float or Num) -> integer ns, exact for the decimal text in the file."""
    if us is None:
        return None
    if isinstance(us, int):
        return us * 1000
    text = getattr(us, "text", None)
    if text is not None and "e" not in text.lower():
        neg = text.startswith("-")
        whole, _, frac = text.lstrip("-").partition(".")
        frac = (frac + "000")[:4]  # ns digits + one to round half up
        ns = int(whole or 0) * 1000 + int(frac[:3])
        if int(frac[3]) >= 5:
            ns += 1
        return -ns if neg else ns
    if isinstance(us, float) and math.isfinite(us):
        return int(round(us * 1000))
    return None


def iter_trace(path: Path, chunk: int = 1 << 20, max_value: int = MAX_VALUE_CHARS) -> Iterator[tuple[str, Any]]:
    """Stream a Chrome/Kineto trace: yields ("event", dict) for every traceEvents element and
    ("meta", (key, value)) for every other top-level key. A bare JSON array of events works too."""
    dec = json.JSONDecoder(parse_float=Num)
    with bounded.open_text(path) as f:
        buf, pos, eof = "", 0, False

        def more() -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            data = f.read(chunk)
            if not data:
                eof = True
                return False
            buf = buf[pos:] + data
            pos = 0
            return True

        def skip_ws() -> None:
            nonlocal pos
            while True:
                m = _WS.match(buf, pos)
                pos = m.end() if m else pos  # the pattern matches the empty string: m is never None
                if pos < len(buf) or not more():
                    return

        def peek() -> str:
            skip_ws()
            return buf[pos] if pos < len(buf) else ""

        def value() -> Any:
            nonlocal pos
            skip_ws()
            while True:
                try:
                    v, end = dec.raw_decode(buf, pos)
                    # a number at the end of the buffer may continue in the next chunk
                    if end == len(buf) and not eof and isinstance(v, (int, float)):
                        raise json.JSONDecodeError("number at chunk end", buf, pos)
                    pos = end
                    return v
                except json.JSONDecodeError:
                    # decode again only once the unfinished value's text has doubled
                    want = 2 * (len(buf) - pos)
                    if not more():
                        raise
                    while len(buf) - pos < want and len(buf) - pos <= max_value and more():
                        pass
                    if len(buf) - pos > max_value:
                        raise InputError(
                            f"{path}: one value of more than {max_value:,} characters; pass the trace "
                            f"as the PyTorch profiler wrote it (prof.export_chrome_trace)"
                        ) from None

        def expect(ch: str) -> None:
            nonlocal pos
            if peek() != ch:
                raise json.JSONDecodeError(f"expected {ch!r}", buf, pos)
            pos += 1

        def events() -> Iterator[Any]:
            nonlocal pos
            expect("[")
            if peek() == "]":
                pos += 1
                return
            while True:
                yield value()
                c = peek()
                pos += 1
                if c == "]":
                    return
                if c != ",":
                    raise json.JSONDecodeError("expected ',' or ']' in traceEvents", buf, pos)

        first = peek()
        if first == "[":
            for e in events():
                yield "event", e
            return
        expect("{")
        if peek() == "}":
            return
        while True:
            key = value()
            expect(":")
            if key == "traceEvents" and peek() == "[":
                for e in events():
                    yield "event", e
            else:
                yield "meta", (key, value())
            c = peek()
            pos += 1
            if c == "}":
                return
            if c != ",":
                raise json.JSONDecodeError("expected ',' or '}' at top level", buf, pos)
