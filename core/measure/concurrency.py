"""Concurrency sweeps: N streams at once, per-stream speed and aggregate throughput.

A server that decodes 4 streams at 30 tok/s each is not "30 tok/s" and not "120 tok/s" for every
purpose, so both are reported: the median of each stream's own decode rate (DESIGN.md's definition),
and aggregate throughput = all generated tokens of the batch / wall time from the first request sent
to the last stream closed, prefill included.

N only means N if the engine can run N sequences at once: llama.cpp pins ``-np`` (bakeoff uses 1 unless
told), vLLM has ``--max-num-seqs``. A level above what the engine reports is refused, not run queued.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from ..config.schema import Arm
from ..engine.client import StreamResult, stream_chat
from ..engine.effective import Effective

__all__ = ["Batch", "run_batch", "run_replays", "effective_slots", "refused_levels"]


@dataclass
class Batch:
    """N streams sent together."""

    batch_id: str
    results: list[StreamResult]
    wall_s: float  # first t_send to last t_done, perf_counter_ns

    @property
    def tokens(self) -> int:
        return sum((r.usage or {}).get("completion_tokens") or 0 for r in self.results)

    @property
    def aggregate_tps(self) -> float | None:
        return self.tokens / self.wall_s if self.wall_s > 0 else None


def run_batch(http: httpx.Client, bodies: list[dict[str, Any]], timeout_s: float,
              chunk_count: Callable[[dict[str, Any]], object] | None = None) -> Batch:
    """Send every body at once, each on its own thread (and pooled connection); wait for all.

    Streams are released together by a barrier, so the batch measures N requests in flight, not N
    requests started one thread start-up apart. httpx's connection pool is shared safely by threads.
    """
    return run_replays(http, [[body] for body in bodies], timeout_s, chunk_count)


def run_replays(http: httpx.Client, replays: list[list[dict[str, Any]]], timeout_s: float,
                chunk_count: Callable[[dict[str, Any]], object] | None = None) -> Batch:
    """Every replay at once, each on its own thread, its bodies sent one after another (the next as soon as
    the last closed: an agent with no think time); ``results`` replay by replay, each replay's in order. A
    batch is N replays of one body. The threads are released together by a barrier, as a batch's are."""
    results: list[list[StreamResult]] = [[] for _ in replays]
    barrier = threading.Barrier(len(replays))

    def one(i: int) -> None:
        barrier.wait()
        for body in replays[i]:
            t_send = time.perf_counter_ns()
            try:
                results[i].append(stream_chat(http, body, timeout_s, chunk_count) if chunk_count
                                  else stream_chat(http, body, timeout_s))
            except Exception as exc:
                results[i].append(StreamResult(t_send_ns=t_send, t_done_ns=time.perf_counter_ns(),
                                               error=f"stream failed: {type(exc).__name__}: {str(exc)[:300]}"))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(replays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done: list[StreamResult] = []
    for got, bodies in zip(results, replays, strict=True):  # a thread that died leaves its turns unanswered
        done += got + [StreamResult(t_send_ns=time.perf_counter_ns(), error="stream thread failed")
                       for _ in bodies[len(got):]]
    start = min(r.t_send_ns for r in done)
    end = max(r.t_done_ns or r.t_send_ns for r in done)
    return Batch(uuid.uuid4().hex[:12], done, (end - start) / 1e9)


def effective_slots(eff: Effective, arm: Arm) -> int | None:
    """Sequences the engine runs at once: what it reports, else the arm's ``settings.parallel``."""
    return eff.slots if eff.slots and eff.slots > 0 else arm.settings.parallel


def refused_levels(levels: Iterable[int], slots: int | None) -> dict[int, str]:
    """Levels above the engine's slots, with the reason."""
    if slots is None:
        return {}
    return {n: f"concurrency {n} > the engine's {slots} slot(s); raise settings.parallel"
            for n in levels if n > slots}


