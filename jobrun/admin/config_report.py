"""What ``jobrun config show`` and ``jobrun config check`` report.

``effective`` rebuilds the settings the way :func:`jobrun.config.load` does (defaults < config
file < JOBRUN_* environment < flags) and says, for each, which of those decided it; secrets
are redacted. ``check_file`` validates one config file by the table a master reads it with
(``jobrun.config.Settings``, at start and at every SIGHUP), every bad key named, unknown keys
included.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from jobrun import config
from jobrun.redact import redact
from jobrun.errors import InvalidInput, JobrunError

SECRETS = ("database_url",)


@dataclass(frozen=True)
class Entry:
    name: str
    value: Any
    source: str  # "flag", "environment (JOBRUN_X)", "file (PATH)" or "default"


def _shown(name: str, value: Any) -> Any:
    if name in SECRETS and value:
        return f"<redacted: {redact(value)}>"
    if isinstance(value, tuple):
        return list(value)
    return value


def effective(overrides: Mapping[str, Any] | None = None,
              environ: Mapping[str, str] = os.environ) -> tuple[list[Entry], Path | None]:
    """Every setting with its effective (redacted) value and where it came from."""
    settings = config.load(overrides, environ)
    path = config.config_path(environ)
    in_file: set[str] = set()
    if path is not None:
        in_file = set(tomllib.loads(path.read_text()))
    entries = []
    for f in dataclasses.fields(config.Settings):
        env_name = "JOBRUN_" + f.name.upper()
        if (overrides or {}).get(f.name) is not None:
            source = "flag"
        elif environ.get(env_name):
            source = f"environment ({env_name})"
        elif f.name in in_file:
            source = f"file ({path})"
        else:
            source = "default"
        entries.append(Entry(f.name, _shown(f.name, getattr(settings, f.name)), source))
    return entries, path


def check_file(path: Path) -> list[str]:
    """Problems in a config file, one line each naming the key; empty when it is valid."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        return [f"cannot read {path}: {exc.strerror or exc}"]
    except tomllib.TOMLDecodeError as exc:
        return [f"{path}: not valid TOML: {exc}"]
    problems = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        try:
            config.put(values, key, value, str(path), f"{path}: {key}")
        except JobrunError as exc:
            problems.append(str(exc))
    problems.extend(_cross_checks(path, values))
    return problems


def _cross_checks(path: Path, values: dict[str, Any]) -> list[str]:
    """What the master refuses at start beyond each value: a metrics address it may not bind."""
    from jobrun.worker.metrics import parse_addr

    out = []
    if "metrics_addr" in values:
        try:
            parse_addr(values["metrics_addr"], values.get("metrics_allow_remote", False))
        except InvalidInput as exc:
            out.append(f"{path}: metrics_addr: {exc}")
    return out
