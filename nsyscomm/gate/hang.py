"""A run that hung or desynced fails the gate (issue 22), whatever its numbers: the current
side's hang diagnosis, from a JSON summary's ``hang`` key or a Result's."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from nsyscomm.analyses.hang import failing


def hang_failure(sources: Iterable) -> str | None:
    """Why the current side fails for a hang or a desync (analyses.hang.failing), or None: from
    each JSON summary's ``hang`` key, or each Result's diagnosis (nsyscomm.api.gate_sources loads
    report paths into Results)."""
    for src in sources:
        doc = None
        if isinstance(src, dict):
            doc = src
        elif isinstance(src, (str, Path)):
            try:
                doc = json.loads(Path(src).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # the gate itself reports an unreadable input
        elif hasattr(src, "hang"):
            why = failing(src.hang)
            if why:
                return why
            continue
        if isinstance(doc, dict) and isinstance(doc.get("hang"), dict) and "status" in doc["hang"]:
            h = doc["hang"]
            why = failing(
                {"status": h["status"], "blocked": h.get("blocked") or [], "mismatches": h.get("mismatches") or []}
            )
            if why:
                return why
    return None
