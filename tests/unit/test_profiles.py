"""The hypothesis profiles: CI runs every count a test asks for, a local run a fifth of it."""

from __future__ import annotations

import os

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
