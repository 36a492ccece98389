"""Hangs and desynchronized collectives: which communicator is stuck, in which collective, who
is missing from it and what each missing rank last called.

Inputs: the job's collectives (nsys reports, Flight Recorder dumps: an unfinished call has no end)
and, where present, the flight records the wrapper kept under ``nsyscomm run``
(nsyscomm.capture.flight_record: ``records/`` beside the reports), which know calls entered and
never finished and how each process ended. SQL: sql/hang_*.sql.

    {"status": "hung" | "desynced" | "aborted" | "ok",
     "blocked": [{"group", "seq", "op", "bytes", "waiting_ranks", "missing_ranks":
                  [{"rank", "last_op", "last_seq", "caller", "state", "waiting_in"}]}],
     "mismatches": [{"group", "seq", "field", "values_by_rank"}]}

``blocked`` is ordered by when its collective was first entered (Flight Recorder's own analyser
reports the first), except that a collective some of whose missing ranks wait in another blocked
one (``waiting_in``: held there, not the cause) comes after those none of whose missing ranks
wait anywhere: the first is the likeliest root (the others are often stuck because of it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from nsyscomm import duck
from nsyscomm.capture import flight_record as fr
from nsyscomm.ingest.flight_recorder import dump as frd

if TYPE_CHECKING:
    import duckdb

STATUSES = ("hung", "desynced", "aborted", "ok")
RECORDS_DIR = "records"
_DEAD = ("raised", "aborted")
_RECORD_COLS = [
    "rank",
    "group",
    "group_size",
    "group_ranks",
    "seq",
    "op",
    "bytes",
    "dtype",
    "caller",
    "finished",
    "t_enter",
    "source",
]


def record_dirs(sources: Iterable[str | os.PathLike] | None) -> list[Path]:
    """Folders of flight records that belong to these inputs: records/ beside a report, or
    ring files in a folder given."""
    out = []
    for s in sources or ():
        p = Path(s)
        for d in (p,) if p.is_dir() else (p.parent, p.parent / RECORDS_DIR):
            if d.is_dir() and any(d.glob("*.ring")) and d not in out:
                out.append(d)
        if p.is_dir() and (p / RECORDS_DIR).is_dir() and (p / RECORDS_DIR) not in out:
            out.append(p / RECORDS_DIR)
    return out


def _int(v, default=None):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def read_records(dirs: Iterable[str | os.PathLike]) -> tuple[pd.DataFrame, dict]:
    """The records' calls (hang_records) and each rank's process state {rank: (state, note)}."""
    rows, procs = [], {}
    for d in dirs:
        for ring in fr.read_dir(d):
            if ring.rank < 0 and not ring.calls:  # a launcher process (torchrun) that made no call
                continue
            procs[ring.rank] = (ring.state, _first_line(ring.note))
            for c in ring.calls:
                f = c.fields
                kind = f.get("kind", "")
                op = kind[len("nsyscomm:") :] if kind.startswith("nsyscomm:") else kind
                if op in ("send", "recv") or _int(f.get("seq")) is None:
                    continue
                rows.append(
                    (
                        ring.rank,
                        f.get("pg", ""),
                        _int(f.get("gsize")),
                        f.get("granks", ""),
                        _int(f.get("seq")),
                        op,
                        _int(f.get("bytes")),
                        f.get("dtype") or None,
                        f.get("caller") or None,
                        c.finished,
                        c.t_enter_ns,
                        "record",
                    )
                )
    return pd.DataFrame(rows, columns=_RECORD_COLS), procs


def read_dumps(sources: Iterable[str | os.PathLike] | None) -> pd.DataFrame:
    """The Flight Recorder dumps among the inputs, as hang_records rows with their states."""
    rows = []
    for s in sources or ():
        p = Path(s)
        if p.is_file() and frd.is_dump(p):
            rows += [
                (
                    r["rank"],
                    r["group"],
                    r["group_size"],
                    r["group_ranks"],
                    r["seq"],
                    r["op"],
                    r["bytes"],
                    r["dtype"],
                    r["caller"],
                    r["finished"],
                    r["cpu_start"],
                    "flight_recorder",
                )
                for r in frd.rows(p)
                if r["op"] not in ("send", "recv")
            ]
    return pd.DataFrame(rows, columns=_RECORD_COLS)


def _first_line(text: str, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _members(calls: pd.DataFrame) -> pd.DataFrame:
    """(group, rank) for every member of every communicator seen: its listed ranks, or 0..size-1
    for the default group (the wrapper leaves its rank list empty)."""
    rows = set()
    for (g, granks, size), _ in calls.groupby(["group", "group_ranks", "group_size"], dropna=False):
        ranks = [int(x) for x in str(granks).split(",") if x.strip().lstrip("-").isdigit()]
        if not ranks and pd.notna(size):
            ranks = list(range(int(size)))
        rows |= {(g, r) for r in ranks}
    for g, r in calls[["group", "rank"]].drop_duplicates().itertuples(index=False):
        rows.add((g, int(r)))
    return pd.DataFrame(sorted(rows, key=lambda x: (str(x[0]), x[1])), columns=["group", "rank"])


def _clean(v):
    if v is None or (isinstance(v, float) and pd.isna(v)) or v is pd.NA:
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


# the flight records' and dumps' columns as the hang SQL reads them
_RECORD_TYPES = {
    "rank": "INTEGER",
    "group": "VARCHAR",
    "group_size": "INTEGER",
    "group_ranks": "VARCHAR",
    "seq": "BIGINT",
    "op": "VARCHAR",
    "bytes": "BIGINT",
    "dtype": "VARCHAR",
    "caller": "VARCHAR",
    "finished": "BOOLEAN",
    "t_enter": "BIGINT",
    "source": "VARCHAR",
}


def diagnose(con: duckdb.DuckDBPyConnection, sources: Sequence[str | os.PathLike] = ()) -> dict:
    """The hang diagnosis of a job (see the module docstring) on the Result's connection."""
    records, procs = _all_records(sources)
    mism_rows, blocked_rows, frontier = _query(con, records)
    mismatches = _mismatches(mism_rows)
    blocked = _blocked(blocked_rows, procs, {(m["group"], m["seq"]) for m in mismatches})
    return {
        "status": _status(mismatches, blocked, procs),
        "blocked": blocked,
        "mismatches": mismatches,
        "processes": [{"rank": r, "state": s, "note": n or None} for r, (s, n) in sorted(procs.items())],
        "frontier": [
            {"group": g, "rank": int(r), "last_entered": _clean(e), "last_finished": _clean(f)}
            for g, r, e, f in frontier.itertuples(index=False)
        ],
    }


def _all_records(sources: Sequence[str | os.PathLike]) -> tuple[pd.DataFrame, dict]:
    """(the flight records and Flight Recorder dumps of these inputs as one table, how each
    recorded process ended)."""
    records, procs = read_records(record_dirs(sources))
    dumps = read_dumps(sources)
    if len(dumps):
        records = pd.concat([records, dumps], ignore_index=True) if len(records) else dumps
    return records, procs


def _query(con: duckdb.DuckDBPyConnection, records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(mismatch rows, blocked rows, each rank's frontier) of the hang SQL over the collectives
    and these records."""
    cur = duck.quiet(con.cursor())
    try:
        if records.empty:  # most jobs: declared, not copied from an empty frame (a scan set up for nothing)
            cols = ", ".join(f'"{c}" {t}' for c, t in _RECORD_TYPES.items())
            cur.execute(f"CREATE OR REPLACE TEMP TABLE hang_records ({cols})")
        else:
            cur.register("hang_records_df", records)
            cols = ", ".join(f'"{c}"::{t} AS "{c}"' for c, t in _RECORD_TYPES.items())
            cur.execute(f"CREATE OR REPLACE TEMP TABLE hang_records AS SELECT {cols} FROM hang_records_df")
        # reports alone with every call closed cannot show a blocked collective (nsys closes a range
        # left open at the process's end): only the mismatches are looked for, in one scan of a view.
        # The calls counted are those sql/hang_calls.sql keeps: a point-to-point call, or one without
        # a seq or rank (a send's kernel seen without its host range), is not looked at there
        lone = records.empty and not duck.scalar(
            cur,
            "SELECT count(*) FROM collectives WHERE cpu_end IS NULL "
            "AND op NOT IN ('send', 'recv') AND seq IS NOT NULL AND rank IS NOT NULL",
        )
        cur.execute(
            ("CREATE OR REPLACE TEMP VIEW hang_calls AS " if lone else "CREATE OR REPLACE TEMP TABLE hang_calls AS ")
            + duck.sql("hang_calls")
        )
        mism_rows = mismatch_rows(cur)
        if lone:
            blocked_rows = pd.DataFrame(columns=["group", "seq", "role"])
            frontier = pd.DataFrame(columns=["group", "rank", "last_entered", "last_finished"])
        else:
            calls = cur.execute('SELECT DISTINCT "group", group_ranks, group_size, rank FROM hang_calls').df()
            cur.register("hang_members_df", _members(calls))
            cur.execute(
                "CREATE OR REPLACE TEMP TABLE hang_members AS "
                'SELECT "group"::VARCHAR AS "group", rank::INTEGER AS rank FROM hang_members_df'
            )
            blocked_rows = cur.execute(duck.sql("hang_blocked")).df()
            frontier = cur.execute(duck.sql("hang_frontier")).df()
    finally:
        cur.close()
    return mism_rows, blocked_rows, frontier


def mismatch_rows(cur: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """sql/hang_mismatches.sql's rows over the table or view hang_calls: the keys that may differ
    first (sql/hang_maybe.sql, a small table), then the exact comparison of their calls, only
    when there are any: DuckDB plans the comparison over a copy of every call, which most jobs,
    whose calls all agree, need not pay for."""
    cur.execute(f"CREATE OR REPLACE TEMP TABLE hang_maybe AS {duck.sql('hang_maybe')}")
    try:
        if not duck.scalar(cur, "SELECT count(*) FROM hang_maybe"):
            return pd.DataFrame(columns=["group", "seq", "field", "rank", "value"])
        return cur.execute(duck.sql("hang_mismatches")).df()
    finally:
        cur.execute("DROP TABLE hang_maybe")


def _mismatches(mism_rows: pd.DataFrame) -> list[dict]:
    """One entry per (communicator, seq, field) where the ranks' calls differ."""
    mismatches = []
    for (g, seq, field), sub in mism_rows.groupby(["group", "seq", "field"], sort=False):
        conv = int if field == "bytes" else (lambda v: v)
        mismatches.append(
            {
                "group": g,
                "seq": int(seq),
                "field": field,
                "values_by_rank": {str(int(r)): conv(_clean(v)) for r, v in zip(sub["rank"], sub["value"])},
            }
        )
    return mismatches


def _missing(sub: pd.DataFrame, procs: dict) -> list[dict]:
    """The ranks missing from one collective, each with its last call and how its process is."""
    missing = []
    for r in sub[sub["role"] == "missing"].itertuples(index=False):
        state = procs.get(int(r.rank), (None, ""))[0]
        if state is None:
            state = "unknown" if pd.isna(r.last_finished) else ("finished" if r.last_finished else "in call")
        missing.append(
            {
                "rank": int(r.rank),
                "last_op": _clean(r.last_op),
                "last_seq": _clean(r.last_seq),
                "caller": _clean(r.caller),
                "state": state,
                "note": procs.get(int(r.rank), (None, ""))[1] or None,
            }
        )
    return missing


def _blocked(blocked_rows: pd.DataFrame, procs: dict, mism_at: set) -> list[dict]:
    """The collectives some member never reached (or where the members' calls differ, mism_at)."""
    blocked = []
    for (g, seq), sub in blocked_rows.groupby(["group", "seq"], sort=False):
        missing = _missing(sub, procs)
        if not missing and (g, int(seq)) not in mism_at:
            continue  # everyone is in it and nothing differs: in flight, not stuck
        first = sub.iloc[0]
        blocked.append(
            {
                "group": g,
                "seq": int(seq),
                "op": _clean(first["op"]),
                "bytes": _clean(first["bytes"]),
                "waiting_ranks": [int(x) for x in sub[sub["role"] == "waiting"]["rank"]],
                "missing_ranks": missing,
            }
        )
    return _roots_first(blocked)


def _roots_first(blocked: list[dict]) -> list[dict]:
    """A missing rank that waits in another blocked collective is held there, not the cause: each
    missing rank gets ``waiting_in``, the first blocked collective it waits in (None: it waits in
    none), and the collectives no such rank keeps blocked come first (stable: each part in the
    order first entered). A rank stuck outside communication is missing from the collectives of
    every communicator it belongs to; one of those blocked only by it is the root, whichever of
    its partners happened to enter the next collective first."""
    waits: dict[int, dict] = {}
    for b in blocked:
        for r in b["waiting_ranks"]:
            waits.setdefault(r, {"group": b["group"], "seq": b["seq"], "op": b["op"]})
    for b in blocked:
        for m in b["missing_ranks"]:
            m["waiting_in"] = waits.get(m["rank"])
    return sorted(blocked, key=lambda b: any(m["waiting_in"] for m in b["missing_ranks"]))


def _status(mismatches: list[dict], blocked: list[dict], procs: dict) -> str:
    """One of STATUSES: a mismatch first, then a blocked collective (aborted when a missing rank's
    process died), then a dead process alone."""
    if mismatches:
        return "desynced"
    if blocked:
        return "aborted" if any(m["state"] in _DEAD for b in blocked for m in b["missing_ranks"]) else "hung"
    if any(s in _DEAD for s, _ in procs.values()):
        return "aborted"
    return "ok"


def lines(h: dict) -> list[str]:
    """The diagnosis as text lines, most important first (the views print them before the tables)."""
    if not h or h.get("status") == "ok":
        return []
    out = [
        f"HANG DIAGNOSIS: the job {h['status'].upper()}"
        + {
            "hung": " (ranks wait in a collective that others never reached)",
            "desynced": " (ranks called different collectives at the same point)",
            "aborted": " (a process ended while others were in a collective)",
        }.get(h["status"], "")
    ]
    for i, b in enumerate(h["blocked"]):
        root = " (the likeliest root)" if i == 0 and len(h["blocked"]) > 1 else ""
        size = f", {b['bytes']} B" if b.get("bytes") is not None else ""
        out.append(
            f"  communicator {b['group']}: blocked in {b['op']} seq {b['seq']}{size}{root}; "
            f"waiting ranks: {_ranks(b['waiting_ranks'])}"
        )
        for m in b["missing_ranks"]:
            last = (
                f"last call {m['last_op']} seq {m['last_seq']} at {m['caller'] or '?'}"
                if m["last_op"] is not None
                else "no call on this communicator"
            )
            note = f" ({m['note']})" if m.get("note") else ""
            w = m.get("waiting_in")
            held = f"waiting in communicator {w['group']} {w['op']} seq {w['seq']}; " if w else ""
            out.append(f"    missing rank {m['rank']}: {held}{last}; state {m['state']}{note}")
    for m in h["mismatches"]:
        vals = list(m["values_by_rank"].items())
        common = max({v for _, v in vals}, key=lambda v: (sum(1 for _, x in vals if x == v), str(v)))
        odd = ", ".join(f"rank {r} has {v}" for r, v in vals if v != common)
        out.append(f"  {m['field']} mismatch on communicator {m['group']} seq {m['seq']}: {odd} (the others {common})")
    dead = [p for p in h.get("processes", []) if p["state"] in _DEAD]
    for p in dead:
        out.append(f"  rank {p['rank']} {p['state']}" + (f": {p['note']}" if p.get("note") else ""))
    return out


def _ranks(rs) -> str:
    return ", ".join(map(str, rs)) if rs else "none"


_MISSING_KEYS = ("rank", "last_op", "last_seq", "caller", "state", "waiting_in")
_BLOCKED_KEYS = ("group", "seq", "op", "bytes", "waiting_ranks")


def contract(h: dict) -> dict:
    """The JSON key ``hang`` as the contract fixes it (the diagnosis's extra detail left out)."""
    return {
        "status": h["status"],
        "blocked": [
            {
                **{k: b[k] for k in _BLOCKED_KEYS},
                "missing_ranks": [{k: m[k] for k in _MISSING_KEYS} for m in b["missing_ranks"]],
            }
            for b in h["blocked"]
        ],
        "mismatches": [{k: m[k] for k in ("group", "seq", "field", "values_by_rank")} for m in h["mismatches"]],
    }


def failing(h: dict) -> str | None:
    """The gate's reason to fail on this diagnosis (a run that hung or desynced), else None."""
    if h["status"] not in ("hung", "desynced"):
        return None
    where = "; ".join(
        f"communicator {b['group']} {b['op']} seq {b['seq']} missing rank(s) "
        f"{_ranks([m['rank'] for m in b['missing_ranks']])}"
        for b in h["blocked"][:3]
        if b["missing_ranks"]
    )
    if h["mismatches"]:
        m = h["mismatches"][0]
        where = (where + "; " if where else "") + f"{m['field']} mismatch at communicator {m['group']} seq {m['seq']}"
    return f"the run {h['status']}: {where}"
