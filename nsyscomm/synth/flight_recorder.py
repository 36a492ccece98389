"""PyTorch Flight Recorder dumps of each format version, written from known calls (tests only).

Source: pytorch/pytorch ``torch/csrc/distributed/c10d/FlightRecorder.hpp`` / ``.cpp`` and
``FlightRecorderDetail.hpp`` (getCollectiveTrace, dump), and the analyser's
``torch/distributed/flight_recorder/components`` (../shared/real/FORMATS.md, section 2). What
changes between the versions written here:

* 2.4: entries without ``thread_name``, ``thread_id`` and ``is_p2p``; the library's version under
  ``nccl_version``;
* 2.5 to 2.9: entries with them (the thread that enqueued the call, its id as a string);
* 2.10 (torchcomms): the library's version under ``comm_lib_version`` instead; a reset
  (``reset_all``) starts a new epoch: the dump holds the current epoch's entries only, and their
  ``record_id`` counts from 0 again, while the groups' sequence numbers go on.

Each dump is a protocol-2 pickle of plain containers, as torch's C++ pickler writes it."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

VERSIONS = ("2.4", "2.7", "2.9", "2.10")
_T0 = 1_780_000_000_000_000_000


@dataclass
class FrCall:
    """One call as one rank's Flight Recorder holds it."""

    seq: int  # the group's collective_seq_id (torch counts from 1)
    op: str = "all_reduce"  # profiling_name's op
    numel: int = 1 << 20
    state: str = "completed"  # scheduled | started | completed
    epoch: int = 0  # the reset epoch it was recorded in


def _entry(version: str, rank: int, c: FrCall, record_id: int) -> dict:
    done = c.state == "completed"
    e: dict = {
        "record_id": record_id,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
    }
    if version != "2.4":
        e["thread_name"] = "pt_main_thread"
        e["thread_id"] = str(140_000_000 + rank)
    e.update(
        {
            "collective_seq_id": c.seq,
            "p2p_seq_id": 0,
            "op_id": c.seq,
            "profiling_name": f"nccl:{c.op}",
            "time_created_ns": _T0 + c.seq * 10_000_000 + rank * 1000,
        }
    )
    if done:
        e["duration_ms"] = 1.25
    e.update(
        {
            "input_sizes": [[c.numel]],
            "input_dtypes": ["Float"],
            "output_sizes": [[c.numel]],
            "output_dtypes": ["Float"],
            "state": c.state,
            "time_discovered_started_ns": e["time_created_ns"] + 5000 if c.state != "scheduled" else None,
            "time_discovered_completed_ns": e["time_created_ns"] + 1_300_000 if done else None,
            "retired": done,
            "timeout_ms": 600_000,
        }
    )
    if version != "2.4":
        e["is_p2p"] = False
    return e


def dump(version: str, rank: int, calls: list[FrCall], world: int, library: str = "2.27.3") -> dict:
    """One rank's dump: the entries of the last reset epoch only, record ids counting from 0 in it."""
    epoch = max((c.epoch for c in calls), default=0)
    kept = [c for c in calls if c.epoch == epoch]
    first = sum(1 for c in calls if c.epoch < epoch)  # record ids before the reset (2.10 restarts them)
    entries = [_entry(version, rank, c, i if version == "2.10" else first + i) for i, c in enumerate(kept)]
    done = [c.seq for c in calls if c.state == "completed"]
    d: dict = {
        "version": version,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": max((c.seq for c in calls), default=-1),
                "last_started_collective": max((c.seq for c in calls if c.state != "scheduled"), default=-1),
                "last_completed_collective": max(done, default=-1),
            }
        },
    }
    d["comm_lib_version" if version == "2.10" else "nccl_version"] = library
    d["entries"] = entries
    return d


def write(
    folder: Path, version: str, per_rank: dict[int, list[FrCall]], prefix: str = "nccl_trace_rank_"
) -> list[Path]:
    """Each rank's dump, ``<prefix><rank>``, as torch's DebugInfoWriter names them."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for rank, calls in sorted(per_rank.items()):
        p = folder / f"{prefix}{rank}"
        p.write_bytes(pickle.dumps(dump(version, rank, calls, len(per_rank)), protocol=2))
        out.append(p)
    return out
