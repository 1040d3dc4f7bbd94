"""Hypothesis example counts that follow the loaded profile (tests/conftest.py loads it).

CI runs hypothesis's own "ci" profile (loaded by hypothesis itself when ``CI`` is set: 100
examples a test, derandomised, no deadline); a local run loads "dev", a fifth of that, so that
``bin/test -m unit`` answers in seconds. A test that needs more examples than the profile's
says so through :func:`examples`, which keeps the count under "ci" and scales it with any
other profile:

    @settings(max_examples=examples(300), deadline=None)

A plain ``max_examples=300`` would run 300 everywhere: the local profile could not shrink it.
"""

from __future__ import annotations

from hypothesis import settings

CI_EXAMPLES = 100  # max_examples of hypothesis's "default" and "ci" profiles
DEV_EXAMPLES = 20


def examples(n: int) -> int:
    """``n`` examples under the "ci" profile; as many fewer under a smaller one (at least 1)."""
    return max(1, n * settings.default.max_examples // CI_EXAMPLES)
