"""What a master refuses at start rather than run on half-working: a -Q queue that is not
declared (queues are a closed set, docs/queues.md) and a metrics address another process
listens on (it would serve no /metrics or /healthz, while `jobrun health` reported the other
master). Real `jobrun-master` subprocesses on a real PostgreSQL."""

from __future__ import annotations

import re
import socket

from tests.masterproc import metrics_url


def error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "error" in ln.lower()]


def test_an_undeclared_queue_is_refused_with_the_declared_ones(master, client):
    client.queue_add("emails")
    m = master("-c", "1", "-Q", "emails,nosuch,default")
    assert m.wait() == 2
    err = m.stderr()
    assert "Traceback" not in err and "master.ready" not in err
    [line] = error_lines(err)
    assert line.startswith("jobrun-master: error: queue nosuch not declared"), err
    assert "(declared: default, emails)" in line and "jobrun queue add" in line


def test_a_fresh_schema_declares_default_and_only_default(master, db_env, scratch_schemas):
    env = {**db_env, "JOBRUN_SCHEMA": scratch_schemas("fresh")}
    m = master("-c", "1", "-Q", "nosuch", env=env)
    assert m.wait() == 2
    assert "schema.migrated" in m.stderr()  # migrated at start: `default` exists from then on
    [line] = error_lines(m.stderr())
    assert line == ("jobrun-master: error: queue nosuch not declared (declared: default);"
                    " declare with: jobrun queue add NAME"), line
    master("-c", "1", "-Q", "default", env=env).wait_ready(1)


def test_without_migrations_a_missing_schema_is_one_line(master, db_env, scratch_schemas):
    env = {**db_env, "JOBRUN_SCHEMA": scratch_schemas("bare")}
    m = master("-c", "1", "--no-migrate", env=env)
    assert m.wait() == 1
    err = m.stderr()
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert "master.start_failed" in line and "jobrun migrate" in line, err


def test_a_taken_metrics_port_stops_the_second_master(master):
    first = master("-c", "1", "--metrics-addr", "127.0.0.1:0", ready=1)
    addr = metrics_url(first).removeprefix("http://")
    second = master("-c", "1", "--metrics-addr", addr)
    assert second.wait() == 1
    err = second.stderr()
    assert "Traceback" not in err and "master.ready" not in err
    [line] = error_lines(err)
    assert "master.start_failed" in line
    assert f"metrics address {addr} is not available" in line and "--metrics-addr" in line
    assert first.running()


def test_a_port_someone_else_listens_on_is_refused_too(master):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        m = master("-c", "1", "--metrics-addr", f"127.0.0.1:{port}")
        assert m.wait() == 1
    assert re.search(rf"metrics address 127\.0\.0\.1:{port} is not available", m.stderr())


def test_metrics_off_still_starts_beside_a_master_on_the_default_port(master):
    first = master("-c", "1", "--metrics-addr", "127.0.0.1:0", ready=1)
    metrics_url(first)
    second = master("-c", "1", "--metrics-addr", "off", ready=1)
    assert second.running() and "metrics.listening" not in second.stderr()
