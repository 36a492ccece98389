"""The wrapper's completion marks and wait ranges for asynchronous calls (no profiler: the emitter
is replaced), on a world of one gloo rank."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from nsyscomm import nvtx_format as fmt  # noqa: E402
from nsyscomm.capture import wrapper as W  # noqa: E402
from tests.conftest import single_rank_gloo  # noqa: E402


class Rec:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []  # (kind, message or None, thread)

    def add(self, kind, msg=None):
        with self.lock:
            self.events.append((kind, msg, threading.get_ident()))

    def of(self, prefix):
        return [e for e in self.events if e[1] is not None and e[1].startswith(prefix)]


@pytest.fixture(scope="module")
def pg():
    yield from single_rank_gloo()


@pytest.fixture
def rec(pg, monkeypatch):
    r = Rec()
    W.annotate(True)
    W._reset_for_tests()
    monkeypatch.setattr(W, "_push", lambda m: r.add("push", m))
    monkeypatch.setattr(W, "_pop", lambda: r.add("pop"))
    monkeypatch.setattr(W, "_mark", lambda m: r.add("mark", m))
    monkeypatch.setattr(W, "_wpush", lambda m: r.add("wpush", m))
    monkeypatch.setattr(W, "_wpop", lambda: r.add("wpop"))
    yield r
    W.annotate(False)


def _settle(rec, prefix, n):
    """The done marks come from gloo's thread: wait (bounded) until n are there."""
    for _ in range(200):
        if len(rec.of(prefix)) >= n:
            break
        time.sleep(0.01)
    return rec.of(prefix)


def test_async_all_reduce_marks_its_completion_and_its_wait(rec):
    t = torch.ones(1024)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    call = fmt.parse(rec.of(fmt.COLLECTIVE_PREFIX)[0][1])
    assert call["async"] == "1"
    ident = fmt.format_ident("all_reduce", call["pg"], int(call["seq"]))
    done = _settle(rec, fmt.DONE_PREFIX, 1)
    assert [d[1] for d in done] == [fmt.format_done(ident)]
    assert [e[1] for e in rec.of(fmt.WAIT_PREFIX)] == [fmt.format_wait(ident)]
    kinds = [e[0] for e in rec.events if e[0] in ("wpush", "wpop")]
    assert kinds == ["wpush", "wpop"]


def test_synchronous_calls_mark_nothing_and_keep_the_fast_path(rec):
    t = torch.ones(1024)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    time.sleep(0.05)
    assert len(rec.of(fmt.COLLECTIVE_PREFIX)) == 2
    assert not rec.of(fmt.DONE_PREFIX) and not rec.of(fmt.WAIT_PREFIX)
    if W._fastpath is not None:
        assert type(dist.all_reduce) is W._fastpath.Hot


def test_functional_collective_wait_names_its_call(rec):
    import torch.distributed._functional_collectives as fc

    t = torch.ones(64)
    y = fc.all_reduce(t, "sum", dist.group.WORLD)
    assert float(y[0]) == 1.0  # a view of the result: AsyncCollectiveTensor waits on its storage
    call = fmt.parse(rec.of(fmt.COLLECTIVE_PREFIX)[0][1])
    ident = fmt.format_ident("all_reduce", call["pg"], int(call["seq"]))
    assert [e[1] for e in rec.of(fmt.WAIT_PREFIX)] == [fmt.format_wait(ident)]


def test_a_wait_nsyscomm_did_not_see_runs_untouched(rec):
    t = torch.ones(16)
    W.annotate(False)
    w = dist.all_reduce(t, async_op=True)
    W.annotate(True)
    w.wait()
    assert not rec.of(fmt.WAIT_PREFIX)


def test_identity_fields_round_trip():
    ident = fmt.format_ident("recv", "3", 5, 1)
    assert ident == "op=recv|pg=3|seq=5|peer=1"
    d = fmt.parse(fmt.format_done(ident))
    assert d == {"kind": fmt.DONE_PREFIX, "op": "recv", "pg": "3", "seq": "5", "peer": "1"}
    assert fmt.parse(fmt.format_wait(fmt.format_ident("a|b", 0, 1)))["op"] == "a/b"


def test_a_functional_collective_that_waited_inside_leaves_nothing_in_flight(rec):
    """A functional all_gather along a dim other than 0 waits for its work itself (to chunk and
    cat) and returns a plain tensor: nothing of it stays in flight, so no later wait on that
    memory (the allocator reuses it for other calls' outputs) is taken for its own."""
    import torch.distributed._functional_collectives as fc

    from nsyscomm.capture import completion

    y = fc.all_gather_single(torch.ones(2, 3, 4), 2, dist.group.WORLD)
    assert not isinstance(y, fc.AsyncCollectiveTensor) and len(rec.of(fmt.COLLECTIVE_PREFIX)) == 1
    assert not completion._tensor_ident
    fc.wait_tensor(y)
    assert not rec.of(fmt.WAIT_PREFIX)
