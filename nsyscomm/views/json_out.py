"""The JSON output contract ("schema": 3; docs/architecture.md, "JSON contract") that scripts and
CI gates read, serialized: the document itself is made by nsyscomm.analyses.contract."""

from __future__ import annotations

import json

from nsyscomm.analyses.contract import RANK_KEYS, SUMMARY_KEYS, document, nccl_section, records
from nsyscomm.analyses.result import Result

__all__ = ["RANK_KEYS", "SUMMARY_KEYS", "document", "dumps", "nccl_section", "records"]


def dumps(result: Result, by_caller: bool = False) -> str:
    doc = document(result, by_caller)
    if result.skipped:  # an added key (allowed): the files of the input folders that were not read
        doc["skipped"] = [{"file": f, "reason": why} for f, why in result.skipped]
    return json.dumps(doc, indent=2, allow_nan=False)
