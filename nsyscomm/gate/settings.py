"""The gate's thresholds and policies: defaults from METRICS, `[tool.nsyscomm.gate]` in
pyproject.toml (or a TOML file), and command-line overrides."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

from nsyscomm.errors import InputError
from nsyscomm.gate.metrics import LEVELS, METRIC_BY_ID, METRICS, POLICIES


@dataclass(frozen=True)
class Threshold:
    rel: float  # percent
    abs: float
    fail: bool = True
    enabled: bool = True


@dataclass
class Settings:
    thresholds: dict[str, Threshold] = field(
        default_factory=lambda: {m.id: Threshold(m.rel, m.abs, m.fail) for m in METRICS}
    )
    min_calls: int = 10  # a key counts only when both sides have at least this many calls
    new_keys: str = "fail"  # a key absent from every baseline run: fail | warn | ignore
    missing_keys: str = "warn"  # a baseline key absent from the current run
    noise_sigma: float = 0.0  # widen the baseline runs' [min, max] band by this many standard deviations
    # A baseline of one run has no noise band, and a host-timed job's figures move a lot from run
    # to run of the same code (what was seen: docs/gate.md). A timing of a noisy key or
    # run then fails only when it is worse by more than this factor (x2: +100% time, half the bandwidth) and costs more than this share (%) of the
    # baseline run's time. 1 and 0 give one run the thresholds of a band.
    single_run_factor: float = 2.0
    single_run_share: float = 25.0
    level: str = "auto"  # compare per op (op, bytes, n) or per caller too; auto: caller when both sides have it
    # a caller key is "file function" by default, so that an edit to unrelated lines moves no key;
    # True keys it by "file:line function", each call site apart
    caller_line: bool = False
    source: list[str] = field(default_factory=list)  # where the settings came from

    def to_dict(self) -> dict:
        return {
            "min_calls": self.min_calls,
            "new_keys": self.new_keys,
            "missing_keys": self.missing_keys,
            "noise_sigma": self.noise_sigma,
            "single_run_factor": self.single_run_factor,
            "single_run_share": self.single_run_share,
            "level": self.level,
            "caller_line": self.caller_line,
            "source": self.source,
            "thresholds": {
                k: {"rel_pct": t.rel, "abs": t.abs, "fail": t.fail, "enabled": t.enabled}
                for k, t in self.thresholds.items()
            },
        }


_TOP_KEYS = {
    "min_calls",
    "new_keys",
    "missing_keys",
    "noise_sigma",
    "single_run_factor",
    "single_run_share",
    "by",
    "caller_line",
    "rel",
    "abs",
    "ignore",
}


def _metric_ids(name: str, where: str) -> list[str]:
    """'key.avg_ms' -> itself; 'avg_ms' -> every scope's avg_ms; 'key' -> every key metric."""
    if name in METRIC_BY_ID:
        return [name]
    hits = [m.id for m in METRICS if m.name == name or m.scope == name]
    if not hits:
        raise InputError(f"{where}: unknown metric {name!r}; known: {', '.join(METRIC_BY_ID)}")
    return hits


def _as_float(v, what: str, where: str) -> float:
    if isinstance(v, str):
        v = v.strip().rstrip("%")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {what} must be a number, got {v!r}") from None
    if math.isnan(x) or x < 0:
        raise InputError(f"{where}: {what} must be a number >= 0, got {v!r}")
    return x


def _factor(v, where: str) -> float:
    x = _as_float(v, "single_run_factor", where)
    if x < 1:
        raise InputError(f"{where}: single_run_factor must be >= 1 (1: no widening), got {v!r}")
    return x


def _policy(v, what: str, where: str) -> str:
    if v not in POLICIES:
        raise InputError(f"{where}: {what} must be one of {', '.join(POLICIES)}, got {v!r}")
    return v


def apply_config(settings: Settings, cfg: dict, where: str) -> Settings:
    """Apply a ``[tool.nsyscomm.gate]`` table (already parsed) on top of settings."""
    s = replace(settings, thresholds=dict(settings.thresholds), source=[*settings.source, where])
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: the gate settings must be a table")
    for k, v in cfg.items():
        if k in ("key", "rank", "job"):
            if not isinstance(v, dict):
                raise InputError(f"{where}: {k} must be a table of metrics, e.g. [{k}.avg_ms] rel = 10")
            for name, spec in v.items():
                mid = f"{k}.{name}"
                if mid not in METRIC_BY_ID:
                    raise InputError(f"{where}: unknown metric {mid!r}; known: {', '.join(METRIC_BY_ID)}")
                s.thresholds[mid] = _threshold(s.thresholds[mid], spec, f"{where}: {mid}")
        elif k == "min_calls":
            s.min_calls = int(_as_float(v, "min_calls", where))
        elif k == "new_keys":
            s.new_keys = _policy(v, k, where)
        elif k == "missing_keys":
            s.missing_keys = _policy(v, k, where)
        elif k == "noise_sigma":
            s.noise_sigma = _as_float(v, k, where)
        elif k == "single_run_factor":
            s.single_run_factor = _factor(v, where)
        elif k == "single_run_share":
            s.single_run_share = _as_float(v, k, where)
        elif k == "by":
            if v not in LEVELS:
                raise InputError(f"{where}: by must be one of {', '.join(LEVELS)}, got {v!r}")
            s.level = v
        elif k == "caller_line":
            if not isinstance(v, bool):
                raise InputError(f"{where}: caller_line must be true or false, got {v!r}")
            s.caller_line = v
        elif k == "rel":  # a default for every metric
            x = _as_float(v, "rel", where)
            s.thresholds = {m: replace(t, rel=x) for m, t in s.thresholds.items()}
        elif k == "ignore":
            names = [v] if isinstance(v, str) else v
            if not isinstance(names, list):
                raise InputError(f"{where}: ignore must be a list of metric names")
            for name in names:
                for mid in _metric_ids(str(name), where):
                    s.thresholds[mid] = replace(s.thresholds[mid], enabled=False)
        else:
            raise InputError(
                f"{where}: unknown gate setting {k!r}; known: {', '.join(sorted(_TOP_KEYS | {'key', 'rank', 'job'}))}"
            )
    return s


def _threshold(t: Threshold, spec, where: str) -> Threshold:
    if isinstance(spec, (int, float, str)) and not isinstance(spec, bool):
        return replace(t, rel=_as_float(spec, "rel", where))
    if not isinstance(spec, dict):
        raise InputError(f"{where}: expected a number (relative %) or a table with rel/abs/fail/enabled")
    for k, v in spec.items():
        if k == "rel":
            t = replace(t, rel=_as_float(v, "rel", where))
        elif k == "abs":
            t = replace(t, abs=_as_float(v, "abs", where))
        elif k in ("fail", "enabled"):
            if not isinstance(v, bool):
                raise InputError(f"{where}: {k} must be true or false")
            t = replace(t, **{k: v})
        else:
            raise InputError(f"{where}: unknown threshold field {k!r} (rel, abs, fail, enabled)")
    return t


def read_toml(path: str | os.PathLike) -> dict:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise InputError(f"{p}: no such config file; check the path") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{p}: not valid TOML ({e}); fix the syntax") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror})") from None
    return data


def find_pyproject(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest pyproject.toml at or above start (the working directory)."""
    d = Path(start or os.getcwd()).resolve()
    for p in (d, *d.parents):
        if (p / "pyproject.toml").is_file():
            return p / "pyproject.toml"
        if (p / ".git").exists():
            return None
    return None


def config_table(data: dict) -> dict | None:
    """[tool.nsyscomm.gate], else [gate], else None."""
    tool = data.get("tool", {})
    if isinstance(tool, dict) and isinstance(tool.get("nsyscomm"), dict) and "gate" in tool["nsyscomm"]:
        return tool["nsyscomm"]["gate"]
    if "gate" in data:
        return data["gate"]
    return None


def settings_from(
    config: str | os.PathLike | None = None, *, pyproject: bool = True, search_from: str | os.PathLike | None = None
) -> Settings:
    """Defaults, then [tool.nsyscomm.gate] of the nearest pyproject.toml, then the config file.

    A config file may hold [tool.nsyscomm.gate], [gate], or the settings at its top level."""
    s = Settings()
    if pyproject:
        pp = find_pyproject(search_from)
        if pp is not None:
            table = config_table(read_toml(pp))
            if table is not None:
                s = apply_config(s, table, str(pp))
    if config is not None:
        data = read_toml(config)
        table = config_table(data)
        s = apply_config(s, data if table is None else table, str(config))
    return s


def parse_metric_value(spec: str, what: str) -> tuple[list[str] | None, float]:
    """'10' or '10%' -> (None, 10.0) (every metric); 'key.avg_ms=5' -> (['key.avg_ms'], 5.0)."""
    where = f"--{what} {spec}"
    if "=" in spec:
        name, val = spec.split("=", 1)
        return _metric_ids(name.strip(), where), _as_float(val, what, where)
    return None, _as_float(spec, what, where)


def override(
    settings: Settings,
    *,
    rel: Iterable[str] = (),
    abs_: Iterable[str] = (),
    ignore: Iterable[str] = (),
    min_calls: int | None = None,
    new_keys: str | None = None,
    missing_keys: str | None = None,
    noise_sigma: float | None = None,
    level: str | None = None,
    single_run_factor: float | None = None,
    single_run_share: float | None = None,
    caller_line: bool | None = None,
) -> Settings:
    """Command-line options on top of settings."""
    s = replace(settings, thresholds=dict(settings.thresholds))
    for spec in rel:
        ids, x = parse_metric_value(spec, "rel")
        for mid in ids or list(s.thresholds):
            s.thresholds[mid] = replace(s.thresholds[mid], rel=x)
    for spec in abs_:
        if "=" not in spec:
            raise InputError(f"--abs {spec}: name the metric (units differ), e.g. --abs key.avg_ms=0.02")
        ids, x = parse_metric_value(spec, "abs")
        for mid in ids or ():  # a named metric: parse_metric_value gives its ids
            s.thresholds[mid] = replace(s.thresholds[mid], abs=x)
    for name in ignore:
        for mid in _metric_ids(name, f"--ignore {name}"):
            s.thresholds[mid] = replace(s.thresholds[mid], enabled=False)
    if min_calls is not None:
        s.min_calls = min_calls
    if new_keys is not None:
        s.new_keys = new_keys
    if missing_keys is not None:
        s.missing_keys = missing_keys
    if noise_sigma is not None:
        s.noise_sigma = noise_sigma
    if level is not None:
        s.level = level
    if caller_line is not None:
        s.caller_line = caller_line
    if single_run_factor is not None:
        s.single_run_factor = _factor(single_run_factor, "--single-run-factor")
    if single_run_share is not None:
        s.single_run_share = _as_float(single_run_share, "single_run_share", "--single-run-share")
    return s
