"""jobrun web's connection cap, derived from the descriptor limit (jobrun.web.connections)."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from jobrun.web.connections import LOG_EVERY, RESERVED_FDS, Admission, Limits


@given(st.integers(min_value=RESERVED_FDS + 32, max_value=1 << 20))
def test_the_cap_and_its_margin_leave_the_reserve(nofile):
    limits = Limits.for_descriptors(nofile)
    assert limits.max_connections >= 1 and limits.overflow >= 4
    assert limits.max_connections + limits.overflow + RESERVED_FDS <= nofile
    # Most of what is left is the cap.
    assert limits.max_connections >= (nofile - RESERVED_FDS) * 3 // 4


@given(st.integers(min_value=RESERVED_FDS + 32, max_value=1 << 20),
       st.integers(min_value=1, max_value=1 << 21))
def test_a_given_maximum_only_lowers_the_cap(nofile, wanted):
    derived = Limits.for_descriptors(nofile)
    limits = Limits.for_descriptors(nofile, max_connections=wanted)
    assert limits.max_connections == min(wanted, derived.max_connections)
    assert limits.overflow == derived.overflow


def test_refusals_are_logged_once_per_interval(caplog):
    now = [100.0]
    admission = Admission(Limits(max_connections=2), clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="jobrun.web.connections"):
        assert not admission.over_cap(2)
        assert admission.over_cap(3) and admission.over_cap(4)
        now[0] += LOG_EVERY
        assert admission.over_cap(3)
    lines = [r for r in caplog.records if r.getMessage() == "web.connections_capped"]
    assert [r.jobrun_fields["refused"] for r in lines] == [1, 2]
