"""The bundled samples' jobs: DDP on 4 ranks, FSDP on 8, gloo on the CPU, two nodes without the
wrapper (nsyscomm.synth.generate writes them with their ground truth)."""

from __future__ import annotations

import random
from collections import defaultdict

from nsyscomm import nvtx_format
from nsyscomm.synth.ranksim import RankSim, add_rank_marker, finish_collective, xfer
from nsyscomm.synth.report import LAUNCH_DRIVER, NCCL_DOMAIN_ID, T0, Report

# ---------------------------------------------------------------------------------------
# Sample 1: DDP, 4 ranks, rank 2 late
# ---------------------------------------------------------------------------------------

DDP_BUCKETS = (26214400, 26214400, 10813440)


def gen_ddp_4rank(seed: int = 1) -> list[Report]:
    rng = random.Random(seed)
    rep = Report("synthetic_ddp_4rank.sqlite")
    rep.process(3990, "nsys-launcher", {3990: "nsys-launcher", 3991: "nsys-launcher"})
    pids = [4242, 4240, 4245, 4239]  # rank order != pid order: ranks come from the markers
    sims = []
    for rank, pid in enumerate(pids):
        proc = rep.process(pid, "python3", {pid: "python3", pid + 3: "pt_autograd_0", pid + 5: "pt_nccl_watchdg"})
        sim = RankSim(rep, proc, rng, rank=rank, device=rank, start=T0 + rng.randint(0, 300_000))
        add_rank_marker(rep, sim, rank=rank, local_rank=rank, world=4, host="node-a")
        sims.append(sim)
    # broadcast of the initial parameters (nobody deliberately late)
    pend = [
        s.wrapper_collective(
            s.main,
            "broadcast",
            api="broadcast",
            nbytes=1048576,
            dtype="float32",
            itemsize=4,
            pg=0,
            gsize=4,
            caller="train.py:40 main",
            kernel="ncclDevKernel_Broadcast_RING_LL",
            stream=13,
        )
        for s in sims
    ]
    finish_collective(pend, xfer(1048576, 40.0), rng)
    for s in sims:
        s.sync(s.main)
    on_time = {(1, 2), (3, 0), (4, 1)}  # rank 2 is late on all other all-reduces
    late_rank = 2
    for step in range(5):
        for s in sims:
            s.advance(s.main, rng.randint(50_000, 150_000))
            s.step_start = s.cpu[s.main]
            # forward on the main thread, inside a torch-like range
            fs = s.cpu[s.main]
            s.advance(s.main, 3000)
            for k in range(4):
                if k % 2 == 0:
                    s.compute(s.main, "ampere_sgemm_128x64_nn", 7, 380_000)
                else:
                    s.compute(s.main, "vectorized_elementwise_kernel", 7, 45_000)
            rep.range(s.proc, s.main, fs, s.cpu[s.main], text="DistributedDataParallel.forward")
            s.advance(s.main, 5000)
            # backward on the autograd thread; grads of bucket b ready after kernels 1, 3, 5
            at = s.proc.pid + 3
            s.cpu[at] = s.cpu[s.main] + 10_000
            for k in range(6):
                name = "ampere_sgemm_128x64_nn" if k % 2 == 0 else "vectorized_elementwise_kernel"
                s.compute(at, name, 7, 420_000 if k % 2 == 0 else 160_000, record=f"grad{k}")
        for b, nbytes in enumerate(DDP_BUCKETS):
            pend = []
            for s in sims:
                # DDP's hook fires on the CPU once the bucket's last gradient kernel was launched
                s.cpu[s.main] = max(s.cpu[s.main], s.launch_cpu[f"grad{2 * b + 1}"] + rng.randint(15_000, 40_000))
                late = rng.randint(250_000, 900_000) if (s.rank == late_rank and (step, b) not in on_time) else 0
                pend.append(
                    s.wrapper_collective(
                        s.main,
                        "all_reduce",
                        api="DDP bucket",
                        nbytes=nbytes,
                        dtype="float32",
                        itemsize=4,
                        pg=0,
                        gsize=4,
                        step=step,
                        caller="train.py:88 train_step",
                        kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                        stream=13,
                        wait=(f"grad{2 * b + 1}",),
                        late_ns=late,
                    )
                )
            finish_collective(pend, xfer(nbytes, 60.0), rng, record=f"ar{b}")
        for s in sims:
            s.cpu[s.main] = max(s.cpu[s.main], s.cpu[s.proc.pid + 3]) + 5000
            for _ in range(3):
                s.compute(s.main, "vectorized_elementwise_kernel", 7, 30_000, wait=("ar2",))
            end = s.sync(s.main)
            rep.range(
                s.proc, s.main, s.step_start, end + 1000, registered=nvtx_format.format_step_marker(step), domain=1
            )
            s.cpu[s.main] = max(s.cpu[s.main], end + 2000)
    return [rep]


# ---------------------------------------------------------------------------------------
# Sample 2: FSDP, 8 ranks, two shard groups of 4 + a world all-reduce
# ---------------------------------------------------------------------------------------


FSDP_SHARD_IN = 4194304  # per-rank all_gather input (bytes, bf16)
FSDP_GATHERED = 4 * FSDP_SHARD_IN
FSDP_SLOW_RANK = 6


class _FsdpJob:
    """Eight ranks in two shard groups of four; rank 6 is often late."""

    def __init__(self, rep: Report, rng: random.Random, sims: list[RankSim]):
        self.rep, self.rng, self.sims = rep, rng, sims
        self.groups = {"1": sims[0:4], "2": sims[4:8]}
        self.granks = {"1": (0, 1, 2, 3), "2": (4, 5, 6, 7)}

    def late(self, s: RankSim) -> int:
        rng = self.rng
        return rng.randint(100_000, 400_000) if (s.rank == FSDP_SLOW_RANK and rng.random() < 0.75) else 0

    def all_gather(self, step: int, layer: int, caller: str) -> None:
        for pg, members in self.groups.items():
            pend = [
                s.wrapper_collective(
                    s.main,
                    "all_gather",
                    api="all_gather_single",
                    nbytes=FSDP_GATHERED,
                    dtype="bfloat16",
                    itemsize=2,
                    pg=pg,
                    gsize=4,
                    granks=self.granks[pg],
                    step=step,
                    caller=caller,
                    kernel="ncclDevKernel_AllGather_RING_LL",
                    stream=13,
                    late_ns=self.late(s),
                )
                for s in members
            ]
            finish_collective(pend, xfer(FSDP_GATHERED, 90.0), self.rng, record=f"ag{layer}")

    def reduce_scatter(self, step: int, layer: int) -> None:
        for pg, members in self.groups.items():
            pend = [
                s.wrapper_collective(
                    s.main,
                    "reduce_scatter",
                    api="reduce_scatter_single",
                    nbytes=FSDP_GATHERED,
                    dtype="bfloat16",
                    itemsize=2,
                    pg=pg,
                    gsize=4,
                    granks=self.granks[pg],
                    step=step,
                    caller="fsdp_train.py:66 train_step",
                    kernel="ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
                    stream=17,
                    wait=(f"bwd{layer}",),
                    late_ns=self.late(s),
                )
                for s in members
            ]
            finish_collective(pend, xfer(FSDP_GATHERED, 85.0), self.rng, record=f"rs{layer}")

    def clip_grad_norm(self, step: int) -> None:
        """The world all-reduce of the gradient norm, after the last reduce-scatter."""
        pend = [
            s.wrapper_collective(
                s.main,
                "all_reduce",
                api="all_reduce",
                nbytes=4096,
                dtype="float32",
                itemsize=4,
                pg=0,
                gsize=8,
                step=step,
                caller="fsdp_train.py:71 clip_grad_norm_",
                kernel="ncclDevKernel_AllReduce_Sum_f32_TREE_LL128",
                stream=21,
                wait=("rs0",),
                late_ns=self.late(s),
            )
            for s in self.sims
        ]
        finish_collective(pend, xfer(4096, 2.0), self.rng, record="norm")

    def step(self, step: int) -> None:
        """Forward (gather, compute per layer), backward (gather, compute, reduce-scatter per
        layer in reverse), the norm's all-reduce, then the step marker closes on a sync."""
        for s in self.sims:
            s.advance(s.main, self.rng.randint(40_000, 120_000))
            s.step_start = s.cpu[s.main]
        for layer in (0, 1):
            self.all_gather(step, layer, "fsdp_train.py:64 train_step")
            for s in self.sims:
                s.compute(s.main, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 7, 300_000, wait=(f"ag{layer}",))
                s.compute(s.main, "vectorized_elementwise_kernel", 7, 40_000)
        for layer in (1, 0):
            self.all_gather(step, layer, "fsdp_train.py:66 train_step")
            for s in self.sims:
                s.compute(
                    s.main,
                    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                    7,
                    550_000,
                    wait=(f"ag{layer}",),
                    record=f"bwd{layer}",
                )
            self.reduce_scatter(step, layer)
        self.clip_grad_norm(step)
        for s in self.sims:
            s.compute(s.main, "vectorized_elementwise_kernel", 7, 60_000, wait=("norm",))
            end = s.sync(s.main)
            self.rep.range(
                s.proc, s.main, s.step_start, end + 1000, registered=nvtx_format.format_step_marker(step), domain=1
            )
            s.cpu[s.main] = max(s.cpu[s.main], end + 2000)


def gen_fsdp_8rank(seed: int = 2) -> list[Report]:
    rng = random.Random(seed)
    rep = Report("synthetic_fsdp_8rank.sqlite")
    rep.process(5990, "torchrun", {5990: "torchrun"})
    perm = list(range(8))
    rng.shuffle(perm)
    sims = []
    for rank in range(8):
        pid = 6000 + 3 * perm[rank]
        proc = rep.process(pid, "python3", {pid: "python3", pid + 1: "pt_autograd_0"})
        sim = RankSim(rep, proc, rng, rank=rank, device=rank, start=T0 + rng.randint(0, 200_000))
        add_rank_marker(rep, sim, rank=rank, local_rank=rank, world=8, host="node-b")
        sims.append(sim)
    job = _FsdpJob(rep, rng, sims)
    for step in range(3):
        job.step(step)
    return [rep]


# ---------------------------------------------------------------------------------------
# Sample 3: gloo on CPU, 2 ranks, NVTX only
# ---------------------------------------------------------------------------------------


def gen_gloo_cpu(seed: int = 3) -> list[Report]:
    rng = random.Random(seed)
    rep = Report("synthetic_gloo_cpu.sqlite", cuda=False)
    rep.process(7001, "torchrun", {7001: "torchrun"})
    procs = [
        rep.process(7020, "python3", {7020: "python3", 7023: "python3"}),
        rep.process(7014, "python3", {7014: "python3"}),
    ]
    cpu = {}
    seq: list[defaultdict[str, int]] = [defaultdict(int), defaultdict(int)]
    for rank, p in enumerate(procs):
        t = T0 + rng.randint(0, 500_000)
        rep.range(p, p.pid, t, t + 15_000, text="init_process_group")  # default domain, inline text
        rep.domain_create(p, p.pid, t + 20_000, nvtx_format.DOMAIN, 1)
        marker = {"rank": rank, "local_rank": rank, "host": "cpu-host"}
        msg = nvtx_format.format_rank_marker(rank, rank, 2, "cpu-host")
        rep.mark(p, p.pid, t + 22_000, registered=msg, domain=1, marker=marker)
        cpu[rank] = t + 30_000

    def coll(ranks, op, api, nbytes, dtype, numel, xfer, caller, pg=0, gsize=2):
        starts, msgs, calls = {}, {}, {}
        for r in ranks:
            cpu[r] += rng.randint(20_000, 400_000)
            starts[r] = cpu[r]
            s = seq[r][str(pg)]
            seq[r][str(pg)] += 1
            call = dict(
                api=api[r] if isinstance(api, dict) else api,
                bytes=nbytes,
                dtype=dtype,
                numel=numel,
                pg=pg,
                gsize=gsize,
                seq=s,
                caller=caller,
            )
            the_op = op[r] if isinstance(op, dict) else op
            msgs[r] = nvtx_format.format_collective(the_op, **call)
            calls[r] = {"op": the_op, **call}
        last = max(starts.values())
        for r in ranks:
            end = last + xfer + rng.randint(0, 3000)
            rep.range(procs[r], procs[r].pid, starts[r], end, registered=msgs[r], domain=1, call=calls[r])
            cpu[r] = end

    for _ in range(3):
        for r in (0, 1):  # unrelated user range in the default domain (must be ignored)
            s0 = cpu[r] + 1000
            cpu[r] = s0 + rng.randint(200_000, 600_000)
            rep.range(procs[r], procs[r].pid, s0, cpu[r], text="forward")
        coll(
            (0, 1),
            "all_reduce",
            "all_reduce",
            4194304,
            "float32",
            1048576,
            xfer(4194304, 1.5),
            "cpu_train.py:31 train_step",
        )
    coll((0, 1), "broadcast", "broadcast", 1048576, "float32", 262144, xfer(1048576, 1.2), "cpu_train.py:20 main")
    coll(
        (0, 1),
        "all_gather",
        "all_gather",
        2 * 524288,
        "float32",
        262144,
        xfer(1048576, 1.0),
        "cpu_train.py:44 evaluate",
    )
    coll((0, 1), "barrier", "barrier", 0, None, None, 40_000, "cpu_train.py:47 evaluate")
    coll(
        (0, 1),
        {0: "send", 1: "recv"},
        {0: "send", 1: "recv"},
        524288,
        "float32",
        131072,
        xfer(524288, 1.0),
        "cpu_train.py:52 exchange",
    )
    coll((0, 1), "barrier", "barrier", 0, None, None, 35_000, "cpu_train.py:55 main")
    return [rep]


# ---------------------------------------------------------------------------------------
# Sample 4: no wrapper, 2 nodes x 2 ranks, one report per node on one clock
# ---------------------------------------------------------------------------------------


def gen_nowrapper_2node(seed: int = 4) -> list[Report]:
    rng = random.Random(seed)
    reps = [Report("node0.sqlite"), Report("node1.sqlite")]
    sims = []
    for node, rep in enumerate(reps):
        rep.process(1190, "torchrun", {1190: "torchrun"})
        for local in range(2):
            pid = 1200 + local  # the same pids (and globalPids) on both nodes
            proc = rep.process(pid, "python3", {pid: "python3", pid + 40: "pt_nccl_watchdg"})
            sim = RankSim(rep, proc, rng, rank=2 * node + local, device=local, start=T0 + rng.randint(0, 400_000))
            sim.domain_done = False
            sims.append(sim)
    drop = (3, 1, 0)  # (rank, step, all_reduce index): kernel without a launch row
    for step in range(3):
        for s in sims:
            s.advance(s.main, rng.randint(50_000, 120_000))
            for k in range(3):
                s.compute(
                    s.main,
                    "ampere_sgemm_128x64_nn" if k != 1 else "vectorized_elementwise_kernel",
                    7,
                    350_000 if k != 1 else 50_000,
                    record=f"c{k}",
                    torch_range="aten::mm" if k != 1 else "aten::add",
                )
        for i in range(2):
            pend = []
            for s in sims:
                if not s.domain_done:  # NCCL registers its NVTX domain at its first call
                    s.rep.domain_create(s.proc, s.main, s.cpu[s.main], "NCCL", NCCL_DOMAIN_ID)
                    s.advance(s.main, 5000)
                    s.domain_done = True
                late = rng.randint(20_000, 120_000) if s.rank >= 2 else 0  # the other node arrives later
                pend.append(
                    s.torch_collective(
                        s.main,
                        "all_reduce",
                        kernel="ncclKernel_AllReduce_RING_LL_Sum_float",
                        stream=13,
                        wait=(f"c{2 * i}",),
                        late_ns=late,
                        drop_launch=(s.rank, step, i) == drop,
                    )
                )
            finish_collective(pend, xfer(8388608, 40.0), rng, record=f"ar{i}")
        pend = [
            s.torch_collective(
                s.main,
                "all_to_all",
                kernel="ncclDevKernel_SendRecv",
                stream=13,
                wait=("ar1",),
                launch=LAUNCH_DRIVER,
                op_id_suffix=True,
                nccl_p2p_peers=4,
            )
            for s in sims
        ]
        finish_collective(pend, xfer(4194304, 20.0), rng, record="a2a")
        for s in sims:
            s.compute(s.main, "vectorized_elementwise_kernel", 7, 40_000, wait=("a2a",), torch_range="aten::add_")
            s.sync(s.main)
    return reps
