"""``python -m bakeoff``: the same command line as the ``bakeoff`` script."""

from __future__ import annotations

from bakeoff.core.cli import main

if __name__ == "__main__":
    main()
