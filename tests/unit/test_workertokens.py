"""Worker tokens (jobrun.web.workertokens) and the front door's use of them (jobrun.web.guard):
parsing a token file, scopes, and which requests a worker token opens."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, strategies as st

from jobrun.errors import InvalidInput
from jobrun.web import workertokens
from jobrun.web.guard import Guard, Policy

pytestmark = pytest.mark.unit
A = "a" * 16 + "-mail"
B = "b" * 20


def test_parse_reads_tokens_and_their_queues():
    tokens = workertokens.parse(f"# comment\n\n{A} mail,reports\n  {B} default  \n", "f")
    assert tokens.match(A).queues == {"mail", "reports"}
    assert tokens.match(B).queues == {"default"}
    assert tokens.match("a" * 16) is None and tokens.match("") is None


@pytest.mark.parametrize("text, says", [
    ("short mail\n", "line 1: the token must be 16"),
    (f"{A}\n", "line 1: a token and its queues"),
    (f"{A} mail extra\n", "line 1: a token and its queues"),
    (f"# x\n{A} ma/il\n", "line 2: invalid queue name"),
    (f"{A} mail\n{A} other\n", "line 2: the same token is given twice"),
    ("# nothing\n", "no token in it"),
])
def test_bad_files_are_one_line_without_the_token(text, says):
    with pytest.raises(InvalidInput) as caught:
        workertokens.parse(text, "--worker-token-file t")
    message = str(caught.value)
    assert says in message and "\n" not in message and A not in message


def test_read_refuses_a_file_others_can_read(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"{A} mail\n")
    path.chmod(0o640)
    with pytest.raises(InvalidInput, match="readable by others"):
        workertokens.read(str(path))
    path.chmod(0o600)
    assert workertokens.read(str(path)).match(A) is not None


token_text = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=16, max_size=40)


@given(st.lists(token_text, min_size=1, max_size=5, unique=True), token_text)
def test_a_token_matches_only_itself(tokens, offered):
    parsed = workertokens.parse("".join(f"{t} q{i}\n" for i, t in enumerate(tokens)), "f")
    found = parsed.match(offered)
    if offered in tokens:
        assert found.queues == {f"q{tokens.index(offered)}"}
    else:
        assert found is None


@pytest.mark.parametrize("method, path, protocol", [
    ("POST", "/api/v1/workers", True), ("GET", "/api/v1/workers", False),
    ("POST", "/api/v1/workers/remote:x:0123456789abcdef/claim", True),
    ("DELETE", "/api/v1/workers/remote:x:0123456789abcdef", True),
    ("POST", "/api/v1/jobs", False), ("GET", "/api/v1/workersx", False),
])
def test_is_protocol(method, path, protocol):
    assert workertokens.is_protocol(method, path) is protocol


def _status(policy: Policy, method: str, path: str, token: str | None) -> tuple[int, dict]:
    seen: dict = {}

    async def app(scope, receive, send):
        seen.update(scope.get("state", {}))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent: list = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(Guard(app, policy)(scope, receive, send))
    return sent[0]["status"], seen


ADMIN = "admin-token-0123456789"
TOKENS = workertokens.parse(f"{A} mail\n", "f")
WORKER_PATH = "/api/v1/workers/remote:x:0123456789abcdef/claim"


@pytest.mark.parametrize("admin, method, path, token, status", [
    (ADMIN, "POST", "/api/v1/workers", A, 200),          # a worker token registers
    (ADMIN, "POST", WORKER_PATH, A, 200),
    (ADMIN, "GET", "/api/v1/jobs", A, 403),              # and reads nothing else
    (ADMIN, "POST", "/api/v1/jobs", A, 403),
    (ADMIN, "GET", "/api/v1/workers", A, 403),
    (ADMIN, "POST", WORKER_PATH, ADMIN, 200),            # the admin token may do anything
    (ADMIN, "POST", WORKER_PATH, None, 401),
    (ADMIN, "POST", WORKER_PATH, "wrong-token-0123456789", 401),
    (None, "GET", "/api/v1/jobs", None, 200),            # loopback without an admin token
    (None, "POST", WORKER_PATH, None, 401),              # but the protocol needs a worker's
    (None, "GET", "/api/v1/jobs", A, 403),
])
def test_the_front_door(admin, method, path, token, status):
    got, state = _status(Policy(token=admin, worker_tokens=TOKENS), method, path, token)
    assert got == status
    if got == 200 and token == A:
        assert state["worker_scope"].queues == {"mail"}
    elif got == 200:
        assert "worker_scope" not in state


def test_without_worker_tokens_the_protocol_is_as_open_as_the_rest():
    assert _status(Policy(), "POST", WORKER_PATH, None)[0] == 200
    assert _status(Policy(token=ADMIN), "POST", WORKER_PATH, None)[0] == 401
