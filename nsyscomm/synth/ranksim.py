"""A small per-rank simulator for GPU jobs: compute, launches, NCCL kernels and wrapper ranges on
one rank's timeline (RankSim), and the collectives that finish when every rank has arrived."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nsyscomm import nvtx_format
from nsyscomm.synth.report import LAUNCH_DRIVER, LAUNCH_RUNTIME, NCCL_DOMAIN_ID, Proc, Report

# ---------------------------------------------------------------------------------------
# A small per-rank simulator for GPU jobs
# ---------------------------------------------------------------------------------------


@dataclass
class Pending:
    """A collective's kernel on one rank, launched but not finished: ``finish_collective`` sets
    its end once every rank has arrived."""

    sim: RankSim
    kernel: dict[str, Any]
    stream: int


class RankSim:
    """CPU threads issue launches; GPU streams run kernels in order; collectives are coupled
    across ranks by ``finish_collective`` (a collective ends together on all its ranks)."""

    def __init__(self, rep: Report, proc: Proc, rng: random.Random, *, rank: int, device: int, start: int):
        self.rep, self.proc, self.rng = rep, proc, rng
        self.rank, self.device = rank, device
        self.cpu: defaultdict[int, int] = defaultdict(lambda: start)
        self.cpu[proc.pid] = start
        self.stream_free: defaultdict[int, int] = defaultdict(int)
        self.events: dict[str, int] = {}
        self.launch_cpu: dict[str, int] = {}  # CPU time a recorded kernel's launch returned
        self.seq: defaultdict[str, int] = defaultdict(int)  # wrapper seq per group name
        self.step_start = start  # where the current training step's marker range begins
        self.domain_done = False  # NCCL registered its NVTX domain (at the rank's first call)

    @property
    def main(self) -> int:
        return self.proc.pid

    def advance(self, tid: int, ns: int) -> None:
        self.cpu[tid] += ns

    def compute(
        self,
        tid: int,
        name: str,
        stream: int,
        dur: int,
        *,
        wait: Iterable[str] = (),
        record: str | None = None,
        torch_range: str | None = None,
    ) -> int:
        r = self.rng
        t = self.cpu[tid]
        if torch_range:
            op_id = self.proc.next_op_id()
            rs, t = t, t + r.randint(2000, 6000)
        ldur = r.randint(3500, 7000)
        call = self.rep.api_call(self.proc, tid, t, t + ldur, LAUNCH_RUNTIME)
        start = max(t + ldur + r.randint(1500, 4000), self.stream_free[stream], *[self.events[e] for e in wait])
        end = start + dur + r.randint(0, dur // 20 + 1)
        self.rep.kernel(
            self.proc, call["correlationId"], device=self.device, stream=stream, start=start, end=end, name=name
        )
        self.stream_free[stream] = end
        if record:
            self.events[record] = end
            self.launch_cpu[record] = t + ldur
        t_end = t + ldur
        if torch_range:
            t_end += r.randint(1000, 3000)
            self.rep.range(self.proc, tid, rs, t_end, text=f"{torch_range}, op_id = {op_id}")
        self.cpu[tid] = t_end + r.randint(8000, 25000)
        return end

    def sync(self, tid: int) -> int:
        """cudaStreamSynchronize on all streams: the CPU waits for the GPU."""
        t = self.cpu[tid]
        gpu = max(self.stream_free.values(), default=t)
        end = max(t, gpu) + self.rng.randint(3000, 6000)
        self.rep.api_call(self.proc, tid, t, end, "cudaStreamSynchronize_v3020")
        self.cpu[tid] = end + self.rng.randint(2000, 4000)
        return end

    def _kernel_pending(self, corr: int, name: str, stream: int, ready: int, wait: Iterable[str]) -> Pending:
        start = max(ready + self.rng.randint(1500, 4000), self.stream_free[stream], *[self.events[e] for e in wait])
        k = self.rep.kernel(self.proc, corr, device=self.device, stream=stream, start=start, end=start, name=name)
        return Pending(self, k, stream)

    def _late_start(self, tid: int, wait: Iterable[str], late_ns: int) -> int:
        t = self.cpu[tid]
        if late_ns:
            t = max([t] + [self.events[e] for e in wait]) + late_ns
        return t

    def wrapper_collective(
        self,
        tid: int,
        op: str,
        *,
        api: str,
        nbytes: int,
        dtype: str,
        itemsize: int,
        pg: str | int,
        gsize: int,
        granks: list[int] | tuple[int, ...] = (),
        step: int | None = None,
        caller: str,
        kernel: str,
        stream: int,
        wait: Iterable[str] = (),
        late_ns: int = 0,
        numel: int | None = None,
    ) -> Pending:
        """A wrapper range enclosing a cuLaunchKernelEx of one NCCL kernel (end set later)."""
        r = self.rng
        rs = self._late_start(tid, wait, late_ns)
        seq = self.seq[str(pg)]
        self.seq[str(pg)] += 1
        if numel is None:
            numel = nbytes // itemsize if itemsize else None
        msg = nvtx_format.format_collective(
            op,
            api=api,
            bytes=nbytes,
            dtype=dtype,
            numel=numel,
            pg=pg,
            gsize=gsize,
            granks=granks,
            seq=seq,
            step=step,
            caller=caller,
        )
        # the fields as constructed, for the ground truth (which never parses the message back)
        fields: dict[str, Any] = dict(
            api=api, bytes=nbytes, dtype=dtype, numel=numel, pg=pg, gsize=gsize, granks=granks, seq=seq, step=step
        )
        fields["caller"] = caller
        ls = rs + r.randint(3000, 9000)
        if r.random() < 0.5:  # a non-launch runtime call inside the range, as torch does
            self.rep.api_call(self.proc, tid, ls - 2500, ls - 1500, "cudaStreamIsCapturing_v10000")
        le = ls + r.randint(4000, 9000)
        re_ = le + r.randint(2000, 6000)
        call = self.rep.api_call(self.proc, tid, ls, le, LAUNCH_DRIVER)
        self.rep.range(self.proc, tid, rs, re_, registered=msg, domain=1, call={"op": op, **fields})
        self.cpu[tid] = re_ + r.randint(5000, 15000)
        return self._kernel_pending(call["correlationId"], kernel, stream, le, wait)

    def torch_collective(
        self,
        tid: int,
        op: str,
        *,
        kernel: str,
        stream: int,
        wait: Iterable[str] = (),
        late_ns: int = 0,
        launch: str = LAUNCH_RUNTIME,
        op_id_suffix: bool = False,
        drop_launch: bool = False,
        nccl_p2p_peers: int | None = None,
    ) -> Pending:
        """PyTorch's ranges (c10d::*, record_param_comms, nccl:<op>) enclosing the launch.
        With ``nccl_p2p_peers`` NCCL's own ranges (domain 1, registered strings) are nested
        inside and the launch lies inside ncclGroupEnd, not inside ncclSend/ncclRecv."""
        r = self.rng
        p = self.proc
        t0 = self._late_start(tid, wait, late_ns)
        c10d = {"all_reduce": "c10d::allreduce_", "all_to_all": "c10d::alltoall_base_"}[op]
        id1, id2, id3 = p.next_op_id(), p.next_op_id(), p.next_op_id()
        t1 = t0 + r.randint(5000, 12000)
        t2 = t1 + r.randint(4000, 8000)
        t = t2 + r.randint(3000, 9000)
        if nccl_p2p_peers:
            s = t
            self.rep.range(p, tid, s, s + 1000, registered="ncclGroupStart", domain=NCCL_DOMAIN_ID)
            t = s + 1500
            for _peer in range(nccl_p2p_peers):
                for what in ("ncclSend", "ncclRecv"):
                    d = r.randint(300, 4000)
                    self.rep.range(p, tid, t, t + d, registered=what, domain=NCCL_DOMAIN_ID)
                    t += d + r.randint(200, 600)
            ge = t
            ls = ge + r.randint(3000, 8000)
        else:
            ls = t
        le = ls + r.randint(4000, 10000)
        corr = p.next_corr()
        if not drop_launch:
            self.rep.api_call(p, tid, ls, le, launch, corr=corr)
        t = le + r.randint(2000, 5000)
        if nccl_p2p_peers:
            self.rep.range(p, tid, ge, t, registered="ncclGroupEnd", domain=NCCL_DOMAIN_ID)
            t += r.randint(1000, 3000)
        name = f"nccl:{op}, op_id = {id3}" if op_id_suffix else f"nccl:{op}"
        self.rep.range(p, tid, t2, t, text=name)
        t += r.randint(3000, 8000)
        self.rep.range(p, tid, t1, t, text=f"record_param_comms, op_id = {id2}")
        t += r.randint(2000, 5000)
        self.rep.range(p, tid, t0, t, text=f"{c10d}, op_id = {id1}")
        self.cpu[tid] = t + r.randint(5000, 15000)
        return self._kernel_pending(corr, kernel, stream, le, wait)


def finish_collective(pending: list[Pending], xfer_ns: int, rng: random.Random, record: str | None = None) -> int:
    """All ranks' kernels end together: at the last start plus the transfer (+ < 1 us jitter)."""
    last = max(p.kernel["start"] for p in pending)
    for p in pending:
        k = p.kernel
        k["end"] = last + xfer_ns + rng.randint(0, 900)
        p.sim.stream_free[p.stream] = k["end"]
        if record:
            p.sim.events[record] = k["end"]
    return last


def xfer(nbytes: int, gbps: float, base_ns: int = 12000) -> int:
    return base_ns + int(nbytes / gbps)


def add_rank_marker(rep: Report, sim: RankSim, *, rank: int, local_rank: int, world: int, host: str) -> None:
    """torch.cuda.set_device, then the nsyscomm domain's creation and the rank marker range.
    The domain-create row (end NULL) is never a process's first or last event, so the elapsed
    time does not depend on whether an ingest counts it."""
    t = sim.cpu[sim.main]
    rep.api_call(sim.proc, sim.main, t, t + 8000, "cudaSetDevice_v3020")
    rep.domain_create(sim.proc, sim.main, t + 20000, nvtx_format.DOMAIN, 1)
    msg = nvtx_format.format_rank_marker(rank, local_rank, world, host)
    marker = {"rank": rank, "local_rank": local_rank, "host": host}
    rep.range(sim.proc, sim.main, t + 23000, t + 24500, registered=msg, domain=1, marker=marker)
    sim.cpu[sim.main] = t + 40000
