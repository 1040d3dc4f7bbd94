"""The task API: ``App``, ``@app.task`` and the ``Job`` a handler receives.

    app = jobrun.App()

    @app.task("email.send", queue="emails", max_attempts=5, time_limit=30)
    def send(job: jobrun.Job):
        ...

The master never imports this module's users' code: each child imports the app and reports
its tasks' settings (time limits, crash limit, retry policy) to the master when it is ready.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from jobrun import validate
from jobrun.policy import DEFAULT_RETRY, RetryPolicy


@dataclass(frozen=True)
class Job:
    """One attempt of a job, as its handler sees it."""

    id: int
    task: str
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    priority: int = 0
    token: int = 0
    created_at: float = 0.0  # epoch seconds, database clock
    idempotency_key: str | None = None


@dataclass
class TaskDef:
    name: str
    fn: Callable[..., Any]
    app: "App"
    queue: str = "default"
    max_attempts: int | None = None
    time_limit: float | None = None
    soft_time_limit: float | None = None
    max_crashes: int = 3
    retry: RetryPolicy = DEFAULT_RETRY
    transactional: bool = False
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def enqueue(self, payload: Any = None, **kwargs: Any):
        """Enqueue this task through the app's client (defaults: the task's queue and limits)."""
        kwargs.setdefault("queue", self.queue)
        kwargs.setdefault("max_attempts", self.max_attempts)
        return self.app.client.enqueue(self.name, payload, **kwargs)

    def config(self) -> dict[str, Any]:
        """What the master needs to know about this task (sent in the child's ready frame)."""
        return {
            "time_limit": self.time_limit, "soft_time_limit": self.soft_time_limit,
            "max_crashes": self.max_crashes, "transactional": self.transactional,
            "max_attempts": self.max_attempts,
            "retry": [self.retry.base, self.retry.factor, self.retry.cap],
        }


class App:
    """A registry of tasks, plus a lazily created client for ``task.enqueue``."""

    def __init__(self, dsn: str | None = None, *, schema: str | None = None,
                 capture_print: bool = True) -> None:
        """``capture_print``: also keep what handlers print in each attempt's log (it still
        reaches the child's stdout)."""
        self.tasks: dict[str, TaskDef] = {}
        self.capture_print = capture_print
        self._dsn = dsn
        self._schema = schema
        self._client = None

    def task(self, name: str | None = None, *, queue: str = "default",
             max_attempts: int | None = None, time_limit: float | None = None,
             soft_time_limit: float | None = None, max_crashes: int = 3,
             retry_base: float = DEFAULT_RETRY.base, retry_factor: float = DEFAULT_RETRY.factor,
             retry_cap: float = DEFAULT_RETRY.cap, transactional: bool = False
             ) -> Callable[[Callable[..., Any]], TaskDef]:
        def register(fn: Callable[..., Any]) -> TaskDef:
            task_name = validate.task_name(name or f"{fn.__module__}.{fn.__qualname__}")
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is registered twice")
            if max_crashes < 1:
                raise ValueError("max_crashes must be at least 1")
            if transactional and inspect.iscoroutinefunction(fn):
                raise ValueError("transactional tasks must be plain functions taking (job, tx)")
            definition = TaskDef(
                task_name, fn, self, queue=validate.queue_name(queue),
                max_attempts=validate.max_attempts(max_attempts), time_limit=time_limit,
                soft_time_limit=soft_time_limit, max_crashes=max_crashes,
                retry=RetryPolicy(retry_base, retry_factor, retry_cap),
                transactional=transactional,
            )
            self.tasks[task_name] = definition
            return definition

        return register

    @property
    def client(self):
        if self._client is None:
            from jobrun.client import Client

            self._client = Client(self._dsn, schema=self._schema)
        return self._client


def load_app(spec: str) -> App:
    """Import ``module`` or ``module:attr`` and return the App found there (attr default ``app``).

    The current directory is put on ``sys.path`` first, as ``python -m`` would.
    """
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    module = importlib.import_module(module_name)
    obj = getattr(module, attr or "app", None)
    if not isinstance(obj, App):
        raise LookupError(
            f"{module_name} has no jobrun.App named {attr or 'app'!r}"
            " (use -A module:attribute to name another)"
        )
    return obj
