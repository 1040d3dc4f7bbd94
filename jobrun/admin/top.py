"""``jobrun top``: the terminal view of the read model (:mod:`jobrun.observe`).

Two layers, each usable alone:

- **drawing**: ``render`` turns a :class:`~jobrun.observe.Snapshot` into rich renderables; no I/O.
- **terminal**: ``watch`` is the only interactive part: a rich ``Live`` on the alternate
  screen, refreshed every ``interval`` seconds, keys read in cbreak mode by ``select`` on
  stdin with the time left until the next refresh as its timeout (one thread, so a key never
  waits for a query and a refresh never waits for a key). The terminal's mode is restored in
  ``finally`` blocks, whatever ends the loop: ``q``, ^C, SIGTERM/SIGHUP or an exception.

The data (and what each figure measures) is :mod:`jobrun.observe`'s: ``jobrun web`` reads the
same model without importing this module, rich or termios.
"""

from __future__ import annotations

import os
import select
import signal
import termios
import time
import tty
from contextlib import contextmanager
from datetime import timezone
from typing import Any, Callable, Iterator

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from jobrun.errors import JobrunError
from jobrun.observe import (FAIL_WINDOW, RATE_WINDOW, WAIT_SAMPLE, WAIT_WINDOW, QueueView,
                            Snapshot, duration, first_line)

SORTS = ("queue", "queued", "oldest", "done/s", "failures")
WIDTH = 80  # every table fits this many columns with the figures it usually holds


# --- drawing ------------------------------------------------------------------------------
#
# Each table fits an 80-column terminal: figures never wrap (no_wrap, a few characters each:
# observe.duration, _rate), names wrap at spaces or fold (host names, task names, queue lists:
# shown whole, over more lines when long) and only an error's first line is cut, with an
# ellipsis, to one line. tests/db/test_top.py renders every table at 80 columns to keep it so.

def _rate(per_s: float) -> str:
    return "0" if per_s == 0 else f"{per_s:.0f}" if per_s >= 100 else f"{per_s:.2f}"


def _sort_key(sort: str) -> Callable[[QueueView], Any]:
    return {
        "queue": lambda v: v.queue,
        "queued": lambda v: (-v.queued, v.queue),
        "oldest": lambda v: (-(v.oldest_age if v.oldest_age is not None else -1.0), v.queue),
        "done/s": lambda v: (-v.done_per_s, v.queue),
        "failures": lambda v: (-v.failures, v.queue),
    }[sort]


def _grid(title: str, *columns: str, names: tuple[str, ...] = ()) -> Table:
    """A table whose ``names`` columns are text that wraps (left-aligned) and whose other
    columns are figures that never wrap (right-aligned)."""
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
    for header in columns:
        if header in names:
            table.add_column(header, justify="left", overflow="fold")
        else:
            table.add_column(header, justify="right", no_wrap=True)
    return table


def _one_line(text: str) -> Text:
    """Each line cut to the column's width with an ellipsis, never wrapped (the column itself
    stays wrappable, so the table gives it the width left over rather than squeezing figures)."""
    return Text(text, no_wrap=True, overflow="ellipsis")


def _queues(snap: Snapshot, sort: str) -> list[RenderableType]:
    qt = _grid(f"Queues (sort: {sort})", "queue", "queued", "sched", "leased", "oldest",
               "in/s", "done/s", "p50", "p95", "fail", names=("queue",))
    limited = []
    for v in sorted(snap.queues, key=_sort_key(sort)):
        qt.add_row(v.queue + (" (paused)" if v.paused else ""), str(v.queued), str(v.scheduled),
                   str(v.leased), duration(v.oldest_age), _rate(v.enqueued_per_s),
                   _rate(v.done_per_s), duration(v.wait_p50), duration(v.wait_p95),
                   Text(str(v.failures), style="red" if v.failures else ""))
        if v.limits or v.held:
            limited.append(v)
    parts: list[RenderableType] = [Text(""), qt]
    if limited:  # a table of its own: most queues have no limit, and the columns are wide
        lt = _grid("Queue limits", "queue", "limits", "held back",
                   names=("queue", "limits", "held back"))
        for v in limited:
            lt.add_row(v.queue, v.limits or "-", Text(v.held or "-",
                                                       style="yellow" if v.held else ""))
        parts += [Text(""), lt]
    return parts


def render(snap: Snapshot | None, *, sort: str = "queue", paused: bool = False,
           interval: float | None = None, target: str = "", error: str | None = None,
           max_inflight: int | None = None) -> RenderableType:
    """One frame of `jobrun top` (``snap`` None: nothing read yet)."""
    head = Text.assemble(("jobrun top", "bold"))
    if snap is not None:
        head.append(f"  {snap.at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC (db)")
    if interval is not None:
        head.append(f"  every {interval:g}s")
    if paused:
        head.append("  PAUSED", "bold reverse")
    parts: list[RenderableType] = [head]
    if target:
        parts.append(Text(target, style="dim"))
    parts += [
        Text(f"in/s, done/s: jobs/s over the last {RATE_WINDOW:g} s (enqueued, finished)",
             style="dim"),
        Text(f"p50, p95: wait runnable->start, newest {WAIT_SAMPLE} done in"
             f" {WAIT_WINDOW / 60:g} min", style="dim"),
        Text(f"fail: failed attempts in the last {FAIL_WINDOW / 60:g} min", style="dim")]
    if error:
        parts.append(Text(f"error: {error}", style="bold red"))
    if snap is None:
        return Group(*parts)
    parts += _queues(snap, sort)

    stale = f", {snap.stale_masters} stale hidden" if snap.stale_masters else ""
    mt = _grid(f"Masters ({len(snap.masters)} live{stale})", "host", "pid", "busy", "queues",
               "version", "uptime", "seen", names=("host", "queues", "version"))
    for m in snap.masters:
        mt.add_row(m.host, str(m.pid) if m.pid else "remote", f"{m.busy}/{m.capacity}",
                   ", ".join(m.queues), m.version or "", duration(m.uptime), duration(m.last_seen_ago) + " ago")
    parts += [Text(""), mt if snap.masters else Text(f"Masters: none live{stale}", style="bold")]

    # Two lines a failure: the task, and under it the error's first line, cut to the width
    # left (at 80 columns a column of its own beside the task would keep a dozen characters).
    ft = _grid(f"Latest failures ({FAIL_WINDOW / 60:g} min)", "when", "id", "try", "outcome",
               "task, error", names=("outcome", "task, error"))
    for f in snap.failures:
        cell = _one_line(f.task)
        cell.append("\n" + f.error, style="dim")
        ft.add_row(duration(f.age) + " ago", str(f.id), str(f.attempt), f.outcome, cell)
    parts += [Text(""), ft if snap.failures else Text("Latest failures: none", style="bold")]

    if snap.schedules:  # recurring schedules, soonest first
        st = _grid("Schedules", "schedule", "cron", "task", "last fire", "next fire",
                   names=("schedule", "cron", "task"))
        for r in snap.schedules:
            last, nxt = r["last_fire_at"], r["next_fire_at"]
            st.add_row(r["name"], f"{r['cron']}\n{r['timezone']}", r["task"],
                       duration((snap.at - last).total_seconds()) + " ago" if last else "-",
                       "paused" if r["paused"] else "expired" if nxt is None
                       else "in " + duration(max(0.0, (nxt - snap.at).total_seconds())))
        parts += [Text(""), st]

    jobs = snap.inflight
    shown = jobs if max_inflight is None else jobs[:max(0, max_inflight)]
    more = f", {len(jobs) - len(shown)} not shown" if len(shown) < len(jobs) else ""
    it = _grid(f"In flight ({len(jobs)}{more})", "task", "id", "child", "pid", "elapsed",
               "master", names=("task", "master"))
    for j in shown:
        it.add_row(j.task, str(j.job_id), "" if j.child is None else str(j.child),
                   "" if j.pid is None else str(j.pid), duration(j.elapsed),
                   f"{j.host}:{j.master_pid}")
    parts += [Text(""), it if jobs else Text("In flight: none", style="bold")]
    return Group(*parts)


# --- terminal -----------------------------------------------------------------------------

@contextmanager
def _cbreak(fd: int | None) -> Iterator[None]:
    """Keys arrive one at a time without echo; ^C still interrupts. Always restored."""
    if fd is None:
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextmanager
def _signal_wakeups(signals: tuple[int, ...]) -> Iterator[tuple[int, set[int]]]:
    """Signal handlers only record; the pipe wakes the loop's select (the self-pipe trick)."""
    received: set[int] = set()
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    previous = {s: signal.signal(s, lambda signum, _frame: received.add(signum)) for s in signals}
    try:
        yield r, received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(r)
        os.close(w)


def _rows_left(console: Console, snap: Snapshot | None) -> int | None:
    """Rows the in-flight table may use so the frame fits the screen (it is drawn last)."""
    if snap is None:
        return None
    limited = sum(1 for v in snap.queues if v.limits or v.held)
    fixed = (24 + len(snap.queues) + len(snap.masters) + 2 * len(snap.failures)  # text, chrome
             + (4 + limited if limited else 0) + (4 + 2 * len(snap.schedules) if snap.schedules
                                                    else 0))
    return console.size.height - fixed


def watch(fetch: Callable[[], Snapshot], *, interval: float = 1.0, target: str = "",
          console: Console | None = None, keys_fd: int | None = None) -> None:
    """Run the live view until ``q``, ^C, SIGTERM or SIGHUP. ``s`` cycles the queue sort,
    ``p`` pauses/resumes refreshing. A failing ``fetch`` shows its error and is retried."""
    console = console or Console()
    sort, paused, snap, error = 0, False, None, None
    stop = {signal.SIGTERM, signal.SIGHUP}
    try:
        with _signal_wakeups((signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH)) as (wake, got), \
                _cbreak(keys_fd), \
                Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
                     redirect_stderr=False) as live:
            due = 0.0
            while True:
                if not paused and time.monotonic() >= due:
                    try:
                        snap, error = fetch(), None
                    except JobrunError as exc:  # shown on screen, retried next period
                        error = first_line(str(exc))
                    due = time.monotonic() + interval
                live.update(render(snap, sort=SORTS[sort], paused=paused, interval=interval,
                                   target=target, error=error,
                                   max_inflight=_rows_left(console, snap)), refresh=True)
                timeout = None if paused else max(0.0, due - time.monotonic())
                fds = [wake] + ([keys_fd] if keys_fd is not None else [])
                ready, _, _ = select.select(fds, [], [], timeout)
                if wake in ready:
                    os.read(wake, 512)
                    if got & stop:
                        return
                    got.clear()
                if keys_fd in ready:
                    keys = os.read(keys_fd, 64)
                    if not keys:  # the terminal went away
                        return
                    for key in keys.decode(errors="replace").lower():
                        if key == "q":
                            return
                        if key == "s":
                            sort = (sort + 1) % len(SORTS)
                        elif key == "p":
                            paused = not paused
                            due = 0.0 if not paused else due
    except KeyboardInterrupt:
        return


def print_once(snap: Snapshot, *, target: str = "", console: Console | None = None) -> None:
    """One frame on stdout, for a pipe or a dumb terminal: no alternate screen, no keys."""
    console = console or Console(width=None if os.isatty(1) else 200)
    console.print(render(snap, target=target))
