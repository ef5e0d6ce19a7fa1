"""The simulated engine for tests and the demo: the adapter (adapter.py) and the server it launches as a real
process (server.py, standard library only)."""

from __future__ import annotations

from .adapter import SERVER, SimAdapter, SimOptions

__all__ = ["SimAdapter", "SimOptions", "SERVER"]
