"""Generator of large nsys-schema SQLite reports, for benchmarks of the ingest.

    python benchmarks/gen_large_report.py OUT.sqlite [--ranks 8] [--steps 10] [--layers 500]
        [--kernels-per-layer 50] [--nccl-share 0.1] [--seed 0]
    python benchmarks/gen_large_report.py OUTDIR --per-rank --ranks 1024 --steps 2 --layers 4
    python benchmarks/gen_large_report.py OUT.sqlite --ranges-per-kernel 9 --record-shapes

The last is a 3.5 GB-class report (about 2M kernels and 16M NVTX ranges, the size users report
from PyTorch's ``emit_nvtx(record_shapes=True)``): ``ranges-per-kernel`` nested ranges around
each compute kernel's launch (the module, the autograd node, the op...), each named as PyTorch
names them, with ``seq``, ``op_id`` and the inputs' sizes under ``--record-shapes``. Those ranges
change no call: they only make the NVTX table large.

One process per rank (one GPU each). Per step and layer every rank launches
``kernels-per-layer`` kernels, a ``nccl-share`` of them NCCL collectives (a wrapper range
``nsyscomm:<op>|...`` around a cuLaunchKernelEx), the rest compute kernels (a PyTorch-like
``aten::*`` range, text, around a cudaLaunchKernel). So the defaults give 8 x 10 x 500 x 50 =
2M kernels, 2M launch calls and 2M NVTX ranges (about 6M rows, ~360 MB).

Tables and columns are synth.TABLES (nsys 2026.2, export schema 3.25); correlation ids restart
in every process; rows are written rank after rank, so not in time order. Written with
executemany in chunks: memory stays bounded whatever the size. ``--per-rank`` writes one report
per rank into OUTDIR (rank_00000.sqlite, ...), the layout of multi-node jobs.

The expected result is simple and printed (and returned by ``generate``): per rank,
steps x layers x collectives-per-layer wrapper calls; every collective matched across all ranks.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nsyscomm import nvtx_format, synth  # noqa: E402

COMPUTE = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
    "vectorized_elementwise_kernel",
    "reduce_kernel",
    "layer_norm_kernel",
    "softmax_warp_forward",
)
TORCH_OPS = ("aten::mm", "aten::add", "aten::sum", "aten::layer_norm", "aten::softmax")
# the ranges around an op's range, outermost first (--ranges-per-kernel)
OUTER_RANGES = (
    "nn.Module: TransformerLayer",
    "nn.Module: Linear",
    "autograd::engine::evaluate_function: MmBackward0",
    "MmBackward0",
    "aten::linear",
    "aten::matmul",
    "aten::t",
    "aten::transpose",
    "aten::as_strided",
)
SHAPES = ", sizes = [[4096, 8192], [8192, 4096]], input_op_ids = [{}, {}]"
COLLECTIVES = (  # (op, api, kernel, dtype, itemsize, bytes)
    ("all_gather", "all_gather_single", "ncclDevKernel_AllGather_RING_LL", "bfloat16", 2, 8 << 20),
    ("reduce_scatter", "reduce_scatter_single", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "bfloat16", 2, 8 << 20),
    ("all_reduce", "DDP bucket", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "float32", 4, 25 << 20),
    ("all_reduce", "all_reduce", "ncclDevKernel_AllReduce_Sum_f32_TREE_LL128", "float32", 4, 4096),
)
CHUNK = 100_000


def _nccl_slots(k: int, share: float) -> list[bool]:
    """Which of a layer's k kernel slots are collectives (evenly spread)."""
    return [int((i + 1) * share) > int(i * share) for i in range(k)]


class _Writer:
    def __init__(self, path: Path):
        if path.exists():
            path.unlink()
        self.con = sqlite3.connect(str(path))
        self.con.execute("PRAGMA journal_mode = OFF")
        self.con.execute("PRAGMA synchronous = OFF")
        for t in synth.TABLES:
            self.con.execute(synth.create_statement(t))
        self.buf: dict[str, list] = {t: [] for t in synth.TABLES}
        self.strings: dict[str, int] = {}
        self.shapes: dict[str, tuple] = {}
        self.rows = 0

    def sid(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            i = self.strings[s] = len(self.strings) + 1
            self.add("StringIds", (i, s))
        return i

    def add(self, table: str, row: tuple) -> None:
        b = self.buf[table]
        b.append(row)
        if len(b) >= CHUNK:
            self.flush(table)

    def flush(self, table: str) -> None:
        b = self.buf[table]
        if b:
            ph = ",".join("?" * len(synth.TABLES[table]))
            self.con.executemany(f"INSERT INTO {table} VALUES ({ph})", b)
            self.rows += len(b)
            b.clear()

    def close(self) -> None:
        for t in self.buf:
            self.flush(t)
        self.con.commit()
        self.con.close()


def _kernel_row(w: _Writer, name: str, start, end, device, stream, corr, gpid, grid) -> tuple:
    shape = w.shapes.get(name)  # string ids are per report
    if shape is None:
        s = synth.kernel_shape(name)
        shape = w.shapes[name] = (
            w.sid(synth.demangled(name)),
            w.sid(name),
            w.sid(synth.mangled(name)),
            s["launchType"],
            s["cacheConfig"],
            s["registersPerThread"],
            s["gridX"],
            s["gridY"],
            s["gridZ"],
            s["blockX"],
            s["blockY"],
            s["blockZ"],
            s["staticSharedMemory"],
            s["dynamicSharedMemory"],
            s["localMemoryPerThread"],
            s["localMemoryTotal"],
            s["sharedMemoryExecuted"],
            s["sharedMemoryLimitConfig"],
            s["clusterX"],
            s["clusterY"],
            s["clusterZ"],
            s["clusterSchedulingPolicy"],
            s["maxPotentialClusterSize"],
            s["maxActiveClusters"],
        )
    (
        dem,
        short,
        mang,
        lt,
        cc,
        reg,
        gx,
        gy,
        gz,
        bx,
        by,
        bz,
        ssm,
        dsm,
        lmt,
        lmtot,
        sme,
        smlc,
        cx,
        cy,
        cz,
        csp,
        mpcs,
        mac,
    ) = shape
    # column order of synth.TABLES["CUPTI_ACTIVITY_KIND_KERNEL"]
    return (
        start,
        end,
        device,
        device + 1,
        0,
        stream,
        corr,
        gpid,
        dem,
        short,
        mang,
        lt,
        cc,
        reg,
        gx,
        gy,
        gz,
        bx,
        by,
        bz,
        ssm,
        dsm,
        lmt,
        lmtot,
        grid,
        sme,
        None,
        smlc,
        None,
        None,
        None,
        None,
        cx,
        cy,
        cz,
        csp,
        mpcs,
        mac,
        None,
        "[]",
    )


def _range_name(name: str, seq: int, shapes: bool) -> str:
    """An op range's name as PyTorch's emit_nvtx writes it (with the inputs' sizes under record_shapes)."""
    if not shapes:
        return name
    return f"{name}, seq = {seq}, op_id = {seq + 1}" + SHAPES.format(seq - 2, seq - 1)


def generate(
    out,
    *,
    ranks=8,
    steps=10,
    layers=500,
    kernels_per_layer=50,
    nccl_share=0.1,
    seed=0,
    per_rank=False,
    quiet=False,
    ranges_per_kernel=1,
    record_shapes=False,
) -> dict:
    """Write the report(s); returns the expected counts."""
    out = Path(out)
    rng = random.Random(seed)
    slots = _nccl_slots(kernels_per_layer, nccl_share)
    pids = [10_000 + 7 * r for r in range(ranks)]
    if per_rank:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / f"rank_{r:05d}.sqlite" for r in range(ranks)]
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        paths = [out]
    writers = [_Writer(p) for p in paths]
    launch_rt, launch_drv = synth.LAUNCH_RUNTIME, synth.LAUNCH_DRIVER

    def W(r):
        return writers[r] if per_rank else writers[0]

    for r, pid in enumerate(pids):
        w = W(r)
        gpid = synth.global_pid(pid)
        w.add("PROCESSES", (gpid, pid, "python3"))
        w.add("ThreadNames", (w.sid("python3"), 20, synth.global_tid(pid, pid)))
    cpu = [synth.T0 + rng.randint(0, 200_000) for _ in range(ranks)]
    stream_free = [0] * ranks
    corr = [0] * ranks
    grid = [0] * ranks
    seq = 0
    per_layer_colls = sum(slots)
    # rank markers (registered strings in the nsyscomm domain, as the wrapper emits them)
    for r, pid in enumerate(pids):
        w = W(r)
        gtid = synth.global_tid(pid, pid)
        w.add(
            "NVTX_EVENTS",
            (cpu[r], None, synth.NVTX_DOMAIN_CREATE, None, None, None, nvtx_format.DOMAIN, gtid, None, None, 1)
            + (None,) * 9,
        )
        msg = nvtx_format.format_rank_marker(r, r % 8, ranks, f"node-{r // 8}")
        w.add(
            "NVTX_EVENTS",
            (cpu[r] + 3000, cpu[r] + 4500, synth.NVTX_PUSHPOP, None, None, None, None, gtid, None, w.sid(msg), 1)
            + (None,) * 9,
        )
        cpu[r] += 40_000
    nvtx_pad = (None,) * 9
    t_names = [(w.sid(launch_rt), w.sid(launch_drv)) for w in writers]
    for step in range(steps):
        for layer in range(layers):
            ci = 0
            for slot in slots:
                if not slot:
                    for r, pid in enumerate(pids):
                        w = W(r)
                        nid_rt = t_names[r if per_rank else 0][0]
                        gtid = synth.global_tid(pid, pid)
                        j = rng.randrange(5)
                        t = cpu[r]
                        ls = t + 2000
                        le = ls + 4000 + (t & 1023)
                        corr[r] += 1
                        grid[r] += 1
                        ks = max(le + 1500, stream_free[r])
                        ke = ks + 20_000 + (t & 4095) * 8
                        stream_free[r] = ke
                        # the outer ranges nest around the op's range, 10 ns apart at each end
                        outer = ranges_per_kernel - 1
                        for i in range(outer):
                            name = _range_name(OUTER_RANGES[i % len(OUTER_RANGES)], grid[r], record_shapes)
                            w.add(
                                "NVTX_EVENTS",
                                (t + 10 * i, le + 1500 + 10 * (outer - i), synth.NVTX_PUSHPOP, None, None, None)
                                + (name, gtid, None, None, 0)
                                + nvtx_pad,
                            )
                        op_name = _range_name(TORCH_OPS[j], grid[r], record_shapes)
                        w.add(
                            "NVTX_EVENTS",
                            (
                                t + 10 * outer,
                                le + 1500,
                                synth.NVTX_PUSHPOP,
                                None,
                                None,
                                None,
                                op_name,
                                gtid,
                                None,
                                None,
                                0,
                            )
                            + nvtx_pad,
                        )
                        w.add("CUPTI_ACTIVITY_KIND_RUNTIME", (ls, le, 0, gtid, corr[r], nid_rt, 0, None))
                        w.add(
                            "CUPTI_ACTIVITY_KIND_KERNEL",
                            _kernel_row(w, COMPUTE[j], ks, ke, r % 8, 7, corr[r], synth.global_pid(pid), grid[r]),
                        )
                        cpu[r] = le + 1500 + 6000 + rng.randrange(4000)
                    continue
                op, api, kname, dtype, isz, nbytes = COLLECTIVES[(layer * per_layer_colls + ci) % len(COLLECTIVES)]
                ci += 1
                starts = []
                for r, pid in enumerate(pids):
                    w = W(r)
                    gtid = synth.global_tid(pid, pid)
                    t = cpu[r]
                    msg = nvtx_format.format_collective(
                        op,
                        api=api,
                        bytes=nbytes,
                        dtype=dtype,
                        numel=nbytes // isz,
                        pg=0,
                        gsize=ranks,
                        seq=seq,
                        step=step,
                        caller=f"train.py:{100 + layer % 7} layer_{layer % 7}",
                    )
                    ls = t + 5000
                    le = ls + 6000
                    re_ = le + 3000
                    corr[r] += 1
                    w.add(
                        "NVTX_EVENTS",
                        (t, re_, synth.NVTX_PUSHPOP, None, None, None, None, gtid, None, w.sid(msg), 1) + nvtx_pad,
                    )
                    w.add(
                        "CUPTI_ACTIVITY_KIND_RUNTIME",
                        (ls, le, 1, gtid, corr[r], t_names[r if per_rank else 0][1], 0, None),
                    )
                    starts.append((max(le + 2000, stream_free[r]), corr[r]))
                    cpu[r] = re_ + 8000 + rng.randrange(4000)
                end = max(s for s, _ in starts) + 12_000 + nbytes // 100
                for r, pid in enumerate(pids):
                    grid[r] += 1
                    ks, c = starts[r]
                    ke = end + rng.randrange(900)
                    stream_free[r] = ke
                    W(r).add(
                        "CUPTI_ACTIVITY_KIND_KERNEL",
                        _kernel_row(W(r), kname, ks, ke, r % 8, 13, c, synth.global_pid(pid), grid[r]),
                    )
                seq += 1
    for w in writers:
        w.add(
            "TARGET_INFO_SESSION_START_TIME",
            (synth.SESSION_UTC_EPOCH_NS, "2026-05-28T20:26:40", "2026-05-28T20:26:40", synth.SESSION_SYSTEM_CLOCK_NS),
        )
        for k, v in (
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", "2026.2.1.210"),
            ("EXPORT_SCHEMA_VERSION", "3.25.0"),
            ("EXPORT_PARAM_INCLUDE_BLOBS", "false"),
            ("EXPORT_PARAM_INCLUDE_JSON", "false"),
            ("DERIVED_BY", "benchmarks/gen_large_report.py (synthetic, no real capture)"),
        ):
            w.add("META_DATA_EXPORT", (k, v))
    rows = 0
    for w in writers:
        w.close()
        rows += w.rows
    return {
        "reports": len(paths),
        "ranks": ranks,
        "rows": rows,
        "kernels": ranks * steps * layers * kernels_per_layer,
        "nvtx_ranges": ranks
        * steps
        * layers
        * (per_layer_colls + (kernels_per_layer - per_layer_colls) * ranges_per_kernel),
        "collectives_per_rank": steps * layers * per_layer_colls,
        "logical_collectives": steps * layers * per_layer_colls,
        "bytes": sum(p.stat().st_size for p in paths),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="report file (or folder with --per-rank)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layers", type=int, default=500)
    ap.add_argument("--kernels-per-layer", type=int, default=50)
    ap.add_argument("--nccl-share", type=float, default=0.1, help="share of kernels that are NCCL collectives")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-rank", action="store_true", help="one report per rank in the folder OUT")
    ap.add_argument(
        "--ranges-per-kernel", type=int, default=1, help="nested NVTX ranges around each compute kernel's launch"
    )
    ap.add_argument("--record-shapes", action="store_true", help="op ranges named with seq, op_id and sizes")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    info = generate(
        a.out,
        ranks=a.ranks,
        steps=a.steps,
        layers=a.layers,
        kernels_per_layer=a.kernels_per_layer,
        nccl_share=a.nccl_share,
        seed=a.seed,
        per_rank=a.per_rank,
        ranges_per_kernel=a.ranges_per_kernel,
        record_shapes=a.record_shapes,
    )
    print(
        f"{a.out}: {info['reports']} report(s), {info['rows']:,} rows, {info['kernels']:,} kernels, "
        f"{info['nvtx_ranges']:,} NVTX ranges, "
        f"{info['collectives_per_rank']:,} collectives per rank, {info['bytes'] / 1e6:.0f} MB "
        f"in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
