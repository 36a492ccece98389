"""A summary's bandwidth beside an nccl-tests reference curve (``--nccl-log`` with nccl-tests
output; the curve is read by nsyscomm.ingest.nccl_log.reference_curve): what a training run's
collectives reach against what the same fabric reached in nccl-tests at the same size."""

from __future__ import annotations

import numpy as np
import pandas as pd


def compare(summary: pd.DataFrame, curve: pd.DataFrame) -> pd.DataFrame:
    """Join a summary (op, bytes, busbw_GBps) with the reference curve: for each row the reference
    busbw at the nearest nccl-tests size of the same op (log-size interpolation between the two
    surrounding sizes) and the ratio measured/reference."""
    out = summary.copy()
    refs: list[float | None] = []
    for r in out.itertuples():
        # a size nccl-tests printed as 0.00 GB/s (below its resolution) or 0 bytes says no rate
        c = curve[(curve["op"] == r.op) & (curve["busbw_GBps"] > 0) & (curve["bytes"] > 0)].sort_values("bytes")
        # below the smallest size nccl-tests rated, its rate is unknown (not the next size's)
        if not len(c) or pd.isna(r.bytes) or not r.bytes or r.bytes < c["bytes"].iloc[0]:
            refs.append(None)
            continue
        x = np.log2(c["bytes"].to_numpy(dtype=float))
        refs.append(float(np.interp(np.log2(float(r.bytes)), x, c["busbw_GBps"].to_numpy(dtype=float))))
    out["ref_busbw_GBps"] = pd.Series(refs, index=out.index, dtype="float64")
    out["busbw_vs_ref"] = out["busbw_GBps"].astype("float64") / out["ref_busbw_GBps"]
    return out
