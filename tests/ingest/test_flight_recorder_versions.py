"""Flight Recorder dumps of every format version from 2.4 to 2.10 (nsyscomm.synth.flight_recorder):
the same job gives the same hang and desync diagnosis whatever the version, a reset epoch
included; the library's version is read under either key."""

from __future__ import annotations

import pytest

import nsyscomm
from nsyscomm.ingest.flight_recorder import dump as fr_dump
from nsyscomm.synth import flight_recorder as synth_fr
from nsyscomm.synth.flight_recorder import FrCall


def _hung(reset: bool = False) -> dict[int, list[FrCall]]:
    """4 ranks; rank 1 stops after seq 3: the others completed 1-3 and started seq 4. With reset,
    seq 1-2 were recorded before a reset_all (an earlier epoch, not in the dump)."""
    per = {}
    for r in range(4):
        calls = [FrCall(s, epoch=(0 if (reset and s <= 2) else 1 if reset else 0)) for s in (1, 2, 3)]
        if r != 1:
            calls.append(FrCall(4, state="started", epoch=1 if reset else 0))
        per[r] = calls
    return per


def _desync() -> dict[int, list[FrCall]]:
    """Rank 2 calls all_gather where the others call all_reduce at seq 3."""
    return {
        r: [FrCall(1), FrCall(2), FrCall(3, op="all_gather" if r == 2 else "all_reduce", state="started")]
        for r in range(4)
    }


@pytest.mark.parametrize("version", synth_fr.VERSIONS)
def test_hang_is_named_alike_in_every_version(tmp_path, version):
    synth_fr.write(tmp_path, version, _hung())
    h = nsyscomm.load(tmp_path, cache=False).hang
    assert h["status"] == "hung"
    (b,) = h["blocked"]
    assert (b["seq"], b["op"], b["waiting_ranks"]) == (4, "all_reduce", [0, 2, 3])
    assert [(m["rank"], m["last_seq"]) for m in b["missing_ranks"]] == [(1, 3)]


@pytest.mark.parametrize("version", synth_fr.VERSIONS)
def test_desync_is_named_alike_in_every_version(tmp_path, version):
    synth_fr.write(tmp_path, version, _desync())
    h = nsyscomm.load(tmp_path, cache=False).hang
    assert h["status"] == "desynced"
    (m,) = h["mismatches"]
    assert m["seq"] == 3


def test_a_reset_epoch_keeps_the_diagnosis(tmp_path):
    """2.10 after reset_all: record ids restart at 0, the dump holds seq 3-4 only."""
    paths = synth_fr.write(tmp_path, "2.10", _hung(reset=True))
    d = fr_dump.load_dump(paths[0])
    assert [e["record_id"] for e in d["entries"]] == [0, 1]
    assert [e["collective_seq_id"] for e in d["entries"]] == [3, 4]
    h = nsyscomm.load(tmp_path, cache=False).hang
    (b,) = h["blocked"]
    assert (b["seq"], b["waiting_ranks"]) == (4, [0, 2, 3])


@pytest.mark.parametrize("version", ["2.9", "2.10"])
def test_library_version_under_either_key(tmp_path, version):
    paths = synth_fr.write(tmp_path, version, _hung())
    assert fr_dump.library_version(fr_dump.load_dump(paths[0])) == "2.27.3"
    from nsyscomm.extract.readers import extract_one

    assert extract_one(paths[0], paths[0].name).nsys_version == f"Flight Recorder {version} (library 2.27.3)"
