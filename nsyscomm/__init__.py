"""nsyscomm: where the communication time of distributed training goes, from Nsight Systems reports.

import nsyscomm
res = nsyscomm.load(["report.sqlite"])      # or a folder of per-rank reports
res.collectives                             # pandas DataFrame, one row per call per rank
res.summary, res.ranks, res.skew            # the analyses (sql/*.sql)

nsyscomm.annotate()                         # inside a training process: NVTX ranges per collective
"""

from __future__ import annotations

__version__ = "0.1.0"

from nsyscomm.errors import InputError  # noqa: E402

# typing.TYPE_CHECKING without importing typing: the program (nsyscomm.__main__) starts here, and
# Ctrl-C ends it with one line only once its handler is in place, so the start is kept short
TYPE_CHECKING = False
if TYPE_CHECKING:  # hints only: `import nsyscomm` stays light (pandas, duckdb load with load())
    import os
    from collections.abc import Iterable
    from typing import Any

    from nsyscomm.analyses.result import Result


def load(paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None, **kwargs: Any) -> Result:
    """Read reports (files, folders or globs; None = the bundled samples) into a Result."""
    from nsyscomm.api import load as _load

    return _load(paths, **kwargs)


def annotate(enable: bool = True, **kwargs: Any) -> bool:
    """Make every torch.distributed collective emit an NVTX range (needs the [torch] extra)."""
    from nsyscomm.capture.wrapper import annotate as _annotate

    return _annotate(enable, **kwargs)


def step(i: int) -> None:
    """Declare the training step that the following collectives belong to."""
    from nsyscomm.capture.wrapper import step as _step

    return _step(i)


__all__ = ["load", "annotate", "step", "InputError", "__version__"]
