"""Hostile inputs of the newer formats: PyTorch Flight Recorder dumps, nsys Arrow exports and gate
baselines, built by construction (nothing vendored). tests/hostile/test_hostile_fr_arrow_gate.py runs them.

CASES lists (family, name, builder): builder(folder) writes the case's files into an empty folder
and returns the command line (without "nsyscomm"). EXPECT gives a case's allowed exit statuses
when it is not (2,) (bad input: one line naming the file), MENTION a text its output must hold,
HEAVY the cases run in a process of their own under a memory cap (pickles built to blow up).
The expectations come from how a case was built, never from nsyscomm's output.
"""

from __future__ import annotations

import copy
import json
import pickle
import struct
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from tests.conftest import SAMPLES

DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"

# ---------------------------------------------------------------------------- Flight Recorder


def fr_entry(seq: int = 1, **kw) -> dict:
    """One all_reduce of a dump, as torch 2.9's Flight Recorder pickles it (FORMATS.md section 2)."""
    e = {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "thread_name": "python3",
        "thread_id": "140000",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1_758_610_505_592_849_034 + seq * 1_000_000,
        "duration_ms": 0.5,
        "input_sizes": [[1024, 1024]],
        "input_dtypes": ["Float"],
        "output_sizes": [[1024, 1024]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    e.update(kw)
    return e


def fr_dump(entries: list | None = None, ranks: str = "[0, 1]", **top) -> dict:
    d = {
        "version": "2.9",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "nccl_version": "2.27.3",
        "pg_status": {
            "0": {"last_enqueued_collective": 3, "last_started_collective": -1, "last_completed_collective": 3}
        },
        "entries": entries if entries is not None else [fr_entry(s) for s in (1, 2, 3)],
    }
    d.update(top)
    return d


def _write_dump(folder: Path, d: dict | bytes, rank: int = 0) -> Path:
    p = folder / f"nccl_trace_rank_{rank}"
    p.write_bytes(d if isinstance(d, bytes) else pickle.dumps(d, protocol=2))  # torch's C++ pickler: protocol 2
    return p


def _lone(d: Callable[[], dict | bytes]) -> Callable[[Path], list[str]]:
    """A builder: the dump alone in its folder, given by its file name (a lone dump)."""

    def build(folder: Path) -> list[str]:
        return ["summarize", str(_write_dump(folder, d()))]

    return build


def _entry_case(**kw) -> Callable[[Path], list[str]]:
    return _lone(lambda: fr_dump([fr_entry(1), fr_entry(2, **kw)]))


def _frame_bytes(body: bytes) -> bytes:
    """A protocol-2 pickle of {"version": "2.9", "pg_config": {}, "entries": <body>}."""

    def s(text: str) -> bytes:
        b = text.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    return b"\x80\x02}(" + s("version") + s("2.9") + s("pg_config") + b"}" + s("entries") + body + b"u."


def deep_entries(depth: int = 200_000) -> bytes:
    """entries nested `depth` lists deep: [[[[...]]]] (pickle.dumps itself cannot write it)."""
    return _frame_bytes(b"]" * depth + b"a" * (depth - 1))


def many_references(n: int = 20_000_000) -> bytes:
    """entries: n references to one entry (2 bytes each: a 40 MB file for 20M)."""
    one = pickle.dumps(fr_entry(1), protocol=2)[2:-1]  # the entry's opcodes, no PROTO, no STOP
    return _frame_bytes(b"](" + one + b"q\xff" + b"h\xff" * (n - 1) + b"e")


def many_dicts(n: int = 30_000_000) -> bytes:
    """entries: n empty dicts, one byte each, made at 60+ bytes each in memory."""
    return _frame_bytes(b"](" + b"}" * n + b"e")


def fr_folder_one_refused(folder: Path) -> list[str]:
    """Three good dumps and one whose pg_config is a list: the folder reads, the bad one is named."""
    for r in range(3):
        _write_dump(folder, fr_dump(ranks="[0, 1, 2, 3]"), r)
    _write_dump(folder, fr_dump(pg_config=["0"]), 3)
    return ["summarize", str(folder)]


def fr_folder_all_refused(folder: Path) -> list[str]:
    for r in range(2):
        _write_dump(folder, fr_dump(pg_status=[1, 2]), r)
    return ["summarize", str(folder)]


def fr_ranks_200k(folder: Path) -> list[str]:
    """A default group of 200k ranks, 2000 calls on it: each call must not copy the list."""
    ranks = "[" + ", ".join(map(str, range(200_000))) + "]"
    return ["summarize", str(_write_dump(folder, fr_dump([fr_entry(s) for s in range(1, 2001)], ranks=ranks)))]


FR_CASES: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    ("flight_recorder", "fr_pg_config_list", _lone(lambda: fr_dump(pg_config=[{"name": "0", "ranks": "[0]"}]))),
    ("flight_recorder", "fr_pg_config_str", _lone(lambda: fr_dump(pg_config="0: [0, 1]"))),
    ("flight_recorder", "fr_pg_status_list", _lone(lambda: fr_dump(pg_status=[{"last_completed_collective": 1}]))),
    (
        "flight_recorder",
        "fr_pg_status_done_str",
        _lone(lambda: fr_dump(pg_status={"0": {"last_completed_collective": "3"}})),
    ),
    ("flight_recorder", "fr_ranks_dict", _lone(lambda: fr_dump(ranks={"a": 1}))),  # type: ignore[arg-type]
    ("flight_recorder", "fr_ranks_code", _lone(lambda: fr_dump(ranks="__import__('os').system('true')"))),
    ("flight_recorder", "fr_entries_dict", _lone(lambda: fr_dump(entries={"0": fr_entry()}))),  # type: ignore[arg-type]
    ("flight_recorder", "fr_entry_int", _lone(lambda: fr_dump([fr_entry(1), 7]))),
    ("flight_recorder", "fr_process_group_int", _entry_case(process_group=5)),
    ("flight_recorder", "fr_process_group_nested", _entry_case(process_group=(["0"], "x"))),
    ("flight_recorder", "fr_input_sizes_str", _entry_case(input_sizes="[[1024, 1024]]")),
    ("flight_recorder", "fr_input_sizes_float", _entry_case(input_sizes=[[1024.5]])),
    ("flight_recorder", "fr_input_sizes_huge", _entry_case(input_sizes=[[1 << 40, 1 << 40]])),
    ("flight_recorder", "fr_input_dtypes_int", _entry_case(input_dtypes=5)),
    ("flight_recorder", "fr_output_dtypes_nested", _entry_case(output_dtypes=[["Float"]])),
    ("flight_recorder", "fr_seq_str", _entry_case(collective_seq_id="2")),
    ("flight_recorder", "fr_seq_huge", _entry_case(collective_seq_id=10**30)),
    ("flight_recorder", "fr_seq_negative", _entry_case(collective_seq_id=-(10**20))),
    ("flight_recorder", "fr_p2p_seq_float", _entry_case(p2p_seq_id=float("nan"), is_p2p=True)),
    ("flight_recorder", "fr_time_str", _entry_case(time_created_ns="1758610505592849034")),
    ("flight_recorder", "fr_time_huge", _entry_case(time_created_ns=10**30)),
    ("flight_recorder", "fr_time_inf", _entry_case(time_created_ns=float("inf"))),
    ("flight_recorder", "fr_duration_nan", _entry_case(duration_ms=float("nan"))),
    ("flight_recorder", "fr_duration_inf", _entry_case(duration_ms=float("inf"))),
    ("flight_recorder", "fr_duration_huge", _entry_case(duration_ms=1e300)),
    ("flight_recorder", "fr_duration_str", _entry_case(duration_ms="0.5")),
    ("flight_recorder", "fr_name_list", _entry_case(profiling_name=["nccl:all_reduce"])),
    ("flight_recorder", "fr_state_int", _entry_case(state=3)),
    ("flight_recorder", "fr_frames_nested", _entry_case(frames=[{"filename": [[["x"]]], "line": 1, "name": "f"}])),
    ("flight_recorder", "fr_thread_id_huge", _entry_case(thread_id="9" * 400)),
    ("flight_recorder", "fr_deep_nesting", _lone(deep_entries)),
    ("flight_recorder", "fr_refs_20m", _lone(many_references)),
    ("flight_recorder", "fr_dicts_30m", _lone(many_dicts)),
    ("flight_recorder", "fr_truncated", _lone(lambda: pickle.dumps(fr_dump(), protocol=2)[:-40])),
    ("flight_recorder", "fr_global", _lone(lambda: pickle.dumps(fr_dump(version=print), protocol=2))),
    ("flight_recorder", "fr_folder_one_refused", fr_folder_one_refused),
    ("flight_recorder", "fr_folder_all_refused", fr_folder_all_refused),
    ("flight_recorder", "fr_ranks_200k", fr_ranks_200k),
]

# ---------------------------------------------------------------------------- Arrow exports


def arrow_tables() -> dict[str, pa.Table]:
    """The DDP sample's tables, typed as nsys's Arrow export types them (tests/support/arrow_convert.py)."""
    from tests.support.arrow_convert import _tables

    return dict(_tables(DDP))


def _write_arrowdir(folder: Path, tables: dict[str, pa.Table]) -> Path:
    out = folder / "export"
    out.mkdir()
    for name, t in tables.items():
        with ipc.new_file(str(out / f"{name}.arrow"), t.schema) as w:
            w.write_table(t)
    return out


def _write_stream(folder: Path, tables: dict[str, pa.Table]) -> Path:
    out = folder / "export.arrow"
    with open(out, "wb") as f:
        for name, t in tables.items():
            t = t.replace_schema_metadata({"table_name": name})
            with ipc.new_stream(f, t.schema) as w:
                w.write_table(t)
    return out


def _set(t: pa.Table, col: str, values: pa.Array | None) -> pa.Table:
    i = t.column_names.index(col)
    t = t.remove_column(i)
    return t if values is None else t.add_column(i, col, values)


def _arrow_case(
    table: str, col: str, make: Callable[[pa.Table], pa.Array | None], layout: str = "arrowdir"
) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        tables = arrow_tables()
        t = tables[table]
        tables[table] = _set(t, col, make(t)).replace_schema_metadata(t.schema.metadata)
        out = (_write_arrowdir if layout == "arrowdir" else _write_stream)(folder, tables)
        return ["summarize", str(out)]

    return build


def _nan_times(t: pa.Table) -> pa.Array:
    return pa.array([float("nan")] * t.num_rows, pa.float64())


ARROW_CASES: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    ("arrow", "arrow_strings_no_value", _arrow_case("StringIds", "value", lambda t: None)),
    ("arrow", "arrow_strings_no_value_stream", _arrow_case("StringIds", "value", lambda t: None, "arrow")),
    ("arrow", "arrow_strings_int_value", _arrow_case("StringIds", "value", lambda t: pa.array(range(t.num_rows)))),
    ("arrow", "arrow_strings_id_str", _arrow_case("StringIds", "id", lambda t: t["id"].cast(pa.string()))),
    ("arrow", "arrow_nvtx_text_int", _arrow_case("NVTX_EVENTS", "text", lambda t: pa.array([7] * t.num_rows))),
    ("arrow", "arrow_nvtx_textid_str", _arrow_case("NVTX_EVENTS", "textId", lambda t: t["textId"].cast(pa.string()))),
    ("arrow", "arrow_nvtx_start_str", _arrow_case("NVTX_EVENTS", "start", lambda t: t["start"].cast(pa.string()))),
    ("arrow", "arrow_nvtx_start_nan", _arrow_case("NVTX_EVENTS", "start", _nan_times)),
    ("arrow", "arrow_nvtx_end_nan_stream", _arrow_case("NVTX_EVENTS", "end", _nan_times, "arrow")),
    ("arrow", "arrow_nvtx_tid_list", _arrow_case("NVTX_EVENTS", "globalTid", lambda t: pa.array([[1]] * t.num_rows))),
    ("arrow", "arrow_kernel_start_nan", _arrow_case("CUPTI_ACTIVITY_KIND_KERNEL", "start", _nan_times)),
    (
        "arrow",
        "arrow_session_start_str",
        _arrow_case("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", lambda t: pa.array(["2025-01-01"] * t.num_rows)),
    ),
    (
        "arrow",
        "arrow_session_start_nan",
        _arrow_case("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", _nan_times),
    ),
]

# ---------------------------------------------------------------------------- gate baselines


def summary_doc() -> dict:
    """A schema-3 summary document of two keys over two ranks, as nsyscomm summarize writes it."""

    def row(op: str, nbytes: int) -> dict:
        return {
            "op": op,
            "bytes": nbytes,
            "count": 10,
            "calls": 40,
            "ranks": 4,
            "total_ms": 4.5,
            "avg_ms": 0.45,
            "p50_ms": 0.45,
            "max_ms": 0.5,
            "algbw_GBps": nbytes / 0.45e6,
            "busbw_GBps": nbytes / 0.45e6 * 1.5,
            "group_size": 4,
            "dtype": "float32",
            "caller": None,
        }

    return {
        "schema": 3,
        "tool": "nsyscomm",
        "reports": ["x.sqlite"],
        "summary": [row("all_reduce", 25 << 20), row("broadcast", 1 << 20)],
        "ranks": [{"rank": i, "host": "h", "calls": 20, "comm_ms": 10.0, "wait_ms": 1.0} for i in range(4)],
        "skew": {
            "straggler_rank": 1,
            "instances": 10,
            "per_rank": [{"rank": i, "avg_arrival_delay_ms": 0.01, "wait_ms": 1.0} for i in range(4)],
        },
        "warnings": [],
    }


def _gate(change: Callable[[dict], object] | None = None, side: str = "baseline", raw: str | None = None):
    """A builder: a gate of a good summary against a corrupted one, on `side` (baseline or current)."""

    def build(folder: Path) -> list[str]:
        good = folder / "good.json"
        good.write_text(json.dumps(summary_doc()))
        bad = folder / "bad.json"
        if raw is not None:
            bad.write_text(raw)
        else:
            d = summary_doc()
            new = change(d) if change else None
            bad.write_text(json.dumps(new if new is not None else d))
        base, cur = (bad, good) if side == "baseline" else (good, bad)
        return ["gate", "--baseline", str(base), str(cur), "--no-pyproject", "--no-step-summary"]

    return build


def _row(field: str, value: object) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        d["summary"][0][field] = value

    return change


def _big_count(d: dict) -> str:
    return json.dumps(d).replace('"calls": 40', '"calls": ' + "9" * 400, 1)


def _mixed(d: dict) -> dict:
    other = copy.deepcopy(d)
    other["summary"] = [{"op": "all_reduce", "calls": "many", "avg_ms": "fast"}]
    return {"schema": 3, "kind": "baseline", "runs": [d, other]}


def _rank(section: str, field: str, value: object) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        rows = d[section]["per_rank"] if section == "skew" else d[section]
        rows[1][field] = value

    return change


def _set_key(key: str, value: object) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        d[key] = value

    return change


GATE_CASES: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    ("gate", "gate_count_400_digits", _gate(raw=_big_count(summary_doc()))),
    ("gate", "gate_count_400_digits_current", _gate(side="current", raw=_big_count(summary_doc()))),
    ("gate", "gate_calls_nan", _gate(_row("calls", float("nan")))),
    ("gate", "gate_avg_nan", _gate(_row("avg_ms", float("nan")))),
    ("gate", "gate_avg_inf", _gate(_row("avg_ms", float("inf")))),
    ("gate", "gate_avg_inf_current", _gate(_row("avg_ms", float("-inf")), side="current")),
    ("gate", "gate_busbw_str", _gate(_row("busbw_GBps", "fast"))),
    ("gate", "gate_avg_str_current", _gate(_row("avg_ms", "0.45"), side="current")),
    ("gate", "gate_bytes_negative", _gate(_row("bytes", -5))),
    ("gate", "gate_calls_bool", _gate(_row("calls", True))),
    ("gate", "gate_caller_list", _gate(_row("caller", ["train.py:1"]))),
    ("gate", "gate_row_no_calls", _gate(lambda d: d["summary"].append({"op": "all_gather", "foo": 1}))),
    ("gate", "gate_row_unknown_shape", _gate(lambda d: d.update(summary=[{"op": "x", "bytes": "big"}]))),
    ("gate", "gate_mixed_runs", _gate(_mixed)),
    ("gate", "gate_rank_comm_nan", _gate(_rank("ranks", "comm_ms", float("nan")))),
    ("gate", "gate_rank_comm_nan_current", _gate(_rank("ranks", "comm_ms", float("nan")), side="current")),
    ("gate", "gate_skew_delay_str", _gate(_rank("skew", "avg_arrival_delay_ms", "late"))),
    ("gate", "gate_rank_id_str", _gate(_rank("ranks", "rank", "one"))),
    ("gate", "gate_straggler_list", _gate(lambda d: d["skew"].update(straggler_rank=[1]))),
    ("gate", "gate_overlap_str", _gate(_set_key("overlap", "junk"))),
    ("gate", "gate_text_current", _gate(side="current", raw="all_reduce 25 MB 0.45 ms\n")),
    ("gate", "gate_verdict_current", _gate(lambda d: {"schema": 3, "kind": "gate", "status": "pass"}, "current")),
    ("gate", "gate_trace_current", _gate(lambda d: {"traceEvents": []}, side="current")),
]

CASES = FR_CASES + ARROW_CASES + GATE_CASES

EXPECT: dict[str, tuple[int, ...]] = {"fr_folder_one_refused": (0,)}
MENTION = {"fr_folder_one_refused": "nccl_trace_rank_3"}
HEAVY = {"fr_refs_20m", "fr_dicts_30m", "fr_deep_nesting", "fr_ranks_200k"}
