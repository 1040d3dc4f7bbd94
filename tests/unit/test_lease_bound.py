"""lease_ttl is bounded (config.MAX_LEASE_TTL): the reaper takes a lease ending later than the
bound from now as written by no master, so no master may take one that long."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobrun import config
from jobrun.errors import InvalidInput
from jobrun.worker.reaper import reap_params


@given(st.floats(min_value=0, max_value=config.MAX_LEASE_TTL))
def test_a_lease_ttl_up_to_the_bound_is_read(secs):
    assert config.read("lease_ttl", secs, "lease_ttl") == secs


@pytest.mark.parametrize("value", ["1d1s", "2d", config.MAX_LEASE_TTL + 0.5, "36500d"])
def test_a_longer_lease_ttl_is_refused(value):
    with pytest.raises(InvalidInput, match="a lease lasts at most 1 day"):
        config.load({"lease_ttl": value}, environ={})


def test_the_reaper_is_told_the_bound():
    assert reap_params(10, {})["max_lease"] == config.MAX_LEASE_TTL
