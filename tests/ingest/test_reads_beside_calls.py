"""What an nsys report's extraction reads from the attached report alone (the session's start,
the nsys version, the long host calls and NVTX ranges, the compute kernels' names) is read on a
thread of its own while the calls are made, where the database runs on more than one thread:
the same extract as when it is read after them, its errors reach the caller, and nothing it
started is left running."""

from __future__ import annotations

import threading

import pytest

from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import gap_kernels
from tests.extract.test_sqlite_scan import SAMPLES, _same

FSDP = SAMPLES / "synthetic_fsdp_8rank.sqlite"


def _spy_reads(monkeypatch) -> list[tuple[str, bool]]:
    """(thread, whether the calls were being made) of each read of the report alone."""
    seen: list[tuple[str, bool]] = []
    making = threading.Event()
    real_reads, real_calls = nsys_extract._report_reads, nsys_extract.nsys_calls.calls

    def calls(con, *args):
        making.set()
        try:
            return real_calls(con, *args)
        finally:
            making.clear()

    def reads(*args):
        # the calls of this small report take milliseconds: wait for them to begin, so that
        # "beside the calls" is checked, not the threads' timing
        if threading.current_thread() is not threading.main_thread():
            making.wait(10)
        seen.append((threading.current_thread().name, making.is_set()))
        return real_reads(*args)

    monkeypatch.setattr(nsys_extract.nsys_calls, "calls", calls)
    monkeypatch.setattr(nsys_extract, "_report_reads", reads)
    return seen


def _extract_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("nsyscomm-extract")}


def test_reads_beside_the_calls_give_the_same_extract(monkeypatch):
    after = nsys_extract.extract(FSDP, threads=1)
    seen = _spy_reads(monkeypatch)
    beside = nsys_extract.extract(FSDP, threads=2)
    assert len(seen) == 1 and seen[0][0].startswith("nsyscomm-extract") and seen[0][1]
    assert beside.gap_kernels is not None and len(beside.gap_kernels)  # the names read ahead are used
    _same(after, beside)
    assert not _extract_threads()


def test_reads_after_the_calls_on_one_thread(monkeypatch):
    """A database of one thread (a small report, a pool worker's share): read on this thread
    once the calls are made, as before."""
    seen = _spy_reads(monkeypatch)
    nsys_extract.extract(FSDP, threads=1)
    assert seen == [(threading.main_thread().name, False)]


def test_reads_after_the_calls_under_a_memory_limit(monkeypatch):
    """Under a memory limit the reads' working memory does not meet the calls' under it."""
    monkeypatch.setenv("NSYSCOMM_MEMORY_LIMIT", "2GB")
    seen = _spy_reads(monkeypatch)
    nsys_extract.extract(FSDP, threads=2)
    assert seen == [(threading.main_thread().name, False)]


@pytest.mark.parametrize("where", ["reads", "calls"])
def test_an_error_beside_the_calls_reaches_the_caller_and_nothing_is_left_running(monkeypatch, where):
    """An error in the reads beside the calls, or in the calls while the reads run, is raised by
    extract(), which returns only once the reads' thread has ended."""
    started = threading.Event()

    class Broken(RuntimeError):
        pass

    def session(con, tables):
        started.set()
        if where == "reads":
            raise Broken("session start")
        return None

    def calls(con, *args):
        started.wait(10)  # the reads have begun: the failing calls leave them running
        raise Broken("calls")

    monkeypatch.setattr(nsys_extract, "_session_start", session)
    if where == "calls":
        monkeypatch.setattr(nsys_extract.nsys_calls, "calls", calls)
    with pytest.raises(Broken, match="session start" if where == "reads" else "calls"):
        nsys_extract.extract(FSDP, threads=2)
    assert started.is_set()
    assert not _extract_threads()


def test_gap_names_read_ahead_are_those_read_after(tmp_path):
    """compute_names() (every compute kernel's name, read before the gaps are known) gives
    names_of() the names its own query gives."""
    ex = nsys_extract.extract(FSDP, threads=1)
    assert ex.gap_kernels is not None and len(ex.gap_kernels)
    from nsyscomm.ingest.nsys import reader

    opened = reader.open_report(FSDP)
    try:
        assert opened.compute is not None
        known = gap_kernels.compute_names(opened.compute, opened.con)
        ahead = gap_kernels.names_of(ex.gap_kernels, opened.con, known)
        after = gap_kernels.names_of(ex.gap_kernels, opened.con)
    finally:
        opened.con.close()
    assert ahead.equals(after)
    assert set(known) >= set(after["name_id"])
