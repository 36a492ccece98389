"""Ranks that joined early under torch.distributed.algorithms.Join (nsyscomm/capture/join_ranks.py):
a joined rank's shadow collectives take the step of the ranks still training that they match.

The joined rank's own step stops where it ran out of inputs (no optimizer step after), so its
shadows would all fall in that step, beside collectives of the later steps they match. They keep
the step at which their rank joined in ``collectives.joined``; ``logical_collectives.shadow``
(a participant had joined) leaves them out of lateness, skew and the what-if's savings: the
joined rank's waiting there is its absence, not anyone's lateness."""

from __future__ import annotations

import duckdb


def align_steps(con: duckdb.DuckDBPyConnection) -> None:
    """Give each joined call the step of its collective's calls on ranks that had not joined."""
    con.execute(
        """
        UPDATE collectives SET step = t.step
        FROM (SELECT logical_id, min(step) AS step FROM collectives
              WHERE joined IS NULL AND step IS NOT NULL GROUP BY logical_id) t
        WHERE collectives.joined IS NOT NULL AND t.logical_id = collectives.logical_id
        """
    )
