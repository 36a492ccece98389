"""Unit tests of the collective wrapper (no profiler): messages captured by replacing the emitter."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from nsyscomm import nvtx_format as fmt  # noqa: E402
from nsyscomm.capture import python_layer  # noqa: E402
from nsyscomm.capture import wrapper as W  # noqa: E402
from tests.conftest import ROOT, single_rank_gloo  # noqa: E402

THIS = os.path.basename(__file__)


class Rec:
    def __init__(self):
        self.lock = threading.Lock()
        self.msgs, self.marks, self.depth = [], [], {}

    def push(self, m):
        with self.lock:
            self.msgs.append(m)
            t = threading.get_ident()
            self.depth[t] = self.depth.get(t, 0) + 1

    def pop(self):
        with self.lock:
            t = threading.get_ident()
            self.depth[t] -= 1

    def mark(self, m):
        self.marks.append(m)

    def parsed(self):
        return [fmt.parse(m) for m in self.msgs if m.startswith(fmt.COLLECTIVE_PREFIX)]


@pytest.fixture(scope="module")
def pg():
    yield from single_rank_gloo()


@pytest.fixture
def rec(pg, monkeypatch):
    r = Rec()
    W.annotate(True)
    W._reset_for_tests()
    monkeypatch.setattr(W, "_push", r.push)
    monkeypatch.setattr(W, "_pop", r.pop)
    monkeypatch.setattr(W, "_mark", r.mark)
    yield r
    W.annotate(False)
    assert all(v == 0 for v in r.depth.values()), "push/pop balanced"


def one(rec, fn):
    rec.msgs.clear()
    fn()
    p = rec.parsed()
    assert len(p) == 1, rec.msgs
    return p[0]


def test_fields_of_every_family(rec):
    t = torch.ones(8)
    m = one(rec, lambda: dist.all_reduce(t))
    assert m["kind"] == "nsyscomm:all_reduce" and m["api"] == "all_reduce"
    assert (m["bytes"], m["dtype"], m["numel"], m["pg"], m["gsize"], m["granks"], m["async"]) == (
        "32",
        "float32",
        "8",
        "0",
        "1",
        "",
        "0",
    )
    assert m["caller"].startswith(THIS + ":") and m["caller"].endswith("<lambda>")
    assert m["seq"] == "0"
    h = torch.ones(3, dtype=torch.float16)
    cases = [
        (lambda: dist.all_reduce(h, async_op=True).wait(), "all_reduce", "all_reduce", 6, "1"),
        (lambda: dist.broadcast(t, src=0), "broadcast", "broadcast", 32, "0"),
        (lambda: dist.reduce(t, dst=0), "reduce", "reduce", 32, "0"),
        (lambda: dist.all_gather([torch.empty(8)], t), "all_gather", "all_gather", 32, "0"),
        (lambda: dist.all_gather_into_tensor(torch.empty(8), t), "all_gather", "all_gather_into_tensor", 32, "0"),
        (lambda: dist.all_gather_single(torch.empty(8), t), "all_gather", "all_gather_single", 32, "0"),
        (lambda: dist.reduce_scatter_tensor(torch.empty(8), t), "reduce_scatter", "reduce_scatter_tensor", 32, "0"),
        (lambda: dist.reduce_scatter_single(torch.empty(8), t), "reduce_scatter", "reduce_scatter_single", 32, "0"),
        (lambda: dist.all_to_all_single(torch.empty(8), t), "all_to_all", "all_to_all_single", 32, "0"),
        (lambda: dist.all_to_all([torch.empty(8)], [t]), "all_to_all", "all_to_all", 32, "0"),
        (lambda: dist.gather(t, [torch.empty(8)], dst=0), "gather", "gather", 32, "0"),
        (lambda: dist.scatter(t, [torch.ones(8)], src=0), "scatter", "scatter", 32, "0"),
        (lambda: dist.barrier(), "barrier", "barrier", 0, "0"),
        (lambda: dist.all_reduce_coalesced([t, torch.ones(2)]), "all_reduce", "all_reduce_coalesced", 40, "0"),
    ]
    for i, (fn, op, api, nbytes, asy) in enumerate(cases, start=1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = one(rec, fn)
        assert (m["kind"], m["api"], m["bytes"], m["async"], m["seq"]) == (
            "nsyscomm:" + op,
            api,
            str(nbytes),
            asy,
            str(i),
        ), m


def test_object_and_functional_collectives(rec):
    m = one(rec, lambda: dist.broadcast_object_list([1, "a"], src=0))
    assert (m["kind"], m["api"], m["bytes"]) == ("nsyscomm:broadcast", "broadcast_object_list", "")
    m = one(rec, lambda: dist.all_gather_object([None], {"x": 1}))
    assert m["api"] == "all_gather_object"
    import torch.distributed._functional_collectives as fc

    m = one(rec, lambda: fc.all_reduce(torch.ones(4), "sum", dist.group.WORLD).wait())
    assert (m["kind"], m["api"], m["bytes"], m["async"]) == ("nsyscomm:all_reduce", "funcol.all_reduce", "16", "1")


def test_ddp_reducer_and_broadcasts_are_seen(rec):
    model = torch.nn.Linear(4, 3)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    init = [m["api"] for m in rec.parsed()]
    assert "ddp.broadcast" in init
    rec.msgs.clear()
    ddp(torch.randn(2, 4)).sum().backward()
    ar = [m for m in rec.parsed() if m["api"] == "ddp.allreduce"]
    assert len(ar) == 1 and ar[0]["bytes"] == str((4 * 3 + 3) * 4)
    assert ar[0]["caller"].startswith(THIS)


def test_step_from_optimizer_and_explicit(rec):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    t = torch.ones(1)
    assert one(rec, lambda: dist.all_reduce(t))["step"] == ""  # reset: unknown
    for expected in (1, 2):
        model(torch.ones(2)).sum().backward()
        opt.step()
        other.step()  # a second optimizer does not advance the step
        assert one(rec, lambda: dist.all_reduce(t))["step"] == str(expected)
    W.step(10)
    opt.step()
    assert one(rec, lambda: dist.all_reduce(t))["step"] == "10"
    assert fmt.format_step_marker(10) in rec.marks


def test_seq_counts_per_group(rec):
    t = torch.ones(2)
    sub = dist.new_group([0])
    seqs = []
    for g in (None, sub, None, sub, sub):
        seqs.append((one(rec, lambda: dist.all_reduce(t, group=g))["pg"], rec.parsed()[0]["seq"]))
    names = [s[0] for s in seqs]
    assert names[0] != names[1]
    assert [s[1] for s in seqs] == ["0", "0", "1", "1", "2"]
    assert one(rec, lambda: dist.all_reduce(t, group=sub))["granks"] == "0"


def test_disable_restores_originals(pg):
    orig = dist.all_reduce
    W.annotate(True)
    assert dist.all_reduce is not orig and dist.all_reduce.__wrapped__ is orig
    W.annotate(False)
    assert dist.all_reduce is orig
    assert dist.distributed_c10d.all_gather is dist.all_gather
    assert not getattr(dist.broadcast, "_nsyscomm", False)


def test_exceptions_propagate_unchanged(rec):
    def err(fn):
        try:
            fn()
        except Exception as e:
            return type(e), str(e)
        return None

    bad = lambda: dist.all_reduce(torch.ones(2), group="not a group")  # noqa: E731
    bad2 = lambda: dist.broadcast(torch.ones(2), src=5)  # noqa: E731
    wrapped = (err(bad), err(bad2))
    W.annotate(False)
    assert (err(bad), err(bad2)) == wrapped
    assert wrapped[1] is not None


def test_annotation_failure_degrades_with_one_warning(rec, monkeypatch):
    def boom(m):
        raise RuntimeError("emitter broken")

    monkeypatch.setattr(W, "_push", boom)
    W._warned.discard("all_reduce")
    t = torch.ones(4)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dist.all_reduce(t)
        dist.all_reduce(t)
    assert torch.equal(t, torch.ones(4))
    assert sum("could not annotate all_reduce" in str(x.message) for x in w) == 1


@pytest.mark.parametrize("layer", ["python", "dispatcher"])
def test_a_failing_pop_is_warned_once_whichever_layer_made_the_range(rec, monkeypatch, layer):
    """Both layers close a call's range the same way: a pop that fails is said once, naming the
    failure, and the collective's result is untouched."""

    def broken_pop():
        rec.pop()
        raise RuntimeError("pop broken")

    monkeypatch.setattr(W, "_pop", broken_pop)
    W._warned.discard("pop")
    t = torch.ones(4)
    calls = {
        "python": (lambda: dist.all_reduce(t), "all_reduce"),
        "dispatcher": (lambda: dist.group.WORLD.allreduce([t]).wait(), "c10d.allreduce"),
    }
    call, api = calls[layer]
    rec.msgs.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        call()
        call()
    assert [m["api"] for m in rec.parsed()] == [api, api]
    assert torch.equal(t, torch.ones(4))
    said = [str(x.message) for x in w if "pop" in str(x.message)]
    assert said == ["nsyscomm: NVTX pop failed (RuntimeError('pop broken'))"]


def test_thread_safety(rec):
    n_threads, n_calls = 4, 100
    errors = []

    def work():
        try:
            t = torch.ones(4)
            for _ in range(n_calls):
                dist.all_reduce(t)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ths = [threading.Thread(target=work) for _ in range(n_threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors
    seqs = sorted(int(m["seq"]) for m in rec.parsed())
    assert seqs == list(range(n_threads * n_calls))


def _site(offset=0):
    """``file:line function`` of the caller's line + offset."""
    f = sys._getframe(1)
    return f"{THIS}:{f.f_lineno + offset} {f.f_code.co_name}"


def test_caller_names_each_call_site(rec):
    t = torch.ones(2)
    rec.msgs.clear()
    want = []
    for _ in range(3):
        want.append(_site(1))
        dist.all_reduce(t)
        want.append(_site(1))
        dist.broadcast(t, 0)
    want.append(_site(1))
    dist.all_reduce(t)
    assert [m["caller"] for m in rec.parsed()] == want


def test_fast_emitter_hands_nvtx_the_message(pg):
    """The real emitter (no recorder): what the NVTX push receives is the wrapper's message, per thread."""
    if W._emitter_kind != "nvtx-fast":
        pytest.skip(f"nvtx {getattr(sys.modules.get('nvtx'), '__version__', '?')} has no Cython API: public emitter")
    W.annotate(True)
    W._reset_for_tests()
    try:
        seen = {}

        def work(i):
            t = torch.ones(i + 1)
            dist.all_reduce(t)
            a = W._tls.attrs.message
            seen[i] = fmt.parse(a.string)

        ths = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert sorted(m["numel"] for m in seen.values()) == ["1", "2", "3"]
        assert all(m["kind"] == "nsyscomm:all_reduce" and m["caller"].endswith(" work") for m in seen.values())
    finally:
        W.annotate(False)


def test_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; import nsyscomm, nsyscomm.capture, "
        "nsyscomm.capture.launcher; print(nsyscomm.annotate())"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ---------------------------------------------------------------- two real processes


def _two_rank_job(rank, path, out, annotate):
    import torch
    import torch.distributed as dist

    from nsyscomm.capture import wrapper as W

    msgs = []
    if annotate:
        W.annotate(True)
        W._push = msgs.append
        W._pop = lambda: None
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    torch.manual_seed(rank)
    res = {}
    x = torch.randn(1000)
    dist.all_reduce(x)
    res["ar"] = x
    y = torch.randn(1000, dtype=torch.float64)
    dist.all_reduce(y, op=dist.ReduceOp.AVG if False else dist.ReduceOp.SUM)
    res["ar64"] = y
    g = torch.empty(2000)
    dist.all_gather_into_tensor(g, torch.randn(1000))
    res["ag"] = g
    rs = torch.empty(500)
    dist.reduce_scatter_tensor(rs, torch.randn(1000))
    res["rs"] = rs
    sub = dist.new_group([0, 1])
    s = torch.randn(10)
    dist.all_reduce(s, group=sub)
    res["sub"] = s
    p = torch.randn(7)
    if rank == 0:
        dist.send(p, 1)
        dist.send(p, 1)
    else:
        dist.recv(p, 0)
        dist.recv(p, 0)
    res["p2p"] = p
    q = torch.empty(7)
    ops = [dist.P2POp(dist.isend, p, 1 - rank), dist.P2POp(dist.irecv, q, 1 - rank)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    res["batch"] = q
    model = torch.nn.Linear(16, 4)
    torch.nn.init.constant_(model.weight, 0.5)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ddp(torch.randn(3, 16)).sum().backward()
    opt.step()
    res["ddp"] = model.weight.detach().clone()
    dist.barrier()
    torch.save({"res": res, "msgs": msgs}, f"{out}.{rank}")
    dist.destroy_process_group()


def _run_two(tmp_path, annotate):
    import torch.multiprocessing as mp

    path = str(tmp_path / f"store{int(annotate)}")
    out = str(tmp_path / f"out{int(annotate)}")
    mp.spawn(_two_rank_job, args=(path, out, annotate), nprocs=2, join=True)
    return [torch.load(f"{out}.{r}") for r in range(2)]


@pytest.fixture(scope="module")
def two_rank(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two")
    return _run_two(tmp, False), _run_two(tmp, True)


def test_two_ranks_bit_identical(two_rank):
    bare, wrapped = two_rank
    for r in range(2):
        for k, v in bare[r]["res"].items():
            assert torch.equal(v, wrapped[r]["res"][k]), k
            assert v.dtype == wrapped[r]["res"][k].dtype


def test_two_ranks_seq_align_and_p2p(two_rank):
    _, wrapped = two_rank
    per = [[fmt.parse(m) for m in wrapped[r]["msgs"] if m.startswith(fmt.COLLECTIVE_PREFIX)] for r in range(2)]
    coll = [
        [(m["pg"], m["seq"], m["kind"], m["bytes"]) for m in p if m["kind"] not in ("nsyscomm:send", "nsyscomm:recv")]
        for p in per
    ]
    assert coll[0] == coll[1], "collectives match across ranks by (group, seq)"
    p2p = [[(m["kind"], m["api"], m["seq"]) for m in p if m["kind"] in ("nsyscomm:send", "nsyscomm:recv")] for p in per]
    assert [k for k, _, _ in p2p[0][:2]] == ["nsyscomm:send"] * 2
    assert [k for k, _, _ in p2p[1][:2]] == ["nsyscomm:recv"] * 2
    assert [s for _, _, s in p2p[0]] == [s for _, _, s in p2p[1]] == ["0", "1", "2", "3"]
    assert {a for _, a, _ in p2p[0][2:]} == {"batch_isend_irecv"}
    subs = {m["pg"] for m in per[0]} - {"0"}
    assert subs, "the subgroup has its own name"
    assert any(m["api"] == "ddp.allreduce" for m in per[0])


# ---------------------------------------------------------------- the C fast path (_fastpath.c)


def _compiler():
    import shutil
    import sysconfig

    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    inc = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which(cc) and os.path.exists(inc)


def test_fast_path_is_built_and_used(pg):
    if W._fastpath is None:
        assert not _compiler(), "a C compiler and Python.h are here, yet nsyscomm.capture._fastpath was not built"
        pytest.skip("no C compiler at install time: the wrappers run in Python")
    W.annotate(True)
    try:
        assert type(dist.all_reduce) is W._fastpath.Hot and callable(dist.all_reduce._slow)
        assert dist.all_reduce.__name__ == "all_reduce" and dist.all_reduce._nsyscomm
        assert W._fast_guard, "torch 2.13's ExcludeDispatchKeyGuard should be usable from C"
    finally:
        W.annotate(False)


def _mixed_calls(t, t64, sub):
    dist.all_reduce(t)
    dist.all_reduce(t, async_op=True).wait()
    dist.all_reduce(tensor=t, group=sub)
    dist.broadcast(t64, 0)
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    step, W._step = W._step, 7
    dist.all_reduce(t64, dist.ReduceOp.SUM, None, False)
    W._step = step


def test_fast_path_messages_equal_the_python_wrapper(rec, monkeypatch):
    if W._fastpath is None:
        pytest.skip("nsyscomm.capture._fastpath not built")
    t, t64 = torch.ones(5), torch.ones(3, dtype=torch.float64)
    sub = dist.new_group([0])
    _mixed_calls(t, t64, sub)  # the first call of each group and dtype fills the caches
    entered = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "wrapper" and frame.f_code.co_filename == W.__file__:
            entered.append(frame.f_lineno)

    rec.msgs.clear()
    sys.setprofile(prof)
    try:
        _mixed_calls(t, t64, sub)
    finally:
        sys.setprofile(None)
    assert not entered, "steady-state calls went through the Python wrapper"
    fast = [fmt.parse(m) for m in rec.msgs]
    for name in ("all_reduce", "broadcast", "reduce"):
        monkeypatch.setattr(dist, name, getattr(dist, name)._slow)
    rec.msgs.clear()
    _mixed_calls(t, t64, sub)
    slow = [fmt.parse(m) for m in rec.msgs]
    # the same messages, one round of each group's sequence numbers later
    per_group = {pg: sum(m["pg"] == pg for m in fast) for pg in {m["pg"] for m in fast}}
    assert [int(m["seq"]) + per_group[m["pg"]] for m in fast] == [int(m["seq"]) for m in slow]
    for m in fast + slow:
        m.pop("seq")
    assert fast == slow and len(fast) == 6 and len(per_group) == 2
    assert [m["step"] for m in fast][-1] == "7" and "7" not in [m["step"] for m in fast][:-1]
    assert [m["async"] for m in fast] == ["0", "1", "0", "0", "0", "0"]
    assert {m["dtype"] for m in fast} == {"float32", "float64"}
    assert all(m["caller"].startswith(THIS + ":") and m["caller"].endswith(" _mixed_calls") for m in fast)


def test_fast_guard_equals_autograd_guard(pg):
    """Inside the C path the thread excludes exactly what _AutoDispatchBelowAutograd excludes, with
    the C guard or (unconfigured) the Python one; afterwards, and after an exception, it is restored."""
    if W._fastpath is None:
        pytest.skip("nsyscomm.capture._fastpath not built")
    excl = torch._C._dispatch_tls_local_exclude_set
    with torch._C._AutoDispatchBelowAutograd():
        want = excl().raw_repr()
    outside = excl().raw_repr()
    seen = []

    def probe(tensor, op=None, group=None, async_op=False):
        seen.append((excl().raw_repr(), W._tls.busy))
        if async_op == "raise":
            raise ValueError("from the collective")
        return "result"

    W.annotate(True)
    try:
        wn = python_layer.make_wrapper(probe, "all_reduce", "all_reduce", "t", 0, "tensor", 2, "group", 3)
        t = torch.ones(2)
        for configured in (True, False):
            if not configured:
                W._fastpath.unconfigure()
            seen.clear()
            assert [wn(t) for _ in range(3)] == ["result"] * 3
            with pytest.raises(ValueError, match="from the collective") as e:
                wn(t, async_op="raise")
            assert e.value.__traceback__ is not None
            assert seen == [(want, True)] * 4
            assert excl().raw_repr() == outside and W._tls.busy is False
    finally:
        W._check_fast_guard(torch)
        W.annotate(False)
    assert W._fast_guard


# ---------------------------------------------------------------- torch.compile


def _compiled_step(x, fc):
    y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
    return fc.all_gather_single(y, 0, dist.group.WORLD) + 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_functional_collectives_are_annotated(rec, backend):
    """torch.compile'd collectives bypass the Python wrappers (they are traced, then run as
    _c10d_functional ops): the dispatcher layer annotates each call that runs, once, with the
    user's line as caller, and tracing consumes no sequence number."""
    import shutil

    import torch.distributed._functional_collectives as fc

    if backend == "inductor" and not shutil.which("g++"):
        pytest.skip("Inductor's CPU code needs a C++ compiler (g++)")
    torch._dynamo.reset()
    f = torch.compile(_compiled_step, backend=backend)
    x = torch.arange(6, dtype=torch.float32)
    want = _compiled_step(x, fc)  # eager, through the Python wrappers
    rec.msgs.clear()
    try:
        got = [f(x, fc), f(x, fc)]
    finally:
        torch._dynamo.reset()
    assert all(torch.equal(g, want) for g in got)
    msgs = rec.parsed()
    assert [m["kind"] for m in msgs] == ["nsyscomm:all_reduce", "nsyscomm:all_gather"] * 2, rec.msgs
    assert all(m["api"].startswith("_c10d_functional.") for m in msgs)
    assert [m["bytes"] for m in msgs] == ["24", "24"] * 2 and {m["dtype"] for m in msgs} == {"float32"}
    assert [int(m["seq"]) for m in msgs] == [2, 3, 4, 5]  # eager used 0 and 1; tracing none
    # the user's function (its compiled frame reports the def line, or the call's line)
    line = _compiled_step.__code__.co_firstlineno
    assert {m["caller"] for m in msgs} <= {f"{THIS}:{n} _compiled_step" for n in (line, line + 1, line + 2)}


@pytest.mark.parametrize(
    ("text", "window"),
    [("10:20", (10, 20)), ("5:", (5, 1 << 62)), (":7", (0, 7)), ("3", (3, 4)), ("bad", None), ("5:2", None)],
)
def test_capture_steps_follow_the_one_step_range_rule(text, window):
    """NSYSCOMM_CAPTURE_STEPS is read by nsyscomm.steps' rule, as `run --steps` and `trace --steps`
    are ('3' is step 3 alone); a value that rule refuses is warned about and ignored."""
    W._warned.discard("steps")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert W._parse_capture(text) == window
    assert bool(seen) == (window is None)


def test_point_to_point_peer_from_each_way_torch_takes_it():
    """send/recv name their peer by global rank (argument 1, or dst=/src=) or by rank within the
    group (group_dst=/group_src=, translated through the group's ranks); neither gives -1."""
    from types import SimpleNamespace

    from nsyscomm.capture.api_specs import peer_recv, peer_send

    g = SimpleNamespace(ranks=[4, 6, 8])
    t = object()
    assert peer_send((t, 6), {}, g) == 6 and peer_recv((t, 8), {}, g) == 8
    assert peer_send((t,), {"dst": 4}, g) == 4 and peer_recv((t,), {"src": 6}, g) == 6
    assert peer_send((t,), {"group_dst": 2}, g) == 8 and peer_recv((t,), {"group_src": 1}, g) == 6
    assert peer_send((t,), {}, g) == -1 and peer_recv((t,), {}, g) == -1


def test_join_marks_the_calls_a_rank_makes_after_it_joined(rec):
    """torch.distributed.algorithms.Join: the wrapper holds nsyscomm.joined|step=N over Join's
    exit, where a rank that ran out of inputs shadows the others' collectives (one rank here:
    Join's count of ranks not joined, and DDP's final model sync); nothing when the loop raised."""
    from torch.distributed.algorithms.join import Join

    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    rec.msgs.clear()
    with Join([ddp]):
        for _ in range(2):
            ddp(torch.randn(2, 4)).sum().backward()
            opt.step()
        inside = len(rec.msgs)
    joined = [i for i, m in enumerate(rec.msgs) if m.startswith(fmt.JOINED_PREFIX)]
    assert [rec.msgs[i] for i in joined] == [fmt.format_joined(2)]
    after = [fmt.parse(m)["kind"] for m in rec.msgs[joined[0] + 1 :]]
    assert joined[0] == inside and "nsyscomm:all_reduce" in after
    rec.msgs.clear()
    with pytest.raises(ValueError), Join([ddp]):
        raise ValueError("the loop failed")
    assert not [m for m in rec.msgs if m.startswith(fmt.JOINED_PREFIX)]
