"""The NVTX message format shared by the capture wrapper and the ingest SQL.

Every message lives in the NVTX domain ``nsyscomm``. nsys 2022.4 drops NVTX
payload structs and old nvtx packages only give us a message string, so the
metadata travels inside the message itself, as ``|``-separated ``key=value``
fields. The ingest splits them at ``|`` (in C, nsyscomm/ingest/nsys/_sqlite_scan.c
split_message, for messages in this layout; in sql/calls_nsys.sql, for any
order of the fields), so values must not contain ``|``; ``caller`` is always
last and is read to the end of the string, so a caller may contain any
character.

Collective call (a push/pop range that encloses the backend's kernel launch)::

    nsyscomm:all_reduce|api=all_reduce|bytes=4194304|dtype=float32|numel=1048576|pg=0|gsize=4|granks=|seq=17|async=0|step=3|caller=train.py:88 train_step

Process marker (one per process, a range or a mark, once the rank is known)::

    nsyscomm.rank|rank=0|local_rank=0|world=4|host=node-a

Point-to-point calls (send, recv) also carry ``|peer=R`` (the peer's global rank) just before
``caller``; their ``seq`` counts per (group, pair of ranks), so (group, pair, seq) names one message.

Step marker (a range or a mark, emitted by ``nsyscomm.step(i)``)::

    nsyscomm.step|step=12

Completion mark of an asynchronous call (a call that returned a Work or a future: ``async=1``),
emitted on the backend's thread when its work is done (nsyscomm/capture/completion.py), and the
range of the caller's wait for it (``Work.wait``, ``wait_tensor``)::

    nsyscomm.done|op=all_reduce|pg=0|seq=17
    nsyscomm.wait|op=recv|pg=0|seq=3|peer=1

Their fields name the call they belong to in its process: ``op``, ``pg`` and ``seq`` as in the
call's message, and ``peer`` for point-to-point calls. Neither is emitted for synchronous calls,
nor for groups of device backends (NCCL), whose kernels tell when the work ran.

A rank that ran out of inputs under ``torch.distributed.algorithms.Join`` holds a range over
``Join.__exit__``, where it issues shadow collectives to match the ranks still training, ``step``
being its step when it joined (nsyscomm/capture/join_ranks.py)::

    nsyscomm.joined|step=4

``granks`` is empty for the default (world) group. ``step`` is empty when no
step is known. ``seq`` counts calls per group name in each process, from 0.
"""

from __future__ import annotations

DOMAIN = "nsyscomm"
# the range the wrapper holds open over the steps `nsyscomm run --steps A:B` captures; nsys starts
# and stops on it (-c nvtx -p CAPTURE_RANGE@DOMAIN)
CAPTURE_RANGE = "nsyscomm.capture"
COLLECTIVE_PREFIX = "nsyscomm:"
RANK_PREFIX = "nsyscomm.rank"
GROUP_PREFIX = "nsyscomm.group"
STEP_PREFIX = "nsyscomm.step"
DONE_PREFIX = "nsyscomm.done"
WAIT_PREFIX = "nsyscomm.wait"
JOINED_PREFIX = "nsyscomm.joined"
VERSION = 1

# Order matters only for readability; caller must stay last.
COLLECTIVE_FIELDS = (
    "api",
    "bytes",
    "dtype",
    "numel",
    "pg",
    "gsize",
    "granks",
    "seq",
    "async",
    "step",
    "peer",
    "caller",
)


def _clean(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value).replace("|", "/")


def format_collective(
    op: str,
    *,
    api: str,
    bytes: int,
    dtype: str | None,
    numel: int | None,
    pg: str | int,
    gsize: int | None,
    granks: list[int] | tuple[int, ...] = (),
    seq: int,
    async_op: bool = False,
    step: int | None = None,
    caller: str = "",
    peer: int | None = None,
) -> str:
    fields = {
        "api": api,
        "bytes": bytes,
        "dtype": dtype,
        "numel": numel,
        "pg": pg,
        "gsize": gsize,
        "granks": granks,
        "seq": seq,
        "async": async_op,
        "step": step,
    }
    body = "|".join(f"{k}={_clean(v)}" for k, v in fields.items())
    if peer is not None:
        body += f"|peer={_clean(peer)}"
    # caller is read to the end of the message, so it is not cleaned of '|'
    return f"{COLLECTIVE_PREFIX}{op}|{body}|caller={caller or ''}"


def collective_template(
    op: str, *, api: str, dtype: str | None, pg: str | int, gsize: int | None, granks: list[int] | tuple[int, ...] = ()
) -> str:
    """A ``%``-template for the hot path: ``template % (bytes, numel, seq, async, step, caller)``.

    ``collective_template(op, api=a, dtype=d, pg=p, gsize=g, granks=r) % (b, n, s, "1" or "0", step or "", c)``
    equals ``format_collective(op, api=a, bytes=b, dtype=d, numel=n, pg=p, gsize=g, granks=r, seq=s,
    async_op=..., step=step, caller=c)``; the wrapper caches one template per (op, api, dtype, group)
    so a call costs one ``%`` instead of ten field conversions.
    """
    static = {
        k: _clean(v).replace("%", "%%")
        for k, v in (("api", api), ("dtype", dtype), ("pg", pg), ("gsize", gsize), ("granks", granks))
    }
    return (
        f"{COLLECTIVE_PREFIX}{op.replace('%', '%%')}|api={static['api']}|bytes=%s|dtype={static['dtype']}"
        f"|numel=%s|pg={static['pg']}|gsize={static['gsize']}|granks={static['granks']}"
        "|seq=%s|async=%s|step=%s|caller=%s"
    )


def with_peer(message: str, peer: int) -> str:
    """Add the peer field to a point-to-point message made from a template (before caller, which is last)."""
    return message.replace("|caller=", f"|peer={_clean(peer)}|caller=", 1)


def format_ident(op: str, pg: str | int, seq: int, peer: int | None = None) -> str:
    """The fields that name one call in its process, for its completion mark and wait range."""
    ident = f"op={_clean(op)}|pg={_clean(pg)}|seq={seq}"
    return ident if peer is None else f"{ident}|peer={_clean(peer)}"


def format_done(ident: str) -> str:
    return f"{DONE_PREFIX}|{ident}"


def format_wait(ident: str) -> str:
    return f"{WAIT_PREFIX}|{ident}"


def format_rank_marker(rank: int, local_rank: int, world: int, host: str) -> str:
    return f"{RANK_PREFIX}|rank={rank}|local_rank={local_rank}|world={world}|host={_clean(host)}"


def format_group_marker(pg: str | int, desc: str) -> str:
    """Once per process group the wrapper meets: its description (torch's group_desc; DeviceMesh
    names its groups ``mesh_<dimension name>``), for the parallelism dimensions."""
    return f"{GROUP_PREFIX}|pg={_clean(pg)}|desc={_clean(desc)}"


def format_joined(step: int) -> str:
    """The range over a rank's Join.__exit__: the step at which it joined."""
    return f"{JOINED_PREFIX}|step={int(step)}"


def format_step_marker(step: int) -> str:
    return f"{STEP_PREFIX}|step={step}"


def parse(message: str) -> dict:
    """Python twin of the SQL extraction, for tests and for non-SQL sources."""
    head, _, rest = message.partition("|caller=") if message.startswith(COLLECTIVE_PREFIX) else (message, "", None)
    parts = head.split("|")
    out = {"kind": parts[0]}
    for part in parts[1:]:
        k, _, v = part.partition("=")
        out[k] = v
    if rest is not None:
        out["caller"] = rest
    return out
