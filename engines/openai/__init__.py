"""Any already-running OpenAI-compatible server, attached to by URL: the adapter (adapter.py)."""

from __future__ import annotations

from .adapter import OpenAICompatAdapter

__all__ = ["OpenAICompatAdapter"]
