"""The synthetic ground truth derives every figure without the code it checks.

nsyscomm.synth.truth may import only the generator's own modules (the report as constructed, its
kernel-name reader and interval arithmetic), and those import nothing else from nsyscomm: a bug
in a factor, in the message parser or in an analysis then cannot write itself into the truth when
the samples are regenerated.
"""

from __future__ import annotations

import ast
import json

from nsyscomm import busbw, nvtx_format, synth
from tests.conftest import ROOT

PKG = ROOT / "nsyscomm"
# the generator's modules the truth may read; nothing outside nsyscomm.synth
ALLOWED = {
    "nsyscomm.synth.intervals",
    "nsyscomm.synth.kernel_names",
    "nsyscomm.synth.report",
    "nsyscomm.synth.truth_calls",
}


def _nsyscomm_imports(module: str) -> set[str]:
    path = PKG.parent / (module.replace(".", "/") + ".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nsyscomm":
            found.add(node.module)
            found.update(
                f"{node.module}.{a.name}"
                for a in node.names
                if (PKG.parent / node.module.replace(".", "/") / f"{a.name}.py").exists()
            )
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "nsyscomm")
    return found


def test_truth_imports_only_the_generator():
    seen, todo, bad = set(), ["nsyscomm.synth.truth"], []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        for imp in _nsyscomm_imports(mod):
            if imp not in ALLOWED:
                bad.append(f"{mod} imports {imp}")
            else:
                todo.append(imp)
    assert not bad, "the ground truth must not use the code under test:\n" + "\n".join(sorted(bad))


def test_truth_unchanged_when_the_tool_is_broken(monkeypatch):
    """A broken factor table and a broken message parser leave the truth as it was."""
    good = {
        name: json.dumps(synth.compute_truth(gen(seed), name, seed)) for name, (gen, seed, _) in synth.SAMPLES.items()
    }
    monkeypatch.setitem(busbw._FACTOR_KIND, "all_to_all", "allreduce")
    monkeypatch.setitem(busbw._FACTOR_KIND, "all_reduce", "one")
    monkeypatch.setattr(nvtx_format, "parse", lambda message: {"kind": "nsyscomm:broken"})
    for name, (gen, seed, _) in synth.SAMPLES.items():
        assert json.dumps(synth.compute_truth(gen(seed), name, seed)) == good[name], name


def test_truth_busbw_is_the_nccl_tests_factor():
    """The ddp sample's all-reduces over 4 ranks: busbw = algbw x 2(n-1)/n, from the truth's own rows."""
    truth = synth.compute_truth(synth.gen_ddp_4rank(1), "synthetic_ddp_4rank", 1)
    rows = [s for s in truth["summary"] if s["op"] == "all_reduce"]
    assert rows
    for s in rows:
        lat = [r["latency_ns"] for r in truth["collectives"] if r["op"] == "all_reduce" and r["bytes"] == s["bytes"]]
        algbw = s["bytes"] / (sum(lat) / len(lat))
        assert abs(s["busbw_GBps"] - algbw * 2 * 3 / 4) < 1e-9 * algbw
