"""Pure policies: no I/O, no clock (callers pass the time and the random source), so each rule
can be tested exhaustively.

    retry     the fate of an attempt: outcomes, backoff, crash cap, attempt overrides
    children  recycling, run-time averages, what a child's exit means
    lease     lease deadlines and the intervals derived from the TTL
    prefetch  claim sizing and which children may hold more than one job
"""

from jobrun.policy.children import (
    MAX_EARLY_DEATHS, BootFailure, boot_failure, run_time_average, should_recycle, start_failing,
)
from jobrun.policy.lease import (
    alive_interval, database_reached, fence_grace, heartbeat_period, lease_deadline, reap_interval, retry_wait,
    tick_interval,
)
from jobrun.policy.retry import (
    CANCELLED, DEFAULT_MAX_CRASHES, DEFAULT_RETRY, FAILED, LEASE_EXPIRED, RELEASED, RETRY,
    SUCCEEDED, TIMEOUT, WORKER_LOST, Fate, RetryPolicy, decide, max_attempts_for, max_crashes_for,
    retry_policies,
)

__all__ = [
    "MAX_EARLY_DEATHS", "BootFailure", "boot_failure", "run_time_average", "should_recycle",
    "start_failing", "alive_interval", "database_reached", "fence_grace", "heartbeat_period", "lease_deadline", "retry_wait",
    "reap_interval", "tick_interval", "CANCELLED", "DEFAULT_MAX_CRASHES", "DEFAULT_RETRY", "FAILED",
    "LEASE_EXPIRED", "RELEASED", "RETRY", "SUCCEEDED", "TIMEOUT", "WORKER_LOST", "Fate",
    "RetryPolicy", "decide", "max_attempts_for", "max_crashes_for", "retry_policies",
]
