"""The master's children and their states: the one owner of both.

A child's state changes only through a named move of ``Children``; a move the table below
does not allow raises ``IllegalMove`` (a bug in the master, never an operator's error).
``Child.state`` is read-only: ``Children._move`` is its one write. Who moves what:

- the supervisor (processes): ``add`` at spawn, ``retire`` when it asks a child to stop,
  ``exited`` once the exit was handled;
- the dispatcher (outcomes, generations, successors): ``ready``, ``stand_by``,
  ``take_over``, ``start``/``end`` of a job, ``free``, ``retire``;
- the hand-out (worker/handout.py): ``reserve``/``unreserve`` around a claim, ``start``.

::

    spawn ─> STARTING ─ready─> IDLE ─reserve─> RESERVED ─start─> BUSY ─free─> IDLE
                 └─stand_by─> STANDBY ─take_over─> IDLE
    a job parked for a STARTING or STANDBY child, one handed to an IDLE child (it went idle
    while a claim ran), the next one a BUSY child held:  ─start─> BUSY
    any but EXITED ─retire─> RETIRING ─start─> RETIRING (runs what it holds, then exits)
    any but EXITED ─exited─> EXITED

    move        from                                          to
    ready       STARTING                                      IDLE      it reported ready
    stand_by    STARTING                                      STANDBY   ready, its predecessor
                                                                        runs its last job
    take_over   STANDBY                                       IDLE      that job ended
    reserve     IDLE                                          RESERVED  a claim runs for it
    unreserve   RESERVED                                      IDLE      the claim brought none
    start       STARTING STANDBY IDLE RESERVED BUSY           BUSY      it runs a job
    start       RETIRING                                      RETIRING  (when Child.can_start)
    free        BUSY (holding no job)                         IDLE      it ran all it held
    retire      every state but EXITED                        RETIRING
    exited      every state but EXITED                        EXITED

``start`` and ``end`` take the job: a child runs the jobs in ``Child.running`` (one, unless it
has slots: then as many as ``Child.can_start`` lets start, the child's own rule), jobs it was
handed ahead wait in its socket (``Child.queued``), and BUSY means it runs at least one (a child
with slots may have free ones: ``Child.free_slots``).

The views (``idle()``, ``busy()``, ``current()`` ...) filter by the generation numbers the
dispatcher sets here (``generation``: the newest, ``serving``: the one whose children take
jobs) and by ``closing`` (the master stops: no child is handed a job ahead).
"""

from __future__ import annotations

from typing import Iterator

from jobrun.worker.child import Child, ChildState, Inflight


S = ChildState
_ALIVE = [s for s in ChildState if s is not S.EXITED]

# move -> {from: to}: the table of the module's docstring, and the only one.
MOVES: dict[str, dict[ChildState, ChildState]] = {
    "ready": {S.STARTING: S.IDLE},
    "stand_by": {S.STARTING: S.STANDBY},
    "take_over": {S.STANDBY: S.IDLE},
    "reserve": {S.IDLE: S.RESERVED},
    "unreserve": {S.RESERVED: S.IDLE},
    "start": {S.STARTING: S.BUSY, S.STANDBY: S.BUSY, S.IDLE: S.BUSY, S.RESERVED: S.BUSY,
              S.BUSY: S.BUSY, S.RETIRING: S.RETIRING},
    "free": {S.BUSY: S.IDLE},
    "retire": {s: S.RETIRING for s in _ALIVE},
    "exited": {s: S.EXITED for s in _ALIVE},
}
_START = MOVES["start"]  # the hot path's move: looked up once


class IllegalMove(RuntimeError):
    """A move the table does not allow from the child's state (or a job it does not run)."""

    def __init__(self, move: str, child: "Child", why: str | None = None) -> None:
        if why is None:
            why = "allowed only from " + ", ".join(s.name for s in MOVES[move])
        super().__init__(f"child {child.index} (generation {child.generation}) is"
                         f" {child.state.name}: {move} refused, {why}")
        self.move = move
        self.state = child.state


class Children:
    """The alive children (in spawn order), their states, and the views of them."""

    def __init__(self) -> None:
        self._alive: dict[Child, Child] = {}
        self.generation = 0  # the newest generation (children spawn in it)
        self.serving = 0  # the generation whose children take jobs
        self.closing = False  # the master is stopping: no job is handed ahead
        self.max_tasks = 0  # --max-tasks-per-child (0: no limit)

    # --- the supervisor's register --------------------------------------------------------

    def add(self, child: "Child") -> None:
        """A child just spawned (STARTING): alive from now on."""
        if child.state is not S.STARTING:
            raise IllegalMove("add", child, "only a child just spawned joins")
        self._alive[child] = child

    def discard(self, child: "Child") -> None:
        """A child's exit is being handled: it is no longer alive (``exited`` follows)."""
        self._alive.pop(child, None)

    # --- moves ----------------------------------------------------------------------------

    def _move(self, child: "Child", move: str) -> None:
        to = MOVES[move].get(child._state)
        if to is None:
            raise IllegalMove(move, child)
        child._state = to

    def ready(self, child: "Child") -> None:
        self._move(child, "ready")

    def stand_by(self, child: "Child") -> None:
        self._move(child, "stand_by")

    def take_over(self, child: "Child") -> None:
        self._move(child, "take_over")

    def reserve(self, child: "Child") -> None:
        self._move(child, "reserve")

    def unreserve(self, child: "Child") -> None:
        self._move(child, "unreserve")

    def start(self, child: "Child", job: "Inflight") -> None:
        """``job`` is the one ``child`` runs from now on."""
        to = _START.get(child._state)
        if to is None:
            raise IllegalMove("start", child)
        if not child.can_start(job):
            raise IllegalMove("start", child, f"it runs job {child.job.id}" if child.slots == 1
                              else f"it runs {len(child.running)} jobs in {child.slots} slots")
        child.running[job.id] = job
        child._state = to

    def end(self, child: "Child", job: "Inflight") -> None:
        """``job`` no longer runs in ``child`` (its result came, or the child exited): the state
        stays until the next move says what the child does now."""
        if child.running.get(job.id) is not job:
            raise IllegalMove("end", child, f"it does not run job {job.id}")
        del child.running[job.id]

    def free(self, child: "Child") -> None:
        """``child`` ran all it held: it takes jobs again."""
        if child.running or child.queued:
            raise IllegalMove("free", child, f"it holds {child.held()} jobs")
        self._move(child, "free")

    def retire(self, child: "Child") -> None:
        self._move(child, "retire")

    def exited(self, child: "Child") -> None:
        self._alive.pop(child, None)
        self._move(child, "exited")

    # --- views ----------------------------------------------------------------------------

    def alive(self) -> list["Child"]:
        """Every child not yet reaped, in spawn order (a snapshot: safe from any thread)."""
        return list(self._alive.values())

    def current(self) -> list["Child"]:
        """Children of the newest generation that are not on their way out (nor holding their
        last job: their successors count instead)."""
        return [c for c in self._alive.values()
                if c.generation == self.generation and c._state is not S.RETIRING
                and not self.finishing(c)]

    def finishing(self, child: "Child") -> bool:
        """A forked child that holds the last job --max-tasks-per-child lets it run. Its
        successor is forked at once and waits, ready (STANDBY), for that job's result: the
        slot is never empty for a child's start, and never runs two jobs at once."""
        limit = self.max_tasks
        return (bool(limit) and child.forked and child._state is S.BUSY
                and child.jobs_done + child.held() >= limit)

    def idle(self) -> list["Child"]:
        """Children of the serving generation that run nothing and have no claim running."""
        return [c for c in self._alive.values()
                if c._state is S.IDLE and c.generation == self.serving]

    def busy(self) -> list["Child"]:
        """Children of the serving generation that run a job."""
        return [c for c in self._alive.values()
                if c._state is S.BUSY and c.generation == self.serving]

    def coming(self) -> list["Child"]:
        """Forked children of the serving generation still starting (or standing by), none
        with a job parked: a claim may park one job for each, so that a fresh child starts its
        first job the moment it is ready, not a claim round trip later. Not exec'd ones: they
        take an import, not milliseconds, to start."""
        if self.closing:
            return []
        return [c for c in self._alive.values()
                if c._state in (S.STARTING, S.STANDBY) and c.parked is None and c.forked
                and c.generation == self.serving and c.kill_reason is None]

    @staticmethod
    def parks(child: "Child") -> bool:
        """Whether a job handed to ``child`` now is parked (kept in the master) until it may
        start: it is starting, or standing by for the child it replaces."""
        return child._state in (S.STARTING, S.STANDBY)

    def running(self) -> int:
        """How many children run a job (any generation)."""
        return sum(1 for c in self._alive.values() if c.running)

    def slots(self) -> tuple[int, int]:
        """Jobs running in the alive children, and the slots of those of the serving
        generation: the jobrun_slots gauges, /metrics and the registry."""
        busy = total = 0
        for c in self._alive.values():
            busy += len(c.running)
            if c.generation == self.serving and c._state is not S.RETIRING:
                total += c.slots
        return busy, total

    def takes_jobs(self) -> bool:
        """A child of the serving generation is idle, or reserved for a claim in flight (idle
        but for that statement), or a child runs a job: what /readyz reports."""
        return self.running() > 0 or any(
            c._state in (S.IDLE, S.RESERVED) and c.generation == self.serving
            for c in self._alive.values())

    def count_states(self) -> dict[str, int]:
        """Alive children by state, a child that runs a job counted as busy (a retiring one
        too): the jobrun_children gauge and the process title."""
        states: dict[str, int] = {}
        for child in self._alive.values():
            state = "busy" if child.running else child._state.value
            states[state] = states.get(state, 0) + 1
        return states

    def holding(self) -> Iterator["Inflight"]:
        """Every job the alive children hold: parked for one, running, or waiting in a socket."""
        for child in self.alive():
            yield from child.holding()
