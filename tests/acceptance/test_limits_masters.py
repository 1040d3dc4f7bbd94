"""Limits with real masters (separate processes) racing on one database: the limits hold at
every sampled instant and over the attempts' recorded intervals, change mid-load, and the
queue order gives every queue turns. Settings are written with plain SQL, as any operator's
update would, and announced with the existing queue_notify query."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from psycopg import sql

from jobrun.sql import for_schema
from jobrun.testing import wait_for
from jobrun import observe
from tests.dbview import Db, enqueue
from tests.masterproc import http_get, metrics_url

pytestmark = pytest.mark.acceptance


def set_queue(db: Db, name: str, **settings) -> None:
    db.conn.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s) ON CONFLICT DO NOTHING").format(
        sql.Identifier(db.schema, "queues")), [name])
    if settings:
        sets = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v))
                                  for k, v in settings.items())
        db.conn.execute(sql.SQL("UPDATE {} SET {}, version = version + 1 WHERE name = %s").format(
            sql.Identifier(db.schema, "queues"), sets), [name])
    q = for_schema(db.schema)
    db.conn.execute(q.queue_notify, {"channel": q.channel, "name": name})


def sample_until_done(db: Db, where: str, done_ids: list[int], timeout: float = 120.0,
                      on_sample=None) -> list[int]:
    """Count leased jobs matching ``where`` again and again until every job is finished."""
    samples: list[int] = []

    def finished() -> bool:
        samples.append(db.count("status = 'leased' AND " + where))
        if on_sample is not None:
            on_sample(len(samples))
        return all(s == "succeeded" for s in db.statuses(done_ids).values())

    wait_for(finished, timeout=timeout, interval=0.005, message="jobs to finish")
    return samples


def most_overlapping(intervals: list[tuple]) -> int:
    """The most intervals [start, end] open at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda ev: (ev[0], ev[1]))  # an end before a start at the same time
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def intervals(db: Db, where: str = "true") -> list[tuple]:
    return [(r["started_at"], r["finished_at"]) for r in db.rows(
        "SELECT a.started_at, a.finished_at FROM {s}.job_attempts a JOIN {s}.jobs j ON j.id = a.job_id"
        " WHERE " + where)]


def test_cluster_wide_concurrency_is_never_exceeded_by_four_masters(master, client, db):
    set_queue(db, "default", concurrency=3)
    ids = enqueue(client, [("sleep", 0.05)] * 240)
    masters = [master("-c", "3") for _ in range(4)]
    for m in masters:
        m.wait_ready(3)
    samples = sample_until_done(db, "queue = 'default'", ids)
    assert len(samples) >= 200, len(samples)
    assert max(samples) <= 3, max(samples)
    assert max(samples) == 3  # the limit was reached, not merely undershot
    # (Not checked from attempt intervals: started_at and finished_at are the start times of
    # the claim's and the completion's transactions, while commit order decides which release
    # a claim sees; on a loaded machine a claim's transaction may begin before the completion
    # whose release it then uses. The samples above read committed state.)
    owners = db.rows("SELECT count(DISTINCT worker_pid) AS n FROM {s}.job_attempts")[0]["n"]
    assert owners >= 2  # the masters did race for it


def test_rate_limit_holds_over_every_window_and_wakes_the_master(master, client, db):
    set_queue(db, "default", rate_limit=5, rate_period="1 second")
    ids = enqueue(client, [("noop", i) for i in range(25)])
    # A poll floor of 30 s: the masters must wake by themselves when starts come back.
    for _ in range(2):
        master("-c", "2", "--poll-interval", "30s").wait_ready(2)
    db.wait_status(ids, ("succeeded",), timeout=60)
    starts = sorted(r["started_at"] for r in db.rows("SELECT started_at FROM {s}.job_attempts"))
    assert len(starts) == 25
    period = timedelta(seconds=1)
    for i, t in enumerate(starts):  # every window [t, t + 1 s) that starts at a start
        assert sum(1 for u in starts[i:] if u < t + period) <= 5, (i, starts)
    assert starts[-1] - starts[0] >= timedelta(seconds=4)  # 25 starts at 5/s take 4 s at least


def test_one_running_job_per_concurrency_key(master, client, db):
    for m in [master("-c", "3") for _ in range(2)]:
        m.wait_ready(3)
    keyed = enqueue(client, [{"task": "sleep", "payload": 0.03, "concurrency_key": "customer:42"}
                             for _ in range(50)])
    free = enqueue(client, [("sleep", 0.03)] * 25)
    samples = sample_until_done(db, "concurrency_key = 'customer:42'", keyed + free)
    assert len(samples) >= 100 and max(samples) == 1
    # started_at is its claim transaction's start: a claim that began while the key's previous
    # holder was completing waits for that completion's commit and then takes the key, with a
    # start stamped before the other's finish. Two jobs of 30 ms really running together
    # overlap by far more than that wait, so each interval counts from 15 ms after its stamp.
    late = timedelta(milliseconds=15)
    assert most_overlapping([(s + late, e) for s, e in
                             intervals(db, "j.concurrency_key = 'customer:42'")]) == 1
    assert db.rows("SELECT count(*) AS n FROM {s}.key_leases")[0]["n"] == 0  # all released


def test_pause_resume_and_limit_changes_take_effect_mid_load(master, client, db):
    set_queue(db, "default", concurrency=1)
    ids = enqueue(client, [("sleep", 0.05)] * 200)
    master("-c", "4").wait_ready(4)
    leased = lambda: db.count("status = 'leased'")  # noqa: E731
    seen = [leased() for _ in range(50)]
    assert max(seen) <= 1
    set_queue(db, "default", concurrency=3)
    wait_for(lambda: leased() == 3, timeout=20, interval=0.005, message="3 leased")
    seen = [leased() for _ in range(100)]
    assert max(seen) <= 3
    set_queue(db, "default", paused=True)
    wait_for(lambda: leased() == 0, timeout=20, message="the pause to drain the leases")
    done = db.count("status = 'succeeded'")
    assert [leased() for _ in range(50)] == [0] * 50
    assert db.count("status = 'succeeded'") == done
    set_queue(db, "default", paused=False, concurrency=2)
    samples = sample_until_done(db, "true", ids, timeout=120)
    assert max(samples) <= 2


def test_a_masters_own_queue_limit_and_what_it_reports(master, client, db, pg_dsn):
    set_queue(db, "emails", concurrency=50)  # a cluster-wide limit that never binds here
    m = master("-c", "6", "-Q", "emails=4,default", "--metrics-addr", "127.0.0.1:0")
    m.wait_ready(6)
    emails = enqueue(client, [("sleep", 0.05)] * 100, queue="emails")
    other = enqueue(client, [("sleep", 0.05)] * 20)
    samples = sample_until_done(db, "queue = 'emails'", emails + other)
    assert max(samples) == 4
    url = metrics_url(m) + "/metrics"
    body = wait_for(lambda: (lambda b: 'limit="concurrency"' in b and b)(http_get(url)[1]),
                    timeout=30, message="the queue limit gauge")
    assert 'jobrun_queue_limit{limit="concurrency",queue="emails"} 50.0' in body
    held = re.search(r'jobrun_claim_held_back_total\{queue="emails",reason="master_limit"\} (\d+)', body)
    assert held and int(held.group(1)) > 0, body
    # jobrun top reads the same from the database: the limit, and the claims held back.
    views = {v.queue: v for v in wait_for(
        lambda: (lambda vs: vs if any(v.held for v in vs) else None)(observe.queues(
            db.conn, for_schema(db.schema))), timeout=30, message="held counts in the registry")}
    assert views["emails"].limits == "c=50" and views["emails"].held.startswith("master_limit ")


def test_round_robin_gives_each_queue_turns(master, client, db):
    for name in ("a", "b"):
        set_queue(db, name)
    # By priority alone every job of a would run before any of b.
    enqueue(client, [("noop", i) for i in range(20)], queue="a", priority=-5)
    enqueue(client, [("noop", i) for i in range(20)], queue="b", priority=5)
    master("-c", "1", "--prefetch", "1", "-Q", "a,b", "--queue-order", "round_robin")
    wait_for(lambda: db.count("status = 'succeeded'") == 40, timeout=60, message="40 done")
    order = [r["queue"] for r in db.rows(
        "SELECT j.queue FROM {s}.job_attempts a JOIN {s}.jobs j ON j.id = a.job_id"
        " ORDER BY a.started_at, a.job_id")]
    first = order[:20]
    assert first.count("a") >= 8 and first.count("b") >= 8, order


def test_bad_queue_syntax_is_one_line(master, tmp_path):
    m = master("-Q", "emails=x,default")
    assert m.wait() == 2
    lines = [ln for ln in m.stderr().splitlines() if ln.strip()]
    assert len(lines) == 1 and "invalid limit 'x'" in lines[0], lines
