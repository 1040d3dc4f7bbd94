"""Parts of the master without a database: frames, exit descriptions, the lifecycle every
service shares (and its supervision), health, and each handle_<signal> called directly."""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun import config, protocol
from jobrun.config import Settings
from jobrun.worker.exits import describe_exit
from jobrun.worker.forkserver import ForkServers
from jobrun.worker.lifecycle import Service
from jobrun.worker.master import Master

from tests.profiles import examples

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53), st.text(max_size=20),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)
frames = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


@settings(max_examples=examples(40), deadline=None)
@given(objs=st.lists(frames, max_size=5), cut=st.integers(1, 64))
def test_frames_round_trip_through_any_chunking(objs, cut):
    wire = b"".join(protocol.encode(o) for o in objs)
    reader = protocol.FrameReader()
    got = []
    for i in range(0, len(wire), cut):
        got.extend(protocol.decode(body) for body in reader.feed(wire[i:i + cut]))
    assert got == objs


@settings(max_examples=examples(40), deadline=None)
@given(header=st.dictionaries(st.sampled_from(["id", "task", "queue", "key"]), json_values),
       payload=json_values)
def test_job_frames_splice_the_payload_text(header, payload):
    import json
    frame = protocol.job_frame(header, json.dumps(payload))
    [body] = protocol.FrameReader().feed(frame)
    assert protocol.decode(body) == {"t": "job", **header, "payload": payload}


bigints = st.integers(-2**63, 2**63 - 1)
names = st.text(max_size=12)  # any text: quotes, control characters, surrogates aside


@settings(max_examples=examples(200), deadline=None)
@given(ids=st.tuples(bigints, bigints), owner=names, task=names, queue=names,
       counts=st.tuples(st.integers(0, 2**31), st.integers(0, 2**31), st.integers(-2**15, 2**15)),
       created_at=st.one_of(st.sampled_from([float("inf"), float("-inf"), -0.0, 1e300, 5e-324]),
                            st.floats(allow_nan=False)), key=st.one_of(st.none(), names),
       traceparent=st.one_of(st.none(), names), payload=json_values)
def test_the_masters_job_frames_decode_as_the_generic_ones(ids, owner, task, queue, counts,
                                                          created_at, key, traceparent, payload):
    import json
    header = {"id": ids[0], "token": ids[1], "owner": owner, "task": task, "queue": queue,
              "attempt": counts[0], "max_attempts": counts[1], "priority": counts[2],
              "created_at": created_at, "key": key, "traceparent": traceparent}
    frames = protocol.JobFrames(owner)
    for _ in range(2):  # the second time from the cache of names
        fast = frames.frame(id=ids[0], token=ids[1], task=task, queue=queue, attempt=counts[0],
                            max_attempts=counts[1], priority=counts[2], created_at=created_at,
                            key=key, traceparent=traceparent, payload_text=json.dumps(payload))
        [body] = protocol.FrameReader().feed(fast)
        assert protocol.decode(body) == {"t": "job", **header, "payload": payload}
        [generic] = protocol.FrameReader().feed(protocol.job_frame(header, json.dumps(payload)))
        assert protocol.decode(generic) == protocol.decode(body)


def test_exit_descriptions():
    assert describe_exit(0) == ("exited with code 0", False)
    assert describe_exit(3) == ("exited with code 3", False)
    assert describe_exit(-signal.SIGKILL) == ("killed by SIGKILL", True)
    assert describe_exit(-signal.SIGSEGV) == ("killed by SIGSEGV", False)
    assert describe_exit(-200) == ("killed by signal 200", False)


class Loop(Service):
    """A part that runs until stopped, or crashes when told to."""

    name = "loop"

    def __init__(self, crash: asyncio.Event | None = None) -> None:
        super().__init__()
        self.crash = crash or asyncio.Event()
        self.finished = False

    async def _run(self) -> None:
        try:
            await self.crash.wait()
            raise RuntimeError("broken on purpose")
        finally:
            self.finished = True


def test_stop_is_safe_before_start_and_twice_and_returns_once_stopped():
    async def scenario():
        before = Loop()
        await before.stop()
        await before.stop()
        before.start()  # stopped before it started: it stays stopped
        assert not before.running
        part = Loop()
        part.start()
        await asyncio.sleep(0)  # let it begin (a scheduling step, not a wait on time)
        assert part.running
        await part.stop()
        assert part.finished and not part.running
        await part.stop()
    asyncio.run(scenario())


def test_a_crashing_service_is_reported(caplog):
    async def scenario():
        crashed = asyncio.Event()
        seen = []
        part = Loop()
        part.on_crash = lambda service, exc: (seen.append((service.name, str(exc))), crashed.set())
        part.start()
        part.crash.set()
        await asyncio.wait_for(crashed.wait(), 5)
        await part.stop()
        return seen
    with caplog.at_level(logging.CRITICAL, logger="jobrun.master"):
        assert asyncio.run(scenario()) == [("loop", "broken on purpose")]
    [record] = [r for r in caplog.records if r.getMessage() == "service.crashed"]
    assert record.jobrun_fields["service"] == "loop"


def wired(**settings) -> Master:
    """A master wired but not started: its parts exist, no process, no connection (and no
    fork server: a HUP would start one)."""
    settings = {"spawn": "exec", **settings}
    master = Master(Settings(app="tests.apps.taskapp", concurrency=2, metrics_addr="off",
                             **settings), "postgresql://unused")
    master.loop = asyncio.get_running_loop()
    master.done = asyncio.Event()
    master.fast = asyncio.Event()
    master._wire()
    return master


def test_health():
    async def scenario():
        m = wired(poll_interval=0.1)
        assert m.health()["ok"] is False  # no child yet
        m.db.health.last_ok -= 11
        m.db.failed(OSError("connection refused"))
        report = m.health()
        assert report["database_ok"] is False and report["seconds_since_db"] >= 11
        assert report["db_failures"] == 1 and report["db_error"] == "connection refused"
        m.note_db_ok()
        report = m.health()
        assert report["database_ok"] is True and report["db_failures"] == 0
        m.stopping = "drain"
        assert m.health()["stopping"] is True and m.health()["ok"] is False
    asyncio.run(scenario())


def test_handle_signals_directly():
    async def scenario():
        m = wired()
        m.dispatcher.closing = True  # no children are spawned by resizing in this test
        m.handle_ttin()
        assert m.dispatcher.target == 3
        m.handle_ttou()
        m.handle_ttou()
        m.handle_ttou()
        assert m.dispatcher.target == 1  # never below one
        m.reload_settings = lambda: Settings(app="other", concurrency=4, queues=("a", "b"),
                                             lease_ttl=9.0, poll_interval=0.5, metrics_addr="off")
        m.handle_hup()
        assert m.settings.app == "tests.apps.taskapp"  # the app stays
        assert m.dispatcher.target == 4 and m.dispatcher.generation == 1
        assert m.claimer.settings.queues == ("a", "b") and m.claimer.settings.poll_interval == 0.5
        assert m.notifier.queues == {"a", "b"}
        assert m.heartbeater.ttl == 9.0 and m.heartbeater.period == 3.0
        assert m.reaper.interval == 3.0
        assert m.supervisor.alive_interval == 1.0
        m.reload_settings = lambda: (_ for _ in ()).throw(ValueError("bad file"))
        m.handle_hup()  # a bad config keeps the running settings
        assert m.dispatcher.target == 4
        m.handle_term()
        assert m.stopping == "drain"
        m.handle_quit()
        assert m.stopping == "fast" and m.fast.is_set()
        await asyncio.wait_for(m.done.wait(), 30)  # the teardown ran to its end
        assert m.exit_code == 0
    asyncio.run(scenario())


# --- the one list of parts: start, reload and stop -------------------------------------------


class SentToSystemd:
    """Stands in for the notify socket: records what the master would tell systemd."""

    enabled = False
    watchdog_usec = 0

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, **fields) -> bool:
        self.sent.append(fields)
        return True

    def close(self) -> None:
        pass


def test_every_part_of_the_master_is_in_its_one_list():
    """Start-up, reload and teardown walk ``m.parts``; a part missing from it would be left out
    of all three (the scheduler was left out of the hand-kept reload list)."""
    async def scenario():
        m = wired(spawn="fork")
        listed = list(m.parts)
        long_lived = [v for v in vars(m).values()
                      if isinstance(v, (Service, ForkServers))]
        assert m.forkservers is not None and m.scheduler in long_lived
        assert {id(p) for p in long_lived} | {id(m.systemd.watchdog)} == {id(p) for p in listed}
        starts = {e.part.name: e.starts for e in m.parts.entries}
        assert starts["forkservers"] == "first" and starts["dispatcher"] == "boot"
        assert [e.part.name for e in m.parts.entries][-2:] == ["claimer", "watchdog"]
    asyncio.run(scenario())


def test_a_hup_reaches_the_scheduler_and_the_elector():
    async def scenario():
        m = wired()
        assert (m.elector.ttl, m.scheduler.payload_limit) == (10.0, 1024 * 1024)
        m.reload_settings = lambda: Settings(app="tests.apps.taskapp", concurrency=2,
                                             metrics_addr="off", spawn="exec",
                                             schedule_lease_ttl=4.5, max_payload_bytes=1000)
        m.handle_hup()
        assert (m.elector.ttl, m.elector.period) == (4.5, 1.5)
        assert m.scheduler.payload_limit == 1000
    asyncio.run(scenario())


@pytest.mark.parametrize("line,key", [("concurrency = 0", "concurrency"),
                                      ("prefetch = 0", "prefetch"),
                                      ('log_format = "yaml"', "log_format")])
def test_a_hup_with_an_invalid_file_keeps_the_old_settings(tmp_path, caplog, line, key):
    conf = tmp_path / "jobrun.toml"
    conf.write_text(f'app = "tests.apps.taskapp"\nmetrics_addr = "off"\nspawn = "exec"\n{line}\n')

    async def scenario():
        m = wired(prefetch=8)
        m.reload_settings = lambda: config.load({}, environ={"JOBRUN_CONFIG": str(conf)})
        m.systemd.notify = systemd = SentToSystemd()
        before = m.settings
        m.handle_hup()
        assert m.settings is before and m.claimer.settings is before
        assert (m.dispatcher.target, m.dispatcher.generation) == (2, 0)
        assert [f.get("reloading") or f.get("ready") for f in systemd.sent] == [1, 1]
        assert "reload failed (bad configuration)" in systemd.sent[-1]["status"]
        assert m.metrics.reload_failures._value.get() == 1
    with caplog.at_level(logging.ERROR, logger="jobrun.master"):
        asyncio.run(scenario())
    [failed] = [r for r in caplog.records if r.getMessage() == "reload.failed"]
    assert f"{conf}: {key}" in failed.jobrun_fields["error"]


def test_a_hup_keeps_what_is_read_at_start_only(caplog):
    async def scenario():
        m = wired()
        m.reload_settings = lambda: Settings(app="tests.apps.taskapp", concurrency=3,
                                             metrics_addr="127.0.0.1:1", log_format="json",
                                             spawn="exec")
        m.handle_hup()
        assert m.dispatcher.target == 3
        assert (m.settings.metrics_addr, m.settings.log_format) == ("off", "text")
    with caplog.at_level(logging.WARNING, logger="jobrun.master"):
        asyncio.run(scenario())
    [kept] = [r for r in caplog.records if r.getMessage() == "reload.restart_needed"]
    assert kept.jobrun_fields["settings"] == "log_format,metrics_addr"


class _Conn:
    """Stands for a connection the connector just opened (no address)."""


def test_a_new_primary_gives_the_master_a_new_owner_in_every_part(caplog):
    """The owner id changes in one place (Master.change_owner), when the connector reaches
    another primary; every part that writes it (claims, frames, completions, renewals, the
    leader's lease, the registry row) uses the new one from then on, host and pid kept."""
    async def scenario():
        m = wired()
        before = m.owner
        m.db._admitted(_Conn(), "7:00000001")  # the first server: nothing changes
        assert m.owner == before
        m.db._admitted(_Conn(), "7:")  # a replica: not a primary, nothing changes
        assert m.owner == before
        m.db._admitted(_Conn(), "7:00000002")  # promoted: a new timeline
        assert m.owner != before and m.owner.rsplit(":", 1)[0] == before.rsplit(":", 1)[0]
        for part in (m.claimer, m.claimer.handout, m.completer, m.heartbeater, m.elector):
            assert part.owner == m.owner
        assert m.registry_row()["owner"] == m.owner
        assert m.registry.retired == {before}  # the old id's row goes at the next refresh
        frame = m.claimer.handout._frames.frame(
            id=1, token=1, task="t", queue="q", attempt=1, max_attempts=1, priority=0,
            created_at=0.0, key=None, traceparent=None, payload_text="{}")
        assert m.owner.encode() in frame
        again = m.owner
        m.db._admitted(_Conn(), "7:00000002")  # the same primary again: kept
        assert m.owner == again
    caplog.set_level(logging.WARNING)
    asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records].count("master.owner_changed") == 1
