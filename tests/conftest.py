from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Real exports live beside the project (never copied into it): ../shared/real
REAL = ROOT.parent / "shared" / "real"
REAL_NSYS = REAL / "nsys"
SAMPLES = ROOT / "sample_reports"


def real_file(relpath: str) -> Path:
    p = REAL / relpath
    if not p.exists():
        pytest.skip(f"real data {relpath} not present (../shared/real is only beside the project checkout)")
    return p


def real_nsys_files() -> list[Path]:
    return sorted(REAL_NSYS.glob("*.sqlite")) if REAL_NSYS.exists() else []


def ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


@pytest.fixture
def h100_window() -> Path:
    return real_file("nsys/nsys2026.2_2xH100_nccl_window.sqlite")
