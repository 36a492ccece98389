"""nsys GPU metrics (``nsys profile --gpu-metrics-devices=...``): link throughput during collectives.

nsys samples per-GPU counters into ``GPU_METRICS(timestamp, typeId, metricId, value)`` and names
them in ``TARGET_INFO_GPU_METRICS(typeId, metricId, metricName, ...)``; the GPU is the low byte of
typeId. The link counters (NVLink, PCIe, C2C) are kept; each sample covers the time since the
previous sample of the same counter. sql/link_usage.sql weighs the samples by the time they share
with each call's kernels on the same GPU, and sums per (process, GPU, op, size, metric): the
combining stage only adds those sums up (sql/link_metrics.sql).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from nsyscomm import duck
from nsyscomm.ingest.extract_type import TABLE

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

# what the metric names of link counters contain, across GPU generations and nsys versions
LINK_WORDS = ("nvlink", "pcie", "c2c", "nvl ")
COLUMNS = TABLE["links"].column_names


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


def link_usage(
    con: duckdb.DuckDBPyConnection, tables: dict[str, set[str]], calls: pa.Table, warnings: list[str], report: str
) -> pd.DataFrame:
    """Per-report sums of link-counter samples under the report's GPU calls (an Arrow table);
    empty without GPU metrics."""
    names_t, samples_t = tables.get("TARGET_INFO_GPU_METRICS"), tables.get("GPU_METRICS")
    if names_t is None or samples_t is None or not len(calls) or "metricName" not in names_t:
        return empty()
    con.register("calls_arrow", calls)
    try:
        con.execute("""CREATE TEMP TABLE gpu_calls AS
            SELECT pid::BIGINT AS pid, device::INTEGER AS device, api::VARCHAR AS api, op::VARCHAR AS op,
                   bytes::BIGINT AS bytes, gpu_start::BIGINT AS gpu_start, gpu_end::BIGINT AS gpu_end
            FROM calls_arrow WHERE gpu_start IS NOT NULL AND gpu_end IS NOT NULL AND device IS NOT NULL""")
    finally:
        con.unregister("calls_arrow")
    ran = sorted(int(d) for (d,) in con.execute("SELECT DISTINCT device FROM gpu_calls").fetchall())
    if not ran:  # CPU-only calls (gloo, MPI): the samples are not read at all
        return empty()
    # SQL fragments below are constants chosen by which columns the export has (no report values)
    like = " OR ".join(f"lower(metricName) LIKE '%{w}%'" for w in LINK_WORDS)
    by_type = "typeId" in names_t and "typeId" in samples_t
    type_sel = "typeId" if by_type else "NULL::BIGINT"
    names = con.execute(f"""SELECT DISTINCT {type_sel} AS typeId, metricId, metricName
                            FROM r.TARGET_INFO_GPU_METRICS WHERE {like}""").df()
    if names.empty:
        return empty()
    con.register("link_names_df", names)
    # the typeId of a sample says which GPU; without it (never seen) every sample is taken as GPU 0
    device = "(m.typeId & 255)" if "typeId" in samples_t else "0"
    partition = "m.typeId, m.metricId" if "typeId" in samples_t else "m.metricId"
    on_type = "AND n.typeId = m.typeId" if by_type else ""
    con.execute(f"""CREATE TEMP TABLE link_samples AS
        SELECT {device}::INTEGER AS device, n.metricName AS metric,
               lag(m.timestamp) OVER (PARTITION BY {partition} ORDER BY m.timestamp) AS t0,
               m.timestamp AS t1, m.value::DOUBLE AS value
        FROM r.GPU_METRICS m JOIN link_names_df n ON n.metricId = m.metricId {on_type}
        WHERE m.timestamp IS NOT NULL AND m.value IS NOT NULL""")
    con.unregister("link_names_df")
    con.execute("DELETE FROM link_samples WHERE t0 IS NULL")  # a counter's first sample covers no known time
    out = con.execute(duck.sql("link_usage")).df()
    if out.empty:
        sampled = sorted(int(d) for (d,) in con.execute("SELECT DISTINCT device FROM link_samples").fetchall())
        if sampled and not set(sampled) & set(ran):
            warnings.append(
                f"{report}: GPU metrics were sampled on GPU(s) {sampled} but the collectives ran on "
                f"GPU(s) {ran}: no link throughput (profile with --gpu-metrics-devices=all)"
            )
    return out[COLUMNS]
