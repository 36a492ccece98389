"""The gate tells unchanged from regressed: which way is worse for each metric, keys that survive
edits to unrelated lines, set-aside calls that never make a key missing, and start-up skew kept
out of the wait keys (generated schema-1 documents; tests/test_gate.py's helpers)."""

from __future__ import annotations

from nsyscomm import gate as g

from .test_gate import doc, row


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
