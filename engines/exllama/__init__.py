"""ExLlamaV3 served by TabbyAPI: the adapter (adapter.py)."""

from __future__ import annotations

from .adapter import (
    DRAFT_MODES,
    ExllamaAdapter,
    ExllamaOptions,
    MetricsLine,
    cache_mode,
    parse_metrics_lines,
    tabby_config,
)

__all__ = ["ExllamaAdapter", "ExllamaOptions", "DRAFT_MODES", "MetricsLine", "parse_metrics_lines",
           "tabby_config", "cache_mode"]
