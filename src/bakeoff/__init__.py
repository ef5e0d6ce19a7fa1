"""bakeoff: head-to-head speed of LLM inference engines with speculative decoding, from true token counts.

The Python API (core/api.py), loaded on first use so that ``import bakeoff`` stays cheap::

    import bakeoff
    summary = bakeoff.run("bakeoff.yaml", out="runs")   # runs it, writes the reports, returns the summary
    summary = bakeoff.read_run("runs/20261202-120000-my-run")

The code lives in :mod:`bakeoff.core` (config, protocol, statistics, reports, CLI) and :mod:`bakeoff.engines`
(the built-in adapters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bakeoff.core.api import RunSummary, read_run, run

__all__ = ["RunSummary", "read_run", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from bakeoff.core import api

        return getattr(api, name)
    raise AttributeError(f"module 'bakeoff' has no attribute {name!r}")
