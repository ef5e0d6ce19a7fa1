"""ik_llama.cpp for bakeoff, registered as engine ``ikllama`` in the ``bakeoff.engines`` entry-point group."""

from __future__ import annotations

from .adapter import IkLlamaAdapter, IkLlamaOptions

__all__ = ["IkLlamaAdapter", "IkLlamaOptions"]
