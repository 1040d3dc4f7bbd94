"""Settings: one table, filled from defaults < config file < JOBRUN_* environment < flags.

The config file is the first of ``$JOBRUN_CONFIG``, ``./jobrun.toml``,
``/etc/jobrun/jobrun.toml`` that exists (``etc/jobrun.toml`` documents every key). The
database URL resolves the same way; with none anywhere, jobrun starts (or joins) an embedded
PostgreSQL kept under ``state_dir``, so every command run in one project shares it (a relative
``state_dir`` is looked for upwards from the working directory, as git finds ``.git``).

``Settings`` is the table: each line names a setting, its type and default, how it is read,
its bounds or choices, and whether a SIGHUP applies it to a running master. Every value,
wherever it comes from, is checked by its line: at start (``load``), at a reload (the master
calls ``load`` again and refuses a file that fails), and by ``jobrun config check``. A value
out of its bounds names where it came from (``--prefetch``, ``JOBRUN_PREFETCH`` or the file
and key).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from jobrun import validate
from jobrun.policy import dispatch
from jobrun.errors import InvalidInput

CONFIG_PATHS = ("./jobrun.toml", "/etc/jobrun/jobrun.toml")
SPAWN_MODES = ("fork", "exec")  # how the master starts children (docs/spawning.md)
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --- how a value is read (each raises ValueError, TypeError or InvalidInput) --------------

def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _word(value: Any) -> str:
    return str(value).strip().lower()


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(value)
    return int(value)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise ValueError(value)
    return lowered in ("1", "true", "yes", "on")


def _queue_names(value: Any) -> tuple[str, ...]:
    return tuple(q for q, _ in dispatch.parse_queues(value))


def _origins(value: Any) -> tuple[str, ...]:
    """Browser origins `jobrun web` allows (CORS): a list, or text separated by commas or
    spaces; each exactly scheme://host[:port], never '*'."""
    items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    out = []
    for origin in items:
        origin = str(origin).strip()
        if origin == "*":
            raise InvalidInput("'*' (every origin) is refused: name each allowed origin,"
                               " e.g. https://console.example.com")
        if "://" not in origin or origin.endswith("/") or origin.count("/") != 2:
            raise InvalidInput(f"invalid origin {origin!r}: scheme://host[:port], no path")
        out.append(origin)
    return tuple(dict.fromkeys(out))


def _queue_limits(value: Any) -> tuple[tuple[str, int], ...]:
    return tuple((q, n) for q, n in dispatch.parse_queues(value) if n is not None)


@dataclass(frozen=True)
class Rule:
    """One line of the table: how a setting is read, its bounds or choices, and whether a
    SIGHUP applies it (the others are read once, at start: changing them takes a restart)."""
    read: Callable[[Any], Any]
    low: float | None = None
    choices: tuple[str, ...] = ()
    reload: bool = True


def setting(default: Any = dataclasses.MISSING, read: Callable[[Any], Any] = _text, *,
            low: float | None = None, choices: tuple[str, ...] = (), reload: bool = True,
            factory: Callable[[], Any] | None = None) -> Any:
    rule = Rule(read, low, choices, reload)
    if factory is not None:
        return field(default_factory=factory, metadata={"rule": rule})
    return field(default=default, metadata={"rule": rule})


_duration = validate.duration

# The most jobs one child runs at once (--slots): a child's jobs share its memory, one event
# loop and one thread pool; beyond this, run more children.
MAX_SLOTS = 1000


def _slots(value: Any) -> int:
    n = _integer(value)
    if n > MAX_SLOTS:
        raise InvalidInput(f"invalid slots {value!r}: at most {MAX_SLOTS} jobs in one child"
                           " (run more children with --concurrency)")
    return n


# The longest lease a master takes (lease_ttl): the reaper takes a lease that ends later than
# this from now as written by no master (reap_expired), so none holds a job for years.
MAX_LEASE_TTL = 86400.0


def _duration_at_most(most: float, says: str) -> Callable[[Any], float]:
    """A duration reader that refuses one longer than ``most`` seconds, with ``says``."""
    def read(value: Any) -> float:
        secs = _duration(value)
        if secs > most:
            raise InvalidInput(f"invalid duration {value!r}: {says}")
        return secs
    return read


_lease_ttl = _duration_at_most(MAX_LEASE_TTL, "a lease lasts at most 1 day")
# A duration the database subtracts from now() (retention).
_age = _duration_at_most(validate.MAX_DELAY, "at most 100 years")


@dataclass(frozen=True)
class Settings:
    # name: type = setting(default, how it is read, bounds or choices; reload=False: read at
    # start only, a SIGHUP keeps the value the master started with)
    database_url: str | None = setting(None, reload=False)
    schema: str = setting("jobrun", validate.schema_name, reload=False)
    state_dir: str = setting(".jobrun", reload=False)
    max_payload_bytes: int = setting(validate.DEFAULT_MAX_PAYLOAD_BYTES, _integer, low=0)
    pooled: bool = setting(False, _flag, reload=False)  # a transaction pooler: producers only
    # master
    app: str | None = setting(None, reload=False)
    concurrency: int = setting(read=_integer, factory=_cpu_count, low=1)
    queues: tuple[str, ...] = setting(("default",), _queue_names)
    # -Q emails=4: at most 4 of this master's jobs of that queue leased at once (derived from
    # the queues setting); how the claim orders the served queues (jobrun/policy/dispatch.py)
    queue_limits: tuple[tuple[str, int], ...] = setting((), _queue_limits)
    queue_order: str = setting("global", _word, choices=dispatch.ORDERS)
    poll_interval: float = setting(0.2, _duration)
    prefetch: int = setting(256, _integer, low=1)  # jobs a child may hold (running + waiting)
    prefetch_max_runtime: float = setting(0.1, _duration)  # most work (by run times) in a child
    max_tasks_per_child: int = setting(0, _integer, low=0)
    # jobs one child runs at once, of tasks that share a child (async handlers, slots=True)
    slots: int = setting(1, _slots, low=1)
    # fork: children forked by the fork server; exec: each imports the app (docs/spawning.md)
    spawn: str = setting("fork", _word, choices=SPAWN_MODES, reload=False)
    max_memory_per_child: int = setting(0, _integer, low=0)  # MiB; 0 = no limit
    time_limit: float = setting(0.0, _duration)  # seconds; 0 = none
    soft_time_limit: float = setting(0.0, _duration)
    grace: float = setting(30.0, _duration)
    lease_ttl: float = setting(30.0, _lease_ttl)  # at most MAX_LEASE_TTL
    schedule_lease_ttl: float = setting(10.0, _duration)  # leader lease; takeover in ttl * 4/3
    retention: float = setting(7 * 86400.0, _age)
    metrics_addr: str = setting("127.0.0.1:9110", reload=False)
    metrics_allow_remote: bool = setting(False, _flag, reload=False)
    log_format: str = setting("text", _word, choices=LOG_FORMATS, reload=False)
    log_level: str = setting("info", _word, choices=LOG_LEVELS, reload=False)
    # jobrun web: the browser origins it answers with CORS headers and lets change things
    # (exact origins; --allow-origin adds to them)
    web_allow_origins: tuple[str, ...] = setting((), _origins, reload=False)

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)


RULES: dict[str, Rule] = {f.name: f.metadata["rule"] for f in dataclasses.fields(Settings)}


def read(name: str, value: Any, where: str) -> Any:
    """``value`` of setting ``name`` read and checked by its line of the table; ``where`` names
    its source in the error (``--prefetch``, ``JOBRUN_PREFETCH``, ``FILE: prefetch``)."""
    rule = RULES[name]
    try:
        out = rule.read(value)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    except (TypeError, ValueError):
        raise InvalidInput(f"{where}: invalid value {value!r} for {name}") from None
    if rule.low is not None and out < rule.low:
        raise InvalidInput(f"{where} must be at least {rule.low:g}, not {value!r}")
    if rule.choices and out not in rule.choices:
        raise InvalidInput(f"{where} is one of {', '.join(rule.choices)}; not {value!r}")
    return out


def reloaded(running: Settings, new: Settings) -> tuple[Settings, list[str]]:
    """What a running master takes from ``new`` (a SIGHUP): every setting a reload applies,
    the others as it started; and the names of those ``new`` would change (they take a
    restart)."""
    kept = {name: getattr(running, name) for name, rule in RULES.items() if not rule.reload}
    changed = sorted(name for name, value in kept.items() if getattr(new, name) != value)
    return dataclasses.replace(new, **kept), changed


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
            put(values, key, value, str(path), f"{path}: {key}")
    for name in RULES:
        env = environ.get("JOBRUN_" + name.upper())
        if env is not None and env != "" and name != "queue_limits":
            put(values, name, env, "JOBRUN_" + name.upper())
    for key, value in (overrides or {}).items():
        if value is not None:
            put(values, key, value, "--" + key.replace("_", "-"))
    return Settings(**values)


def put(values: dict[str, Any], key: str, value: Any, source: str,
        where: str | None = None) -> None:
    """Read ``key = value`` from ``source`` into ``values`` (``where``: the source and key, for a
    file)."""
    if key not in RULES or key == "queue_limits":
        hint = " (write limits in queues: emails=4,default)" if key == "queue_limits" else ""
        raise InvalidInput(f"{source}: unknown setting {key!r}{hint}")
    where = where or source
    values[key] = read(key, value, where)
    if key == "queues":  # emails=4,default: the names, and this master's limits
        values["queue_limits"] = read("queue_limits", value, where)


def state_path(settings: Settings) -> Path:
    """The state directory: a relative state_dir (``.jobrun``) is looked for in the working
    directory and the directories above it, as git finds ``.git`` (embedded.find_state_dir)."""
    from jobrun.store.embedded import find_state_dir

    return find_state_dir(Path(settings.state_dir).expanduser(), Path.cwd())


def resolve_dsn(settings: Settings) -> str:
    """The database URL to use: the configured one, else the embedded server's."""
    if settings.database_url:
        return settings.database_url
    from jobrun.store.embedded import ensure_server

    return ensure_server(state_path(settings))
