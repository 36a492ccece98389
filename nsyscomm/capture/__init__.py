"""The capture side: NVTX ranges around torch.distributed collectives, and the ``nsyscomm run`` launcher.

``wrapper`` runs inside the training processes (needs torch and nvtx, both imported lazily);
``launcher`` runs nsys around a command; ``_hook`` is the folder the launcher puts on PYTHONPATH
so that every Python process of the job annotates itself without a change to the user's code.
"""

from __future__ import annotations

from typing import Any


def annotate(enable: bool = True, **kwargs: Any) -> bool:
    from nsyscomm.capture.wrapper import annotate as _annotate

    return _annotate(enable, **kwargs)


def step(i: int) -> None:
    from nsyscomm.capture.wrapper import step as _step

    return _step(i)


__all__ = ["annotate", "step"]
