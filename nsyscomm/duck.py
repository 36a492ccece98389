"""DuckDB connections that never download anything, and the SQL files shipped in the wheel."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import duckdb


@functools.cache
def _sqlite_extension() -> str:
    import duckdb_extension_sqlite_scanner as ext

    found = sorted(Path(ext.__file__).parent.glob("extensions/*/sqlite_scanner.duckdb_extension"))
    if not found:
        raise RuntimeError("duckdb-extension-sqlite-scanner is installed without its extension file; "
                           "reinstall it: pip install --force-reinstall duckdb-extension-sqlite-scanner==1.5.5")
    return str(found[-1])


def connect(sqlite: bool = False, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    # Auto-install/auto-load off: a profiler on a cluster node must never reach the network.
    config = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    if threads:
        config["threads"] = threads
    con = duckdb.connect(config=config)
    # IEJoin for "launch inside range" joins: measured far faster than hash join + filter (DESIGN.md)
    con.execute("SET prefer_range_joins = true")
    if sqlite:
        con.execute(f"LOAD '{_sqlite_extension()}'")
    return con


@functools.cache
def sql(name: str) -> str:
    """Text of sql/<name>.sql (installed as the package nsyscomm.sql)."""
    try:
        return resources.files("nsyscomm.sql").joinpath(f"{name}.sql").read_text()
    except ModuleNotFoundError:  # running from a source checkout that was not pip-installed
        return (Path(__file__).resolve().parent.parent / "sql" / f"{name}.sql").read_text()
