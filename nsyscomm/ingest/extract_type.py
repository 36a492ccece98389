"""What one report contributes to a job (``Extract``), whatever its format, and its per-report
tables declared once (``TABLES``): each table's columns with their SQL types and what they hold,
as nsyscomm.schema declares the collectives, and what the combining stage makes of it. Every
reader returns an Extract; the extract cache (nsyscomm.extract.cache) stores and loads the tables
by looping over TABLES, and combine (nsyscomm.combine.job) makes the job's tables from them the
same way. A new per-report table is one entry here and one field of Extract (CONTRIBUTING.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from nsyscomm import schema

Column = tuple[str, str, str]  # name, SQL type, what it holds


@dataclass(frozen=True)
class Table:
    """One per-report table of an Extract."""

    name: str  # the Extract's field
    columns: tuple[Column, ...]
    # the table of the job's database combine makes of every report's rows, a report column
    # first; None: read otherwise (the calls, through nsyscomm.combine.calls.JobCalls)
    job_table: str | None = None
    arrow: bool = False  # the Extract holds it as an Arrow table (else pandas)
    stacked_in_arrow: bool = False  # combine stacks the reports' rows in Arrow (tables of many rows)
    reader_only: tuple[str, ...] = ()  # columns the job table leaves out
    op_from_api: bool = False  # an empty op is filled from the api name, as the calls' are
    # a table of the reports that have this one at all: absent is not empty (a report without an
    # OS-runtime trace is not one where no call waited)
    reports_table: str | None = None
    # combine copies it on a cursor of its own while it goes on (a large table nothing reads at once)
    made_late: bool = False

    @property
    def column_names(self) -> list[str]:
        return [n for n, _, _ in self.columns]

    def job_columns(self) -> list[tuple[str, str]]:
        """(name, SQL type) of the job table's columns: report first, then every column the job keeps."""
        return [("report", "VARCHAR")] + [(n, t) for n, t, _ in self.columns if n not in self.reader_only]

    def job_select(self) -> str:
        """The SELECT list that types the stacked rows as the job table: each of job_columns()
        cast to its declared type."""
        return ", ".join(f'"{n}"::{t} AS "{n}"' for n, t in self.job_columns())


# the calls' own columns: the normalized table's, less what combine gives them (their report and
# the rank, local rank and host of their process)
_CALL_COLUMNS = tuple(
    (n, t, "the collectives column (nsyscomm.schema)")
    for n, t in schema.COLLECTIVES
    if n not in ("report", "rank", "local_rank", "host")
)
_HOST_INTERVAL = (
    ("pid", "BIGINT", "process"),
    ("tid", "BIGINT", "thread"),
    ("start", "BIGINT", "ns, the report's clock"),
    ("end", "BIGINT", "ns, the report's clock"),
    ("name", "VARCHAR", "what ran, its name bounded (nsyscomm.ingest.limits)"),
)

TABLES: tuple[Table, ...] = (
    Table("calls", _CALL_COLUMNS, arrow=True),
    Table(
        "markers",
        (
            ("pid", "BIGINT", "process"),
            ("rank", "INTEGER", "global rank the process claims"),
            ("local_rank", "INTEGER", "its rank on its host"),
            ("world", "INTEGER", "the world size it declares"),
            ("host", "VARCHAR", "its host name"),
        ),
    ),
    Table(
        "spans",
        (
            ("pid", "BIGINT", "process"),
            ("first_ns", "BIGINT", "its first event, the report's clock"),
            ("last_ns", "BIGINT", "its last event"),
        ),
        job_table="proc_spans",
    ),
    Table(
        "links",
        (
            ("pid", "BIGINT", "process"),
            ("device", "INTEGER", "GPU"),
            ("api", "VARCHAR", "the call made"),
            ("op", "VARCHAR", "canonical op"),
            ("bytes", "BIGINT", "message size"),
            ("metric", "VARCHAR", "the nsys GPU metric (link throughput counters)"),
            ("calls", "BIGINT", "calls summed"),
            ("covered_ns", "DOUBLE", "time the samples cover under those calls"),
            ("weighted", "DOUBLE", "the metric's values weighted by the time they cover"),
            ("max_value", "DOUBLE", "the metric's largest sample"),
        ),
        job_table="link_usage",
        reader_only=("pid", "api"),
        op_from_api=True,
    ),
    Table(
        "host_calls",
        _HOST_INTERVAL,
        job_table="host_calls",
        stacked_in_arrow=True,
        reports_table="osrt_reports",
    ),
    Table(
        "groups",
        (
            ("group", "VARCHAR", "process group"),
            ("desc", "VARCHAR", "what the wrapper's group marker says it is (a DeviceMesh dimension)"),
        ),
        job_table="group_descs",
    ),
    Table("host_ranges", _HOST_INTERVAL, job_table="host_ranges", stacked_in_arrow=True),
    Table(
        "gap_kernels",
        (
            ("pid", "BIGINT", "process of the call"),
            ("device", "INTEGER", "its GPU"),
            ("gpu_start", "BIGINT", "the call's first kernel start: which call"),
            ("name_id", "BIGINT", "a compute kernel's name, as the report's string id"),
            ("ns", "BIGINT", "time that kernel ran in the call's gap"),
            ("count", "BIGINT", "times it ran there"),
        ),
        job_table="gap_kernels",
        stacked_in_arrow=True,
        reports_table="gap_kernel_reports",
        made_late=True,
    ),
    Table(
        "gap_kernel_names",
        (("name_id", "BIGINT", "string id"), ("name", "VARCHAR", "the kernel name, bounded")),
        job_table="gap_kernel_names",
    ),
    # NCCL Inspector's Prometheus metrics (nsyscomm.ingest.inspector.prom): per-bucket means, no calls
    Table(
        "inspector_buckets",
        (
            ("node", "VARCHAR", "the node's name"),
            ("gpu", "VARCHAR", "the GPU (GPU0, ...)"),
            ("comm_name", "VARCHAR", "the communicator's name (unknown when unset)"),
            ("nranks", "INTEGER", "its ranks"),
            ("n_nodes", "INTEGER", "its nodes"),
            ("op", "VARCHAR", "canonical op"),
            ("api", "VARCHAR", "NCCL's function name"),
            ("algo_proto", "VARCHAR", "NCCL's algorithm and protocol (collectives)"),
            ("message_size", "VARCHAR", "the size bucket as the plugin labels it (134-135MB)"),
            ("bucket_lo", "BIGINT", "the bucket's lower bound, bytes per rank"),
            ("bucket_hi", "BIGINT", "its upper bound, bytes per rank"),
            ("busbw_gbs", "DOUBLE", "the bucket's bus bandwidth, geometric mean over its calls, GB/s"),
            ("exec_us", "DOUBLE", "its mean execution time, microseconds"),
        ),
        job_table="inspector_buckets",
    ),
)
TABLE: dict[str, Table] = {t.name: t for t in TABLES}


@dataclass
class Extract:
    """What one report contributes to a job: its calls and what ranks them. The table fields are
    those of TABLES, in its order (tests/extract/test_extract_tables.py holds them together)."""

    report: str
    path: Path
    calls: pa.Table  # collectives columns except rank/local_rank/host/report
    markers: pd.DataFrame  # pid, rank, local_rank, world, host
    spans: pd.DataFrame  # pid, first_ns, last_ns: the process's whole time span
    session_start_utc_ns: int | None = None
    nsys_version: str | None = None
    warnings: list[str] = field(default_factory=list)
    links: pd.DataFrame | None = None  # link-counter sums under the calls (nsyscomm.ingest.nsys.gpu_metrics)
    # OS-runtime calls of limits.HOST_MIN_NS or more; None: the report has no OS-runtime trace
    # (nsys -t osrt), so a late arrival's host time cannot be named
    host_calls: pd.DataFrame | None = None
    groups: pd.DataFrame | None = None  # the wrapper's group markers (DeviceMesh dimensions)
    # the program's own NVTX ranges of limits.HOST_MIN_NS or more: what a late rank's host was
    # doing by its own account; None: the report has no NVTX events
    host_ranges: pd.DataFrame | None = None
    # per call, the compute kernels queued ahead of it on its device since the previous call, by
    # name id (nsyscomm.ingest.nsys.gap_kernels), and the names of those ids; None: not kept
    gap_kernels: pd.DataFrame | None = None
    gap_kernel_names: pd.DataFrame | None = None
    # NCCL Inspector's Prometheus buckets (nsyscomm.ingest.inspector.prom); None: not that source
    inspector_buckets: pd.DataFrame | None = None
    # the report is a capture window (`nsyscomm run --steps A:B`: the wrapper's nsyscomm.capture
    # ranges): combine trims a step its edges cut on some rank (nsyscomm.combine.window)
    windowed: bool = False
