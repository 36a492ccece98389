"""Training steps of a pipeline-parallel job: each `step()` of a torch.distributed.pipelining schedule
is a step boundary, for jobs whose pipeline stages have no optimizer step to mark one (an optimizer
step, where there is one, still marks it and the schedule's adds none).

The rule, the optimizer's made to fit: a schedule step that begins after an earlier one ended with
no optimizer step since begins a new training step. So with an optimizer the steps are the
optimizer's (step 0 before its first step), without one each schedule step is one step.

torch.distributed.pipelining costs seconds to import: it is patched when the job imports it (an
import hook), or at once when it is already imported."""

from __future__ import annotations

import functools
import importlib.abc
import sys
from types import ModuleType

from nsyscomm.capture.wrapper_state import WrapperState

MODULE = "torch.distributed.pipelining.schedules"
CLASSES = ("PipelineScheduleSingle", "PipelineScheduleMulti")

W: WrapperState  # nsyscomm.capture.wrapper, bound by install() before anything here runs
_pending = False  # a schedule step ended and no optimizer step has come since
_depth = 0  # schedule steps in progress (a subclass's step may call its base's)


def optimizer_stepped() -> None:
    """The optimizer marked a step: the schedule step that ended before it marks none."""
    global _pending
    _pending = False


def _wrap(orig):
    @functools.wraps(orig)
    def step(self, *args, **kwargs):
        global _pending, _depth
        if _depth == 0 and _pending and W._enabled and not W._explicit_step:
            _pending = False
            W._set_step((W._step or 0) + 1)
        _depth += 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            _depth -= 1
            if _depth == 0:
                _pending = True

    setattr(step, "_nsyscomm", True)  # noqa: B010 (an attribute mypy does not know functions take)
    return step


def _patch(mod: ModuleType, w: WrapperState) -> None:
    for name in CLASSES:
        cls = getattr(mod, name, None)
        if cls is None:
            continue
        orig = cls.__dict__.get("step")
        if orig is None or getattr(orig, "_nsyscomm", False):
            continue
        new = _wrap(orig)
        cls.step = new
        w._patched.append((cls, "step", orig, new))


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the schedules module right after the job imports it."""

    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                loader = spec.loader
                run = loader.exec_module

                def exec_module(module, _run=run):
                    _run(module)
                    try:
                        if W._enabled:
                            _patch(module, W)
                    except Exception as e:
                        W._warn_once("pipeline", f"nsyscomm: no pipeline-schedule steps ({e!r})")

                setattr(loader, "exec_module", exec_module)  # noqa: B010 (mypy forbids assigning a method)
                return spec
        return None


_finder = _Finder()


def install(wrapper: WrapperState) -> None:
    """Mark schedule steps as step boundaries, now or when the job imports the schedules."""
    global W
    W = wrapper
    mod = sys.modules.get(MODULE)
    if mod is not None:
        _patch(mod, wrapper)
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
