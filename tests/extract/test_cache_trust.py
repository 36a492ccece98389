"""The extract cache is checked, not trusted: an entry another user could have planted (owned by
someone else, writable by others) is ignored and said once; an entry of this user's whose key,
schema or values are not what a fresh extract gives is rebuilt."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from nsyscomm.extract import cache
from tests.conftest import SAMPLES

SAMPLE = SAMPLES / "synthetic_gloo_cpu.sqlite"


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_untrusted", [], raising=False)  # each test its own process's notes
    monkeypatch.setattr(cache, "_said", set(), raising=False)
    return d


def _summary(*reports: Path) -> dict:
    args = ["summarize", "--format", "json", "--jobs", "1", "--merge", *map(str, reports)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _bytes(doc: dict) -> list:
    return sorted((row["op"], row["bytes"], row["count"]) for row in doc["summary"])


def _rewrite_calls(entry: Path, change) -> None:
    f = entry / "calls.parquet"
    mode = f.stat().st_mode
    t = pq.read_table(f)
    pq.write_table(change(t), f)
    os.chmod(f, mode & 0o777)


def _times_1000(t: pa.Table) -> pa.Table:
    i = t.column_names.index("bytes")
    return t.set_column(i, "bytes", pc.multiply(t.column("bytes"), 1000))


@pytest.fixture
def reports(tmp_path, cache_home) -> tuple[list[Path], dict]:
    """Two reports extracted once into the cache, and their summary."""
    srcs = [Path(shutil.copy(SAMPLE, tmp_path / name)) for name in ("a.sqlite", "b.sqlite")]
    fresh = _summary(*srcs)
    assert all(cache.has(s, s.name) for s in srcs)
    return srcs, fresh


@pytest.fixture
def cached(tmp_path, cache_home) -> list[Path]:
    """Two reports extracted into the cache, without a summary."""
    srcs = [Path(shutil.copy(SAMPLE, tmp_path / name)) for name in ("a.sqlite", "b.sqlite")]
    for s in srcs:
        cache.cached_extract(s, s.name)
    return srcs


def _entry(cache_home: Path, src: Path) -> Path:
    return cache_home / cache.key(src, src.name)


def test_an_entry_others_can_write_is_ignored_and_said_once(reports, cache_home):
    srcs, fresh = reports
    for s in srcs:  # planted: every size x1000, then left writable by everyone
        entry = _entry(cache_home, s)
        _rewrite_calls(entry, _times_1000)
        os.chmod(entry / "calls.parquet", 0o666)
    doc = _summary(*srcs)
    assert _bytes(doc) == _bytes(fresh)
    assert sum("another user's" in w for w in doc["warnings"]) == 1, doc["warnings"]
    assert (_entry(cache_home, srcs[0]) / "calls.parquet").exists()  # not ours alone: left as it is


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_an_entry_owned_by_another_user_is_ignored(reports, cache_home):
    srcs, fresh = reports
    entry = _entry(cache_home, srcs[0])
    _rewrite_calls(entry, _times_1000)
    for p in [entry, *entry.iterdir()]:
        os.chown(p, 12345, 12345)
    doc = _summary(*srcs)
    assert _bytes(doc) == _bytes(fresh)
    assert any("another user's" in w for w in doc["warnings"])


def test_an_entry_with_impossible_values_is_rebuilt(cached, cache_home):
    """An unset end (2**63 - 1) in an entry of this user's: checked as a fresh extract is,
    thrown away and extracted again."""
    srcs = cached
    entry = _entry(cache_home, srcs[0])

    def unset_end(t: pa.Table) -> pa.Table:
        i = t.column_names.index("cpu_end")
        end = t.column("cpu_end").to_pylist()
        end[0] = 2**63 - 1
        return t.set_column(i, "cpu_end", pa.array(end, t.schema.field("cpu_end").type))

    _rewrite_calls(entry, unset_end)
    assert cache.load(srcs[0], srcs[0].name) is None and not entry.exists()
    again = cache.cached_extract(srcs[0], srcs[0].name)
    assert max(again.calls.column("cpu_end").to_pylist()) < 2**62 and not again.warnings
    assert cache.load(srcs[0], srcs[0].name) is not None


def test_an_entry_under_another_key_or_with_another_schema_is_rebuilt(cached, cache_home):
    srcs = cached
    a, b = (_entry(cache_home, s) for s in srcs)
    shutil.rmtree(b)
    shutil.copytree(a, b)  # a's entry where b's belongs: its meta names a's key
    assert cache.load(srcs[1], srcs[1].name) is None and not b.exists()

    def with_text_bytes(t: pa.Table) -> pa.Table:
        i = t.column_names.index("bytes")
        return t.set_column(i, "bytes", pc.cast(t.column("bytes"), pa.string()))

    _rewrite_calls(a, with_text_bytes)
    assert cache.load(srcs[0], srcs[0].name) is None and not a.exists()


def test_the_cache_writes_entries_only_its_user_can_read(cached, cache_home):
    srcs = cached
    entry = _entry(cache_home, srcs[0])
    assert all(p.stat().st_mode & 0o077 == 0 for p in [entry, *entry.iterdir()])
