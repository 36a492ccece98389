"""Collective families, message-size conventions and bus-bandwidth factors.

These follow nccl-tests (doc/PERFORMANCE.md), with the communicator's size n,
never the world size. The SQL reads the same factors from the
``busbw_factors`` table that ``factor_rows()`` builds, so the rule lives here once.
"""

from __future__ import annotations

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send",
    "recv",
    "gather",
    "scatter",
    "barrier",
)

# op -> kind of busbw factor: "allreduce" 2(n-1)/n, "nm1" (n-1)/n, "one" 1, None no bandwidth
_FACTOR_KIND = {
    "all_reduce": "allreduce",
    "all_gather": "nm1",
    "reduce_scatter": "nm1",
    "all_to_all": "nm1",
    "gather": "nm1",
    "scatter": "nm1",
    "broadcast": "one",
    "reduce": "one",
    "send": "one",
    "recv": "one",
    "barrier": None,
}


def busbw_factor(op: str, n: int | None) -> float | None:
    kind = _FACTOR_KIND.get(op)
    if kind is None or not n:
        return None
    if kind == "one":
        return 1.0
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind == "nm1":
        return (n - 1) / n
    # a kind spelled wrong must not pass for another family's factor
    raise ValueError(f"busbw: unknown factor kind {kind!r} for {op}")


def factor_rows() -> list[tuple[str, str | None]]:
    return list(_FACTOR_KIND.items())
