"""The wrapper's NVTX message (nsyscomm/nvtx_format.py): format/parse round trip, the hot-path
template, and agreement of the SQL extraction (sql/calls_nsys.sql, through a tiny nsys-like
report) with nvtx_format.parse on arbitrary field values (Hypothesis)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsyscomm import nvtx_format as fmt
from nsyscomm import synth
from nsyscomm.busbw import OPS
from nsyscomm.duck import arrow_frame

# NVTX messages are C strings (no NUL) and SQLite TEXT is UTF-8 (no lone surrogates)
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
BIG = st.integers(min_value=0, max_value=2**62)
SMALL = st.integers(min_value=0, max_value=2**31 - 1)
HAS_PEER = "peer" in fmt.COLLECTIVE_FIELDS


def fields(caller=TEXT):
    return st.fixed_dictionaries(
        {
            "op": st.sampled_from(OPS),
            "api": TEXT,
            "bytes": BIG,
            "dtype": TEXT,
            "numel": BIG,
            "pg": TEXT,
            "gsize": SMALL,
            "granks": st.lists(st.integers(0, 4096), max_size=8),
            "seq": BIG,
            "async_op": st.booleans(),
            "step": st.none() | BIG,
            "caller": caller,
        }
    )


def _cleaned(v) -> str:
    return fmt._clean(v)


def _format(f: dict, peer=None) -> str:
    kw = dict(f)
    op = kw.pop("op")
    if peer is not None:
        kw["peer"] = peer
    return fmt.format_collective(op, **kw)


# --------------------------------------------------------------------------- Python round trip


@given(fields())
@settings(max_examples=300, deadline=None)
def test_format_parse_round_trip(f):
    msg = _format(f)
    p = fmt.parse(msg)
    assert p["kind"] == fmt.COLLECTIVE_PREFIX + f["op"]
    for k in ("api", "bytes", "dtype", "numel", "pg", "gsize", "granks", "seq", "step"):
        assert p[k] == _cleaned(f[k]), k
    assert p["async"] == ("1" if f["async_op"] else "0")
    assert p["caller"] == f["caller"]
    assert "peer" not in p


@pytest.mark.skipif(not HAS_PEER, reason="this nvtx_format has no peer field")
@given(fields(), st.integers(-1, 4096))
@settings(max_examples=100, deadline=None)
def test_round_trip_with_peer(f, peer):
    msg = _format(f, peer)
    p = fmt.parse(msg)
    assert p["peer"] == str(peer) and p["caller"] == f["caller"]
    assert fmt.with_peer(_format(f), peer) == msg


@given(fields())
@settings(max_examples=200, deadline=None)
def test_hot_path_template_equals_format(f):
    t = fmt.collective_template(
        f["op"], api=f["api"], dtype=f["dtype"], pg=f["pg"], gsize=f["gsize"], granks=f["granks"]
    )
    msg = t % (
        f["bytes"],
        f["numel"],
        f["seq"],
        "1" if f["async_op"] else "0",
        "" if f["step"] is None else f["step"],
        f["caller"],
    )
    assert msg == _format(f)


@given(st.integers(0, 2**31), st.integers(0, 2**31), st.integers(1, 2**31), TEXT)
@settings(max_examples=100, deadline=None)
def test_rank_marker_round_trip(rank, local, world, host):
    p = fmt.parse(fmt.format_rank_marker(rank, local, world, host))
    assert p == {
        "kind": fmt.RANK_PREFIX,
        "rank": str(rank),
        "local_rank": str(local),
        "world": str(world),
        "host": host.replace("|", "/"),
    }


# --------------------------------------------------------------------------- SQL agrees with parse

GTID = synth.global_tid(4242, 4243)


def tiny_report(path: Path, messages: list[str], registered: bool = True) -> None:
    """An nsys-like export holding only the wrapper's NVTX ranges (as registered strings or as text)."""
    con = sqlite3.connect(path)
    for t in ("StringIds", "NVTX_EVENTS", "META_DATA_EXPORT"):
        con.execute(synth.create_statement(t))
    cols = synth.cols("NVTX_EVENTS")
    rows, strings = [], []
    rows.append({"start": 0, "end": None, "eventType": 75, "text": fmt.DOMAIN, "globalTid": GTID, "domainId": 1})
    for i, m in enumerate(messages):
        r = {
            "start": 1000 + 10_000 * i,
            "end": 1000 + 10_000 * i + 5000,
            "eventType": 59,
            "globalTid": GTID,
            "domainId": 1,
        }
        if registered:
            strings.append((i + 1, m))
            r["textId"] = i + 1
        else:
            r["text"] = m
        rows.append(r)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
    con.executemany(
        f"INSERT INTO NVTX_EVENTS ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [tuple(r.get(c) for c in cols) for r in rows],
    )
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2022.4.2')")
    con.commit()
    con.close()


def _expected(msg: str) -> dict:
    """The calls row the SQL must produce for one message, from nvtx_format.parse."""
    p = fmt.parse(msg)

    def s(k):
        v = p.get(k, "")
        return v if v != "" else None

    def i(k):
        v = p.get(k, "")
        return int(v) if v != "" else None

    out = {
        "op": p["kind"][len(fmt.COLLECTIVE_PREFIX) :] or None,
        "api": s("api"),
        "bytes": i("bytes"),
        "dtype": s("dtype"),
        "numel": i("numel"),
        "group": s("pg"),
        "group_size": i("gsize"),
        "group_ranks": s("granks"),
        "seq": i("seq"),
        "step": i("step"),
        "caller": s("caller"),
    }
    if HAS_PEER:
        out["peer"] = i("peer")
    return out


def _extracted(path: Path) -> list[dict]:
    from nsyscomm.ingest.nsys import extract as nsys_extract

    ex = nsys_extract.extract(path)
    calls = arrow_frame(ex.calls).sort_values("cpu_start")
    keys = list(
        _expected(
            _format(
                {
                    "op": "barrier",
                    "api": "",
                    "bytes": 0,
                    "dtype": "",
                    "numel": 0,
                    "pg": "",
                    "gsize": 0,
                    "granks": [],
                    "seq": 0,
                    "async_op": False,
                    "step": None,
                    "caller": "",
                }
            )
        )
    )
    out = []
    for row in calls[keys].to_dict("records"):
        out.append(
            {
                k: (
                    None
                    if (v is None or v != v)
                    else (int(v) if k in ("bytes", "numel", "group_size", "seq", "step", "peer") else v)
                )
                for k, v in row.items()
            }
        )
    return out


def _check_sql(tmp_path: Path, messages: list[str], registered: bool) -> None:
    path = tmp_path / f"r{abs(hash(tuple(messages))) % 10**9}.sqlite"
    if path.exists():
        path.unlink()
    tiny_report(path, messages, registered)
    try:
        got = _extracted(path)
    finally:
        path.unlink()
    assert got == [_expected(m) for m in messages]


@given(st.lists(st.tuples(fields(), st.none() | st.integers(-1, 4096)), min_size=1, max_size=12), st.booleans())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@example(
    [
        (
            {
                "op": "all_reduce",
                "api": "a|b=c",
                "bytes": 1,
                "dtype": "float32",
                "numel": 1,
                "pg": "0",
                "gsize": 2,
                "granks": [0, 1],
                "seq": 3,
                "async_op": True,
                "step": 7,
                "caller": "x.py:1 f|bytes=99|step=5|api=zz|caller=q",
            },
            None,
        )
    ],
    True,
)
@example(
    [
        (
            {
                "op": "send",
                "api": "send",
                "bytes": 4,
                "dtype": "<b>'; DROP TABLE x; --",
                "numel": 1,
                "pg": "%_\\",
                "gsize": 2,
                "granks": [],
                "seq": 0,
                "async_op": False,
                "step": None,
                "caller": "ünïcödé 🚀 caller",
            },
            1,
        )
    ],
    False,
)
def test_sql_extraction_agrees_with_parse(tmp_path, items, registered):
    msgs = [_format(f, peer if HAS_PEER else None) for f, peer in items]
    _check_sql(tmp_path, msgs, registered)


@pytest.mark.parametrize(
    "caller",
    [
        "train.py:3 f|peer=5",
        "a.py:1 g\nsecond line",
        "a.py:1 g\r\n",
        "x.py:2 h|bytes=99|step=5|api=zz|caller=q",
    ],
)
def test_sql_extraction_of_tricky_callers(tmp_path, caller):
    f = {
        "op": "all_reduce",
        "api": "all_reduce",
        "bytes": 8,
        "dtype": "float32",
        "numel": 2,
        "pg": "0",
        "gsize": 2,
        "granks": [],
        "seq": 1,
        "async_op": False,
        "step": 2,
        "caller": caller,
    }
    _check_sql(tmp_path, [_format(f)], True)
