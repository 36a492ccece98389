"""nsys's Arrow exports (nsyscomm.ingest.nsys.arrow) give the same JSON as the SQLite export.

Two kinds of ground truth: a real nsys 2022.4 report of a scripted 2-rank gloo job, exported
both ways by nsys itself (needs nsys); and every sample, real export and a generated report,
rewritten into the Arrow layouts by tests/support/arrow_convert.py (every row of every table).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from nsyscomm.ingest.nsys import arrow as nsys_arrow
from tests.conftest import DONE_ENV, ROOT, SAMPLES, done_ranks, job_did_its_work, real_nsys_files
from tests.support.arrow_convert import convert

JOB = ROOT / "benchmarks" / "gloo_job.py"


def _json(*inputs) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["summarize", "--no-cache", "--format", "json", *map(str, inputs)])
    return r.exit_code, r.output


def _cases():
    out = []
    for p in sorted(SAMPLES.iterdir()) if SAMPLES.exists() else []:
        if p.suffix == ".sqlite" or (p.is_dir() and any(p.glob("*.sqlite"))):
            out.append(pytest.param(p, id=p.stem))
    for p in real_nsys_files():
        out.append(pytest.param(p, id=p.stem))
    out.append(pytest.param("generated", id="generated-ddp-seed11"))
    return out


def _same_names(src: Path, dst: Path, layout: str) -> Path:
    """src converted at dst under the same file names (so that the JSON's report names agree)."""
    if src.is_dir():
        dst.mkdir()
        for f in sorted(src.glob("*.sqlite")):
            convert(f, dst / f.name, layout)
        return dst
    return convert(src, dst / src.name, layout)


@pytest.mark.parametrize("src", _cases())
def test_arrow_export_json_equals_sqlite(src, tmp_path):
    if src == "generated":
        from nsyscomm import synth

        synth.generate("synthetic_ddp_4rank", tmp_path / "gen", seed=11)
        src = tmp_path / "gen" / "synthetic_ddp_4rank.sqlite"
    (tmp_path / "a").mkdir()
    arrow = _same_names(src, tmp_path / "a" / src.name if src.is_dir() else tmp_path / "a", "arrow")
    want = _json(src)
    got = _json(arrow)
    assert want[0] == 0, want[1]
    assert got == want


@pytest.mark.parametrize("layout", ["arrowdir", "parquetdir"])
@pytest.mark.parametrize("name", ["synthetic_ddp_4rank.sqlite", "synthetic_gloo_cpu.sqlite"])
def test_per_table_folders(layout, name, tmp_path):
    src = SAMPLES / name
    if not src.exists():
        pytest.skip(f"sample {name} not present")
    folder = convert(src, tmp_path / name, layout)  # a folder named like the report
    assert nsys_arrow.is_export(folder)
    assert _json(folder) == _json(src)


def test_folder_of_arrow_exports_is_discovered(tmp_path):
    src = SAMPLES / "synthetic_nowrapper_2node"
    if not src.exists():
        pytest.skip("sample folder not present")
    for f in sorted(src.glob("*.sqlite")):
        convert(f, tmp_path / f"{f.stem}.arrow")
    code, out = _json(tmp_path)
    assert code == 0, out
    want = json.loads(_json(src)[1])
    got = json.loads(out)
    assert got["reports"] == [r.replace(".sqlite", ".arrow") for r in want["reports"]]
    assert got["summary"] == want["summary"] and got["ranks"] == want["ranks"]


def test_not_utf8_text_is_replaced_and_said(tmp_path):
    src = SAMPLES / "synthetic_gloo_cpu.sqlite"
    if not src.exists():
        pytest.skip("sample not present")
    dst = convert(src, tmp_path / "r.arrow")
    # one more StringIds stream would be a second table: instead append a bad string to it
    arrow, _ = nsys_arrow.read_tables(dst, wanted=("StringIds",))
    s = arrow["StringIds"]
    bad = pa.table(
        {"id": pa.array([10**6], pa.int64()), "value": pa.array([b"\xff\xfebad"], pa.binary())}, schema=s.schema
    )
    data = dst.read_bytes()
    first_len = _first_stream_len(data)
    out_path = tmp_path / "bad.arrow"  # a new file: dst is memory-mapped by the tables read above
    with open(out_path, "wb") as f:
        with ipc.new_stream(f, s.schema) as w:
            w.write_table(pa.concat_tables([s, bad]))
        f.write(data[first_len:])
    code, out = _json(out_path)
    assert code == 0, out
    assert any("not valid UTF-8" in w for w in json.loads(out)["warnings"])


def _first_stream_len(data: bytes) -> int:
    buf = pa.BufferReader(data)
    reader = ipc.open_stream(buf)
    for _ in reader:
        pass
    return buf.tell()


def test_truncated_arrow_export_is_one_line_exit_2(tmp_path):
    src = SAMPLES / "synthetic_gloo_cpu.sqlite"
    if not src.exists():
        pytest.skip("sample not present")
    dst = convert(src, tmp_path / "r.arrow")
    data = dst.read_bytes()
    dst.write_bytes(data[: len(data) * 2 // 3])
    r = CliRunner().invoke(main, ["summarize", "--no-cache", str(dst)])
    assert r.exit_code == 2
    assert r.output.startswith(f"nsyscomm: error: {dst}") and "nsys export --type arrow" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_other_arrow_streams_are_not_nsys_exports(tmp_path):
    p = tmp_path / "x.arrow"
    t = pa.table({"a": [1, 2]})
    with open(p, "wb") as f, ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    assert not nsys_arrow.is_export(p)
    r = CliRunner().invoke(main, ["summarize", "--no-cache", str(p)])
    assert r.exit_code == 2 and "Traceback" not in r.output


# --------------------------------------------------------------- a real report, exported by nsys

needs_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not on PATH")
CALLS = 60


def _torch_ok() -> bool:
    try:
        from importlib.metadata import version

        import torch  # noqa: F401

        return tuple(int(x) for x in version("nvtx").split(".")[:3]) <= (0, 2, 11)
    except Exception:
        return False


def _profile(out: Path, **kw):
    """The gloo job under the launcher; the result and how many ranks recorded their end."""
    from nsyscomm.capture.launcher import run

    if not _torch_ok():
        pytest.skip("needs torch and nvtx <= 0.2.11 (nsys 2022.4 records NVTX ranges only from those)")
    done = out.parent / f"{out.name}.done"
    done.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(DONE_ENV, str(done))
        res = _launch(run, out, **kw)
    return res, done_ranks(done)


def _launch(run, out: Path, **kw):
    return run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(JOB),
            "--calls",
            str(CALLS),
            "--bytes",
            "4096",
        ],
        output=str(out),
        **kw,
    )


@pytest.fixture(scope="module")
def real_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("arrow_real")
    res, done = _profile(base / "out", export="sqlite")
    assert job_did_its_work(res.exit_code, res.warnings, done, 2) and len(res.reports) == 1, res.warnings
    return res


@needs_nsys
def test_real_report_arrow_equals_sqlite(real_job, tmp_path):
    sq = real_job.reports[0]
    rep = sq.with_suffix(".nsys-rep")
    arrow = tmp_path / "report.sqlite"  # the same name: the JSON names its reports
    subprocess.run(
        ["nsys", "export", "--type", "arrow", "-f", "true", "-o", str(arrow), str(rep)], check=True, capture_output=True
    )
    assert nsys_arrow.is_export(arrow)
    want, got = _json(sq), _json(arrow)
    assert want[0] == 0, want[1]
    assert got == want
    doc = json.loads(got[1])
    calls = {r["op"]: r["calls"] for r in doc["summary"]}
    assert calls == {"all_reduce": 2 * CALLS, "broadcast": 2 * math.ceil(CALLS / 10), "barrier": 4}


@needs_nsys
def test_run_logs_each_stage(real_job):
    lines = (real_job.output_dir / "nsyscomm-run.log").read_text().splitlines()
    stages = [line.split()[1] for line in lines]
    assert stages[0] == "job" and "export" in stages
    assert all(line.endswith(" ok") for line in lines if line.split()[1] in ("import", "export"))
    assert any("report.sqlite" in line for line in lines if line.split()[1] == "export")


@needs_nsys
def test_light_preset_completes_and_summarizes(tmp_path):
    res, done = _profile(tmp_path / "out", export="arrow", preset="light")
    assert job_did_its_work(res.exit_code, res.warnings, done, 2) and [p.suffix for p in res.reports] == [".arrow"], (
        res.warnings
    )
    cmd = (res.output_dir / "nsys-command.txt").read_text()
    assert "--trace=nvtx " in cmd and "osrt" not in cmd
    code, out = _json(*res.reports)
    assert code == 0, out
    calls = {r["op"]: r["calls"] for r in json.loads(out)["summary"]}
    assert calls == {"all_reduce": 2 * CALLS, "broadcast": 2 * math.ceil(CALLS / 10), "barrier": 4}


@pytest.mark.parametrize("src", [p for p in _cases() if p.values[0] != "generated" and not Path(p.values[0]).is_dir()])
def test_include_env_reads_arrow_exports_alike(src, tmp_path):
    from nsyscomm.ingest.nsys import environment

    arrow = convert(src, tmp_path / "r.arrow")
    assert environment.read(arrow) == environment.read(src)
