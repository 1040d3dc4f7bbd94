"""Workflows: jobs that wait for other jobs (docs/workflows.md).

A workflow is a list of steps in an order where every parent comes before its dependents,
and its edges (a step waits for an earlier step, or for a job already stored). The shapes
users know build one:

* ``chain(a, b, c)``: each after the one before (a member may be a group: then every job
  that starts the next member waits for every job that ends the group);
* ``group(a, b, c)``: side by side, no edges;
* ``chord(group(a, b), callback)``: the callback after all of them (``chain`` of the two);
* ``graph({"a": step, ...}, after={"b": ["a"]})``: any acyclic graph by names; a cycle is
  refused, naming it.

``flatten`` turns a shape into (steps, edges) and is a pure function, as is ``order`` (a
graph's topological order, or the cycle that prevents one); tests/unit/test_workflow_shapes.py
holds their properties. The operations at the end are written as :mod:`jobrun.ops` writes
them (generators of steps, no I/O) and stored by one call of the SQL function
``enqueue_workflow`` (migration 0019), which checks the order again, so no entry point can
store a cycle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from jobrun import validate
from jobrun.errors import InvalidInput, NotFound
from jobrun.ops import Step as _Query, _job_row
from jobrun.records import Enqueued, EnqueuedWorkflow, JobRecord, WorkflowRecord
from jobrun.sql import Queries

POLICIES = ("cancel", "run")
MAX_STEPS = 100_000
MAX_EDGES = 1_000_000  # a chain of two groups of 1,000 is a million edges already


@dataclass(frozen=True)
class Step:
    """One job of a workflow. ``after``: ids of jobs already stored that it also waits for.
    ``on_parent_failure``: 'cancel' (it is cancelled when a parent ends dead or cancelled) or
    'run' (it runs once every parent has finished, however)."""
    task: str
    payload: Any = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    on_parent_failure: str = "cancel"
    after: tuple[int, ...] = ()


@dataclass(frozen=True)
class Group:
    members: tuple["Node", ...]


@dataclass(frozen=True)
class Chain:
    members: tuple["Node", ...]


@dataclass(frozen=True)
class Graph:
    steps: tuple[Step, ...]
    edges: tuple[tuple[int, int], ...]  # (dependent, parent) positions, parent < dependent


Node = Union[Step, Group, Chain, Graph]


def _node(value: Any) -> Node:
    if isinstance(value, (Step, Group, Chain, Graph)):
        return value
    if isinstance(value, str):
        return Step(value)
    raise InvalidInput(f"a workflow member is a Step, a task name, a chain or a group, not "
                       f"{type(value).__name__}")


def chain(*members: Any) -> Chain:
    return Chain(tuple(_node(m) for m in members))


def group(*members: Any) -> Group:
    return Group(tuple(_node(m) for m in members))


def chord(header: Any, callback: Any) -> Chain:
    """The callback after every member of ``header`` (a group, or an iterable of members)."""
    if not isinstance(header, (Group, Chain, Step, Graph, str)):
        header = group(*header)
    return chain(header, callback)


@dataclass
class Flat:
    """A shape flattened: steps in order, edges (dependent, parent) between positions with
    parent < dependent; heads (steps that wait for nothing inside) and tails (steps nothing
    inside waits for)."""
    steps: list[Step] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    tails: list[int] = field(default_factory=list)


def flatten(node: Node) -> Flat:
    """The steps and edges of a shape (pure)."""
    if isinstance(node, Step):
        return Flat([node], [], [0], [0])
    if isinstance(node, Graph):
        waits = {d for d, _ in node.edges}
        fed = {p for _, p in node.edges}
        n = len(node.steps)
        return Flat(list(node.steps), list(node.edges), [i for i in range(n) if i not in waits],
                    [i for i in range(n) if i not in fed])
    out = Flat()
    previous: list[int] | None = None
    for member in node.members:
        part = flatten(member)
        base = len(out.steps)
        out.steps.extend(part.steps)
        out.edges.extend((d + base, p + base) for d, p in part.edges)
        heads = [h + base for h in part.heads]
        tails = [t + base for t in part.tails]
        if isinstance(node, Chain):
            if previous is not None:
                out.edges.extend((h, t) for h in heads for t in previous)
            else:
                out.heads = heads
            previous = tails
        else:
            out.heads.extend(heads)
            out.tails.extend(tails)
    if isinstance(node, Chain):
        out.tails = previous or []
    return out


def order(names: Sequence[str], after: Mapping[str, Sequence[str]]) -> list[str]:
    """The names in an order where every name comes after those it waits for, keeping the
    given order where it may (Kahn's algorithm); a cycle raises InvalidInput naming it."""
    known = set(names)
    for name, parents in after.items():
        for p in [name, *parents]:
            if p not in known:
                raise InvalidInput(f"unknown step {p!r} in the workflow's dependencies")
    waits = {n: set(after.get(n, ())) for n in names}
    done: list[str] = []
    placed: set[str] = set()
    progress = True
    while progress and len(done) < len(names):
        progress = False
        for n in names:
            if n not in placed and waits[n] <= placed:
                done.append(n)
                placed.add(n)
                progress = True
    if len(done) < len(names):
        raise InvalidInput(f"a cycle: {' -> '.join(_cycle(waits, placed))}")
    return done


def _cycle(waits: Mapping[str, set[str]], placed: set[str]) -> list[str]:
    """A cycle among the names not placed: each waits for one not placed, so walking
    from any of them along such parents repeats a name."""
    start = next(n for n in waits if n not in placed)
    path: list[str] = []
    seen: dict[str, int] = {}
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(p for p in waits[node] if p not in placed)
    loop = path[seen[node]:]
    return [*reversed(loop), loop[-1]]


def graph(steps: Mapping[str, Any], after: Mapping[str, Sequence[str]] | None = None) -> Graph:
    """Any acyclic graph: steps by name, and for each name the names it waits for."""
    names = list(steps)
    ordered = order(names, after or {})
    at = {n: i for i, n in enumerate(ordered)}
    edges = tuple((at[d], at[p]) for d in ordered for p in dict.fromkeys((after or {}).get(d, ())))
    made = []
    for n in ordered:
        step = _node(steps[n])
        if not isinstance(step, Step):
            raise InvalidInput(f"step {n!r} of a graph is one job (a Step or a task name)")
        made.append(step)
    return Graph(tuple(made), edges)


_STEP_KEYS = ("task", "payload", "queue", "priority", "max_attempts", "on_parent_failure",
              "after")


def from_spec(spec: Any, where: str = "workflow") -> Node:
    """A shape from its JSON form (the CLI and POST /api/v1/workflows): a task name; a step
    ``{"task": ..., "payload": ..., "queue", "priority", "max_attempts",
    "on_parent_failure", "after": [job ids]}``; ``{"chain": [...]}``, ``{"group": [...]}``,
    ``{"chord": [...], "then": ...}`` or ``{"graph": {name: step}, "after": {name: [names]}}``.
    A bad spec raises InvalidInput naming where it is."""
    if isinstance(spec, str):
        return Step(spec)
    if not isinstance(spec, Mapping):
        raise InvalidInput(f"{where}: a task name or an object, not {type(spec).__name__}")
    kinds = [k for k in ("chain", "group", "chord", "graph", "task") if k in spec]
    if len(kinds) != 1:
        raise InvalidInput(f"{where}: one of task, chain, group, chord or graph")
    kind = kinds[0]
    allowed = {"task": _STEP_KEYS, "chain": ("chain",), "group": ("group",),
               "chord": ("chord", "then"), "graph": ("graph", "after")}[kind]
    extra = sorted(str(k) for k in spec if k not in allowed)
    if extra:
        raise InvalidInput(f"{where}: unknown field {extra[0]!r} (fields: {', '.join(allowed)})")
    if kind == "task":
        after = spec.get("after") or ()
        if not isinstance(after, (list, tuple)):
            raise InvalidInput(f"{where}: after is a list of job ids")
        return Step(spec["task"], spec.get("payload"), queue=spec.get("queue"),
                    priority=spec.get("priority"), max_attempts=spec.get("max_attempts"),
                    on_parent_failure=spec.get("on_parent_failure") or "cancel",
                    after=tuple(after))
    if kind == "graph":
        steps, after = spec["graph"], spec.get("after") or {}
        if not isinstance(steps, Mapping) or not isinstance(after, Mapping) or not steps:
            raise InvalidInput(f"{where}: graph is an object of steps by name, after an object"
                               " of names by name")
        return graph({str(n): from_spec(v, f"{where}.graph.{n}") for n, v in steps.items()},
                     {str(n): [str(p) for p in v] for n, v in after.items()})
    members = spec[kind]
    if not isinstance(members, list) or not members:
        raise InvalidInput(f"{where}: {kind} is a non-empty list")
    nodes = [from_spec(m, f"{where}.{kind}[{i}]") for i, m in enumerate(members)]
    if kind == "chord":
        if "then" not in spec:
            raise InvalidInput(f"{where}: a chord has a callback (then)")
        return chord(group(*nodes), from_spec(spec["then"], f"{where}.then"))
    return chain(*nodes) if kind == "chain" else group(*nodes)


def shape_name(node: Node) -> str:
    if isinstance(node, Chain):
        if len(node.members) == 2 and isinstance(node.members[0], Group) \
                and isinstance(node.members[1], Step):
            return "chord"
        return "chain"
    return {Group: "group", Graph: "graph", Step: "job"}[type(node)]


# --- operations (jobrun.ops's protocol) ------------------------------------------------------

def _check_step(n: int, step: Step, limit: int) -> tuple:
    try:
        if not isinstance(step, Step):
            raise InvalidInput(f"a Step, not {type(step).__name__}")
        if not isinstance(step.after, (tuple, list)):
            raise InvalidInput(f"after is a list of job ids, not {type(step.after).__name__}")
        if step.on_parent_failure not in POLICIES:
            raise InvalidInput(f"invalid on_parent_failure {step.on_parent_failure!r}: cancel or run")
        return (validate.task_name(step.task), validate.payload(step.payload, limit),
                validate.queue_name(step.queue) if step.queue is not None else None,
                validate.priority(step.priority) if step.priority is not None else None,
                validate.max_attempts(step.max_attempts), step.on_parent_failure,
                [validate.job_id(j, "after") for j in step.after])
    except InvalidInput as exc:
        raise InvalidInput(f"workflow job {n + 1}: {exc}") from None


def enqueue_workflow(q: Queries, limit: int, flow: Any, *, idempotency_key: str | None = None,
                     queue: str = "default", traceparent: str | None = None):
    """Store a whole workflow in one call; returns EnqueuedWorkflow(id, job_ids, created)."""
    node = _node(flow)
    flat = flatten(node)
    if not flat.steps:
        raise InvalidInput("a workflow has at least one job")
    if len(flat.steps) > MAX_STEPS:
        raise InvalidInput(f"a workflow has at most {MAX_STEPS} jobs, not {len(flat.steps)}")
    if len(flat.edges) > MAX_EDGES:
        raise InvalidInput(f"a workflow has at most {MAX_EDGES} dependencies, not"
                           f" {len(flat.edges)}: put one job between two large groups")
    validate.queue_name(queue)
    checked = [_check_step(n, s, limit) for n, s in enumerate(flat.steps)]
    deps, items, jobs = [], [], []
    for d, p in dict.fromkeys(flat.edges):
        deps.append(d + 1), items.append(p + 1), jobs.append(None)
    for n, c in enumerate(checked):
        for job in dict.fromkeys(c[6]):
            deps.append(n + 1), items.append(None), jobs.append(job)
    if limit != validate.DEFAULT_MAX_PAYLOAD_BYTES:
        yield _step(q.set_payload_limit, {"limit": str(limit)})
    rows = yield _step(q.enqueue_workflow, {
        "tasks": [c[0] for c in checked], "payloads": [c[1] for c in checked],
        "queues": [c[2] or queue for c in checked],
        "priorities": [c[3] for c in checked],
        "attempt_limits": [c[4] for c in checked],
        "on_parent_failure": [c[5] for c in checked],
        "edge_dependents": deps, "parent_items": items, "parent_jobs": jobs,
        "idempotency_key": validate.idempotency_key(idempotency_key),
        "shape": shape_name(node), "traceparent": traceparent,
    })
    row = rows[0]
    return EnqueuedWorkflow(row["workflow_id"], list(row["ids"]), row["created"])


def get(q: Queries, workflow_id: int):
    rows = yield _step(q.get_workflow, {"id": validate.job_id(workflow_id, "workflow id")})
    if not rows:
        raise NotFound(f"no workflow {workflow_id}")
    return WorkflowRecord.from_row(rows[0])


def cancel(q: Queries, workflow_id: int):
    """Cancel every member not finished; returns the ids changed (leased ones are asked to
    stop, as a cancel of one job asks)."""
    wid = validate.job_id(workflow_id, "workflow id")
    rows = yield _step(q.cancel_workflow, {"id": wid})
    if not rows:
        found = yield _step(q.workflow_exists, {"id": wid})
        if not found[0]["found"]:
            raise NotFound(f"no workflow {workflow_id}")
    return [r["id"] for r in rows]


def enqueue_after(q: Queries, limit: int, task: str, payload: Any, after: Sequence[int], *,
                  queue: str = "default", priority: int | None = None,
                  max_attempts: int | None = None, on_parent_failure: str = "cancel",
                  idempotency_key: str | None = None, traceparent: str | None = None,
                  payload_is_json: bool = False):
    """One job after stored ones (``enqueue(after=...)``): a workflow of one job, whose
    idempotency key is the workflow's. Returns Enqueued(job, created)."""
    if isinstance(after, (str, bytes)) or not isinstance(after, Sequence) or not after:
        raise InvalidInput("after is a non-empty list of job ids")
    if payload_is_json:
        payload = json.loads(validate.payload_text(payload, limit))
    step = Step(task, payload, queue=queue, priority=priority, max_attempts=max_attempts,
                on_parent_failure=on_parent_failure, after=tuple(after))
    made = yield from enqueue_workflow(q, limit, step, idempotency_key=idempotency_key,
                                       queue=queue, traceparent=traceparent)
    row = yield from _job_row(q, made.job_ids[0])
    return Enqueued(JobRecord.from_row(row), made.created)


def _step(query: str, params: dict[str, Any]) -> _Query:
    return _Query(query, params)
