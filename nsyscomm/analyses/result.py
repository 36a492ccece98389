"""Result: a job's collectives and the analyses over them, the only thing views and the gate
read (docs/architecture.md, "Pipeline"). Each table is a query in sql/ over the job's database."""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import pandas as pd

from nsyscomm import duck
from nsyscomm.analyses.overlap import begin_overlap

SCHEMA_VERSION = 3  # of the JSON output contract (docs/architecture.md, "JSON contract")


# the collectives table in each rank's time order (it is stored unsorted); calls that tie on all
# of these (two communicators' at one instant) by communicator, the same every run
ORDERED = 'SELECT * FROM collectives ORDER BY rank, exec_start, cpu_start, pid, tid, seq, "group" NULLS FIRST, op'


@dataclass
class Result:
    """A job's collectives and the analyses over them."""

    con: duckdb.DuckDBPyConnection
    reports: list[str]
    warnings: list[str] = field(default_factory=list)
    by_caller: bool = False
    nccl_logs: list = field(default_factory=list)  # nsyscomm.ingest.nccl_log.NcclLog, from --nccl-log
    reference: pd.DataFrame | None = None  # nccl-tests busbw curve from those logs
    overlap_parts: Future | None = None  # of nsyscomm.analyses.overlap.parts: begun by combine()
    _prefetched: dict = field(default_factory=dict, init=False, repr=False)  # (name, params) -> Future
    op_trace: tuple | None = None  # (ops, meta) of a per-op what-if trace input
    sources: list = field(default_factory=list)  # the input files (the flight records lie beside them)
    skipped: list = field(default_factory=list)  # (file, why): the files of input folders not read
    selection: object = None  # nsyscomm.combine.select.Selection: the steps and ops the job was cut to
    _reasons: dict = field(default_factory=dict, init=False, repr=False)  # section -> why withheld, or None

    @functools.cached_property
    def hang(self) -> dict:
        """Hang/desync diagnosis (nsyscomm.analyses.hang): status, blocked, mismatches."""
        from nsyscomm.analyses import hang

        return hang.diagnose(self.con, self.sources)

    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql(ORDERED)

    @property
    def collectives(self) -> pd.DataFrame:
        return duck.frame(self.con.execute(ORDERED))

    def prefetch(self, *queries: tuple[str, dict]) -> None:
        """Begin the analyses (name, parameters) a view is about to ask for, two at a time, each
        on a cursor of its own: one after the other, each of these short queries left a core
        idle for part of its time."""
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nsyscomm-query")

        def run(name: str, params: dict):
            cur = duck.quiet(self.con.cursor())
            try:
                return cur.execute(duck.sql(name), params or None).to_arrow_table()
            finally:
                cur.close()

        for name, params in queries:
            key = _query_key(name, params)
            if key not in self._prefetched:
                self._prefetched[key] = pool.submit(run, name, params)
        pool.shutdown(wait=False)

    def _query(self, name: str, **params) -> pd.DataFrame:
        ahead = self._prefetched.get(_query_key(name, params))
        if ahead is not None:
            return duck.arrow_frame(ahead.result())
        return duck.frame(self.con.execute(duck.sql(name), params or None))

    # --- the invariants (nsyscomm.analyses.invariants): an analysis that breaks one is withheld ---
    def _reason(self, section: str) -> str | None:
        """Why a section is withheld (None: its figures keep every invariant), checked once."""
        if section not in self._reasons:
            self._reasons[section] = self._check(section)
        return self._reasons[section]

    def _check(self, section: str) -> str | None:
        from nsyscomm.analyses import invariants as inv

        if section == "summary":
            return inv.doc_reason(
                "summary", self._query("summary", by_caller=False).to_dict("records"), self.capture_ms
            )
        if section == "ranks":
            return inv.ranks_reason(self._query("ranks"))
        if section == "late":
            return inv.late_reason(self._late_raw, self._query("ranks"))
        if section == "steps":
            return inv.doc_reason("steps", self._query("steps").to_dict("records"), self.capture_ms)
        if section == "steps_late":
            return inv.steps_late_reason(self._query("steps"), self._query("step_spans"))
        if section == "top_skew":
            return inv.doc_reason("top_skew", self._query("top_skew", limit=10).to_dict("records"), self.capture_ms)
        if section == "dimensions":
            return inv.dimensions_reason(self._dimensions_raw, self._query("ranks"))
        a = self._what_if_raw
        if section == "what_if":
            return inv.what_if_reason(a["what_if"], self.capture_ms)
        if section == "attribution":
            return inv.attribution_reason(a["attribution"])
        if section == "straggler_model":
            return inv.straggler_model_reason(a.get("straggler_model"))
        raise KeyError(section)

    @property
    def withheld(self) -> dict[str, str]:
        """Every analysis withheld, section -> the reason (empty: the whole output keeps its
        invariants); the views print these lines in place of the figures."""
        from nsyscomm.analyses.invariants import SECTIONS

        return {k: why for k in SECTIONS if (why := self._reason(k)) is not None}

    def _unless(self, section: str, df: pd.DataFrame) -> pd.DataFrame:
        return df.iloc[0:0] if self._reason(section) is not None else df

    @property
    def summary(self) -> pd.DataFrame:
        return self.summarize(by_caller=self.by_caller)

    def summarize(self, by_caller: bool = False) -> pd.DataFrame:
        return self._unless("summary", self._query("summary", by_caller=by_caller))

    @property
    def ranks(self) -> pd.DataFrame:
        return self._unless("ranks", self._query("ranks"))

    @property
    def rank_ops(self) -> pd.DataFrame:
        """mpitrace's per-rank table by routine: rank, op, calls, bytes, time_ms, wait_ms
        (sql/rank_ops.sql)."""
        return self._query("rank_ops")

    @functools.cached_property
    def capture_ms(self) -> float | None:
        """The job's capture: from its first process's first event to its last one's last event
        (rank_spans; None where the job has no such spans). Asked by every invariant check: read
        once, the job's tables being made before any analysis."""
        try:
            row = self.con.execute("SELECT (max(last_ns) - min(first_ns)) / 1e6 FROM rank_spans").fetchone()
        except duckdb.Error:
            return None
        return float(row[0]) if row and row[0] is not None else None

    @property
    def skew_ranks(self) -> pd.DataFrame:
        return self._query("skew")

    @property
    def steady_ranks(self) -> pd.DataFrame:
        """Per rank, the figures outside warm-up steps, setup calls and first meetings: rank,
        calls, comm_ms, wait_ms, avg_arrival_delay_ms (sql/steady_ranks.sql; what the gate compares)."""
        return self._query("steady_ranks", warmup=",".join(str(int(s)) for s in sorted(self.warmup["steps"])))

    @property
    def skew(self) -> dict:
        """Arrival skew per rank, and the straggler: the rank whose late arrivals kept the others
        waiting longest, the one the Diagnosis names first (late_ranks), in every view."""
        per = self.skew_ranks
        instances = int(
            duck.scalar(
                self.con,
                "SELECT count(*) FROM logical_collectives WHERE participants >= 2 AND NOT setup AND NOT first_meet "
                "AND NOT shadow",
            )
        )
        order = self.late_ranks
        caused = dict(zip(order["rank"].astype(int), order["caused_wait_ms"].astype(float)))
        return {
            "straggler_rank": int(order["rank"].iloc[0]) if len(order) else None,
            "straggler_wait_caused_ms": float(order["caused_wait_ms"].iloc[0]) if len(order) else None,
            "instances": instances,
            "per_rank": [
                {
                    "rank": int(r.rank),
                    "late_count": int(r.late_count),
                    "avg_arrival_delay_ms": float(r.avg_arrival_delay_ms),
                    "wait_ms": float(r.wait_ms),
                    "caused_wait_ms": caused.get(int(r.rank), 0.0),
                }
                for r in per.itertuples()
            ],
        }

    @property
    def overlap(self) -> pd.DataFrame:
        """Exposed communication per rank (step NaN) and per rank and step: ns of NCCL kernel time
        that no compute kernel on the same device hides. Empty for CPU-only jobs."""
        if self.overlap_parts is None:
            self.overlap_parts = begin_overlap(self.con)
        self.con.register("overlap_parts", self.overlap_parts.result())
        try:
            df = self._query("overlap")
        finally:
            self.con.unregister("overlap_parts")
        df["exposed_pct"] = (100.0 * df["exposed_ns"] / df["comm_busy_ns"]).where(df["comm_busy_ns"] > 0)
        return df

    @property
    def steps(self) -> pd.DataFrame:
        """Per step (sql/steps.sql); its lateness columns empty where they are withheld."""
        df = self._unless("steps", self._query("steps"))
        if self._reason("steps_late") is not None and len(df):
            df = df.assign(late_rank=pd.NA, late_ms=float("nan"))
        return df

    @property
    def step_rows(self) -> pd.DataFrame:
        """The per-step table every format prints: sql/steps.sql's rows, with the step's exposed
        communication summed over ranks (exposed_ms, from Result.overlap; NULL where no call of the
        step could be set against compute) and whether it is a warm-up step (warmup)."""
        st = self.steps
        ov = self.overlap
        per_step = ov[(ov["scope"] == "step") & ov["step"].notna()] if not ov.empty else ov
        exposed = per_step.groupby("step")["exposed_ns"].sum(min_count=1) / 1e6 if not per_step.empty else None
        warm = set(self.warmup["steps"]) if not st.empty else set()
        return st.assign(
            exposed_ms=st["step"].map(exposed) if exposed is not None else None,
            warmup=[int(s) in warm for s in st["step"]],
        )

    # --- what the statistics set aside (docs/architecture.md, "Setup calls and warm-up steps") ---
    @functools.cached_property
    def setup(self) -> pd.DataFrame:
        """The logical collectives that set up their communicator (sql/setup.sql): op, bytes, group,
        step, caller, participants, how, took_ms, init_ms. Left out of every statistic."""
        have = duck.scalar(
            self.con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'setup_ids' AND NOT temporary"
        )
        if not have:
            return pd.DataFrame(
                columns=["op", "bytes", "group", "step", "caller", "participants", "how", "took_ms", "init_ms"]
            )
        return self._query("setup")

    @functools.cached_property
    def joined(self) -> pd.DataFrame:
        """The ranks that joined early under torch.distributed.algorithms.Join (sql/joined.sql): rank,
        step, shadow_calls, first_step, last_step, shadow_ms. Their shadow collectives count no
        lateness, skew or what-if saving."""
        return self._query("joined")

    @functools.cached_property
    def startup(self) -> dict:
        """The collectives that are their ranks' first, whose skew is start-up (nsyscomm.analyses.warmup)."""
        from nsyscomm.analyses import warmup

        return warmup.startup(self.con)

    @functools.cached_property
    def warmup(self) -> dict:
        """The warm-up steps and why (nsyscomm.analyses.warmup): {steps, per_step, rule}."""
        from nsyscomm.analyses import warmup

        if not self.has_steps:
            return {"steps": [], "per_step": [], "rule": warmup.RULE}
        return warmup.warmup(self.con)

    @property
    def size_histogram(self) -> pd.DataFrame:
        return self._query("size_histogram")

    @property
    def unmatched(self) -> pd.DataFrame:
        return self._query("unmatched")

    def top_skew(self, limit: int = 10) -> pd.DataFrame:
        return self._unless("top_skew", self._query("top_skew", limit=limit))

    def vs_reference(self, by_caller: bool = False) -> pd.DataFrame:
        """Summary rows beside the nccl-tests reference busbw at the same size (empty without a curve)."""
        if self.reference is None or self.reference.empty:
            return pd.DataFrame()
        from nsyscomm.analyses.vs_reference import compare

        out = compare(self.summarize(by_caller=by_caller), self.reference)
        return out[out["ref_busbw_GBps"].notna()]

    @property
    def inspector_buckets(self) -> pd.DataFrame:
        """NCCL Inspector's Prometheus buckets (.prom files): per op, communicator size, size
        bucket and algorithm/protocol, the bus bandwidth and execution time means (empty otherwise)."""
        return self._query("inspector_buckets")

    @property
    def link_metrics(self) -> pd.DataFrame:
        """NVLink / PCIe / C2C counters during collectives, per op, size and nsys metric (reports
        captured with --gpu-metrics-devices; empty otherwise)."""
        return self._query("link_metrics")

    # --- why late (nsyscomm.analyses.late) ---
    @functools.cached_property
    def _late_raw(self) -> pd.DataFrame:
        from nsyscomm.analyses import late

        return late.late_arrivals(self.con)

    @property
    def late(self) -> pd.DataFrame:
        """Late arrivals and their causes: rank, group, seq, op, step, caller, delay_ms, cause,
        detail, root_rank (nsyscomm.analyses.late); none where they are withheld."""
        return self._unless("late", self._late_raw)

    @functools.cached_property
    def late_ranks(self) -> pd.DataFrame:
        """The ranks with late arrivals, the one that cost the others the most waiting first:
        rank, late_count, delay_ms, caused_wait_ms (nsyscomm.analyses.late.straggler_order)."""
        from nsyscomm.analyses import late

        arrivals = self.late
        caused = self._query("caused_wait") if len(arrivals) else pd.DataFrame(columns=["logical_id", "caused_ns"])
        return late.straggler_order(arrivals, caused)

    @property
    def late_by_rank(self) -> pd.DataFrame:
        """Late arrivals per (rank, cause, caller): count and total delay_ms, largest first."""
        from nsyscomm.analyses import late

        return late.by_rank_and_cause(self.late)

    @functools.cached_property
    def _dimensions_raw(self) -> pd.DataFrame:
        from nsyscomm.analyses import dimensions

        return dimensions.dimensions(self.con)

    @property
    def dimensions(self) -> pd.DataFrame:
        """Per communicator: its parallelism dimension (dp/tp/pp/ep/cp/world/unknown), how it was
        told, and its comm, wait and exposed ms (nsyscomm.analyses.dimensions)."""
        return self._unless("dimensions", self._dimensions_raw)

    @property
    def step_breakdown(self) -> pd.DataFrame:
        """Per step, the mean rank's waiting and exposed transfer in ms (sql/step_breakdown.sql)."""
        return self._query("step_breakdown")

    @functools.cached_property
    def osrt_traced(self) -> bool:
        """Whether every report with calls had nsys's OS-runtime trace (host causes can be named)."""
        return bool(
            duck.scalar(
                self.con,
                "SELECT count(*) = 0 FROM (SELECT DISTINCT report FROM collectives) c "
                "WHERE report NOT IN (SELECT report FROM osrt_reports)",
            )
        )

    # --- what-if replay (nsyscomm.analyses.whatif) ---
    @functools.cached_property
    def _what_if_raw(self) -> dict:
        from nsyscomm.analyses import whatif_result

        return whatif_result.of_result(self)

    @functools.cached_property
    def what_if_analysis(self) -> dict:
        """what_if rows, attribution rows and the model's notes (computed once); a part that
        breaks an invariant emptied (its reason in Result.withheld)."""
        a = dict(self._what_if_raw)
        if self._reason("what_if") is not None:
            a["what_if"] = []
        if self._reason("attribution") is not None:
            a["attribution"] = []
        if self._reason("straggler_model") is not None:
            a.pop("straggler_model", None)
        return a

    @property
    def what_if(self) -> list[dict]:
        """Scenarios ranked by ms saved: {scenario, saved_ms, step_ms_before, step_ms_after, slowdown, ...}."""
        return self.what_if_analysis["what_if"]

    @property
    def attribution(self) -> list[dict]:
        """{by, key, slowdown}: the slowdown each rank / op (/ dp_rank, stage, optype) causes."""
        return self.what_if_analysis["attribution"]

    # --- what the views draw (the views run no SQL of their own) ---
    @property
    def arrival_matrix(self) -> pd.DataFrame:
        """Every rank's arrival delay and wait at every shared logical collective (sql/arrival_matrix.sql)."""
        return self._query("arrival_matrix")

    @property
    def n_logical(self) -> int:
        return int(duck.scalar(self.con, "SELECT count(*) FROM logical_collectives"))

    @property
    def has_steps(self) -> bool:
        return bool(duck.scalar(self.con, "SELECT count(*) FROM collectives WHERE step IS NOT NULL"))

    def timeline_calls(self, steps: tuple[int | None, int | None] | None = None) -> pd.DataFrame:
        """The calls with their logical collective's figures, in each rank's time order; only
        steps [lo, hi) when given (sql/timeline_calls.sql)."""
        lo, hi = steps if steps is not None else (None, None)
        return duck.frame(
            self.con.execute(duck.sql("timeline_calls"), {"by_step": steps is not None, "lo": lo, "hi": hi})
        )

    @functools.cached_property
    def timed_on(self) -> str | None:
        """Where the job's calls were timed: "device" when any call has GPU kernels (NCCL), "host"
        when none has (gloo, MPI: the host's scheduler is in every figure), None without calls."""
        has = duck.scalar(self.con, "SELECT bool_or(gpu_start IS NOT NULL) FROM collectives")
        return None if has is None else ("device" if has else "host")

    @property
    def n_calls(self) -> int:
        return int(duck.scalar(self.con, "SELECT count(*) FROM collectives"))


def _query_key(name: str, params: dict) -> tuple:
    return name, tuple(sorted(params.items()))
