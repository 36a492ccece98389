"""One rule for a range of training steps, wherever a user gives one (`run --steps`,
`trace --steps`): 'A:B' is steps A to B-1 (half-open, like a Python slice), 'A:' from A on, ':B'
up to B-1, 'N' step N alone; empty or reversed ranges are refused."""

from __future__ import annotations


def parse_step_range(text: str | None) -> tuple[int | None, int | None] | None:
    """'A:B' (half-open, like a Python slice), 'A:', ':B' or 'A' (one step) -> (lo, hi)."""
    if text is None:
        return None
    t = text.strip()
    try:
        if ":" in t:
            a, b = t.split(":", 1)
            lo = int(a) if a.strip() else None
            hi = int(b) if b.strip() else None
        else:
            lo = int(t)
            hi = lo + 1
    except ValueError:
        raise ValueError(f"{text!r}: expected A:B (steps A to B-1), A:, :B or a single step") from None
    if lo is not None and hi is not None and hi <= lo:
        raise ValueError(f"{text!r}: the range is empty (B must be greater than A)")
    return lo, hi
