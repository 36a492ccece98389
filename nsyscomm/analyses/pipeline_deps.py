"""The dependency model of a Megatron-style training step (data x pipeline parallel), for the
replay of a per-op trace in the OSDI'25 what-if artifact's format (nsyscomm.ingest.straggler.trace).

One worker is one (step, dp_rank, stage). Inside a worker, operations depend on each other the way
the training loop issues them (the artifact's model, rebuilt here from its description):

- forward and backward computes run one after the other, in the order measured;
- each kind of pipeline send/receive runs in order on its own stream; a send needs the compute
  that produced its tensor, a compute needs the receive that brought its input, and a receive is
  posted after the previous compute of its direction; the first backward send/receive is posted
  after the compute two before the first backward compute (1F1B's warm-up);
- data-parallel collectives (parameter all-gather, gradient reduce-scatter) run in order on their
  stream; a model chunk's first forward compute needs its parameters gathered;
- after the last compute: gc, the layernorm and embedding gradient all-reduces, the gradient
  reduce-scatters (when not overlapped with the backward), the gradient-norm clip, the optimizer.

Across workers, synchronising groups: a send with its receive on the neighbouring stage, each data-
parallel collective over the dp ranks of one stage, the embedding all-reduce between the first and
the last stage, and the gradient-norm clip over the whole job.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FWD, BWD = "forward-compute", "backward-compute"
P2P = ("forward-send", "forward-recv", "backward-send", "backward-recv")
DP_COMM = ("params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce")
LAYERNORM, EMBEDDING = "layernorm-grads-all-reduce", "embedding-grads-all-reduce"
CLIP, OPTIMIZER, GC = "optimizer-clip-main-grad", "optimizer", "gc"
# communication as the model sees it: its ideal duration is the median, a compute's the mean
COMM_TYPES = frozenset(P2P + DP_COMM + (LAYERNORM, EMBEDDING, CLIP))


def _chain(order: pd.DataFrame, by: str) -> tuple[np.ndarray, np.ndarray]:
    """Edges between consecutive rows of `order` (already sorted) that share `by`."""
    i = order.index.to_numpy()
    k = order[by].to_numpy()
    same = k[:-1] == k[1:]
    return i[:-1][same], i[1:][same]


def build(df: pd.DataFrame, dp_size: int, pp_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, group) over df's rows (index 0..n-1): edges src -> dst and each row's group
    (-1: no synchronisation)."""
    df = df.reset_index(drop=True)
    df["end"] = df["start_ts"].to_numpy(np.float64) + df["duration"].to_numpy(np.float64)
    df["row"] = np.arange(len(df))
    steps = np.unique(df["step"].to_numpy())
    sdense = np.searchsorted(steps, df["step"].to_numpy())
    df["w"] = (sdense * dp_size + df["dp_rank"].to_numpy().astype(np.int64)) * pp_size + df["stage"].astype(np.int64)
    df["ot"] = df["optype"].astype(str)
    edges: list[tuple[np.ndarray, np.ndarray]] = []
    by_time = ["w", "start_ts", "seq_id", "ot"]

    comp = df[df["ot"].isin((FWD, BWD))].sort_values(by_time, kind="stable")
    edges.append(_chain(comp, "w"))
    for t in P2P:
        edges.append(_chain(df[df["ot"] == t].sort_values(["w", "seq_id"], kind="stable"), "w"))
    dpc = df[df["ot"].isin(("params-all-gather", "grads-reduce-scatter"))].sort_values(by_time, kind="stable")
    edges.append(_chain(dpc, "w"))

    # (worker, optype, seq_id) -> row
    key = pd.Series(df.index.to_numpy(), index=pd.MultiIndex.from_arrays([df["w"], df["ot"], df["seq_id"]]))
    key = key[~key.index.duplicated()]

    def row_of(w, t, seq) -> np.ndarray:
        idx = pd.MultiIndex.from_arrays([np.asarray(w), np.full(len(w), t), np.asarray(seq)])
        return key.reindex(idx).fillna(-1).to_numpy().astype(np.int64)

    ncomp = df[df["ot"].isin((FWD, BWD))].groupby(["w", "ot"]).size()
    for direction, comp_t in (("forward", FWD), ("backward", BWD)):
        sends = df[df["ot"] == f"{direction}-send"]
        c = row_of(sends["w"], comp_t, sends["seq_id"])
        ok = c >= 0
        edges.append((c[ok], sends.index.to_numpy()[ok]))
        recvs = df[df["ot"] == f"{direction}-recv"]
        nr = recvs.groupby("w").size()
        nc = ncomp[ncomp.index.get_level_values("ot") == comp_t].droplevel("ot")
        nc = nc.reindex(nr.index).fillna(0).astype(np.int64)
        # one receive fewer than computes: the first compute's input came from elsewhere
        shift = (nc - nr).clip(lower=0).reindex(recvs["w"]).to_numpy()
        m = recvs["seq_id"].to_numpy() + shift
        consumer = row_of(recvs["w"], comp_t, m)
        ok = consumer >= 0
        edges.append((recvs.index.to_numpy()[ok], consumer[ok]))
        prev = row_of(recvs["w"], comp_t, m - 1)
        ok = (prev >= 0) & (m - 1 >= 0)
        edges.append((prev[ok], recvs.index.to_numpy()[ok]))

    # warm-up: the first backward send/recv after the compute two before the first backward
    comp_pos = comp.assign(pos=comp.groupby("w").cumcount())
    first_b = comp_pos[comp_pos["ot"] == BWD].groupby("w")["pos"].min()
    first_b = first_b[first_b >= 2]
    anchor = comp_pos.set_index(["w", "pos"])["ot"]
    anchor_row = pd.Series(comp_pos.index.to_numpy(), index=pd.MultiIndex.from_arrays([comp_pos["w"], comp_pos["pos"]]))
    for t in ("backward-send", "backward-recv"):
        first = df[(df["ot"] == t) & (df["seq_id"] == 0) & df["w"].isin(first_b.index)]
        idx = pd.MultiIndex.from_arrays([first["w"], first_b.reindex(first["w"]).to_numpy() - 2])
        src = anchor_row.reindex(idx).to_numpy()
        ok = ~pd.isna(src) & (anchor.reindex(idx).to_numpy() == FWD)
        edges.append((src[ok].astype(np.int64), first.index.to_numpy()[ok]))

    use_dp = dp_size > 1
    overlapped = (df["ot"] == "separate-grads-all-reduce").any()
    if use_dp:  # a chunk's last parameter all-gather before its first forward compute
        ag = df[df["ot"] == "params-all-gather"]
        last_ag = ag.loc[ag.groupby(["w", "mc"])["seq_id"].idxmax()]
        fwd = df[df["ot"] == FWD]
        first_fwd = fwd.loc[fwd.groupby(["w", "mc"])["start_ts"].idxmin()].set_index(["w", "mc"])["seq_id"]
        tgt = first_fwd.reindex(pd.MultiIndex.from_arrays([last_ag["w"], last_ag["mc"]]))
        ok = tgt.notna().to_numpy()
        edges.append((last_ag.index.to_numpy()[ok], row_of(last_ag["w"][ok], FWD, tgt.to_numpy()[ok].astype(np.int64))))
    if use_dp and overlapped:  # a chunk's gradients reduced after its last backward
        rs = df[df["ot"] == "grads-reduce-scatter"]
        first_rs = rs.loc[rs.groupby(["w", "mc"])["seq_id"].idxmin()]
        bwd = df[df["ot"] == BWD]
        last_bwd = bwd.loc[bwd.groupby(["w", "mc"])["end"].idxmax()].set_index(["w", "mc"])
        src = last_bwd["row"].reindex(pd.MultiIndex.from_arrays([first_rs["w"], first_rs["mc"]]))
        ok = src.notna().to_numpy()
        edges.append((src.to_numpy()[ok].astype(np.int64), first_rs.index.to_numpy()[ok]))

    edges += _post_compute(df, comp, use_dp, overlapped)
    src = np.concatenate([e[0] for e in edges]).astype(np.int64)
    dst = np.concatenate([e[1] for e in edges]).astype(np.int64)
    return src, dst, _groups(df, sdense, pp_size, use_dp)


def _post_compute(df: pd.DataFrame, comp: pd.DataFrame, use_dp: bool, overlapped: bool) -> list:
    """After the last compute: gc, layernorm and embedding all-reduces, (reduce-scatters), clip,
    optimizer, in this order on every worker (the ops a worker lacks are skipped)."""
    last_comp = comp.loc[comp.groupby("w")["end"].idxmax()].set_index("w")["row"]
    rank = {GC: 0, LAYERNORM: 1, EMBEDDING: 2, "separate-grads-all-reduce": 4, CLIP: 5, OPTIMIZER: 6}
    if use_dp and not overlapped:
        rank["grads-reduce-scatter"] = 3
    tail = df[df["ot"].isin(rank)].copy()
    tail["pos"] = tail["ot"].map(rank)
    tail = tail.sort_values(["w", "pos", "seq_id"], kind="stable")
    edges = [_chain(tail, "w")]
    first = tail.groupby("w").head(1)
    src = last_comp.reindex(first["w"]).to_numpy()
    ok = ~pd.isna(src)
    edges.append((src[ok].astype(np.int64), first.index.to_numpy()[ok]))
    if use_dp and overlapped:  # the last reduce-scatter before the tail
        rs = df[df["ot"] == "grads-reduce-scatter"]
        last_rs = rs.loc[rs.groupby("w")["seq_id"].idxmax()].set_index("w")["row"]
        after_gc = tail[tail["pos"] > 0].groupby("w").head(1)
        s = last_rs.reindex(after_gc["w"]).to_numpy()
        ok = ~pd.isna(s)
        edges.append((s[ok].astype(np.int64), after_gc.index.to_numpy()[ok]))
    return edges


def _groups(df: pd.DataFrame, sdense: np.ndarray, pp: int, use_dp: bool) -> np.ndarray:
    """Each row's synchronising group id (-1: none); ids are hashes, made dense by the replay."""
    ot = df["ot"].to_numpy()
    stage = df["stage"].to_numpy().astype(np.int64)
    dp = df["dp_rank"].to_numpy().astype(np.int64)
    seq = df["seq_id"].to_numpy().astype(np.int64)
    keys = pd.Series([None] * len(df), dtype=object)
    for direction, d in (("forward", 1), ("backward", -1)):
        s = ot == f"{direction}-send"
        r = ot == f"{direction}-recv"
        # a pair is named by its sending stage: the receiver's is one back in its direction
        sender = np.where(s, stage, (stage - d) % pp)
        for m in (s, r):
            keys[m] = [("p2p", direction, a, b, c, e) for a, b, c, e in zip(sdense[m], dp[m], sender[m], seq[m])]
    if use_dp:
        m = np.isin(ot, DP_COMM)
        keys[m] = [("dp", a, b, c, e) for a, b, c, e in zip(sdense[m], stage[m], ot[m], seq[m])]
    m = (ot == EMBEDDING) & ((stage == 0) | (stage == pp - 1))
    keys[m] = [("emb", a, b) for a, b in zip(sdense[m], dp[m])]
    m = ot == CLIP
    keys[m] = [("clip", a) for a in sdense[m]]
    k = keys.to_numpy()
    has = pd.notna(k)
    group = np.full(len(df), -1, np.int64)
    if has.any():
        codes, uniq = pd.factorize(pd.Series(k[has]).astype(str))
        sizes = np.bincount(codes)
        codes = np.where(sizes[codes] > 1, codes, -1)  # a send whose receive is absent waits for nobody
        group[has] = codes
    return group
