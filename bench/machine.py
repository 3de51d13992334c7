"""How fast this machine is right now, printed by every bench beside its figures.

The machine here is a VM whose speed drifts (the same loop took 0.19 s and 0.40 s an hour apart, idle both
times), so a figure means little without the speed it was taken at.
"""

from __future__ import annotations

import time


def calibrate() -> float:
    """Seconds for a fixed pure-Python loop: lets figures from different machines and hours be compared."""
    t0 = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    return time.perf_counter() - t0


def speed_line() -> str:
    return f"machine speed: a 5M-iteration Python add loop takes {calibrate():.2f} s (compare across runs)"
