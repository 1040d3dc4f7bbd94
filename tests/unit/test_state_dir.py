"""A relative state_dir is found from a subdirectory as git finds .git: the nearest directory
at or above the working directory that holds one, not past a mount boundary."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from jobrun.store.embedded import find_state_dir

pytestmark = pytest.mark.unit

START = Path("/srv/project/src/pkg/deep")
LEVELS = [START, *START.parents]  # deep, pkg, src, project, srv, /


def _find(holding: set[Path], devices: dict[Path, int] | None = None) -> Path:
    devices = devices or {}
    return find_state_dir(".jobrun", START, is_dir=lambda p: p.parent in holding and
                          p.name == ".jobrun", device=lambda p: devices.get(p, 1))


def test_the_nearest_one_above_wins_and_a_fresh_project_gets_its_own():
    assert _find({Path("/srv/project")}) == Path("/srv/project/.jobrun")
    assert _find({Path("/srv/project"), Path("/srv/project/src")}) == Path("/srv/project/src/.jobrun")
    assert _find({START}) == START / ".jobrun"
    assert _find(set()) == START / ".jobrun"


def test_the_walk_stops_at_a_mount_boundary():
    # /srv/project is a mount point: /srv (another device) is not searched.
    devices = {Path("/srv"): 2, Path("/"): 2}
    assert _find({Path("/srv")}, devices) == START / ".jobrun"
    assert _find({Path("/srv"), Path("/srv/project")}, devices) == Path("/srv/project/.jobrun")


def test_an_absolute_state_dir_is_taken_as_given():
    assert find_state_dir(Path("/var/lib/jobrun"), START) == Path("/var/lib/jobrun")


@given(holding=st.sets(st.sampled_from(LEVELS)), mount=st.integers(1, len(LEVELS)))
def test_found_is_the_nearest_holder_on_the_same_device(holding, mount):
    """Directories from index ``mount`` up are on another device."""
    devices = {d: 2 for d in LEVELS[mount:]}
    found = _find(holding, devices)
    reachable = [d for d in LEVELS[:mount] if d in holding]
    assert found == (reachable[0] if reachable else START) / ".jobrun"
