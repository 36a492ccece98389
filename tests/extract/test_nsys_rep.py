"""An .nsys-rep read like its export (nsyscomm.extract.nsys_rep): through a stand-in nsys whose
export is a bundled sample, so that the figures must be the sample's, and the files each step
writes can be counted. The real nsys on a real report: tests/cli/test_readme.py
(test_a_run_s_nsys_rep_reads_as_its_export)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import SAMPLES

SAMPLE = SAMPLES / "synthetic_ddp_4rank.sqlite"

# the stand-in nsys: `export ... -o OUT REP` copies EXPORT_OF (a SQLite export) to OUT and logs
# the call; FAKE_NSYS_EXPORT_RC makes it fail as nsys does on a damaged report
FAKE_NSYS = textwrap.dedent(
    """\
    #!{python}
    import os, shutil, sys
    a = sys.argv[1:]
    if a[:1] == ["export"] and "--help" not in a:
        with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
            log.write(" ".join(a) + "\\n")
        if os.environ.get("FAKE_NSYS_EXPORT_RC"):
            print("Exportation error: Cannot read from stream.", file=sys.stderr)
            sys.exit(int(os.environ["FAKE_NSYS_EXPORT_RC"]))
        shutil.copy(os.environ["EXPORT_OF"], a[a.index("-o") + 1])
    """
)


@pytest.fixture
def nsys(tmp_path, monkeypatch) -> Path:
    """The stand-in nsys as NSYSCOMM_NSYS, a cache of the test's own; returns its call log."""
    p = tmp_path / "bin" / "nsys"
    p.parent.mkdir()
    p.write_text(FAKE_NSYS.format(python=sys.executable))
    p.chmod(0o755)
    log = tmp_path / "nsys-calls.log"
    log.touch()
    monkeypatch.setenv("NSYSCOMM_NSYS", str(p))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("EXPORT_OF", str(SAMPLE))
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", str(tmp_path / "cache"))
    return log


def _exports(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("export"))


def _summary(*args: str) -> dict:
    res = CliRunner().invoke(main, ["summarize", "--format", "json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _report(tmp_path: Path, name: str = "report.nsys-rep") -> Path:
    d = tmp_path / "in"
    d.mkdir(exist_ok=True)
    rep = d / name
    rep.write_bytes(b"an nsys report")
    return rep


def _without_names(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True).replace(SAMPLE.name, "REPORT").replace("report.nsys-rep", "REPORT")


def test_a_report_is_read_through_its_export_kept_in_the_cache(nsys, tmp_path):
    rep = _report(tmp_path)
    before = (rep.read_bytes(), rep.stat().st_mtime_ns)
    got = _summary(str(rep))
    assert got["reports"] == ["report.nsys-rep"]
    assert _without_names(got) == _without_names(_summary(str(SAMPLE)))  # the export's figures
    assert sorted(p.name for p in rep.parent.iterdir()) == ["report.nsys-rep"]  # nothing beside it
    assert (rep.read_bytes(), rep.stat().st_mtime_ns) == before  # nor changed
    exports = list((tmp_path / "cache" / "exports").iterdir())
    assert len(exports) == 1 and exports[0].suffix == ".arrow"
    assert _exports(nsys) == 1
    assert _summary(str(rep)) == got  # a second read: the cache's, no export
    assert _exports(nsys) == 1
    assert _summary("--no-cache", str(rep)) == got  # no cache: exported again
    assert _exports(nsys) == 2


def test_without_the_cache_the_export_is_removed_once_read(nsys, tmp_path):
    rep = _report(tmp_path)
    _summary("--no-cache", str(rep))
    assert _exports(nsys) == 1
    assert not (tmp_path / "cache").exists()
    assert sorted(p.name for p in rep.parent.iterdir()) == ["report.nsys-rep"]


def test_a_changed_report_is_exported_again_and_its_old_export_removed(nsys, tmp_path):
    rep = _report(tmp_path)
    _summary(str(rep))
    old = list((tmp_path / "cache" / "exports").iterdir())
    rep.write_bytes(b"the same report, profiled again")
    os.utime(rep, ns=(rep.stat().st_atime_ns, rep.stat().st_mtime_ns + 10**9))
    _summary(str(rep))
    new = list((tmp_path / "cache" / "exports").iterdir())
    assert _exports(nsys) == 2 and len(new) == 1 and new != old


def test_a_folder_of_reports_is_read_through_their_exports(nsys, tmp_path):
    rep = _report(tmp_path)
    got = _summary(str(rep.parent))
    assert got["reports"] == ["report.nsys-rep"] and "skipped" not in got


def test_a_folder_with_the_export_reads_it_and_warns_of_nothing(nsys, tmp_path):
    """A run folder: report.nsys-rep beside its export. The export is read, nsys is not run, and
    the report is a note (the JSON's skipped files, the text's last line), not a warning."""
    rep = _report(tmp_path)
    shutil.copy(SAMPLE, rep.with_suffix(".sqlite"))
    got = _summary(str(rep.parent))
    assert got["reports"] == ["report.sqlite"] and _exports(nsys) == 0
    assert {"file": str(rep), "reason": "its export is read"} in got["skipped"]
    out = tmp_path / "report.html"
    res = CliRunner().invoke(main, ["report", str(rep.parent), "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "<b>Warnings</b>" not in html
    assert "not read (its export is read): " in html


def test_a_glob_over_a_report_and_its_export_reads_the_export(nsys, tmp_path):
    rep = _report(tmp_path)
    shutil.copy(SAMPLE, rep.with_suffix(".sqlite"))
    got = _summary(str(rep.parent / "*"))
    assert got["reports"] == ["report.sqlite"] and _exports(nsys) == 0
    assert got["skipped"] == [{"file": str(rep), "reason": "its export is read"}]


def test_a_report_nsys_cannot_export_is_one_line(nsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT_RC", "1")
    rep = _report(tmp_path)
    res = CliRunner().invoke(main, ["summarize", str(rep)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"nsyscomm: error: {rep}: nsys export failed on it (Exportation error: Cannot read from stream.); "
        "check that it is a whole nsys report"
    ]
    assert sorted(p.name for p in rep.parent.iterdir()) == ["report.nsys-rep"]
    assert not list((tmp_path / "cache" / "exports").iterdir())  # no half export left


def test_without_nsys_the_report_is_refused_with_the_command(tmp_path, monkeypatch):
    monkeypatch.delenv("NSYSCOMM_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert shutil.which("nsys") is None
    rep = _report(tmp_path)
    res = CliRunner().invoke(main, ["summarize", "--no-cache", str(rep)])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"nsyscomm: error: {rep}: ") and line.endswith(
        f"nsys export --type sqlite --output {rep.with_suffix('.sqlite')} {rep}"
    )
    res = CliRunner().invoke(main, ["summarize", "--no-cache", str(rep.parent)])
    assert res.exit_code == 2 and f"nsys export --type sqlite {rep}" in res.output
