"""Reading an nsys SQLite export: reader opens the export and reads its tables into DuckDB
(the C scan or DuckDB's SQLite scanner); extract turns those tables into the report's Extract."""
