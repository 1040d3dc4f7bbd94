"""Outcomes: what a job's result, or its child's exit, becomes, and what the master counts.

The dispatcher (worker/dispatcher.py) says which job ended how; this decides the job's fate
(policy.decide: succeeded, a retry with its backoff, dead; released ones back at once), hands
the completer its ``Completion``, and counts it: the outcomes this master recorded, the run
time per task (the moving average prefetch sizes claims by) and the per-job metrics (through
the tally: worker/tally.py). The tasks' settings come from the children's ready frames.

A child that exits while running jobs: killed for one of them (its hard time limit, or a fence
it did not heed), that one's outcome says why and the others it ran beside (slots) are
released, not failed; a crash is every job's (``worker_lost``, a crash counted); a stop's
kill releases them all; a fenced attempt is not this master's to record.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from typing import Any, Callable

from jobrun.config import Settings
from jobrun.logs import event
from jobrun.policy import (
    DEFAULT_RETRY, RELEASED, SUCCEEDED, TIMEOUT, WORKER_LOST, decide, max_attempts_for,
    max_crashes_for, retry_policies, run_time_average,
)
from jobrun.policy.retry import limit_to_record
from jobrun.worker.child import Child, Inflight
from jobrun.worker.completer import Completion
from jobrun.worker.metrics import Metrics
from jobrun.worker.tally import JobTally

log = logging.getLogger("jobrun.master")


class Outcomes:
    def __init__(self, settings: Settings, metrics: Metrics,
                 submit: Callable[[Completion], None]) -> None:
        self.settings = settings  # (the dispatcher's; replaced on reload)
        self.metrics = metrics
        self.submit = submit  # an outcome to record
        self.tasks: dict[str, dict[str, Any]] = {}  # each task's config (the ready frames)
        self._policies: dict[str, Any] = {}
        self.counts: Counter[str] = Counter()
        # Recent run time per task (seconds, moving average): see policy.prefetch.
        self.runtime: dict[str, float] = {}
        self.tally = JobTally(metrics)
        self.fenced: set[tuple[int, int]] = set()  # added to by the heartbeater thread

    def learn(self, tasks: dict[str, dict[str, Any]]) -> None:
        """Task settings a child reported in its ready frame."""
        self.tasks.update(tasks)
        self._policies = retry_policies(self.tasks)

    def time_limit(self, task: str) -> float:
        return self.tasks.get(task, {}).get("time_limit") or self.settings.time_limit

    def settle(self, job: Inflight, outcome: str, info: dict[str, Any], child_index: int,
               crashed: int = 0) -> None:
        if outcome == SUCCEEDED:  # most of them: nothing to decide, no limit to record
            self.observe(job, outcome, ran=job.dispatched > 0, took=info.get("took"))
            self.submit(Completion(job.id, job.token, SUCCEEDED, SUCCEEDED, 0.0, None, None,
                                   info.get("result"), child_index, 0, info.get("log"), 0,
                                   job.queue, None, job.traceparent))
            return
        cfg = self.tasks.get(job.task, {})
        fate = decide(outcome, attempts=job.attempts,
                      max_attempts=max_attempts_for(job.max_attempts, cfg.get("max_attempts")),
                      crashes=job.crashes, max_crashes=max_crashes_for(cfg),
                      retry_delay=info.get("delay"),
                      policy=self._policies.get(job.task, DEFAULT_RETRY),
                      permanent=bool(info.get("permanent")))
        self.observe(job, outcome, ran=job.dispatched > 0, took=info.get("took"))
        if fate.status == "dead":  # for the dead-jobs alert (etc/prometheus/jobrun-rules.yml)
            self.metrics.dead.labels(job.queue, job.task).inc()
        self.submit(Completion(
            id=job.id, token=job.token, status=fate.status, outcome=outcome, delay=fate.delay,
            error=info.get("error"), traceback=info.get("traceback"), result=info.get("result"),
            child=child_index, crashed=crashed, log=info.get("log"),
            queue=job.queue, traceparent=job.traceparent,
            limit=limit_to_record(job.max_attempts, cfg.get("max_attempts"), outcome, fate.status)))

    def jobs_done(self) -> int:
        """Jobs whose outcome this master recorded (released and given-back ones aside)."""
        return sum(n for k, n in self.counts.items() if k not in (RELEASED, "given_back"))

    def observe(self, job: Inflight, outcome: str, ran: bool, took: Any = None) -> None:
        """Count the outcome; for an attempt that ran, its run time: as the child measured it
        (``took``), else (it died, or was killed) from its hand-over until now. A child may
        send the results of jobs it ran back to back together, so the time between results
        says little about each."""
        self.counts[outcome] += 1
        self.tally.count(job.queue, job.task, outcome)  # (worker/tally.py: once a loop turn)
        if ran:
            if not isinstance(took, (int, float)) or not 0 <= took < math.inf:
                took = time.monotonic() - job.dispatched
            self.tally.duration(job.queue, job.task, took)
            self.runtime[job.task] = run_time_average(self.runtime.get(job.task), took)

    def lost(self, child: Child, lost: list[Inflight], what: str, sigkill: bool) -> None:
        """The outcomes of the jobs ``child`` ran when it exited (``what``: how it exited)."""
        fenced = self.fenced
        culprit = child.kill_job
        if culprit is None:
            culprit = next((j.id for j in lost if (j.id, j.token) in fenced), None)
        reason = child.kill_reason
        if reason == "timeout":
            self.metrics.child_exits.labels("timeout").inc()
        elif reason != "shutdown" and culprit is None:
            self.metrics.child_exits.labels("crash").inc()
        for job in lost:
            key = (job.id, job.token)
            if key in fenced:
                fenced.discard(key)
            elif reason == "shutdown":
                self.settle(job, RELEASED, {"error": "released at shutdown; child stopped"},
                            child.index)
            elif culprit is not None and job.id != culprit:
                why = ("its hard time limit" if reason == "timeout"
                       else "it did not stop when its lease was lost")
                self.settle(job, RELEASED, {"error": f"released: child {what}, killed for job"
                                                     f" {culprit} ({why})"}, child.index)
            elif reason == "timeout":
                limit = self.time_limit(job.task)
                self.settle(job, TIMEOUT, {"error": f"hard time limit of {limit:g}s exceeded;"
                                                    f" child {what}"}, child.index)
            else:
                hint = " (perhaps out of memory)" if sigkill else ""
                event(log, logging.ERROR, "child.lost", child=child.index, pid=child.pid,
                      job=job.id, task=job.task, status=what + hint)
                self.settle(job, WORKER_LOST, {"error": f"child {what}{hint} while running the"
                                                        " job"}, child.index, crashed=1)
