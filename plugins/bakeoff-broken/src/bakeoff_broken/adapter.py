"""Fails on import, as a plugin with a missing dependency does: the registry must report it, not crash."""

from __future__ import annotations

import bakeoff_broken_missing_dependency  # noqa: F401  # deliberately not installable

from bakeoff.core import EngineAdapter


class BrokenAdapter(EngineAdapter):  # never reached
    name = "broken"
