"""nsyscomm startup hook: put on PYTHONPATH by ``nsyscomm run``; annotates collectives without code changes.

Costs nothing in processes that never import torch: a meta-path finder waits for ``torch`` to
finish importing, then calls ``nsyscomm.capture.wrapper.annotate()``. Any sitecustomize that
this file shadows is run afterwards. Disable with NSYSCOMM_ANNOTATE=0.
"""

import os
import sys


def _nsyscomm_install():
    import importlib.abc
    import importlib.util

    class _AfterTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_then_annotate(module):
                exec_module(module)
                try:
                    from nsyscomm.capture.wrapper import annotate

                    annotate()
                except Exception as e:  # never break the user's program
                    sys.stderr.write(f"nsyscomm: annotation disabled ({e!r})\n")

            try:
                loader.exec_module = exec_then_annotate  # type: ignore[method-assign]  # this loader's only
            except Exception:
                return spec
            return spec

    if "torch" in sys.modules:
        from nsyscomm.capture.wrapper import annotate

        annotate()
    else:
        sys.meta_path.insert(0, _AfterTorch())


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or not spec.origin:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) != here:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)


if os.environ.get("NSYSCOMM_ANNOTATE", "1") != "0":
    try:
        _nsyscomm_install()
    except Exception as _e:
        sys.stderr.write(f"nsyscomm: startup hook failed ({_e!r})\n")
try:
    _chain_next_sitecustomize()
except Exception as _e:
    sys.stderr.write(f"nsyscomm: the shadowed sitecustomize failed ({_e!r})\n")
