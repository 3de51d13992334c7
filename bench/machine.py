"""How fast this machine is right now, printed by every bench beside its figures.

The machine here is a VM whose speed drifts (the same loop took 0.19 s and 0.40 s an hour apart, idle both
times), so a figure means little without the speed it was taken at. Its idle cores also take a while to wake:
a PostgreSQL round trip after 5 ms of idling cost 0.3 ms on one day and 0.65 ms (p90 2 ms) on another, and
every hop of a lookup level or of a request pays it, so that is printed too (`wakeup_line`).
"""

from __future__ import annotations

import os
import socket
import statistics
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


def wakeup(rounds: int = 200, idle_s: float = 0.005) -> list[float]:
    """Microseconds for a byte to go to another process and back over a socket, each after `idle_s` of
    idling: what waking an idle core costs here, twice (the far process's, then this one's)."""
    here, there = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the echo: nothing imported, nothing else running
        here.close()
        while data := there.recv(1):
            there.sendall(data)
        os._exit(0)
    there.close()
    times = []
    try:
        for _ in range(rounds):
            time.sleep(idle_s)
            t0 = time.perf_counter()
            here.sendall(b"x")
            here.recv(1)
            times.append((time.perf_counter() - t0) * 1e6)
    finally:
        here.close()
        os.waitpid(pid, 0)
    return sorted(times)


def wakeup_line() -> str:
    times = wakeup()
    p50, p90 = statistics.median(times), times[int(len(times) * 0.9)]
    return (
        f"machine wake-up: a round trip to another process after 5 ms idle takes p50 {p50:.0f} us, p90"
        f" {p90:.0f} us (the hops of a request or a lookup level pay this)"
    )
