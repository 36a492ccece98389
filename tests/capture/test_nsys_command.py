"""The nsys command lines of ``nsyscomm run`` per nsys version: the presets' profile options, the
export options that keep NVTX payloads, where QdstrmImporter is looked for, and the capture's
growth watch."""

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from nsyscomm.capture import capture_watch, nsys_command, post
from nsyscomm.ingest.limits import HOST_MIN_NS

# `nsys export --help` as two versions print it (trimmed to the options around the payload flag):
# 2022.4 has no payload option, 2025.3 has --include-blobs and --include-json
HELP_2022_4 = """usage: nsys export [<args>] [nsys-rep-file]
	-f, --force-overwrite=
	-l, --lazy=
	-o, --output=
	-q, --quiet=
	--separate-strings=
	-t, --type=
           Possible values are: sqlite, hdf, text, arrow, json, info.
"""
HELP_2025_3 = """usage: nsys export [<args>] [nsys-rep-file]
	-f, --force-overwrite=
	--include-blobs [true|false]
           Controls if NVTX extended payloads are exported as binary data. This
           affects SQLite, Arrow, and Arrow/Parquet directory exports only.
	--include-json [true|false]
	-l, --lazy=
	-t, --type=
           Possible values are: sqlite, hdf, text, arrow, arrowdir, parquetdir, json, info.
	--tables=<pattern>[,<pattern>...]
"""


@pytest.mark.parametrize("export", ["sqlite", "arrow"])
def test_export_keeps_payloads_where_nsys_can(export):
    old = nsys_command.nsys_export_args("nsys", export, "r.out", "r.nsys-rep", HELP_2022_4)
    new = nsys_command.nsys_export_args("nsys", export, "r.out", "r.nsys-rep", HELP_2025_3)
    assert old == ["nsys", "export", "--type", export, "-f", "true", "-o", "r.out", "r.nsys-rep"]
    assert new == [
        "nsys",
        "export",
        "--type",
        export,
        "--include-blobs=true",
        "-f",
        "true",
        "-o",
        "r.out",
        "r.nsys-rep",
    ]
    # blobs alone: jsonText carries the same values, larger
    assert not any("include-json" in a for a in new)


def test_export_flags_follow_the_installed_nsys():
    nsys = shutil.which("nsys")
    if nsys is None:
        pytest.skip("nsys is not installed here")
    text = subprocess.run([nsys, "export", "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = nsys_command.export_payload_flags(nsys_command.export_help(nsys))
    assert flags == (["--include-blobs=true"] if "--include-blobs" in text else [])


def test_export_help_of_a_missing_nsys_is_empty(tmp_path):
    assert nsys_command.export_help(str(tmp_path / "no-nsys")) == ""


def test_default_preset_asks_for_what_the_diagnosis_reads():
    opts = nsys_command.preset_options("default")
    assert f"--osrt-threshold={HOST_MIN_NS}" in opts
    # stacks only for calls of a second or more: the OS-runtime stack dumps filled gigabytes
    (bt,) = [o for o in opts if o.startswith("--osrt-backtrace-threshold=")]
    assert int(bt.split("=")[1]) >= 1_000_000_000
    assert nsys_command.trace_for("default", gpu=True) == "cuda,nvtx,osrt"
    assert nsys_command.trace_for("light", gpu=True) == "cuda,nvtx"
    assert nsys_command.trace_for("full", gpu=False) == "nvtx,osrt"
    assert nsys_command.preset_options("full") == () == nsys_command.preset_options("light")


def test_user_nsys_args_come_after_the_preset():
    args = nsys_command.nsys_profile_args(
        "nsys", "out/report", None, "--osrt-threshold=5000", "nvtx,osrt", nsys_command.preset_options("default")
    )
    assert args.index("--osrt-threshold=5000") > args.index(f"--osrt-threshold={HOST_MIN_NS}")
    assert args[:3] == ["nsys", "profile", "--trace=nvtx,osrt"]


def test_unknown_preset_is_an_input_error():
    from nsyscomm.errors import InputError

    with pytest.raises(InputError, match="unknown preset 'heavy'"):
        nsys_command.preset_options("heavy")


def _exe(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("#!/bin/sh\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


@pytest.mark.parametrize(
    "nsys_rel, importer_rel",
    [
        # Nsight Systems' own install
        ("nsight-systems/2025.3.1/target-linux-x64/nsys", "nsight-systems/2025.3.1/host-linux-x64/QdstrmImporter"),
        # the copy inside Nsight Compute, as found on an H100 machine
        (
            "nsight-compute/2025.3.1/host/target-linux-x64/nsys",
            "nsight-compute/2025.3.1/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter",
        ),
    ],
)
def test_importer_found_beside_nsys(tmp_path, monkeypatch, nsys_rel, importer_rel):
    monkeypatch.delenv("NSYSCOMM_QDSTRM_IMPORTER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    nsys = _exe(tmp_path / nsys_rel)
    importer = _exe(tmp_path / importer_rel)
    assert post.find_importer(str(nsys)) == str(importer)


def test_importer_from_the_environment_comes_first(tmp_path, monkeypatch):
    nsys = _exe(tmp_path / "nsight-systems/2025.3.1/target-linux-x64/nsys")
    _exe(tmp_path / "nsight-systems/2025.3.1/host-linux-x64/QdstrmImporter")
    mine = _exe(tmp_path / "elsewhere/QdstrmImporter")
    monkeypatch.setenv("NSYSCOMM_QDSTRM_IMPORTER", str(mine))
    assert post.find_importer(str(nsys)) == str(mine)


def _poll(watch: capture_watch.CaptureWatch, looks: int) -> None:
    """Look at the capture once a (fake) second."""
    last = (0.0, 0)
    for t in range(1, looks + 1):
        last = watch.poll(float(t), last)


class _Growing:
    """A capture file that grows by a known amount at each look."""

    def __init__(self, path: Path, step: int):
        self.path, self.step, self.n = path, step, 0

    def __call__(self):
        self.n += self.step
        with open(self.path, "ab") as f:
            f.truncate(self.n)
        return [self.path]


def test_capture_watch_warns_once_past_the_limit_with_advice(tmp_path, capsys):
    files = _Growing(tmp_path / "nsys-report-1.qdstrm", 400)
    watch = capture_watch.CaptureWatch(files, "default", show=False, limit=1000)
    _poll(watch, 5)
    assert watch.peak == 2000
    assert watch.warning is not None and "--preset light" in watch.warning and "growing" in watch.warning
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "\n" == err[-1]


def test_capture_watch_is_quiet_below_the_limit_off_a_terminal(tmp_path, capsys):
    files = _Growing(tmp_path / "report.qdstrm", 10)
    watch = capture_watch.CaptureWatch(files, "light", show=False, limit=10_000)
    _poll(watch, 3)
    assert watch.warning is None and capsys.readouterr().err == ""


def test_capture_watch_shows_doublings_on_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(capture_watch, "FIRST_MILESTONE", 100)
    files = _Growing(tmp_path / "report.qdstrm", 150)
    watch = capture_watch.CaptureWatch(files, "full", show=True, limit=10_000)
    _poll(watch, 4)  # 150, 300, 450, 600: past 100, 200, 400
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert len(lines) == 3 and all(ln.startswith("nsyscomm: nsys capture ") for ln in lines)


def test_capture_watch_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("NSYSCOMM_CAPTURE_WARN_MB", "250")
    assert capture_watch.warn_bytes() == 250_000_000
    monkeypatch.setenv("NSYSCOMM_CAPTURE_WARN_MB", "lots")
    assert capture_watch.warn_bytes() == capture_watch.WARN_BYTES


def test_capture_watch_thread_stops(tmp_path):
    watch = capture_watch.CaptureWatch(lambda: [], "default", show=False, interval=0.01).start()
    watch.stop()
    assert watch._thread is not None and not watch._thread.is_alive()


def test_capture_files_are_the_new_ones(tmp_path, monkeypatch):
    from nsyscomm.capture import launcher

    temp = tmp_path / "tmp"
    temp.mkdir()
    old = temp / "nsys-report-old.qdstrm"
    old.write_bytes(b"x")
    monkeypatch.setattr(launcher.tempfile, "gettempdir", lambda: str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))
    before = launcher._temp_reports()
    new = temp / "nsys-report-new.qdstrm"
    new.write_bytes(b"xy")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.nsys-rep").write_bytes(b"xyz")
    got = set(launcher._capture_files(out, before))
    assert new in got and out / "report.nsys-rep" in got and old not in got


def test_a_stray_capture_is_blamed_on_the_disk_only_when_it_is_full(tmp_path, monkeypatch):
    """A capture nsys left in its temporary folder after being stopped was reported as
    "could not write into the output folder (full or not writable?)" on a disk with room."""
    from collections import namedtuple

    from nsyscomm.capture import launcher

    stray = tmp_path / "nsys-report-1.qdstrm"
    stray.write_bytes(b"x" * 1000)
    out = tmp_path / "out"
    out.mkdir()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(launcher.shutil, "disk_usage", lambda p: usage(10**9, 0, 10**9))
    assert launcher._has_room(out, [stray])
    monkeypatch.setattr(launcher.shutil, "disk_usage", lambda p: usage(10**9, 10**9, 10))
    assert not launcher._has_room(out, [stray])
