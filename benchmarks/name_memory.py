"""Peak RSS of `trace` and `summarize` on a report holding one 10 MB NVTX string (a wrapper
message's caller), against the same report without it: the names nsyscomm takes from a report are bounded.

    python benchmarks/name_memory.py            # needs /usr/bin/time (GNU time)

Each run starts with an empty cache (NSYSCOMM_CACHE_DIR), so that it reads the report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import hostile_corpus as H  # noqa: E402


def peak_mb(args: list[str], tmp: Path) -> float:
    cache = Path(tempfile.mkdtemp(dir=tmp))
    env = {
        **os.environ,
        "NSYSCOMM_CACHE_DIR": str(cache),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    p = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-c", "from nsyscomm.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
    )
    kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    shutil.rmtree(cache)
    return int(kb.group(1)) / 1024 if kb else float("nan")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        big = H.huge_name(d / "name_10mb.sqlite")
        for label, rep in (("10 MB name", big), ("sample", H.DDP)):
            s = peak_mb(["summarize", str(rep)], d)
            t = peak_mb(["trace", str(rep), "-o", str(d / "t.json")], d)
            print(f"{label:10}  summarize {s:6.0f} MB   trace {t:6.0f} MB")


if __name__ == "__main__":
    main()
