"""The hostile corpus: every family of broken or hostile input, built by construction
(tests/support/hostile_corpus.py), through every command: summarize in each format and by caller, trace,
report, gate (text, markdown, JUnit) and baseline. Each case runs in a process of its own with a
time limit. Nothing may end in a traceback or an internal error, hang, write beside its input,
print a raw control character, or end otherwise than its construction says (exit 2 with one
line naming the file, or exit 0). `python -m tests.support.hostile_corpus` prints the totals the README
quotes."""

from __future__ import annotations

from tests.support import hostile_corpus as H


def test_hostile_corpus_through_every_command(tmp_path):
    totals, per = H.run_corpus(tmp_path)
    failing = {
        c["case"]: {k: v for k, v in c.items() if v and k not in ("case", "runs", "one_line_errors")} for c in per
    }
    failing = {k: v for k, v in failing.items() if v}
    assert totals["cases"] >= 40 and totals["command runs"] >= 10 * totals["cases"]
    assert totals["exit-2 one-liners"] > 0
    for key in ("tracebacks", "hangs", "files written beside inputs", "injections", "other failures"):
        assert totals[key] == 0, (key, failing)


def test_corpus_holds_the_issues_families(tmp_path):
    """The families the corpus was made for are in it (a guard against a corpus that shrinks)."""
    cases = H.build(tmp_path, robustness=False)
    for name in (
        "view_recursive_nvtx",
        "bytes_negative",
        "numel_negative",
        "name_10mb",
        "journal_wal",
        "hot_journal",
        "escapes_in_names",
        "formula_names",
        "kineto_ts_nan",
        "kineto_nested_deep",
        "kineto_big_int",
        "two_4rank_runs",
    ):
        assert name in cases, sorted(cases)
