"""Lease timing: deadlines, and the intervals the master's parts derive from the lease TTL.

A lease of TTL seconds is renewed every TTL/3 (the heartbeat period); children report
"alive" several times a period so a silent one is noticed before its lease must be renewed.
"""

from __future__ import annotations


def lease_deadline(last_renewal: float, ttl: float, period: float) -> float:
    """Monotonic time by which a lease must have been renewed again or be fenced.

    The database lets the lease lapse at (renewal time + ttl) on its own clock; fencing one
    heartbeat period earlier leaves room for clock drift and a slow statement.
    """
    return last_renewal + ttl - period


def retry_wait(period: float, now: float, due: float) -> float:
    """Seconds until the next try after a renewal that failed, ``due`` being the first lease's
    deadline. A full period would reach that deadline with no time left to renew (a renewal is
    due a period after the last, the deadline two after it); half the time left lets a second
    try still fit, and a third after it. At least 50 ms, at most a period."""
    return max(0.05, min(period, (due - now) / 2))


def heartbeat_period(ttl: float) -> float:
    return ttl / 3.0


def fence_grace(ttl: float) -> float:
    """How long a fenced (or timed-out) job is given to stop before its child is killed: a
    heartbeat period, at most 5 s."""
    return min(5.0, heartbeat_period(ttl))


def alive_interval(ttl: float) -> float:
    """How often a busy child reports itself alive: within one heartbeat period, often."""
    return max(0.05, min(1.0, ttl / 9))


def tick_interval(ttl: float) -> float:
    """How often the event loop stamps its liveness (read by the heartbeater thread)."""
    return max(0.01, min(0.25, ttl / 12))


def reap_interval(ttl: float) -> float:
    """How often the reaper looks for expired leases."""
    return max(0.5, min(5.0, ttl / 3))


def database_reached(seconds_since: float, poll_interval: float) -> bool:
    """Whether the last good database round trip is recent enough for /healthz."""
    return seconds_since < max(10.0, 5 * poll_interval)
