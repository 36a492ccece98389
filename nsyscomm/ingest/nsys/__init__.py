"""nsys exports (SQLite, or Arrow): reader opens one and reads its tables into DuckDB (the C scan
_sqlite_scan or DuckDB's SQLite scanner), arrow reads the Arrow exports as the same tables, and
extract turns those tables into the report's Extract with the nsys-only helpers beside it (NCCL's
and NVTX's payloads, the kernels in each call's gap, GPU metrics, the recorded environment)."""
