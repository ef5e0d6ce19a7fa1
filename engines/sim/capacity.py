"""The sim's planted capacity model: how long the first token takes with N requests in flight.

Standard library only (the sim server imports it). TTFT grows by ``ttft_ms_per_stream`` per other request in
flight (a smooth queue), and above ``capacity_streams`` every request's TTFT is multiplied by ``capacity_cliff``
(as an engine out of KV cache that preempts and recomputes). A request under a grammar (``response_format`` or
``tools``) meets the cliff above ``structured_capacity_streams`` instead, where set (constrained decoding costs
each step a mask, so an engine can carry fewer structured streams than plain ones). Two arms with capacities 40
and 46 carry a planted 15 % capacity gap; the capacity search's unit test (tests/unit/run/test_capacity.py)
draws its probes from this same function, with noise, so the gap it must recover is the one the server would show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ttft_s"]


def ttft_s(behaviour: Mapping[str, Any], in_flight: int, grammar: bool = False) -> float:
    """Seconds to the first token with ``in_flight`` chat requests streaming (this one included); ``grammar``: the
    request carries ``response_format`` or ``tools``."""
    base = float(behaviour.get("ttft_ms") or 0.0) / 1000
    per = float(behaviour.get("ttft_ms_per_stream") or 0.0) / 1000
    value = base + per * max(0, in_flight - 1)
    capacity = behaviour.get("capacity_streams")
    if grammar and behaviour.get("structured_capacity_streams") is not None:
        capacity = behaviour["structured_capacity_streams"]
    if capacity is not None and in_flight > int(capacity):
        value *= float(behaviour.get("capacity_cliff") or 1.0)
    return value
