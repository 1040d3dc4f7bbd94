"""Values out of range over HTTP: a 422 naming the field, never a 500, and nothing changed.
Versions, ids and cursors past PostgreSQL's bigint; a schedule with no fire time left before
the calendar ends; zone names that are not IANA zones. (The same through the Client and the
CLI: tests/db/test_input_ranges.py.)"""

from __future__ import annotations

from psycopg import sql

from tests.acceptance.test_web_jobs import envelope
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)

BIG = 2**63  # one past bigint
BIG_TEXT = "9999999999999999999"  # 19 digits, past bigint


def test_a_version_past_bigint_is_a_422_naming_it(api):
    job = api.post("/jobs", json={"task": "t"}).json()
    url = f"/jobs/{job['id']}"
    for method, path in [("POST", "/cancel"), ("POST", "/retry"), ("DELETE", "")]:
        body = envelope(api.request(method, url + path, json={"version": BIG}), 422,
                        "validation_failed")
        assert body["fields"] == {"version": body["message"]} and str(BIG) in body["message"]
        body = envelope(api.request(method, url + path, headers={"If-Match": f'"{BIG_TEXT}"'}),
                        422, "validation_failed")
        assert "version" in body["fields"], body
    assert api.get(url).json()["version"] == 0 and api.get(url).json()["status"] == "queued"

    assert api.post("/queues", json={"name": "ranges"}).status_code == 201
    for guard in ({"json": {"concurrency": 3, "version": BIG}},
                  {"json": {"concurrency": 3}, "headers": {"If-Match": f'"{BIG_TEXT}"'}}):
        body = envelope(api.patch("/queues/ranges", **guard), 422, "validation_failed")
        assert "version" in body["fields"], body
    queue = api.get("/queues/ranges").json()
    assert (queue["concurrency"], queue["version"]) == (None, 0)


def test_cursors_past_bigint_are_a_422(api):
    for path in (f"/jobs?cursor={BIG_TEXT}",
                 f"/attempts?cursor=2030-01-01T00:00:00%2B00:00,{BIG_TEXT},1",
                 f"/attempts?cursor=2030-01-01T00:00:00%2B00:00,1,{BIG_TEXT}"):
        envelope(api.get(path), 422, "validation_failed")


def test_a_schedule_with_no_fire_time_in_range_or_no_zone_is_a_422(api, pg_dsn, web_schema):
    base = {"name": "ends", "cron": "0 0 * * *", "task": "t"}
    for extra, words in [({"starts_at": "9999-12-31T23:59:59Z"}, "no fire time left in range"),
                         ({"timezone": "localtime"}, "is not a zone name"),
                         ({"timezone": ""}, "unknown time zone ''"),
                         ({"timezone": "Europe/Pariss"}, "did you mean Europe/Paris?")]:
        body = envelope(api.post("/schedules", json={**base, **extra}), 422, "validation_failed")
        assert words in body["message"], body
    assert api.get("/schedules").json()["schedules"] == []

    # One stored before such names were refused is still listed (it expires when it comes due).
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {}.schedules (name, cron, task, timezone, next_fire_at)"
            " VALUES ('old', '@daily', 't', 'localtime', now() + interval '1 hour')")
            .format(sql.Identifier(web_schema)))
    listed = api.get("/schedules")
    assert listed.status_code == 200, listed.text
    [old] = listed.json()["schedules"]
    assert old["timezone"] == "localtime" and len(old["next_fires"]) == 1
    assert api.get("/schedules/old").status_code == 200
