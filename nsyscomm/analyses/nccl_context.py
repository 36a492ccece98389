"""Whether an NCCL_DEBUG log (`--nccl-log`) can be this job's: its ranks, nodes and NCCL version
set against the job's own. A log of another job (a 16-rank, 2-node log beside a 2-rank gloo
run) would lend its context and its nccl-tests curve to figures it never measured: one warning
line says what differs."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from nsyscomm import duck

if TYPE_CHECKING:
    import duckdb

_JOB = """SELECT max(group_size), count(DISTINCT rank), count(DISTINCT host),
                 count(*) FILTER (WHERE gpu_start IS NOT NULL OR coalesce(kernels, 0) > 0)
          FROM collectives"""


def versions(extracts: list) -> list[str]:
    """The NCCL versions the reports name (a PyTorch profiler trace's distributedInfo, read into
    its extract's `nsys_version` as 'kineto (NCCL 2.17.1)'); nsys exports name none."""
    found = (re.search(r"NCCL (\d+\.\d+\.\d+)", getattr(e, "nsys_version", None) or "") for e in extracts)
    return sorted({m.group(1) for m in found if m})


def mismatches(con: duckdb.DuckDBPyConnection, logs: list, versions: list[str] | None = None) -> list[str]:
    """A warning per log that disagrees with the job: its largest communicator against the job's
    world (its largest group), its nodes against the job's hosts (when every rank's report was
    read), its NCCL version against one the reports name (versions), and an NCCL log beside a job
    that ran no GPU collective at all (gloo, MPI)."""
    world, ranks, hosts, on_gpu = duck.one_row(con, _JOB)
    out = []
    for log in logs:
        if getattr(log, "nccl_tests", None) and not log.version and not log.nranks:
            continue  # nccl-tests output alone: a reference curve, of any job size by design
        diffs = []
        if log.nranks and world and int(log.nranks) != int(world):
            diffs.append(f"{log.nranks} ranks against the job's {int(world)}")
        if log.nodes and hosts and ranks == world and int(log.nodes) != int(hosts):
            diffs.append(f"{log.nodes} node(s) against the job's {int(hosts)}")
        theirs = sorted({v for v in versions or [] if v})
        if log.version and theirs and log.version not in theirs:
            diffs.append(f"NCCL {log.version} against the reports' {', '.join(theirs)}")
        if not on_gpu and ranks:
            diffs.append("the job ran no GPU collective (a CPU backend such as gloo)")
        if diffs:
            out.append(
                f"{log.path}: not this job's NCCL log, it seems ({'; '.join(diffs)}): its context "
                "and reference bandwidth describe another run"
            )
    return out
