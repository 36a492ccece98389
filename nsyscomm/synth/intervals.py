"""Unions and differences of time intervals, for the ground truth's busy and exposed time."""

from __future__ import annotations

from collections.abc import Iterable


def union(intervals: Iterable[tuple[int, int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def union_len(intervals: Iterable[tuple[int, int]]) -> int:
    return sum(e - s for s, e in union(intervals))


def minus_len(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> int:
    """length of union(a) minus union(b)."""
    ua, ub = union(a), union(b)
    total = 0
    for s, e in ua:
        covered = 0
        for bs, be in ub:
            lo, hi = max(s, bs), min(e, be)
            if hi > lo:
                covered += hi - lo
        total += (e - s) - covered
    return total
