"""Source: the per-op trace of the OSDI'25 straggler study's artifact (ByteDance-Seed/
StragglerAnalysis): ``trace-<name>.parquet`` (one row per operation of one worker in one step,
times in seconds from the step's start) with ``meta-<name>.yaml`` beside it (dp/pp/tp sizes).

Its communication operations become rows of the collectives table; every operation, compute
included, is kept for the what-if replay (nsyscomm.analyses.stragglers).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsyscomm.errors import InputError
from nsyscomm.ingest import bounded, limits
from nsyscomm.schema import COLUMN_NAMES

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract

REQUIRED = ("dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration", "seq_id", "mc", "mb_id", "gmc")
META_SIZES = ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size")
_NAME = re.compile(r"^trace-(?P<name>.+)\.parquet$")
SOURCE = "whatif_trace"
# optype -> (collective op, communicator kind); p2p ops get their peer from the stage layout
COMM = {
    "grads-reduce-scatter": ("reduce_scatter", "dp"),
    "params-all-gather": ("all_gather", "dp"),
    "separate-grads-all-reduce": ("all_reduce", "dp"),
    "layernorm-grads-all-reduce": ("all_reduce", "tp"),
    "embedding-grads-all-reduce": ("all_reduce", "embedding"),
    "forward-send": ("send", "pp"),
    "forward-recv": ("recv", "pp"),
    "backward-send": ("send", "pp"),
    "backward-recv": ("recv", "pp"),
}
_P2P_PEER = {"forward-send": 1, "forward-recv": -1, "backward-send": -1, "backward-recv": 1}
# seq of a call within its communicator: the step, then the optype, then the op's order
_SEQ_STRIDE = 1_000_000
_OPTYPE_STRIDE = 10_000


def is_trace(path: Path) -> bool:
    return path.is_file() and _NAME.match(path.name) is not None


def meta_path(path: Path) -> Path:
    """The artifact's meta-<name>.yaml beside trace-<name>.parquet (path is a trace: is_trace)."""
    m = _NAME.match(path.name)
    if m is None:
        raise ValueError(f"{path}: not a straggler trace's name (trace-<name>.parquet)")
    return path.with_name("meta-" + m.group("name") + ".yaml")


_META_FIX = "write it as 'key: value' lines (dp_size, pp_size, tp_size, world_size)"


def read_meta(path: Path) -> dict:
    """The trace's job description, checked: every size a positive integer within the ranks a
    job may have (MAX_GROUP), dp_size x pp_size too. Read without aliases and with bounded
    nesting (nsyscomm.ingest.bounded)."""
    mp = meta_path(path)
    if not mp.is_file():
        raise InputError(
            f"{path}: the job description {mp.name} is not beside it; "
            f"put the trace's meta-<name>.yaml (dp_size, pp_size, ...) in the same folder"
        )
    meta = bounded.read_yaml(mp, _META_FIX)
    if not isinstance(meta, dict):
        raise InputError(f"{mp}: expected 'key: value' lines (dp_size, pp_size, tp_size, world_size)")
    meta = {k: v for k, v in meta.items() if isinstance(k, str)}
    for k in META_SIZES:
        v = meta.setdefault(k, 1)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= limits.MAX_GROUP:
            raise InputError(
                f"{mp}: {k} must be a positive integer up to {limits.MAX_GROUP}, not {_shown(v)}; "
                f"fix the job description"
            )
    if meta["dp_size"] * meta["pp_size"] > limits.MAX_GROUP:
        raise InputError(f"{mp}: dp_size x pp_size is over {limits.MAX_GROUP} ranks; fix the job description")
    return meta


def _shown(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:40] + "…"


def read(path: Path) -> tuple[pd.DataFrame, dict]:
    """The trace's rows (index 0..n-1) and its job description, checked at the edge: column
    types, nulls, finite times and ranges (nsyscomm.ingest.straggler.checks), its size against
    the memory budget from the Parquet footer before any row is read."""
    from nsyscomm.ingest.straggler import checks as straggler_checks

    path = Path(path)
    meta = read_meta(path)
    table = straggler_checks.read_table(path, REQUIRED)
    df = table.to_pandas()
    df = straggler_checks.checked(df, meta, path, seq_stride=_OPTYPE_STRIDE)
    df["optype"] = df["optype"].astype(str)
    return df.reset_index(drop=True), meta


def step_offsets(df: pd.DataFrame) -> pd.Series:
    """step -> seconds to add so that the sampled steps (each timed from its own start) lie end
    to end on one time axis."""
    span = (df["start_ts"] + df["duration"]).groupby(df["step"]).max() - df.groupby("step")["start_ts"].min()
    return span.cumsum().shift(fill_value=0.0) - df.groupby("step")["start_ts"].min()


def calls(df: pd.DataFrame, meta: dict) -> pd.DataFrame:
    """The trace's communication operations as collectives rows (without report/rank columns)."""
    dp, pp = int(meta["dp_size"]), int(meta["pp_size"])
    ranks = df.drop_duplicates(["dp_rank", "stage"]).set_index(["dp_rank", "stage"])["rank"]
    c = df[df["optype"].isin(COMM)].copy()
    off = step_offsets(df).reindex(c["step"]).to_numpy()
    start = np.rint((c["start_ts"].to_numpy(np.float64) + off) * 1e9).astype(np.int64)
    end = start + np.rint(c["duration"].to_numpy(np.float64) * 1e9).astype(np.int64)
    op = c["optype"].map(lambda t: COMM[t][0])
    kind = c["optype"].map(lambda t: COMM[t][1])
    stage = c["stage"].astype(np.int64).to_numpy()
    dpr = c["dp_rank"].astype(np.int64).to_numpy()
    delta = c["optype"].map(_P2P_PEER).fillna(0).astype(np.int64).to_numpy()
    peer_stage = (stage + delta) % pp
    peer = ranks.reindex(pd.MultiIndex.from_arrays([dpr, peer_stage])).to_numpy()
    is_p2p = (kind == "pp").to_numpy()
    dp_ranks = df.drop_duplicates("rank").groupby("stage")["rank"].apply(lambda r: ",".join(map(str, sorted(r))))
    group = np.select(
        [kind == "dp", kind == "tp", kind == "embedding", kind == "pp"],
        [
            "dp.stage" + c["stage"].astype(str),
            "tp.rank" + c["rank"].astype(str),
            "embedding.dp" + c["dp_rank"].astype(str),
            "pp.dp" + c["dp_rank"].astype(str),
        ],
        "world",
    )
    size = np.select([kind == "dp", kind == "embedding", kind == "pp"], [dp, min(2, pp), 2], 1)
    granks = np.where(kind == "dp", c["stage"].map(dp_ranks).astype(object), None)
    # a send and its receive share a seq: the p2p optypes of one direction are numbered alike
    code = c["optype"].map({t: i for i, t in enumerate(COMM)}).to_numpy()
    code = np.where(is_p2p, np.where(c["optype"].str.startswith("forward"), 90, 91), code)
    seq = c["step"].to_numpy(np.int64) * _SEQ_STRIDE + code * _OPTYPE_STRIDE + c["seq_id"].to_numpy(np.int64)
    out = pd.DataFrame({k: None for k in COLUMN_NAMES}, index=c.index)
    out = out.assign(
        pid=c["rank"].astype(np.int64),
        tid=0,
        op=op,
        api=c["optype"],
        group=group,
        group_size=size,
        group_ranks=granks,
        seq=seq,
        caller=c["optype"],
        step=c["step"].astype(np.int64),
        cpu_start=start,
        cpu_end=end,
        gpu_start=start,
        gpu_end=end,
        device=c["rank"].astype(np.int64),
        source=SOURCE,
        peer=np.where(is_p2p, peer, None),
    )
    out["peer"] = out["peer"].astype("Int64")
    return out.drop(columns=["report", "rank", "local_rank", "host", "duration_ns"]).reset_index(drop=True)


def extract(path: Path, report: str | None = None) -> Extract:
    """One trace file -> an Extract: its calls, one process per global rank."""
    from nsyscomm import duck
    from nsyscomm.ingest.extract_type import Extract

    path = Path(path)
    df, meta = read(path)
    rows = calls(df, meta)
    off = step_offsets(df).reindex(df["step"]).to_numpy()
    t0 = np.rint((df["start_ts"].to_numpy(np.float64) + off) * 1e9).astype(np.int64)
    t1 = t0 + np.rint(df["duration"].to_numpy(np.float64) * 1e9).astype(np.int64)
    spans = (
        pd.DataFrame({"pid": df["rank"].astype(np.int64), "first_ns": t0, "last_ns": t1})
        .groupby("pid")
        .agg(first_ns=("first_ns", "min"), last_ns=("last_ns", "max"))
        .reset_index()
    )
    ranks = np.sort(df["rank"].unique()).astype(np.int64)
    markers = pd.DataFrame(
        {
            "pid": ranks,
            "rank": pd.array(ranks, dtype="Int64"),
            "local_rank": pd.array([None] * len(ranks), dtype="Int64"),
            "world": pd.array([meta["world_size"]] * len(ranks), dtype="Int64"),
            "host": pd.Series([None] * len(ranks), dtype="object"),
        }
    )
    warnings = []
    if int(meta["tp_size"]) > 1 or int(meta["dsp_size"]) > 1:
        warnings.append(
            f"{path.name}: tp_size/dsp_size > 1: the trace holds one worker per (dp, stage); "
            f"tensor/sequence-parallel peers are not in it"
        )
    return Extract(
        report=report or path.name,
        path=path,
        calls=duck.frame_arrow(rows),
        markers=markers,
        spans=spans,
        session_start_utc_ns=None,
        nsys_version="what-if trace (OSDI'25 artifact)",
        warnings=warnings,
    )


def job_trace(files: Iterable[str | os.PathLike]) -> tuple[pd.DataFrame, dict] | None:
    """The per-op trace of a job read from these inputs (the first what-if trace among them), for
    the replay; None when the job was read from other sources."""
    for f in files:
        if is_trace(Path(f)):
            return read(Path(f))
    return None
