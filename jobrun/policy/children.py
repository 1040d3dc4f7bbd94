"""Child processes: when to recycle one, how its run times are remembered, and what its
exit means for the master.
"""

from __future__ import annotations

import enum

# Children of the current generation that die before they ever report ready, in a row:
# at this many the master stops (exit code 1) rather than respawn in a loop.
MAX_EARLY_DEATHS = 5


def should_recycle(*, tasks_done: int, max_tasks: int, rss_bytes: int, max_rss_bytes: int,
                   baseline_rss_bytes: int) -> str | None:
    """Why a child should be replaced after a job, or None.

    A child that was already over the memory limit when it became ready is never recycled for
    memory: its replacement would start just as large, and replacing it after every job would
    churn (the master warns once instead).
    """
    if max_tasks and tasks_done >= max_tasks:
        return "max_tasks"
    if max_rss_bytes and rss_bytes > max_rss_bytes and baseline_rss_bytes <= max_rss_bytes:
        return "max_memory"
    return None


def run_time_average(previous: float | None, sample: float) -> float:
    """Recent run time of a task: an exponential moving average (the first sample as is).
    Both the master (what to hand ahead) and a child (which results to hold) keep one."""
    return sample if previous is None else previous + 0.2 * (sample - previous)


class BootFailure(enum.Enum):
    """What a child's "app failed to load" exit means (exit code 3, protocol.EXIT_BOOT_ERROR)."""

    NONE = "none"  # it was ready once: the code is a handler's, the exit a crash
    STOP = "stop"  # no generation ever served: the app cannot load; stop, do not loop
    RELOAD_FAILED = "reload_failed"  # a new generation does not load: keep the old one
    EARLY_DEATH = "early_death"  # a replacement in a serving generation: counts as one


def boot_failure(*, was_ready: bool, booted: bool, newer_than_serving: bool) -> BootFailure:
    """Classify an exit with the boot-error code."""
    if was_ready:
        return BootFailure.NONE
    if not booted:
        return BootFailure.STOP
    if newer_than_serving:
        return BootFailure.RELOAD_FAILED
    return BootFailure.EARLY_DEATH


def start_failing(early_deaths: int) -> bool:
    """Whether children that keep dying before they are ready should stop the master."""
    return early_deaths >= MAX_EARLY_DEATHS
