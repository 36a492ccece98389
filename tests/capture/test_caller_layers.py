"""The caller column names the user's line: frames of communication layers (DeepSpeed's comm,
Accelerate, Lightning, ... and those the user names) are skipped, and a frame inside an installed
package is named with its package path. Fake layer packages on sys.path, a one-rank gloo world."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from nsyscomm.capture import wrapper as W  # noqa: E402
from tests.capture.test_capture_wrapper import Rec, pg  # noqa: E402,F401

THIS = os.path.basename(__file__)
CALL = "    dist.all_reduce(t)\n"
LAYERS = {
    # DeepSpeed's comm layer: a known communication layer, skipped whole
    "deepspeed/__init__.py": "",
    "deepspeed/comm/__init__.py": "",
    "deepspeed/comm/torch.py": "import torch.distributed as dist\n\n\ndef all_reduce(t):\n" + CALL,
    # DeepSpeed's engine: no layer, it is where the program's gradients are reduced
    "deepspeed/runtime/__init__.py": "",
    "deepspeed/runtime/engine.py": "from deepspeed.comm import torch as comm\n\n\ndef allreduce_bucket(t):\n"
    "    comm.all_reduce(t)\n",
    # the user's own layer, a package of the program's (not installed)
    "mylayer/__init__.py": "",
    "mylayer/comm.py": "import torch.distributed as dist\n\n\ndef reduce(t):\n" + CALL,
}


@pytest.fixture
def layers(tmp_path, monkeypatch, pg):  # noqa: F811
    site = tmp_path / "lib" / "python3" / "site-packages"
    for rel, text in LAYERS.items():
        root = tmp_path / "src" if rel.startswith("mylayer") else site
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setattr(W, "_skip_modules", getattr(W, "_skip_modules", ()), raising=False)  # restored after
    rec = Rec()
    W.annotate(True)
    W._reset_for_tests()
    monkeypatch.setattr(W, "_push", rec.push)
    monkeypatch.setattr(W, "_pop", rec.pop)
    monkeypatch.setattr(W, "_mark", rec.mark)
    yield rec
    W.annotate(False)
    for name in [m for m in sys.modules if m.split(".")[0] in ("deepspeed", "mylayer")]:
        del sys.modules[name]
    W._call_sites.clear()


def _callers(rec, fn) -> list[str]:
    rec.msgs.clear()
    fn()
    return [m["caller"] for m in rec.parsed()]


def test_a_known_layer_is_skipped_to_the_users_line(layers):
    import deepspeed.comm.torch as ds_comm

    t = torch.ones(4)
    line = sys._getframe().f_lineno + 1
    assert _callers(layers, lambda: ds_comm.all_reduce(t)) == [f"{THIS}:{line} <lambda>"]


def test_a_frame_in_an_installed_package_is_named_with_its_package(layers):
    from deepspeed.runtime import engine

    t = torch.ones(4)
    # the engine is no communication layer: its line is the caller, named as deepspeed's file
    assert _callers(layers, lambda: engine.allreduce_bucket(t)) == ["deepspeed/runtime/engine.py:5 allreduce_bucket"]


def test_users_name_more_layers_to_skip(layers, monkeypatch):
    from mylayer import comm

    t = torch.ones(4)
    assert _callers(layers, lambda: comm.reduce(t)) == ["comm.py:5 reduce"]  # a user's file: its name
    monkeypatch.setenv(W.SKIP_MODULES_ENV, " mylayer , other.pkg")
    W.annotate(False)
    W._installed = False  # as a new process would: the list is read when the wrapper installs
    W.annotate(True)
    assert W._skip_modules[-2:] == ("mylayer.", "other.pkg.")
    line = sys._getframe().f_lineno + 1
    assert _callers(layers, lambda: comm.reduce(t)) == [f"{THIS}:{line} <lambda>"]


def test_run_passes_skip_module_to_the_job(monkeypatch, tmp_path):
    """`nsyscomm run --skip-module` puts the names where the job's wrapper reads them."""
    from click.testing import CliRunner

    from nsyscomm.capture import launcher
    from nsyscomm.cli import main

    seen = {}

    def fake_launch(cmd, **kw):
        seen["env"] = os.environ.get(W.SKIP_MODULES_ENV)
        raise SystemExit(3)

    monkeypatch.setattr(launcher, "run", fake_launch)
    monkeypatch.setenv(W.SKIP_MODULES_ENV, "from_env")
    r = CliRunner().invoke(main, ["run", "--skip-module", "a.b", "--skip-module", "c", "--", "true"])
    assert r.exit_code == 3, r.output
    assert seen["env"] == "from_env,a.b,c"
