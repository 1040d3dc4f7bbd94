"""Settings: defaults < config file < JOBRUN_* environment < flags, the table that checks
every value, and password redaction."""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jobrun import config
from jobrun.errors import InvalidInput
from jobrun.redact import redact
from tests.profiles import examples


@pytest.fixture(autouse=True)
def no_stray_config(tmp_path, monkeypatch):
    """Run from an empty directory so no ./jobrun.toml is picked up by accident."""
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "jobrun.toml").exists()


def write(path, text: str):
    path.write_text(text)
    return str(path)


def test_defaults_without_any_source():
    s = config.load({}, environ={})
    assert s == config.Settings()
    assert s.schema == "jobrun"
    assert s.queues == ("default",)
    assert s.database_url is None
    assert s.concurrency >= 1


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path):
    path = write(tmp_path / "cfg.toml", """
schema = "from_file"
grace = "2m"
queues = ["a", "b"]
lease_ttl = 45
log_level = "debug"
""")
    env = {"JOBRUN_CONFIG": path, "JOBRUN_SCHEMA": "from_env", "JOBRUN_GRACE": "90s"}
    flags = {"schema": "from_flag", "queues": None}  # None: flag not given

    s = config.load(flags, environ=env)
    assert s.schema == "from_flag"          # flag beats env and file
    assert s.grace == 90.0                  # env beats file
    assert s.queues == ("a", "b")           # file beats default (the None flag is ignored)
    assert s.lease_ttl == 45.0              # file only
    assert s.log_level == "debug"
    assert s.poll_interval == config.Settings().poll_interval  # default

    # Remove layers one by one: each time the next one down shows through.
    assert config.load({}, environ=env).schema == "from_env"
    assert config.load({}, environ={"JOBRUN_CONFIG": path}).schema == "from_file"
    assert config.load({}, environ={}).schema == "jobrun"


def test_empty_environment_value_is_ignored(tmp_path):
    path = write(tmp_path / "cfg.toml", 'schema = "from_file"\n')
    s = config.load({}, environ={"JOBRUN_CONFIG": path, "JOBRUN_SCHEMA": ""})
    assert s.schema == "from_file"


def test_local_jobrun_toml_is_found(tmp_path):
    write(tmp_path / "jobrun.toml", 'schema = "local_file"\n')
    assert config.load({}, environ={}).schema == "local_file"
    other = write(tmp_path / "other.toml", 'schema = "explicit"\n')
    assert config.load({}, environ={"JOBRUN_CONFIG": other}).schema == "explicit"


def test_env_values_are_coerced():
    s = config.load({}, environ={
        "JOBRUN_CONCURRENCY": "7", "JOBRUN_QUEUES": "emails, default ,reports",
        "JOBRUN_METRICS_ALLOW_REMOTE": "yes", "JOBRUN_RETENTION": "1d",
        "JOBRUN_MAX_PAYLOAD_BYTES": "2048",
    })
    assert s.concurrency == 7
    assert s.queues == ("emails", "default", "reports")
    assert s.metrics_allow_remote is True
    assert s.retention == 86400.0
    assert s.max_payload_bytes == 2048


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = write(tmp_path / "bad.toml", 'schema = "ok"\nconcurency = 4\n')
    with pytest.raises(InvalidInput) as info:
        config.load({}, environ={"JOBRUN_CONFIG": path})
    assert path in str(info.value)
    assert "concurency" in str(info.value)
    assert "unknown setting" in str(info.value)


def test_bad_value_in_file_names_the_file_and_the_setting(tmp_path):
    path = write(tmp_path / "bad.toml", 'grace = "soon"\n')
    with pytest.raises(InvalidInput) as info:
        config.load({}, environ={"JOBRUN_CONFIG": path})
    assert path in str(info.value)
    assert "soon" in str(info.value)


def test_unparsable_file_names_the_file(tmp_path):
    path = write(tmp_path / "broken.toml", "schema = \n")
    with pytest.raises(InvalidInput, match="cannot read config file") as info:
        config.load({}, environ={"JOBRUN_CONFIG": path})
    assert path in str(info.value)


def test_jobrun_config_naming_a_missing_file_is_an_error(tmp_path):
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(InvalidInput, match="JOBRUN_CONFIG") as info:
        config.load({}, environ={"JOBRUN_CONFIG": missing})
    assert missing in str(info.value)


@pytest.mark.parametrize("env,fragment", [
    ({"JOBRUN_CONCURRENCY": "-1"}, "JOBRUN_CONCURRENCY"),
    ({"JOBRUN_CONCURRENCY": "many"}, "JOBRUN_CONCURRENCY"),
    ({"JOBRUN_METRICS_ALLOW_REMOTE": "perhaps"}, "JOBRUN_METRICS_ALLOW_REMOTE"),
    ({"JOBRUN_SCHEMA": "Bad-Schema"}, "JOBRUN_SCHEMA"),
    ({"JOBRUN_QUEUES": " , "}, "JOBRUN_QUEUES"),
    ({"JOBRUN_QUEUES": "ok,bad queue"}, "JOBRUN_QUEUES"),
    ({"JOBRUN_POLL_INTERVAL": "-5s"}, "JOBRUN_POLL_INTERVAL"),
])
def test_bad_environment_values_name_their_source(env, fragment):
    with pytest.raises(InvalidInput) as info:
        config.load({}, environ=env)
    assert fragment in str(info.value)


def test_bool_is_not_an_integer_setting(tmp_path):
    path = write(tmp_path / "cfg.toml", "concurrency = true\n")
    with pytest.raises(InvalidInput, match="concurrency"):
        config.load({}, environ={"JOBRUN_CONFIG": path})


def test_bad_flag_names_the_flag():
    with pytest.raises(InvalidInput, match="--max-payload-bytes"):
        config.load({"max_payload_bytes": "lots"}, environ={})


# --- redact --------------------------------------------------------------------------------


def test_redact_url_and_keyword_dsns():
    assert redact("postgresql://bob:hunter2@db.example:6543/app") == "db.example:6543/app"
    assert redact("host=db.example port=6543 dbname=app user=bob password=hunter2") == \
        "db.example:6543/app"
    assert redact("postgresql://bob@/app?host=/run/pg&password=hunter2") == "/run/pg:5432/app"
    assert redact("this is not a dsn ' password=hunter2") == "<unparsable database URL>"


passwords = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=4,
                    max_size=30)
hosts = st.sampled_from(["127.0.0.1", "db.example.com", "localhost", "[::1]", "/tmp/sock"])


@given(passwords, hosts, st.integers(min_value=1, max_value=65535),
       st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))
def test_redact_never_shows_the_password_in_urls(password, host, port, dbname):
    expected_visible = f"{host.strip('[]')}:{port}/{dbname}"
    assume(password not in expected_visible and quote(password, safe="") not in expected_visible)
    if host.startswith("/"):
        url = f"postgresql://bob:{quote(password, safe='')}@/{dbname}?host={quote(host)}&port={port}"
    else:
        url = f"postgresql://bob:{quote(password, safe='')}@{host}:{port}/{dbname}"
    shown = redact(url)
    assert password not in shown
    assert quote(password, safe="") not in shown
    assert shown == expected_visible


@given(passwords, st.integers(min_value=1, max_value=65535))
def test_redact_never_shows_the_password_in_keyword_dsns(password, port):
    escaped = password.replace("\\", "\\\\").replace("'", "\\'")
    dsn = f"host=db.internal port={port} dbname=app user=bob password='{escaped}'"
    shown = redact(dsn)
    assume(password not in f"db.internal:{port}/app")
    assert password not in shown
    assert shown == f"db.internal:{port}/app"


# --- the table: every value checked by its line, from every source -------------------------


REFUSED = [("concurrency", 0, "at least 1"), ("prefetch", 0, "at least 1"),
           ("log_format", "yaml", "text, json"), ("retention", "40000d", "at most 100 years"),
           ("slots", 0, "at least 1"), ("slots", 1001, "at most 1000 jobs in one child")]


@pytest.mark.parametrize("name,value,says", REFUSED)
def test_a_value_out_of_its_bounds_is_refused_from_every_source(tmp_path, name, value, says):
    """These three were taken by ``load`` (only the command line's own checks stopped them at
    start, and nothing at a SIGHUP, which reads settings through ``load``)."""
    path = write(tmp_path / "cfg.toml", f"{name} = {value!r}\n".replace("'", '"'))
    env_name = "JOBRUN_" + name.upper()
    flag = "--" + name.replace("_", "-")
    for kwargs, where in ((dict(environ={"JOBRUN_CONFIG": path}), f"{path}: {name}"),
                          (dict(environ={env_name: str(value)}), env_name),
                          (dict(overrides={name: value}, environ={}), flag)):
        with pytest.raises(InvalidInput) as info:
            config.load(**kwargs)
        assert where in str(info.value) and says in str(info.value)


def test_the_table_names_every_setting_once_with_a_rule():
    names = [f.name for f in dataclasses.fields(config.Settings)]
    assert list(config.RULES) == names
    start_only = {n for n, rule in config.RULES.items() if not rule.reload}
    assert start_only == {"database_url", "schema", "state_dir", "pooled", "app", "spawn",
                          "metrics_addr", "metrics_allow_remote", "log_format", "log_level",
                          "web_allow_origins"}


def test_web_origins_are_exact_and_never_every_origin():
    environ = {"JOBRUN_WEB_ALLOW_ORIGINS": "https://a.example, http://b.example:8080"}
    assert config.load(environ=environ).web_allow_origins == ("https://a.example",
                                                              "http://b.example:8080")
    for bad, says in (("*", "'*' (every origin) is refused"),
                      ("https://a.example/", "scheme://host[:port]"),
                      ("a.example", "scheme://host[:port]")):
        with pytest.raises(InvalidInput) as info:
            config.load(environ={"JOBRUN_WEB_ALLOW_ORIGINS": f"https://ok.example {bad}"})
        assert "JOBRUN_WEB_ALLOW_ORIGINS" in str(info.value) and says in str(info.value)


def test_a_reload_keeps_what_is_read_at_start_only():
    running = config.Settings(app="a", concurrency=2, log_format="text", spawn="fork")
    new = config.Settings(app="b", concurrency=5, log_format="json", spawn="fork")
    applied, kept = config.reloaded(running, new)
    assert applied.concurrency == 5
    assert (applied.app, applied.log_format) == ("a", "text")
    assert kept == ["app", "log_format"]
    assert config.reloaded(running, running) == (running, [])


toml_values = st.one_of(st.integers(-3, 3), st.sampled_from(
    ['"text"', '"json"', '"yaml"', '"JSON"', '"debug"', '"loud"', '"fork"', '"exec"', '"spawn"',
     '"30s"', '"soon"', '"-1"', 'true', '"global"', '"round_robin"', '"sideways"', '1.5']))
keys = st.sampled_from(["concurrency", "prefetch", "log_format", "log_level", "spawn",
                        "queue_order", "grace", "max_tasks_per_child", "pooled"])


@settings(max_examples=examples(60), deadline=None)
@given(lines=st.dictionaries(keys, toml_values.map(str), max_size=3))
def test_config_check_agrees_with_what_a_master_loads(tmp_path_factory, lines):
    """`jobrun config check` passes a file exactly when a master takes it, at start and at a
    SIGHUP (both read it through ``load``): one table decides for all three."""
    from jobrun.admin.config_report import check_file

    path = tmp_path_factory.mktemp("cfg") / "jobrun.toml"
    path.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
    problems = check_file(path)
    try:
        config.load({}, environ={"JOBRUN_CONFIG": str(path)})
        loaded = True
    except InvalidInput:
        loaded = False
    assert loaded == (problems == []), problems
