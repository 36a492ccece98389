"""Human units, in the conventions the tables' readers know (DeepSpeed's comms logger)."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SIZE_NAMES = ("B", "KB", "MB", "GB", "TB", "PB")


def human_bytes(n: float | None) -> str:
    """DeepSpeed's convert_size (powers of 1024: '25.0 MB', '10.31 MB'), with as many decimals as
    it takes to name the size exactly: two sizes that differ never share a label (1 MiB is
    '1.0 MB', 1,051,648 B '1.0029297 MB', where DeepSpeed's two decimals print '1.0 MB' for both)."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "?"
    n = int(n)
    if n == 0:
        return "0B"
    if n < 0:  # no size is negative; a corrupt one is shown as it is
        return "-" + human_bytes(-n)
    i = min((n.bit_length() - 1) // 10, len(_SIZE_NAMES) - 1)
    unit = 1024**i
    value = Fraction(n, unit)
    digits = 1
    # the fewest decimals whose value names exactly n bytes: a byte is 1/1024**i of the unit, so
    # 3 decimals per power of 1024 always do (the loop's bound)
    while digits < 3 * i + 1 and round(round(value, digits) * unit) != n:
        digits += 1
    # written from the exact decimal, not a float's (which runs out of digits past 2**53 bytes)
    scaled = int(round(value, digits) * 10**digits)
    return f"{scaled // 10**digits}.{scaled % 10**digits:0{digits}d} {_SIZE_NAMES[i]}"


# one unit for every format, chosen once: GB/s, the JSON's and the HTML's; DeepSpeed's
# gigabits per second on request (--units Gbps)
DEFAULT_UNITS = "GBps"


def unit_label(units: str) -> str:
    """'GBps' -> 'GB/s' (bytes), 'Gbps' -> 'Gbit/s'."""
    return "Gbit/s" if units == "Gbps" else "GB/s"


def bandwidth(gbps_bytes: float | None, units: str) -> float | None:
    """GB/s (bytes) -> the requested unit: GBps as is, Gbps (gigabits, DeepSpeed's) x 8."""
    if gbps_bytes is None or (isinstance(gbps_bytes, float) and math.isnan(gbps_bytes)):
        return None
    return gbps_bytes * 8 if units == "Gbps" else gbps_bytes


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def signed_pct(x: float | None, none: str = "-", up: str = "new", down: str = "-100%") -> str:
    """A relative change in percent with its sign ('+12.5%'); None and the infinite changes of a
    value that appeared (from 0) or vanished are written as the caller's words for them."""
    if x is None:
        return none
    if math.isinf(x):
        return up if x > 0 else down
    return f"{x:+.1f}%"


_BYTES_IN_KEY = re.compile(r"^(\S+) (\d+)(?= |$)")


def human_key(key: str) -> str:
    """A what-if key ('all_reduce 26214400 train.py:88 step': op, bytes, caller) with its size
    written as every table writes it ('all_reduce 25.0 MB train.py:88 step')."""
    return _BYTES_IN_KEY.sub(lambda m: f"{m.group(1)} {human_bytes(int(m.group(2)))}", str(key))
