"""The hand-out: how many rows the next claim asks for, and which child each claimed row goes to.

Around each claim the claimer (worker/claimer.py) asks two things:

    reserve()            -> (takers, limit)   idle children reserved, starting ones to park for;
                                              limit 0: no claim is worth it now
    claim statement      (the claimer's)
    hand_out(takers, rows, claimed) -> rows no child took (the claimer gives them back)

One row goes to each reserved child; a forked child still starting gets one parked (kept in
the master until it is ready); children with free slots (--slots) take rows of tasks that
share a child, up to their free slots (they start at once); the rest go to the busy children
holding fewest that may take more (policy.prefetch: jobs of tasks whose recent runs were
short, up to --prefetch and --prefetch-max-runtime of work), and each child gets its jobs in
one write.

The claim is sized the same way (``_room``), and a busy child that ran on to a job it held
asks again only once enough such results came in to change the decision (``ran_on``).
States move through the children's owner (worker/children.py), jobs start through the
dispatcher (their time limits); this module keeps no state of a child.
"""

from __future__ import annotations

import math
from typing import Any

from jobrun import protocol
from jobrun.config import Settings
from jobrun.policy import prefetch
from jobrun.worker.child import ChildState
from jobrun.worker.children import Children
from jobrun.worker.dispatcher import Dispatcher
from jobrun.worker.child import Child, Inflight

S = ChildState
Batch = dict[Child, list[tuple[Inflight, dict[str, Any], bytes]]]


class HandOut:
    def __init__(self, children: Children, dispatcher: Dispatcher, settings: Settings,
                 owner: str) -> None:
        self.children = children
        self.dispatcher = dispatcher  # starts jobs, parks them, knows run times
        self.settings = settings
        self.owner = owner  # the master's owner id, in every job frame (changed by the master)
        # Results of busy children that ran on to a job they held, since the last decision,
        # and how many of them can change it (policy.prefetch.results_to_reconsider).
        self._ran_on = 0
        self._ran_on_limit = 0

    @property
    def owner(self) -> str:
        return self._owner

    @owner.setter
    def owner(self, owner: str) -> None:
        self._owner = owner
        self._frames = protocol.JobFrames(owner)

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings  # prefetch, its runtime budget, max tasks: read at every claim

    # --- sizing the claim (policy.prefetch) -----------------------------------------------

    def reserve(self) -> tuple[list[Child], int]:
        """The children the next claim is for (idle ones, reserved now, then starting ones a
        job may be parked for) and how many rows it asks for; a limit of 0 when a claim is
        not worth it now (nothing is reserved then)."""
        idle = self.children.idle()
        coming = self.coming()
        extra, most, dry_soon = self._room(idle)
        wanted = len(idle) + len(coming)
        self._ran_on = 0
        self._ran_on_limit = prefetch.results_to_reconsider(wanted, extra, most, dry_soon)
        shared = self._free_slots(idle) if self.settings.slots > 1 else 0
        if self._ran_on_limit and not prefetch.slots_worth_claiming(
                shared, self.settings.slots * self.dispatcher.target):
            return [], 0  # (ran_on_limit is 0 exactly when a claim is worth it now)
        for child in idle:
            self.children.reserve(child)
        return idle + coming, wanted + extra + shared

    def _free_slots(self, idle: list[Child]) -> int:
        """Rows children with slots would start at once beyond the one each idle child takes."""
        return (sum(self._slot_room(c) for c in self.children.busy())
                + sum(max(0, self._slot_room(c) - 1) for c in idle))

    def _slot_room(self, child: Child) -> int:
        """Jobs ``child`` would start at once in its free slots, short of the jobs it may still
        run before --max-tasks-per-child retires it."""
        free = child.free_slots()
        limit = self.settings.max_tasks_per_child
        if not free or not limit:
            return free
        return max(0, min(free, limit - child.jobs_done - child.held()))

    def unreserve(self) -> None:
        """The claim failed (or the claimer stops): every child reserved for it is idle again."""
        for child in self.children.alive():
            if child.state is S.RESERVED:
                self.children.unreserve(child)

    def ran_on(self) -> bool:
        """A busy child finished a job and runs on to one it already held: one slot more is
        free there. Most such results cannot make a claim worth it (the child still holds
        work, and top-ups wait for a quarter of the room there can be); True once enough of
        them came in that one could."""
        self._ran_on += 1
        return self._ran_on >= self._ran_on_limit

    def coming(self) -> list[Child]:
        """Starting children a claim may park a job for (Children.coming). A successor only
        while its predecessor's job is of a task whose recent runs were short, so no job waits
        on a long one."""
        return [c for c in self.children.coming() if self._short_wait(c)]

    def _short_wait(self, child: Child) -> bool:
        before = child.predecessor
        if before is None or before.job is None:
            return True
        took = self.dispatcher.runtime.get(before.job.task)
        return took is not None and took < self.settings.prefetch_max_runtime

    def _cap(self, child: Child) -> int:
        return prefetch.cap(self.settings.prefetch, self.settings.max_tasks_per_child,
                            child.jobs_done)

    def _held_work(self, child: Child) -> float | None:
        """Seconds of work a child holds (running and waiting), None if any may be long."""
        return prefetch.backlog((j.task for j in (child.job, *child.queued) if j is not None),
                                self.dispatcher.runtime, self.settings.prefetch_max_runtime)

    def _headroom(self, child: Child) -> float | None:
        if child.held() >= self._cap(child):
            return None  # (before summing what it holds)
        return self._room_left(child, self._held_work(child), within_budget=True)

    def _room_left(self, child: Child, held: float | None, within_budget: bool) -> float | None:
        """policy.prefetch.headroom for ``child`` holding ``held`` seconds of work; not
        ``within_budget``: short jobs up to its cap, whatever their sum."""
        budget = self.settings.prefetch_max_runtime if within_budget else math.inf
        return prefetch.headroom(child.held(), self._cap(child), held, budget)

    def _room(self, idle: list[Child]) -> tuple[int, int, bool]:
        s = self.settings
        runtime = self.dispatcher.runtime
        most = prefetch.cap(s.prefetch, s.max_tasks_per_child, 0)  # a new child's
        if most <= 1 or not runtime:
            return 0, 0, False
        busy = [(self._cap(c) - c.held(), self._headroom(c), bool(c.queued))
                for c in self.children.busy()]
        return prefetch.room(prefetch=most, budget=s.prefetch_max_runtime, runtime=runtime,
                             idle=[self._cap(c) for c in idle], target=self.dispatcher.target,
                             busy=busy)

    def complete_linger(self, backlogged: bool) -> float:
        """How long the next completion statement waits for its batch (policy.prefetch)."""
        if not backlogged:
            return 0.0
        busy = self.children.busy()
        ahead = bool(busy) and not self.children.idle() and all(c.queued for c in busy)
        return prefetch.complete_linger(True, ahead)

    # --- handing out ----------------------------------------------------------------------

    def hand_out(self, takers: list[Child], rows: list[dict[str, Any]],
                 claimed: float) -> list[dict[str, Any]]:
        """Give claimed rows to children: one to each reserved (idle) child, then the rest to
        the children holding fewest that may take more (idle, or topped up). One write per
        child. Returns the rows no child took, to be given back. ``claimed``: when the claim
        came back (monotonic), the start of its leases."""
        children = self.children
        claimed_any = bool(rows)
        rows = list(rows)
        rows.reverse()
        batches: Batch = {}
        for child in takers:
            if children.parks(child) and child.parked is None and rows:
                self._assign(child, rows.pop(), batches, claimed)  # parked until it is ready
                continue
            if child.state is not S.RESERVED:
                continue  # exited while the claim ran
            if not rows:
                children.unreserve(child)
                continue
            self._assign(child, rows.pop(), batches, claimed)
        if rows and self.settings.slots > 1:
            self._fill_slots(rows, batches, claimed)
        if rows:
            # Children that went idle while the claim ran take rows too, first.
            self._fill(children.idle() + children.busy(), rows, batches, claimed,
                       within_budget=True)
        if rows:
            # Run times measured while the claim ran may have grown past the room it was
            # sized for: rather than give rows back (a statement, and a claim again), let
            # children holding only short jobs take them, up to --prefetch.
            self._fill(children.busy(), rows, batches, claimed, within_budget=False)
        orphans = rows[::-1]
        for child, sent in batches.items():
            if child.send(b"".join(frame for _, _, frame in sent)):
                continue
            # Its socket is broken: take back what it never got, and replace it.
            for job, row, _ in sent:
                self.dispatcher.take_back(child, job)
                orphans.append(row)
            self.dispatcher.replace_unwritable(child, len(sent))
        if claimed_any:
            self.dispatcher.changed()  # children took jobs: re-render the title, look again
        return orphans

    def _fill_slots(self, rows: list[dict[str, Any]], batches: Batch, claimed: float) -> None:
        """Rows of tasks that share a child go to children with free slots, where they start at
        once, the emptiest children first; rows of other tasks stay (for an idle child, or
        ahead in one)."""
        shares = self._shares
        free = {c: n for c in self.children.idle() + self.children.busy()
                if (n := self._slot_room(c)) > 0}
        if not free:
            return
        kept = []
        while rows and free:
            row = rows.pop()
            if not shares(row["task"]):
                kept.append(row)
                continue
            child = max(free, key=free.__getitem__)
            self._assign(child, row, batches, claimed)
            free[child] -= 1
            if free[child] == 0:
                del free[child]
        rows.extend(reversed(kept))

    def _shares(self, task: str) -> bool:
        return bool(self.dispatcher.tasks.get(task, {}).get("slots"))

    def _fill(self, takers: list[Child], rows: list[dict[str, Any]], batches: Batch,
              claimed: float, within_budget: bool) -> None:
        """Hand rows (popped from the end) to the takers holding fewest, while they can take:
        below their cap, holding only short jobs and, if ``within_budget``, less work than
        --prefetch-max-runtime (policy.prefetch.headroom). Each taker's held work is summed
        once and then kept up as rows are assigned (not summed again over everything it holds
        for every row): this runs for every job handed ahead."""
        runtime = self.dispatcher.runtime
        limit = self.settings.prefetch_max_runtime  # a longer task is never handed ahead
        budget = limit if within_budget else math.inf
        room: dict[Child, list] = {}  # child -> [jobs held, cap, seconds of work held]
        for child in takers:
            work, held, cap = self._held_work(child), child.held(), self._cap(child)
            if prefetch.headroom(held, cap, work, budget) is not None:
                room[child] = [held, cap, work]
        while rows and room:
            child = min(room, key=lambda c: room[c][0])
            row = rows.pop()
            self._assign(child, row, batches, claimed)
            took = runtime.get(row["task"])
            entry = room[child]
            if took is None or took >= limit:
                del room[child]  # it now holds a job that may be long
                continue
            entry[0] += 1
            entry[2] += took
            if entry[0] >= entry[1] or entry[2] >= budget:
                del room[child]

    def _assign(self, child: Child, row: dict[str, Any], batches: Batch, claimed: float) -> None:
        job = Inflight(id=row["id"], token=row["lease_token"], task=row["task"], queue=row["queue"],
                       attempts=row["attempts"], max_attempts=row["max_attempts"],
                       crashes=row["crashes"], created_at=row["created_at"], claimed=claimed,
                       traceparent=row["traceparent"],
                       shares=child.slots > 1 and self._shares(row["task"]))
        frame = self._frames.frame(
            id=job.id, token=job.token, task=job.task, queue=job.queue, attempt=job.attempts,
            max_attempts=job.max_attempts, priority=row["priority"], created_at=job.created_at,
            key=row["idempotency_key"], traceparent=row["traceparent"],
            payload_text=row["payload"])
        if self.children.parks(child):
            self.dispatcher.park(child, job, frame)
            return
        if not child.queued and child.can_start(job):
            self.dispatcher.start_job(child, job)
        else:
            child.queued.append(job)
        batches.setdefault(child, []).append((job, row, frame))
