"""Where the folders shipped with the code are (sql/, sample_reports/): those of the same tree as
the nsyscomm package that was imported.

Installed from a wheel they are subpackages (nsyscomm/sql); in a source checkout they sit beside
the package (sql/ next to nsyscomm/). Asking importlib.resources first is not enough: with an
editable install of one checkout on the machine, its finder answers for ``nsyscomm.sql`` even
when nsyscomm itself was imported from another tree (another checkout on PYTHONPATH, as the
benchmarks' --baseline runs it; or a clean clone whose install re-pointed the finder). That
tree's code then read the other tree's SQL.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def bundled_dir(name: str, marker: str) -> Path:
    """The folder ``name`` of this tree, told by a file ``marker`` it must hold; else where
    importlib.resources finds the subpackage ``nsyscomm.<name>``."""
    package = Path(__file__).resolve().parent
    for d in (package / name, package.parent / name):
        if (d / marker).is_file():
            return d
    return Path(str(resources.files(f"nsyscomm.{name}")))
