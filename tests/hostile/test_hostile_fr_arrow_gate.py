"""Hostile inputs on Flight Recorder dumps, nsys Arrow exports and gate baselines
(tests/support/hostile_fr_arrow_gate.py): every case ends as its construction says, bad input in one line
naming the file (exit 2), never an internal error, a traceback, a hang, a pass of a gate over
input it cannot compare, a file written beside the input or a modified input; the pickles built
to blow up run in a process of their own under a memory cap. `python -m
tests.hostile.test_hostile_fr_arrow_gate` prints the totals the README quotes."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import hostile_fr_arrow_gate as H

HEAVY_TIMEOUT_S = 120  # past it a case counts as a hang
MEMORY_CAP = 3 << 30  # address space of a heavy case's process: past it the case fails


def snapshot(d: Path) -> dict:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir" for p in sorted([d, *d.rglob("*")])
    }


def _in_process(args: list[str]) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from nsyscomm.cli import main

    r = CliRunner().invoke(main, args)
    if r.exception and not isinstance(r.exception, SystemExit):
        return 3, r.stdout, f"{type(r.exception).__name__}: {r.exception}"
    return r.exit_code, r.stdout, r.stderr


_CHILD = "import sys; from nsyscomm.cli import entry; sys.argv[0] = 'nsyscomm'; entry()"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _in_child(args: list[str], env: dict) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of the command in a process of its own; None: it hung."""
    try:
        p = subprocess.run(
            [sys.executable, "-c", _CHILD, *args],
            capture_output=True,
            text=True,
            timeout=HEAVY_TIMEOUT_S,
            env=env,
            cwd=ROOT,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout, p.stderr


def run_case(family: str, name: str, build, folder: Path, env: dict) -> dict:
    """One case: what went wrong (empty lists when nothing did)."""
    folder.mkdir(parents=True)
    args = build(folder)
    before = snapshot(folder)
    code, out, err = _in_child(args, env) if name in H.HEAVY else _in_process(args)
    res: dict = {"case": name, "family": family, "code": code, "problems": []}
    expect = H.EXPECT.get(name, (2,))
    if code is None:
        res["hang"] = True
        res["problems"].append("hang")
        return res
    if code == 3 or "Traceback" in out + err or "internal error" in err:
        res["internal"] = True
        res["problems"].append(f"internal error: {err[-400:]!r}")
    if code not in expect:
        res["problems"].append(f"exit {code}, expected {expect}: {err[-300:]!r}")
        if family == "gate" and code in (0, 1):
            res["gate_pass"] = True
    if code == 2:
        lines = [x for x in err.splitlines() if x.strip()]
        names = {p.name for p in folder.rglob("*")} | {folder.name}
        if len(lines) == 1 and lines[0].startswith("nsyscomm: error:") and any(n in lines[0] for n in names):
            res["one_liner"] = True
        else:
            res["problems"].append(f"not one line naming the file: {err[:300]!r}")
    if family == "flight_recorder" and "not an nsys SQLite export" in err:  # a dump is told its own reason
        res["problems"].append(f"a dump told it is no SQLite export: {err[:200]!r}")
    if name in H.MENTION and H.MENTION[name] not in out + err:
        res["problems"].append(f"output does not name {H.MENTION[name]}: {(out + err)[-300:]!r}")
    if snapshot(folder) != before:
        res["problems"].append("files written beside the input, or the input changed")
    return res


def run_all(tmp: Path, names: set[str] | None = None) -> tuple[dict, list[dict]]:
    env = {
        **os.environ,
        "NSYSCOMM_CACHE_DIR": str(tmp / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    old = os.environ.get("NSYSCOMM_CACHE_DIR")
    os.environ["NSYSCOMM_CACHE_DIR"] = env["NSYSCOMM_CACHE_DIR"]
    try:
        per = [run_case(f, n, b, tmp / "in" / n, env) for f, n, b in H.CASES if names is None or n in names]
    finally:
        if old is None:
            os.environ.pop("NSYSCOMM_CACHE_DIR", None)
        else:
            os.environ["NSYSCOMM_CACHE_DIR"] = old
    totals = {
        "runs": len(per),
        "exit-2 one-liners": sum(bool(c.get("one_liner")) for c in per),
        "internal errors": sum(bool(c.get("internal")) for c in per),
        "hangs": sum(bool(c.get("hang")) for c in per),
        "passes of bad gate input": sum(bool(c.get("gate_pass")) for c in per),
        "other failures": sum(bool(c["problems"]) for c in per),
        # the largest resident set of any heavy case's process (kB on Linux)
        "peak MB of the worst case": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
    }
    return totals, per


def test_hostile_fr_arrow_gate(tmp_path):
    totals, per = run_all(tmp_path)
    print(json.dumps(totals))
    failing = {c["case"]: c["problems"] for c in per if c["problems"]}
    assert not failing, failing
    assert totals["runs"] >= 70 and totals["exit-2 one-liners"] >= totals["runs"] - len(H.EXPECT)
    for family in ("flight_recorder", "arrow", "gate"):
        assert sum(c["family"] == family for c in per) >= 10, family


@pytest.mark.parametrize("name", ["fr_folder_one_refused"])
def test_refused_dump_in_a_folder_is_named(tmp_path, name):
    """The folder's good dumps still read; the refused one is named with its reason."""
    (case,) = [c for c in H.CASES if c[1] == name]
    folder = tmp_path / name
    folder.mkdir()
    code, out, err = _in_process(case[2](folder))
    assert code == 0, err
    assert "nccl_trace_rank_3" in err + out and "pg_config" in err + out


@pytest.mark.parametrize("layout", ["arrowdir_zstd", "parquetdir"])
def test_arrow_decompressed_size_is_bounded(tmp_path, monkeypatch, layout):
    """A table that decompresses past NSYSCOMM_ARROW_MAX_BYTES is refused before (Parquet) or
    as (IPC, batch by batch) it is read; the same export reads under the default limit."""
    import pyarrow.parquet as pq

    out = tmp_path / "export"
    out.mkdir()
    for name, t in H.arrow_tables().items():
        if layout == "parquetdir":
            pq.write_table(t, out / f"{name}.parquet", compression="zstd")
        else:
            opts = H.ipc.IpcWriteOptions(compression="zstd")
            with H.ipc.new_file(str(out / f"{name}.arrow"), t.schema, options=opts) as w:
                w.write_table(t)
    assert _in_process(["summarize", "--no-cache", str(out)])[0] == 0
    monkeypatch.setenv("NSYSCOMM_ARROW_MAX_BYTES", "2000")
    code, _, err = _in_process(["summarize", "--no-cache", str(out)])
    assert code == 2 and "NSYSCOMM_ARROW_MAX_BYTES" in err and len(err.strip().splitlines()) == 1, err


def test_pickle_objects_are_counted(tmp_path, monkeypatch):
    """Past FAST_BYTES a dump's opcodes are counted as they run: refused past
    NSYSCOMM_FR_MAX_OBJECTS, read under it."""
    from nsyscomm.errors import InputError
    from nsyscomm.ingest.flight_recorder import dump as flight_recorder
    from nsyscomm.ingest.flight_recorder import unpickler as fr_pickle

    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(H.pickle.dumps(H.fr_dump(), protocol=2))
    monkeypatch.setattr(fr_pickle, "FAST_BYTES", 0)
    assert len(flight_recorder.load_dump(p)["entries"]) == 3
    monkeypatch.setenv("NSYSCOMM_FR_MAX_OBJECTS", "50")
    p.write_bytes(H.pickle.dumps(H.fr_dump(), protocol=4))  # another file: not the one loaded before
    with pytest.raises(InputError, match="NSYSCOMM_FR_MAX_OBJECTS"):
        flight_recorder.load_dump(p)


if __name__ == "__main__":  # python -m tests.hostile.test_hostile_fr_arrow_gate: the totals
    import tempfile
    import time

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        totals, per = run_all(Path(tmp), set(sys.argv[1:]) or None)
    for c in per:
        print(c["case"], c["code"], c["problems"] or "")
    print(", ".join(f"{k}: {v}" for k, v in totals.items()) + f" ({time.monotonic() - t0:.0f} s)")


class _Code:
    """What a pickle that runs code holds: a call of os.system when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_refused_dump_given_by_name_is_refused_whatever_sits_beside_it(tmp_path):
    """A dump that carries code, named alone while a good dump sits beside it: exit 2 naming it
    (no code run), not a summary of nothing; in a pattern or a folder it is set aside and named."""
    import pickle

    good = H._write_dump(tmp_path, H.fr_dump(), 0)
    marker = tmp_path.parent / f"{tmp_path.name}-ran"
    bad = H._write_dump(tmp_path, pickle.dumps({**H.fr_dump(), "entries": [_Code(marker)]}, protocol=2), 1)
    code, out, err = _in_process(["summarize", str(bad)])
    assert (code, err.count("\n")) == (2, 1), (code, out, err)
    assert bad.name in err and "posix.system" in err
    for args in (["summarize", str(tmp_path / "nccl_trace_rank_*")], ["summarize", str(tmp_path)]):
        code, out, err = _in_process(args)
        assert code == 0 and good.name in out, (args, code, err)
    assert not marker.exists()
