"""The OpenAPI document is a contract the server keeps: Schemathesis generates requests from
/api/v1/openapi.json and sends them to a real `jobrun web` (with a token). A 5xx, a response
the document does not describe (status, body, Allow header), or a request the document allows
that the server refuses, fails the test.

Requests the document forbids are sent too (for the 5xx and the envelope), but a server that
accepts one is no failure: where the server takes more than JSON Schema can bound (duration
text, croniter's whole grammar) the document offers the subset that always passes.

Bounded and repeatable: 25 examples per operation under CI's profile (tests/profiles.py), from a
fixed seed, about 20 s on two cores.
A failure prints the request as a curl command to reproduce it. Why Schemathesis rather than
hand-built strategies: it reads the document as a client generator would (every parameter
location, anyOf, patterns, formats), checks each response against it, and grows with the API
without a line more here.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings

from jobrun import config
from jobrun.web.app import create_app
from tests.profiles import examples
from tests.webproc import WebProcess, web_env, web_schema  # noqa: F401

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (pip install -e '.[test]')")
from schemathesis.specs.openapi.checks import negative_data_rejection  # noqa: E402

TOKEN = "contract-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# The document as the server serves it (the app builds it without a database).
DOC = create_app(config.Settings(database_url="postgresql://unused@/x")).openapi()
schema = schemathesis.openapi.from_dict(DOC)


@pytest.fixture(scope="module")
def server(pg_dsn, web_schema, tmp_path_factory):
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN)
    path.chmod(0o600)
    with WebProcess(web_env(pg_dsn, web_schema), "--token-file", str(path)) as web:
        # Job 1, an id generation favours: its cancel, retry and delete reach the database.
        with httpx.Client(base_url=web.base + "/api/v1", headers=AUTH, timeout=30) as api:
            assert api.post("/jobs", json={"task": "t"}).status_code == 201
        yield web


def test_the_served_document_is_the_one_tested(server):
    served = httpx.get(server.base + "/api/v1/openapi.json", headers=AUTH, timeout=30).json()
    assert served == DOC


@schema.parametrize()
@settings(max_examples=examples(25), deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_the_server_keeps_the_openapi_contract(case, server):
    response = case.call(base_url=server.base, headers=AUTH, timeout=30)
    if response.status_code == 422 and beyond_schema(response.json()["message"]):
        return
    case.validate_response(response, headers=AUTH, excluded_checks=[negative_data_rejection])


# Rules between two fields, against the clock or against the data (the declared queues), which
# JSON Schema cannot state; the docs do (docs/api.md). A 422 that names one of them is the
# server keeping its documented contract.
BEYOND_SCHEMA = (
    "is not declared (declare it with",
    "the body's version and If-Match disagree",
    "the Idempotency-Key header and the body's idempotency_key disagree",
    "give run_at or delay",
    "the window ends",
    "has no fire time left",
    "the result is not storable",  # a NUL or a lone surrogate in a remote worker's result
    "on_parent_failure goes with after",
    "after does not go with run_at",
    "after is not taken in a batch",
    "workflow",  # a workflow's shape is recursive and free-form: jobrun/workflows.from_spec
    "a cycle: ",
    "unknown step",
)


def beyond_schema(message: str) -> bool:
    return any(rule in message for rule in BEYOND_SCHEMA)
