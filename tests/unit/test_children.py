"""The owner of the children's states (worker/children.py): its table of moves, move by move,
and random sequences of moves on a pool of children, no process started."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun.worker.child import ChildState
from jobrun.worker.children import MOVES, Children, IllegalMove
from jobrun.worker.forkserver import ForkedProcess
from jobrun.worker.child import Child, Inflight
from tests.profiles import examples

S = ChildState
ALIVE = [s for s in S if s is not S.EXITED]
# The table as the module's docstring draws it, written out again: a change to MOVES must be
# a change to this too.
EXPECTED = {
    "ready": {S.STARTING: S.IDLE},
    "stand_by": {S.STARTING: S.STANDBY},
    "take_over": {S.STANDBY: S.IDLE},
    "reserve": {S.IDLE: S.RESERVED},
    "unreserve": {S.RESERVED: S.IDLE},
    "start": {S.STARTING: S.BUSY, S.STANDBY: S.BUSY, S.IDLE: S.BUSY, S.RESERVED: S.BUSY,
              S.BUSY: S.BUSY, S.RETIRING: S.RETIRING},
    "free": {S.BUSY: S.IDLE},
    "retire": {s: S.RETIRING for s in ALIVE},
    "exited": {s: S.EXITED for s in ALIVE},
}
_ids = itertools.count(1)


def job() -> Inflight:
    return Inflight(id=next(_ids), token=1, task="t", queue="default", attempts=1,
                    max_attempts=3, crashes=0, created_at=0.0, claimed=0.0)


def spawned(children: Children, index: int = 1, generation: int = 0) -> Child:
    child = Child(index=index, generation=generation, process=ForkedProcess(), sock=None,
                  pidfd=-1)
    children.add(child)
    return child


# How to bring a fresh child to each state, by legal moves only.
PATHS = {
    S.STARTING: [],
    S.STANDBY: ["stand_by"],
    S.IDLE: ["ready"],
    S.RESERVED: ["ready", "reserve"],
    S.BUSY: ["ready", "start"],
    S.RETIRING: ["retire"],
    S.EXITED: ["exited"],
}


def apply(children: Children, child: Child, move: str) -> None:
    """Make ``move``; ``start`` with a fresh job, and after ending the one the child runs (one
    job at a time), ``free`` once the job it runs ended."""
    if move == "start":
        if child.job is not None:
            children.end(child, child.job)
        children.start(child, job())
        return
    if move == "free" and child.job is not None:
        children.end(child, child.job)
    getattr(children, move)(child)


def in_state(children: Children, state: ChildState) -> Child:
    child = spawned(children)
    for move in PATHS[state]:
        apply(children, child, move)
    assert child.state is state
    return child


def test_the_table_is_the_one_drawn():
    assert MOVES == EXPECTED


@pytest.mark.parametrize("move", sorted(EXPECTED))
@pytest.mark.parametrize("state", list(S), ids=lambda s: s.name)
def test_every_allowed_move_works_and_every_other_is_refused(move, state):
    children = Children()
    child = in_state(children, state)
    to = EXPECTED[move].get(state)
    if to is None:
        with pytest.raises(IllegalMove, match=f"is {state.name}: {move} refused"):
            apply(children, child, move)
        assert child.state is state  # a refused move changes nothing
    else:
        apply(children, child, move)
        assert child.state is to
    assert (child in children.alive()) == (child.state is not S.EXITED)


def test_one_job_at_a_time_and_only_its_own_job_ends():
    children = Children()
    child = in_state(children, S.IDLE)
    running = job()
    children.start(child, running)
    assert child.job is running
    with pytest.raises(IllegalMove, match=f"it runs job {running.id}"):
        children.start(child, job())
    other = job()
    with pytest.raises(IllegalMove, match=f"it does not run job {other.id}"):
        children.end(child, other)
    with pytest.raises(IllegalMove, match="it holds 1 jobs"):
        children.free(child)  # its job has not ended
    children.end(child, running)
    child.queued.append(job())  # one waits in its socket
    with pytest.raises(IllegalMove, match="it holds 1 jobs"):
        children.free(child)
    assert child.state is S.BUSY and child.job is None


def test_only_a_fresh_child_joins_and_the_state_is_read_only():
    children = Children()
    child = in_state(children, S.IDLE)
    with pytest.raises(IllegalMove, match="only a child just spawned joins"):
        children.add(child)
    with pytest.raises(AttributeError):
        child.state = S.BUSY
    assert child.state is S.IDLE


def test_no_module_but_the_owner_writes_a_state():
    root = Path(__file__).resolve().parents[2] / "jobrun"
    writes = [f"{path.relative_to(root)}:{n}" for path in root.rglob("*.py")
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.search(r"\._?state\s*=\s*(S|ChildState)\.", line)
              and path.name != "children.py"]
    assert writes == []


def test_the_views_filter_by_generation_and_closing():
    children = Children()
    old = in_state(children, S.IDLE)
    new = spawned(children, 2, generation=1)
    children.generation = 1
    assert children.idle() == [old] and children.current() == [new]
    assert children.coming() == []  # the new generation does not serve yet
    children.serving = 1
    assert children.idle() == [] and children.coming() == [new]
    assert children.takes_jobs() is False  # the new child starts; the old one serves no more
    children.closing = True
    assert children.coming() == []


def test_a_forked_child_on_its_last_job_is_finishing_and_not_current():
    children = Children()
    children.max_tasks = 2
    child = in_state(children, S.IDLE)
    child.jobs_done = 1
    children.start(child, job())
    assert children.finishing(child) and children.current() == []
    children.max_tasks = 0
    assert not children.finishing(child) and children.current() == [child]


MOVE_NAMES = sorted(EXPECTED) + ["end"]
steps = st.lists(st.one_of(st.just(("spawn", 0)),
                           st.tuples(st.sampled_from(MOVE_NAMES), st.integers(0, 7))),
                 max_size=60)


@settings(max_examples=examples(200), deadline=None)
@given(steps=steps)
def test_random_moves_keep_the_table_and_the_views_add_up(steps):
    """Any sequence of moves, legal or not: each child's state is the one the table gives (a
    refused move changes nothing), and the views agree with each other and with the states."""
    children = Children()
    pool: list[Child] = []
    for move, which in steps:
        if move == "spawn":
            pool.append(spawned(children, len(pool) + 1))
            continue
        if not pool:
            continue
        child = pool[which % len(pool)]
        before, running = child.state, child.job
        if move == "end":
            ended = running or job()
            if running is None:
                with pytest.raises(IllegalMove):
                    children.end(child, ended)
            else:
                children.end(child, ended)
            assert child.state is before
        elif move == "start":
            to = EXPECTED["start"].get(before)
            if to is None or running is not None:
                with pytest.raises(IllegalMove):
                    children.start(child, job())
                assert child.state is before and child.job is running
            else:
                started = job()
                children.start(child, started)
                assert child.state is to and child.job is started
        else:
            to = EXPECTED[move].get(before)
            if move == "free" and (running is not None or child.queued):
                to = None
            if to is None:
                with pytest.raises(IllegalMove):
                    getattr(children, move)(child)
                assert child.state is before
            else:
                getattr(children, move)(child)
                assert child.state is to
        alive = children.alive()
        assert alive == [c for c in pool if c.state is not S.EXITED]  # in spawn order
        states = children.count_states()
        assert sum(states.values()) == len(alive)
        assert children.running() == sum(c.job is not None for c in alive)
        assert states.get("busy", 0) == sum(c.job is not None or c.state is S.BUSY for c in alive)
        for state in ALIVE:
            if state is not S.BUSY:
                assert states.get(state.value, 0) == sum(
                    c.state is state and c.job is None for c in alive)
        assert all(c.state in (S.BUSY, S.RETIRING) for c in alive if c.job is not None)
        assert children.idle() == [c for c in alive if c.state is S.IDLE]
        assert children.busy() == [c for c in alive if c.state is S.BUSY]
        assert children.current() == [c for c in alive if c.state is not S.RETIRING]
        assert children.coming() == [c for c in alive if c.state in (S.STARTING, S.STANDBY)]
        assert children.takes_jobs() == (children.running() > 0 or any(
            c.state in (S.IDLE, S.RESERVED) for c in alive))
        assert list(children.holding()) == [c.job for c in alive if c.job is not None]
