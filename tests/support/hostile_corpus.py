"""The hostile corpus, built by construction in a folder: broken or crafted reports and traces an
attacker or a damaged export could hand to nsyscomm. tests/hostile/test_hostile_corpus.py runs every
command over it; the regression tests of tests/hostile/test_reliability.py use single families.

Each case is (input path, expectation): ERROR (exit 2, one line naming the file), OK (exit 0) or
ANY (either, the same for every format). The expectation is what a user must get, decided here
from how the case was built, never from nsyscomm's output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import ROOT, SAMPLES

DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"
GLOO = SAMPLES / "synthetic_gloo_cpu.sqlite"

ERROR, OK, ANY = "error", "ok", "any"

# Text a crafted report puts in names: clear screen, window title, cursor up + erase line, a
# bell, NUL, a C1 control (CSI as one code point) and a bidi override.
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b[1A\x1b[2K\x00\x9b31m\u202e"


def sql(path: Path, *statements: str, params: tuple = ()) -> Path:
    """Run statements on the SQLite file at path: params for a statement with as many `?`, else
    each `?` takes the first of them."""
    con = sqlite3.connect(path)
    for s in statements:
        n = s.count("?")
        con.execute(s, params if len(params) == n else params[:1] * n)
    con.commit()
    con.close()
    return path


def copy(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    return dst


def renamed_messages(path: Path, old: str, new: str) -> Path:
    """Replace old by new in every wrapper message (nsyscomm:<op>|...) of a copy of the DDP sample."""
    return sql(
        copy(DDP, path),
        "UPDATE StringIds SET value = replace(value, ?, ?) WHERE value LIKE 'nsyscomm:%'",
        params=(old, new),
    )


# ---------------------------------------------------------------------------- SQLite families


def recursive_view(path: Path, table: str = "NVTX_EVENTS") -> Path:
    """table replaced by a view over an endless recursive query (reading it never finishes)."""
    return sql(
        copy(DDP, path),
        f'ALTER TABLE "{table}" RENAME TO "{table}_real"',
        f'CREATE VIEW "{table}" AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) '
        f'SELECT t.* FROM c, "{table}_real" t',
    )


def journal_mode(path: Path, mode: str) -> Path:
    """A copy of the gloo sample in SQLite journal mode `mode` (WAL, PERSIST, TRUNCATE, DELETE)."""
    con = sqlite3.connect(copy(GLOO, path))
    con.execute(f"PRAGMA journal_mode={mode}")
    con.execute("CREATE TABLE IF NOT EXISTS zz_touch (a)")  # a write, so that the mode is in use
    con.commit()
    con.close()
    for extra in ("-wal", "-shm", "-journal"):  # a clean close leaves none; make sure
        Path(f"{path}{extra}").unlink(missing_ok=True)
    return path


def hot_journal(path: Path) -> Path:
    """A rollback-journal report whose writer died mid-transaction: a hot -journal beside it,
    which a reader that may write would roll back into the report."""
    copy(GLOO, path)
    code = (
        "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('PRAGMA cache_size=1'); c.execute('BEGIN'); "
        "c.execute(\"UPDATE StringIds SET value = value || 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'\"); "
        "c.execute('UPDATE NVTX_EVENTS SET start = start + 1'); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert Path(f"{path}-journal").exists()
    return path


def huge_name(path: Path, size: int = 10 << 20) -> Path:
    """One wrapper message whose caller is `size` bytes long."""
    return sql(
        copy(DDP, path),
        "UPDATE StringIds SET value = replace(value, 'caller=train.py:40 main', "
        "'caller=' || ?) WHERE value LIKE 'nsyscomm:broadcast%'",
        params=("x" * size,),
    )


def escapes_everywhere(path: Path) -> Path:
    """Terminal escape sequences in callers, process groups, kernel names and host names."""
    return sql(
        copy(DDP, path),
        "UPDATE StringIds SET value = replace(replace(value, 'caller=train.py:88 train_step', "
        "'caller=' || ? || 'train.py:88'), '|pg=0|', '|pg=0' || ? || '|') WHERE value LIKE 'nsyscomm:%'",
        "UPDATE StringIds SET value = replace(value, 'host=node-a', 'host=node' || ?) "
        "WHERE value LIKE 'nsyscomm.rank%'",
        "UPDATE StringIds SET value = value || ? WHERE value LIKE 'ncclDevKernel%'",
        params=(ESCAPES,),
    )


def formula_names(path: Path) -> Path:
    """Callers and process groups a spreadsheet would run as formulas."""
    return sql(
        copy(DDP, path),
        "UPDATE StringIds SET value = replace(replace(value, 'caller=train.py:88 train_step', "
        "'caller==HYPERLINK(\"http://x.invalid\",\"y\")'), 'caller=train.py:40 main', "
        "'caller=@SUM(1+1)') WHERE value LIKE 'nsyscomm:%'",
        "UPDATE StringIds SET value = replace(value, '|pg=0|', '|pg=+cmd|') WHERE value LIKE 'nsyscomm:%'",
    )


def sqlite_cases(d: Path) -> dict[str, tuple[Path, str]]:
    c: dict[str, tuple[Path, str]] = {}
    c["view_recursive_nvtx"] = (recursive_view(d / "view_nvtx.sqlite"), ERROR)
    c["view_recursive_strings"] = (recursive_view(d / "view_strings.sqlite", "StringIds"), ERROR)
    c["view_recursive_kernels"] = (recursive_view(d / "view_kernels.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL"), ERROR)
    for mode in ("WAL", "PERSIST", "TRUNCATE"):
        sub = d / f"journal_{mode.lower()}"
        sub.mkdir()
        c[f"journal_{mode.lower()}"] = (journal_mode(sub / "r.sqlite", mode), OK)
    sub = d / "hot_journal"
    sub.mkdir()
    c["hot_journal"] = (hot_journal(sub / "r.sqlite"), ANY)
    # negative and absurd message sizes in the wrapper's messages
    c["bytes_negative"] = (renamed_messages(d / "bytes_neg.sqlite", "|bytes=", "|bytes=-"), ERROR)
    c["bytes_absurd"] = (renamed_messages(d / "bytes_absurd.sqlite", "|bytes=", "|bytes=99999999999"), ERROR)
    c["numel_negative"] = (renamed_messages(d / "numel_neg.sqlite", "|numel=", "|numel=-"), ERROR)
    c["gsize_negative"] = (renamed_messages(d / "gsize_neg.sqlite", "|gsize=4", "|gsize=-4"), ERROR)
    c["name_10mb"] = (huge_name(d / "name_10mb.sqlite"), OK)
    c["escapes_in_names"] = (escapes_everywhere(d / "escapes.sqlite"), OK)
    c["formula_names"] = (formula_names(d / "formulas.sqlite"), OK)
    return c


# ---------------------------------------------------------------------------- Kineto families


def kineto_trace(rank: int = 0) -> dict:
    """A small valid PyTorch profiler trace: one all_reduce with its kernel."""
    pid = 4000 + rank
    meta = {
        "Collective name": "allreduce",
        "In msg nelems": 1000,
        "Out msg nelems": 1000,
        "Group size": 2,
        "dtype": "Float",
        "Process Group Name": "0",
        "Process Group Ranks": "[0, 1]",
    }
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": pid,
            "tid": pid,
            "ts": 1000.5,
            "dur": 50.0,
            "args": meta,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "nccl:all_reduce",
            "pid": pid,
            "tid": pid,
            "ts": 1001.0,
            "dur": 40.0,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": pid,
            "tid": pid,
            "ts": 1010.0,
            "dur": 5.0,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "pid": rank,
            "tid": 7,
            "ts": 1020.0,
            "dur": 30.0,
            "args": {"device": rank, "stream": 7, "correlation": 7, **meta},
        },
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": ev,
    }


def _bad_event(field: str, value) -> dict:
    t = kineto_trace()
    t["traceEvents"][1][field] = value
    return t


def kineto_cases(d: Path) -> dict[str, tuple[Path, str]]:
    c: dict[str, tuple[Path, str]] = {}
    texts = {
        "kineto_name_list": json.dumps(_bad_event("name", ["nccl:all_reduce"])),
        "kineto_name_int": json.dumps(_bad_event("name", 12345)),
        "kineto_cat_list": json.dumps(_bad_event("cat", ["user_annotation"])),
        "kineto_args_list": json.dumps(_bad_event("args", [1, 2, 3])),
        "kineto_kernel_args_list": json.dumps(
            {
                **kineto_trace(),
                "traceEvents": [
                    *kineto_trace()["traceEvents"][:3],
                    {**kineto_trace()["traceEvents"][3], "args": ["x"]},
                ],
            }
        ),
        # json.dumps writes NaN and Infinity as the bare words Python's parser accepts
        "kineto_ts_nan": json.dumps(_bad_event("ts", float("nan"))),
        "kineto_ts_infinity": json.dumps(_bad_event("ts", float("inf"))),
        "kineto_dur_infinity": json.dumps(_bad_event("dur", float("-inf"))),
        "kineto_ts_string": json.dumps(_bad_event("ts", "1001.0")),
        "kineto_big_int": json.dumps(_bad_event("ts", 1)).replace('"ts": 1,', '"ts": ' + "9" * 5000 + ",", 1),
        "kineto_rank_list": json.dumps({**kineto_trace(), "distributedInfo": {"rank": [0], "world_size": "x"}}),
    }
    deep = 100_000
    texts["kineto_nested_deep"] = (
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, '
        '"tid": 1, "ts": 1, "dur": 1, "args": ' + "[" * deep + "]" * deep + "}]}"
    )
    for name, text in texts.items():
        p = d / f"{name}.json"
        p.write_text(text)
        # distributedInfo of the wrong types is ignored with a warning (rank from the file order)
        c[name] = (p, ANY if name == "kineto_rank_list" else ERROR)
    return c


# ---------------------------------------------------------------------------- two runs


def two_runs(d: Path) -> tuple[Path, Path]:
    """Two 4-rank runs of the DDP sample on different hosts (node-a and node-b)."""
    a = copy(DDP, d / "run_a.sqlite")
    b = sql(
        copy(DDP, d / "run_b.sqlite"),
        "UPDATE StringIds SET value = replace(value, 'host=node-a', 'host=node-b') WHERE value LIKE 'nsyscomm.rank%'",
    )
    return a, b


def build(d: Path, robustness: bool = True) -> dict[str, tuple[Path, str]]:
    """name -> (input, expectation), every family built in folder d (empty)."""
    d.mkdir(parents=True, exist_ok=True)
    c = {**sqlite_cases(d), **kineto_cases(d)}
    runs = d / "two_runs"
    runs.mkdir()
    two_runs(runs)
    c["two_4rank_runs"] = (runs, ERROR)  # two jobs: refused, naming the clashing ranks
    if robustness:  # the families of tests/hostile/test_robustness.py, with their expectations
        from tests.hostile.test_robustness import ERROR as R_ERROR
        from tests.hostile.test_robustness import build_corpus

        old = d / "robustness"
        old.mkdir()
        for name, (path, expect, _needle) in build_corpus(old).items():
            c[f"robustness_{name}"] = (path, ERROR if expect == R_ERROR else OK if expect in ("ok", "partial") else ANY)
    return c


# ---------------------------------------------------------------------------- running it

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
CASE_TIMEOUT_S = 240  # a case's commands together; past it the case counts as a hang


def commands(inp: Path, out: Path, base: Path) -> list[list[str]]:
    """Every command over one input: summarize in each format, trace, report, gate, baseline."""
    i = str(inp)
    return [["summarize", i, "--format", f] for f in ("text", "markdown", "csv", "json")] + [
        ["summarize", i, "--by", "caller"],
        ["trace", i, "-o", str(out / "t.json")],
        ["report", i, "-o", str(out / "r.html")],
        ["gate", i, "-b", str(base), "--no-step-summary", "--min-calls", "0", "--show", "all"],
        [
            "gate",
            i,
            "-b",
            str(base),
            "--no-step-summary",
            "--min-calls",
            "0",
            "--format",
            "markdown",
            "--junit",
            str(out / "junit.xml"),
        ],
        ["baseline", i, "-o", str(out / "b.json")],
    ]


def snapshot(d: Path) -> dict:
    """Every file under d (bytes hash, size, mtime) and every folder's listing."""
    out = {}
    for p in sorted([d, *d.rglob("*")]):
        st = p.stat()
        if p.is_file():
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
        else:
            out[str(p)] = tuple(sorted(x.name for x in p.iterdir()))
    return out


def run_case(name: str, inp: Path, expect: str, base: Path, out: Path) -> dict:
    """Every command over one case, in this process (click's CliRunner): what went wrong."""
    from click.testing import CliRunner

    from nsyscomm.cli import main

    out.mkdir(parents=True, exist_ok=True)
    watched = inp if inp.is_dir() else inp.parent
    before = snapshot(watched)
    res = {
        "case": name,
        "runs": 0,
        "one_line_errors": 0,
        "tracebacks": [],
        "bad_exit": [],
        "bad_error": [],
        "beside": [],
        "injections": [],
        "expectation": [],
        "junit": [],
    }
    codes = []
    for args in commands(inp, out, base):
        r = CliRunner().invoke(main, args)
        res["runs"] += 1
        what = " ".join(args[:1] + args[2:4])
        text = r.output
        if "Traceback" in text or "internal error" in text or (r.exception and not isinstance(r.exception, SystemExit)):
            res["tracebacks"].append(what)
        allowed = (0, 1, 2) if args[0] == "gate" else (0, 2)
        if r.exit_code not in allowed:
            res["bad_exit"].append(f"{what}: {r.exit_code}")
        if r.exit_code == 2:
            lines = [x for x in r.stderr.splitlines() if x.strip()]
            names = {inp.name} | ({p.name for p in inp.iterdir()} if inp.is_dir() else set())
            if len(lines) == 1 and lines[0].startswith("nsyscomm: error:") and any(n in lines[0] for n in names):
                res["one_line_errors"] += 1
            else:
                res["bad_error"].append(f"{what}: {r.stderr[:300]!r}")
        if RAW_CONTROL.search(r.stdout) or RAW_CONTROL.search(r.stderr):
            res["injections"].append(what)
        if "--junit" in args and r.exit_code in (0, 1):
            try:
                ET.parse(out / "junit.xml")
            except ET.ParseError as e:
                res["junit"].append(str(e))
        after = snapshot(watched)
        if after != before:
            res["beside"].append(f"{what}: {sorted(set(after.items()) ^ set(before.items()))[:3]}")
            before = after
        if args[0] == "summarize":
            codes.append(r.exit_code)
    if expect == ERROR and set(codes) != {2}:
        res["expectation"].append(f"expected exit 2, summarize gave {codes}")
    elif expect == OK and set(codes) != {0}:
        res["expectation"].append(f"expected exit 0, summarize gave {codes}")
    elif expect == ANY and len(set(codes)) != 1:
        res["expectation"].append(f"formats disagree: {codes}")
    return res


def _run_one(args: tuple) -> dict:
    """One case in its own process, so that a hang is caught by a timeout and killed."""
    name, inp, expect, base, out, env = args
    code = (
        "import json, sys; from pathlib import Path; from tests.support.hostile_corpus import run_case; "
        "print(json.dumps(run_case(sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), "
        "Path(sys.argv[5]))))"
    )
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, name, str(inp), expect, str(base), str(out)],
            capture_output=True,
            text=True,
            timeout=CASE_TIMEOUT_S,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"case": name, "runs": 0, "hang": True}
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"case": name, "runs": 0, "tracebacks": [f"runner died: {p.stderr[-500:]}"]}


TOTALS = (
    "cases",
    "command runs",
    "exit-2 one-liners",
    "tracebacks",
    "hangs",
    "files written beside inputs",
    "injections",
    "other failures",
)


def run_corpus(d: Path, workers: int = 2, robustness: bool = True) -> tuple[dict, list[dict]]:
    """Build the corpus in folder d and run every command over every case: (totals, per case)."""
    from concurrent.futures import ThreadPoolExecutor

    from click.testing import CliRunner

    from nsyscomm.cli import main

    cases = build(d / "in", robustness=robustness)
    base = d / "baseline.json"
    env = {
        **os.environ,
        "NSYSCOMM_CACHE_DIR": str(d / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    r = CliRunner().invoke(main, ["baseline", str(DDP), "-o", str(base)])
    assert r.exit_code == 0, r.output
    jobs = [(n, p, e, base, d / "out" / n, env) for n, (p, e) in cases.items()]
    with ThreadPoolExecutor(workers) as pool:
        per = list(pool.map(_run_one, jobs))
    totals = dict.fromkeys(TOTALS, 0)
    totals["cases"] = len(per)
    for c in per:
        totals["command runs"] += c.get("runs", 0)
        totals["exit-2 one-liners"] += c.get("one_line_errors", 0)
        totals["tracebacks"] += len(c.get("tracebacks", []))
        totals["hangs"] += bool(c.get("hang"))
        totals["files written beside inputs"] += len(c.get("beside", []))
        totals["injections"] += len(c.get("injections", []))
        totals["other failures"] += sum(len(c.get(k, [])) for k in ("bad_exit", "bad_error", "expectation", "junit"))
    return totals, per


if __name__ == "__main__":  # python -m tests.support.hostile_corpus: the totals the README quotes
    import tempfile
    import time

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        totals, per = run_corpus(Path(tmp))
    for c in per:
        bad = {k: v for k, v in c.items() if v and k not in ("case", "runs", "one_line_errors")}
        if bad:
            print(c["case"], bad)
    print(", ".join(f"{k}: {v}" for k, v in totals.items()) + f" ({time.monotonic() - t0:.0f} s)")
