"""Deterministic generator of synthetic nsys SQLite reports with exact ground truth.

The reports imitate nsys 2026.2 exports (schema 3.25): the tables and columns are those of
the real CREATE statements; names are registered in ``StringIds``; ``globalTid`` carries a
host id in the top bits, the pid in bits 24..47 and the tid in bits 0..23; correlation ids
restart at 1 in every process; rows are inserted in a shuffled (seeded) order.

Next to each report ``<name>.truth.json`` holds what the ingest and the analyses must find.
The truth is computed here, in plain Python, from the generated events (never by running
nsyscomm's SQL), following the rules below (the spec the ingest implements):

* one row per collective call per rank. A wrapper range (``nsyscomm:<op>|...``) gives one row
  with the message's fields; its kernels are the NCCL kernels whose launch call lies inside
  the range on the same thread. Without a wrapper, one row per NCCL kernel: op from the
  kernel name (SendRecv -> the enclosing PyTorch ``nccl:<op>`` range's op, else ``send``),
  source ``torch_range`` when such a range on the launching thread contains the launch, else
  ``kernel_name``; bytes/group NULL; seq = order of the rank's rows of that op by gpu_start;
  group_size = number of ranks sharing (op, seq).
* rank from the ``nsyscomm.rank`` marker, else process order (report file name, pid) over the
  processes that have collectives.
* logical collective = rows with the same (group, op, seq); latency = min duration.
* summary / by_caller / ranks / skew / exposed_ns as in docs/architecture.md (see ``compute_truth``).

Use ``python -m nsyscomm.synth OUTDIR`` to regenerate the samples.

Modules: ``report`` (the in-memory report), ``sqlite_writer`` (an nsys SQLite export of it),
``ranksim`` (a per-rank GPU job simulator), ``truth`` (the ground truth, with ``kernel_names``
and ``intervals``), ``samples`` (the bundled samples' jobs) and ``generate`` (writing them, and
the command line); this package is their front door. Nothing at run time imports it: it makes
test reports.
"""

from __future__ import annotations

from nsyscomm.synth.generate import (
    SAMPLES,
    generate,
    generate_all,
    main,
    truth_json,
)
from nsyscomm.synth.intervals import (
    minus_len,
    union,
    union_len,
)
from nsyscomm.synth.kernel_names import (
    parse_kernel_name,
)
from nsyscomm.synth.ranksim import (
    RankSim,
    add_rank_marker,
    finish_collective,
    xfer,
)
from nsyscomm.synth.report import (
    CUPTI_TABLES,
    GENERATOR_VERSION,
    HOST_ID,
    LAUNCH_DRIVER,
    LAUNCH_RUNTIME,
    NCCL_DOMAIN_ID,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    SESSION_SYSTEM_CLOCK_NS,
    SESSION_UTC_EPOCH_NS,
    T0,
    TABLES,
    TRUTH_SCHEMA,
    Proc,
    Report,
    global_pid,
    global_tid,
    pid_of,
    tid_of,
)
from nsyscomm.synth.samples import (
    DDP_BUCKETS,
    gen_ddp_4rank,
    gen_fsdp_8rank,
    gen_gloo_cpu,
    gen_nowrapper_2node,
)
from nsyscomm.synth.sqlite_writer import (
    cols,
    create_statement,
    demangled,
    kernel_shape,
    mangled,
    write_sqlite,
)
from nsyscomm.synth.truth import (
    compute_truth,
    summary_key,
)

__all__ = [
    "CUPTI_TABLES",
    "DDP_BUCKETS",
    "GENERATOR_VERSION",
    "HOST_ID",
    "LAUNCH_DRIVER",
    "LAUNCH_RUNTIME",
    "NCCL_DOMAIN_ID",
    "NVTX_DOMAIN_CREATE",
    "NVTX_MARK",
    "NVTX_PUSHPOP",
    "NVTX_STARTEND",
    "Proc",
    "RankSim",
    "Report",
    "SAMPLES",
    "SESSION_SYSTEM_CLOCK_NS",
    "SESSION_UTC_EPOCH_NS",
    "T0",
    "TABLES",
    "TRUTH_SCHEMA",
    "add_rank_marker",
    "cols",
    "compute_truth",
    "create_statement",
    "demangled",
    "finish_collective",
    "gen_ddp_4rank",
    "gen_fsdp_8rank",
    "gen_gloo_cpu",
    "gen_nowrapper_2node",
    "generate",
    "generate_all",
    "global_pid",
    "global_tid",
    "kernel_shape",
    "main",
    "mangled",
    "minus_len",
    "parse_kernel_name",
    "pid_of",
    "summary_key",
    "tid_of",
    "truth_json",
    "union",
    "union_len",
    "write_sqlite",
    "xfer",
]
