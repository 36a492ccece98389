"""Privacy: the profiled environment and command line never reach an output unless asked.

nsys exports carry the profiled processes' environment variables and command lines in
StringIds, TARGET_INFO_SYSTEM_ENV, META_DATA_CAPTURE, PROCESSES and ProcessStreams. A fake
secret is planted in all of them (and in a report of the kernel-only kind) and every command
and format is checked: stdout, stderr and every file written.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import SAMPLES

SECRET = "hf_FAKE_SECRET_123"
SECRET_PATH = "/home/secretuser/project"
NEEDLES = (SECRET, "secretuser")


def plant(path: Path) -> None:
    """Add the secret to every place nsys puts the environment and the command line."""
    con = sqlite3.connect(path)
    next_id = con.execute("SELECT coalesce(max(id), 0) + 1 FROM StringIds").fetchone()[0]
    strings = [
        f"HF_TOKEN={SECRET}",
        f"HOME={SECRET_PATH}",
        f"PWD={SECRET_PATH}",
        f"{SECRET_PATH}/venv/bin/python {SECRET_PATH}/train.py --token {SECRET}",
        f"nccl_looking_{SECRET}",
        f"nsyscomm_looking {SECRET_PATH}",
    ]
    con.executemany(
        "INSERT INTO StringIds (id, value) VALUES (?, ?)", [(next_id + i, s) for i, s in enumerate(strings)]
    )
    con.execute(
        "CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT NOT NULL, "
        "name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL)"
    )
    con.executemany(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Local (CLI)', ?, ?, ?)",
        [
            ("Hostname", 1, "node-a"),
            ("CommandLine", 2, f"{SECRET_PATH}/train.py --token {SECRET}"),
            ("Env", 3, f"HF_TOKEN={SECRET}"),
        ],
    )
    con.execute("CREATE TABLE IF NOT EXISTS META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
    con.executemany(
        "INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
        [
            ("COMMAND_LINE", f"python {SECRET_PATH}/train.py --token={SECRET}"),
            ("WORKING_DIR", SECRET_PATH),
            ("ENVIRONMENT", f"HF_TOKEN={SECRET}"),
        ],
    )
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "META_DATA_EXPORT" in tables:
        con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_INPUT', ?)", (f"{SECRET_PATH}/report.nsys-rep",))
    if "PROCESSES" in tables:
        con.execute("UPDATE PROCESSES SET name = ?", (f"{SECRET_PATH}/venv/bin/python",))
    con.execute(
        "CREATE TABLE IF NOT EXISTS ProcessStreams (globalPid INTEGER NOT NULL, filenameId INTEGER NOT NULL, "
        "contentId INTEGER NOT NULL)"
    )
    con.execute("INSERT INTO ProcessStreams VALUES (1, ?, ?)", (next_id + 1, next_id))
    con.commit()
    con.close()


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("privacy")
    out = {}
    for name in ("synthetic_ddp_4rank.sqlite", "synthetic_gloo_cpu.sqlite"):
        dst = d / name
        shutil.copy(SAMPLES / name, dst)
        plant(dst)
        out[name] = dst
    nodes = d / "nowrapper"
    shutil.copytree(SAMPLES / "synthetic_nowrapper_2node", nodes)
    for f in nodes.glob("*.sqlite"):
        plant(f)
    out["nowrapper"] = nodes
    for p in out.values():  # the planting worked
        files = [p] if p.is_file() else sorted(p.glob("*.sqlite"))
        for f in files:
            con = sqlite3.connect(f)
            assert con.execute("SELECT count(*) FROM StringIds WHERE value LIKE ?", (f"%{SECRET}%",)).fetchone()[0]
            con.close()
    return out


def _invoke(args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def _files_under(d: Path) -> dict[str, str]:
    return {str(f): f.read_text(encoding="utf-8", errors="replace") for f in d.rglob("*") if f.is_file()}


def _assert_clean(texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for needle in NEEDLES:
            assert needle not in text, f"{needle!r} leaked into {where}"


@pytest.mark.parametrize("job", ["synthetic_ddp_4rank.sqlite", "synthetic_gloo_cpu.sqlite", "nowrapper"])
def test_no_output_carries_the_environment(planted, tmp_path, job):
    src = planted[job]
    out = tmp_path / "out"
    out.mkdir()
    texts: dict[str, str] = {}
    runs = []
    for fmt in ("text", "markdown", "csv", "json"):
        for by in ("op", "caller"):
            runs.append(("summarize", src, "--format", fmt, "--by", by))
    runs += [
        ("trace", src, "-o", out / "trace.json", "--per-rank", out / "per_rank"),
        ("trace", src, "-o", "-"),
        ("report", src, "-o", out / "report.html"),
        ("report", src, "-o", "-"),
        ("baseline", src, "-o", out / "baseline.json", "--label", "x"),
        ("baseline", src),
    ]
    for args in runs:
        r = _invoke(args)
        assert r.exit_code == 0, (args, r.output)
        texts[" ".join(map(str, args))] = r.output
    (out / "summary.json").write_text(_invoke(("summarize", src, "--format", "json")).stdout)
    for fmt in ("text", "markdown", "json"):
        r = _invoke(
            (
                "gate",
                src,
                "-b",
                out / "baseline.json",
                "--format",
                fmt,
                "--show",
                "all",
                "--junit",
                out / f"junit-{fmt}.xml",
                "--no-step-summary",
            )
        )
        assert r.exit_code in (0, 1), r.output
        texts[f"gate {fmt}"] = r.output
        r = _invoke(
            (
                "gate",
                out / "summary.json",
                "-b",
                src,
                "--format",
                fmt,
                "--show",
                "all",
                "-o",
                out / f"gate.{fmt}",
                "--no-step-summary",
            )
        )
        assert r.exit_code in (0, 1), r.output
    texts.update(_files_under(out))
    assert len(texts) > 20
    _assert_clean(texts)


def test_launcher_summary_has_no_environment(planted, tmp_path):
    """`nsyscomm run` prints the same summary as summarize: the Result it renders is env-free."""
    from nsyscomm.api import load
    from nsyscomm.views.json_out import document

    doc = json.dumps(document(load([planted["synthetic_ddp_4rank.sqlite"]])))
    assert SECRET not in doc and "secretuser" not in doc


def test_environment_reader_finds_what_was_planted(planted):
    from nsyscomm.ingest.nsys import environment

    env = environment.read(planted["synthetic_ddp_4rank.sqlite"])
    assert f"HF_TOKEN={SECRET}" in env["variables"]
    assert env["system"]["CommandLine"].endswith(f"--token {SECRET}")
    assert env["capture"]["WORKING_DIR"] == SECRET_PATH
    assert all(p["name"].startswith(SECRET_PATH) for p in env["processes"])
    assert environment.read(SAMPLES / "synthetic_ddp_4rank.truth.json") == {}


def _include_env_wired() -> bool:
    from nsyscomm.cli import summarize

    return any("--include-env" in p.opts for p in summarize.params)


@pytest.mark.skipif(not _include_env_wired(), reason="summarize --include-env is not wired into the CLI yet")
def test_include_env_adds_the_environment_only_when_asked(planted):
    src = planted["synthetic_ddp_4rank.sqlite"]
    plain = json.loads(_invoke(("summarize", src, "--format", "json")).stdout)
    assert "environment" not in plain
    r = _invoke(("summarize", src, "--format", "json", "--include-env"))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    env = next(iter(doc["environment"].values()))
    assert f"HF_TOKEN={SECRET}" in env["variables"]
    text = _invoke(("summarize", src, "--include-env")).stdout
    assert SECRET in text and "Environment" in text
