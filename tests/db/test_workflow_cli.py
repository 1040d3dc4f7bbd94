"""`jobrun enqueue --after` and `jobrun workflow enqueue|get|cancel` against a real database:
the tree with each member's status; bad input is one line that stores nothing."""

from __future__ import annotations

import json

import pytest

from tests.cliproc import fails, ok, ok_json


def count(execute) -> int:
    return execute("SELECT count(*) FROM {s}.jobs").fetchone()[0]


def test_enqueue_after_waits_and_the_tree_shows_each_status(cli, execute):
    parent = ok_json(cli("enqueue", "a"))
    child = ok_json(cli("enqueue", "b", '{"x": 1}', "--after", str(parent["id"])))
    assert child["status"] == "waiting" and child["payload"] == {"x": 1}
    spec = {"chord": ["p", {"task": "q", "payload": 2}], "then": {"task": "cb"}}
    made = ok_json(cli("workflow", "enqueue", json.dumps(spec), "--key", "w1"))
    assert made["created"] and len(made["job_ids"]) == 3
    again = ok_json(cli("workflow", "enqueue", json.dumps(spec), "--key", "w1"))
    assert (again["id"], again["job_ids"], again["created"]) == (made["id"], made["job_ids"], False)
    p, q, cb = made["job_ids"]
    out = ok(cli("workflow", "get", str(made["id"])))
    assert out.splitlines() == [f"workflow {made['id']} (chord): running",
                                f"{p} p [queued]", f"  {cb} cb [waiting]  (also after {q})",
                                f"{q} q [queued]"]
    cancelled = ok_json(cli("workflow", "cancel", str(made["id"])))
    assert sorted(cancelled["cancelled"]) == [p, q, cb]
    shown = ok_json(cli("workflow", "get", str(made["id"]), "--json"))
    assert shown["status"] == "failed" and {j["status"] for j in shown["jobs"]} == {"cancelled"}


@pytest.mark.parametrize("args, message", [
    (("enqueue", "b", "--after", "999999"), "no job 999999 to wait for"),
    (("enqueue", "b", "--after", "1", "--on-parent-failure", "later"), "on_parent_failure"),
    (("workflow", "enqueue", "{"), "the workflow is not valid JSON"),
    (("workflow", "enqueue", '{"chain": []}'), "workflow: chain is a non-empty list"),
    (("workflow", "enqueue", '{"graph": {"a": "t", "b": "t"}, "after": {"a": ["b"], "b": ["a"]}}'),
     "a cycle: "),
    (("workflow", "enqueue", '{"chain": ["ok", {"task": "bad name"}]}'), "workflow job 2: invalid task name"),
    (("workflow", "get", "12345"), "no workflow 12345"),
    (("workflow", "cancel", "12345"), "no workflow 12345"),
])
def test_bad_input_is_one_line_and_stores_nothing(cli, execute, args, message):
    ok_json(cli("enqueue", "a"))  # job 1 exists
    before = count(execute)
    result = cli(*args)
    fails(result)
    assert message in result.stderr
    assert count(execute) == before
