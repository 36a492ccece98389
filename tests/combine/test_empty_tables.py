"""A per-report table no report has rows of is declared in the job's database, not copied from
an empty frame (DuckDB sets up a frame's scan alike for no rows: most of a small report's
tables are empty), and it has the declared columns and types all the same."""

from __future__ import annotations

from nsyscomm import duck
from nsyscomm.api import load
from nsyscomm.combine import calls as combine_calls
from nsyscomm.ingest.extract_type import TABLES
from tests.conftest import SAMPLES


def test_empty_per_report_tables_are_declared_not_registered(monkeypatch):
    registered: list[str] = []
    real = combine_calls.register

    def register(con, name, df, select):
        registered.append(name)
        real(con, name, df, select)

    monkeypatch.setattr(combine_calls, "register", register)
    result = load([SAMPLES / "synthetic_ddp_4rank.sqlite"], cache=False)
    checked = 0
    for t in TABLES:
        if t.job_table is None:
            continue
        types = result.con.execute(f"DESCRIBE {t.job_table}").fetchall()
        assert [(name, typ) for name, typ, *_ in types] == t.job_columns(), t.job_table
        if not duck.scalar(result.con, f"SELECT count(*) FROM {t.job_table}"):
            assert t.job_table not in registered, t.job_table
            checked += 1
        if t.reports_table is not None:
            assert t.reports_table not in registered
            reports = result.con.execute(f"SELECT report FROM {t.reports_table}").fetchall()
            assert len(reports) <= 1
    assert checked  # the sample has tables without rows
