"""Plugin unit tests import each plugin from its source tree, whatever happens to be installed."""

from __future__ import annotations

import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
for src in sorted(PLUGINS.glob("*/src")):
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
