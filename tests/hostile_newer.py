"""The hostile corpus of the newer formats (issue 35), built by construction: what-if traces
(Parquet + meta YAML) and Kineto traces here; other formats append their families to REGISTRY.

REGISTRY is a list of Case(family, name, build, expect, commands, heavy): build(folder) writes
the case's files into an empty folder and returns the inputs to give on the command line;
expect is ERROR (every command exits 2 with one line naming an input file) or OK (exit 0), from
how the case was built, never from nsyscomm's output. A heavy case (one built to exhaust memory
or time) runs in a child process under a memory cap (RLIMIT_AS) and a time limit; the others run
in this process through click's CliRunner. tests/test_hostile_newer.py runs it in CI;
`python -m tests.hostile_newer` prints the totals the README quotes.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tests.conftest import ROOT
from tests.hostile_corpus import kineto_trace, snapshot

ERROR, OK = "error", "ok"
ALL = ("summarize", "json", "report", "trace", "export")
READ = ("summarize", "json", "report", "trace")  # the commands that read a source only
MEMORY_CAP = 4 << 30  # address space of a heavy case's process (a normal start needs about 3 GB)
CASE_TIMEOUT_S = 150  # a heavy case's commands together; past it the case counts as a hang
LIGHT_TIMEOUT_S = 400  # half the light cases, in one process


class Case(NamedTuple):
    family: str
    name: str
    build: Callable[[Path], list[str]]
    expect: str = ERROR
    commands: tuple[str, ...] = ALL
    heavy: bool = False
    env: tuple[tuple[str, str], ...] = ()  # variables set for a heavy case's process


REGISTRY: list[Case] = []


def case(
    family: str,
    name: str,
    expect: str = ERROR,
    commands: tuple[str, ...] = ALL,
    heavy: bool = False,
    env: tuple[tuple[str, str], ...] = (),
):
    """Register the decorated builder as a case."""

    def add(fn: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
        REGISTRY.append(Case(family, name, fn, expect, commands, heavy, env))
        return fn

    return add


# ---------------------------------------------------------------------------- what-if traces

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
    """The meta says 1 stage; the trace has 2 (the issue's pp_size 3 for 4 stages: a cycle)."""
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
    """A few hundred bytes whose aliases expand to 10**9 strings (the issue's 379-byte meta)."""
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


# ---------------------------------------------------------------------------- Kineto traces

_KINETO_READ = READ  # export needs training steps, which a profiler trace does not record
# a Kineto bomb is refused while the trace is read, the same for every command: the heavy ones
# (each seconds of parsing before the refusal) run two commands, one per view family
_KINETO_HEAVY = ("summarize", "json")


def _kineto(d: Path, trace: dict | str, name: str = "rank0.json") -> list[str]:
    p = d / name
    p.write_text(trace if isinstance(trace, str) else json.dumps(trace))
    return [str(p)]


@case("kineto", "kineto_valid", OK, _KINETO_READ)
def _k_valid(d: Path) -> list[str]:
    return _kineto(d, kineto_trace())


for _label, _dist in (
    ("dist_list", [0, 2]),
    ("dist_string", "rank 0"),
    ("rank_infinite", {"rank": float("inf"), "world_size": 2}),
    ("rank_huge", {"rank": 10**30, "world_size": 2}),
    ("rank_negative", {"rank": -3, "world_size": 2}),
    ("world_string", {"rank": 0, "world_size": "two"}),
):
    case("kineto", f"kineto_{_label}", ERROR, _KINETO_READ)(
        lambda d, _dist=_dist: _kineto(d, {**kineto_trace(), "distributedInfo": _dist})
    )


def _corr(value) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        t = kineto_trace()
        t["traceEvents"][2]["args"]["correlation"] = value
        t["traceEvents"][3]["args"]["correlation"] = value
        return _kineto(d, t)

    return build


case("kineto", "kineto_correlation_list", ERROR, _KINETO_READ)(_corr([7]))
case("kineto", "kineto_correlation_object", ERROR, _KINETO_READ)(_corr({"a": 7}))


@case("kineto", "kineto_pid_huge", ERROR, _KINETO_READ)
def _k_pid(d: Path) -> list[str]:
    t = kineto_trace()
    for e in t["traceEvents"][:3]:
        e["pid"] = 10**30
    return _kineto(d, t)


@case("kineto", "kineto_nelems_overflow", ERROR, _KINETO_READ)
def _k_nelems(d: Path) -> list[str]:
    """Message counts in range one by one, their size in bytes past 64 bits."""
    t = kineto_trace()
    for e in (t["traceEvents"][0], t["traceEvents"][3]):
        e["args"]["In msg nelems"] = e["args"]["Out msg nelems"] = 1 << 62
    return _kineto(d, t)


def gzip_repeat(path: Path, head: bytes, block: bytes, times: int, tail: bytes) -> Path:
    """A gzip file of head + block x times + tail, each piece compressed once: the block's
    deflate output ends at a full flush (no back-references past it), so it repeats as is."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    h = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    b = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    t = c.compress(tail) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(times):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = (len(head) + len(block) * times + len(tail)) & 0xFFFFFFFF
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + h)
        for _ in range(times):
            f.write(b)
        f.write(t + struct.pack("<II", crc, size))
    return path


@case("kineto", "kineto_gzip_one_string", ERROR, _KINETO_HEAVY, heavy=True)
def _k_string(d: Path) -> list[str]:
    """A small gzip file holding one event whose name is an 800 MB string."""
    head = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "name": "'
    return [str(gzip_repeat(d / "rank0.json.gz", head, b"a" * (1 << 20), 800, b'"}]}'))]


@case("kineto", "kineto_gzip_3m_kernels", ERROR, _KINETO_HEAVY, heavy=True)
def _k_kernels(d: Path) -> list[str]:
    """A small gzip file that expands to 3M NCCL kernel events."""
    t = kineto_trace()
    head = b'{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": ['
    head += b",".join(json.dumps(e).encode() for e in t["traceEvents"][:3])
    block = (b"," + json.dumps(t["traceEvents"][3]).encode()) * 10_000
    return [str(gzip_repeat(d / "rank0.json.gz", head, block, 300, b"]}"))]


@case("kineto", "kineto_gzip_whitespace", ERROR, _KINETO_HEAVY, heavy=True)
def _k_space(d: Path) -> list[str]:
    """A gzip file of 4 GB of blanks between two events (a ratio no real trace has)."""
    t = json.dumps(kineto_trace()).encode()
    head, tail = t.split(b'"traceEvents": [', 1)
    head += b'"traceEvents": ['
    return [str(gzip_repeat(d / "rank0.json.gz", head, b" " * (1 << 20), 4096, tail))]


@case("kineto", "kineto_gzip_within_ratio", ERROR, _KINETO_HEAVY, heavy=True)
def _k_ratio(d: Path) -> list[str]:
    """300k NCCL kernels with distinct correlation ids and times, gzip at level 1: a ratio
    within what real traces have, so the kept events' budget is what must refuse it."""
    t = kineto_trace()
    p = d / "rank0.json.gz"
    k = t["traceEvents"][3]
    one = "," + json.dumps({**k, "ts": -1, "args": {**k["args"], "correlation": -2}})
    one = one.replace('"ts": -1', '"ts": %d').replace('"correlation": -2', '"correlation": %d')
    with gzip.open(p, "wt", compresslevel=1) as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [')
        f.write(",".join(json.dumps(e) for e in t["traceEvents"][:3]))
        f.write("".join(one % (2000 + i, 100 + i) for i in range(300_000)))
        f.write("]}")
    return [str(p)]


@case(
    "kineto", "kineto_plain_kernels_budget", ERROR, _KINETO_READ, heavy=True, env=(("NSYSCOMM_MEMORY_LIMIT", "100MB"),)
)
def _k_plain(d: Path) -> list[str]:
    """50k NCCL kernels with distinct correlation ids in plain JSON (no inflation to refuse):
    their memory is over the budget of a 100MB --memory-limit, which must say so."""
    t = kineto_trace()
    p = d / "rank0.json"
    with open(p, "w") as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [')
        f.write(",".join(json.dumps(e) for e in t["traceEvents"][:3]))
        k = t["traceEvents"][3]
        for i in range(50_000):
            f.write("," + json.dumps({**k, "ts": 2000 + i, "args": {**k["args"], "correlation": 100 + i}}))
        f.write("]}")
    return [str(p)]


# ---------------------------------------------------------------------------- running it


def argv(command: str, inputs: list[str], out: Path) -> list[str]:
    return {
        "summarize": ["summarize", "--no-cache", *inputs],
        "json": ["summarize", "--no-cache", "--format", "json", *inputs],
        "report": ["report", "-o", str(out / "r.html"), *inputs],
        "trace": ["trace", "-o", str(out / "t.json"), *inputs],
        "export": ["export", "--format", "whatif", str(out / "export"), *inputs],
    }[command]


def run_case(c: Case, inputs: list[str], out: Path) -> dict:
    """Every command of the case in this process (click's CliRunner): what went wrong."""
    from click.testing import CliRunner

    from nsyscomm.cli import main

    out.mkdir(parents=True, exist_ok=True)
    watched = Path(inputs[0]).parent
    before = snapshot(watched)
    names = {p.name for p in watched.iterdir()}
    res: dict = {"case": c.name, "family": c.family, "runs": 0, "one_line_errors": 0, "failures": []}
    for cmd in c.commands:
        r = CliRunner().invoke(main, argv(cmd, inputs, out))
        res["runs"] += 1
        text = r.output
        if "Traceback" in text or "internal error" in text or (r.exception and not isinstance(r.exception, SystemExit)):
            res["failures"].append(f"{cmd}: internal error or traceback: {text[-300:]!r}")
            res["internal"] = res.get("internal", 0) + 1
        elif r.exit_code == 2:
            lines = [x for x in r.stderr.splitlines() if x.strip()]
            if len(lines) == 1 and lines[0].startswith("nsyscomm: error:") and any(n in lines[0] for n in names):
                res["one_line_errors"] += 1
            else:
                res["failures"].append(f"{cmd}: exit 2 without one line naming the file: {r.stderr[:300]!r}")
        want = 2 if c.expect == ERROR else 0
        if r.exit_code != want:
            res["failures"].append(f"{cmd}: exit {r.exit_code}, expected {want}: {r.output[-300:]!r}")
        after = snapshot(watched)
        if after != before:
            res["failures"].append(f"{cmd}: files beside the input changed")
            before = after
    return res


def peak_mb() -> int:
    """This process's peak resident memory in MB (VmHWM: of its own address space since exec;
    ru_maxrss would count the RSS of the parent it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _child(names: list[str], folder: Path) -> None:
    """In a child process: the named cases (built under folder), one JSON line each as it ends."""
    by_name = {c.name: c for c in REGISTRY}
    for name in names:
        inputs = json.loads((folder / "args" / f"{name}.json").read_text())
        r = run_case(by_name[name], inputs, folder / "out" / name)
        r["peak_mb"] = peak_mb()
        print(json.dumps(r), flush=True)


def run_group(cases: list[Case], folder: Path, env: dict, timeout: float) -> list[dict]:
    """The cases, built under folder, in one child process under MEMORY_CAP and a time limit.
    A case that did not report is a hang (time ran out during it) or a failure (the process
    died: out of memory, a crash); the ones after it did not run."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    code = "import sys; from pathlib import Path; import tests.hostile_newer as H; H._child(sys.argv[2:], Path(sys.argv[1]))"
    names = [c.name for c in cases]
    log = folder / "out" / f"{names[0]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    timed_out = False
    with open(log, "w+") as so:
        p = subprocess.Popen(
            [sys.executable, "-c", code, str(folder), *names],
            stdout=so,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            preexec_fn=cap,
        )
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            timed_out = True
        so.seek(0)
        text = so.read()
    done = {}
    for line in text.splitlines():
        if line.startswith('{"case"'):
            r = json.loads(line)
            done[r["case"]] = r
    out = []
    first = True  # the first case that did not report is the one the process ended in
    for c in cases:
        if c.name in done:
            out.append(done[c.name])
            continue
        r = {"case": c.name, "family": c.family, "runs": 0}
        if first and timed_out:
            r["hang"] = True
        else:
            r["failures"] = [f"runner died (exit {p.returncode}): {text[-400:]!r}" if first else "not run"]
        out.append(r)
        first = False
    return out


TOTALS = ("cases", "command runs", "exit-2 one-liners", "internal errors", "hangs", "other failures")


def run_corpus(d: Path, families: tuple[str, ...] | None = None) -> tuple[dict, list[dict]]:
    """Build every case of REGISTRY (of these families) in folder d and run its commands, two
    child processes at a time, each under MEMORY_CAP: the light cases in two processes, each
    heavy case in its own (its peak memory its own). (totals, per case)."""
    from concurrent.futures import ThreadPoolExecutor

    env = {
        **os.environ,
        "NSYSCOMM_CACHE_DIR": str(d / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("NSYSCOMM_MEMORY_LIMIT", None)  # the default budget, unless a case sets one
    chosen = [c for c in REGISTRY if not families or c.family in families]
    for c in chosen:
        folder = d / "in" / c.name
        folder.mkdir(parents=True)
        (d / "args").mkdir(exist_ok=True)
        (d / "args" / f"{c.name}.json").write_text(json.dumps(c.build(folder)))
    light = [c for c in chosen if not c.heavy]
    groups = [(light[i::2], env, LIGHT_TIMEOUT_S) for i in range(2) if light[i::2]]
    groups += [([c], env | dict(c.env), CASE_TIMEOUT_S) for c in chosen if c.heavy]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda g: run_group(g[0], d, g[1], g[2]), groups))
    per = [r for rs in runs for r in rs]
    heavy = {c.name for c in chosen if c.heavy}
    totals: dict = dict.fromkeys(TOTALS, 0)
    totals["cases"] = len(per)
    for r in per:
        totals["command runs"] += r.get("runs", 0)
        totals["exit-2 one-liners"] += r.get("one_line_errors", 0)
        totals["internal errors"] += r.get("internal", 0)
        totals["hangs"] += bool(r.get("hang"))
        totals["other failures"] += len(r.get("failures", [])) - r.get("internal", 0)
    worst = max((r for r in per if r["case"] in heavy and "peak_mb" in r), key=lambda r: r["peak_mb"], default=None)
    totals["peak MB (worst heavy case)"] = f"{worst['peak_mb']} ({worst['case']})" if worst else "-"
    return totals, per


if __name__ == "__main__":  # python -m tests.hostile_newer: the totals the README quotes
    import tempfile

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        totals, per = run_corpus(Path(tmp))
    for r in per:
        if r.get("failures") or r.get("hang"):
            print(r["case"], r.get("failures"), "hang" if r.get("hang") else "")
        if "peak_mb" in r and any(c.heavy and c.name == r["case"] for c in REGISTRY):
            print(f"  {r['case']}: peak {r['peak_mb']} MB")
    print(", ".join(f"{k}: {v}" for k, v in totals.items()) + f" ({time.monotonic() - t0:.0f} s)")
