"""A per-rank record of the last collectives each process entered and finished, that survives the process.

Under ``nsyscomm run`` the launcher sets ``NSYSCOMM_RECORD_DIR``; each process that annotates
collectives maps ``<dir>/rank<R>.ring`` (``pid<P>.ring`` without a RANK) into memory and writes,
at every collective's NVTX push, the message into the next slot of a bounded ring, and at its
pop the finish time. The writes land in the kernel's page cache, so the file holds them after a
SIGKILL or an abort(): a call entered and never finished is not lost because nsys never saw its
NVTX range close. A clean exit, an uncaught exception and "stopped by the launcher" are written
into the header; a process that is gone with "running" in its header was killed or aborted.

The hot path (one push, one pop per call) is in C (_flightring.c) with this module's Python
functions as the fallback; both keep the same layout:

    header (512 bytes): magic "NSCRING1", version u32, slots u32, slot_size u32, rank i32, pid u32,
        state u32, entered u64, finished u64, last_exit_ns u64, created_ns u64, stopped_ns u64
        (when the launcher stopped it), note (440 bytes)
    slot (512 bytes): n u64 (1-based entry number, 0 = being written), t_enter_ns u64,
        t_exit_ns u64 (0 = not finished), tid u64, len u32, flags u32 (1: left by an exception),
        message (472 bytes, UTF-8)

A call left by an exception (gloo's "connection closed" when a peer died, a timeout) ended
without completing: its slot is flagged and it reads as not finished, so the ranks that were
waiting in it when a peer failed are reported waiting there, whichever of them torchrun stops
first. The header's finished count still counts it: it measures progress, not success.
"""

from __future__ import annotations

import atexit
import importlib
import mmap
import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from nsyscomm import nvtx_format as _fmt
from nsyscomm import settings

ENV_DIR = "NSYSCOMM_RECORD_DIR"
MAGIC = b"NSCRING1"
VERSION = 1
SLOTS = 64
HEADER_SIZE = 512
SLOT_SIZE = 512
MSG_MAX = SLOT_SIZE - 40
OFF_STOPPED = 64
NOTE_OFF, NOTE_MAX = 72, HEADER_SIZE - 72
# header field offsets (see the layout above)
OFF_STATE, OFF_ENTERED, OFF_FINISHED, OFF_LAST_EXIT = 28, 32, 40, 48
OFF_SLOT_FLAGS, FLAG_RAISED = 36, 1
STATES = {0: "running", 1: "exited", 2: "raised", 3: "stopped"}
RUNNING, EXITED, RAISED, STOPPED = 0, 1, 2, 3
_HEAD = struct.Struct("<8sIIIiIIQQQQ")
_SLOT = struct.Struct("<QQQQII")
_PREFIX = _fmt.COLLECTIVE_PREFIX.encode()


def _c_ring() -> ModuleType | None:
    """The C ring (_flightring.c), or None where it was not built (no C compiler at install): then
    the Python ring below writes the same file."""
    try:
        return importlib.import_module("nsyscomm.capture._flightring")
    except ImportError:
        return None


_flightring = _c_ring()

_mm: mmap.mmap | None = None


def ring_path(directory: str | os.PathLike) -> Path:
    rank = os.environ.get("RANK")
    name = f"rank{int(rank)}.ring" if rank is not None and rank.strip().isdigit() else f"pid{os.getpid()}.ring"
    return Path(directory) / name


def open_ring(path: Path, slots: int = SLOTS, rank: int | None = None, pid: int | None = None) -> mmap.mmap:
    """A fresh ring file of `slots` slots, mapped shared (its pages outlive the process).
    rank/pid: this process's unless given (tests write other processes' records)."""
    size = HEADER_SIZE + slots * SLOT_SIZE
    # the job's user's alone: a ring names the job's code and collectives
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    if rank is None:
        env = os.environ.get("RANK", "")
        rank = int(env) if env.strip().isdigit() else -1
    _HEAD.pack_into(
        mm,
        0,
        MAGIC,
        VERSION,
        slots,
        SLOT_SIZE,
        rank,
        os.getpid() if pid is None else pid,
        RUNNING,
        0,
        0,
        0,
        time.time_ns(),
    )
    return mm


# ---------------------------------------------------------------- the Python fallback of the hot path


def _no_raising() -> None:
    return None


def _py_chain(push, pop, mm: mmap.mmap):
    slots = struct.unpack_from("<I", mm, 12)[0]
    q = struct.Struct("<Q")
    stack_of = threading.local()  # this ring's open ranges per thread (slot offset, -1: not a collective)

    def rec_raising(_st=stack_of):
        _st.raising = True

    def rec_push(msg, _push=push, _mm=mm, _q=q, _slot=_SLOT, _t=time.time_ns, _st=stack_of):
        stack = getattr(_st, "v", None)
        if stack is None:
            stack = _st.v = []
        if msg.startswith(_fmt.COLLECTIVE_PREFIX):
            n = _q.unpack_from(_mm, OFF_ENTERED)[0] + 1
            off = HEADER_SIZE + ((n - 1) % slots) * SLOT_SIZE
            b = msg.encode("utf-8", "replace")[:MSG_MAX]
            _q.pack_into(_mm, off, 0)  # "being written" while the slot changes
            _mm[off + 40 : off + 40 + len(b)] = b
            _slot.pack_into(_mm, off, 0, _t(), 0, threading.get_ident(), len(b), 0)
            _q.pack_into(_mm, off, n)
            _q.pack_into(_mm, OFF_ENTERED, n)
            stack.append(off)
        else:
            stack.append(-1)
        return _push(msg)

    def rec_pop(_pop=pop, _mm=mm, _q=q, _t=time.time_ns, _st=stack_of):
        r = _pop()
        raised = getattr(_st, "raising", False)
        _st.raising = False
        stack = getattr(_st, "v", None)
        off = stack.pop() if stack else -1
        if off >= 0:
            now = _t()
            if raised:
                struct.pack_into("<I", _mm, off + OFF_SLOT_FLAGS, FLAG_RAISED)
            _q.pack_into(_mm, off + 16, now)
            _q.pack_into(_mm, OFF_FINISHED, _q.unpack_from(_mm, OFF_FINISHED)[0] + 1)
            _q.pack_into(_mm, OFF_LAST_EXIT, now)
        return r

    return rec_push, rec_pop, rec_raising


def set_state(mm: mmap.mmap, state: int, note: str = "") -> None:
    if state == STOPPED:
        struct.pack_into("<Q", mm, OFF_STOPPED, time.time_ns())
    struct.pack_into("<I", mm, OFF_STATE, state)
    b = note.encode("utf-8", "replace")[: NOTE_MAX - 1]
    mm[NOTE_OFF : NOTE_OFF + NOTE_MAX] = b + b"\0" * (NOTE_MAX - len(b))


def _on_exit():
    if _mm is not None and struct.unpack_from("<I", _mm, OFF_STATE)[0] == RUNNING:
        set_state(_mm, EXITED)


def _chain_excepthook():
    previous = sys.excepthook

    def hook(tp, value, tb):
        try:
            if _mm is not None and struct.unpack_from("<I", _mm, OFF_STATE)[0] == RUNNING:
                set_state(_mm, RAISED, f"{tp.__name__}: {value}".strip().splitlines()[0] if str(value) else tp.__name__)
        finally:
            previous(tp, value, tb)

    sys.excepthook = hook


def chain(
    push: Callable[[str], Any], pop: Callable[[], Any]
) -> tuple[Callable[[str], Any], Callable[[], Any], Callable[[], None]]:
    """(push, pop, raising) that also record collectives in this process's ring, when
    NSYSCOMM_RECORD_DIR is set; else push and pop unchanged and a raising that does nothing.
    raising() is called before the pop of a call that is being left by an exception.
    Called once by the wrapper when it binds its emitter."""
    global _mm
    directory = settings.record_dir()
    if not directory:
        return push, pop, _no_raising
    try:
        Path(directory).mkdir(mode=0o700, parents=True, exist_ok=True)  # the job's user's alone
        mm = open_ring(ring_path(directory))
    except OSError as e:
        import warnings

        warnings.warn(
            f"nsyscomm: no flight record in {directory} ({e.strerror or e}); hangs are diagnosed from the report alone",
            RuntimeWarning,
            stacklevel=2,
        )
        return push, pop, _no_raising
    _mm = mm
    atexit.register(_on_exit)
    _chain_excepthook()
    if _flightring is not None and not settings.ring_py():
        _flightring.configure(mm, push, pop)
        return _flightring.push, _flightring.pop, _flightring.raising
    return _py_chain(push, pop, mm)


# ---------------------------------------------------------------- reading


@dataclass
class Call:
    n: int
    t_enter_ns: int
    t_exit_ns: int | None
    tid: int
    message: str
    fields: dict = field(default_factory=dict)
    raised: bool = False  # left by an exception: ended, never completed

    @property
    def finished(self) -> bool:
        return self.t_exit_ns is not None and not self.raised


@dataclass
class Ring:
    path: Path
    rank: int
    pid: int
    state: str  # running | exited | raised | stopped | aborted (gone while "running")
    note: str
    entered: int
    finished: int
    last_exit_ns: int
    calls: list[Call]  # oldest first


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped) is not running
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def read_ring(path: Path) -> Ring | None:
    """One ring file, or None when it is not one (a torn or foreign file)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if len(data) < HEADER_SIZE or data[:8] != MAGIC:
        return None
    _m, _v, slots, slot_size, rank, pid, state, entered, finished, last_exit, _c = _HEAD.unpack_from(data, 0)
    note = data[NOTE_OFF : NOTE_OFF + NOTE_MAX].split(b"\0", 1)[0].decode("utf-8", "replace")
    stopped_ns = struct.unpack_from("<Q", data, OFF_STOPPED)[0] if state == STOPPED else 0
    calls = []
    for i in range(slots):
        off = HEADER_SIZE + i * slot_size
        if off + slot_size > len(data):
            break
        n, t_in, t_out, tid, ln, flags = _SLOT.unpack_from(data, off)
        if n == 0 or n > entered:
            continue
        msg = data[off + 40 : off + 40 + min(ln, MSG_MAX)].decode("utf-8", "replace")
        try:
            fields = _fmt.parse(msg)
        except Exception:
            fields = {}
        # a call that ended after the launcher stopped the process ended by the stop (an exception
        # such as KeyboardInterrupt closes the range too): it did not finish
        if stopped_ns and t_out >= stopped_ns:
            t_out = 0
        calls.append(Call(n, t_in, t_out or None, tid, msg, fields, bool(flags & FLAG_RAISED)))
    calls.sort(key=lambda c: c.n)
    name = STATES.get(state, "running")
    if name == "running" and not _alive(pid):
        name = "aborted"
    return Ring(Path(path), rank, pid, name, note, entered, finished, last_exit, calls)


def read_dir(directory: str | os.PathLike) -> list[Ring]:
    rings = [read_ring(p) for p in sorted(Path(directory).glob("*.ring"))]
    return [r for r in rings if r is not None]


def mark_stopped(directory: str | os.PathLike, note: str) -> list[int]:
    """Write "stopped" (with note) into the rings of processes still running; their pids."""
    pids = []
    for p in sorted(Path(directory).glob("*.ring")):
        try:
            with open(p, "r+b") as f:
                mm = mmap.mmap(f.fileno(), 0)
        except (OSError, ValueError):
            continue
        try:
            idle = struct.unpack_from("<i", mm, 20)[0] < 0 and struct.unpack_from("<Q", mm, OFF_ENTERED)[0] == 0
            if mm[:8] == MAGIC and struct.unpack_from("<I", mm, OFF_STATE)[0] == RUNNING and not idle:
                # (idle: a launcher such as torchrun, no rank and no call: it ends when its ranks do)
                pid = struct.unpack_from("<I", mm, 24)[0]
                if _alive(pid):
                    set_state(mm, STOPPED, note)
                    pids.append(pid)
        finally:
            mm.close()
    return pids


def teardown_note(rings: list[Ring]) -> str | None:
    """For a job that exited with an error: a note when its flight records say the work was done
    (no collective open on any rank, no Python exception, at least one program ran to its end),
    so the failure came in the processes' teardown, not in the training. None otherwise.

    torch's gloo backend can abort a rank there ("terminate called without an active
    exception", with no Python frame left) when the ranks destroy the process group right after
    their last collective, profiled or not (docs/capture.md measures it)."""
    # the launcher's own process (torchrun's agent) has a ring without a rank or a collective; it
    # raised because a worker failed
    rings = [r for r in rings if r.rank >= 0 or r.entered]
    if not rings or any(
        r.state == "raised" or r.entered != r.finished or any(c.raised for c in r.calls) for r in rings
    ):
        return None
    done = sum(r.state == "exited" for r in rings)
    if not done:
        return None
    return (
        f"{done} of {len(rings)} rank(s) ran their program to its end and no collective was open on "
        f"any rank: the job failed in its teardown, after its work, and the report is complete "
        f'(torch\'s gloo can abort a rank there, "terminate called without an active exception", '
        f"profiled or not: a dist.barrier() before destroy_process_group() makes it rarer; docs/capture.md)"
    )
