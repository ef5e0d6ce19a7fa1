"""Quality gates ask for whole (non-streamed) answers: a server whose body never ends, or whose headers
trickle, must not hold the run past the request deadline (found by benchmarks/fault_probes.py f2/R2: an
endless stream attached with the default gates hung ``bakeoff run`` after its last sample)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from hostile_server import HostileServer

from bakeoff.core.measure.gates import GATE_NAMES, run_gates


@pytest.mark.parametrize("mode", ["infinite", "header_trickle"])
def test_gates_end_at_their_deadline_on_an_answer_that_never_completes(mode: str,
                                                                        hostile_server: HostileServer) -> None:
    out: list[dict[str, dict[str, Any]]] = []
    with httpx.Client(base_url=hostile_server.url(mode)) as http:
        start = time.monotonic()
        thread = threading.Thread(target=lambda: out.append(
            run_gates(http, GATE_NAMES, "m", {}, {"include_usage": True}, seed=0, timeout_s=1.0)), daemon=True)
        thread.start()
        thread.join(60)
    assert out, "the gates hung on an answer that never completes"
    assert time.monotonic() - start < 30  # one deadline, then the other gates are not asked (a busy box: slack)
    results = out[0]
    assert set(results) == set(GATE_NAMES)
    assert all(r["passed"] is None and r["detail"].startswith("could not run") for r in results.values()), results


def test_gates_still_read_a_whole_answer() -> None:
    """The bounded request hands the gate the whole body of a normal answer."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": "1234"}}]})
    with httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(answer)) as http:
        results = run_gates(http, ["arithmetic"], "m", {}, {}, seed=0, timeout_s=5.0)
    assert results["arithmetic"]["passed"] is False and "1234" in results["arithmetic"]["answer"], results
