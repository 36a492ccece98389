"""File names Arrow can open. pyarrow takes a path as UTF-8 text, and a name whose bytes are not
UTF-8 (which Python holds as surrogate escapes) makes it fail with UnicodeEncodeError: such a file
is opened by Python and handed to Arrow as a file, so that any name a file system allows reads."""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def utf8(path: str | os.PathLike) -> bool:
    """Whether Arrow, DuckDB and other UTF-8-only libraries can be given path as text."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def memory_map(path: str | os.PathLike) -> pa.NativeFile:
    """The file at path mapped into memory for Arrow (pyarrow.memory_map, or Python's mmap for a
    name Arrow cannot take)."""
    import pyarrow as pa

    if utf8(path):
        return pa.memory_map(os.fspath(path))
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return pa.BufferReader(b"")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # stays valid once f is closed
    return pa.BufferReader(pa.py_buffer(mapped))


def arrow_source(path: str | os.PathLike) -> str | pa.NativeFile:
    """What pyarrow's readers (parquet.ParquetFile, ipc) take for path: the path itself when it is
    UTF-8, else the file mapped into memory."""
    return os.fspath(path) if utf8(path) else memory_map(path)
