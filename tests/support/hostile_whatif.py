"""What-if traces (the OSDI'25 artifact's ``trace-<name>.parquet`` + ``meta-<name>.yaml``) of the
newer formats' hostile corpus (tests/support/hostile_newer.py): a valid 2 x 2 job built by
construction and every family of broken or hostile trace and meta made from it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.hostile_newer import OK, case

META = {"trial_name": "T", "run_id": 0, "dp_size": 2, "dsp_size": 1, "pp_size": 2, "tp_size": 1, "vpp_size": 1}


def whatif_rows(steps: int = 2, micro: int = 2) -> dict[str, list]:
    """A 2 (dp) x 2 (stage) job in the artifact's format, GPipe-scheduled: per step, each stage
    runs its microbatches' forward computes (stage 0 sends each to stage 1), then the backward
    ones in reverse (stage 1 sends each back), then reduces its gradients over the dp ranks and
    steps the optimizer. Times in seconds from the step's start; every op 10 ms."""
    cols: dict[str, list] = {k: [] for k in ("dp_rank", "stage", "rank", "step", "optype")}
    cols |= {k: [] for k in ("start_ts", "duration", "seq_id", "mc", "mb_id", "gmc")}

    def op(dp, stage, step, optype, t, seq, mb=-1):
        for k, v in zip(cols, (dp, stage, 2 * dp + stage, step, optype, t * 0.01, 0.01, seq, 0, mb, 0)):
            cols[k].append(v)

    for step in range(1, steps + 1):
        for dp in range(2):
            for stage in range(2):
                t = stage  # stage 1 starts one op later: it waits for stage 0's first send
                for m in range(micro):
                    if stage == 1:
                        op(dp, 1, step, "forward-recv", t, m, m)
                        t += 1
                    op(dp, stage, step, "forward-compute", t, m, m)
                    t += 1
                    if stage == 0:
                        op(dp, 0, step, "forward-send", t, m, m)
                        t += 1
                for m in range(micro):
                    if stage == 0:
                        op(dp, 0, step, "backward-recv", t, m, m)
                        t += 1
                    op(dp, stage, step, "backward-compute", t, m, m)
                    t += 1
                    if stage == 1:
                        op(dp, 1, step, "backward-send", t, m, m)
                        t += 1
                op(dp, stage, step, "grads-reduce-scatter", t, 0)
                op(dp, stage, step, "optimizer", t + 1, 0)
    return cols


def write_whatif(d: Path, rows: dict | None = None, meta: dict | str | None = None, name: str = "T", **pq) -> list[str]:
    """trace-<name>.parquet and meta-<name>.yaml in d (the rows and meta given, else the job's)."""
    import pyarrow as pa
    import pyarrow.parquet as papq
    import yaml

    table = rows if isinstance(rows, pa.Table) else pa.table(rows if rows is not None else whatif_rows())
    papq.write_table(table, d / f"trace-{name}.parquet", **pq)
    text = meta if isinstance(meta, str) else yaml.safe_dump(META if meta is None else meta)
    (d / f"meta-{name}.yaml").write_text(text)
    return [str(d / f"trace-{name}.parquet")]


def _with(column: str, values) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        rows = whatif_rows()
        n = len(rows[column])
        rows[column] = values(n) if callable(values) else [values] * n
        return write_whatif(d, rows)

    return build


def _one(column: str, value) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        rows = whatif_rows()
        rows[column] = [value, *rows[column][1:]]
        return write_whatif(d, rows)

    return build


@case("whatif", "whatif_valid", OK)
def _valid(d: Path) -> list[str]:
    return write_whatif(d)


for _col, _val, _label in (
    ("duration", "0.01", "duration_string"),
    ("step", "1", "step_string"),
    ("rank", [0], "rank_list"),
    ("start_ts", [0.0, 1.0], "start_list"),
):
    case("whatif", f"whatif_{_label}")(_with(_col, _val))
for _col, _val, _label in (
    ("rank", None, "rank_null"),
    ("stage", float("nan"), "stage_nan"),
    ("step", float("nan"), "step_nan"),
    ("dp_rank", -1, "dp_rank_negative"),
    ("rank", 1 << 40, "rank_huge"),
    ("step", 1 << 62, "step_huge"),
    ("seq_id", 1 << 40, "seq_huge"),
    ("start_ts", float("inf"), "start_infinite"),
    ("duration", float("inf"), "duration_infinite"),
    ("duration", 1e300, "duration_huge"),
    ("start_ts", -1e300, "start_huge_negative"),
    ("duration", float("nan"), "duration_nan"),
    ("optype", None, "optype_null"),
):
    case("whatif", f"whatif_{_label}")(_one(_col, _val))


@case("whatif", "whatif_steps_overflow")
def _steps_overflow(d: Path) -> list[str]:
    """Every step 9e6 s long (each value in range): end to end, their ns would overflow 64 bits."""
    rows = whatif_rows(steps=2000, micro=1)
    rows["duration"] = [9e6] * len(rows["duration"])
    return write_whatif(d, rows)


@case("whatif", "whatif_pp_contradicts")
def _pp_contradicts(d: Path) -> list[str]:
    """The meta says 1 stage; the trace has 2 (as pp_size 3 for 4 stages would: a cycle)."""
    return write_whatif(d, meta={**META, "pp_size": 1})


@case("whatif", "whatif_dp_contradicts")
def _dp_contradicts(d: Path) -> list[str]:
    return write_whatif(d, meta={**META, "dp_size": 1})


@case("whatif", "whatif_meta_huge_int")
def _meta_huge_int(d: Path) -> list[str]:
    return write_whatif(d, meta="dp_size: " + "9" * 400 + "\npp_size: 2\n")


@case("whatif", "whatif_meta_5000_digits")
def _meta_digits(d: Path) -> list[str]:
    return write_whatif(d, meta="dp_size: " + "9" * 5000 + "\npp_size: 2\n")


@case("whatif", "whatif_meta_infinite")
def _meta_inf(d: Path) -> list[str]:
    return write_whatif(d, meta="dp_size: .inf\npp_size: 2\n")


@case("whatif", "whatif_meta_product")
def _meta_product(d: Path) -> list[str]:
    """Each size in range, their product past any job's ranks (its worker ids overflow)."""
    return write_whatif(d, meta=f"dp_size: {1 << 24}\npp_size: {1 << 24}\n")


@case("whatif", "whatif_meta_nested")
def _meta_nested(d: Path) -> list[str]:
    return write_whatif(d, meta="dp_size: 2\npp_size: 2\nx: " + "[" * 5000 + "]" * 5000 + "\n")


@case("whatif", "whatif_meta_list")
def _meta_list(d: Path) -> list[str]:
    return write_whatif(d, meta="- dp_size\n- 2\n")


@case("whatif", "whatif_meta_billion_laughs", heavy=True)
def _laughs(d: Path) -> list[str]:
    """A few hundred bytes whose aliases expand to 10**9 strings (a 379-byte meta)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 10)}]")
    lines.append("dp_size: *i\npp_size: 2")
    return write_whatif(d, meta="\n".join(lines) + "\n")


def _repeated_table(d: Path, table, times: int, **pq) -> list[str]:
    """A trace of `times` copies of table's rows, written one row group at a time (the builder
    holds one copy)."""
    import pyarrow.parquet as papq

    with papq.ParquetWriter(d / "trace-T.parquet", table.schema, **pq) as w:
        for _ in range(times):
            w.write_table(table)
    (d / "meta-T.yaml").write_text("dp_size: 2\npp_size: 2\n")
    return [str(d / "trace-T.parquet")]


@case("whatif", "whatif_20m_rows", heavy=True)
def _rows_20m(d: Path) -> list[str]:
    """20M rows of one value each (zstd: under a megabyte) that materialize into gigabytes."""
    import pyarrow as pa

    one = whatif_rows(steps=1, micro=1)
    table = pa.table({k: pa.repeat(pa.scalar(v[0]), 1_000_000) for k, v in one.items()})
    return _repeated_table(d, table, 20, compression="zstd")


@case("whatif", "whatif_long_optypes", heavy=True)
def _long_optypes(d: Path) -> list[str]:
    """400 op types of 1 MB each, plain-encoded (zstd: a few kB on disk; 400 MB as strings)."""
    import pyarrow as pa

    one = whatif_rows(steps=1, micro=1)
    table = pa.table({k: pa.repeat(pa.scalar(v[0]), 100) for k, v in one.items() if k != "optype"})
    table = table.append_column("optype", pa.array(["x" * (1 << 20) + str(i) for i in range(100)]))
    return _repeated_table(d, table, 4, compression="zstd", use_dictionary=False)


@case("whatif", "whatif_long_optype_dictionary")
def _long_optype_dict(d: Path) -> list[str]:
    """One op type of 100,000 characters, dictionary-encoded (small in memory, still no name)."""
    rows = whatif_rows()
    rows["optype"] = ["forward-" + "x" * 100_000] + rows["optype"][1:]
    return write_whatif(d, rows)
