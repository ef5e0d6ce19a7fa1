"""core/engine/readback.py's EngineLog: the log core hands an adapter, and the short wait for a late line."""

from __future__ import annotations

import time

from bakeoff.core.engine.readback import EngineLog


def test_text_is_what_the_request_wrote() -> None:
    assert EngineLog("a line\n").text() == "a line\n"
    assert EngineLog().text() == "" and not EngineLog().followed


def test_wait_for_a_late_line_keeps_the_chunk_and_adds_what_arrived() -> None:
    arrivals = iter(["", "partial ", "Metrics (ID: 7)\n"])
    log = EngineLog("chunk\n", lambda: next(arrivals, ""))
    assert log.followed
    assert log.wait_for("Metrics (ID: 7)") == "chunk\npartial Metrics (ID: 7)\n"
    assert log.text().endswith("Metrics (ID: 7)\n")
    assert log.wait_for(lambda t: "chunk" in t) == log.text()  # already there: no read, no wait


def test_no_wait_without_a_followed_log_and_a_bounded_wait_with_one() -> None:
    t0 = time.monotonic()
    assert EngineLog("x").wait_for("never") == "x"  # attached or concurrent: nothing to poll
    assert time.monotonic() - t0 < 0.05
    reads: list[float] = []

    def read_new() -> str:
        reads.append(time.monotonic())
        return ""

    silent = EngineLog("", read_new)
    t0 = time.monotonic()
    assert silent.wait_for("never", timeout_s=0.1) == ""
    assert 0.1 <= time.monotonic() - t0 < 1.0 and len(reads) >= 2
