"""nsyscomm report: the self-contained HTML page (offline, escaped), checked in headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.api import load
from nsyscomm.commands.views import report as report_cmd
from nsyscomm.views import html_report
from tests.conftest import REAL_NSYS, ROOT, SAMPLES, job_inputs, loaded, sample

H100 = REAL_NSYS / "nsys2026.2_2xH100_nccl_window.sqlite"
EVIL = "</script><script>alert(1)</script><img src=x onerror=alert(2)>\"'&"


INPUTS = job_inputs()
_sample = sample


def _any_input() -> Path:
    for name in ("synthetic_fsdp_8rank.sqlite", "synthetic_ddp_4rank.sqlite"):
        if (SAMPLES / name).exists():
            return SAMPLES / name
    if H100.exists():
        return H100
    pytest.skip("no real file and no sample reports yet")


def assert_offline(page: str) -> None:
    """Nothing in the page may load from the network (the CSP also blocks it in a browser)."""
    body = re.sub(r'xmlns="http://www\.w3\.org/2000/svg"', "", page)
    assert not re.search(r'(?i)\b(src|href|action|poster|data)\s*=\s*["\']?\s*(https?:)?//', body)
    assert not re.search(r"(?i)url\(\s*['\"]?\s*(https?:)?//", body)
    assert not re.search(r"(?i)@import", body)
    assert "default-src 'none'" in html.unescape(page)


@pytest.mark.parametrize("path", INPUTS)
def test_report_sections(path):
    res = loaded(path)
    page = html_report.render(res, peak_busbw=400.0)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert_offline(page)
    for anchor in ("summary", "busbw", "ranks", "skew", "callers"):
        assert f'id="{anchor}"' in page
    assert page.count("<svg") >= 2  # rank bars + heatmap at least
    # the embedded data is the JSON output contract, parseable back
    m = re.search(r'<script type="application/json" id="nsyscomm-data">(.*?)</script>', page, re.S)
    data = json.loads(m.group(1))
    assert data["schema"] == 3 and len(data["ranks"]) == len(res.ranks) and data["peak_busbw_GBps"] == 400.0
    has_bw = res.summarize()["busbw_GBps"].notna().any()
    assert ('class="peak"' in page) == bool(has_bw)
    if not has_bw:
        assert "message sizes are unknown" in page
    assert 'id="exposed"' in page  # every Result has the overlap analysis (empty without GPU calls)


def test_exposed_section_from_result_overlap():
    """Result.overlap's shape: per rank and step ('step' rows) and per rank ('rank' rows). The
    step bars show, per step, the rank with the most exposed time; the table the rank rows."""
    import pandas as pd

    assert html_report.exposed_section(None) is None
    ms = 1_000_000
    df = pd.DataFrame(
        {
            "scope": ["step", "step", "step", "step", "rank", "rank"],
            "rank": [0, 1, 0, 1, 0, 1],
            "step": [0, 0, 1, 1, None, None],
            "calls": [2, 2, 2, 2, 4, 4],
            "comm_busy_ns": [4 * ms, 6 * ms, 5 * ms, 5 * ms, 9 * ms, 11 * ms],
            "exposed_ns": [1 * ms, 3 * ms, 2 * ms, 0, 3 * ms, 3 * ms],
        }
    )
    df["exposed_pct"] = 100.0 * df["exposed_ns"] / df["comm_busy_ns"]
    out = html_report.exposed_section(df)
    assert 'aria-label="exposed communication per step"' in out and "<table" in out
    # rank 1's row: 11 ms busy, 3 ms exposed, 27.3 %
    assert "11.000" in out or "11.00" in out, out
    assert "27.3" in out
    empty = html_report.exposed_section(df.iloc[0:0])
    assert "No call whose exposure can be told" in empty


def test_exposed_section_on_every_input():
    res = loaded(_any_input())
    page = html_report.render(res)
    assert 'id="exposed"' in page
    if not res.overlap.empty and (res.overlap["scope"] == "step").any() and res.overlap["step"].notna().any():
        assert 'aria-label="exposed communication per step"' in page


def test_untrusted_text_is_escaped():
    res = load([_any_input()])  # a private copy: its table gets poisoned
    res.con.execute("UPDATE collectives SET caller = ?, host = ?", [EVIL, EVIL])
    res.con.execute(
        "CREATE OR REPLACE TEMP TABLE rank_spans AS SELECT rank, ? AS host, first_ns, last_ns FROM rank_spans", [EVIL]
    )
    res.reports = [EVIL]
    res.warnings = [EVIL]
    page = html_report.render(res, title=EVIL)
    assert EVIL not in page
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count("</script>") == 3  # the page's own: error hook, data, main
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # shown as text
    m = re.search(r'<script type="application/json" id="nsyscomm-data">(.*?)</script>', page, re.S)
    blob = m.group(1)
    assert "<" not in blob and ">" not in blob and "&" not in blob
    assert json.loads(blob)["reports"] == [EVIL]  # and the data round-trips intact


def test_json_for_script():
    s = html_report.json_for_script({"a": "</script><!--&\u2028"})
    assert "<" not in s and ">" not in s and "&" not in s and "\u2028" not in s
    assert json.loads(s) == {"a": "</script><!--&\u2028"}


def test_cli_report(tmp_path):
    path = _any_input()
    out = tmp_path / "sub" / "r.html"
    r = CliRunner().invoke(report_cmd, [str(path), "-o", str(out), "--peak-busbw", "450", "--title", "my job"])
    assert r.exit_code == 0, r.output
    page = out.read_text(encoding="utf-8")
    assert "<title>my job</title>" in page and "peak 450.0 GB/s" in page or "message sizes are unknown" in page
    r = CliRunner().invoke(report_cmd, [str(path), "-o", "-"])
    assert r.exit_code == 0 and "<!DOCTYPE html>" in r.output


def test_cli_report_errors(tmp_path):
    r = CliRunner().invoke(report_cmd, [str(tmp_path / "missing.sqlite"), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and r.output.startswith("nsyscomm: error:") and r.output.count("\n") == 1
    r = CliRunner().invoke(report_cmd, [str(_any_input()), "--peak-busbw", "-3"])
    assert r.exit_code == 2


# ------------------------------------------------------------------ headless Chromium


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


CHROMIUM = _chromium()
needs_browser = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium on PATH: install it to run the browser checks (Debian: apt-get install -y "
    "--no-install-recommends chromium)",
)


def artifacts_dir() -> Path:
    """Kept after the run: $NSYSCOMM_ARTIFACTS, else tests/artifacts/ (ignored by git via its own .gitignore)."""
    d = Path(os.environ.get("NSYSCOMM_ARTIFACTS") or ROOT / "tests" / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    gi = d / ".gitignore"
    if d == ROOT / "tests" / "artifacts" and not gi.exists():
        gi.write_text("*\n")
    return d


def browse(html_file: Path, screenshot: Path | None = None) -> tuple[str, str]:
    """Load the page in headless Chromium: (DOM after scripts ran, browser stderr)."""
    with tempfile.TemporaryDirectory(prefix="nsyscomm-chromium-") as profile:
        cmd = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
            "--window-size=1280,2400",
            "--dump-dom",
        ]
        if screenshot is not None:
            cmd.append(f"--screenshot={screenshot}")
        cmd.append(html_file.resolve().as_uri())
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout, p.stderr


def png_pixels(path: Path) -> tuple[int, int, set]:
    """A tiny PNG decoder (8-bit RGB/RGBA, non-interlaced: what Chromium writes): width, height, colours."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    colors = set()
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:  # every 4th row is plenty to tell a drawn page from a blank one
            colors.update(bytes(line[x : x + 3]) for x in range(0, stride, bpp * 2))
        prev = line
    return w, h, colors


def _errors(dom: str) -> str:
    m = re.search(r'<html[^>]*\bdata-errors="([^"]*)"', dom)
    assert m, "the page's error hook did not run"
    return m.group(1)


@needs_browser
def test_report_in_headless_chromium(tmp_path):
    path = _any_input()
    page = tmp_path / "report.html"
    r = CliRunner().invoke(report_cmd, [str(path), "-o", str(page), "--peak-busbw", "100"])
    assert r.exit_code == 0, r.output
    shot = artifacts_dir() / "report.png"
    shot.unlink(missing_ok=True)
    dom, stderr = browse(page, shot)
    assert _errors(dom) == ""
    assert re.search(r'<html[^>]*\bdata-ready="1"', dom), "the page's script did not finish"
    console = [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console  # nothing logged to the console (errors, CSP violations, warnings)
    w, h, colors = png_pixels(shot)
    assert (w, h) == (1280, 2400)
    assert len(colors) > 20, f"screenshot looks blank ({len(colors)} colours)"
    print(f"\nscreenshot: {shot}")


@needs_browser
def test_browser_check_catches_errors_and_network(tmp_path):
    """Negative control: the hook sees script errors and the CSP blocks (and reports) network loads."""
    page = html_report.render(loaded(_any_input()))
    bad = page.replace("</body>", '<img src="http://example.invalid/x.png"><script>nope();</script></body>')
    f = tmp_path / "bad.html"
    f.write_text(bad, encoding="utf-8")
    dom, stderr = browse(f)
    errs = _errors(dom)
    assert "nope" in errs and "example.invalid" in errs
    assert any(":CONSOLE" in ln for ln in stderr.splitlines())
