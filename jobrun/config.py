"""Settings: one dataclass, filled from defaults < config file < JOBRUN_* environment < flags.

The config file is the first of ``$JOBRUN_CONFIG``, ``./jobrun.toml``,
``/etc/jobrun/jobrun.toml`` that exists (``etc/jobrun.toml`` documents every key). The
database URL resolves the same way; with none anywhere, jobrun starts (or joins) an embedded
PostgreSQL kept under ``state_dir``, so every command run from one directory shares it.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from jobrun import validate
from jobrun.policy import dispatch
from jobrun.errors import InvalidInput

CONFIG_PATHS = ("./jobrun.toml", "/etc/jobrun/jobrun.toml")
SPAWN_MODES = ("fork", "exec")  # how the master starts children (docs/spawning.md)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    schema: str = "jobrun"
    state_dir: str = ".jobrun"
    max_payload_bytes: int = validate.DEFAULT_MAX_PAYLOAD_BYTES
    pooled: bool = False  # database_url is a transaction pooler (PgBouncer): producers only
    # master
    app: str | None = None
    concurrency: int = field(default_factory=_cpu_count)
    queues: tuple[str, ...] = ("default",)
    # -Q emails=4: at most 4 of this master's jobs of that queue leased at once (derived from
    # the queues setting); how the claim orders the served queues (jobrun/policy/dispatch.py)
    queue_limits: tuple[tuple[str, int], ...] = ()
    queue_order: str = "global"
    poll_interval: float = 0.2
    prefetch: int = 256  # jobs a child may hold (running + waiting); 1 = one at a time
    prefetch_max_runtime: float = 0.1  # most work (by recent run times) queued in a child
    max_tasks_per_child: int = 0
    spawn: str = "fork"  # fork: children forked by the fork server; exec: each imports the app
    max_memory_per_child: int = 0  # MiB; 0 = no limit
    time_limit: float = 0.0  # seconds; 0 = none
    soft_time_limit: float = 0.0
    grace: float = 30.0
    lease_ttl: float = 30.0
    schedule_lease_ttl: float = 10.0  # scheduler leader lease; takeover within ttl * 4/3
    retention: float = 7 * 86400.0
    metrics_addr: str = "127.0.0.1:9110"
    metrics_allow_remote: bool = False
    log_format: str = "text"
    log_level: str = "info"

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_DURATIONS = {"poll_interval", "prefetch_max_runtime", "time_limit", "soft_time_limit", "grace", "lease_ttl", "retention",
              "schedule_lease_ttl"}


def _coerce(name: str, value: Any, source: str) -> Any:
    if name not in _FIELDS:
        raise InvalidInput(f"{source}: unknown setting {name!r}")
    ftype = _FIELDS[name].type
    try:
        if name in _DURATIONS:
            return validate.duration(value)
        if name == "queues":
            return tuple(q for q, _ in dispatch.parse_queues(value))
        if name == "queue_limits":
            return tuple((q, n) for q, n in dispatch.parse_queues(value) if n is not None)
        if name == "queue_order":
            return dispatch.check_order(str(value))
        if name == "schema":
            return validate.schema_name(value)
        if name == "spawn":
            if value not in SPAWN_MODES:
                raise InvalidInput(f"spawn is fork or exec, not {value!r}")
            return value
        if "int" in ftype and "str" not in ftype:
            if isinstance(value, bool):
                raise ValueError(value)
            number = int(value)
            if number < 0:
                raise ValueError(value)
            return number
        if "bool" in ftype:
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return lowered in ("1", "true", "yes", "on")
        return None if value is None else str(value)
    except InvalidInput as exc:
        raise InvalidInput(f"{source}: {exc}") from None
    except (TypeError, ValueError):
        raise InvalidInput(f"{source}: invalid value {value!r} for {name}") from None


def config_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    explicit = environ.get("JOBRUN_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise InvalidInput(f"JOBRUN_CONFIG names {explicit}, which is not a file")
        return path
    for candidate in CONFIG_PATHS:
        path = Path(candidate)
        if path.is_file():
            return path
    return None


def load(overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] = os.environ) -> Settings:
    """Build Settings from file, environment and explicit overrides (None values are ignored)."""
    values: dict[str, Any] = {}
    path = config_path(environ)
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read config file {path}: {exc}") from None
        for key, value in data.items():
            _put(values, key, value, str(path))
    for name in _FIELDS:
        env = environ.get("JOBRUN_" + name.upper())
        if env is not None and env != "" and name != "queue_limits":
            _put(values, name, env, "JOBRUN_" + name.upper())
    for key, value in (overrides or {}).items():
        if value is not None:
            _put(values, key, value, "--" + key.replace("_", "-"))
    return Settings(**values)


def _put(values: dict[str, Any], key: str, value: Any, source: str) -> None:
    if key == "queue_limits":
        raise InvalidInput(f"{source}: unknown setting 'queue_limits' (write limits in queues:"
                           " emails=4,default)")
    values[key] = _coerce(key, value, source)
    if key == "queues":  # emails=4,default: the names, and this master's limits
        values["queue_limits"] = _coerce("queue_limits", value, source)


def resolve_dsn(settings: Settings) -> str:
    """The database URL to use: the configured one, else the embedded server's."""
    if settings.database_url:
        return settings.database_url
    from jobrun.store.embedded import ensure_server

    return ensure_server(Path(settings.state_dir))
