"""bakeoff-sglang: the SGLang engine for bakeoff, registered as ``sglang`` in ``bakeoff.engines``.

This module imports nothing, so listing engines stays cheap; the adapter lives in :mod:`.adapter`.
"""

__version__ = "0.1.0"
