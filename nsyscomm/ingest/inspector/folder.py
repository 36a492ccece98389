"""What only the whole folder of Inspector dumps tells (one dump per process; the plugin writes
them all into NCCL_INSPECTOR_DUMP_DIR): each process's global rank, each communicator's members
by global rank, and the records a rank lacks that its communicator's other ranks have.

``header.rank`` is a process's rank within one communicator. The global rank is its rank in the
world communicator: a communicator every dump of the folder recorded, each with a rank of its
own, and of the most ranks. Without one (the world's calls all below the plugin's minimum size,
or dropped), ranks follow the processes' (host, pid) order, and one line says so.

A record the plugin did not write (its ring was full when the dump thread came, or it was timed
on the host and the plugin keeps GPU-timed records only) leaves its rank without that
communicator's sequence number that the other ranks have: counted here, never matched to another
call. Point-to-point calls pair as the n-th send from one rank to another with the n-th receive
there; where the two sides hold different counts for one direction, that pairing would be wrong,
so those calls stay unpaired and are counted."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from nsyscomm.ingest.inspector.records import Dump, looks_like, read_dump


@dataclass
class Folder:
    """The dumps of one folder and what they tell together."""

    dumps: dict[Path, Dump]  # by resolved path, in name order
    rank: dict[Path, int]  # each dump's global rank
    world: str | None  # the world communicator's id, None when none was recorded
    members: dict[str, dict[int, int]]  # communicator id -> its rank -> global rank
    missing: dict[Path, int] = field(default_factory=dict)  # collective records a rank lacks
    unpaired: set[tuple[str, int, int]] = field(default_factory=set)  # (comm, sender, receiver) not paired
    unpaired_calls: int = 0

    @property
    def first(self) -> Path:
        """The dump whose extract says what holds for the whole folder, once."""
        return next(iter(self.dumps))


_CACHE: dict[tuple, Folder] = {}


def dumps_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and looks_like(p))


def folder_of(path: Path) -> Folder:
    """The Folder of the dump at path (its siblings read once per process and kept while none of
    them changes)."""
    path = Path(path).resolve()
    files = dumps_in(path.parent)
    if path not in files:
        files = sorted([*files, path])
    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = _survey({p: read_dump(p) for p in files})
    return _CACHE[key]


def _world(dumps: dict[Path, Dump]) -> str | None:
    """The communicator every dump recorded with a distinct rank, of the most ranks (ties: the
    smallest id, so that every run picks the same)."""
    seen: dict[str, dict[Path, int]] = defaultdict(dict)
    size: dict[str, int] = {}
    for p, d in dumps.items():
        for r in d.records:
            seen[r.comm.id][p] = r.comm.rank
            size[r.comm.id] = r.comm.n_ranks
    whole = [c for c, ranks in seen.items() if len(ranks) == len(dumps) and len(set(ranks.values())) == len(dumps)]
    if not whole:
        return None
    return min(whole, key=lambda c: (-size[c], c))


def _survey(dumps: dict[Path, Dump]) -> Folder:
    world = _world(dumps)
    rank: dict[Path, int] = {}
    if world is not None:
        for p, d in dumps.items():
            rank[p] = next(r.comm.rank for r in d.records if r.comm.id == world)
    else:
        for i, p in enumerate(sorted(dumps, key=lambda p: (dumps[p].host, dumps[p].pid))):
            rank[p] = i
    members: dict[str, dict[int, int]] = defaultdict(dict)
    for p, d in dumps.items():
        for r in d.records:
            members[r.comm.id][r.comm.rank] = rank[p]
    out = Folder(dumps=dumps, rank=rank, world=world, members=dict(members))
    _missing(out)
    _unpaired(out)
    return out


def _missing(f: Folder) -> None:
    """Per dump, the collective records its communicators' other ranks have and it lacks."""
    held: dict[tuple[str, str], dict[Path, set[int]]] = defaultdict(lambda: defaultdict(set))
    for p, d in f.dumps.items():
        for r in d.records:
            if not r.p2p:
                held[(r.comm.id, r.func)][p].add(r.sn)
    for by_dump in held.values():
        every = set().union(*by_dump.values())
        for p, sns in by_dump.items():
            if len(sns) < len(every):
                f.missing[p] = f.missing.get(p, 0) + len(every) - len(sns)


def _unpaired(f: Folder) -> None:
    """The directions (communicator, sender, receiver) whose sends and receives do not count
    alike: some of them were not written, and which is unknown."""
    sends: Counter[tuple[str, int, int]] = Counter()
    recvs: Counter[tuple[str, int, int]] = Counter()
    for d in f.dumps.values():
        for r in d.records:
            if not r.p2p or r.peer is None:
                continue
            me, peer = r.comm.rank, r.peer
            if r.func == "Send":
                sends[(r.comm.id, me, peer)] += 1
            else:
                recvs[(r.comm.id, peer, me)] += 1
    for key in set(sends) | set(recvs):
        if sends[key] != recvs[key]:
            f.unpaired.add(key)
            f.unpaired_calls += sends[key] + recvs[key]
