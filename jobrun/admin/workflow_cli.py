"""``jobrun workflow ...``: enqueue a workflow from its JSON form, show one as a tree with
each member's status, cancel every member not finished (docs/workflows.md).

Same conventions as the rest of the CLI (jobrun/admin/cli.py): a bad value is one
``jobrun: error: ...`` line with exit code 1 that changes nothing; ``--json`` prints JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from jobrun import workflows
from jobrun.admin.options import AsJson, Dsn, Schema, session
from jobrun.admin.output import emit
from jobrun.errors import InvalidInput
from jobrun.records import WorkflowRecord

workflow_app = typer.Typer(help="Enqueue, show and cancel workflows (jobs that wait for others).",
                           no_args_is_help=True)

WorkflowId = Annotated[int, typer.Argument(metavar="ID", help="Workflow id.", show_default=False)]


@workflow_app.command("enqueue")
def enqueue(ctx: typer.Context,
            spec: Annotated[str, typer.Argument(
                metavar="SPEC_JSON", show_default=False,
                help='The shape: {"chain": [...]}, {"group": [...]}, {"chord": [...], "then": '
                     '...}, {"graph": {...}, "after": {...}}, a step {"task": ..., "payload": '
                     '...} or a task name; \'-\' reads it from stdin.')],
            queue: Annotated[str, typer.Option(
                "--queue", "-q", help="Queue of the steps that name none.")] = "default",
            key: Annotated[Optional[str], typer.Option(
                "--key", help="Idempotency key of the whole workflow.", show_default=False)] = None,
            dsn: Dsn = None, schema: Schema = None, as_json: AsJson = False) -> None:
    """Enqueue a workflow atomically; prints its id, its jobs' ids and "created"."""
    s = session(ctx, dsn, schema, as_json)
    text = sys.stdin.read() if spec == "-" else spec
    try:
        shape = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput(f"the workflow is not valid JSON: {str(exc).splitlines()[0]}") from None
    made = s.client().enqueue_workflow(workflows.from_spec(shape), idempotency_key=key,
                                       queue=queue)
    emit({"id": made.id, "job_ids": made.job_ids, "created": made.created})


@workflow_app.command("get")
def get(ctx: typer.Context, workflow_id: WorkflowId, dsn: Dsn = None, schema: Schema = None,
        as_json: AsJson = False) -> None:
    """Show a workflow: each member with its status, under the members it waits for."""
    s = session(ctx, dsn, schema, as_json)
    flow = s.client().workflow(workflow_id)
    if s.as_json:
        emit({**flow.to_dict(), "status": flow.status})
        return
    typer.echo(f"workflow {flow.id} ({flow.shape}): {flow.status}")
    for line in tree_lines(flow):
        typer.echo(line)


@workflow_app.command("cancel")
def cancel(ctx: typer.Context, workflow_id: WorkflowId, dsn: Dsn = None, schema: Schema = None,
           as_json: AsJson = False) -> None:
    """Cancel every member not finished (a running one is asked to stop)."""
    s = session(ctx, dsn, schema, as_json)
    changed = s.client().cancel_workflow(workflow_id)
    emit({"id": workflow_id, "cancelled": changed})


def tree_lines(flow: WorkflowRecord) -> list[str]:
    """The members as a tree: each under its first parent in the workflow, indented, with
    its other parents named (``also after``)."""
    members = {j["id"]: j for j in flow.jobs}
    children: dict[int | None, list[int]] = {}
    for j in flow.jobs:
        inside = [p for p in j["after"] if p in members]
        children.setdefault(inside[0] if inside else None, []).append(j["id"])
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for job_id in children.get(parent, []):
            j = members[job_id]
            others = [p for p in j["after"] if p != parent]
            extra = f"  (also after {', '.join(map(str, others))})" if others else ""
            reason = f"  - {j['cancel_reason']}" if j.get("cancel_reason") else ""
            lines.append(f"{'  ' * depth}{job_id} {j['task']} [{j['status']}]{extra}{reason}")
            walk(job_id, depth + 1)

    walk(None, 0)
    return lines
