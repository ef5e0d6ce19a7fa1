"""Values an adapter reads from an engine, validated where they enter.

An engine is a foreign process: ``/props`` may be a JSON list, ``/slots`` may be ``[5]``, a count may be
``"n/a"``, a Prometheus label may be ``position="x"``. Every such value passes through one of these helpers,
which return None (a missing figure) and record why in the sample's flags or the arm's mismatches, so a
lying engine costs one figure, never the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..results.flags import BAD_ENGINE_VALUE
from .client import SETUP_TIMEOUT_S, bounded_get
from .metrics import MetricKey, delta

__all__ = ["engine_count", "engine_rate", "engine_text", "engine_object", "get_json", "counter_delta",
           "position_deltas", "LogReader", "EngineLog", "LATE_LOG_WAIT_S"]

MAX_COUNT = 2 ** 53  # beyond this a "count" is garbage (and would not fit SQLite's INTEGER)
LATE_LOG_WAIT_S = 1.0  # how long to poll an engine log for a per-request line written after the stream ended

LogReader = Callable[[], str]  # returns what the engine log gained since the last call


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def engine_count(value: Any, where: str, flags: list[str]) -> int | None:
    """A token or step count from the engine: a non-negative integer, else None and a flag naming ``where``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_COUNT:
        flags.append(BAD_ENGINE_VALUE.line(f"{where} is {_shown(value)}, not a count"))
        return None
    return value


def engine_rate(value: Any, where: str, flags: list[str]) -> float | None:
    """A rate or duration from the engine: a finite non-negative number, else None and a flag."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        flags.append(BAD_ENGINE_VALUE.line(f"{where} is {_shown(value)}, not a rate"))
        return None
    return float(value)


def engine_text(value: Any) -> str | None:
    """A string the engine reports (a version, a path), or None for anything else."""
    return value if isinstance(value, str) else None


def engine_object(value: Any) -> dict[str, Any]:
    """A JSON object the engine reports (``usage``, ``metrics``, settings), or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def counter_delta(before: dict[MetricKey, float] | None, after: dict[MetricKey, float] | None, name: str,
                  flags: list[str], **labels: str) -> int | None:
    """A Prometheus counter's increase between two scrapes as a count (None when a scrape or the counter is
    missing); a decrease or a fraction is flagged and dropped."""
    value = delta(before, after, name, **labels)
    if value is None:
        return None
    if value < 0 or not float(value).is_integer() or value >= MAX_COUNT:
        where = name + "".join(f"{{{k}={v!r}}}" for k, v in labels.items())
        flags.append(BAD_ENGINE_VALUE.line(f"/metrics {where} changed by {value:g} over one request"))
        return None
    return int(value)


def position_deltas(before: dict[MetricKey, float] | None, after: dict[MetricKey, float] | None, name: str,
                    flags: list[str]) -> list[int] | None:
    """A per-position counter's increases (``name{position="0"}``, ``"1"``, …), first position first.

    None when a scrape or the counter is missing, a ``position`` label is not a number, the positions
    leave a gap, or one delta is not a count (each such value is flagged, never guessed).
    """
    if before is None or after is None:
        return None
    labels = {dict(lbls).get("position") for (sample, lbls) in after if sample == name}
    bad = sorted(str(p) for p in labels if p is None or not p.isdigit())
    if bad:
        flags.append(BAD_ENGINE_VALUE.line(f"/metrics {name} has position label(s) {', '.join(map(repr, bad))}"))
        return None
    positions = sorted(int(p) for p in labels if p is not None)
    if not positions:
        return None
    if positions != list(range(len(positions))):
        flags.append(BAD_ENGINE_VALUE.line(
            f"/metrics {name} positions {positions[:8]} are not 0..{len(positions) - 1}"))
        return None
    deltas = [counter_delta(before, after, name, flags, position=str(p)) for p in positions]
    return None if None in deltas else [int(d or 0) for d in deltas]


def get_json(http: httpx.Client, path: str, kind: type, problems: list[str],
             timeout_s: float = SETUP_TIMEOUT_S) -> Any:
    """``GET path`` as JSON of the expected ``kind`` (dict or list) within one deadline, else None with the
    reason appended to ``problems`` ("GET /slots: expected a JSON list, got int")."""
    try:
        response = bounded_get(http, path, timeout_s)
        response.raise_for_status()
        data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        problems.append(f"could not read {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return None
    if not isinstance(data, kind):
        problems.append(f"GET {path}: expected a JSON {kind.__name__}, got {type(data).__name__}")
        return None
    return data


class EngineLog:
    """The engine's log as core hands it to an adapter: the text written while one request ran (for
    ``server_stats``) or since the engine started (for ``effective_settings``), and a short wait for a line
    the engine writes just after the stream ends.

    Adapters never open log files: core knows where the log is, and whether it belongs to one request.
    """

    def __init__(self, text: str = "", read_new: LogReader | None = None) -> None:
        self._text, self._read_new = text, read_new

    @property
    def followed(self) -> bool:
        """Whether :meth:`wait_for` can wait: False for an attached server (no log) and for concurrent
        streams (one log shared by every stream)."""
        return self._read_new is not None

    def text(self) -> str:
        """Everything handed over so far, lines waited for included (``''``: attached, or nothing logged)."""
        return self._text

    def wait_for(self, needle: str | Callable[[str], bool], timeout_s: float = LATE_LOG_WAIT_S,
                 interval_s: float = 0.02) -> str:
        """Poll the log for up to ``timeout_s`` until ``needle`` is in the text (or ``needle(text)`` holds);
        returns :meth:`text`, with what the log gained. No wait when the log is not followed."""
        found = needle if callable(needle) else (lambda text: needle in text)
        if self._read_new is None or found(self._text):
            return self._text
        deadline = time.monotonic() + timeout_s
        while True:
            self._text += self._read_new()
            if found(self._text) or time.monotonic() >= deadline:
                return self._text
            time.sleep(interval_s)
