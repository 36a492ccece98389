"""The registry of input formats (nsyscomm.ingest.formats): discovery and the reader choice loop
over it, so a format registered there is found in a folder, read and combined with nothing else
changed; and a folder without a report is told every format."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import nsyscomm
from nsyscomm import api, discover
from nsyscomm.errors import InputError
from nsyscomm.extract import readers
from nsyscomm.ingest import formats
from nsyscomm.ingest.extract_type import Extract

MAGIC = b"FAKE-TRACE\n"


def _reads_fake(path: Path) -> bool:
    """By suffix and content, as the built-in formats do."""
    if path.suffix != ".fake" or not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def _extract_fake(path: Path, report: str | None, threads: int | None) -> Extract:
    """One rank per file: its rank on the first line, then one all_reduce per line (bytes start end)."""
    lines = path.read_bytes()[len(MAGIC) :].decode().split()
    rank, rows = int(lines[0]), [lines[i : i + 3] for i in range(1, len(lines), 3)]
    pid = 100 + rank
    calls = pa.table(
        {
            "pid": pa.array([pid] * len(rows), pa.int64()),
            "tid": pa.array([pid] * len(rows), pa.int64()),
            "op": ["all_reduce"] * len(rows),
            "api": ["all_reduce"] * len(rows),
            "bytes": pa.array([int(b) for b, _, _ in rows], pa.int64()),
            "group": ["world"] * len(rows),
            "group_size": pa.array([2] * len(rows), pa.int32()),
            "seq": pa.array(range(len(rows)), pa.int64()),
            "cpu_start": pa.array([int(s) for _, s, _ in rows], pa.int64()),
            "cpu_end": pa.array([int(e) for _, _, e in rows], pa.int64()),
            "source": ["fake"] * len(rows),
        }
    )
    markers = pd.DataFrame({"pid": [pid], "rank": [rank], "local_rank": [rank], "world": [2], "host": ["h"]})
    starts = [int(s) for _, s, _ in rows]
    ends = [int(e) for _, _, e in rows]
    spans = pd.DataFrame({"pid": [pid], "first_ns": [min(starts)], "last_ns": [max(ends)]})
    return Extract(report=report or path.name, path=path, calls=calls, markers=markers, spans=spans)


FAKE = formats.Format("fake trace", "*.fake", _reads_fake, _extract_fake)


@pytest.fixture
def fake_registered(monkeypatch):
    monkeypatch.setattr(formats, "FORMATS", [*formats.FORMATS, FAKE])


def _job(folder: Path) -> Path:
    folder.mkdir()
    for rank in (0, 1):
        calls = "".join(f"{1 << 20} {1000 * i + 10 * rank} {1000 * i + 500}\n" for i in range(3))
        (folder / f"rank{rank}.fake").write_bytes(MAGIC + f"{rank}\n{calls}".encode())
    (folder / "notes.fake").write_text("a note, not a trace")  # the suffix alone is not enough
    return folder


def test_a_registered_format_is_discovered_read_and_combined(fake_registered, tmp_path):
    folder = _job(tmp_path / "job")
    found = discover.survey([folder])
    assert found.files == [folder / "rank0.fake", folder / "rank1.fake"]
    assert found.skipped == [(folder / "notes.fake", "not a report")]
    e = readers.extract_one(folder / "rank1.fake", "rank1.fake")
    assert e.calls.num_rows == 3 and e.report == "rank1.fake"
    r = api.load([folder], jobs=1, cache=False)
    got = r.con.execute(
        "SELECT rank, count(*), min(exec_end - exec_start) FROM collectives GROUP BY rank ORDER BY rank"
    )
    assert got.fetchall() == [(0, 3, 500), (1, 3, 490)]
    assert r.con.execute("SELECT count(*), min(participants) FROM logical_collectives").fetchone() == (3, 2)


def test_without_the_registration_the_same_folder_holds_no_report(tmp_path):
    folder = _job(tmp_path / "job")
    with pytest.raises(InputError, match="no report"):
        discover.survey([folder])
    with pytest.raises(InputError, match="not an nsys SQLite export"):
        readers.extract_one(folder / "rank0.fake")


def test_a_folder_without_a_report_is_told_every_format(fake_registered, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("nothing to read")
    with pytest.raises(InputError) as e:
        discover.survey([tmp_path / "empty"])
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and msg.startswith(f"{tmp_path / 'empty'}: no report")
    for f in formats.FORMATS:
        assert f.name in msg and f.looks in msg, f.name
    assert {"nsys SQLite export", "nsys Arrow export", "straggler trace", "PyTorch profiler trace"} <= {
        f.name for f in formats.FORMATS
    }


def test_discovery_and_the_reader_choice_name_no_format():
    """discover.py and extract/readers.py reach the formats only through the registry, and
    api.load adds what a format gives the whole job through it too."""
    pkg = Path(nsyscomm.__file__).resolve().parent
    for rel, allowed in (
        ("discover.py", set()),
        ("extract/readers.py", {"nsyscomm.ingest.extract_type"}),
        ("api.py", {"nsyscomm.ingest.nsys"}),  # the recorded environment, an nsys export's only
    ):
        tree = ast.parse((pkg / rel).read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        named = sorted(m for m in mods if m.startswith("nsyscomm.ingest.") and m not in allowed)
        assert not named, f"{rel} imports a format's reader: {named}"
