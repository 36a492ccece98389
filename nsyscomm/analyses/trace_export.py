"""An nsyscomm job in the per-op trace format of the OSDI'25 what-if artifact
(``trace-<name>.parquet`` + ``meta-<name>.yaml``), so that the artifact's own tool runs on it.

A job read from such a trace is written back as it was read. Any other job is written as a
data-parallel job (dp = ranks, pp = 1, each rank its own DP rank at stage 0), per step and rank:
the time before the rank's first call as one ``forward-compute`` (then an empty
``backward-compute``: the artifact's schedule needs one), the time before each further call as a
``backward-compute``, each call as a ``grads-reduce-scatter`` (its ``seq_id`` is its order in
the step: the artifact groups the DP ranks' calls by it), and the artifact's end-of-step ops
(gc, layernorm and embedding all-reduce, clip, optimizer) with zero duration at the rank's last
call end. Times are seconds from the step's first call. The limits are in docs/whatif.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsyscomm.errors import InputError

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result

TAIL = ("gc", "layernorm-grads-all-reduce", "embedding-grads-all-reduce", "optimizer-clip-main-grad", "optimizer")


_DTYPES = {
    "stage": "int8",
    "rank": "int16",
    "step": "int64",
    "start_ts": "float32",
    "duration": "float32",
    "seq_id": "int32",
    "mc": "int8",
    "mb_id": "int8",
    "gmc": "int16",
}


def frame(ops: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The calls of sql/replay_ops.sql -> (trace rows, meta)."""
    ops = _ordered(_checked(ops))
    ranks = sorted(int(r) for r in ops["rank"].unique())
    df = pd.concat([*_compute_rows(ops), _call_rows(ops), *_tail_rows(ops)], ignore_index=True)
    df = df.astype({"dp_rank": "int8" if len(ranks) < 128 else "int16", **_DTYPES})
    df["optype"] = df["optype"].astype("category")
    meta = {
        "trial_name": "nsyscomm",
        "run_id": 0,
        "dp_size": len(ranks),
        "dsp_size": 1,
        "pp_size": 1,
        "tp_size": 1,
        "vpp_size": 1,
        "world_size": len(ranks),
    }
    return df.sort_values(["step", "rank", "start_ts"], kind="stable").reset_index(drop=True), meta


def _checked(ops: pd.DataFrame) -> pd.DataFrame:
    """The calls with a step; refused when none has one or the job has point-to-point calls."""
    ops = ops[ops["step"].notna()].copy()
    if ops.empty:
        raise InputError(
            "the job's calls carry no training step: the what-if format is per step; "
            "capture with nsyscomm run (its wrapper records the step)"
        )
    if ops["op"].isin(("send", "recv")).any():
        raise InputError(
            "the job has point-to-point calls: its pipeline stages are not known, and the "
            "what-if format needs them; export a data-parallel job"
        )
    return ops


def _ordered(ops: pd.DataFrame) -> pd.DataFrame:
    """Each rank's calls in time order with their order in the step (k), where the compute
    before each began (gap_start) and where its step began (step0, ns)."""
    ops["step"] = ops["step"].astype(np.int64)
    ops = ops.sort_values(["rank", "start_ns", "end_ns"], kind="stable")
    ops["k"] = ops.groupby(["rank", "step"]).cumcount()
    prev_end = ops.groupby("rank")["end_ns"].shift()
    # the first call of a rank's first step has no measured compute before it
    ops["gap_start"] = np.where(prev_end.isna(), ops["start_ns"], prev_end)
    # a step starts when its first rank starts computing for it
    ops["step0"] = ops.groupby("step")["gap_start"].transform("min")
    return ops


def _base(ops: pd.DataFrame) -> dict:
    return dict(
        dp_rank=ops["rank"].to_numpy(), stage=0, rank=ops["rank"].to_numpy(), step=ops["step"].to_numpy(), mc=0, gmc=0
    )


def _compute_rows(ops: pd.DataFrame) -> list[pd.DataFrame]:
    """The time before each call as compute: forward before a step's first call, backward
    before each further one, and an empty backward before the first (the artifact's schedule
    needs one; the time before the k-th further call is backward-compute k)."""
    first = ops["k"] == 0
    gap_start, step0 = ops["gap_start"], ops["step0"]
    comp = pd.DataFrame(
        _base(ops)
        | {
            "optype": np.where(first, "forward-compute", "backward-compute"),
            "start_ts": (gap_start - step0) / 1e9,
            "duration": (ops["start_ns"] - gap_start).clip(lower=0) / 1e9,
            "seq_id": ops["k"],
            "mb_id": 0,
        }
    )
    empty = comp[first.to_numpy()].assign(
        optype="backward-compute", duration=0.0, seq_id=0, start_ts=((ops["start_ns"] - step0) / 1e9)[first].to_numpy()
    )
    return [comp, empty]


def _call_rows(ops: pd.DataFrame) -> pd.DataFrame:
    """Each call as a grads-reduce-scatter, its seq_id its order in the step."""
    return pd.DataFrame(
        _base(ops)
        | {
            "optype": "grads-reduce-scatter",
            "start_ts": (ops["start_ns"] - ops["step0"]) / 1e9,
            "duration": (ops["end_ns"] - ops["start_ns"]) / 1e9,
            "seq_id": ops["k"],
            "mb_id": -1,
        }
    )


def _tail_rows(ops: pd.DataFrame) -> list[pd.DataFrame]:
    """The artifact's end-of-step ops, of zero duration, at each rank's last call end."""
    last = ops.groupby(["rank", "step"]).agg(end=("end_ns", "max")).reset_index()
    last["step0"] = ops.groupby("step")["gap_start"].min().reindex(last["step"]).to_numpy()
    return [
        pd.DataFrame(
            {
                "dp_rank": last["rank"],
                "stage": 0,
                "rank": last["rank"],
                "step": last["step"],
                "optype": t,
                "start_ts": (last["end"] - last["step0"]) / 1e9,
                "duration": 0.0,
                "seq_id": 0,
                "mc": 0,
                "mb_id": -1,
                "gmc": 0,
            }
        )
        for t in TAIL
    ]


def write(result: Result, out_dir: str | Path, name: str = "nsyscomm") -> list[Path]:
    """Write the job as OUT_DIR/trace-<name>.parquet and OUT_DIR/meta-<name>.yaml."""
    import yaml

    op_trace = getattr(result, "op_trace", None)
    if op_trace is not None:
        df, meta = op_trace
        meta = dict(meta)
    else:
        df, meta = frame(result._query("replay_ops"))
    meta["trial_name"] = name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trace, mpath = out / f"trace-{name}.parquet", out / f"meta-{name}.yaml"
    with open(trace, "wb") as f:  # a file, not a name: pyarrow takes only UTF-8 names
        df.to_parquet(f, index=False)
    mpath.write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    return [trace, mpath]
