"""Prometheus ``/metrics`` scraping and counter deltas, parsed with prometheus_client's text parser.

Engines without per-request acceptance (vLLM, llama.cpp's draft step count) expose cumulative counters;
at concurrency 1 the delta around one request is that request's share.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .client import bounded_get

__all__ = ["parse_metrics", "scrape", "delta", "MetricKey"]

MetricKey = tuple[str, tuple[tuple[str, str], ...]]


def parse_metrics(text: str) -> dict[MetricKey, float]:
    """Every sample in an exposition text, keyed by (sample name, sorted labels)."""
    out: dict[MetricKey, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def scrape(http: httpx.Client, path: str = "/metrics") -> dict[MetricKey, float] | None:
    """The server's metrics now, or None when the endpoint is missing or unreadable."""
    try:
        response = bounded_get(http, path)  # one deadline for the whole answer, not per read
        if response.status_code != 200:
            return None
        return parse_metrics(response.text)
    except (httpx.HTTPError, ValueError, TypeError, AttributeError):  # the parser's answer to garbage text
        return None


def delta(before: dict[MetricKey, float] | None, after: dict[MetricKey, float] | None, name: str,
          **labels: str) -> float | None:
    """after - before for one sample name, summed over series whose labels include ``labels``."""
    if after is None or before is None:
        return None
    total, seen = 0.0, False
    for (sample, lbls), value in after.items():
        if sample != name or not set(labels.items()) <= set(lbls):
            continue
        seen = True
        total += value - before.get((sample, lbls), 0.0)
    return total if seen else None
