"""The teardown's stages, driven through the narrow ``Crew`` it is given (no master): each part
stops in the stage its entry names, the last started first, and each stage logs its line."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun.worker import teardown
from jobrun.worker.lifecycle import Entry, Parts
from tests.profiles import examples


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def start(self) -> None:
        self.log.append("start " + self.name)

    def reconfigure(self, settings) -> None:
        self.log.append("reconfigure " + self.name)

    async def stop(self, timeout=None) -> None:
        self.log.append(f"stop {self.name}")


class Pool:
    """The dispatcher of a master with nothing running."""

    closing = False
    outcomes = Counter(succeeded=3, released=1)

    def running(self) -> int:
        return 0


class Quiet:
    """The children, the claimer and the completer of a master with nothing running."""

    claimed = 4
    pending: list = []
    running = True

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def alive(self) -> list:
        return []

    def kill(self, child, reason) -> None:  # pragma: no cover - no child is alive
        raise AssertionError("nothing to kill")

    def stop(self, child) -> None:  # pragma: no cover
        raise AssertionError("nothing to stop")

    async def given_back(self, timeout: float) -> None:
        self.log.append("given back")

    async def close(self) -> None:
        self.log.append("claimer closed")

    async def drain(self, timeout: float) -> bool:
        self.log.append("flushed")
        return True


def crew(log: list[str]) -> teardown.Crew:
    entries = [("forkservers", "first", teardown.LAST), ("dispatcher", "boot", teardown.SERVICES),
               ("completer", "serve", teardown.SERVICES), ("notifier", "serve", teardown.CLAIMS),
               ("scheduler", "serve", teardown.CLAIMS), ("reaper", "serve", teardown.SERVICES),
               ("heartbeater", "serve", teardown.LEASES), ("claimer", "serve", teardown.CLAIMS),
               ("watchdog", "serve", teardown.LAST)]
    parts = Parts([Entry(Recorder(n, log), s, t) for n, s, t in entries], on_crash=print)
    quiet = Quiet(log)
    return teardown.Crew(parts=parts, pool=Pool(), children=quiet, claimer=quiet, completer=quiet,
                         changed=asyncio.Event(), fast=asyncio.Event(), grace=lambda: 30.0,
                         exit_code=lambda: 0)


def test_parts_start_by_phase_and_reload_all():
    log: list[str] = []
    c = crew(log)
    for phase in Parts.PHASES:
        c.parts.start(phase)
    c.parts.reconfigure(object())
    names = ["forkservers", "dispatcher", "completer", "notifier", "scheduler", "reaper",
             "heartbeater", "claimer", "watchdog"]
    assert log == [f"start {n}" for n in names] + [f"reconfigure {n}" for n in names]


def test_each_stage_stops_its_parts_last_started_first(caplog):
    log: list[str] = []
    with caplog.at_level(logging.INFO, logger="jobrun.master"):
        asyncio.run(teardown.run(crew(log)))
    assert log == ["stop claimer", "stop scheduler", "stop notifier",  # 1: stop claiming
                   "given back",  # 3: release what is left
                   "stop heartbeater", "flushed",  # 4: flush completions
                   "stop reaper", "stop completer", "stop dispatcher",  # 5: the services
                   "stop watchdog", "stop forkservers", "claimer closed"]  # 6: close
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(":")[0] for line in lines[:-1]] == [f"teardown {n}/6" for n in range(1, 7)]
    assert lines[-1] == "master.stopped"
    assert caplog.records[-1].jobrun_fields["succeeded"] == 3


@settings(max_examples=examples(80), deadline=None)
@given(plan=st.lists(st.tuples(st.sampled_from(Parts.PHASES), st.integers(1, 6)), max_size=12))
def test_any_list_starts_in_order_and_stops_each_stage_in_reverse(plan):
    """Whatever the list: every part starts once, phase by phase in list order, takes new
    settings once, and stops once, stage by stage, the later-listed first within a stage."""
    log: list[str] = []
    parts = Parts([Entry(Recorder(str(i), log), phase, stage)
                   for i, (phase, stage) in enumerate(plan)], on_crash=print)

    async def walk():
        for phase in Parts.PHASES:
            parts.start(phase)
        parts.reconfigure(object())
        for stage in range(1, 7):
            await parts.stop(stage)
    asyncio.run(walk())
    order = sorted(range(len(plan)), key=lambda i: (Parts.PHASES.index(plan[i][0]), i))
    stops = sorted(range(len(plan)), key=lambda i: (plan[i][1], -i))
    assert log == ([f"start {i}" for i in order] + [f"reconfigure {i}" for i in range(len(plan))]
                   + [f"stop {i}" for i in stops])
