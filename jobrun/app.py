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
    # Its parents' results by parent id (a job enqueued after others: docs/workflows.md);
    # None for a job without parents.
    parents: dict[int, Any] | None = None


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
    periodic: list[dict[str, Any]] = field(default_factory=list)  # from @app.periodic
    # Whether a job of this task may share its child with others (``--slots``): None means
    # yes for an ``async def`` handler (a task on the child's event loop), no for a plain one;
    # True for a plain one declares it thread-safe (it runs on the child's thread pool).
    slots: bool | None = None
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.fn)

    @property
    def shares_child(self) -> bool:
        """Runs in a slot of a child with ``--slots`` > 1 (beside other jobs), not alone."""
        if self.transactional:
            return False
        return self.is_async if self.slots is None else self.slots

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
            "max_attempts": self.max_attempts, "slots": self.shares_child,
            "retry": [self.retry.base, self.retry.factor, self.retry.cap],
            **({"periodic": self.periodic} if self.periodic else {}),
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
             retry_cap: float = DEFAULT_RETRY.cap, transactional: bool = False,
             slots: bool | None = None) -> Callable[[Callable[..., Any]], TaskDef]:
        """``slots``: whether a job of this task may run beside others in one child when the
        master runs with ``--slots`` N > 1 (default: yes for ``async def`` handlers, which
        run as tasks on the child's event loop; no for plain functions). ``slots=True`` on a
        plain function declares it thread-safe: it runs on the child's thread pool (I/O code
        such as ``requests`` calls). A task that does not share keeps a child to itself, as
        with ``--slots 1``."""
        def register(fn: Callable[..., Any]) -> TaskDef:
            task_name = validate.task_name(name or f"{fn.__module__}.{fn.__qualname__}")
            if task_name in self.tasks:
                raise ValueError(f"task {task_name!r} is registered twice")
            if max_crashes < 1:
                raise ValueError("max_crashes must be at least 1")
            if transactional and inspect.iscoroutinefunction(fn):
                raise ValueError("transactional tasks must be plain functions taking (job, tx)")
            if transactional and slots:
                raise ValueError("a transactional task keeps a child to itself: slots=True refused")
            definition = TaskDef(
                task_name, fn, self, queue=validate.queue_name(queue),
                max_attempts=validate.max_attempts(max_attempts), time_limit=time_limit,
                soft_time_limit=soft_time_limit, max_crashes=max_crashes,
                retry=RetryPolicy(retry_base, retry_factor, retry_cap),
                transactional=transactional, slots=slots,
            )
            self.tasks[task_name] = definition
            return definition

        return register

    def periodic(self, cron_expr: str, *, tz: str = "UTC", name: str | None = None,
                 payload: Any = None, queue: str | None = None, priority: int = 0,
                 max_attempts: int | None = None, catch_up: str = "latest",
                 starts_at: str | None = None, ends_at: str | None = None
                 ) -> Callable[[TaskDef], TaskDef]:
        """Run a task on a schedule, declared in code (above ``@app.task``)::

            @app.periodic("*/5 * * * *", tz="Europe/London")
            @app.task("report.build")
            def build(job): ...

        Masters add it to the schedules table when they start (name: the task's, unless
        given), marked as declared in code. Checked here, at import time.
        """
        from jobrun.policy import cron
        from jobrun.schedules import parse_time

        cron.parse(cron_expr)
        cron.zone(tz)
        if catch_up not in cron.CATCH_UP:
            raise ValueError(f"catch_up must be one of {', '.join(cron.CATCH_UP)}")
        validate.payload(payload)  # JSON, within the default size limit
        window = [parse_time(t, what) for t, what in ((starts_at, "starts_at"), (ends_at, "ends_at"))]

        def register(task: TaskDef) -> TaskDef:
            if not isinstance(task, TaskDef):
                raise TypeError("@app.periodic goes above @app.task (it schedules a task)")
            schedule_name = validate.schedule_name(name or task.name)
            if any(s["name"] == schedule_name for t in self.tasks.values() for s in t.periodic):
                raise ValueError(f"schedule {schedule_name!r} is declared twice")
            task.periodic.append({
                "name": schedule_name, "cron": cron_expr, "timezone": tz, "task": task.name,
                "payload": payload,
                "queue": validate.queue_name(queue or task.queue),
                "priority": validate.priority(priority),
                "max_attempts": validate.max_attempts(max_attempts or task.max_attempts),
                "catch_up": catch_up,
                "starts_at": window[0].isoformat() if window[0] else None,
                "ends_at": window[1].isoformat() if window[1] else None,
            })
            return task

        return register

    def declared_schedules(self) -> list[dict[str, Any]]:
        """Every schedule declared with @app.periodic (for ``client.schedules.sync_declared``)."""
        return [s for t in self.tasks.values() for s in t.periodic]

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
