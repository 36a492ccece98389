"""The gate tells unchanged from regressed: which way is worse for each metric, keys that survive
edits to unrelated lines, set-aside calls that never make a key missing, and start-up skew kept
out of the wait keys (generated schema-3 documents; tests/gate/test_gate.py's helpers)."""

from __future__ import annotations

import pytest

from nsyscomm import gate as g
from tests.gate.test_gate import doc, row


def _key_item(v):
    return next(i for i in v.items if i.scope == "key")


def _comparison(item, metric):
    return next(c for c in item.comparisons if c.metric == metric)


def test_bus_bandwidth_collapse_with_flat_latency_is_a_regression():
    """Bus bandwidth is higher-is-better: its fall fails the gate though no latency moved, and its
    rise is an improvement."""
    base = g.run_from_doc(doc([row(avg=0.45, busbw=100.0)]), "b")
    collapsed = g.run_from_doc(doc([row(avg=0.45, busbw=40.0)]), "c")
    v = g.compare([base], collapsed)
    key = _key_item(v)
    assert v.exit_code == 1 and key.status == "regression"
    assert _comparison(key, "key.busbw_GBps").status == "regression"
    assert _comparison(key, "key.avg_ms").status == "ok"
    risen = g.run_from_doc(doc([row(avg=0.45, busbw=250.0)]), "c")
    v = g.compare([base], risen)
    key = _key_item(v)
    assert v.exit_code == 0 and key.status == "improvement"
    assert _comparison(key, "key.busbw_GBps").status == "improvement"


def test_faster_calls_are_an_improvement_not_a_regression():
    base = g.run_from_doc(doc([row(avg=0.90)]), "b")
    v = g.compare([base], g.run_from_doc(doc([row(avg=0.30)]), "c"))
    key = _key_item(v)
    assert v.exit_code == 0 and key.status == "improvement"
    assert _comparison(key, "key.avg_ms").status == "improvement"
    assert _comparison(key, "key.busbw_GBps").status == "improvement"


def test_caller_keys_survive_edits_to_other_lines_unless_lines_are_asked_for(tmp_path):
    before = [row(caller="train.py:30 step", avg=0.4), row(caller="train.py:52 evaluate", avg=0.4, calls=80)]
    # three lines added above both calls: every key's line moved, nothing else changed
    after = [row(caller="train.py:33 step", avg=0.4), row(caller="train.py:55 evaluate", avg=0.4, calls=80)]
    b, c = g.run_from_doc(doc(before), "b"), g.run_from_doc(doc(after), "c")
    v = g.compare([b], c)
    assert v.level == "caller" and v.exit_code == 0
    assert sorted(i.key.caller for i in v.items if i.scope == "key") == ["train.py evaluate", "train.py step"]
    lines = g.override(g.Settings(), caller_line=True)
    v = g.compare([b], c, lines)
    assert v.exit_code == 1 and {i.status for i in v.items if i.scope == "key"} == {"new", "missing"}
    # a slowdown at one call site still fails, named by its function
    slow = [row(caller="train.py:33 step", avg=0.8), row(caller="train.py:55 evaluate", avg=0.4, calls=80)]
    v = g.compare([b], g.run_from_doc(doc(slow), "c"))
    assert [i.key.caller for i in v.failing if i.scope == "key"] == ["train.py step"]
    # and from the command line and a config file
    import json

    from tests.gate.test_gate import run_gate, write

    bf, cf = write(tmp_path, "b.json", doc(before)), write(tmp_path, "c.json", doc(after))
    assert run_gate("-b", bf, cf).exit_code == 0
    assert run_gate("-b", bf, cf, "--caller-line").exit_code == 1
    cfg = tmp_path / "gate.toml"
    cfg.write_text("caller_line = true\n")
    r = run_gate("-b", bf, cf, "--config", str(cfg), "--format", "json")
    assert r.exit_code == 1 and json.loads(r.stdout)["settings"]["caller_line"] is True


def _scatter(calls=2):  # the job's one scatter, on 2 ranks
    return row(op="scatter", nbytes=4096, n=2, calls=calls, avg=0.05)


def test_a_key_set_aside_as_setup_in_one_run_is_neither_new_nor_missing():
    """The same program's first scatter was setup in one run and not in the next: the key is
    the same calls on both sides, no regression."""
    setup = {"setup": {"collectives": 1, "rows": [{"op": "scatter", "bytes": 4096, "participants": 2}]}}
    with_key = doc([row(), _scatter()])
    set_aside = doc([row()], **setup)
    for base, cur in ((with_key, set_aside), (set_aside, with_key)):
        v = g.compare([g.run_from_doc(base, "b")], g.run_from_doc(cur, "c"))
        item = next(i for i in v.items if i.scope == "key" and i.key.op == "scatter")
        assert v.exit_code == 0 and not item.fails and "set aside" in item.note, item
    # a key that really vanished still counts
    v = g.compare([g.run_from_doc(doc([row(), _scatter()]), "b")], g.run_from_doc(doc([row()]), "c"))
    assert next(i for i in v.items if i.scope == "key" and i.key.op == "scatter").status == "missing"
    v = g.compare([g.run_from_doc(doc([row()]), "b")], g.run_from_doc(doc([row(), _scatter(calls=20)]), "c"))
    assert v.exit_code == 1 and next(i for i in v.items if i.key and i.key.op == "scatter").status == "new"


def test_start_up_skew_never_enters_the_wait_keys():
    """The per-rank table's waiting holds the first meeting's (start-up: 269 ms of 275 ms in an
    unchanged run); the gate's wait figures are the steady ones of the skew section."""
    base = doc([row()], wait=(2.0, 2.0))
    cur = doc([row()], wait=(2.0, 2.0))
    cur["ranks"][1]["wait_ms"] = 275.0  # rank 1 waited 269 ms more at the first collective
    v = g.compare([g.run_from_doc(base, "b")], g.run_from_doc(cur, "c"))
    assert v.exit_code == 0, v.headline()
    waits = [c for i in v.items for c in i.comparisons if c.metric in ("rank.wait_ms", "job.wait_ms")]
    assert waits and all(c.current == 2.0 for c in waits)
    # steady waiting that grew still fails
    worse = doc([row()], wait=(2.0, 12.0))
    assert g.compare([g.run_from_doc(base, "b")], g.run_from_doc(worse, "c")).exit_code == 1


def test_warm_up_steps_stay_out_of_the_rank_and_job_figures(tmp_path):
    """An unchanged gloo run whose first backward pass loaded libraries for 3.4 s on a loaded
    host (step 0, a warm-up step): the per-rank table holds it, the steady figures the gate
    compares do not; steady waiting that grew still fails. Generated jobs (tests/support/whatif_jobs.py)
    through the whole pipeline: load, document, gate."""
    from nsyscomm.analyses.contract import document
    from nsyscomm.api import load
    from tests.support import whatif_jobs as wj

    def job(name, first_ms, steady_late_ms):
        steps = [[("coll", (0, 1), 1.0, 0), ("compute", 0, 5.0), ("compute", 1, first_ms), ("coll", (0, 1), 1.0, 0)]]
        steps += [[("compute", 0, 5.0), ("compute", 1, 5.0 + steady_late_ms), ("coll", (0, 1), 1.0, 0)]] * 12
        wj.write_job(tmp_path / name, 2, steps, first_step=0)
        res = load([tmp_path / name], cache=False)
        return res, g.run_from_doc(document(res), name)

    res, base = job("b.sqlite", 5.0, 0.0)
    res, same = job("c.sqlite", 3400.0, 0.0)
    assert res.warmup["steps"] == [0]
    assert max(r["wait_ms"] for r in document(res)["ranks"]) > 3000  # the table keeps it
    steady = {r["rank"]: r for r in document(res)["steady"]["per_rank"]}
    assert steady[0]["wait_ms"] == pytest.approx(0.0, abs=1e-6) and steady[0]["calls"] == 12
    v = g.compare([base], same)
    assert v.exit_code == 0, v.headline()
    _, worse = job("d.sqlite", 5.0, 3.0)  # rank 1 now 3 ms late to every steady step
    v = g.compare([base], worse)
    assert v.exit_code == 1 and any("wait time" in c.label for i in v.failing for c in i.comparisons if c.fails)


def _host_run(rng, sleep_ms: float = 0.0) -> dict:
    """One run of a 20-step 2-rank gloo job as a loaded CPU host times it (the spreads of ten
    unchanged real runs at a load average of 10-20 on 2 cores, docs/performance.md): the host's
    load, the same for the whole run, multiplies a call's mean by 2 to 6 and its median by 1 to 5,
    while the fastest call stays within 35% below and 15% above its own cost; `sleep_ms` inside
    every call (a communication slowdown) adds to every call, the fastest one too."""
    load = rng.uniform(1.0, 5.0)

    def key(nbytes, own):
        fastest = own * rng.uniform(0.65, 1.8) + sleep_ms
        p50 = own * (2 * load - 1) * rng.uniform(0.9, 1.1) + sleep_ms
        avg = own * (2 * load + 2) * rng.uniform(0.9, 1.1) + sleep_ms
        return row(op="all_reduce", nbytes=nbytes, n=2, calls=40, avg=avg, p50=p50, min_ms=fastest)

    rows = [key(262144, 0.6), key(1024, 0.45)]
    comm = [40 * (0.6 + 0.45) * (2 * load + 2) * rng.uniform(0.9, 1.1) + 40 * sleep_ms for _ in range(2)]
    wait, delay = (load * rng.uniform(2.0, 6.0),) * 2, (load * rng.uniform(0.1, 0.3),) * 2
    d = doc(rows, comm=comm, wait=wait, delay=delay, overlap={"per_rank": [], "per_step": []})
    d["ranks"] = [dict(r, elapsed_ms=1800.0 * rng.uniform(0.8, 1.5) + 40 * sleep_ms) for r in d["ranks"]]
    return d


def _per_call_ms(d: dict) -> float:
    return sum(r["total_ms"] for r in d["summary"]) / sum(r["count"] for r in d["summary"])


def test_loaded_host_runs_pass_and_a_30_percent_slowdown_fails_on_the_fastest_call():
    """Generated host-timed runs whose load moves the mean call by 3x from run to run: ten
    unchanged runs pass against a baseline of three, and a sleep of 30% of a call's time (the
    baseline runs' median time per call) inside every call fails, on the keys' fastest call: the
    means and medians stay inside their band, as they do on a loaded host."""
    import random
    import statistics

    rng = random.Random(5)
    base_docs = [_host_run(rng) for _ in range(3)]
    base = [g.run_from_doc(d, f"b{i}") for i, d in enumerate(base_docs)]
    for i in range(10):
        v = g.compare(base, g.run_from_doc(_host_run(rng), f"same{i}"))
        assert v.exit_code == 0, v.headline()
    sleep_ms = 0.3 * statistics.median(_per_call_ms(d) for d in base_docs)
    slow = g.run_from_doc(_host_run(rng, sleep_ms=sleep_ms), "slow")
    v = g.compare(base, slow)
    assert v.exit_code == 1, v.headline()
    failed = {c.metric for i in v.failing for c in i.comparisons if c.fails}
    assert failed == {"key.min_ms"} and len(v.failing) == 2, v.headline()
    # without the fastest call, a loaded host's spread hides the same slowdown
    assert g.compare(base, slow, g.override(g.Settings(), ignore=["key.min_ms"])).exit_code == 0


def test_a_trailing_partial_step_stays_out_of_the_steady_figures(tmp_path):
    """After the last optimizer step, the teardown's barrier (one call where the steps held two)
    waited 4 s on one rank: no training step, out of the steady figures; the same wait inside a
    full step stays in."""
    from nsyscomm.analyses.contract import document
    from nsyscomm.api import load
    from tests.support import whatif_jobs as wj

    step = [("compute", 0, 5.0), ("compute", 1, 5.0), ("coll", (0, 1), 1.0, 0), ("coll", (0, 1), 1.0, 0)]
    for name, tail in (("partial", [("compute", 1, 4000.0), ("coll", (0, 1), 1.0, 0)]), ("full", None)):
        steps = [step] * 8 + [tail or [("compute", 1, 4000.0), *step[1:]]]
        wj.write_job(tmp_path / f"{name}.sqlite", 2, steps, first_step=0)
        res = load([tmp_path / f"{name}.sqlite"], cache=False)
        steady = {r["rank"]: r for r in document(res)["steady"]["per_rank"]}
        # 17 or 18 calls a rank, less the first meeting; the partial tail less its one call
        if name == "partial":
            assert steady[0]["calls"] == 15 and steady[0]["wait_ms"] == pytest.approx(0.0, abs=1e-6)
        else:
            assert steady[0]["calls"] == 17 and steady[0]["wait_ms"] == pytest.approx(
                4005.0, abs=1e-6
            )  # no 5 ms of rank 0
