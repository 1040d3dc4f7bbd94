"""jobrun/events.py: the rule that names each change of a job (the triggers of migration 0017
apply it in SQL; tests/db/test_job_events.py checks they agree), and the modes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobrun import events
from jobrun.errors import InvalidInput
from jobrun.events import KINDS, MODES, TERMINAL_KINDS, Kind
from jobrun.states import OUTCOMES, STATUSES, TERMINAL, Status, allowed

changes = dict(old=st.sampled_from(STATUSES), new=st.sampled_from(STATUSES),
               outcome=st.one_of(st.none(), st.sampled_from(OUTCOMES)), up=st.booleans(),
               asked=st.booleans(), moved=st.booleans())


def kind(old, new, outcome=None, up=False, asked=False, moved=False):
    return events.kind(old, new, outcome, attempts_up=up, cancel_asked=asked,
                       version_moved=moved)


@given(**changes)
def test_every_status_move_is_an_event_and_its_status_tells_its_end(old, new, outcome, up,
                                                                     asked, moved):
    found = kind(old, new, outcome, up, asked, moved)
    assert found is None or found in KINDS
    if old != new:
        assert found is not None  # a status never moves unrecorded
        assert (found in TERMINAL_KINDS) == (new in TERMINAL)
        assert found == new if new in TERMINAL else True
    elif not (up or asked or moved):
        assert found is None  # a heartbeat, an aging step: nothing to record


@given(outcome=st.one_of(st.none(), st.sampled_from(OUTCOMES)))
def test_a_lease_back_to_queued_is_told_by_its_attempt(outcome):
    assert allowed(Status.LEASED, Status.QUEUED)
    found = kind(Status.LEASED, Status.QUEUED, outcome)
    expected = {None: Kind.GIVEN_BACK, "released": Kind.RELEASED,
                "lease_expired": Kind.REAPED}.get(outcome, Kind.RETRIED)
    assert found == expected


def test_an_insert_a_claim_a_start_a_cancel_and_a_retry_by_hand():
    assert kind(None, Status.QUEUED) == Kind.ENQUEUED
    assert kind(Status.QUEUED, Status.LEASED, up=True) == Kind.CLAIMED
    assert kind(Status.LEASED, Status.LEASED, up=True) == Kind.STARTED
    assert kind(Status.LEASED, Status.LEASED, asked=True, moved=True) == Kind.CANCEL_REQUESTED
    assert kind(Status.QUEUED, Status.QUEUED, moved=True) == Kind.CHANGED
    assert kind(Status.DEAD, Status.QUEUED) == kind(Status.CANCELLED, Status.QUEUED) == Kind.REQUEUED


@given(k=st.sampled_from(KINDS), mode=st.sampled_from(MODES))
def test_each_mode_keeps_what_it_says(k, mode):
    assert events.kept(k, mode) == (mode == "all" or (mode == "terminal" and k in TERMINAL_KINDS))
    assert events.mode_of(events.level(mode)) == mode


def test_no_settings_row_is_the_default_and_a_bad_mode_is_refused():
    assert events.mode_of(None) == events.DEFAULT_MODE == "all"
    with pytest.raises(InvalidInput, match="invalid events mode 'loud': one of none, terminal, all"):
        events.level("loud")
