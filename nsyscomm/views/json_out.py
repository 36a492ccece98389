"""The JSON output contract ("schema": 1; docs/architecture.md, "JSON contract") that scripts and
CI gates read, serialized: the document itself is made by nsyscomm.analyses.contract."""

from __future__ import annotations

import json

from nsyscomm.analyses.contract import RANK_KEYS, SUMMARY_KEYS, document, nccl_section, records
from nsyscomm.analyses.result import Result

__all__ = ["RANK_KEYS", "SUMMARY_KEYS", "document", "dumps", "nccl_section", "records"]


def dumps(result: Result, by_caller: bool = False) -> str:
    return json.dumps(document(result, by_caller), indent=2, allow_nan=False)
