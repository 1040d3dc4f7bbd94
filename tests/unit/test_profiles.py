"""The hypothesis profiles: CI runs every count a test asks for, a local run a fifth of it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.profiles import CI_EXAMPLES, DEV_EXAMPLES, examples


@pytest.fixture
def profile():
    """Load a profile for one test; the one loaded before comes back afterwards."""
    before = settings.get_current_profile_name()
    yield settings.load_profile
    settings.load_profile(before)


def test_ci_keeps_the_counts_tests_ask_for(profile):
    assert settings.get_profile("ci").max_examples == CI_EXAMPLES  # hypothesis's own, unchanged
    profile("ci")
    assert [examples(n) for n in (1, 15, 40, 300)] == [1, 15, 40, 300]


def test_dev_runs_a_fifth_and_at_least_one(profile):
    profile("dev")
    assert settings.default.max_examples == DEV_EXAMPLES < CI_EXAMPLES
    assert [examples(n) for n in (1, 15, 40, 300)] == [1, 3, 8, 60]


def test_this_run_loaded_ci_on_ci_and_dev_elsewhere(request):
    if request.config.getoption("--hypothesis-profile"):
        pytest.skip("a profile was chosen on the command line")
    assert settings.get_current_profile_name() == ("ci" if "CI" in os.environ else "dev")


def _literal_counts(path: Path) -> list[str]:
    """``settings(..., max_examples=<a number>)`` calls in one file."""
    text = path.read_text()
    if "max_examples" not in text:
        return []
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "settings", "register_profile"):
            found += [f"{path.name}:{node.lineno}" for k in node.keywords
                      if k.arg == "max_examples" and isinstance(k.value, ast.Constant)]
    return found


def test_every_count_a_test_sets_goes_through_examples(tmp_path):
    """A literal ``max_examples=300`` would run 300 in every profile: local runs could not
    shrink it. Only tests/profiles.py's ``examples(n)`` keeps CI's count and scales the rest."""
    tests = Path(__file__).resolve().parents[1]
    assert [hit for path in sorted(tests.rglob("test_*.py")) for hit in _literal_counts(path)] == []
    bare = tmp_path / "test_bare.py"
    bare.write_text("@settings(max_examples=300, deadline=None)\ndef test_x(): pass\n")
    assert _literal_counts(bare) == ["test_bare.py:1"]  # the check can fail
