"""Result frames from a child: results held back and sent in one write keep their order, plain
successes go as one "done" frame, anything else as a frame of its own, and every field the
master reads comes back as the child meant it."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from jobrun import protocol
from jobrun.child.runtime import encode_results
from tests.profiles import examples

texts = st.text(max_size=40)

plain = st.builds(lambda i, took, res: {"t": "result", "id": i, "token": i + 1,
                                         "outcome": "succeeded", "result": res, "took": took,
                                         "rss": 0, "recycle": False},
                  st.integers(1, 10**12), st.floats(0, 10, allow_nan=False),
                  st.one_of(st.none(), st.just('{"ok":true}'), texts.map(lambda t: f'"{t}"')))

other = st.builds(lambda i, outcome, error, log: {"t": "result", "id": i, "token": i,
                                                   "outcome": outcome, "error": error,
                                                   "log": log, "took": 0.5, "rss": 0,
                                                   "recycle": False},
                  st.integers(1, 10**12), st.sampled_from(["failed", "retry", "succeeded"]),
                  st.one_of(st.none(), texts), texts)


def decoded(data: bytes) -> list[dict]:
    """What the master's dispatcher sees, one entry a job, in order."""
    out = []
    for body in protocol.FrameReader().feed(data):
        frame = protocol.decode(body)
        if frame["t"] == "done":
            out.extend({"id": i, "token": t, "outcome": "succeeded", "took": took, "result": r}
                       for i, t, took, r in zip(frame["id"], frame["token"], frame["took"],
                                                frame["result"]))
        else:
            out.append(frame)
    return out


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.one_of(plain, other), max_size=30))
def test_order_and_fields_survive_batching(results):
    got = decoded(encode_results([dict(r) for r in results]))
    assert [(g["id"], g["token"], g["outcome"]) for g in got] == \
        [(r["id"], r["token"], r["outcome"]) for r in results]
    for g, r in zip(got, results):
        for field in ("result", "took", "error", "log"):
            assert g.get(field) == r.get(field), field


def test_plain_successes_share_one_frame_and_others_stand_alone():
    ok = [{"t": "result", "id": i, "token": 1, "outcome": "succeeded", "result": None,
           "took": 0.001, "rss": 0, "recycle": False} for i in range(5)]
    failed = {"t": "result", "id": 99, "token": 1, "outcome": "failed", "error": "boom",
              "took": 0.001, "rss": 0, "recycle": False}
    logged = dict(ok[0], id=100, log="a line\n")
    frames = [protocol.decode(b) for b in protocol.FrameReader().feed(
        encode_results(ok[:3] + [failed] + ok[3:] + [logged]))]
    assert [f["t"] for f in frames] == ["done", "result", "done", "result"]
    assert frames[0]["id"] == [0, 1, 2] and frames[2]["id"] == [3, 4]


def test_a_success_with_an_empty_log_is_plain():
    """What the runtime builds for a job that logged nothing: a "log" of None."""
    ok = [{"t": "result", "id": i, "token": 1, "outcome": "succeeded", "result": None,
           "took": 0.001, "rss": 0, "recycle": False, "log": None} for i in range(3)]
    frames = [protocol.decode(b) for b in protocol.FrameReader().feed(encode_results(ok))]
    assert [f["t"] for f in frames] == ["done"]
