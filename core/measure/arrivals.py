"""Open-loop load: requests sent at scheduled times, whatever the server is doing.

Closed-loop load (``workload.concurrency``) sends a stream's next request when its last one ends, so a
slow server slows the load down and its queueing never shows. Open-loop load keeps to a schedule drawn
before the point starts (Poisson gaps from a seed, or constant ones: every arm gets the same schedule), and
each request's latency counts from the time it was due, not from when the client got round to sending it
(no coordinated omission). The client's own backlog is that difference (``send_lag_s``), kept per request.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import numpy as np

from ..engine.client import StreamResult, stream_chat

__all__ = ["OpenLoop", "run_open_loop", "schedule"]


def schedule(rate: float, count: int, distribution: Literal["poisson", "constant"], seed: int) -> list[float]:
    """When each of ``count`` requests is due, in seconds after the first (which is due at 0)."""
    if distribution == "constant":
        return [i / rate for i in range(count)]
    # one generator per (seed, rate): the same schedule for every arm and pass at this rate
    rng = np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, int(rate * 1e6)]))
    gaps = rng.exponential(1.0 / rate, size=max(count - 1, 0))
    return [0.0, *np.cumsum(gaps).tolist()]


@dataclass
class OpenLoop:
    """One open-loop point: the requests, when each was due, and the point's wall time."""

    run_id: str
    results: list[StreamResult]
    due_ns: list[int]  # perf_counter_ns each request was due
    wall_s: float  # first due time to last stream closed
    most_waiting: int  # the deepest client backlog: requests due but not yet sent (max_in_flight reached)


def run_open_loop(http: httpx.Client, bodies: Sequence[dict[str, Any]], offsets: Sequence[float], timeout_s: float,
                  chunk_count: Callable[[dict[str, Any]], object] | None = None,
                  max_in_flight: int | None = None,
                  stop: Callable[[int, float], bool] | None = None) -> OpenLoop:
    """Send ``bodies[i]`` at ``offsets[i]`` seconds after the start, each on its own thread.

    The dispatcher sleeps until a request is due and starts its thread; with ``max_in_flight`` it first waits
    for a free place, so a saturated client sends late, and the lateness is the request's own (``due_ns``).
    ``stop`` is asked before each send with the requests in flight and the seconds since the first was due;
    once it says True the rest are not sent and each becomes an error result (``not sent: ...``).
    """
    n = len(bodies)
    results: list[StreamResult | None] = [None] * n
    places = threading.BoundedSemaphore(max_in_flight) if max_in_flight else None
    t0 = time.perf_counter_ns() + 5_000_000  # a moment to start the first thread on time
    due = [t0 + int(o * 1e9) for o in offsets]
    waiting_most = 0

    def one(i: int) -> None:
        try:
            results[i] = stream_chat(http, bodies[i], timeout_s, chunk_count) if chunk_count \
                else stream_chat(http, bodies[i], timeout_s)
        except Exception as exc:  # a failed request is a sample, never a lost point
            now = time.perf_counter_ns()
            results[i] = StreamResult(t_send_ns=now, t_done_ns=now,
                                      error=f"stream failed: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            with lock:
                in_flight[0] -= 1
            if places is not None:
                places.release()

    threads = []
    in_flight = [0]
    lock = threading.Lock()
    cut_at: int | None = None
    for i in range(n):
        wait = due[i] - time.perf_counter_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        if stop is not None and i and stop(in_flight[0], (time.perf_counter_ns() - due[0]) / 1e9):
            cut_at = i
            break
        if places is not None:
            places.acquire()
        now = time.perf_counter_ns()
        waiting_most = max(waiting_most, bisect.bisect_right(due, now) - i)
        with lock:
            in_flight[0] += 1
        t = threading.Thread(target=one, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    cut_ns = time.perf_counter_ns()
    for i in range(cut_at if cut_at is not None else n, n):
        results[i] = StreamResult(t_send_ns=cut_ns, t_done_ns=cut_ns, error="not sent: the schedule was cut "
                                  "(over-saturated: requests in flight growing without bound)")
    done = [r if r is not None else StreamResult(t_send_ns=due[i], t_done_ns=due[i], error="stream thread failed")
            for i, r in enumerate(results)]
    end = max(r.t_done_ns or r.t_send_ns for r in done)
    return OpenLoop(uuid.uuid4().hex[:12], done, due, (end - due[0]) / 1e9 if n else 0.0, waiting_most)
