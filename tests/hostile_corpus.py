"""The hostile corpus of issue 26, built by construction in a folder: broken or crafted reports
and traces an attacker or a damaged export could hand to nsyscomm. tests/test_hostile_corpus.py
runs every command over it; the regression tests of issue 26 use single families.

Each case is (input path, expectation): ERROR (exit 2, one line naming the file), OK (exit 0) or
ANY (either, the same for every format). The expectation is what a user must get, decided here
from how the case was built, never from nsyscomm's output.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.conftest import SAMPLES

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
        c[name] = (p, ERROR)
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
    c = {**sqlite_cases(d), **kineto_cases(d)}
    runs = d / "two_runs"
    runs.mkdir()
    two_runs(runs)
    c["two_4rank_runs"] = (runs, OK)
    if robustness:  # the families of tests/test_robustness.py (issue 11), with their expectations
        from tests.test_robustness import ERROR as R_ERROR
        from tests.test_robustness import build_corpus

        old = d / "robustness"
        old.mkdir()
        for name, (path, expect, _needle) in build_corpus(old).items():
            c[f"robustness_{name}"] = (path, ERROR if expect == R_ERROR else OK if expect in ("ok", "partial") else ANY)
    return c
