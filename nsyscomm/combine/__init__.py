"""Combining a job's extracts into one job (the reduce stage): ranks (rank assignment), clocks
(clock alignment across reports), calls (the job's calls, typed as the normalized table, and
the combined tables) and job (the order these run in, ending in an analyses Result)."""

from nsyscomm.combine.calls import JobCalls
from nsyscomm.combine.job import combine
from nsyscomm.combine.select import Selection

__all__ = ["JobCalls", "Selection", "combine"]
