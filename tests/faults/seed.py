"""The seeded fault scheduler: every fault kind, victim and moment comes from one
``random.Random(seed)``, so ``JOBRUN_FAULT_SEED=<seed>`` replays a run's choices.

    faults = Faults.from_environment("sigkill")    # prints the seed
    with faults:                                   # any failure inside names the seed
        kind = faults.pick(["child", "master"])
        faults.count(kind)

Processes are scheduled by the OS and pids differ between runs, so a replay repeats the
sequence of decisions (which kind, which index among the sorted candidates, which delay), not
the exact interleaving with the master.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter


def fault_seed() -> int:
    """``JOBRUN_FAULT_SEED`` when set, else a fresh random seed."""
    text = os.environ.get("JOBRUN_FAULT_SEED")
    return int(text) if text else random.SystemRandom().randrange(2**32)


class Faults:
    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.seed = seed
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.log: list[str] = []
        self.enqueued: list[int] = []  # ids of the jobs the run enqueued, for the checker
        self._t0 = time.monotonic()

    @classmethod
    def from_environment(cls, name: str) -> "Faults":
        faults = cls(name, fault_seed())
        print(f"[{name}] {faults.replay_hint()}", flush=True)
        return faults

    def replay_hint(self) -> str:
        return f"JOBRUN_FAULT_SEED={self.seed}"

    def explain(self, message: str = "") -> str:
        """A failure message that names the seed and the faults injected so far."""
        done = ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items())) or "none"
        tail = "\n  ".join(self.log[-15:])
        return (f"{message}\n[{self.name}] replay with {self.replay_hint()}; faults: {done}"
                f"\n  {tail}")

    # --- decisions ------------------------------------------------------------------------

    def pick(self, options):
        """One of ``options`` (sorted first, so a replay picks the same index)."""
        return self.rng.choice(sorted(options))

    def pick_by(self, options, key):
        """One of ``options``, sorted by ``key`` first (for objects that do not sort)."""
        return self.rng.choice(sorted(options, key=key))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def uniform(self, a: float, b: float) -> float:
        return self.rng.uniform(a, b)

    def pause(self, a: float, b: float) -> None:
        """Wait a random moment before the next fault: the point in time the fault lands at,
        drawn from the seed (not synchronisation: callers wait on conditions for that)."""
        time.sleep(self.rng.uniform(a, b))

    def count(self, kind: str, detail: str = "") -> None:
        self.counts[kind] += 1
        self.log.append(f"{time.monotonic() - self._t0:7.2f}s {kind} {detail}".rstrip())

    # --- failures name the seed -----------------------------------------------------------

    def __enter__(self) -> "Faults":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            exc.add_note(self.explain())
