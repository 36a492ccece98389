"""A run that hung or desynced fails the gate, whatever its numbers: the current
run's hang diagnosis, the ``hang`` key of its schema-3 document (a JSON summary's, or the one
made from a Result)."""

from __future__ import annotations

from nsyscomm.analyses.hang import failing
from nsyscomm.errors import InputError
from nsyscomm.gate.runs import Run


def hang_failure(run: Run) -> str | None:
    """Why the run fails for a hang or a desync (analyses.hang.failing), or None; a document
    without a ``hang`` key (from an nsyscomm without the hang diagnosis) has no diagnosis to fail on."""
    h = run.doc.get("hang")
    if not isinstance(h, dict) or "status" not in h:
        return None
    try:
        return failing(
            {"status": h["status"], "blocked": h.get("blocked") or [], "mismatches": h.get("mismatches") or []}
        )
    except (KeyError, TypeError, IndexError):
        raise InputError(
            f"{run.source}: its 'hang' key is not what nsyscomm writes; "
            f"regenerate it with: nsyscomm summarize --format json REPORT.sqlite"
        ) from None
