"""nsys's stdout and stderr, as `nsyscomm run` shows them: everything but the lines that ask
nothing of the user.

nsys 2022.4 (Debian's) cannot find its importer and says so after every run ("Importer error
status: ... skipping importation of the QDSTRM file"), although nsyscomm imports the .qdstrm
itself right after (capture/post.py): the run succeeds, and the two lines only alarm. On stdout
it names the .qdstrm it writes ("Generating '/tmp/nsys-report-1a2b.qdstrm'", then "Generated:"
over the indented path): that file is gone once nsyscomm has imported it into the .nsys-rep,
which nsyscomm names itself ("report(s) in ...").

The profiled job inherits nsys's stdout and stderr, so the job's own output passes through here
too: it is forwarded as it comes, byte for byte, a partial line (a progress bar) at once, unless
it could still become one of the dropped lines. When nsyscomm's output is a terminal, the job
writes into a pseudo-terminal of the same size, so that it still sees a terminal (colours,
progress bars).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading

# whole lines, compared without their line end
DROPPED = (
    b"Importer error status: The importer binary and its dependencies were not found.",
    b"Unable to retrieve the importer version: skipping importation of the QDSTRM file.",
)
# nsys's lines about the .qdstrm it writes: one line, and "Generated:" over the path
_GENERATING = re.compile(rb"Generating '[^']*\.qdstrm'")
_GENERATED = b"Generated:"
_QDSTRM_PATH = re.compile(rb"[ \t]+\S.*\.qdstrm")


class LineFilter:
    """Bytes in, the same bytes out less the dropped lines; a partial line is held back only
    while it may still become one, and a "Generated:" line until the next line says whether it
    names a .qdstrm."""

    def __init__(self) -> None:
        self._buf = b""
        self._at_start = True
        self._held = b""  # a "Generated:" line, waiting for the line after it

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = []
        while self._buf:
            end = self._buf.find(b"\n")
            if not self._at_start:  # the rest of a line already (partly) shown
                if end < 0:
                    out.append(self._buf)
                    self._buf = b""
                    break
                out.append(self._buf[: end + 1])
                self._buf = self._buf[end + 1 :]
                self._at_start = True
            elif end < 0:
                if not self._may_drop(self._buf.rstrip(b"\r")):
                    out += [self._held, self._buf]
                    self._held = self._buf = b""
                    self._at_start = False
                break
            else:
                line = self._buf[: end + 1]
                self._buf = self._buf[end + 1 :]
                out.append(self._line(line))
        return b"".join(out)

    def _may_drop(self, partial: bytes) -> bool:
        """Whether a partial line may still become a dropped one."""
        if self._held:
            return partial[:1] in (b"", b" ", b"\t")
        starts = (*DROPPED, _GENERATED, b"Generating '")
        return partial.startswith(b"Generating '") or any(d.startswith(partial) for d in starts)

    def _line(self, line: bytes) -> bytes:
        """A whole line (its line end included) -> what is shown of it and of a held line."""
        text = line.rstrip(b"\r\n")
        if self._held:
            held, self._held = self._held, b""
            return b"" if _QDSTRM_PATH.fullmatch(text) else held + self._line(line)
        if text == _GENERATED:
            self._held = line
            return b""
        return b"" if text in DROPPED or _GENERATING.fullmatch(text) else line

    def flush(self) -> bytes:
        rest, self._buf = self._buf, b""
        out = self._line(rest) if rest else b""
        held, self._held = self._held, b""
        return out + held


class FilteredStderr:
    """A file descriptor for nsys's stderr (child_fd) whose output reaches out_fd filtered.

    start() after the child is started (it closes the parent's copy of child_fd); close() after
    it exited: the rest is forwarded, waiting at most `timeout` for a process the job left behind
    that still holds the stderr."""

    def __init__(self, out_fd: int) -> None:
        self._out = out_fd
        self._filter = LineFilter()
        self._thread: threading.Thread | None = None
        read_fd, self.child_fd = _terminal_like(out_fd) if _isatty(out_fd) else os.pipe()
        self._read = read_fd
        self._tail = b""  # the end of what was forwarded: nsys's last line when it fails

    def start(self) -> FilteredStderr:
        os.close(self.child_fd)
        self._thread = threading.Thread(target=self._pump, name="nsys-stderr", daemon=True)
        self._thread.start()
        return self

    def _pump(self) -> None:
        while True:
            try:
                data = os.read(self._read, 65536)
            except OSError:  # EIO: a pseudo-terminal whose last writer closed it; or closed by close()
                break
            if not data:
                break
            self._write(self._filter.feed(data))
        self._write(self._filter.flush())

    @property
    def read_fd(self) -> int:
        """The end of the pipe (or pseudo-terminal) that the job's stderr is read from."""
        return self._read

    @property
    def last_line(self) -> str:
        """The last non-empty line forwarded (after close(): nsys's own, when it failed to start)."""
        lines = [ln.strip() for ln in self._tail.decode(errors="replace").splitlines()]
        return next((ln for ln in reversed(lines) if ln), "")

    def _write(self, data: bytes) -> None:
        self._tail = (self._tail + data)[-4096:]
        while data:
            try:
                data = data[os.write(self._out, data) :]
            except OSError:  # our own stderr is gone: nothing left to show it on
                return

    def close(self, timeout: float = 2.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            os.close(self._read)


class FilteredOutput:
    """nsys's stdout and stderr, each through its own filter (FilteredStderr): child_out and
    child_fd for the child, out_fd and err_fd where they are shown (out_fd may be err_fd)."""

    def __init__(self, out_fd: int, err_fd: int) -> None:
        self.err = FilteredStderr(err_fd)
        try:
            self.out = FilteredStderr(out_fd)
        except OSError:
            os.close(self.err.child_fd)
            self.err.close(0)
            raise
        self.child_fd, self.child_out = self.err.child_fd, self.out.child_fd

    def start(self) -> FilteredOutput:
        self.out.start()
        self.err.start()
        return self

    def close(self, timeout: float = 2.0) -> None:
        self.out.close(timeout)
        self.err.close(timeout)

    @property
    def read_fds(self) -> tuple[int, ...]:
        """Our ends of the two pipes (one, where stdout is shown on stderr's filter's terminal)."""
        return tuple(dict.fromkeys((self.out.read_fd, self.err.read_fd)))

    @property
    def last_line(self) -> str:
        """nsys's last line on stderr (its reason, when it could not start the command)."""
        return self.err.last_line

    def abandon(self) -> None:
        """The child never started: close both ends."""
        for f in (self.out, self.err):
            with contextlib.suppress(OSError):
                os.close(f.child_fd)
            f.close(0)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _terminal_like(out_fd: int) -> tuple[int, int]:
    """A pseudo-terminal (master, slave) of out_fd's size that writes lines as they are ("\\n",
    not the "\\r\\n" a terminal's output processing would make of it)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    with contextlib.suppress(OSError):
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(out_fd, termios.TIOCGWINSZ, b"\0" * 8))
    return master, slave
