"""The bundled samples written with their ground truth (``<name>.truth.json`` beside each), and
the command line: ``python -m nsyscomm.synth OUTDIR``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from nsyscomm.synth.samples import gen_ddp_4rank, gen_fsdp_8rank, gen_gloo_cpu, gen_nowrapper_2node
from nsyscomm.synth.sqlite_writer import write_sqlite
from nsyscomm.synth.truth import compute_truth

SAMPLES = {
    # name: (generator, seed, folder?)
    "synthetic_ddp_4rank": (gen_ddp_4rank, 1, False),
    "synthetic_fsdp_8rank": (gen_fsdp_8rank, 2, False),
    "synthetic_gloo_cpu": (gen_gloo_cpu, 3, False),
    "synthetic_nowrapper_2node": (gen_nowrapper_2node, 4, True),
}


def truth_json(truth: dict) -> str:
    return json.dumps(truth, sort_keys=True, indent=1) + "\n"


def generate(name: str, outdir: str | os.PathLike, seed: int | None = None) -> dict:
    """Generate one sample into ``outdir``; returns its truth dict."""
    gen, default_seed, folder = SAMPLES[name]
    seed = default_seed if seed is None else seed
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    reports = gen(seed)
    target = outdir / name if folder else outdir
    target.mkdir(parents=True, exist_ok=True)
    for rep in reports:
        if not folder:
            assert rep.name == f"{name}.sqlite"
        write_sqlite(rep, target / rep.name, seed)
    truth = compute_truth(reports, name, seed)
    (outdir / f"{name}.truth.json").write_text(truth_json(truth))
    return truth


def generate_all(outdir: str | os.PathLike) -> dict[str, dict]:
    return {name: generate(name, outdir) for name in SAMPLES}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m nsyscomm.synth OUTDIR", file=sys.stderr)
        return 2
    for name, truth in generate_all(argv[0]).items():
        print(
            f"{name}: {truth['collectives_count']} rows, {truth['logical_count']} logical collectives, "
            f"straggler {truth['skew']['straggler_rank']}"
        )
    return 0
