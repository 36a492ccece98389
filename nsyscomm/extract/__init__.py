"""Per-report extraction, the map stage: the reader for each report (readers), the Parquet
cache around it (cache) and the pool that runs them in parallel (pool). Each returns one
nsyscomm.ingest.extract_type.Extract per report; the combining stage reads only those."""
