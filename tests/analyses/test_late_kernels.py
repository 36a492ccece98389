"""The kernels a late rank ran longer than the others (sql/late_arrivals.sql, kernel_extra): per
late collective and kernel name, the late call's time minus the median over the other members'
calls, a name missing from a call counting 0 there. Made in one pass over the members' kernels;
checked here against the plain formulation, each late kernel paired with every other member and
its name looked up in that member's kernels, on every sample and real export with late arrivals."""

from __future__ import annotations

import pytest

from nsyscomm import duck
from nsyscomm.analyses.late import NOISE_NS
from tests.conftest import REAL, SAMPLES, loaded

PAIRED = """kernel_extra AS (
    SELECT e.logical_id, n.name, e.extra
    FROM (SELECT k.logical_id, k.name_no, any_value(k.ns) - median(coalesce(o.ns, 0)) AS extra
          FROM member_kernels k
          JOIN members m ON m.logical_id = k.logical_id AND NOT m.is_late
          LEFT JOIN member_kernels o ON o.logical_id = k.logical_id AND o.rank = m.rank AND o.name_no = k.name_no
          WHERE k.is_late
          GROUP BY ALL) e
    LEFT JOIN (SELECT DISTINCT name_no, name FROM kernel_names) n ON n.name_no = e.name_no
)
"""

INPUTS = [
    SAMPLES / "synthetic_ddp_4rank.sqlite",
    SAMPLES / "synthetic_fsdp_8rank.sqlite",
    SAMPLES / "synthetic_nowrapper_2node",
    REAL / "nsys" / "nsys2026.2_2xH100_nccl_window.sqlite",
]


def _paired_query() -> str:
    text = duck.sql("late_arrivals")
    start, end = text.index("kernel_extra AS ("), text.index("SELECT r.*,")
    return text[:start] + PAIRED + text[end:]


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_slower_kernels_are_those_of_the_paired_comparison(path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    con = loaded(path).con
    params = {"noise_ns": NOISE_NS}
    got = con.execute(duck.sql("late_arrivals"), params).fetchall()
    want = con.execute(_paired_query(), params).fetchall()
    assert got == want
    # not vacuous: each of these has late arrivals whose kernels are named, several beside one
    # another on the samples of 4 and 8 ranks (the median of several others)
    column = [d[0] for d in con.execute(duck.sql("late_arrivals"), params).description].index("slower_kernels")
    assert any(row[column] for row in got)
