"""Observation commands: the data behind `jobrun top`, `jobrun workers` and `jobrun logs`.

Rows are written with plain SQL, at times relative to the database clock, so every number the
data functions report is known exactly (ages within a small tolerance for the time the test
itself takes). The commands run as real subprocesses; `jobrun top` also runs in a real
pseudo-terminal, driven by keys and signals, and must give the terminal back as it found it.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from datetime import datetime, timedelta, timezone

import pytest
from psycopg import sql
from rich.console import Console

from jobrun import observe
from jobrun.admin import top
from jobrun.store import db
from jobrun.sql import for_schema

SLACK = 10.0  # seconds a test may take between writing rows and reading them back


@pytest.fixture
def execute(admin_conn, schema):
    def run_sql(text: str, params=()):
        return admin_conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params)
    return run_sql


@pytest.fixture
def conn(pg_dsn):
    with db.connect(pg_dsn) as c:
        yield c


@pytest.fixture
def q(schema):
    return for_schema(schema)


@pytest.fixture
def cli(db_env, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**db_env, "PWD": str(cwd)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "jobrun.admin.cli", *args], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=120)
    run.env, run.cwd = env, cwd
    return run


def ok(result):
    assert result.returncode == 0, result.stderr
    return result.stdout


def add_job(execute, queue="default", task="t.work", status="queued", *, created=-10.0,
            run_at=None, started=None, finished=None, attempts=0):
    """A job whose times are offsets in seconds from the database's now() (None: NULL)."""
    return execute(
        "INSERT INTO {s}.jobs (queue, task, status, attempts, created_at, run_at, started_at,"
        " finished_at) VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s),"
        " now() + make_interval(secs => %s), now() + make_interval(secs => %s),"
        " now() + make_interval(secs => %s)) RETURNING id",
        [queue, task, status, attempts, created, created if run_at is None else run_at,
         started, finished]).fetchone()[0]


def add_attempt(execute, job_id, token, outcome, finished, *, error=None, log=None,
                host="hostA", pid=11, child=2, started=None):
    execute("INSERT INTO {s}.job_attempts (job_id, lease_token, attempt, worker_host,"
            " worker_pid, worker_child, started_at, finished_at, outcome, error, log)"
            " VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s),"
            " now() + make_interval(secs => %s), %s, %s, %s)",
            [job_id, token, token, host, pid, child, finished - 1.0 if started is None else started,
             finished, outcome, error, log])


def add_worker(execute, owner, host, pid, *, seen=-1.0, uptime=3600.0, busy=0, concurrency=4,
               inflight=(), queues=("default",)):
    """inflight: (job id, task, child, child pid, seconds running) tuples."""
    items = [{"id": i, "task": t, "child": c, "pid": p, "elapsed": e} for i, t, c, p, e in inflight]
    execute("INSERT INTO {s}.workers (owner, host, pid, app, queues, concurrency, busy, version,"
            " inflight, started_at, last_seen)"
            " SELECT %s, %s, %s, 'tests.app', %s, %s, %s, '0.1.0',"
            "        coalesce(jsonb_agg(x - 'elapsed' || jsonb_build_object('started',"
            "                 extract(epoch FROM now()) - (x->>'elapsed')::float8))"
            "                 FILTER (WHERE x IS NOT NULL), '[]'),"
            "        now() - make_interval(secs => %s), now() + make_interval(secs => %s)"
            "   FROM jsonb_array_elements(%s::jsonb) AS x",
            [owner, host, pid, list(queues), concurrency, busy, uptime, seen, json.dumps(items)])


@pytest.fixture
def scene(client, execute):
    """Three queues with known depths, rates, waits and failures, and two live masters + one stale."""
    client.declare_queue("emails")
    client.declare_queue("bulk")
    client.pause_queue("bulk")
    ids = {}
    # default: 3 runnable (oldest runnable for 50 s), 2 scheduled, 1 leased.
    add_job(execute, created=-50.0)
    add_job(execute, created=-20.0)
    add_job(execute, created=-5.0)
    add_job(execute, created=-5.0, run_at=3600.0)
    add_job(execute, created=-5.0, run_at=3600.0)
    ids["leased"] = add_job(execute, status="leased", created=-8.0, started=-2.0, attempts=1)
    # Finished in the last minute, waits 1..4 s.
    ids["ok"] = [add_job(execute, status="succeeded", created=-40.0, started=-40.0 + w,
                         finished=-10.0, attempts=1) for w in (1, 2, 3, 4)]
    # Finished 2 min ago: outside the rate window, inside the 5 min wait sample (wait 10 s).
    ids["dead"] = add_job(execute, status="dead", created=-200.0, started=-190.0,
                          finished=-120.0, attempts=3)
    # Finished 10 min ago: outside every window.
    add_job(execute, status="succeeded", created=-800.0, started=-700.0, finished=-600.0)
    # Re-scheduled after its last start, then cancelled: finished now, but no wait.
    add_job(execute, status="cancelled", created=-300.0, run_at=-50.0, started=-100.0,
            finished=-5.0, attempts=1)
    # emails: 1 runnable; one dead job (wait 5 s) whose lease expired a minute ago; one
    # delayed job that waited 2 s after its run_at (102 s after its enqueue).
    add_job(execute, "emails", created=-1.0)
    add_job(execute, "emails", status="succeeded", created=-250.0, run_at=-150.0, started=-148.0,
            finished=-140.0, attempts=1)
    ids["mail"] = add_job(execute, "emails", "mail.send", status="dead", created=-70.0,
                          started=-65.0, finished=-50.0, attempts=1)
    add_attempt(execute, ids["mail"], 1, "lease_expired", -50.0, host=None, pid=None, child=None,
                error="lease expired: its holder (h:1:x) stopped renewing it")
    # Attempts: three failures in the last 5 min for default, plus ones that do not count.
    add_attempt(execute, ids["ok"][0], 1, "failed", -30.0,
                error="ValueError: boom\nTraceback (most recent call last):\n  ...")
    add_attempt(execute, ids["ok"][1], 1, "timeout", -100.0, error="hard time limit (30 s)")
    add_attempt(execute, ids["dead"], 1, "worker_lost", -200.0, error="child killed by SIGKILL")
    add_attempt(execute, ids["dead"], 2, "failed", -400.0, error="too old to count")
    add_attempt(execute, ids["ok"][2], 1, "retry", -20.0)
    add_attempt(execute, ids["ok"][3], 1, "succeeded", -10.0)
    add_worker(execute, "alpha:101:n1", "alpha", 101, busy=2, concurrency=4, seen=-20.0,
               inflight=[(ids["leased"], "t.work", 0, 5001, 7.0), (999, "t.other", 1, 5002, 1.0)])
    add_worker(execute, "beta:202:n2", "beta", 202, concurrency=8, seen=0.0, uptime=60.0,
               queues=("default", "emails"))
    add_worker(execute, "gamma:303:n3", "gamma", 303, seen=-31.0, uptime=7200.0)
    return ids


# --- data functions -----------------------------------------------------------------------

def test_queue_numbers(scene, conn, q):
    views = {v.queue: v for v in observe.queues(conn, q)}
    assert list(views) == ["bulk", "default", "emails"]
    d, e, b = views["default"], views["emails"], views["bulk"]
    assert (d.queued, d.scheduled, d.leased, d.paused) == (3, 2, 1, False)
    assert 50.0 <= d.oldest_age <= 50.0 + SLACK
    assert d.enqueued_per_s == pytest.approx(10 / 60)   # 3 + 2 scheduled + 1 leased + 4 done
    assert d.done_per_s == pytest.approx(5 / 60)        # 4 succeeded + 1 cancelled
    assert d.wait_sample == 5                           # waits 1, 2, 3, 4 and 10 s
    assert d.wait_p50 == pytest.approx(3.0)
    assert d.wait_p95 == pytest.approx(8.8)             # 4 + 0.8 * (10 - 4)
    assert d.failures == 3                              # failed, timeout, worker_lost
    assert (e.queued, e.scheduled, e.leased, e.failures, e.wait_sample) == (1, 0, 0, 1, 2)
    assert e.enqueued_per_s == pytest.approx(1 / 60) and e.done_per_s == pytest.approx(1 / 60)
    assert (e.wait_p50, e.wait_p95) == (pytest.approx(3.5), pytest.approx(4.85))  # waits 2, 5
    assert 1.0 <= e.oldest_age <= 1.0 + SLACK
    assert (b.paused, b.queued, b.scheduled, b.leased, b.failures) == (True, 0, 0, 0, 0)
    assert (b.oldest_age, b.wait_p50, b.wait_p95, b.enqueued_per_s) == (None, None, None, 0)


def test_latest_failures_newest_first_with_first_error_line(scene, conn, q):
    got = observe.latest_failures(conn, q, limit=3)
    assert [(f.id, f.queue, f.outcome, f.error) for f in got] == [
        (scene["ok"][0], "default", "failed", "ValueError: boom"),
        (scene["mail"], "emails", "lease_expired",
         "lease expired: its holder (h:1:x) stopped renewing it"),
        (scene["ok"][1], "default", "timeout", "hard time limit (30 s)"),
    ]
    assert got[1].task == "mail.send" and 30.0 <= got[0].age <= 30.0 + SLACK
    assert len(observe.latest_failures(conn, q, limit=10)) == 4  # the 400 s old one is out


def test_workers_excludes_stale_and_reads_inflight(scene, conn, q):
    live, stale = observe.workers(conn, q)
    assert stale == 1
    assert [(m.host, m.pid, m.busy, m.concurrency, m.queues) for m in live] == [
        ("alpha", 101, 2, 4, ["default"]), ("beta", 202, 0, 8, ["default", "emails"])]
    alpha, beta = live
    assert 3600.0 <= alpha.uptime <= 3600.0 + SLACK and 60.0 <= beta.uptime <= 60.0 + SLACK
    assert 20.0 <= alpha.last_seen_ago <= 20.0 + SLACK
    assert [(j.job_id, j.task, j.child, j.pid) for j in alpha.inflight] == [
        (scene["leased"], "t.work", 0, 5001), (999, "t.other", 1, 5002)]
    assert 7.0 <= alpha.inflight[0].elapsed <= 7.0 + SLACK
    assert beta.inflight == []
    # A stricter staleness bound hides alpha too (seen 20 s ago), not beta (seen now).
    assert [m.host for m in observe.workers(conn, q, stale_after=SLACK)[0]] == ["beta"]


def test_snapshot_is_one_consistent_frame(scene, conn, q):
    snap = observe.snapshot(conn, q)
    assert [v.queue for v in snap.queues] == ["bulk", "default", "emails"]
    assert [m.host for m in snap.masters] == ["alpha", "beta"] and snap.stale_masters == 1
    assert [j.task for j in snap.inflight] == ["t.work", "t.other"]  # longest running first
    assert [f.outcome for f in snap.failures] == ["failed", "lease_expired", "timeout", "worker_lost"]
    assert not conn.info.transaction_status  # the read-only transaction ended (IDLE)
    frame = json.loads(json.dumps(snap.to_dict(), default=str))
    assert frame["inflight"][0]["job_id"] == scene["leased"]


def test_empty_schema(schema, conn, q):
    snap = observe.snapshot(conn, q)
    assert (snap.masters, snap.stale_masters, snap.failures, snap.inflight) == ([], 0, [], [])
    [v] = snap.queues
    assert (v.queue, v.queued, v.scheduled, v.leased, v.oldest_age, v.wait_p50, v.failures) == (
        "default", 0, 0, 0, None, None, 0)


def test_queue_sort_orders(scene, conn, q):
    snap = observe.snapshot(conn, q)
    orders = {s: [v.queue for v in sorted(snap.queues, key=top._sort_key(s))] for s in top.SORTS}
    assert orders == {"queue": ["bulk", "default", "emails"],
                      "queued": ["default", "emails", "bulk"],
                      "oldest": ["default", "emails", "bulk"],
                      "done/s": ["default", "emails", "bulk"],
                      "failures": ["default", "emails", "bulk"]}


# --- workers, logs, get -------------------------------------------------------------------

def test_workers_command(scene, cli):
    result = cli("workers", "--json")
    rows = json.loads(ok(result))
    assert [(r["host"], r["pid"], r["busy"], r["concurrency"], r["version"]) for r in rows] == [
        ("alpha", 101, 2, 4, "0.1.0"), ("beta", 202, 0, 8, "0.1.0")]
    assert rows[0]["inflight"][0]["pid"] == 5001 and rows[0]["uptime"] >= 3600
    assert "1 stale master hidden" in result.stderr
    table = ok(cli("workers"))
    assert table.split()[:4] == ["host", "pid", "app", "queues"]
    assert [line.split()[:5] for line in table.splitlines() if line.split()[:1] in (
        ["alpha"], ["beta"], ["gamma"])] == [
        ["alpha", "101", "tests.app", "default", "2/4"],
        ["beta", "202", "tests.app", "default,emails", "0/8"]]


def test_workers_command_none_live(cli):
    assert "no live masters" in ok(cli("workers"))
    assert json.loads(ok(cli("--json", "workers"))) == []


def test_logs_command_and_get_history(client, execute, cli):
    job_id = add_job(execute, status="succeeded", created=-60.0, started=-5.0, finished=-1.0,
                     attempts=2)
    add_attempt(execute, job_id, 1, "failed", -20.0, error="KeyError: 'x'\nTraceback ...",
                log="line one\nline two\n", started=-25.0)
    add_attempt(execute, job_id, 2, "succeeded", -1.0, log="done", child=3, started=-5.0)

    out = ok(cli("logs", str(job_id)))
    lines = out.splitlines()
    assert lines[0].startswith("=== attempt 1: failed, hostA pid 11 child 2, started ")
    assert lines[0].endswith("(5.0s)")
    assert lines[1:4] == ["error: KeyError: 'x'", "line one", "line two"]
    assert lines[4].startswith("=== attempt 2: succeeded, hostA pid 11 child 3, ")
    assert lines[5:] == ["done"]

    only = ok(cli("logs", str(job_id), "--attempt", "2")).splitlines()
    assert len(only) == 2 and only[0].startswith("=== attempt 2: ") and only[1] == "done"
    rows = json.loads(ok(cli("logs", str(job_id), "--json")))
    assert [(r["attempt"], r["outcome"], r["log"]) for r in rows] == [
        (1, "failed", "line one\nline two\n"), (2, "succeeded", "done")]

    got = json.loads(ok(cli("get", str(job_id), "--attempts")))
    assert [(h["attempt"], h["log"], h["error"]) for h in got["history"]] == [
        (1, "line one\nline two\n", "KeyError: 'x'\nTraceback ..."), (2, "done", None)]

    queued = client.enqueue("t.new").job.id
    result = cli("logs", str(queued))
    assert result.returncode == 0 and result.stdout == ""
    assert f"job {queued} (queued) has no finished attempts yet" in result.stderr


def test_logs_not_found_is_one_line(client, cli):
    job_id = client.enqueue("t.x").job.id
    for args, message in [(["999999"], "no job 999999"),
                          ([str(job_id), "--attempt", "7"],
                           f"job {job_id} has no finished attempt 7")]:
        result = cli("logs", *args)
        assert result.returncode == 1 and result.stdout == "", result
        assert result.stderr.splitlines() == [f"jobrun: error: {message}"]


# --- top ----------------------------------------------------------------------------------

def test_top_once_prints_one_frame(scene, cli):
    out = ok(cli("top", "--once"))
    assert "\x1b" not in out  # a pipe gets plain text
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["default"][1:4] == ["3", "2", "1"]          # queued, scheduled, leased
    assert rows["emails"][1:4] == ["1", "0", "0"]
    assert rows["bulk"][1:5] == ["(paused)", "0", "0", "0"]
    assert rows["default"][-1] == "3"                       # failures in 5 min
    assert rows["alpha"][1:3] == ["101", "2/4"] and rows["beta"][1:3] == ["202", "0/8"]
    assert "gamma" not in rows and "1 stale hidden" in out
    assert "ValueError: boom" in out and "Traceback" not in out
    assert "t.other" in out and "5002" in out
    assert "jobs/s over the last 60 s" in out


def test_top_json_and_bad_options(scene, cli):
    frame = json.loads(ok(cli("top", "--json")))
    assert [m["host"] for m in frame["masters"]] == ["alpha", "beta"]
    assert {v["queue"]: v["queued"] for v in frame["queues"]} == {"bulk": 0, "default": 3, "emails": 1}
    result = cli("top", "--interval", "0")
    assert result.returncode == 1 and "out of range" in result.stderr
    result = cli("top")  # stdout is a pipe here
    assert result.returncode == 1 and "use --once" in result.stderr


class Pty:
    """`jobrun top` on a real pseudo-terminal (TERM=xterm, 40x160)."""

    def __init__(self, cli, *args):
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        self.saved = termios.tcgetattr(self.slave)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobrun.admin.cli", "top", *args],
            stdin=self.slave, stdout=self.slave, stderr=self.slave, cwd=cli.cwd,
            env={**{k: v for k, v in cli.env.items() if k not in ("COLUMNS", "LINES")},
                 "TERM": "xterm"}, start_new_session=True)
        self.out = b""

    def read_until(self, needle: bytes, start: int = 0, timeout: float = 30.0) -> int:
        """Read output until ``needle`` appears after offset ``start``; return the offset after it."""
        deadline = time.monotonic() + timeout
        while (at := self.out.find(needle, start)) < 0:
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, (needle, self.proc.poll(), self.out[-3000:])
            if select.select([self.master], [], [], left)[0]:
                self.out += os.read(self.master, 65536)
        return at + len(needle)

    def header(self, start: int = 0) -> bytes:
        """The first complete frame header after ``start``: from "jobrun top" to the queue table."""
        begin = self.read_until(b"jobrun top", start)
        end = self.read_until(b"Queues (sort", begin)
        return self.out[begin:end]

    def send(self, keys: bytes) -> int:
        mark = len(self.out)
        os.write(self.master, keys)
        return mark

    def wait_exit(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or select.select([self.master], [], [], 0)[0]:
            left = deadline - time.monotonic()
            assert left > 0, ("top did not exit", self.out[-2000:])
            if select.select([self.master], [], [], min(left, 0.05))[0]:
                self.out += os.read(self.master, 65536)
        return self.proc.returncode

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def pty_top(cli):
    opened = []

    def start(*args):
        opened.append(Pty(cli, *args))
        return opened[-1]
    yield start
    for p in opened:
        p.close()


def assert_terminal_restored(t: Pty):
    assert t.out.rstrip(b"\r\n").endswith(b"\x1b[?1049l"), t.out[-200:]  # left the alt screen
    tail = t.out[t.out.rfind(b"\x1b[?1049h"):]
    assert b"\x1b[?25h" in tail                                         # cursor shown again
    assert termios.tcgetattr(t.slave) == t.saved                        # echo + canonical mode back
    assert t.saved[3] & termios.ICANON and t.saved[3] & termios.ECHO


def test_top_live_keys(scene, pty_top):
    t = pty_top("--interval", "0.2")
    t.read_until(b"\x1b[?1049h")                       # the alternate screen
    t.read_until(b"Queues (sort: queue)")
    t.read_until(b"emails")
    t.read_until(b"alpha")
    assert not termios.tcgetattr(t.slave)[3] & (termios.ICANON | termios.ECHO)  # cbreak, no echo
    t.read_until(b"Queues (sort: queued)", t.send(b"s"))
    assert b"PAUSED" in t.header(t.send(b"p"))
    assert b"PAUSED" not in t.header(t.send(b"p"))    # resumed
    t.send(b"q")
    assert t.wait_exit() == 0
    assert_terminal_restored(t)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_top_restores_terminal_on_signal(schema, pty_top, signum):
    t = pty_top()
    t.read_until(b"default")
    t.proc.send_signal(signum)
    assert t.wait_exit() == 0
    assert b"Traceback" not in t.out
    assert_terminal_restored(t)


def test_top_shows_database_errors_and_recovers(schema, pty_top, execute):
    t = pty_top("--interval", "0.2")
    t.read_until(b"default")
    execute("ALTER TABLE {s}.workers RENAME TO workers_gone")
    mark = len(t.out)
    while b"is missing or out of date" not in t.header(mark):
        mark = len(t.out)
    execute("ALTER TABLE {s}.workers_gone RENAME TO workers")
    mark = len(t.out)
    while b"error:" in t.header(mark):                # until a frame without the error
        mark = len(t.out)
    t.send(b"q")
    assert t.wait_exit() == 0


def test_render_caps_inflight_rows_to_the_screen():
    at = datetime.now(timezone.utc)
    jobs = [observe.InFlight(i, f"t.job{i}", i, 1000 + i, float(i), "h", 1) for i in range(30)]
    master = observe.Master("h:1:n", "h", 1, None, ["default"], 30, 30, None, at, at, 5.0, 0.0,
                            jobs)
    snap = observe.Snapshot(at=at, queues=[], masters=[master], stale_masters=0, failures=[])
    console = Console(width=120, record=True)
    console.print(top.render(snap, max_inflight=5))
    text = console.export_text()
    assert "In flight (30, 25 not shown)" in text
    assert "t.job29" in text and "t.job25" in text and "t.job24" not in text  # longest first


def frame_at(width: int, snap: observe.Snapshot, **kw) -> list[str]:
    """``snap`` drawn as an in-process terminal ``width`` columns wide would show it."""
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(top.render(snap, **kw))
    return console.export_text().splitlines()


def busy_snapshot() -> observe.Snapshot:
    """A frame with a figure or a name in every column, each as long as a busy system's."""
    at = datetime.now(timezone.utc)
    job = observe.InFlight(1234567, "reports.monthly_rollup", 15, 4123456, 3725.0,
                           "worker-07.example.net", 45678)
    master = observe.Master("o", "worker-07.example.net", 45678, "app", ["default", "emails"],
                            16, 16, "0.1.0", at, at, 90061.0, 0.4, [job])
    queues = [observe.QueueView("default", False, 3, 1234567, 12345, 16, 3723.0, 123.4, 99.87,
                                0.123, 14.5, 500, 1234, "c=3 r=50/1s k=2", "rate=12"),
              observe.QueueView("transactional", True, None, 0, 0, 0, None, 0.0, 0.0, None,
                                None, 0, 0)]
    failure = observe.Failure(1234567, "reports.monthly_rollup", "default", 12, "lease_expired",
                              "lease expired: its holder (worker-07.example.net:45678:a1b2)"
                              " stopped renewing it", 3599.0)
    schedule = {"name": "nightly-report", "cron": "30 2 * * 1-5", "timezone": "America/New_York",
                "task": "reports.monthly_rollup", "paused": False,
                "last_fire_at": at - timedelta(hours=23), "next_fire_at": at + timedelta(hours=1)}
    return observe.Snapshot(at=at, queues=queues, masters=[master], stale_masters=1,
                            failures=[failure], schedules=[schedule])


def test_top_fits_80_columns():
    """Every line fits, every figure and name is shown whole (a name may wrap onto a second
    line); only an error's first line is cut (with an ellipsis) to the width left for it."""
    lines = frame_at(80, busy_snapshot(), interval=1.0, target="postgresql://db.example.net/jobs")
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80, text
    cut = [line for line in lines if "…" in line]
    assert len(cut) == 1 and "lease expired: its" in cut[0], text
    words = ["1234567", "12345", "1h02m", "123", "99.87", "0.1s", "14s", "1234",  # default
             "transactional", "(paused)", "c=3 r=50/1s k=2", "rate=12",
             "worker-07.example.net", "45678", "16/16", "default, emails", "1d01h", "0.4s ago",
             "59m59s ago", "lease_expired", "reports.monthly_rollup",
             "nightly-report", "30 2 * * 1-5", "America/New_York", "23h00m ago", "in 1h00m",
             "4123456", "1h02m", "worker-07.example.net:", "Queues (sort: queue)",
             "queued", "sched", "leased", "oldest", "in/s", "done/s", "p50", "p95", "fail",
             "jobs/s over the last 60 s"]
    missing = [w for w in words if w not in text]
    assert not missing, f"{missing} not shown whole at 80 columns:\n{text}"
