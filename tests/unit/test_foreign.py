"""jobrun.foreign: the table of other systems' names points only at jobrun's real names, holds
none of them itself, and docs/coming-from.md covers it."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from jobrun import foreign
from jobrun.admin.cli import app as cli_app
from jobrun.web.models import NewJob

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "coming-from.md"


def _cli_options() -> set[str]:
    names: set[str] = set()

    def walk(command) -> None:
        for param in command.params:
            names.update(param.opts)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
    walk(typer.main.get_command(cli_app))
    return names


def test_every_hint_points_at_a_real_field_and_shadows_none():
    job_fields = set(NewJob.model_fields)
    for name, entry in foreign.FOREIGN.items():
        assert name not in job_fields, name
        assert entry.field is None or entry.field in job_fields | {"status"}, (name, entry)
    options = _cli_options()
    for field, option in foreign.OPTIONS.items():
        assert option in options or option.startswith("the "), (field, option)
    clashing = {f"--{n.replace('_', '-')}" for n, e in foreign.FOREIGN.items()
                if e.field in foreign.OPTIONS} & options
    assert not clashing, "a hint would hide a real option"


def _api_names() -> set[str]:
    """Every request body property and query parameter name of the HTTP API."""
    from jobrun import config
    from jobrun.web.app import create_app

    doc = create_app(config.Settings(database_url="postgresql://unused@/x")).openapi()
    names: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("in") == "query":
                names.add(node["name"])
            names.update(node.get("properties", {}))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk({"paths": doc["paths"], "schemas": doc["components"]["schemas"]})
    return names


def test_no_hint_is_the_api_s_own_name():
    names = _api_names()
    assert {"max_attempts", "delay", "run_at", "status"} <= names  # the walk finds them
    assert not set(foreign.FOREIGN) & names


def test_hints():
    assert foreign.hint("max_retries").startswith("use max_attempts (")
    assert foreign.hint("ETA").startswith("use run_at (")
    assert foreign.hint("timeout").startswith("time limits are per task")
    assert foreign.hint("colour") is None
    assert foreign.option_hint(["enqueue", "t", "--countdown=5"]).startswith(
        "no option --countdown: use --delay (")
    assert foreign.option_hint(["health", "--timeout", "3"]) is None  # health's own option
    assert foreign.option_hint(["enqueue", "t", "--", "--eta"]) is None
    assert foreign.option_hint(["enqueue", "t", "--priority", "1"]) is None


def test_the_page_maps_every_name_of_the_table():
    text = DOC.read_text()
    missing = [name for name in foreign.FOREIGN if f"`{name}`" not in text]
    assert not missing
