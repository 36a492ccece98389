"""The JSON output contract ("schema": 3; docs/architecture.md, "JSON contract") that scripts and
CI gates read, serialized: the document itself is made by nsyscomm.analyses.contract."""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii

from nsyscomm.analyses.contract import RANK_KEYS, SUMMARY_KEYS, document, nccl_section, records
from nsyscomm.analyses.result import Result

__all__ = ["RANK_KEYS", "SUMMARY_KEYS", "document", "dumps", "indented", "nccl_section", "records"]


def dumps(result: Result, by_caller: bool = False) -> str:
    doc = document(result, by_caller)
    if result.skipped:  # an added key (allowed): the files of the input folders that were not read
        doc["skipped"] = [{"file": f, "reason": why} for f, why in result.skipped]
    return indented(doc)


def indented(doc: object) -> str:
    """json.dumps(doc, indent=2, allow_nan=False), character for character: with an indent,
    Python's json encodes in Python, one generator per container, where this joins each
    container's items at once (the strings are still encoded by json's C encoder), the view's
    largest document being thousands of flat rows. A value json refuses (a NaN or infinity, an
    object it does not know) is refused with json's error."""
    return _value(doc, "")


def _value(o: object, pad: str) -> str:
    # the scalars first, in json's order: a bool is an int, a numpy float64 a float
    if isinstance(o, str):
        return encode_basestring_ascii(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    inner = pad + "  "
    if isinstance(o, (list, tuple)):
        if not o:
            return "[]"
        items = [_value(v, inner) for v in o]
        return "[\n" + inner + (",\n" + inner).join(items) + "\n" + pad + "]"
    if isinstance(o, dict):
        if not o:
            return "{}"
        items = [_key(k) + ": " + _value(v, inner) for k, v in o.items()]
        return "{\n" + inner + (",\n" + inner).join(items) + "\n" + pad + "}"
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _float(v: float) -> str:
    if not math.isfinite(v):
        raise ValueError("Out of range float values are not JSON compliant: " + repr(v))
    return float.__repr__(v)


def _key(k: object) -> str:
    """A dict key as json writes it: a string as is, a number or constant as its JSON text quoted."""
    if isinstance(k, str):
        return encode_basestring_ascii(k)
    if k is True or k is False or k is None or isinstance(k, (int, float)):
        return encode_basestring_ascii(_value(k, ""))
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")
