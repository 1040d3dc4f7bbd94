"""/api/v1/workflows: enqueue a workflow atomically, read it with its members' statuses,
cancel every member not finished (docs/workflows.md)."""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Header, Path, Request

from jobrun import tracing, workflows
from jobrun.web.envelope import ApiError, responses
from jobrun.web.models import IDEMPOTENCY_RULE, NewWorkflow, given
from jobrun.web.routes_jobs import READ, WRITE, TraceParent, db, reply

router = APIRouter(prefix="/api/v1")
WorkflowId = Annotated[int, Path(ge=1, le=2**63 - 1, description="Workflow id")]


@router.post("/workflows", status_code=201,
             responses={200: {"description": "idempotent replay: the stored workflow"},
                        **responses(*WRITE, "conflict", "not_found")})
async def enqueue_workflow(request: Request, body: NewWorkflow,
                           idempotency_key: Annotated[Optional[str], Header(
                               alias="Idempotency-Key", **given(IDEMPOTENCY_RULE))] = None,
                           traceparent: TraceParent = None):
    """Enqueue a workflow's jobs and dependencies in one transaction: {"id", "job_ids",
    "created"}, the ids in the order of the flattened shape. 201 when created; 200 when the
    idempotency key names a stored workflow with the same definition; 409 when another; 404
    when a step waits for a job that does not exist; 422 for a cycle or a bad step."""
    key = body.idempotency_key
    if idempotency_key is not None:
        if key is not None and key != idempotency_key:
            raise ApiError("validation_failed", "the Idempotency-Key header and the body's"
                           " idempotency_key disagree", {"idempotency_key": "differs from header"})
        key = idempotency_key
    d = db(request)
    made = await d.run(workflows.enqueue_workflow(
        d.q, d.limit, workflows.from_spec(body.workflow), idempotency_key=key, queue=body.queue,
        traceparent=tracing.valid_traceparent(traceparent)))
    return reply({"id": made.id, "job_ids": made.job_ids, "created": made.created},
                 201 if made.created else 200)


@router.get("/workflows/{workflow_id:int}", responses=responses(*READ, "not_found"))
async def get_workflow(request: Request, workflow_id: WorkflowId):
    """A workflow: {"id", "shape", "status" (running, succeeded or failed), "created_at",
    "idempotency_key", "jobs": [{"id", "task", "queue", "status", "attempts",
    "cancel_reason", "finished_at", "after": [parent ids]}]} in id order."""
    flow = await db(request).run(workflows.get(db(request).q, workflow_id))
    return reply({**flow.to_dict(), "status": flow.status})


@router.post("/workflows/{workflow_id:int}/cancel", responses=responses(*WRITE, "not_found"))
async def cancel_workflow(request: Request, workflow_id: WorkflowId):
    """Cancel every member not finished (a leased one is asked to stop): {"id",
    "cancelled": [ids changed]}."""
    changed = await db(request).run(workflows.cancel(db(request).q, workflow_id))
    return reply({"id": workflow_id, "cancelled": changed})
