"""Helpers of the seeded fault-injection suite (tests/acceptance/test_faults.py and the soak).

``seed``: the seeded scheduler (``JOBRUN_FAULT_SEED`` replays a run); ``backends``: the
master's and children's connections told apart in pg_stat_activity; ``proxy``: a TCP proxy
that can go half-open; ``load``: the tables, jobs and masters of a run, and restarting a
private cluster; ``actions``: the faults that take a while to play out, for the soak.
"""
